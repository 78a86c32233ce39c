//! docs/invariants.md I8 for a Raft node: at open the log is replayed after the snapshot through the same
//! apply function and compared with the checkpoints the state machine recorded online. CLEAN
//! lets the node start as a voter; DIVERGENT refuses, saying where and why.

use futures_util::stream;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::vote::RaftLeaderIdExt;
use openraft::RaftTypeConfig;
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use wal_raft::{
    log_options, start_role, Entry, LogId, LogStore, Request, StartRole, StateMachineStore, StateVerdict,
    TypeConfig,
};

async fn t<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f).await.expect("timed out")
}

fn lid(term: u64, index: u64) -> LogId {
    LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(term, 1), index)
}

fn create(index: u64, name: &str) -> Entry {
    let cmd = catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: name.into(),
        props: vec![],
    };
    Entry::new_normal(lid(1, index), Request::command(&cmd, None))
}

fn opts() -> wal::Options {
    let mut o = log_options(64 << 10);
    o.prepare_in_background = false;
    o
}

/// Appends entries 1..=n to the log and applies them (as openraft does once they are
/// committed), the state machine recording a checkpoint after every other entry. With
/// `forge_at`, one extra checkpoint with a wrong digest stands for an online apply that did
/// something replay does not (a nondeterministic apply, a corrupted state in memory).
async fn write_node(dir: &Path, n: u64, forge_at: Option<u64>) {
    let (mut log, v) = LogStore::open_verified(
        dir.join("log"),
        opts(),
        &StateMachineStore::open(Some(&dir.join("sm"))).unwrap(),
    )
    .unwrap();
    assert_eq!(v, StateVerdict::Clean { checkpoints: 0, through: None, claims: 0 });
    let mut sm =
        StateMachineStore::open(Some(&dir.join("sm"))).unwrap().with_checkpoints(log.checkpointer(), 2);
    let entries: Vec<Entry> = (1..=n).map(|i| create(i, &format!("lake{i}"))).collect();
    let (tx, rx) = TypeConfig::oneshot();
    t(log.append(entries.clone(), IOFlushed::signal(tx))).await.unwrap();
    t(rx).await.unwrap().unwrap();
    t(sm.apply(stream::iter(entries.into_iter().map(|e| Ok((e, None)))))).await.unwrap();
    if let Some(at) = forge_at {
        let mut cp = sm.applier().checkpoint();
        cp.digest[0] ^= 1;
        log.checkpointer().record(at, cp);
    }
    log.close().unwrap();
}

fn verdict(dir: &Path) -> StateVerdict {
    let sm = StateMachineStore::open(Some(&dir.join("sm"))).unwrap();
    let (log, v) = LogStore::open_verified(dir.join("log"), opts(), &sm).unwrap();
    log.close().unwrap();
    v
}

#[tokio::test]
async fn a_clean_node_starts_as_a_voter() {
    let dir = tempfile::tempdir().unwrap();
    write_node(dir.path(), 10, None).await;
    let v = verdict(dir.path());
    assert_eq!(v, StateVerdict::Clean { checkpoints: 5, through: Some(10), claims: 0 });
    assert_eq!(start_role(&v), StartRole::Voter);
}

#[tokio::test]
async fn a_divergent_node_refuses_to_start_as_a_voter_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    write_node(dir.path(), 10, Some(10)).await;
    let v = verdict(dir.path());
    let StateVerdict::Divergent { index, recorded, replayed, .. } = &v else {
        panic!("expected DIVERGENT, got {v:?}")
    };
    assert_eq!(*index, 10);
    assert_ne!(recorded, replayed);
    let StartRole::Refused { why } = start_role(&v) else { panic!("a DIVERGENT node was allowed to vote") };
    assert!(why.starts_with("DIVERGENT at index 10:"), "{why}");
    assert!(why.contains("must not vote"), "{why}");
}

/// Checkpoints at or before the snapshot are not replayed (the log below it may be purged);
/// the replay starts from the snapshot's state and still checks every later checkpoint.
#[tokio::test]
async fn the_check_starts_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    write_node(dir.path(), 6, None).await;
    {
        // The state after 1..=4, snapshotted at 4 (as openraft would before a purge).
        let mut sm = StateMachineStore::open(Some(&dir.path().join("sm"))).unwrap();
        let entries: Vec<Entry> = (1..=4).map(|i| create(i, &format!("lake{i}"))).collect();
        t(sm.apply(stream::iter(entries.into_iter().map(|e| Ok((e, None)))))).await.unwrap();
        let mut b = t(sm.get_snapshot_builder()).await;
        let snap = t(openraft::storage::RaftSnapshotBuilder::build_snapshot(&mut b)).await.unwrap();
        assert_eq!(snap.meta.last_log_id, Some(lid(1, 4)));
    }
    let v = verdict(dir.path());
    assert_eq!(
        v,
        StateVerdict::Clean { checkpoints: 1, through: Some(6), claims: 0 },
        "only the checkpoint at 6 is after the snapshot at 4"
    );
}
