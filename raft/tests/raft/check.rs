//! The offline Raft-aware checks (`wal_raft::check`, `walraft-node check/compare`) on logs
//! written by the real store and state machine: agreeing replicas are AGREE and CLEAN; an
//! entry that differs in its command, or only in its log id (the leader that wrote it), is
//! DIVERGENT at that index with walcheck's exit code 4.

use futures_util::stream;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::vote::RaftLeaderIdExt;
use openraft::RaftTypeConfig;
use std::path::{Path, PathBuf};
use wal_raft::check::{check, compare, State};
use wal_raft::{log_options, Entry, LogId, LogStore, Request, StateMachineStore, TypeConfig};

fn lid(term: u64, index: u64) -> LogId {
    LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(term, 1), index)
}

/// A node directory whose log holds `entries` (term, metalake name) at indexes 1.., all
/// applied, with a checkpoint recorded after every other one.
async fn node(dir: &Path, entries: &[(u64, &str)]) -> PathBuf {
    node_purged(dir, entries, 2, None).await
}

/// [`node`] with a checkpoint every `every` entries and, with `snap`, what openraft does when it
/// compacts: a snapshot of the state at index `snap.0`, then the log purged up to `snap.1`
/// (whole sealed 64 KiB segments at or below it removed).
async fn node_purged(dir: &Path, entries: &[(u64, &str)], every: u64, snap: Option<(u64, u64)>) -> PathBuf {
    let es: Vec<Entry> = entries
        .iter()
        .enumerate()
        .map(|(i, (term, name))| {
            let cmd = catalog::Command::Create {
                parent: None,
                kind: catalog::EntityKind::Metalake,
                name: name.to_string(),
                props: vec![],
            };
            Entry::new_normal(lid(*term, i as u64 + 1), Request::command(&cmd, None))
        })
        .collect();
    write_node(dir, &es, every, snap).await
}

/// Writes `es` (from index 1) into a node directory through the real store and state machine
/// (local checkpoints at every claim index, of this node's own state) and, with `snap`, what
/// openraft does when it compacts: a snapshot at index `snap.0`, the log purged up to `snap.1`
/// (whole sealed 64 KiB segments at or below it removed).
async fn write_node(dir: &Path, es: &[Entry], every: u64, snap: Option<(u64, u64)>) -> PathBuf {
    let sm0 = StateMachineStore::open(Some(&dir.join("sm"))).unwrap();
    let (mut log, _) = LogStore::open_verified(dir.join("log"), log_options(64 << 10), &sm0).unwrap();
    let mut sm =
        StateMachineStore::open(Some(&dir.join("sm"))).unwrap().with_checkpoints(log.checkpointer(), every);
    let (tx, rx) = TypeConfig::oneshot();
    log.append(es.to_vec(), IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().unwrap();
    let split = snap.map_or(0, |(s, _)| s as usize);
    sm.apply(stream::iter(es[..split].iter().cloned().map(|e| Ok((e, None))))).await.unwrap();
    if let Some((at, purge)) = snap {
        let mut b = sm.get_snapshot_builder().await;
        let s = openraft::storage::RaftSnapshotBuilder::build_snapshot(&mut b).await.unwrap();
        assert_eq!(s.meta.last_log_id.map(|l| l.index), Some(at));
        log.purge(es[purge as usize - 1].log_id).await.unwrap();
    }
    sm.apply(stream::iter(es[split..].iter().cloned().map(|e| Ok((e, None))))).await.unwrap();
    log.close().unwrap();
    dir.to_path_buf()
}

#[tokio::test]
async fn agreeing_replicas_agree_and_a_different_entry_or_log_id_is_divergent_at_its_index() {
    let d = tempfile::tempdir().unwrap();
    let base = [(1, "a"), (1, "b"), (1, "c"), (1, "d"), (1, "e")];
    let a = node(&d.path().join("a"), &base).await;
    let b = node(&d.path().join("b"), &base).await;
    let ck = check(&a);
    assert!(matches!(ck.state, State::Clean { checkpoints: 2, .. }), "{}", ck.summary());
    assert_eq!(ck.exit_code(), 0);
    assert_eq!(ck.entities, Some(5));
    let c = compare(&[a.clone(), b.clone()]);
    assert_eq!(
        (c.verdict, c.exit_code(), c.common, c.compared),
        ("AGREE", 0, Some((1, 5)), 5),
        "{}",
        c.summary()
    );

    // Another command at index 3.
    let mut other = base;
    other[2] = (1, "x");
    let x = node(&d.path().join("x"), &other).await;
    let c = compare(&[a.clone(), b.clone(), x]);
    assert_eq!((c.verdict, c.exit_code()), ("DIVERGENT", 4), "{}", c.summary());
    assert!(c.why.contains("index 3"), "{}", c.summary());

    // The same commands, but index 4 written by a leader of another term: not the same log.
    let mut other = base;
    other[3] = (2, "d");
    let t = node(&d.path().join("t"), &other).await;
    let c = compare(&[a.clone(), t]);
    assert_eq!((c.verdict, c.exit_code()), ("DIVERGENT", 4), "{}", c.summary());
    assert!(c.why.contains("index 4"), "{}", c.summary());

    // A shorter replica agrees over the common range.
    let s = node(&d.path().join("s"), &base[..3]).await;
    let c = compare(&[a, s]);
    assert_eq!((c.verdict, c.common), ("AGREE", Some((1, 3))), "{}", c.summary());
}

/// `n` metalake names long enough that a few hundred entries fill a 64 KiB segment.
fn long_names(n: u64) -> Vec<String> {
    (1..=n).map(|i| format!("lake-{i:05}-{}", "p".repeat(40))).collect()
}

/// Replicas compacted at different points hold different prefixes of the same log: compared
/// from the common first index, they agree; an entry changed after that start is DIVERGENT at
/// its index.
#[tokio::test]
async fn replicas_purged_at_different_points_agree_and_a_later_difference_is_found() {
    let d = tempfile::tempdir().unwrap();
    let names = long_names(3000);
    let base: Vec<(u64, &str)> = names.iter().map(|n| (1, n.as_str())).collect();
    let a = node_purged(&d.path().join("a"), &base, 50, Some((700, 600))).await;
    let b = node_purged(&d.path().join("b"), &base, 50, Some((1500, 1400))).await;
    let c = node_purged(&d.path().join("c"), &base, 50, Some((2300, 2200))).await;
    // The purges removed different numbers of segments: each log starts elsewhere.
    let firsts: Vec<u64> =
        [&a, &b, &c].iter().map(|n| wal_raft::check::log_ids(n).unwrap()[0].index).collect();
    assert!(firsts[0] < firsts[1] && firsts[1] < firsts[2], "first indexes {firsts:?}");
    for n in [&a, &b, &c] {
        let ck = check(n);
        assert_eq!(ck.exit_code(), 0, "{}", ck.summary());
    }
    let cmp = compare(&[a.clone(), b.clone(), c.clone()]);
    assert_eq!((cmp.verdict, cmp.exit_code()), ("AGREE", 0), "{}", cmp.summary());
    assert_eq!(cmp.common.map(|r| r.1), Some(3000), "{}", cmp.summary());
    let digests: Vec<_> = cmp.nodes.iter().map(|n| n.2.clone()).collect();
    assert!(digests[0].is_some() && digests.windows(2).all(|w| w[0] == w[1]), "{}", cmp.summary());

    // The same history but another command at index 2700, compacted at yet another point.
    let mut other = base.clone();
    other[2699] = (1, "x");
    let x = node_purged(&d.path().join("x"), &other, 50, Some((1100, 1000))).await;
    let cmp = compare(&[a, b, c, x]);
    assert_eq!((cmp.verdict, cmp.exit_code()), ("DIVERGENT", 4), "{}", cmp.summary());
    assert!(cmp.why.contains("index 2700"), "{}", cmp.summary());
}

/// A replica too far behind to compare is not a pass: NOT_COMPARED, walcheck's exit code 8,
/// naming the replica, whether it shares no index with the others or only indexes below a
/// snapshot (then its entries are still compared, and a difference there is DIVERGENT).
#[tokio::test]
async fn a_replica_too_far_behind_to_compare_is_not_compared_with_a_non_zero_code() {
    let d = tempfile::tempdir().unwrap();
    let names = long_names(2000);
    let base: Vec<(u64, &str)> = names.iter().map(|n| (1, n.as_str())).collect();
    let ahead = node_purged(&d.path().join("ahead"), &base, 50, Some((1500, 1400))).await;
    let first = wal_raft::check::log_ids(&ahead).unwrap()[0].index;
    assert!(first > 300, "the purge removed a segment: first index {first}");

    // Ends before the first entry the other still holds.
    let behind = node_purged(&d.path().join("behind"), &base[..300], 50, None).await;
    let cmp = compare(&[ahead.clone(), behind.clone()]);
    assert_eq!((cmp.verdict, cmp.exit_code()), ("NOT_COMPARED", 8), "{}", cmp.summary());
    assert!(cmp.why.contains("ends at index 300"), "{}", cmp.summary());
    assert!(cmp.why.contains(&behind.display().to_string()), "{}", cmp.summary());

    // Shares indexes with it, all below its snapshot: the entries agree, the digests cannot be
    // compared at one index.
    let mid = node_purged(&d.path().join("mid"), &base[..first as usize + 20], 50, None).await;
    let cmp = compare(&[ahead.clone(), mid]);
    assert_eq!((cmp.verdict, cmp.exit_code()), ("NOT_COMPARED", 8), "{}", cmp.summary());
    assert_eq!(cmp.compared, 21, "{}", cmp.summary());
    assert!(cmp.why.contains("snapshot (index 1500)"), "{}", cmp.summary());

    // The same, with a different entry in the shared range: DIVERGENT there.
    let mut other = base[..first as usize + 20].to_vec();
    other[first as usize + 9] = (1, "x");
    let bad = node_purged(&d.path().join("bad"), &other, 50, None).await;
    let cmp = compare(&[ahead, bad]);
    assert_eq!((cmp.verdict, cmp.exit_code()), ("DIVERGENT", 4), "{}", cmp.summary());
    assert!(cmp.why.contains(&format!("index {}", first + 10)), "{}", cmp.summary());
}

/// A purge never passes the snapshot. A log whose first entry is past the snapshot's next
/// index (here: an older snapshot file put back) has entries in neither: `check` and `compare`
/// say so at those indexes instead of replaying a state that skipped them.
#[tokio::test]
async fn a_log_that_starts_past_its_snapshot_is_divergent_with_the_missing_indexes() {
    let d = tempfile::tempdir().unwrap();
    let names = long_names(2000);
    let base: Vec<(u64, &str)> = names.iter().map(|n| (1, n.as_str())).collect();
    let a = node_purged(&d.path().join("a"), &base, 50, Some((1500, 1400))).await;
    let b = node_purged(&d.path().join("b"), &base, 50, Some((1500, 1400))).await;
    let old = node_purged(&d.path().join("old"), &base[..200], 50, Some((100, 1))).await;
    let first = wal_raft::check::log_ids(&a).unwrap()[0].index;
    assert!(first > 101, "first index {first}");
    for f in std::fs::read_dir(old.join("sm")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), a.join("sm").join(f.file_name())).unwrap();
    }
    let ck = check(&a);
    let want = format!("the log starts at index {first}, but the snapshot ends at 100");
    assert!(matches!(&ck.state, State::Divergent(w) if w.contains(&want)), "{}", ck.summary());
    assert_eq!(ck.exit_code(), 4);
    let cmp = compare(&[b, a]);
    assert_eq!((cmp.verdict, cmp.exit_code()), ("DIVERGENT", 4), "{}", cmp.summary());
    assert!(cmp.why.contains(&want), "{}", cmp.summary());
}

/// The entries of a three-voter log (membership at 1), `cmds` commands, and after every claim
/// index (multiples of `every`) the three voters' claims of the digest they had there, as the
/// log holds them: nodes 1 and 2 applied `cmds`, node 3 applied `third` (the same but where a
/// replica diverged). Every replica's log holds these same claims (they are replicated); each
/// replica's own commands are `cmds` or `third`. With `claims` false, no claim entries: the
/// log as it was before claims existed.
fn claimed_log(cmds: &[String], third: &[String], every: u64, claims: bool) -> (Vec<Entry>, Vec<Entry>) {
    use wal_state::Applier;
    let voters: std::collections::BTreeSet<u64> = [1, 2, 3].into();
    let nodes = voters.iter().map(|n| (*n, openraft::BasicNode::new(format!("n{n}")))).collect::<Vec<_>>();
    let membership = wal_raft::Membership::new(
        vec![voters],
        nodes.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
    )
    .unwrap();
    let create = |name: &str| {
        Request::command(
            &catalog::Command::Create {
                parent: None,
                kind: catalog::EntityKind::Metalake,
                name: name.to_string(),
                props: vec![],
            },
            None,
        )
    };
    let mut logs = (Vec::new(), Vec::new());
    let mut states = [
        Applier::new(catalog::Catalog::new(), wal_raft::DEDUPE_WINDOW),
        Applier::new(catalog::Catalog::new(), wal_raft::DEDUPE_WINDOW),
    ];
    logs.0.push(Entry::new_membership(lid(1, 1), membership.clone()));
    logs.1.push(Entry::new_membership(lid(1, 1), membership));
    let mut pending = Vec::new();
    let mut next = 0;
    let mut i = 2u64;
    while next < cmds.len() || !pending.is_empty() {
        if let Some(c) = pending.pop() {
            logs.0.push(Entry::new_normal(lid(1, i), Request::Claim(c)));
            logs.1.push(Entry::new_normal(lid(1, i), Request::Claim(c)));
        } else {
            for (k, (log, cmd)) in
                [(&mut logs.0, &cmds[next]), (&mut logs.1, &third[next])].into_iter().enumerate()
            {
                let r = create(cmd);
                let Request::Command(bytes) = &r else { unreachable!() };
                states[k].apply(wal::Lsn(i), wal::Epoch(0), bytes).unwrap();
                log.push(Entry::new_normal(lid(1, i), r));
            }
            next += 1;
        }
        if claims && i.is_multiple_of(every) {
            // Claimed right after, node 1 first: they land at i+1, i+2, i+3.
            let (good, bad) = (states[0].checkpoint(), states[1].checkpoint());
            pending = vec![
                wal_raft::Claim::new(3, i, &bad),
                wal_raft::Claim::new(2, i, &good),
                wal_raft::Claim::new(1, i, &good),
            ];
        }
        i += 1;
    }
    logs
}

/// Issue 21, finding 3: replicas whose logs differ at an index each replayed CLEAN, because each
/// compared only with its own checkpoints. With the voters' digest claims in the log, the
/// replica that differs is DIVERGENT at the first claim index at or after the difference,
/// naming its digest and the majority's, offline (`check`, the library and the binary) and at
/// its restart (`open_verified`); the healthy ones are CLEAN with the claims verified. Claims at
/// or below a snapshot are not compared; the first one after it still is.
#[tokio::test]
async fn a_replica_whose_log_differs_is_divergent_at_the_first_majority_claim_after_it() {
    const EVERY: u64 = 8;
    let d = tempfile::tempdir().unwrap();
    let cmds: Vec<String> = (0..40).map(|i| format!("lake{i}")).collect();
    let mut third = cmds.clone();
    third[9] = "elsewhere".into();
    let (healthy, diverged) = claimed_log(&cmds, &third, EVERY, true);
    // Where the replicas' logs differ, and the first claim index at or after it.
    let at = healthy.iter().zip(&diverged).find(|(h, x)| h != x).unwrap().0.log_id.index;
    let claim_at = at.div_ceil(EVERY) * EVERY;
    assert!(at > 8 && claim_at > at, "the difference at {at} lies between claim indexes");

    let a = write_node(&d.path().join("a"), &healthy, EVERY, None).await;
    let b = write_node(&d.path().join("b"), &healthy, EVERY, None).await;
    let x = write_node(&d.path().join("x"), &diverged, EVERY, None).await;
    for n in [&a, &b] {
        let ck = check(n);
        assert!(
            matches!(ck.state, State::Clean { claims, checkpoints, .. } if claims > 3 && checkpoints > 3),
            "{}",
            ck.summary()
        );
        assert!(ck.summary().contains("majority digest claims verified through"), "{}", ck.summary());
    }
    let ck = check(&x);
    let State::Divergent(why) = &ck.state else { panic!("{}", ck.summary()) };
    assert_eq!(ck.exit_code(), 4);
    let (mine, theirs) = (ck.digest.clone(), check(&a).digest);
    assert!(why.starts_with(&format!("at index {claim_at}: the replayed digest is ")), "{why}");
    assert!(why.contains("a majority of the voters (nodes 1, 2) claimed"), "{why}");
    assert!(mine != theirs, "the replicas ended with one digest");

    // The binary says the same; the healthy replicas exit 0.
    let bin = env!("CARGO_BIN_EXE_walraft-node");
    let out = std::process::Command::new(bin).arg("check").arg(&x).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains("STATE DIVERGENT") && text.contains(&format!("at index {claim_at}")), "{text}");
    for n in [&a, &b] {
        let out = std::process::Command::new(bin).arg("check").arg(n).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    }

    // A restart is refused the same way: its own checkpoints agree with its log, the claims do not.
    let sm = StateMachineStore::open(Some(&x.join("sm"))).unwrap();
    let (log, v) = LogStore::open_verified(x.join("log"), log_options(64 << 10), &sm).unwrap();
    log.close().unwrap();
    let wal_raft::StateVerdict::Divergent { index, recorded, replayed, why } = &v else { panic!("{v:?}") };
    assert_eq!(*index, claim_at, "{why}");
    assert_ne!(recorded, replayed);
    assert!(matches!(wal_raft::start_role(&v), wal_raft::StartRole::Refused { .. }));

    // What finding 1 saw: the same divergent replica without claims in its log is CLEAN.
    let (_, unclaimed) = claimed_log(&cmds, &third, EVERY, false);
    let y = write_node(&d.path().join("y"), &unclaimed, EVERY, None).await;
    let ck = check(&y);
    assert!(
        matches!(ck.state, State::Clean { claims: 0, checkpoints, .. } if checkpoints > 3),
        "{}",
        ck.summary()
    );

    // Snapshotted past the first claim after the difference (and purged): that claim is not
    // compared, the next one is, and the snapshot's state carries the difference.
    let s = write_node(&d.path().join("s"), &diverged, EVERY, Some((claim_at + 5, claim_at + 4))).await;
    let ck = check(&s);
    let next = claim_at + EVERY;
    assert!(
        matches!(&ck.state, State::Divergent(w) if w.starts_with(&format!("at index {next}:"))),
        "{}",
        ck.summary()
    );
    let h = write_node(&d.path().join("h"), &healthy, EVERY, Some((claim_at + 5, claim_at + 4))).await;
    let ck = check(&h);
    assert!(matches!(ck.state, State::Clean { claims_through: Some(t), .. } if t > next), "{}", ck.summary());
}

/// Claims no replica would write, in a log read offline and at restart: a "majority" of nodes
/// that are not voters, claims for an index at or after their own entry, a claim of another
/// state-machine version. All claim a digest the replay does not reach, and none is counted:
/// the log is CLEAN with no claims verified, not DIVERGENT. Then the real voters' claims, which
/// are.
#[tokio::test]
async fn forged_claims_are_not_counted_offline_or_at_restart() {
    const EVERY: u64 = 8;
    let d = tempfile::tempdir().unwrap();
    let cmds: Vec<String> = (0..12).map(|i| format!("lake{i}")).collect();
    let (mut es, _) = claimed_log(&cmds, &cmds, EVERY, false);
    let mut wrong =
        wal::Checkpoint { digest: [9; 32], entity_count: 99, digest_version: 1, state_machine_version: 1 };
    // Entries are at indexes 1..: the next one's is the log's length plus one.
    let push = |es: &mut Vec<Entry>, c: wal_raft::Claim| {
        es.push(Entry::new_normal(lid(1, es.len() as u64 + 1), Request::Claim(c)));
    };
    // Nodes 4, 5 and 6 agree on a wrong digest at 8: not voters (the membership is 1, 2, 3).
    for n in [4, 5, 6] {
        push(&mut es, wal_raft::Claim::new(n, 8, &wrong));
    }
    // Voters, but for an index at or past their own entry's: no replica claims ahead of itself.
    let own = es.len() as u64 + 1;
    push(&mut es, wal_raft::Claim::new(1, own, &wrong));
    push(&mut es, wal_raft::Claim::new(2, own, &wrong));
    // Voters claiming a wrong digest of another state-machine version: not comparable.
    wrong.state_machine_version += 1;
    push(&mut es, wal_raft::Claim::new(1, 16, &wrong));
    push(&mut es, wal_raft::Claim::new(2, 16, &wrong));
    let x = write_node(&d.path().join("x"), &es, EVERY, None).await;
    let ck = check(&x);
    assert!(matches!(ck.state, State::Clean { claims: 0, .. }), "{}", ck.summary());
    let sm = StateMachineStore::open(Some(&x.join("sm"))).unwrap();
    let (log, v) = LogStore::open_verified(x.join("log"), log_options(64 << 10), &sm).unwrap();
    log.close().unwrap();
    assert!(matches!(v, wal_raft::StateVerdict::Clean { claims: 0, .. }), "{v:?}");

    // The same forged claims then the voters' own, wrong, for index 8: DIVERGENT there.
    wrong.state_machine_version -= 1;
    push(&mut es, wal_raft::Claim::new(1, 8, &wrong));
    push(&mut es, wal_raft::Claim::new(3, 8, &wrong));
    let y = write_node(&d.path().join("y"), &es, EVERY, None).await;
    let ck = check(&y);
    assert!(
        matches!(&ck.state, State::Divergent(w) if w.starts_with("at index 8:") && w.contains("(nodes 1, 3)")),
        "{}",
        ck.summary()
    );
}

/// Plain walcheck (its library: the CRC scan and the catalog replay) on a Raft log says it is
/// one and names the tool that checks it, instead of calling Raft entries foreign to the apply
/// seam (issue 28).
#[tokio::test]
async fn walcheck_on_a_raft_log_names_the_tool_that_checks_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = node(tmp.path(), &[(1, "a"), (1, "b"), (2, "c")]).await;
    let spec = verifier::state::StateMachineSpec {
        name: "catalog",
        fresh: catalog::Catalog::new,
        diff: |_, _, _| Vec::new(),
    };
    let report = verifier::verify_with_state(
        &dir.join("log"),
        false,
        &verifier::state::StateOptions::default(),
        &spec,
        &mut |_| {},
    );
    assert_eq!(report.crc, wal::CrcVerdict::Ok);
    let state = report.state.expect("a state verdict");
    let text = format!("{:?}", state.verdict);
    assert!(text.contains("a Raft log") && text.contains("walraft-node check"), "{text}");
}
