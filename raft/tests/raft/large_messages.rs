//! Issue 21, finding 2: nothing a follower needs is larger than a frame. With the frame limit
//! set to 16 KiB (`NodeConfig::max_frame_bytes`; 64 MiB by default), a follower started after
//! the others wrote about 60 KiB catches up: from the log (append-entries batches cut to the
//! prefix that fits) and from a snapshot (sent in chunks). Before, the one message was larger
//! than a frame, never delivered, retried forever, and the follower stayed behind.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::wire::{NodeMetrics, WriteReply};
use wal_raft::node::{start, NodeConfig, RunningNode, Started};

const FRAME: usize = 16 << 10;
const WRITES: u64 = 60;

fn addrs() -> BTreeMap<u64, String> {
    let ls: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    (1..=3).zip(ls.iter().map(|l| l.local_addr().unwrap().to_string())).collect()
}

async fn node(id: u64, all: &BTreeMap<u64, String>, data: &Path, snapshot_every: u64) -> RunningNode {
    let peers = all.iter().filter(|(i, _)| **i != id).map(|(i, a)| (*i, a.clone())).collect();
    let mut cfg = NodeConfig::new(id, all[&id].clone(), peers, data.join(format!("n{id}")));
    cfg.initialize = id == 1;
    cfg.heartbeat_ms = 50;
    cfg.election_min_ms = 300;
    cfg.election_max_ms = 600;
    cfg.segment_len_bytes = 64 << 10;
    cfg.snapshot_every = snapshot_every;
    cfg.keep_logs = 0;
    cfg.max_frame_bytes = FRAME;
    match start(cfg).await.unwrap() {
        Started::Running(n) => n,
        Started::Refused { why } | Started::Fenced { why } => panic!("node {id} refused: {why}"),
    }
}

/// Writes `WRITES` creates of about 1 KiB each through nodes 1 and 2 (node 3 is down).
async fn write_backlog(all: &BTreeMap<u64, String>) {
    let c = Client::new(vec![all[&1].clone(), all[&2].clone()]);
    for i in 0..WRITES {
        let cmd = catalog::Command::Create {
            parent: None,
            kind: catalog::EntityKind::Metalake,
            name: format!("lake{i}"),
            props: vec![b'p'; 1000],
        };
        let r = c.write(&cmd).await;
        assert!(matches!(r, WriteReply::Committed { .. }), "write {i}: {r:?}");
    }
}

async fn metrics(addr: &str) -> NodeMetrics {
    Client::new(vec![addr.to_string()]).metrics(addr).await.unwrap()
}

/// Waits (at most 30 s) until node 3 applied what node 1 did, with the same digest.
async fn caught_up(all: &BTreeMap<u64, String>) -> NodeMetrics {
    let t = Instant::now();
    loop {
        let (m1, m3) = (metrics(&all[&1]).await, metrics(&all[&3]).await);
        if m3.last_applied.is_some() && m3.last_applied == m1.last_applied {
            assert_eq!((m3.digest.as_str(), m3.entities), (m1.digest.as_str(), m1.entities));
            return m3;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "node 3 never caught up: applied {:?}, node 1 {:?}",
            m3.last_applied,
            m1.last_applied
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_larger_than_a_frame_reaches_a_late_follower() {
    let d = tempfile::tempdir().unwrap();
    let all = addrs();
    let n1 = node(1, &all, d.path(), 100_000).await;
    let n2 = node(2, &all, d.path(), 100_000).await;
    write_backlog(&all).await;
    let n3 = node(3, &all, d.path(), 100_000).await;
    let m3 = caught_up(&all).await;
    assert_eq!(m3.entities, WRITES);
    assert_eq!(m3.snapshot, None, "caught up from the log, not a snapshot");
    for n in [n1, n2, n3] {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_a_frame_reaches_a_late_follower_in_chunks() {
    let d = tempfile::tempdir().unwrap();
    let all = addrs();
    let n1 = node(1, &all, d.path(), 20).await;
    let n2 = node(2, &all, d.path(), 20).await;
    write_backlog(&all).await;
    // The leader snapshotted and purged what node 3 needs: only a snapshot can bring it up.
    let t = Instant::now();
    let mut m1 = metrics(&all[&1]).await;
    while m1.purged.is_none() && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        m1 = metrics(&all[&1]).await;
    }
    assert!(m1.purged.is_some_and(|p| p > 1), "the leader purged its log: {m1:?}");
    let snap =
        std::fs::read_dir(d.path().join("n1/sm")).unwrap().map(|e| e.unwrap().metadata().unwrap().len());
    assert!(snap.max().unwrap() > FRAME as u64 * 2, "the snapshot is larger than two frames");
    let n3 = node(3, &all, d.path(), 20).await;
    let m3 = caught_up(&all).await;
    assert_eq!(m3.entities, WRITES);
    assert!(m3.snapshot.is_some(), "node 3 installed a snapshot: {m3:?}");
    for n in [n1, n2, n3] {
        n.shutdown().await.unwrap();
    }
}
