//! Three real `walraft-node` processes on loopback (the binary cargo built), driven through the
//! client API: kill -9 of the leader under load, a partitioned leader, its conflicting suffix
//! truncated on its real log, the catalog's races sent to two nodes at once, and a DIVERGENT
//! node refusing to start. Every wait is bounded; every child is killed when its cluster is
//! dropped (also when an assertion fails). The clusters run one at a time (2 cores).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::wire::WriteReply;
use wal_raft::Response;

use crate::support::{create, created_id, free_ports, Cluster, BIN, WAIT};

/// One cluster at a time: three nodes each on two shared cores is enough.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn create_under(parent: u64, kind: catalog::EntityKind, name: &str) -> catalog::Command {
    catalog::Command::Create {
        parent: Some(catalog::EntityId(parent)),
        kind,
        name: name.into(),
        props: vec![],
    }
}

fn done(w: &WriteReply) -> bool {
    matches!(w, WriteReply::Committed { outcome: Response::Done(_), .. })
}

fn refused(w: &WriteReply) -> Option<&str> {
    match w {
        WriteReply::Committed { outcome: Response::Refused(why), .. } => Some(why),
        _ => None,
    }
}

/// Every node's log agrees with the others offline (Raft-aware compare, library and binary),
/// and each one's state verdict is CLEAN (with checkpoints verified, when `checkpoints`).
fn offline_agreement(c: &Cluster, checkpoints: bool) {
    let dirs: Vec<PathBuf> = (1..=3).map(|i| c.data(i)).collect();
    let cmp = wal_raft::check::compare(&dirs);
    assert_eq!(cmp.verdict, "AGREE", "{}", cmp.summary());
    assert!(cmp.exit_code() <= 1, "{}", cmp.summary());
    let out = Command::new(BIN).arg("compare").args(&dirs).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("AGREE"), "{text}");
    for d in &dirs {
        let ck = wal_raft::check::check(d);
        assert_eq!(ck.state.word(), "CLEAN", "{}", ck.summary());
        assert!(
            !checkpoints
                || matches!(ck.state, wal_raft::check::State::Clean { checkpoints, .. } if checkpoints > 0),
            "{}",
            ck.summary()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_the_leader_under_load_loses_no_acknowledged_write_and_replicas_converge() {
    let _serial = SERIAL.lock().await;
    // Snapshots every 30 entries and only 5 kept below them: the restarted leader may need a
    // snapshot install to catch up (openraft#2116's path, see the README).
    let mut c = Cluster::start(&["--snapshot-every", "30", "--keep-logs", "5"]);
    let (old, old_term) = c.leader(&[1, 2, 3]).await;

    // Two writers, each through a different node first; every Committed reply is recorded.
    let acked = std::sync::Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
    let mut writers = Vec::new();
    for w in 0..2u64 {
        let client = c.client(&[1 + w, 2 + w, 1]);
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            let mut other = Vec::new();
            for i in 0..40 {
                let name = format!("w{w}-{i}");
                let r = client.write(&create(&name)).await;
                match created_id(&r) {
                    Some(id) => acked.lock().unwrap().push((name, id)),
                    None => other.push((name, r)),
                }
            }
            other
        }));
    }
    let t = Instant::now();
    while acked.lock().unwrap().len() < 20 && t.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.kill9(old);
    let at_kill = acked.lock().unwrap().len();
    let mut unacked = Vec::new();
    for w in writers {
        unacked.extend(tokio::time::timeout(Duration::from_secs(60), w).await.unwrap().unwrap());
    }
    let survivors: Vec<u64> = (1..=3).filter(|i| *i != old).collect();
    let (new, new_term) = c.leader(&survivors).await;
    assert!(new != old && new_term > old_term, "leader {new} term {new_term} after {old} term {old_term}");
    // Writes are retried with their request id, so each one ends Committed, except one whose
    // deadline passed (Indeterminate); none may be Rejected after it may have been appended.
    for (name, r) in &unacked {
        assert!(matches!(r, WriteReply::Indeterminate { .. }), "{name}: {r:?}");
    }
    let acked = acked.lock().unwrap().clone();
    // The cluster kept taking writes after the kill (a liveness check, not a rate).
    assert!(acked.len() > at_kill, "nothing acknowledged after the kill: {unacked:?}");

    c.spawn(old);
    let last = c.metrics(new).await.and_then(|m| m.last_log_index).unwrap_or(0);
    let (applied, digest) = c.converged(&[1, 2, 3], last).await;
    eprintln!("converged at index {applied}, digest {digest}; {} acknowledged", acked.len());
    if let Err(lost) = c.creates_everywhere(&[1, 2, 3], &acked).await {
        panic!("an acknowledged create was lost: {lost}\n{}", c.outputs(&[1, 2, 3]));
    }
    for id in 1..=3 {
        eprintln!("node {id}: {:?}", c.metrics(id).await);
    }
    // A kill -9, a restart and a snapshot install: no replica's digest was ever contradicted.
    c.none_fenced(&[1, 2, 3]).await;
    c.no_claims_disagreed(&[1, 2, 3]).await;
    c.stop_all();
    offline_agreement(&c, true);
}

/// A leader cut off from both peers: what it accepted in its first moments is never
/// acknowledged, the others elect a leader and write over those indexes, and when it comes back
/// (restarted) its own log has those entries replaced: the conflicting suffix is truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_old_leader_has_its_uncommitted_conflicting_suffix_truncated() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["--snapshot-every", "100000"]);
    let (old, _) = c.leader(&[1, 2, 3]).await;
    let all = c.client(&[1, 2, 3]);
    for i in 0..5 {
        assert!(done(&all.write(&create(&format!("before{i}"))).await));
    }
    let committed = c.converged(&[1, 2, 3], 5).await.0;

    // Cut it off, then write to it at once, while its lease still holds: appended, not committed.
    c.client(&[old]).partition(&c.addr(old), true).await.unwrap();
    let mut lonely = Vec::new();
    for i in 0..3 {
        let cl = c.client(&[old]);
        let addr = c.addr(old);
        lonely.push(tokio::spawn(async move {
            let cmd = create(&format!("lonely{i}"));
            cl.write_once(&addr, &cmd, cl.next_request_id()).await.unwrap()
        }));
    }
    for h in lonely {
        let r = h.await.unwrap();
        assert!(!matches!(r, WriteReply::Committed { .. }), "a partitioned leader acknowledged {r:?}");
    }
    let m = c.metrics(old).await.unwrap();
    let accepted = m.last_log_index.unwrap_or(0);
    assert!(accepted > committed, "the partitioned leader appended nothing: {m:?}");
    assert_eq!(m.committed, Some(committed), "{m:?}");

    // The majority moves on and writes over those indexes.
    let others: Vec<u64> = (1..=3).filter(|i| *i != old).collect();
    c.leader(&others).await;
    let maj = c.client(&others);
    for i in 0..5 {
        let r = maj.write(&create(&format!("after{i}"))).await;
        assert!(done(&r), "{r:?}");
    }
    let majority_end = c.converged(&others, committed + 5).await.0;
    assert!(majority_end >= accepted);

    // What the old leader's real log holds: its own uncommitted entries above `committed`.
    c.kill9(old);
    let before = wal_raft::check::log_ids(&c.data(old)).unwrap();
    let suffix: Vec<_> = before.iter().filter(|l| l.index > committed).cloned().collect();
    assert!(!suffix.is_empty(), "no uncommitted suffix in {before:?}");

    // Restarted (its switch is off in the new process), it rejoins as a follower.
    c.spawn(old);
    c.converged(&[1, 2, 3], majority_end).await;
    for name in ["lonely0", "lonely1", "lonely2"] {
        for id in 1..=3 {
            let e = c.client(&[id]).lookup(&c.addr(id), None, name).await.unwrap();
            assert!(e.is_none(), "node {id} applied {name}, which was never committed");
        }
    }
    c.stop_all();
    let after = wal_raft::check::log_ids(&c.data(old)).unwrap();
    let reference = wal_raft::check::log_ids(&c.data(others[0])).unwrap();
    for l in &suffix {
        let now = after.iter().find(|a| a.index == l.index);
        assert!(now.is_some_and(|a| a != l), "entry {l} is still in the old leader's log: {after:?}");
    }
    assert_eq!(after, reference, "the old leader's log differs from node {}'s", others[0]);
    eprintln!("truncated on node {old}: {suffix:?}");
    offline_agreement(&c, true);
}

/// Once its lease has expired, a partitioned leader refuses writes outright (never appended),
/// and nothing it was sent is acknowledged or applied anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_old_leader_refuses_writes_and_acknowledges_none() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["--snapshot-every", "100000"]);
    let (old, _) = c.leader(&[1, 2, 3]).await;
    assert!(done(&c.client(&[1, 2, 3]).write(&create("seed")).await));
    // A follower forwards a client's write to the leader and answers with the leader's reply:
    // committed in one round trip, no redirect.
    let follower = (1..=3).find(|i| *i != old).unwrap();
    let fc = c.client(&[follower]);
    let r = fc.write_once(&c.addr(follower), &create("forwarded"), fc.next_request_id()).await.unwrap();
    assert!(done(&r), "a follower did not forward the write: {r:?}");
    c.client(&[old]).partition(&c.addr(old), true).await.unwrap();
    // Past the lease (election_timeout_max = 600 ms).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let cl = c.client(&[old]);
    let r = cl.write_once(&c.addr(old), &create("refused0"), cl.next_request_id()).await.unwrap();
    assert!(matches!(&r, WriteReply::Rejected { retry: true, why } if why.contains("lease")), "{r:?}");
    // The retrying client, pinned to the old leader, never gets an acknowledgement.
    let mut pinned = c.client(&[old]);
    pinned.write_deadline = Duration::from_secs(2);
    let r = pinned.write(&create("refused1")).await;
    assert!(!matches!(r, WriteReply::Committed { .. }), "{r:?}");

    let others: Vec<u64> = (1..=3).filter(|i| *i != old).collect();
    c.leader(&others).await;
    assert!(done(&c.client(&others).write(&create("majority")).await));
    c.client(&[old]).partition(&c.addr(old), false).await.unwrap();
    let end = c.metrics(others[0]).await.and_then(|m| m.last_log_index).unwrap_or(0);
    c.converged(&[1, 2, 3], end).await;
    for id in 1..=3 {
        let cl = c.client(&[id]);
        for name in ["refused0", "refused1"] {
            assert!(cl.lookup(&c.addr(id), None, name).await.unwrap().is_none(), "node {id} applied {name}");
        }
        assert!(cl.lookup(&c.addr(id), None, "majority").await.unwrap().is_some());
        assert!(cl.lookup(&c.addr(id), None, "forwarded").await.unwrap().is_some());
    }
    c.stop_all();
    offline_agreement(&c, false);
}

/// docs/invariants.md I9 across processes: each race's two commands enter through two different nodes
/// at the same moment. Exactly one wins, the loser is a deterministic refusal, and every replica
/// ends with the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_races_through_two_nodes_have_one_winner_and_identical_replicas() {
    use catalog::EntityKind::Catalog;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["--snapshot-every", "100000"]);
    c.leader(&[1, 2, 3]).await;
    let via: Vec<Client> = (1..=3).map(|i| c.client(&[i, 1, 2, 3])).collect();
    let setup = c.client(&[1, 2, 3]);
    for round in 0..4u64 {
        let (x, y) = ((round % 3) as usize, ((round + 1) % 3) as usize);
        // Two renames to one name.
        let a = created_id(&setup.write(&create(&format!("a{round}"))).await).unwrap();
        let b = created_id(&setup.write(&create(&format!("b{round}"))).await).unwrap();
        let to = format!("taken{round}");
        let ra =
            catalog::Command::Rename { id: catalog::EntityId(a), expected_version: 1, new_name: to.clone() };
        let rb =
            catalog::Command::Rename { id: catalog::EntityId(b), expected_version: 1, new_name: to.clone() };
        let (wa, wb) = tokio::join!(via[x].write(&ra), via[y].write(&rb));
        assert_eq!([done(&wa), done(&wb)].iter().filter(|d| **d).count(), 1, "{wa:?} {wb:?}");
        let loser = if done(&wa) { &wb } else { &wa };
        assert!(refused(loser).is_some_and(|w| w.starts_with("name exists")), "{loser:?}");

        // A restricted drop racing a create under it.
        let p = created_id(&setup.write(&create(&format!("parent{round}"))).await).unwrap();
        let drop =
            catalog::Command::Drop { id: catalog::EntityId(p), expected_version: None, cascade: false };
        let child = create_under(p, Catalog, "child");
        let (wd, wc) = tokio::join!(via[x].write(&drop), via[y].write(&child));
        assert_eq!([done(&wd), done(&wc)].iter().filter(|d| **d).count(), 1, "{wd:?} {wc:?}");
        if done(&wd) {
            assert!(refused(&wc).is_some_and(|w| w.starts_with("no such parent")), "{wc:?}");
        } else {
            assert!(refused(&wd).is_some_and(|w| w.contains("children")), "{wd:?}");
        }

        // Two updates against one version, then a stale one after the content went back (ABA).
        let e = created_id(&setup.write(&create_under(p, Catalog, "x")).await);
        let e = match e {
            Some(e) => e,
            // The drop won: the parent is gone; use a fresh metalake.
            None => created_id(&setup.write(&create(&format!("e{round}"))).await).unwrap(),
        };
        let upd = |v: u64, props: &[u8]| catalog::Command::Update {
            id: catalog::EntityId(e),
            expected_version: v,
            props: props.to_vec(),
        };
        let (one, two) = (upd(1, b"one"), upd(1, b"two"));
        let (u1, u2) = tokio::join!(via[x].write(&one), via[y].write(&two));
        assert_eq!([done(&u1), done(&u2)].iter().filter(|d| **d).count(), 1, "{u1:?} {u2:?}");
        assert!(done(&setup.write(&upd(2, b"")).await)); // back to the original content, version 3
        let stale = setup.write(&upd(1, b"late")).await;
        assert!(refused(&stale).is_some_and(|w| w.contains("version")), "ABA: {stale:?}");
    }
    let end = c.metrics(1).await.and_then(|m| m.last_applied).unwrap_or(0);
    let (_, digest) = c.converged(&[1, 2, 3], end).await;
    // No orphan: every child named "child" has a live parent, on every replica.
    for id in 1..=3 {
        let cl = c.client(&[id]);
        for round in 0..4 {
            let parent = cl.lookup(&c.addr(id), None, &format!("parent{round}")).await.unwrap();
            if let Some(p) = parent {
                let _ = cl.lookup(&c.addr(id), Some(p.id), "child").await.unwrap();
            }
            let taken = cl.lookup(&c.addr(id), None, &format!("taken{round}")).await.unwrap();
            assert!(taken.is_some_and(|t| t.version == 2), "node {id} round {round}");
        }
        assert_eq!(c.metrics(id).await.unwrap().digest, digest);
    }
    c.stop_all();
    offline_agreement(&c, true);
}

/// docs/invariants.md I8 with the binary: a node whose log holds a checkpoint that replay does not
/// reproduce refuses to start (exit 4, DIVERGENT) and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergent_node_refuses_to_start_and_says_why() {
    use openraft::entry::RaftEntry;
    use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
    use openraft::type_config::TypeConfigExt;
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;
    use wal_raft::{Entry, LogId, LogStore, Request, StateMachineStore, TypeConfig};
    let dir = tempfile::tempdir().unwrap();
    let data: &Path = dir.path();
    {
        let sm0 = StateMachineStore::open(Some(&data.join("sm"))).unwrap();
        let (mut log, _) =
            LogStore::open_verified(data.join("log"), wal_raft::log_options(64 << 10), &sm0).unwrap();
        let mut sm =
            StateMachineStore::open(Some(&data.join("sm"))).unwrap().with_checkpoints(log.checkpointer(), 2);
        let lid = |i| LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(1, 1), i);
        let entries: Vec<Entry> = (1..=6)
            .map(|i| Entry::new_normal(lid(i), Request::command(&create(&format!("l{i}")), None)))
            .collect();
        let (tx, rx) = TypeConfig::oneshot();
        log.append(entries.clone(), IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
        sm.apply(futures_util::stream::iter(entries.into_iter().map(|e| Ok((e, None))))).await.unwrap();
        // What a nondeterministic apply would have recorded: a digest replay cannot reproduce.
        let mut cp = sm.applier().checkpoint();
        cp.digest[0] ^= 1;
        log.checkpointer().record(6, cp);
        log.close().unwrap();
    }
    let port = free_ports(1)[0];
    let mut child = Command::new(BIN)
        .args(["run", "--plaintext", "--id", "1", "--listen", &format!("127.0.0.1:{port}"), "--data"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a DIVERGENT node kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(4), "{err}");
    assert!(err.contains("refusing to start as a voter") && err.contains("DIVERGENT at index 6"), "{err}");
    // The offline check agrees.
    let ck = wal_raft::check::check(data);
    assert_eq!(ck.state.word(), "DIVERGENT", "{}", ck.summary());
    assert_eq!(ck.exit_code(), 4);
}
