//! Durable appends through the I/O thread (`AsyncWal`) on each real-file backend, against raw
//! preallocated `pwrite` + `fdatasync` loops measured in the same run:
//!
//! - `N waiters`: N submitters each appending a 256-byte entry and waiting for it (1, 8, 64);
//! - `window 64`: one submitter keeping 64 entries of 256 bytes in flight (it waits for the
//!   oldest only when 64 are unresolved), every entry durable;
//! - `1MiB window 2MiB`: one submitter keeping 32 entries of 64 KiB (2 MiB) in flight, so a
//!   batch of about 1 MiB is written while the previous one syncs; reported in MiB/s against a
//!   raw loop writing 1 MiB per fdatasync.
//!
//! Backends: `uring` (writes and fdatasyncs through io_uring), `uring-inline` (pwrite by the I/O
//! thread, fdatasyncs through io_uring), `portable` (pwrite + fdatasync run by the I/O thread
//! itself: no overlap possible) and `sync-thread` (pwrite by the I/O thread, each fdatasync on a
//! helper thread). With the last two of each, the next batch is written during a sync.
//!
//! The disk switches between a fast and a slow regime, sometimes within seconds, so every
//! engine run is paired with raw-loop probes of the same entry size right before and right
//! after it, and its ratio is taken to their mean. A pair whose two probes differ by more than
//! 2x (the regime moved during the run) is dropped. Rounds run every workload in a rotating
//! order; reported are the median ratio over the kept pairs, the median absolute rate, and the
//! mean batch and share of batches written while a sync was in flight (last round).
//!
//! `cargo bench -p wal-benches --bench group_commit` (about six minutes);
//! `GROUP_COMMIT_ONLY=<backend>[,<backend>...]` runs only those backends and
//! `GROUP_COMMIT_ROUNDS=<n>` sets the number of rounds.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wal::storage::{FileStorage, Storage, UringStorage};
use wal::{AsyncOptions, AsyncWal, Backend, Durability, Epoch, Options, Wal};
use wal_benches::{median, scaled};

const ENTRY: usize = 256;
const BIG_ENTRY: usize = 64 << 10;
const ROUNDS: usize = 5;

/// The timed length of one workload run (tiny in a smoke run).
fn round_len() -> Duration {
    scaled(Duration::from_millis(1500), Duration::from_millis(30))
}

/// The length of each raw-loop probe.
fn probe_len() -> Duration {
    scaled(Duration::from_millis(500), Duration::from_millis(10))
}

fn env_rounds() -> usize {
    std::env::var("GROUP_COMMIT_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(scaled(ROUNDS, 1))
}

/// The raw loop's file: 64 MiB, written and synced once, overwritten in place (as a log's
/// pre-zeroed segment is).
struct RawFile {
    f: std::fs::File,
    len: u64,
}

impl RawFile {
    fn new(dir: &Path) -> RawFile {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("raw");
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let len = scaled(64u64 << 20, 8 << 20);
        f.write_all_at(&vec![0u8; len as usize], 0).unwrap();
        f.sync_data().unwrap();
        RawFile { f, len }
    }

    /// One pwrite of `len` bytes + fdatasync at a time for `dur`; returns (syncs/s, MiB/s).
    fn run(&self, len: usize, dur: Duration) -> (f64, f64) {
        let buf = vec![7u8; len];
        let (start, mut n, mut off) = (Instant::now(), 0u64, 0u64);
        while start.elapsed() < dur {
            self.f.write_all_at(&buf, off).unwrap();
            self.f.sync_data().unwrap();
            off = (off + len as u64) % (self.len - len as u64);
            n += 1;
        }
        let s = start.elapsed().as_secs_f64();
        (n as f64 / s, (n * len as u64) as f64 / s / (1 << 20) as f64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Be {
    Uring,
    UringInline,
    Portable,
    SyncThread,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Load {
    /// Threads each waiting for their own entry.
    Waiters(usize),
    /// One submitter with this many entries of this size in flight.
    Window { entry: usize, window: usize },
}

struct Outcome {
    ops: f64,
    mib: f64,
    /// Mean entries and bytes per batch, and the share of batches written during a sync.
    batch_entries: f64,
    batch_kib: f64,
    overlap: f64,
}

fn storage(dir: &Path, be: Be) -> Arc<dyn Storage> {
    match be {
        Be::Uring => Arc::new(UringStorage::new(dir, true).unwrap()),
        Be::UringInline => Arc::new(UringStorage::with_inline_writes(dir, true).unwrap()),
        Be::Portable => Arc::new(FileStorage::new(dir, true).unwrap()),
        Be::SyncThread => Arc::new(FileStorage::with_sync_thread(dir, true).unwrap()),
    }
}

fn engine(dir: &Path, be: Be, load: Load) -> Outcome {
    let _ = std::fs::remove_dir_all(dir);
    let opts = Options {
        segment_len_bytes: scaled(64 << 20, 8 << 20),
        backend: Backend::Portable,
        ..Options::default()
    };
    let (wal, _) = Wal::open_with(storage(dir, be), opts).unwrap();
    let log = Arc::new(AsyncWal::start(wal, AsyncOptions::default()).unwrap());
    let start = Instant::now();
    let (n, bytes): (u64, u64) = match load {
        Load::Waiters(threads) => {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    let log = log.clone();
                    std::thread::spawn(move || {
                        let mut n = 0u64;
                        while start.elapsed() < round_len() {
                            log.append(Epoch(0), vec![7u8; ENTRY], Durability::Durable)
                                .unwrap()
                                .wait()
                                .unwrap();
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            let n: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
            (n, n * ENTRY as u64)
        }
        Load::Window { entry, window } => {
            let mut inflight = VecDeque::with_capacity(window);
            let mut n = 0u64;
            while start.elapsed() < round_len() {
                if inflight.len() == window {
                    let t: wal::Ticket = inflight.pop_front().unwrap();
                    t.wait().unwrap();
                    n += 1;
                }
                inflight.push_back(log.append(Epoch(0), vec![7u8; entry], Durability::Durable).unwrap());
            }
            // Only entries acknowledged within the round count.
            (n, n * entry as u64)
        }
    };
    let s = start.elapsed().as_secs_f64();
    let st = log.stats();
    Arc::try_unwrap(log).ok().unwrap().close().unwrap();
    let _ = std::fs::remove_dir_all(dir);
    let batches = st.batches.max(1) as f64;
    Outcome {
        ops: n as f64 / s,
        mib: bytes as f64 / s / (1 << 20) as f64,
        batch_entries: st.appends as f64 / batches,
        batch_kib: st.payload_bytes as f64 / batches / 1024.0,
        overlap: st.batches_during_sync as f64 / batches,
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let only = std::env::var("GROUP_COMMIT_ONLY").ok();
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let raw = RawFile::new(&d.path().join("raw"));
    let loads = [
        ("1 waiter", Load::Waiters(1)),
        ("8 waiters", Load::Waiters(8)),
        ("64 waiters", Load::Waiters(64)),
        ("window 64", Load::Window { entry: ENTRY, window: 64 }),
        ("1MiB window 2MiB", Load::Window { entry: BIG_ENTRY, window: 32 }),
    ];
    let backends = [
        ("uring", Be::Uring),
        ("uring-inline", Be::UringInline),
        ("portable", Be::Portable),
        ("sync-thread", Be::SyncThread),
    ];
    let mut jobs: Vec<(String, Load, Be)> = Vec::new();
    for (ln, l) in loads {
        for (bn, b) in backends {
            let name = format!("{bn} {ln}");
            if only.as_ref().is_none_or(|o| o.split(',').any(|o| name.starts_with(&format!("{o} ")))) {
                jobs.push((name, l, b));
            }
        }
    }
    let big = |l: Load| matches!(l, Load::Window { entry, .. } if entry == BIG_ENTRY);
    // Per job: (ratio, engine rate, raw rate) of each kept pair; dropped pairs counted.
    let mut pairs: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); jobs.len()];
    let mut dropped = vec![0usize; jobs.len()];
    let mut last: Vec<Option<Outcome>> = (0..jobs.len()).map(|_| None).collect();
    let mut raws: Vec<f64> = Vec::new();
    let mut raws_big: Vec<f64> = Vec::new();
    let started = Instant::now();
    let rounds = env_rounds();
    for round in 0..rounds {
        for k in 0..jobs.len() {
            let i = (k + round * 3) % jobs.len(); // rotate the order between rounds
            let (_, l, b) = jobs[i].clone();
            let len = if big(l) { 1 << 20 } else { ENTRY };
            let pick = |r: (f64, f64)| if big(l) { r.1 } else { r.0 };
            let before = pick(raw.run(len, probe_len()));
            let o = engine(&d.path().join(format!("w{i}")), b, l);
            let after = pick(raw.run(len, probe_len()));
            let base = (before + after) / 2.0;
            let rate = if big(l) { o.mib } else { o.ops };
            if big(l) {
                raws_big.extend([before, after])
            } else {
                raws.extend([before, after])
            }
            if before.max(after) > 2.0 * before.min(after) {
                dropped[i] += 1;
            } else {
                pairs[i].push((rate / base, rate, base));
            }
            last[i] = Some(o);
        }
        eprintln!("round {} done after {:.0?}", round + 1, started.elapsed());
    }
    println!(
        "group_commit: {rounds} rounds of {:?} per workload, each paired with raw-loop probes of \
         {:?} before and after; ratio = engine / mean(probes), pairs whose probes differ > 2x dropped",
        round_len(),
        probe_len()
    );
    if !raws.is_empty() {
        let (lo, hi) =
            (raws.iter().cloned().fold(f64::MAX, f64::min), raws.iter().cloned().fold(0.0, f64::max));
        println!("raw 256 B probes: median {:.0}/s, min {lo:.0}, max {hi:.0}", median(&mut raws.clone()));
    }
    if !raws_big.is_empty() {
        let v = &raws_big;
        let (lo, hi) = (v.iter().cloned().fold(f64::MAX, f64::min), v.iter().cloned().fold(0.0, f64::max));
        println!("raw 1 MiB probes: median {:.0} MiB/s, min {lo:.0}, max {hi:.0}", median(&mut v.clone()));
    }
    println!(
        "{:<30} {:>8} {:>8} {:>8} {:>5} {:>11} {:<5} {:>7} {:>8} {:>8}",
        "workload", "vs raw", "min", "max", "kept", "median", "unit", "batch", "KiB", "overlap"
    );
    for (i, (n, l, _)) in jobs.iter().enumerate() {
        let v = &pairs[i];
        let unit = if big(*l) { "MiB/s" } else { "/s" };
        let extra = match &last[i] {
            Some(o) => format!("{:>7.1} {:>8.1} {:>7.0}%", o.batch_entries, o.batch_kib, o.overlap * 100.0),
            None => String::new(),
        };
        if v.is_empty() {
            println!("{n:<30} {:>8} (every pair dropped: the regime moved) {extra}", "-");
            continue;
        }
        let mut ratios: Vec<f64> = v.iter().map(|p| p.0).collect();
        let (lo, hi) =
            (ratios.iter().cloned().fold(f64::MAX, f64::min), ratios.iter().cloned().fold(0.0, f64::max));
        let m = median(&mut ratios);
        let rate = median(&mut v.iter().map(|p| p.1).collect::<Vec<_>>());
        println!(
            "{n:<30} {m:>7.2}x {lo:>7.2}x {hi:>7.2}x {:>2}/{:<2} {rate:>11.0} {unit:<5} {extra}",
            v.len(),
            v.len() + dropped[i]
        );
    }
}
