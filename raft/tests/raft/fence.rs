//! Online divergence detection with three real `walraft-node` processes (issue 21, finding 3;
//! docs/replication-safety.md, "Replicas compare digests"). One node's state is altered in
//! memory only (the test-only `AlterState` admin message, `--allow-faults`), as a bit flip in
//! memory or a nondeterministic apply would alter it, and writes go on. At the first claim index
//! after the alteration the others' claims form a majority against its digest: it fences
//! itself (metrics, stderr, the `FENCED` file), stops voting and serving, and the other two
//! carry on without fencing. Its restart is refused while the file exists (exit 9); once the
//! file is deleted it starts, and replaying its intact log heals it. Once with a follower
//! altered, once with the leader. About 5 s each.

use std::time::{Duration, Instant};
use wal_raft::net::wire::{Msg, Reply, WriteReply};

use crate::support::{create, created_id, Cluster, WAIT};

/// One cluster at a time: three nodes each on two shared cores is enough.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `run`'s exit code for a fenced node (`walraft-node/main.rs`).
const EXIT_FENCED: i32 = 9;

/// Alters `id`'s state in memory: the last index it had applied then.
async fn alter(c: &Cluster, id: u64) -> u64 {
    let msg = Msg::AlterState { command: create("altered-in-memory").encode() };
    match c.client(&[id]).call(&c.addr(id), &msg).await.unwrap() {
        Reply::Altered(Ok(Some(applied))) => applied,
        other => panic!("altering node {id}: {other:?}"),
    }
}

/// The index a fence reason names ("node N diverged at index I: ...").
fn fenced_at(why: &str) -> u64 {
    let rest = why.split("diverged at index ").nth(1).unwrap_or_else(|| panic!("no index in {why:?}"));
    rest.split(':').next().unwrap().parse().unwrap()
}

/// Alters `victim`, writes until it fences itself, and checks everything the fence promises;
/// `others` are the two nodes that must carry on. Returns the leader (and its term) the two
/// others had once the victim was fenced.
async fn alter_and_see_it_fence(c: &mut Cluster, victim: u64, others: &[u64]) -> (u64, u64) {
    let every = c.claim_every();
    let all = c.client(&[1, 2, 3]);
    for i in 0..5 {
        assert!(created_id(&all.write(&create(&format!("before{i}"))).await).is_some());
    }
    let end = c.metrics(others[0]).await.and_then(|m| m.last_applied).unwrap();
    let (_, digest) = c.converged(&[1, 2, 3], end).await;

    let altered_after = alter(c, victim).await;
    let m = c.metrics(victim).await.unwrap();
    assert_ne!(m.digest, digest, "the alteration changed nothing");
    assert_eq!(m.fenced, None);
    // The first claim index whose digest the alteration changed.
    let first_claim = (altered_after / every + 1) * every;

    // Writes go on (through any node: the client moves away from a fenced one) until the
    // victim fences itself; bounded, and generous: one claim interval of writes is enough.
    let mut writes = 0;
    let why = loop {
        let r = all.write(&create(&format!("after{writes}"))).await;
        assert!(created_id(&r).is_some(), "a write was not acknowledged: {r:?}\n{}", c.outputs(&[1, 2, 3]));
        writes += 1;
        if let Some(why) = c.metrics(victim).await.and_then(|m| m.fenced) {
            break why;
        }
        assert!(writes < 20 * every, "node {victim} never fenced itself\n{}", c.outputs(&[1, 2, 3]));
    };
    let at = fenced_at(&why);
    eprintln!("node {victim} altered after index {altered_after}, fenced after {writes} writes: {why}");
    // At the first claim index after the alteration: within one claim interval of indexes
    // (plus the claims' round trip), not one more.
    assert_eq!(at, first_claim, "{why}");
    assert!(why.starts_with(&format!("node {victim} diverged at index {at}: its digest there is")), "{why}");
    assert!(why.contains("a majority of the voters (nodes "), "{why}");
    for o in others {
        assert!(why.contains(&format!("node {o} ")), "the reason names who claimed what: {why}");
    }

    // It stopped: its Raft is down, it refuses writes (never appended) and lookups, it says why.
    let m = c.metrics(victim).await.unwrap();
    assert!(m.fatal.is_some(), "the fenced node's raft still runs: {m:?}");
    eprintln!("node {victim} after the fence: state {}, raft stopped: {:?}", m.state, m.fatal);
    let direct = c.client(&[victim]);
    let r =
        direct.write_once(&c.addr(victim), &create("to-the-fenced"), direct.next_request_id()).await.unwrap();
    assert!(matches!(&r, WriteReply::Rejected { retry: true, why } if why.contains("fenced")), "{r:?}");
    let e = direct.lookup(&c.addr(victim), None, "before0").await.unwrap_err();
    assert!(e.to_string().contains("fenced"), "{e}");
    assert!(c.output(victim).contains(&format!("walraft-node {victim}: FENCED")), "{}", c.output(victim));
    let file = std::fs::read_to_string(c.data(victim).join(wal_raft::fence::FENCE_FILE)).unwrap();
    assert!(file.starts_with(&why) && file.contains("delete DIR/FENCED"), "{file}");

    // The other two elect among themselves if they must, never fence, and keep acknowledging.
    let (leader, term) = c.leader(others).await;
    assert!(others.contains(&leader));
    let rest = c.client(others);
    for i in 0..every {
        let r = rest.write(&create(&format!("without{victim}-{i}"))).await;
        assert!(created_id(&r).is_some(), "{r:?}");
    }
    for o in others {
        let m = c.metrics(*o).await.unwrap();
        assert_eq!(m.fenced, None, "node {o}: {m:?}");
        assert!(m.claims.verified_through.is_some_and(|v| v >= at), "node {o}: {:?}", m.claims);
    }

    // Stopped, it says it was fenced; restarted, it refuses while the file exists.
    assert_eq!(c.stop_status(victim).code(), Some(EXIT_FENCED), "{}", c.output(victim));
    // Offline, its log is intact (the divergence was in memory only) and the fence is shown.
    let ck = wal_raft::check::check(&c.data(victim));
    assert_eq!(ck.state.word(), "CLEAN", "{}", ck.summary());
    assert!(
        ck.summary().contains(&format!("FENCED (the node fenced itself while running; FENCED): {why}")),
        "{}",
        ck.summary()
    );
    c.spawn(victim);
    let status = c.wait_exit(victim);
    let out = c.output(victim);
    assert_eq!(status.code(), Some(EXIT_FENCED), "{out}");
    assert!(
        out.contains("refusing to start: this node FENCED itself") && out.contains("delete DIR/FENCED"),
        "{out}"
    );

    // Deleting the file clears it: the log was never altered, so the replay heals the state.
    std::fs::remove_file(c.data(victim).join(wal_raft::fence::FENCE_FILE)).unwrap();
    c.spawn(victim);
    let end = c.metrics(leader).await.and_then(|m| m.last_log_index).unwrap();
    c.converged(&[1, 2, 3], end).await;
    let none = c.client(&[victim]).lookup(&c.addr(victim), None, "altered-in-memory").await.unwrap();
    assert!(none.is_none(), "the alteration survived the restart");
    c.none_fenced(&[1, 2, 3]).await;
    c.stop_all();
    for id in 1..=3 {
        let ck = wal_raft::check::check(&c.data(id));
        assert_eq!(ck.state.word(), "CLEAN", "{}", ck.summary());
    }
    (leader, term)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_follower_fences_itself_and_the_others_carry_on() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["--snapshot-every", "100000"]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let victim = (1..=3).find(|i| *i != leader).unwrap();
    let others: Vec<u64> = (1..=3).filter(|i| *i != victim).collect();
    // The leader was never disturbed.
    assert_eq!(alter_and_see_it_fence(&mut c, victim, &others).await, (leader, term));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_leader_fences_itself_and_the_followers_elect_and_carry_on() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&["--snapshot-every", "100000"]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let others: Vec<u64> = (1..=3).filter(|i| *i != leader).collect();
    // The two followers elected one of them, in a later term.
    let (new, new_term) = alter_and_see_it_fence(&mut c, leader, &others).await;
    assert!(
        others.contains(&new) && new_term > term,
        "leader {new} term {new_term} after {leader} term {term}"
    );
}

/// The alteration is a test fault: a node without `--allow-faults` refuses it. And a claim
/// interval not larger than the number of voters is refused at start (claims alone would
/// reach the next claim index).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altering_needs_allow_faults_and_a_too_short_claim_interval_is_refused() {
    use wal_raft::node::{start, NodeConfig, Started};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = NodeConfig::new(1, "127.0.0.1:0".into(), Default::default(), dir.path().join("n1"));
    cfg.checkpoint_every = 1;
    let e = start(cfg.clone()).await.unwrap_err();
    assert!(e.to_string().contains("must be larger than the number of voters (1)"), "{e}");
    cfg.checkpoint_every = 8;
    cfg.initialize = true;
    let Started::Running(node) = start(cfg).await.unwrap() else { panic!("not started") };
    let client = wal_raft::client::Client::new(vec![node.addr.to_string()]);
    let msg = Msg::AlterState { command: create("x").encode() };
    let t = Instant::now();
    let r = loop {
        match client.call(&node.addr.to_string(), &msg).await.unwrap() {
            Reply::Altered(r) => break r,
            other if t.elapsed() > WAIT => panic!("{other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert!(r.unwrap_err().contains("--allow-faults"));
    node.shutdown().await.unwrap();
}

/// A `FENCED` that is not a regular file (a FIFO, a directory) still refuses the start, at
/// once and saying what it is: read as a file, a FIFO would block the start forever (and the
/// offline check too), a directory would fail with an error naming neither the file nor the
/// fence. `check` shows it as the fence's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_file_that_is_not_a_regular_file_refuses_the_start_without_hanging() {
    use wal_raft::node::{start, NodeConfig, Started};
    let dir = tempfile::tempdir().unwrap();
    for (name, what) in [("fifo", "a FIFO"), ("dir", "a directory")] {
        let data = dir.path().join(name);
        std::fs::create_dir_all(&data).unwrap();
        let fence = data.join(wal_raft::fence::FENCE_FILE);
        if name == "fifo" {
            assert!(std::process::Command::new("mkfifo").arg(&fence).status().unwrap().success());
        } else {
            std::fs::create_dir(&fence).unwrap();
        }
        let mut cfg = NodeConfig::new(1, "127.0.0.1:0".into(), Default::default(), data.clone());
        cfg.initialize = true;
        // Bounds a hang only: a reader blocked on the FIFO is released (a writer opens it and
        // closes) so that the test fails instead of hanging.
        let hung = |what: &str| -> ! {
            if name == "fifo" {
                let _ = std::fs::OpenOptions::new().write(true).open(&fence);
            }
            panic!("{what} hung on a fence file that is {name}")
        };
        let r = match tokio::time::timeout(WAIT * 4, tokio::spawn(start(cfg))).await {
            Ok(r) => r.unwrap(),
            Err(_) => hung("the start"),
        };
        let Ok(Started::Fenced { why }) = r else { panic!("{name}: not refused as fenced") };
        assert!(why.contains(&format!("FENCED is {what}, not a regular file")), "{why}");
        assert!(!data.join("log").exists(), "{name}: the start opened the log");
        let d = data.clone();
        let ck = match tokio::time::timeout(
            WAIT * 4,
            tokio::task::spawn_blocking(move || wal_raft::check::check(&d)),
        )
        .await
        {
            Ok(ck) => ck.unwrap(),
            Err(_) => hung("check"),
        };
        assert!(ck.fenced.as_deref().is_some_and(|f| f.contains(what)), "{}", ck.summary());
    }
}
