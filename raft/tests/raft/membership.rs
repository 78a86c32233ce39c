//! Membership changes through `walraft-node client` on real node processes, under writes
//! (issue 28): a fourth node added as a learner (caught up by snapshot) and promoted, an old
//! voter (the leader) removed, a node whose data directory was deleted replaced by a new id,
//! and a node moved to a new port; the unsafe requests refused with a reason and nothing
//! changed. At the end every acknowledged write is on every final replica, and they agree on
//! one digest. Each step shows in the nodes' logs.

use crate::support;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::client::Client;

use crate::support::{client_cmd, create, created_id, free_ports, out_text, Cluster, WAIT};

/// Runs a membership command against `nodes`, retrying while the cluster is between leaders
/// (no leader answered, exit 5, or the node that answered stopped leading: refused with "not
/// the leader"), until `want` exit code; the output.
async fn admin(c: &Cluster, nodes: &[String], args: &[&str], want: i32) -> String {
    let t = Instant::now();
    loop {
        let o = client_cmd(nodes, args);
        let out = out_text(&o);
        let code = o.status.code();
        if code == Some(want) && !(want == 2 && out.contains("not the leader")) {
            return out;
        }
        let transient = code == Some(5)
            || out.contains("not the leader")
            || out.contains("in progress")
            || out.contains("wait for it to catch up")
            || out.contains("changed membership")
            || (code == Some(3) && want != 3);
        if !transient || t.elapsed() > WAIT {
            let ids: Vec<u64> = c.children.keys().copied().collect();
            panic!("{args:?}: exit {code:?}, wanted {want}:\n{out}\n{}", c.outputs(&ids));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (bounded) until a node answers at `addr`: a node is started before it is added.
async fn answering(addr: &str) {
    let t = Instant::now();
    while support::metrics_at(addr, Duration::from_millis(500)).await.is_none() {
        assert!(t.elapsed() < WAIT, "no node answers at {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_promote_remove_replace_and_move_nodes_under_writes() {
    // Small snapshots and a short log tail kept: a new node catches up by snapshot.
    let mut c = Cluster::start(&["--snapshot-every", "40", "--keep-logs", "10"]);
    c.leader(&[1, 2, 3]).await;
    let spare = free_ports(4);

    // Writers: creates through whichever nodes are current, recording the acknowledged ones.
    let current: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new((1..=3).map(|i| c.addr(i)).collect()));
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (current, acked, stop) = (current.clone(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut cl = Client::new(current.lock().unwrap().clone());
                cl.call_timeout = Duration::from_secs(2);
                cl.write_deadline = Duration::from_secs(3);
                let name = format!("w{n}");
                if created_id(&cl.write(&create(&name)).await).is_some() {
                    acked.lock().unwrap().push(name);
                }
                n += 1;
            }
        })
    };
    let nodes = || current.lock().unwrap().clone();
    let wait_writes = |k: usize| {
        let acked = acked.clone();
        async move {
            let t = Instant::now();
            let start = acked.lock().unwrap().len();
            while acked.lock().unwrap().len() < start + k {
                assert!(t.elapsed() < WAIT, "writes stalled");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_writes(60).await;

    // 1. A fourth node, started empty, added as a learner: it catches up by snapshot.
    c.addrs.insert(4, format!("127.0.0.1:{}", spare[0]));
    c.spawn(4);
    let a4 = c.addr(4);
    answering(&a4).await;
    let out = admin(&c, &nodes(), &["add-learner", "--id", "4", "--addr", &a4], 0).await;
    assert!(out.contains("learners [4]"), "{out}");
    // An id that is already a member is refused: a lost disk rejoins under a new id. So is a
    // member's address under a new id (one process would hold two votes).
    let out = admin(&c, &nodes(), &["add-learner", "--id", "2", "--addr", &a4], 2).await;
    assert!(out.contains("already a member"), "{out}");
    let out = admin(&c, &nodes(), &["add-learner", "--id", "6", "--addr", &c.addr(3)], 2).await;
    assert!(out.contains("is node 3's address"), "{out}");
    wait_writes(20).await;

    // 2. Promoted: four voters.
    let out = admin(&c, &nodes(), &["promote", "--id", "4"], 0).await;
    assert!(out.contains("voters [1, 2, 3, 4]"), "{out}");
    current.lock().unwrap().push(a4.clone());
    wait_writes(20).await;

    // 3. The leader itself removed: the others elect a new one and the writes go on.
    let (old, _) = c.leader(&[1, 2, 3, 4]).await;
    let out = admin(&c, &nodes(), &["remove", "--id", &old.to_string()], 0).await;
    let mut voters: BTreeSet<u64> = [1, 2, 3, 4].into();
    voters.remove(&old);
    assert!(out.contains(&format!("voters {:?}", voters.iter().collect::<Vec<_>>())), "{out}");
    current.lock().unwrap().retain(|a| *a != c.addr(old));
    c.stop(old);
    wait_writes(20).await;

    // 4. A voter loses its disk: killed, its data directory deleted. Removing another voter
    // now would leave the new set without a majority that answers: refused.
    let ids: Vec<u64> = voters.iter().copied().collect();
    let (lost, other) = (ids[0], ids[1]);
    c.kill9(lost);
    std::fs::remove_dir_all(c.data(lost)).unwrap();
    current.lock().unwrap().retain(|a| *a != c.addr(lost));
    // As an operator would: the node is seen down (the leader's status shows it lagging).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = admin(&c, &nodes(), &["remove", "--id", &other.to_string()], 2).await;
    assert!(out.contains("not a majority"), "{out}");
    // It is replaced: a new node 5 (empty) added, promoted, and the lost id removed.
    c.addrs.insert(5, format!("127.0.0.1:{}", spare[1]));
    c.spawn(5);
    let a5 = c.addr(5);
    answering(&a5).await;
    admin(&c, &nodes(), &["add-learner", "--id", "5", "--addr", &a5], 0).await;
    admin(&c, &nodes(), &["promote", "--id", "5"], 0).await;
    current.lock().unwrap().push(a5.clone());
    let out = admin(&c, &nodes(), &["remove", "--id", &lost.to_string()], 0).await;
    voters.remove(&lost);
    voters.insert(5);
    assert!(out.contains(&format!("voters {:?}", voters.iter().collect::<Vec<_>>())), "{out}");
    wait_writes(20).await;

    // 5. A voter moves to a new port: stopped, restarted there with its data directory, and
    // its address set. An address where another node answers is refused first.
    let mover = *voters.iter().find(|v| **v != 5).unwrap();
    let out = admin(&c, &nodes(), &["set-address", "--id", &mover.to_string(), "--addr", &a5], 2).await;
    assert!(out.contains("node 5"), "{out}");
    // A node started under the mover's id on an empty data directory (its vote gone) is not
    // the mover, though it says its id: refused.
    let fake_addr = format!("127.0.0.1:{}", spare[3]);
    let fake_dir = c.dir.path().join("fake");
    let mut fake = std::process::Command::new(support::BIN)
        .args(["run", "--plaintext", "--id", &mover.to_string(), "--listen", &fake_addr, "--data"])
        .arg(&fake_dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    answering(&fake_addr).await;
    let out =
        admin(&c, &nodes(), &["set-address", "--id", &mover.to_string(), "--addr", &fake_addr], 2).await;
    let _ = fake.kill();
    let _ = fake.wait();
    assert!(out.contains("holds the log only"), "{out}");
    let old_addr = c.addr(mover);
    c.stop(mover);
    current.lock().unwrap().retain(|a| *a != old_addr);
    c.addrs.insert(mover, format!("127.0.0.1:{}", spare[2]));
    c.spawn(mover);
    let new_addr = c.addr(mover);
    answering(&new_addr).await;
    // The moved node may lead again already (it reaches the others): ask it too.
    current.lock().unwrap().push(new_addr.clone());
    let out = admin(&c, &nodes(), &["set-address", "--id", &mover.to_string(), "--addr", &new_addr], 0).await;
    assert!(out.contains(&format!("{mover}={new_addr}")), "{out}");
    wait_writes(20).await;

    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    // Every acknowledged write on every final replica, one digest.
    let finals: Vec<u64> = voters.iter().copied().collect();
    let last = c.leader(&finals).await;
    let (applied, _digest) = c.converged(&finals, 1).await;
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 200, "only {} writes acknowledged", acked.len());
    for id in &finals {
        let cl = c.client(&[*id]);
        for name in &acked {
            let e = cl.lookup(&c.addr(*id), None, name).await.unwrap();
            assert!(
                e.is_some(),
                "node {id} lacks acknowledged write {name} (applied {applied}, leader {last:?})"
            );
        }
    }
    // The new nodes caught up by snapshot, and each change is in the logs.
    let logs: String = finals.iter().map(|id| c.output(*id)).collect();
    assert!(c.output(5).contains("snapshot installed"), "{}", c.output(5));
    assert!(logs.contains("membership"), "{logs}");
}
