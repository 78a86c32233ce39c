//! Criterion benchmarks of appends through the I/O thread (`AsyncWal`, `Backend::Auto`), one
//! parameter swept per group, so that criterion's summary plots read as curves:
//!
//! - `append_size/{durable,written}/<bytes>`: one submitter waiting for each entry, entry sizes
//!   64 B to 64 KiB; `durable` waits for the fdatasync covering the entry, `written` for the
//!   write that hands it to the OS (its sync follows within `written_sync_delay`);
//! - `append_submitters/durable-256B/<threads>`: 1 to 64 threads each waiting for its own 256 B
//!   durable entry (group commit: one fdatasync covers the entries queued while the previous
//!   one ran); `append_submitters/durable-wait-256B/<threads>` the same through `append_wait`,
//!   whose caller runs the round itself when the I/O thread is idle;
//! - `append_window/durable-256B/<in flight>`: one submitter keeping that many durable entries in
//!   flight (it waits only for the oldest), the shape of an event loop that never blocks.
//!
//! An iteration is one entry per submitter, or one window of entries (throughput in entries/s,
//! or bytes/s for `append_size`). The
//! disk of this shared VM switches between a fast and a slow regime, so absolute figures move
//! between runs; `group_commit` and `benches/compare` give same-run ratios to a raw
//! `pwrite` + `fdatasync` loop and to other engines. A log is replaced (untimed) once it holds
//! 256 MiB, so a long run does not fill the disk.
//!
//! `cargo bench -p wal-benches --bench append` (about 2 minutes); the plots are under
//! `target/criterion/append_*/report/`. Under `cargo test` each benchmark runs once.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Options, Payload, Wal};

/// Bytes a log may hold before the benchmark replaces it with a fresh one.
const RECYCLE_BYTES: u64 = 256 << 20;

/// A log on /tmp's file system (the workspace's disk, not a tmpfs), replaced when it grows.
struct Log {
    dir: TempDir,
    log: Option<Arc<AsyncWal>>,
    written: u64,
}

impl Log {
    fn new() -> Log {
        let dir =
            tempfile::Builder::new().prefix("wal-bench-append-").tempdir_in("/tmp").expect("tempdir in /tmp");
        let mut l = Log { dir, log: None, written: 0 };
        l.reopen();
        l
    }

    fn reopen(&mut self) {
        if let Some(old) = self.log.take() {
            let Ok(old) = Arc::try_unwrap(old) else { panic!("a submitter still holds the log") };
            old.close().expect("close");
        }
        for e in std::fs::read_dir(self.dir.path()).expect("read_dir").flatten() {
            std::fs::remove_file(e.path()).expect("removing the old log");
        }
        let opts = Options { segment_len_bytes: 64 << 20, ..Options::default() };
        let (wal, _) = Wal::open(self.dir.path(), opts).expect("open");
        let log = AsyncWal::start(wal, AsyncOptions::default()).expect("start the I/O thread");
        // The first append activates the segment; keep it out of every timing.
        log.append(Epoch(0), vec![0; 64], Durability::Durable).expect("append").wait().expect("durable");
        self.log = Some(Arc::new(log));
        self.written = 0;
    }

    /// The log, replaced first (untimed) if the next `bytes` would take it past the limit.
    fn take(&mut self, bytes: u64) -> Arc<AsyncWal> {
        if self.written + bytes > RECYCLE_BYTES {
            self.reopen();
        }
        self.written += bytes;
        self.log.clone().expect("open log")
    }
}

fn wait(t: wal::Ticket) {
    t.wait().expect("append acknowledged");
}

fn append_size(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_size");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for (name, durability) in [("durable", Durability::Durable), ("written", Durability::Written)] {
        let mut log = Log::new();
        for size in [64usize, 256, 1024, 4096, 16 << 10, 64 << 10] {
            let payload = vec![0x5a; size];
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter_custom(|iters| {
                    let l = log.take(iters * size as u64);
                    let start = Instant::now();
                    for _ in 0..iters {
                        wait(l.append(Epoch(0), payload.clone(), durability).expect("append"));
                    }
                    start.elapsed()
                })
            });
        }
    }
    g.finish();
}

fn append_submitters(c: &mut Criterion) {
    const ENTRY: usize = 256;
    let mut g = c.benchmark_group("append_submitters");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    let mut log = Log::new();
    // `durable-256B`: append, then wait on the ticket (the I/O thread does every round);
    // `durable-wait-256B`: `append_wait` (a caller runs the round when the thread is idle).
    for (name, drive) in [("durable-256B", false), ("durable-wait-256B", true)] {
        for threads in [1usize, 2, 4, 8, 16, 32, 64] {
            // An iteration is one entry per thread: criterion's x axis is the throughput's
            // element count, so this is what makes its plot a curve against the submitters.
            g.throughput(Throughput::Elements(threads as u64));
            g.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| {
                    let l = log.take(iters * threads as u64 * ENTRY as u64);
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for _ in 0..threads {
                            let l = &l;
                            s.spawn(move || {
                                for _ in 0..iters {
                                    let t = if drive {
                                        l.append_wait(Epoch(0), Payload::One(vec![0x5a; ENTRY]))
                                    } else {
                                        l.append(Epoch(0), vec![0x5a; ENTRY], Durability::Durable)
                                    };
                                    wait(t.expect("append"));
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
    }
    g.finish();
}

fn append_window(c: &mut Criterion) {
    const ENTRY: usize = 256;
    let mut g = c.benchmark_group("append_window");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    let mut log = Log::new();
    for window in [1usize, 4, 16, 64, 256] {
        // An iteration is `window` entries (the x axis of criterion's plot, as above).
        g.throughput(Throughput::Elements(window as u64));
        g.bench_function(BenchmarkId::new("durable-256B", window), |b| {
            b.iter_custom(|iters| {
                let n = iters * window as u64;
                let l = log.take(n * ENTRY as u64);
                let mut inflight = VecDeque::with_capacity(window);
                let start = Instant::now();
                for _ in 0..n {
                    if inflight.len() == window {
                        wait(inflight.pop_front().expect("a ticket in flight"));
                    }
                    inflight.push_back(
                        l.append(Epoch(0), vec![0x5a; ENTRY], Durability::Durable).expect("append"),
                    );
                }
                inflight.into_iter().for_each(wait);
                start.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, append_size, append_submitters, append_window);
criterion_main!(benches);
