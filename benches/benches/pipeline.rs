//! Submit → applied through the commit pipeline (`wal_state::pipeline`, the reference catalog as the
//! state machine) next to plain durable appends through the I/O thread (`AsyncWal`) with the
//! same entry bytes, in the same run: what the canonical order (pre-hooks, commit, apply on
//! its own thread, notify) costs over the log alone.
//!
//! Workloads (about 256-byte entries: a catalog `Create` with 200 bytes of properties):
//! - `*-1`: one submitter waiting for each entry;
//! - `*-8`: eight submitters, each waiting for its own;
//! - `*-w64`: one submitter keeping 64 entries in flight.
//!
//! `log-*` waits for durability, `pipeline-*` for the apply outcome. Rounds interleave the
//! workloads in a rotating order (the disk drifts between regimes); medians are reported with
//! the submit→resolved latency percentiles of the median round.
//!
//! `cargo bench -p wal-benches --bench pipeline` (about a minute).

use catalog::{Catalog, Command, EntityId, EntityKind};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Options, Wal};
use wal_benches::{median, percentile, scaled};
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};
use wal_state::{EntryKind, Envelope};

/// The timed length of one workload run, and the number of interleaved rounds (tiny in a smoke
/// run, see `wal_benches::smoke`).
fn round_len() -> Duration {
    scaled(Duration::from_millis(1500), Duration::from_millis(30))
}

fn rounds() -> usize {
    scaled(5, 1)
}

fn body(t: usize, n: u64) -> Vec<u8> {
    Command::Create {
        parent: Some(EntityId(1)),
        kind: EntityKind::Catalog,
        name: format!("c{t}-{n}"),
        props: vec![b'p'; 200],
    }
    .encode()
}

struct Run {
    ops: f64,
    lat_us: Vec<f64>,
}

fn log_opts() -> Options {
    Options { segment_len_bytes: scaled(64 << 20, 8 << 20), create: true, ..Options::default() }
}

/// Runs `threads` submitters for one round; `window` entries in flight per submitter.
/// `submit(t, n)` enqueues and returns a waiter that blocks until resolved.
fn drive<W: FnOnce() + Send + 'static>(
    threads: usize,
    window: usize,
    submit: Arc<dyn Fn(usize, u64) -> W + Send + Sync>,
) -> Run {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let submit = submit.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut inflight = VecDeque::new();
                let mut n = 0u64;
                while start.elapsed() < round_len() {
                    while inflight.len() < window {
                        inflight.push_back((Instant::now(), submit(t, n)));
                        n += 1;
                    }
                    let (at, w) = inflight.pop_front().unwrap();
                    w();
                    lat.push(at.elapsed().as_secs_f64() * 1e6);
                }
                for (at, w) in inflight {
                    w();
                    lat.push(at.elapsed().as_secs_f64() * 1e6);
                }
                lat
            })
        })
        .collect();
    let lat_us: Vec<f64> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    Run { ops: lat_us.len() as f64 / start.elapsed().as_secs_f64(), lat_us }
}

fn log_round(dir: &std::path::Path, threads: usize, window: usize) -> Run {
    let _ = std::fs::remove_dir_all(dir);
    let (wal, _) = Wal::open(dir, log_opts()).unwrap();
    let log = Arc::new(AsyncWal::start(wal, AsyncOptions::default()).unwrap());
    let l = log.clone();
    let run = drive(
        threads,
        window,
        Arc::new(move |t, n| {
            let payload = Envelope::encode(EntryKind::Command, None, &body(t, n));
            let ticket = l.append(Epoch(0), payload, Durability::Durable).unwrap();
            move || {
                ticket.wait().unwrap();
            }
        }),
    );
    drop(Arc::try_unwrap(log).ok().unwrap().close());
    run
}

fn pipeline_round(dir: &std::path::Path, threads: usize, window: usize) -> Run {
    let _ = std::fs::remove_dir_all(dir);
    let opts = PipelineOptions { log: log_opts(), ..PipelineOptions::default() };
    let (p, _) = Pipeline::open(dir, opts, Hooks::default(), Catalog::new).unwrap();
    let lake =
        Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] };
    let first = p.submit(&lake.encode(), None).unwrap().wait().unwrap();
    assert_eq!(first.lsn.0, 1, "the metalake's id must be 1");
    let p = Arc::new(p);
    let q = p.clone();
    let run = drive(
        threads,
        window,
        Arc::new(move |t, n| {
            let promise = q.submit(&body(t, n), None).unwrap();
            move || {
                promise.wait().unwrap();
            }
        }),
    );
    let count = p.read(|c| c.len());
    assert_eq!(count, run.lat_us.len() + 1, "every create must have applied");
    Arc::try_unwrap(p).ok().unwrap().close().unwrap();
    run
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let work: [(&str, usize, usize); 6] = [
        ("log-1", 1, 1),
        ("pipeline-1", 1, 1),
        ("log-8", 8, 1),
        ("pipeline-8", 8, 1),
        ("log-w64", 1, 64),
        ("pipeline-w64", 1, 64),
    ];
    let mut results: Vec<Vec<Run>> = (0..work.len()).map(|_| Vec::new()).collect();
    for round in 0..rounds() {
        for k in 0..work.len() {
            let i = (k + round) % work.len();
            let (name, threads, window) = work[i];
            let dir = d.path().join(name);
            let r = if name.starts_with("log") {
                log_round(&dir, threads, window)
            } else {
                pipeline_round(&dir, threads, window)
            };
            results[i].push(r);
        }
    }
    println!(
        "pipeline: ~256-byte catalog creates, {} interleaved rounds of {:?}, medians",
        rounds(),
        round_len()
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>9} {:>9} {:>12}",
        "workload", "median/s", "min/s", "max/s", "p50 us", "p99 us", "vs log"
    );
    let meds: Vec<f64> =
        results.iter().map(|v| median(&mut v.iter().map(|r| r.ops).collect::<Vec<_>>())).collect();
    for (i, (name, _, _)) in work.iter().enumerate() {
        let v = &results[i];
        let ops: Vec<f64> = v.iter().map(|r| r.ops).collect();
        let (lo, hi) =
            (ops.iter().cloned().fold(f64::MAX, f64::min), ops.iter().cloned().fold(0.0, f64::max));
        let mid = v
            .iter()
            .min_by(|a, b| (a.ops - meds[i]).abs().partial_cmp(&(b.ops - meds[i]).abs()).unwrap())
            .unwrap();
        let vs =
            if name.starts_with("pipeline") { format!("{:.2}x", meds[i] / meds[i - 1]) } else { "-".into() };
        println!(
            "{name:<14} {:>10.0} {lo:>10.0} {hi:>10.0} {:>9.0} {:>9.0} {vs:>12}",
            meds[i],
            percentile(&mid.lat_us, 0.5),
            percentile(&mid.lat_us, 0.99)
        );
    }
}
