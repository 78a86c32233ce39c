//! `raft`: a single-node `wal-raft` cluster in this process, on 127.0.0.1 and a port the
//! system picks, its data directory DIR (the log in `DIR/log`, the snapshot in `DIR/sm`).
//!
//! The node starts with `initialize` (first creation of the log and of the membership), and
//! two phases of 50 `Create` commands go through the node's own client protocol; a write the
//! client reports `Committed { index }` (committed by the majority of one, hence durable, and
//! applied) is printed as `ack raft index=X i=I seed=S`: entity X is command I's. The node
//! snapshots every 40 entries and purges its log below the snapshot (keeping 8), claims its
//! digest every 16 entries (checkpoints in the log); between the phases a snapshot and a purge
//! are triggered and waited for, then the node is shut down and started again on the same
//! directory (a restart: new election, new term, so the log's epoch advances). Segments are
//! 64 KiB.
//!
//! The check: `walraft-node check`'s logic ([`wal_raft::check::check`]) must give CRC OK or
//! TORN_TAIL and, when anything is required, STATE CLEAN, replayed at least through the highest
//! acknowledged index; then the node must start on the image within 10 s, elect itself, apply
//! through that index within 20 s and serve, for each acknowledged command, a lookup of its
//! name giving entity X; then it is shut down. Every wait is bounded.

use crate::acks::{self, Ack, Acker};
use crate::check::{Checked, Failed};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::wire::WriteReply;
use wal_raft::node::{self, NodeConfig, RunningNode, Started};

const PER_PHASE: u64 = 50;
const START_TIMEOUT: Duration = Duration::from_secs(10);
const APPLY_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

fn config(dir: &Path, initialize: bool) -> NodeConfig {
    let mut c = NodeConfig::new(1, "127.0.0.1:0".into(), BTreeMap::new(), dir.to_path_buf());
    c.initialize = initialize;
    c.heartbeat_ms = 50;
    c.election_min_ms = 150;
    c.election_max_ms = 300;
    c.snapshot_every = 40;
    c.keep_logs = 8;
    c.checkpoint_every = 16;
    c.write_timeout = Duration::from_secs(10);
    c.segment_len_bytes = crate::SEGMENT_LEN;
    c
}

async fn bounded<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(limit, f).await.map_err(|_| format!("{what} took more than {limit:?}"))
}

async fn start(dir: &Path, initialize: bool) -> Result<RunningNode, String> {
    let started = bounded("starting the node", START_TIMEOUT, node::start(config(dir, initialize))).await?;
    match started.map_err(|e| format!("starting the node on {}: {e}", dir.display()))? {
        Started::Running(n) => Ok(n),
        Started::Refused { why } => Err(format!("the node refused to start: {why}")),
        Started::Fenced { why } => Err(format!("the node is fenced: {why}")),
    }
}

async fn stop(n: RunningNode) -> Result<(), String> {
    bounded("stopping the node", STOP_TIMEOUT, n.shutdown()).await?.map_err(|e| format!("shutdown: {e}"))
}

/// Polls the node's metrics until `ready` holds (a leader, an applied index), within `limit`.
async fn until(
    client: &Client,
    addr: &str,
    limit: Duration,
    what: &str,
    ready: impl Fn(&wal_raft::net::wire::NodeMetrics) -> bool,
) -> Result<wal_raft::net::wire::NodeMetrics, String> {
    let deadline = Instant::now() + limit;
    let mut last = String::from("no metrics");
    while Instant::now() < deadline {
        match client.metrics(addr).await {
            Ok(m) if ready(&m) => return Ok(m),
            Ok(m) => last = format!("{m:?}"),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("{what} not reached within {limit:?}; last: {last}"))
}

fn client(addr: &str) -> Client {
    let mut c = Client::new(vec![addr.to_string()]);
    c.write_deadline = Duration::from_secs(15);
    c
}

async fn phase(n: &RunningNode, seed: u64, from: u64, acker: &Acker) -> Result<(), String> {
    let addr = n.addr.to_string();
    let c = client(&addr);
    until(&c, &addr, START_TIMEOUT, "leadership", |m| m.state == "Leader").await?;
    for i in from..from + PER_PHASE {
        match c.write_with_id(&acks::command(seed, i), i + 1).await {
            WriteReply::Committed { index, outcome: wal_raft::Response::Done(_) } => {
                acker.say(&Ack::Raft { index, i, seed })?;
            }
            other => return Err(format!("command {i}: {other:?}")),
        }
    }
    Ok(())
}

async fn workload(dir: &Path, seed: u64, acker: &Acker) -> Result<(), String> {
    let n = start(dir, true).await?;
    phase(&n, seed, 0, acker).await?;
    let addr = n.addr.to_string();
    let c = client(&addr);
    let applied = c.metrics(&addr).await.map_err(|e| format!("metrics: {e}"))?.last_applied;
    // openraft ignores a trigger while a snapshot is being built (the one its policy started at
    // 40 entries may still be running under load), so trigger again until one covers `applied`.
    let deadline = Instant::now() + APPLY_TIMEOUT;
    let m = loop {
        n.raft.trigger().snapshot().await.map_err(|e| format!("triggering a snapshot: {e}"))?;
        match until(&c, &addr, Duration::from_secs(2), "a snapshot", |m| m.snapshot >= applied).await {
            Ok(m) => break m,
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
    };
    if let Some(upto) = m.snapshot {
        n.raft.trigger().purge_log(upto).await.map_err(|e| format!("triggering a purge: {e}"))?;
        until(&c, &addr, APPLY_TIMEOUT, "the purge", |m| m.purged >= Some(upto)).await?;
    }
    stop(n).await?;
    let n = start(dir, false).await?;
    phase(&n, seed, PER_PHASE, acker).await?;
    stop(n).await
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting a runtime: {e}"))
}

pub fn run(dir: &Path, seed: u64, acker: &Acker) -> Result<(), String> {
    let rt = runtime()?;
    let r = rt.block_on(workload(dir, seed, acker));
    rt.shutdown_timeout(STOP_TIMEOUT);
    r
}

/// Starts the node on the image, waits until it applied `through`, and looks every required
/// command up by name.
async fn restart_and_read(dir: &Path, required: &BTreeMap<u64, (u64, u64)>) -> Result<Vec<String>, String> {
    let n = start(dir, false).await?;
    let addr = n.addr.to_string();
    let c = client(&addr);
    let through = required.keys().next_back().copied();
    let mut fails = Vec::new();
    // With nothing acknowledged the membership may never have become durable: the node must
    // come up and serve, not lead.
    let applied = until(&c, &addr, APPLY_TIMEOUT, "leadership and the acknowledged index", |m| {
        through.is_none() || (m.state == "Leader" && m.last_applied >= through)
    })
    .await;
    match applied {
        Err(e) => fails.push(format!("FAIL: the restarted node: {e}")),
        Ok(_) => {
            for (&index, &(i, seed)) in required {
                let name = acks::command_name(seed, i);
                match c.lookup(&addr, None, &name).await {
                    Ok(Some(v)) if v.id == index => {}
                    Ok(Some(v)) => {
                        fails.push(format!("FAIL: {name} (acknowledged at index {index}) is entity {}", v.id))
                    }
                    Ok(None) => {
                        fails.push(format!("FAIL: {name} (acknowledged at index {index}) is missing"))
                    }
                    Err(e) => fails.push(format!("FAIL: looking up {name}: {e}")),
                }
            }
        }
    }
    stop(n).await?;
    Ok(fails)
}

pub fn check(dir: &Path, acks: &[Ack]) -> Checked {
    let mut required = BTreeMap::new();
    for a in acks {
        match *a {
            Ack::Raft { index, i, seed } => required.insert(index, (i, seed)),
            _ => return Err(Failed::Setup(format!("{a} does not belong to a Raft node's acks"))),
        };
    }
    if !dir.join("log").exists() {
        return crate::check::no_log("raft", dir, acks.len(), required.len(), "writes were");
    }
    // One scan: the node check's CRC verdict also says whether the directory holds a log.
    let c = wal_raft::check::check(dir);
    if matches!(c.crc, "NO_LOG" | "INCOMPLETE_CREATE") {
        return crate::check::no_log("raft", dir, acks.len(), required.len(), "writes were");
    }
    let mut fails = Vec::new();
    if c.crc_code > 1 || c.exit_code() > 1 {
        fails.push(format!("FAIL: walraft-node check exit {}: {}", c.exit_code(), c.summary()));
    }
    let through = required.keys().next_back().copied();
    if through.is_some() {
        if c.state.word() != "CLEAN" {
            fails.push(format!("FAIL: state verdict {}, CLEAN expected: {}", c.state.word(), c.summary()));
        }
        if c.last.max(c.base) < through {
            fails.push(format!(
                "FAIL: index {} was acknowledged, the log replays through {:?} (snapshot {:?})",
                through.unwrap_or(0),
                c.last,
                c.base
            ));
        }
    }
    if !fails.is_empty() {
        return Err(Failed::Violations(fails));
    }
    let rt = runtime()?;
    let read = rt.block_on(restart_and_read(dir, &required));
    rt.shutdown_timeout(STOP_TIMEOUT);
    let fails =
        read.map_err(|e| Failed::Violations(vec![format!("FAIL: restarting the node on the image: {e}")]))?;
    if !fails.is_empty() {
        return Err(Failed::Violations(fails));
    }
    Ok(format!(
        "ok raft required={} verdict={} state={} last={} snapshot={} entities={}",
        acks.len(),
        c.crc,
        c.state.word(),
        c.last.map_or("-".into(), |l| l.to_string()),
        c.base.map_or("-".into(), |l| l.to_string()),
        c.entities.map_or("-".into(), |l| l.to_string())
    ))
}
