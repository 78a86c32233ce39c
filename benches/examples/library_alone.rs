//! Two of the comparison's throughput loads through the library alone, with the I/O thread's own
//! counters: what the README's "library alone" figures for `batch4k-64` and `bulk-1k` come
//! from (before, they came from one-off programs). The same options as `wal-compare`'s adapter:
//! 64 MiB segments, the default segment fill and recycling, `AsyncOptions::default()`.
//!
//! ```sh
//! # 64 x 4 KiB per call, each call waits until durable, a purge of every sealed segment
//! # every 100 ms on another thread (as the comparison's synced workloads do)
//! cargo run --release -p wal-benches --example library_alone -- batch4k-64 [--secs 3]
//! # 1 KiB entries appended `Written`, the last one `Durable` and waited for
//! cargo run --release -p wal-benches --example library_alone -- bulk-1k [--mib 256]
//! ```
//!
//! `--dir DIR` (default `/tmp`) takes a fresh subdirectory, removed at the end. It prints the
//! throughput, the append-call latencies (p50, mean, p99, max, and the share of the wall time
//! spent in calls slower than 500 us), the purges (count, total and slowest), and the I/O
//! thread's `Stats` (batches, syncs, sync latency percentiles). Numbers, never assertions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Options, Payload, Wal};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Args {
    load: String,
    secs: f64,
    mib: u64,
    dir: std::path::PathBuf,
}

fn args() -> Res<Args> {
    let mut a = Args { load: String::new(), secs: 3.0, mib: 256, dir: "/tmp".into() };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{x} needs a value"));
        match x.as_str() {
            "--secs" => a.secs = val()?.parse()?,
            "--mib" => a.mib = val()?.parse()?,
            "--dir" => a.dir = val()?.into(),
            "batch4k-64" | "bulk-1k" => a.load = x,
            other => {
                return Err(
                    format!("unknown argument {other}: batch4k-64 or bulk-1k, --secs, --mib, --dir").into()
                )
            }
        }
    }
    if a.load.is_empty() || a.secs <= 0.0 || a.mib == 0 {
        return Err("give batch4k-64 or bulk-1k (with a positive --secs or --mib)".into());
    }
    Ok(a)
}

fn open(dir: &std::path::Path) -> Res<Arc<AsyncWal>> {
    let opts = Options { segment_len_bytes: 64 << 20, ..Options::default() };
    let (log, _) = Wal::open(dir, opts)?;
    Ok(Arc::new(AsyncWal::start(log, AsyncOptions::default())?))
}

/// Latencies in ns, sorted: p50, mean, p99, max in us, and the ns spent in calls over 500 us.
fn latencies(mut ns: Vec<u64>) -> String {
    ns.sort_unstable();
    let at = |q: f64| ns.get(((ns.len().saturating_sub(1)) as f64 * q) as usize).copied().unwrap_or(0);
    let mean = ns.iter().sum::<u64>() / ns.len().max(1) as u64;
    let slow: u64 = ns.iter().filter(|&&n| n > 500_000).sum();
    format!(
        "append calls {}: p50 {} us, mean {} us, p99 {} us, max {} us; {:.1} s in calls over 500 us",
        ns.len(),
        at(0.5) / 1000,
        mean / 1000,
        at(0.99) / 1000,
        at(1.0) / 1000,
        slow as f64 / 1e9
    )
}

fn stats(log: &AsyncWal) -> String {
    let s = log.stats();
    format!(
        "I/O thread: {} batches ({} during a sync, {} by waiters), {} syncs, sync p50 {} us, p99 {} us, max {} us, {} slow",
        s.batches,
        s.batches_during_sync,
        s.batches_by_waiters,
        s.syncs,
        s.sync_latency_us.quantile(0.5),
        s.sync_latency_us.quantile(0.99),
        s.sync_latency_us.max(),
        s.slow_syncs
    )
}

fn batch4k_64(log: &Arc<AsyncWal>, secs: f64) -> Res<()> {
    // The purger: every 100 ms, every sealed segment (the comparison adapter's, timed).
    let stop = Arc::new(AtomicBool::new(false));
    let purges = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let purger = {
        let (log, stop, purges) = (log.clone(), stop.clone(), purges.clone());
        std::thread::spawn(move || -> Res<()> {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let t = Instant::now();
                log.purge_before(log.next_lsn())?;
                purges.lock().map_err(|_| "poisoned")?.push(t.elapsed());
            }
            Ok(())
        })
    };
    let entry = vec![0x5au8; 4096];
    let mut ns = Vec::new();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        log.append_wait(Epoch(0), Payload::Group(vec![entry.clone(); 64]))?.wait()?;
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let wall = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    purger.join().map_err(|_| "the purger panicked")??;
    let mib = ns.len() as f64 * 64.0 * 4096.0 / (1 << 20) as f64;
    println!("batch4k-64: {:.0} MiB/s over {wall:.2} s", mib / wall);
    println!("{}", latencies(ns));
    let p = purges.lock().map_err(|_| "poisoned")?;
    let total: Duration = p.iter().sum();
    let max = p.iter().max().copied().unwrap_or_default();
    println!(
        "purges: {} calls, {:.0} ms in all ({:.1}% of the run), slowest {:.1} ms",
        p.len(),
        total.as_secs_f64() * 1e3,
        100.0 * total.as_secs_f64() / wall,
        max.as_secs_f64() * 1e3
    );
    Ok(())
}

fn bulk_1k(log: &Arc<AsyncWal>, mib: u64) -> Res<()> {
    let n = (mib << 20) / 1024;
    let mut ns = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 1..=n {
        let mut e = vec![0u8; 1024];
        e[..8].copy_from_slice(&i.to_le_bytes());
        let d = if i == n { Durability::Durable } else { Durability::Written };
        let t = Instant::now();
        let ticket = log.append(Epoch(0), e, d)?;
        if i == n {
            ticket.wait()?;
        }
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let wall = start.elapsed().as_secs_f64();
    println!("bulk-1k: {:.0} MiB/s ({mib} MiB in {wall:.2} s)", mib as f64 / wall);
    println!("{}", latencies(ns));
    Ok(())
}

fn main() -> Res<()> {
    let a = args()?;
    let dir = a.dir.join(format!("wal-library-alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = open(&dir)?;
    let r = match a.load.as_str() {
        "batch4k-64" => batch4k_64(&log, a.secs),
        _ => bulk_1k(&log, a.mib),
    };
    println!("{}", stats(&log));
    let log = Arc::try_unwrap(log).map_err(|_| "the log is still shared")?;
    log.close()?;
    std::fs::remove_dir_all(&dir)?;
    r
}
