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
    let sm0 = StateMachineStore::open(Some(&dir.join("sm"))).unwrap();
    let (mut log, _) = LogStore::open_verified(dir.join("log"), log_options(64 << 10), &sm0).unwrap();
    let mut sm =
        StateMachineStore::open(Some(&dir.join("sm"))).unwrap().with_checkpoints(log.checkpointer(), every);
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
    let (tx, rx) = TypeConfig::oneshot();
    log.append(es.clone(), IOFlushed::signal(tx)).await.unwrap();
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
