//! Issue 21, finding 1, with three real `walraft-node` processes: the leader and one follower
//! are SIGKILLed together under load and both restarted at once, well within the survivor's
//! election timeout, round after round. After every round the three replicas must have applied
//! the same index with the same state digest, and every write acknowledged in the round must be
//! on every replica at the index it was acknowledged at (a create's entity id is its index).
//!
//! Why this kills a leader: its log writer group-commits, so at any moment under load some
//! entries are queued behind the fdatasync in flight, yet they are already served to followers
//! from memory (`log_store/recent.rs`, `Recent`). A SIGKILL then loses them on the leader only. Before
//! the fix the node came back as leader of the same term without an election (openraft's
//! leader restore) and gave the lost entries' log ids to new entries; the followers kept the old
//! ones (same ids), and the replicas diverged. docs/replication-safety.md has the argument.
//!
//! `double_kill_rounds_keep_every_acknowledged_write_on_every_replica` is the short version
//! (CI). `with_leader_restore_back_on_the_rounds_catch_the_loss` is its negative control (CI):
//! the same rounds with the unsafe configuration must fail, or this test could not fail. The long one is ignored; run it with
//! `WALRAFT_DOUBLE_KILL_ROUNDS=1000 cargo test -p wal-raft --test raft double_kill:: -- --ignored --nocapture`.

use crate::support;
use crate::support::{create, created_id, Cluster};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::client::Client;

/// The survivor's election timeout is 1-1.5 s, heartbeats every 100 ms: the two killed nodes
/// (a debug build restarts in well under that) are back before it may start an election.
/// Snapshots every 400 entries, 50 kept below: restarts replay a short log, and a restarted
/// node may need a snapshot.
const FLAGS: [&str; 10] = [
    "--heartbeat-ms",
    "100",
    "--election-min-ms",
    "1000",
    "--election-max-ms",
    "1500",
    "--snapshot-every",
    "400",
    "--keep-logs",
    "50",
];
/// Concurrent writers: enough entries in flight that a kill finds some queued on the leader.
const WRITERS: u64 = 6;
/// Acknowledgements in a round before the kill.
const BEFORE_KILL: usize = 12;
/// Acknowledgements in a round after the restart (the cluster took writes again).
const AFTER_RESTART: usize = 4;
/// How many moments a round tries for a kill that loses entries the leader shipped.
const HAZARD_TRIES: u64 = 60;
/// Bound of every wait of a round.
const ROUND_WAIT: Duration = Duration::from_secs(20);

/// Writers creating uniquely named metalakes through any node, recording what is acknowledged.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, u64)>>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(c: &Cluster, round: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let writers = (0..WRITERS)
            .map(|w| {
                let mut client = Client::new((1..=3).map(|i| c.addr(i)).collect());
                client.call_timeout = Duration::from_secs(2);
                client.write_deadline = Duration::from_secs(10);
                let (stop, acked) = (stop.clone(), acked.clone());
                tokio::spawn(async move {
                    for i in 0..100_000u64 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let name = format!("r{round}-w{w}-{i}");
                        // One request id per write, kept on its retries: a retry that finds
                        // it applied answers with the first index (Duplicate).
                        if let Some(id) = created_id(&client.write(&create(&name)).await) {
                            acked.lock().unwrap().push((name, id));
                        }
                    }
                })
            })
            .collect();
        Load { stop, acked, writers }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits (bounded) until at least `n` writes were acknowledged.
    async fn until(&self, n: usize) -> Result<(), String> {
        let t = Instant::now();
        while self.count() < n {
            if t.elapsed() > ROUND_WAIT {
                return Err(format!("only {} writes acknowledged in {ROUND_WAIT:?}", self.count()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// Stops the writers (each ends its write in flight, bounded by its deadline) and returns
    /// what was acknowledged.
    async fn finish(self) -> Vec<(String, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.writers {
            let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
        }
        std::mem::take(&mut *self.acked.lock().unwrap())
    }
}

/// How a round failed.
#[derive(Debug)]
enum Failed {
    /// The cluster did not take writes again in time (not a safety failure by itself).
    Stalled(String),
    /// The replicas did not reach one applied index with one digest.
    Diverged(String),
    /// An acknowledged write is missing, or at another index, on some replica.
    Lost(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Stalled(why) => write!(f, "stalled: {why}"),
            Failed::Diverged(why) => write!(f, "diverged: {why}"),
            Failed::Lost(why) => write!(f, "lost an acknowledged write: {why}"),
        }
    }
}

/// One round: load, the leader and a follower killed together, both restarted at once, load
/// until the cluster acknowledges again, then the checks. Returns what the round acknowledged.
async fn round(c: &mut Cluster, round: u32) -> Result<usize, Failed> {
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let load = Load::start(c, round);
    load.until(BEFORE_KILL).await.map_err(Failed::Stalled)?;
    let others: Vec<u64> = (1..=3).filter(|i| *i != leader).collect();
    let follower = others[round as usize % 2];
    let survivor = others[1 - round as usize % 2];
    // Aimed (`Cluster::stop_with_unwritten_tail`): killed anyway when no moment was found.
    let lost = match c.stop_with_unwritten_tail(leader, &[survivor], HAZARD_TRIES).await {
        Ok(seen) => format!("{seen}: lost on it"),
        Err(seen) => seen,
    };
    c.kill9_together(&[leader, follower]);
    c.spawn(leader);
    c.spawn(follower);
    eprintln!("round {round}: killed leader {leader} of term {term} ({lost}) and follower {follower}");
    let at_restart = load.count();
    load.until(at_restart + AFTER_RESTART).await.map_err(Failed::Stalled)?;
    let acked = load.finish().await;
    let addrs: Vec<String> = (1..=3).map(|i| c.addr(i)).collect();
    let end = support::agreement(&addrs, 0, ROUND_WAIT).await.map_err(Failed::Diverged)?;
    let (index, digest) = (end.last_applied.unwrap_or(0), end.digest);
    c.creates_everywhere(&[1, 2, 3], &acked).await.map_err(Failed::Lost)?;
    let now = c.leader(&[1, 2, 3]).await;
    eprintln!(
        "round {round}: now leader {} term {}; {} acknowledged; all at index {index}, digest {}",
        now.0,
        now.1,
        acked.len(),
        &digest[..16.min(digest.len())]
    );
    Ok(acked.len())
}

/// Runs `rounds` rounds on one cluster; panics at the first round that loses an acknowledged
/// write or ends with replicas that differ, naming it.
async fn double_kill_rounds(rounds: u32) {
    let mut c = Cluster::start(&FLAGS);
    let started = Instant::now();
    let mut total = 0;
    for r in 0..rounds {
        match round(&mut c, r).await {
            Ok(n) => total += n,
            Err(e) => panic!(
                "round {r} of {rounds} (after {} good rounds, {:?}): {e}\n{}",
                r,
                started.elapsed(),
                c.outputs(&[1, 2, 3])
            ),
        }
    }
    eprintln!("{rounds} double-kill rounds, {total} writes acknowledged, in {:?}", started.elapsed());
    // Every round killed and restarted two nodes: none was ever contradicted by a majority's
    // digest claims, and the comparison still runs on all three.
    c.none_fenced(&[1, 2, 3]).await;
    c.no_claims_disagreed(&[1, 2, 3]).await;
    c.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_kill_rounds_keep_every_acknowledged_write_on_every_replica() {
    double_kill_rounds(6).await;
}

/// The long run (see the module docs): `WALRAFT_DOUBLE_KILL_ROUNDS` rounds, 200 by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: minutes; run with --ignored"]
async fn double_kill_rounds_long() {
    let rounds = std::env::var("WALRAFT_DOUBLE_KILL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    double_kill_rounds(rounds).await;
}

/// Rounds the negative control may take to see the loss (before the fix, 9 runs of 9 failed in
/// round 0 or 1; about 3 rounds in 4 lose a shipped tail, and 9 in 10 of those diverged).
const CONTROL_ROUNDS: u32 = 12;

/// Negative control: the same rounds on nodes with openraft's leader restore turned back on
/// (the test-only `--unsafe-leader-restore`, finding 1's configuration) must lose an
/// acknowledged write or leave the replicas diverged, and the offline `compare` of the stopped
/// nodes must then say DIVERGENT. If this passed with no failed round, the rounds above would
/// prove nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leader_restore_back_on_the_rounds_catch_the_loss() {
    let mut flags = FLAGS.to_vec();
    flags.push("--unsafe-leader-restore");
    let mut c = Cluster::start(&flags);
    let mut caught = None;
    for r in 0..CONTROL_ROUNDS {
        match round(&mut c, r).await {
            Ok(_) => {}
            // A stall proves nothing either way: try another round (bounded by the count).
            Err(e @ Failed::Stalled(_)) => eprintln!("round {r}: {e}"),
            Err(e) => {
                caught = Some((r, e));
                break;
            }
        }
    }
    let outputs = c.outputs(&[1, 2, 3]);
    c.stop_all();
    let Some((r, e)) = caught else {
        panic!("{CONTROL_ROUNDS} rounds with leader restore on lost nothing: the test cannot see finding 1\n{outputs}")
    };
    eprintln!("caught in round {r}: {e}");
    let dirs: Vec<_> = (1..=3).map(|i| c.data(i)).collect();
    let cmp = wal_raft::check::compare(&dirs);
    eprintln!("offline compare: {}", cmp.summary());
    // Replicas that differ must differ offline too. (A write lost on every replica alike leaves
    // nothing for an offline comparison to see: only the acknowledgement shows it.)
    if matches!(e, Failed::Diverged(_)) {
        assert_eq!(cmp.verdict, "DIVERGENT", "offline compare after {e}: {}", cmp.summary());
    }
}
