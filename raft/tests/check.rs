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
    let sm0 = StateMachineStore::open(Some(&dir.join("sm"))).unwrap();
    let (mut log, _) = LogStore::open_verified(dir.join("log"), log_options(64 << 10), &sm0).unwrap();
    let mut sm =
        StateMachineStore::open(Some(&dir.join("sm"))).unwrap().with_checkpoints(log.checkpointer(), 2);
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
    sm.apply(stream::iter(es.into_iter().map(|e| Ok((e, None))))).await.unwrap();
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
