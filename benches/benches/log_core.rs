//! Core costs of the log on real files: a durable append (append + fdatasync), a full replay, and
//! same-run baselines (raw `pwrite` + `fdatasync`, crc32c over the same bytes) so that results can
//! be read as ratios. The disk of a shared machine changes speed over time; only ratios within
//! one run mean anything.
//!
//! Run: `cargo bench -p wal-benches --bench log_core`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use wal::{Epoch, ItemKind, Options, Wal};
use wal_benches::median;

/// Segment size for every benchmark (and the raw baseline's preallocated file).
const SEG: u32 = 8 << 20;
/// Payload bytes a replayed log holds.
const REPLAY_PAYLOAD_BYTES: usize = 32 << 20;
/// Entries per flushed batch while building a replay log.
const BUILD_BATCH: usize = 32;
/// crc32c baseline buffer size.
const CRC_BUF: usize = 1 << 20;

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

/// A fresh directory on /tmp's filesystem (the same disk as the workspace, not a tmpfs).
fn tmp_dir() -> TempDir {
    tempfile::Builder::new().prefix("wal-bench-").tempdir_in("/tmp").expect("creating a tempdir in /tmp")
}

fn payload(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|j| (j.wrapping_mul(31).wrapping_add(salt) % 251) as u8).collect()
}

/// Append `batch` entries of `entry_bytes`, then one `sync()` (a real fdatasync), per iteration.
fn sync_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("sync_append");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    for (entry_bytes, batch) in [(256usize, 1usize), (256, 32), (4096, 32)] {
        let dir = tmp_dir();
        let (mut log, _) = Wal::open(dir.path(), opts()).expect("opening the log");
        let p = payload(entry_bytes, 7);
        // The first append activates the segment (header + state record); keep it out of the timing.
        log.append(Epoch(0), &p).expect("append");
        log.sync().expect("sync");
        g.throughput(Throughput::Bytes((entry_bytes * batch) as u64));
        g.bench_function(
            BenchmarkId::new(format!("entry_bytes={entry_bytes}"), format!("batch={batch}")),
            |b| {
                b.iter(|| {
                    for _ in 0..batch {
                        black_box(log.append(Epoch(0), &p).expect("append"));
                    }
                    log.sync().expect("sync");
                })
            },
        );
        eprintln!(
            "sync_append entry_bytes={entry_bytes} batch={batch}: {} entries durable in {} segment(s)",
            log.durable_lsn().map_or(0, |l| l.0),
            log.segment_count()
        );
        log.close().expect("close");
    }
    g.finish();
}

/// A preallocated file of one segment's size (zero-filled with real writes, synced), then
/// `pwrite` of `entry_bytes` at an advancing offset (wrapping) + `fdatasync` per iteration.
fn raw_pwrite_fdatasync(c: &mut Criterion) {
    let mut g = c.benchmark_group("raw_pwrite_fdatasync");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    let entry_bytes = 256usize;
    let dir = tmp_dir();
    let f = prealloc(&dir.path().join("raw.seg"), SEG.into());
    let p = payload(entry_bytes, 7);
    let len = u64::from(SEG);
    let mut off = 0u64;
    g.throughput(Throughput::Bytes(entry_bytes as u64));
    g.bench_function(BenchmarkId::from_parameter(format!("entry_bytes={entry_bytes}")), |b| {
        b.iter(|| {
            if off + entry_bytes as u64 > len {
                off = 0;
            }
            f.write_all_at(&p, off).expect("pwrite");
            f.sync_data().expect("fdatasync");
            off += entry_bytes as u64;
        })
    });
    g.finish();
}

fn prealloc(path: &Path, len: u64) -> File {
    let f = OpenOptions::new().read(true).write(true).create_new(true).open(path).expect("creating a file");
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], at).expect("zero-filling");
        at += n as u64;
    }
    f.sync_all().expect("syncing the preallocated file");
    f
}

/// Not a criterion benchmark: the disk switches between fast and slow regimes within seconds,
/// so the criterion baseline above and `sync_append/entry_bytes=256/batch=1` can land in
/// different regimes. This interleaves the two operations (alternating which goes first) and
/// prints the medians and the median of per-pair ratios, which a regime change affects far less.
fn paired_sync_vs_raw(_c: &mut Criterion) {
    const PAIRS: usize = 20_000;
    const BUDGET: Duration = Duration::from_secs(4);
    let entry_bytes = 256usize;
    let dir = tmp_dir();
    let f = prealloc(&dir.path().join("raw.seg"), SEG.into());
    let (mut log, _) = Wal::open(dir.path().join("log"), opts()).expect("opening the log");
    let p = payload(entry_bytes, 7);
    log.append(Epoch(0), &p).expect("append");
    log.sync().expect("sync");
    let (mut raw, mut walt) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    let mut off = 0u64;
    let started = Instant::now();
    for i in 0..PAIRS {
        if started.elapsed() > BUDGET {
            break;
        }
        let mut raw_op = || {
            let t = Instant::now();
            f.write_all_at(&p, off).expect("pwrite");
            f.sync_data().expect("fdatasync");
            off = (off + entry_bytes as u64) % u64::from(SEG);
            t.elapsed().as_secs_f64()
        };
        let mut wal_op = || {
            let t = Instant::now();
            black_box(log.append(Epoch(0), &p).expect("append"));
            log.sync().expect("sync");
            t.elapsed().as_secs_f64()
        };
        let (r, w) = if i % 2 == 0 {
            let r = raw_op();
            (r, wal_op())
        } else {
            let w = wal_op();
            (raw_op(), w)
        };
        raw.push(r);
        walt.push(w);
    }
    let mut ratios: Vec<f64> = walt.iter().zip(&raw).map(|(w, r)| w / r).collect();
    let n = raw.len();
    let (r50, w50, q50) = (median(&mut raw), median(&mut walt), median(&mut ratios));
    let pct = wal_benches::percentile;
    eprintln!(
        "paired entry_bytes={entry_bytes} batch=1 ({n} pairs in {:.1} s): raw_pwrite_fdatasync median {:.1} us \
         (p10 {:.1}, p90 {:.1}); wal append+sync median {:.1} us (p10 {:.1}, p90 {:.1}); \
         wal/raw: ratio of medians {:.2}, median of per-pair ratios {:.2}",
        started.elapsed().as_secs_f64(),
        r50 * 1e6,
        pct(&raw, 0.1) * 1e6,
        pct(&raw, 0.9) * 1e6,
        w50 * 1e6,
        pct(&walt, 0.1) * 1e6,
        pct(&walt, 0.9) * 1e6,
        w50 / r50,
        q50
    );
    log.close().expect("close");
}

/// Builds (untimed) a closed and reopened log holding `REPLAY_PAYLOAD_BYTES` of payload, then
/// times one full replay per iteration.
fn replay(c: &mut Criterion) {
    let mut g = c.benchmark_group("replay");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for entry_bytes in [256usize, 4096] {
        let dir = tmp_dir();
        let n = REPLAY_PAYLOAD_BYTES / entry_bytes;
        {
            let (mut log, _) = Wal::open(dir.path(), opts()).expect("opening the log");
            let payloads: Vec<Vec<u8>> = (0..BUILD_BATCH).map(|i| payload(entry_bytes, i)).collect();
            for i in 0..n {
                log.append(Epoch(0), &payloads[i % BUILD_BATCH]).expect("append");
                if (i + 1) % BUILD_BATCH == 0 {
                    log.flush().expect("flush");
                }
            }
            log.sync().expect("sync");
            log.close().expect("close");
        }
        let (log, report) = Wal::open(dir.path(), opts()).expect("reopening the log");
        assert_eq!(report.verdict, wal::CrcVerdict::Ok);
        let st = wal::storage::FileStorage::new(dir.path(), false).expect("storage");
        let scan = wal::scan_log(&st, false).expect("scan");
        let data_bytes: u64 = scan.segments.iter().map(|s| s.data_end).sum();
        // Check once, untimed, that a replay returns every entry.
        let (mut count, mut bytes) = (0usize, 0usize);
        let mut r = log.replay().expect("replay");
        while let Some(i) = r.next() {
            let i = i.expect("replayed item");
            assert_eq!(i.kind, ItemKind::Entry);
            count += 1;
            bytes += i.payload.len();
        }
        assert_eq!((count, bytes), (n, REPLAY_PAYLOAD_BYTES));
        eprintln!(
            "replay entry_bytes={entry_bytes}: {n} entries, {bytes} payload bytes, {data_bytes} log data bytes \
             in {} segment(s)",
            log.segment_count()
        );
        g.throughput(Throughput::Bytes(REPLAY_PAYLOAD_BYTES as u64));
        g.bench_function(BenchmarkId::from_parameter(format!("entry_bytes={entry_bytes}")), |b| {
            b.iter(|| {
                let mut r = log.replay().expect("replay");
                let mut sum = 0usize;
                while let Some(i) = r.next() {
                    sum += black_box(i.expect("replayed item").payload.len());
                }
                sum
            })
        });
        drop(log);
    }
    g.finish();
}

/// crc32c over the same number of bytes as a replay's payload, in 1 MiB buffers.
fn crc32c_baseline(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    let data = payload(REPLAY_PAYLOAD_BYTES, 3);
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function(
        BenchmarkId::new(format!("total_bytes={}", data.len()), format!("buf_bytes={CRC_BUF}")),
        |b| {
            b.iter(|| {
                let mut crc = 0u32;
                for chunk in black_box(&data).chunks(CRC_BUF) {
                    crc = crc32c::crc32c_append(crc, chunk);
                }
                crc
            })
        },
    );
    g.finish();
}

criterion_group!(benches, paired_sync_vs_raw, raw_pwrite_fdatasync, sync_append, replay, crc32c_baseline);
criterion_main!(benches);
