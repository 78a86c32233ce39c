//! 3-node replicated commit (three `walraft-node` processes on loopback, writes through the
//! TCP client API, acknowledged when committed by a majority and applied) next to the
//! single-node commit pipeline (`wal_state::pipeline`, durable ⇒ committed, applied), and next to
//! the same three nodes on raft-log's log store (`raft_log_store.rs`: the same node code,
//! openraft, state machine, network and clients; this benchmark's own binary runs those nodes,
//! `--raft-log-node`), in the same run, with the same entries: about 256-byte catalog creates
//! under one metalake.
//!
//! Workloads: `*-1` one writer waiting for each write; `*-8` and `*-64` eight and sixty-four
//! writers, each waiting for its own. Rounds interleave the workloads in a rotating order (the
//! disk drifts between a fast and a slow regime for minutes); medians over the rounds, latency
//! percentiles from the median round. Ratios: replicated / pipeline at the same concurrency,
//! and this crate's store / raft-log's.
//!
//! Before each round, the device's own fdatasync latency (a 4 KiB rewrite + fdatasync loop for
//! 0.5 s) is measured and printed beside the table.
//!
//! `cargo bench -p wal-raft --bench replicated` (about 2 minutes; release build).

mod raft_log_store;

use catalog::{Catalog, Command, EntityId, EntityKind};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command as Proc, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::wire::WriteReply;
use wal_raft::node::{NodeConfig, Started};
use wal_raft::{IoStats, Response};
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};

/// Under `cargo test` (cargo passes `--bench` only from `cargo bench`) the benchmark runs once
/// at a tiny size: CI runs its code, and its numbers mean nothing.
/// Decided once: the timed loops ask it.
fn smoke() -> bool {
    static SMOKE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SMOKE.get_or_init(|| !std::env::args().any(|a| a == "--bench"))
}

/// The timed length of one workload run, and the number of interleaved rounds.
fn round_len() -> Duration {
    Duration::from_millis(if smoke() { 100 } else { 2000 })
}

fn rounds() -> usize {
    if smoke() {
        1
    } else {
        3
    }
}
const BIN: &str = env!("CARGO_BIN_EXE_walraft-node");

/// `round` and `writers` keep names unique across the workloads that share the cluster.
fn cmd(parent: u64, t: usize, n: u64, round: usize, writers: usize) -> Command {
    Command::Create {
        parent: Some(EntityId(parent)),
        kind: EntityKind::Catalog,
        name: format!("c{round}-{writers}-{t}-{n}"),
        props: vec![b'p'; 200],
    }
}

struct Run {
    ops: f64,
    lat_us: Vec<f64>,
    /// Replicated rounds: each node's role and its log writer's counters over the round.
    io: Vec<(String, IoStats)>,
}

async fn io_stats(c: &Cluster) -> Vec<(String, IoStats)> {
    let admin = Client::new(c.addrs.clone());
    let mut v = Vec::new();
    for a in &c.addrs {
        let m = admin.metrics(a).await.unwrap();
        v.push((m.state, m.io));
    }
    v
}

fn delta(a: &IoStats, b: &IoStats) -> IoStats {
    IoStats {
        rounds: b.rounds - a.rounds,
        syncs: b.syncs - a.syncs,
        sync_us: b.sync_us - a.sync_us,
        appends: b.appends - a.appends,
        entries: b.entries - a.entries,
        votes: b.votes - a.votes,
        committed: b.committed - a.committed,
        truncates: b.truncates - a.truncates,
        purges: b.purges - a.purges,
        reads: b.reads - a.reads,
        read_wait_us: b.read_wait_us - a.read_wait_us,
        cached_reads: b.cached_reads - a.cached_reads,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    s.get(i).copied().unwrap_or(0.0)
}

fn pipeline_round(dir: &std::path::Path, writers: usize, round: usize) -> Run {
    let _ = std::fs::remove_dir_all(dir);
    let (p, _) = Pipeline::open(dir, PipelineOptions::default(), Hooks::default(), Catalog::new).unwrap();
    let lake =
        Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] };
    let parent = p.submit(&lake.encode(), None).unwrap().wait().unwrap().lsn.0;
    let p = Arc::new(p);
    let start = Instant::now();
    let hs: Vec<_> = (0..writers)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut n = 0;
                while start.elapsed() < round_len() {
                    let at = Instant::now();
                    p.submit(&cmd(parent, t, n, round, writers).encode(), None).unwrap().wait().unwrap();
                    lat.push(at.elapsed().as_secs_f64() * 1e6);
                    n += 1;
                }
                lat
            })
        })
        .collect();
    let lat_us: Vec<f64> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let ops = lat_us.len() as f64 / start.elapsed().as_secs_f64();
    Arc::try_unwrap(p).ok().unwrap().close().unwrap();
    Run { ops, lat_us, io: Vec::new() }
}

struct Cluster {
    children: Vec<Child>,
    addrs: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Which log store a cluster's nodes run on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    /// This crate's (`walraft-node run`).
    Ours,
    /// raft-log's (this binary, `--raft-log-node`).
    RaftLog,
}

fn cluster(dir: &std::path::Path, store: Store) -> Cluster {
    let ls: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let addrs: Vec<String> = ls.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    drop(ls);
    let mut c = Cluster { children: Vec::new(), addrs: addrs.clone() };
    let ids: BTreeMap<u64, String> = (1..=3).zip(addrs).collect();
    for (id, addr) in &ids {
        let mut p = match store {
            Store::Ours => {
                let mut p = Proc::new(BIN);
                p.args(["run", "--plaintext"]);
                p
            }
            Store::RaftLog => {
                let mut p = Proc::new(std::env::current_exe().unwrap());
                p.arg(RAFT_LOG_NODE);
                p
            }
        };
        p.args(["--id", &id.to_string(), "--listen", addr, "--data"])
            .arg(dir.join(format!("n{id}")))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (o, a) in &ids {
            if o != id {
                p.arg("--peer").arg(format!("{o}={a}"));
            }
        }
        if *id == 1 {
            p.arg("--initialize");
        }
        c.children.push(p.spawn().unwrap());
    }
    c
}

/// The argument that makes this binary a node on raft-log's store.
const RAFT_LOG_NODE: &str = "--raft-log-node";

/// Runs a node on raft-log's store until killed: `--id N --listen A --data D [--peer M=B]...
/// [--initialize]`, every other setting [`NodeConfig::new`]'s (what `walraft-node run` uses
/// by default), plaintext on loopback.
fn raft_log_node(args: &[String]) -> ! {
    let mut it = args.iter();
    let (mut id, mut listen, mut data, mut peers, mut init) =
        (0, String::new(), None, BTreeMap::new(), false);
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--id" => id = val().parse().unwrap(),
            "--listen" => listen = val(),
            "--data" => data = Some(std::path::PathBuf::from(val())),
            "--peer" => {
                let v = val();
                let (i, addr) = v.split_once('=').unwrap();
                peers.insert(i.parse().unwrap(), addr.to_string());
            }
            "--initialize" => init = true,
            _ => {}
        }
    }
    let data = data.expect("--data");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let log = raft_log_store::RaftLogStore::open(&data.join("raft-log")).unwrap();
        let mut cfg = NodeConfig::new(id, listen, peers, data);
        cfg.initialize = init;
        let _node = match wal_raft::node::start_on(cfg, log).await.unwrap() {
            Started::Running(n) => n,
            _ => panic!("a node on raft-log did not start"),
        };
        std::future::pending::<()>().await;
    });
    unreachable!()
}

async fn raft_round(c: &Cluster, parent: u64, writers: usize, round: usize) -> Run {
    let before = io_stats(c).await;
    let start = Instant::now();
    let hs: Vec<_> = (0..writers)
        .map(|t| {
            let client = Client::new(c.addrs.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut n = 0;
                while start.elapsed() < round_len() {
                    let at = Instant::now();
                    let r = client.write(&cmd(parent, t, n, round, writers)).await;
                    // A retry (the first attempt timed out under load) that finds its request
                    // applied is this write's commit too: `Duplicate` of its own index.
                    assert!(
                        matches!(
                            r,
                            WriteReply::Committed {
                                outcome: Response::Done(_) | Response::Duplicate { .. },
                                ..
                            }
                        ),
                        "{r:?}"
                    );
                    lat.push(at.elapsed().as_secs_f64() * 1e6);
                    n += 1;
                }
                lat
            })
        })
        .collect();
    let mut lat_us = Vec::new();
    for h in hs {
        lat_us.extend(h.await.unwrap());
    }
    let ops = lat_us.len() as f64 / start.elapsed().as_secs_f64();
    let after = io_stats(c).await;
    let io = before.iter().zip(&after).map(|((_, a), (role, b))| (role.clone(), delta(a, b))).collect();
    Run { ops, lat_us, io }
}

/// How long each round's device probe runs.
fn probe_len() -> Duration {
    Duration::from_millis(if smoke() { 50 } else { 500 })
}

/// The device's fdatasync latency right now: 4 KiB written at the start of a file in `dir`
/// and fdatasynced, again and again for [`probe_len`]; each latency in microseconds.
fn fdatasync_probe(dir: &std::path::Path) -> Vec<f64> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("fdatasync-probe");
    let f =
        std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&path).unwrap();
    let block = [0x5au8; 4096];
    f.write_all_at(&block, 0).unwrap();
    f.sync_all().unwrap();
    let (start, mut lat) = (Instant::now(), Vec::new());
    while start.elapsed() < probe_len() {
        let at = Instant::now();
        f.write_all_at(&block, 0).unwrap();
        f.sync_data().unwrap();
        lat.push(at.elapsed().as_secs_f64() * 1e6);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat
}

/// The first write of a new cluster (a metalake every later write goes under): its index.
fn first_write(rt: &tokio::runtime::Runtime, c: &Cluster) -> u64 {
    let boot = Client::new(c.addrs.clone());
    let lake =
        Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] };
    match rt.block_on(boot.write(&lake)) {
        WriteReply::Committed { index, outcome: Response::Done(_) } => index,
        other => panic!("the cluster did not take the first write: {other:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(RAFT_LOG_NODE) {
        raft_log_node(&args[2..]);
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ours = cluster(&d.path().join("raft"), Store::Ours);
    let theirs = cluster(&d.path().join("raft-log"), Store::RaftLog);
    let parents = [first_write(&rt, &ours), first_write(&rt, &theirs)];
    // Each concurrency: the pipeline, this crate's store, raft-log's. `REPLICATED_ONLY=a,b`
    // keeps only the workloads named (to profile one; ratios print where both sides ran).
    let only = std::env::var("REPLICATED_ONLY").ok();
    let work: Vec<(String, usize)> = [1, 8, 64]
        .iter()
        .flat_map(|&n| ["pipeline", "raft3", "raftlog3"].map(|w| (format!("{w}-{n}"), n)))
        .filter(|(name, _)| only.as_ref().is_none_or(|o| o.split(',').any(|w| w == name)))
        .collect();
    let mut results: Vec<Vec<Run>> = (0..work.len()).map(|_| Vec::new()).collect();
    let mut probes: Vec<Vec<f64>> = Vec::new();
    for round in 0..rounds() {
        probes.push(fdatasync_probe(d.path()));
        for k in 0..work.len() {
            let i = (k + round) % work.len();
            let (name, writers) = (&work[i].0, work[i].1);
            let r = if name.starts_with("pipeline") {
                pipeline_round(&d.path().join(name), writers, round)
            } else if name.starts_with("raftlog") {
                rt.block_on(raft_round(&theirs, parents[1], writers, round))
            } else {
                rt.block_on(raft_round(&ours, parents[0], writers, round))
            };
            results[i].push(r);
        }
    }
    drop(ours);
    drop(theirs);
    // The device itself, once per round before the workloads: the median round's figures.
    probes.sort_by(|a, b| percentile(a, 0.5).total_cmp(&percentile(b, 0.5)));
    if let Some(p) = probes.get(probes.len() / 2) {
        println!(
            "device: 4 KiB pwrite + fdatasync, {} in {:?}: p50 {:.0} us, p99 {:.0} us (median of {} rounds)",
            p.len(),
            probe_len(),
            percentile(p, 0.5),
            percentile(p, 0.99),
            probes.len()
        );
    }
    println!(
        "replicated: ~256-byte catalog creates, {} interleaved rounds of {:?}, medians",
        rounds(),
        round_len()
    );
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12}",
        "workload", "median/s", "min/s", "max/s", "p50 us", "p99 us", "p999 us", "vs pipeline", "vs raft-log"
    );
    let meds: Vec<f64> =
        results.iter().map(|v| median(&mut v.iter().map(|r| r.ops).collect::<Vec<_>>())).collect();
    for (i, (name, _)) in work.iter().enumerate() {
        let v = &results[i];
        let ops: Vec<f64> = v.iter().map(|r| r.ops).collect();
        let (lo, hi) =
            (ops.iter().cloned().fold(f64::MAX, f64::min), ops.iter().cloned().fold(0.0, f64::max));
        let mid =
            v.iter().min_by(|a, b| (a.ops - meds[i]).abs().total_cmp(&(b.ops - meds[i]).abs())).unwrap();
        let n = work[i].1;
        let ratio = |other: &str| {
            let at = work.iter().position(|(w, _)| *w == format!("{other}-{n}"));
            at.map_or("-".into(), |j| format!("{:.2}x", meds[i] / meds[j]))
        };
        let (vs_pipeline, vs_raft_log) = match name.split('-').next() {
            Some("raft3") => (ratio("pipeline"), ratio("raftlog3")),
            Some("raftlog3") => (ratio("pipeline"), "-".into()),
            _ => ("-".into(), "-".into()),
        };
        println!(
            "{name:<12} {:>9.0} {lo:>9.0} {hi:>9.0} {:>9.0} {:>9.0} {:>9.0} {vs_pipeline:>12} {vs_raft_log:>12}",
            meds[i],
            percentile(&mid.lat_us, 0.5),
            percentile(&mid.lat_us, 0.99),
            percentile(&mid.lat_us, 0.999)
        );
    }
    // Where the fdatasyncs go (the median round of each replicated workload): per node, syncs
    // per acknowledged commit, the share of them carrying a committed-id record, entries per
    // append call, and the mean sync time.
    for (i, (name, _)) in work.iter().enumerate() {
        let v = &results[i];
        let Some(mid) = v.iter().min_by(|a, b| (a.ops - meds[i]).abs().total_cmp(&(b.ops - meds[i]).abs()))
        else {
            continue;
        };
        if name.starts_with("raftlog") {
            // raft-log's store keeps no such counters.
            continue;
        }
        let commits = mid.lat_us.len().max(1) as f64;
        for (role, s) in &mid.io {
            println!(
                "  {name:<10} {role:<9} syncs/commit {:>5.2}  committed-records/commit {:>5.2}  entries/append {:>6.2}  reads/commit {:>5.2} (mean wait {:>5} us, {:>5.2} from memory)  mean sync {:>6} us",
                s.syncs as f64 / commits,
                s.committed as f64 / commits,
                s.entries as f64 / s.appends.max(1) as f64,
                s.reads as f64 / commits,
                s.read_wait_us / s.reads.max(1),
                s.cached_reads as f64 / commits,
                s.sync_us / s.syncs.max(1)
            );
        }
    }
}
