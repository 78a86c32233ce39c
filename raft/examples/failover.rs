//! Failover as a client sees it (issue 21, finding 4): three `walraft-node` processes on loopback
//! under a steady load of writers, each a [`Client`] with the default deadlines that knows all
//! three addresses; in each trial the current leader is killed (SIGKILL), stopped (SIGSTOP) or
//! cut off (the partition switch), and the time from the fault to the next acknowledged write is
//! measured: the first write *started* after the fault that is acknowledged Committed (a write
//! in flight at the fault may have been committed before it). Then the fault ends (restart,
//! SIGCONT, switch off), the old leader catches up, and the next trial faults whoever leads.
//!
//! ```sh
//! cargo build --release -p wal-raft --bin walraft-node --examples
//! target/release/examples/failover --trials 10      # uses target/release/walraft-node
//! cargo run -p wal-raft --example failover -- --trials 1   # CI: seconds (needs the debug binary)
//! ```
//!
//! `--bin PATH` names another `walraft-node`; by default it is the one next to this example's
//! directory (`target/<profile>/walraft-node`). Prints one row per fault: p50 and max over the
//! trials, with the election timeout the nodes ran with, and beside it when one of the other
//! two first reported itself leader of a later term (polled every 10 ms): the difference is
//! what the client and the write path add to the election. At the end the three must agree (same
//! applied index and digest) or it exits non-zero.

// The process harness of the tests (three `walraft-node` children, killed on drop; its
// waits panic when they run out).
#[path = "../tests/support/mod.rs"]
mod support;

use clap::Parser;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::Cluster;
use wal_raft::client::Client;
use wal_raft::net::wire::WriteReply;
use wal_raft::node::NodeConfig;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser, Debug)]
#[command(about = "Time from a fault on the leader to the next acknowledged write")]
struct Args {
    /// Trials per fault.
    #[arg(long, default_value_t = 10)]
    trials: usize,
    /// The faults, in the order each round runs them.
    #[arg(long, value_delimiter = ',', default_value = "kill,stop,partition")]
    faults: Vec<String>,
    /// The `walraft-node` binary (default: next to this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// The nodes' timing flags (by default the node's own defaults).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    #[arg(long)]
    election_min_ms: Option<u64>,
    #[arg(long)]
    election_max_ms: Option<u64>,
}

/// What is done to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Stop,
    Partition,
}

impl Fault {
    fn parse(s: &str) -> Res<Fault> {
        Ok(match s {
            "kill" => Fault::Kill,
            "stop" => Fault::Stop,
            "partition" => Fault::Partition,
            other => return Err(format!("unknown fault {other:?} (kill, stop, partition)").into()),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill (SIGKILL, restart)",
            Fault::Stop => "stop (SIGSTOP, SIGCONT)",
            Fault::Partition => "partition (switch on, off)",
        }
    }
}

/// How long after `t0` one of the nodes other than `old` reported itself leader of a term
/// after `term` (polled every 10 ms, so up to that late), waiting at most 60 s.
async fn elected(c: &Cluster, old: u64, term: u64, t0: Instant) -> Option<Duration> {
    while t0.elapsed() < Duration::from_secs(60) {
        for id in (1..=3).filter(|i| *i != old) {
            if c.metrics(id).await.is_some_and(|m| m.state == "Leader" && m.term > term) {
                return Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Waits (bounded) until node `id` follows a leader and has applied at least `index`.
async fn caught_up(c: &Cluster, id: u64, index: u64) -> Res<()> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if let Some(m) = c.metrics(id).await {
            if m.leader.is_some() && m.last_applied.is_some_and(|a| a >= index) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("node {id} did not catch up to index {index} within 60 s").into())
}

/// One write as the load saw it.
struct Done {
    started: Instant,
    ended: Instant,
    acked: bool,
}

/// Writers creating uniquely named metalakes until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<Mutex<Vec<Done>>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(addrs: Vec<String>, writers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(Mutex::new(Vec::new()));
        let writers = (0..writers)
            .map(|w| {
                // Each writer starts at a different node; the client finds the leader.
                let mut order = addrs.clone();
                order.rotate_left(w % addrs.len());
                let client = Client::new(order);
                let (stop, done) = (stop.clone(), done.clone());
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let cmd = catalog::Command::Create {
                            parent: None,
                            kind: catalog::EntityKind::Metalake,
                            name: format!("w{w}-{i}"),
                            props: vec![],
                        };
                        i += 1;
                        let started = Instant::now();
                        let acked = matches!(client.write(&cmd).await, WriteReply::Committed { .. });
                        let d = Done { started, ended: Instant::now(), acked };
                        done.lock().unwrap_or_else(|e| e.into_inner()).push(d);
                    }
                })
            })
            .collect();
        Load { stop, done, writers }
    }

    fn acked_since(&self, t: Instant) -> usize {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        done.iter().filter(|d| d.acked && d.started >= t).count()
    }

    /// The first acknowledgement of a write started at or after `t`, waiting at most `bound`.
    async fn first_ack_after(&self, t: Instant, bound: Duration) -> Option<Duration> {
        let until = Instant::now() + bound;
        while Instant::now() < until {
            {
                let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
                let first = done.iter().filter(|d| d.acked && d.started >= t).map(|d| d.ended).min();
                if let Some(e) = first {
                    return Some(e.duration_since(t));
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }

    /// Writes started at or after `t` that ended other than Committed.
    fn unacked_since(&self, t: Instant) -> usize {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        done.iter().filter(|d| !d.acked && d.started >= t).count()
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.writers {
            let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
        }
    }
}

/// Waits (bounded) until the load acknowledged `n` writes started at or after `t`.
async fn flowing(load: &Load, t: Instant, n: usize) -> Res<()> {
    let until = Instant::now() + Duration::from_secs(60);
    while load.acked_since(t) < n {
        if Instant::now() > until {
            return Err(format!("the load acknowledged {} writes in 60 s", load.acked_since(t)).into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// One trial: fault the leader under load, time the next acknowledgement, heal, catch up.
async fn trial(c: &mut Cluster, load: &Load, fault: Fault) -> Res<(Duration, Duration)> {
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    flowing(load, Instant::now(), 20).await?;
    let addr = c.addr(leader);
    let admin = c.client(&[leader]);
    let t0 = match fault {
        Fault::Kill => {
            c.kill9(leader);
            Instant::now()
        }
        Fault::Stop => {
            c.signal(leader, "STOP");
            Instant::now()
        }
        Fault::Partition => {
            admin.partition(&addr, true).await?;
            Instant::now()
        }
    };
    let (elected, gap) =
        tokio::join!(elected(c, leader, term, t0), load.first_ack_after(t0, Duration::from_secs(60)));
    let healed = Instant::now();
    match fault {
        Fault::Kill => c.spawn(leader),
        Fault::Stop => c.signal(leader, "CONT"),
        Fault::Partition => admin.partition(&addr, false).await?,
    }
    let gap =
        gap.ok_or_else(|| format!("{}: nothing acknowledged within 60 s of the fault", fault.name()))?;
    let elected =
        elected.ok_or_else(|| format!("{}: no new leader within 60 s of the fault", fault.name()))?;
    // The old leader rejoins and catches up to what was committed by the heal; the load runs
    // on meanwhile.
    let (new, _) = c.leader(&[1, 2, 3]).await;
    let committed = c.metrics(new).await.and_then(|m| m.committed).unwrap_or(0);
    caught_up(c, leader, committed).await?;
    flowing(load, healed, 20).await?;
    Ok((elected, gap))
}

/// The `walraft-node` next to this example's directory (`target/<profile>/examples/..`).
fn default_bin() -> Res<PathBuf> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe.parent().and_then(Path::parent).ok_or("no target directory above this example")?;
    Ok(profile_dir.join("walraft-node"))
}

/// (p50, max, min) of at least one duration; the p50 is the lower middle one.
fn summary(ds: impl Iterator<Item = Duration>) -> (Duration, Duration, Duration) {
    let mut g: Vec<Duration> = ds.collect();
    g.sort();
    (g[(g.len() - 1) / 2], g[g.len() - 1], g[0])
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e3)
}

fn main() -> Res<()> {
    let a = Args::parse();
    let faults: Vec<Fault> = a.faults.iter().map(|f| Fault::parse(f)).collect::<Res<_>>()?;
    let bin = match a.bin.clone() {
        Some(b) => b,
        None => default_bin()?,
    };
    if !bin.is_file() {
        return Err(format!(
            "{} not found: build it (cargo build [--release] -p wal-raft --bin walraft-node) or pass --bin",
            bin.display()
        )
        .into());
    }
    if a.trials == 0 || a.writers == 0 {
        return Err("--trials and --writers must be at least 1".into());
    }
    let node = NodeConfig::new(0, String::new(), BTreeMap::new(), PathBuf::new());
    let heartbeat_ms = a.heartbeat_ms.unwrap_or(node.heartbeat_ms);
    let election_min_ms = a.election_min_ms.unwrap_or(node.election_min_ms);
    let election_max_ms = a.election_max_ms.unwrap_or(node.election_max_ms);
    // Every flag the shared harness would otherwise set to the tests' values is given: the
    // nodes run with their own defaults but for the timing asked for.
    let flags: Vec<String> = [
        ("--heartbeat-ms", heartbeat_ms),
        ("--election-min-ms", election_min_ms),
        ("--election-max-ms", election_max_ms),
        ("--write-timeout-ms", node.write_timeout.as_millis() as u64),
        ("--checkpoint-every", node.checkpoint_every),
    ]
    .iter()
    .flat_map(|(f, v)| [f.to_string(), v.to_string()])
    .collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let mut c = Cluster::start_with(bin.clone(), flags);
        c.leader(&[1, 2, 3]).await;
        let load = Load::start(c.addrs.values().cloned().collect(), a.writers);
        let started = Instant::now();
        let mut gaps: BTreeMap<usize, Vec<(Duration, Duration)>> = BTreeMap::new();
        for t in 0..a.trials {
            for (i, f) in faults.iter().enumerate() {
                let (elected, gap) = trial(&mut c, &load, *f).await?;
                eprintln!(
                    "trial {} {}: a new leader after {} ms, the next acknowledged write after {} ms",
                    t + 1,
                    f.name(),
                    ms(elected),
                    ms(gap)
                );
                gaps.entry(i).or_default().push((elected, gap));
            }
        }
        let unacked = load.unacked_since(started);
        load.finish().await;
        let (index, digest) = c.converged(&[1, 2, 3], 0).await;
        println!(
            "{} trials per fault, {} writers (default client: first attempt deadline {} ms); nodes: heartbeat {} ms, election timeout {}-{} ms (the leader lease {} ms); {}",
            a.trials,
            a.writers,
            wal_raft::client::ATTEMPT_TIMEOUT.as_millis(),
            heartbeat_ms,
            election_min_ms,
            election_max_ms,
            election_max_ms,
            bin.display()
        );
        println!("| fault on the leader | next acknowledged write: p50 | max | min | a new leader: p50 | max |");
        println!("|---|---|---|---|---|---|");
        for (i, f) in faults.iter().enumerate() {
            let got = gaps.remove(&i).unwrap_or_default();
            let (acks, leaders) = (summary(got.iter().map(|g| g.1)), summary(got.iter().map(|g| g.0)));
            println!(
                "| {} | {} ms | {} ms | {} ms | {} ms | {} ms |",
                f.name(),
                ms(acks.0),
                ms(acks.1),
                ms(acks.2),
                ms(leaders.0),
                ms(leaders.1)
            );
        }
        println!(
            "writes not acknowledged (Indeterminate or Rejected at their deadline): {unacked}; the three agree at index {index}, digest {}",
            &digest[..16.min(digest.len())]
        );
        Ok(())
    })
}
