//! Durable appends through the I/O thread (`AsyncWal`) with 1, 8 and 64 submitters, each waiting
//! for its own 256-byte entry, on the io_uring backend (`wal-N`) and on pwrite + fdatasync
//! (`wal-N-portable`), against a raw preallocated `pwrite` + `fdatasync` loop measured in
//! the same run. Rounds interleave the workloads (the disk switches between a fast and a slow
//! regime for minutes: only same-run ratios mean anything) and medians are reported.
//!
//! `cargo bench -p wal-benches --bench group_commit` (about a minute).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wal::{AsyncOptions, AsyncWal, Backend, Durability, Epoch, Options, Wal};

const ENTRY: usize = 256;
const ROUND: Duration = Duration::from_millis(1500);

/// Raw loop: one pwrite + fdatasync per entry on an already written file; ops/s.
fn raw(dir: &std::path::Path) -> f64 {
    let path = dir.join("raw");
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let len = 8u64 << 20;
    f.write_all_at(&vec![0u8; len as usize], 0).unwrap();
    f.sync_data().unwrap();
    let buf = vec![7u8; ENTRY];
    let (start, mut n, mut off) = (Instant::now(), 0u64, 0u64);
    while start.elapsed() < ROUND {
        f.write_all_at(&buf, off).unwrap();
        f.sync_data().unwrap();
        off = (off + ENTRY as u64) % (len - ENTRY as u64);
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// `threads` submitters each appending and waiting for its own durable entry; ops/s.
fn engine(dir: &std::path::Path, threads: usize, backend: Backend) -> f64 {
    let _ = std::fs::remove_dir_all(dir);
    let opts = Options { segment_len_bytes: 64 << 20, backend, ..Options::default() };
    let (wal, _) = Wal::open(dir, opts).unwrap();
    let log = Arc::new(AsyncWal::start(wal, AsyncOptions::default()).unwrap());
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while start.elapsed() < ROUND {
                    log.append(Epoch(0), vec![7u8; ENTRY], Durability::Durable).unwrap().wait().unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let n: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    let rate = n as f64 / start.elapsed().as_secs_f64();
    Arc::try_unwrap(log).ok().unwrap().close().unwrap();
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let names = ["raw", "wal-1", "wal-8", "wal-64", "wal-1-portable", "wal-8-portable", "wal-64-portable"];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..5 {
        for k in 0..names.len() {
            let i = (k + round) % names.len(); // rotate the order between rounds
            let dir = d.path().join(names[i]);
            let r = match names[i] {
                "raw" => {
                    std::fs::create_dir_all(&dir).unwrap();
                    raw(&dir)
                }
                "wal-1" => engine(&dir, 1, Backend::Auto),
                "wal-8" => engine(&dir, 8, Backend::Auto),
                "wal-64" => engine(&dir, 64, Backend::Auto),
                "wal-1-portable" => engine(&dir, 1, Backend::Portable),
                "wal-8-portable" => engine(&dir, 8, Backend::Portable),
                _ => engine(&dir, 64, Backend::Portable),
            };
            results[i].push(r);
        }
    }
    let raw_med = median(results[0].clone());
    println!("group_commit: 256-byte durable appends, 5 interleaved rounds of {ROUND:?}, medians");
    println!("{:<16} {:>12} {:>12} {:>12} {:>10}", "workload", "median/s", "min/s", "max/s", "vs raw");
    for (i, n) in names.iter().enumerate() {
        let v = &results[i];
        let (lo, hi) = (v.iter().cloned().fold(f64::MAX, f64::min), v.iter().cloned().fold(0.0, f64::max));
        let m = median(v.clone());
        println!("{n:<16} {m:>12.0} {lo:>12.0} {hi:>12.0} {:>9.2}x", m / raw_med);
    }
}
