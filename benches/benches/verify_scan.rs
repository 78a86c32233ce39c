//! The CRC scan of the verifier (`walcheck verify`, full depth) against same-run crc32c baselines.
//! The requirement is that the scan runs at >= 50% of crc32c computed one 256-byte
//! entry-sized buffer per call.
//!
//! Outside the timing, it builds a log on real files (a tempdir under /tmp) holding 32 MiB of
//! 256-byte entries: segment_len_bytes 8 MiB, a flush every 32 entries, then sync and close.
//! It then times:
//!
//! - `verify_scan/verifier_full`: `verifier::verify(dir, &Default::default(), ..)`, a full scan
//!   with pread, streaming each segment through one reused 1 MiB window (`Reader::scan_window`).
//!   Throughput is the total bytes of the segment files (the spare segment, also read and
//!   checked to be zero, is not counted);
//! - `verify_scan/scan_log_mmap_full`: `wal::scan_log(&FileStorage, true)`, the same walk over
//!   memory maps;
//! - `verify_scan_entries/verifier_full`: the verifier again, with throughput in entries/s;
//! - `crc32c/buf_bytes=256`: `crc32c::crc32c` once per 256-byte buffer over 32 MiB;
//! - `crc32c/buf_bytes=1048576`: the same over 1 MiB buffers.
//!
//! After the criterion benches, a paired run (not criterion) interleaves those operations and two
//! diagnostic ones, and prints their medians and the ratios. A shared machine changes speed over
//! time, and interleaving cancels most of that. The two diagnostic operations are:
//!
//! - `pread_map_only`: only what the verifier's `ReadOnlyDir::map` does for each segment file
//!   (pread the whole file into a segment-sized buffer), with no walk. A full scan no longer
//!   calls it (only a damaged segment is read whole), so this is what the windows saved;
//! - `scan_pooled_pread`: `scan_log(full)` over a bench-local storage that preads each segment
//!   whole into one reused buffer and then walks it (no windows: what the verifier did before);
//! - `crc32c record 3 calls`: the checksum work of one record in `scan::decode` at b436af5, and
//!   nothing else. Per 304-byte record (48-byte header + 256-byte payload): `crc32c` of 40
//!   header bytes (`header_crc`), then `crc32c` of 44 header bytes appended with the 256-byte
//!   payload (`crc`);
//! - `crc32c record 2 calls`: the same with `crc` as one call over header bytes 4.. and the
//!   payload, which are contiguous.
//!
//! Run: `cargo bench -p wal-benches --bench verify_scan`. Set `VERIFY_SCAN_PAIRED=0` to skip the
//! paired run (when profiling a single bench with `--profile-time`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use verifier::pread::ReadOnlyDir;
use wal::storage::{FileId, Mapping, Reader};
use wal::{Epoch, Options, Wal};

const SEG: u32 = 8 << 20;
const ENTRY_BYTES: usize = 256;
const PAYLOAD_BYTES: usize = 32 << 20;
const ENTRIES: usize = PAYLOAD_BYTES / ENTRY_BYTES;
/// Entries per flushed batch while building the log.
const BUILD_BATCH: usize = 32;
const BIG_BUF: usize = 1 << 20;

struct Fixture {
    dir: TempDir,
    /// Total length of the segment files (what the verifier reads).
    segment_bytes: u64,
    /// Bytes up to the end of the last batch of each segment, summed.
    data_bytes: u64,
    segments: usize,
    records: u64,
}

fn payload(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|j| (j.wrapping_mul(31).wrapping_add(salt) % 251) as u8).collect()
}

fn build() -> Fixture {
    let dir = tempfile::Builder::new()
        .prefix("wal-bench-verify-")
        .tempdir_in("/tmp")
        .expect("creating a tempdir in /tmp");
    let opts = Options { segment_len_bytes: SEG, ..Options::default() };
    let (mut log, _) = Wal::open(dir.path(), opts).expect("opening the log");
    let payloads: Vec<Vec<u8>> = (0..BUILD_BATCH).map(|i| payload(ENTRY_BYTES, i)).collect();
    for i in 0..ENTRIES {
        log.append(Epoch(0), &payloads[i % BUILD_BATCH]).expect("append");
        if (i + 1) % BUILD_BATCH == 0 {
            log.flush().expect("flush");
        }
    }
    log.sync().expect("sync");
    log.close().expect("close");

    let st = wal::storage::FileStorage::new(dir.path(), false).expect("storage");
    let scan = wal::scan_log(&st, true).expect("scan");
    assert_eq!(scan.verdict, wal::CrcVerdict::Ok);
    let data_bytes = scan.segments.iter().map(|s| s.data_end).sum();
    let report = verifier::verify(dir.path(), &Default::default(), &mut |_| {});
    assert_eq!(report.crc_word(), "OK");
    assert_eq!(report.stats.entries, ENTRIES as u64);
    assert_eq!(report.stats.payload_bytes, PAYLOAD_BYTES as u64);
    Fixture {
        segment_bytes: report.stats.bytes,
        data_bytes,
        segments: report.stats.segments,
        records: report.stats.records,
        dir,
    }
}

fn verify_full(dir: &Path) -> u64 {
    let r = verifier::verify(dir, &Default::default(), &mut |_| {});
    assert_eq!(r.crc, wal::CrcVerdict::Ok);
    r.stats.records
}

fn scan_mmap_full(dir: &Path) -> u64 {
    let st = wal::storage::FileStorage::new(dir, false).expect("storage");
    let s = wal::scan_log(&st, true).expect("scan");
    assert_eq!(s.verdict, wal::CrcVerdict::Ok);
    s.records_walked
}

/// What `ReadOnlyDir::map` costs, without the walk: every segment file read whole.
fn pread_map_only(dir: &Path) -> u64 {
    let st = ReadOnlyDir::new(dir);
    let mut total = 0u64;
    for name in st.list().expect("list") {
        if wal::format::parse_segment_file_name(&name).is_none() {
            continue;
        }
        let f = st.open(&name).expect("open");
        let m = st.map(f).expect("map");
        st.close(f);
        total += u64::from(black_box(&m[..]).last().copied().unwrap_or(0)) + m.len() as u64;
    }
    total
}

/// `ReadOnlyDir` with a `map` that preads into one reused buffer (reused once the walk has dropped
/// the previous segment's `Mapping`), instead of a fresh zeroed `Vec` copied into a fresh `Arc`.
#[derive(Debug)]
struct PooledPread {
    inner: ReadOnlyDir,
    pool: Mutex<Option<Arc<[u8]>>>,
}

impl Reader for PooledPread {
    wal::forward_storage!(inner: list, open, close, len, read_at, lock_shared);

    fn map(&self, file: FileId) -> io::Result<Mapping> {
        let len = self.inner.len(file)? as usize;
        let mut slot = self.pool.lock().expect("pool");
        let mut buf = match slot.take() {
            Some(a) if a.len() == len && Arc::strong_count(&a) == 1 && Arc::weak_count(&a) == 0 => a,
            _ => Arc::from(vec![0u8; len]),
        };
        let n = self.inner.read_at(file, 0, Arc::get_mut(&mut buf).expect("unique buffer"))?;
        if n != len {
            return self.inner.map(file);
        }
        *slot = Some(buf.clone());
        Ok(Mapping::Bytes(buf))
    }
}

fn scan_pooled_pread(st: &PooledPread) -> u64 {
    let s = wal::scan_log(st, true).expect("scan");
    assert_eq!(s.verdict, wal::CrcVerdict::Ok);
    s.records_walked
}

/// The checksums `decode` computes per record, over records laid out like the log's: with
/// `one_call`, `crc` is one call over the header from byte 4 and the payload.
fn crc_record_shaped(data: &[u8], one_call: bool) -> u32 {
    let mut acc = 0u32;
    for rec in data.chunks_exact(wal::format::RECORD_HEADER_LEN + ENTRY_BYTES) {
        let (h, p) = rec.split_at(wal::format::RECORD_HEADER_LEN);
        acc ^= crc32c::crc32c(black_box(&h[8..]));
        acc ^= if one_call {
            crc32c::crc32c(black_box(&rec[4..]))
        } else {
            crc32c::crc32c_append(crc32c::crc32c(black_box(&h[4..])), black_box(p))
        };
    }
    acc
}

fn crc_chunks(data: &[u8], buf: usize) -> u32 {
    let mut acc = 0u32;
    for chunk in data.chunks(buf) {
        acc ^= crc32c::crc32c(black_box(chunk));
    }
    acc
}

fn verify_scan(c: &mut Criterion) {
    let fx = build();
    eprintln!(
        "verify_scan: {ENTRIES} entries of {ENTRY_BYTES} B ({PAYLOAD_BYTES} payload bytes), {} records, \
         {} segment(s) of {SEG} B = {} segment bytes, {} data bytes",
        fx.records, fx.segments, fx.segment_bytes, fx.data_bytes
    );
    let dir = fx.dir.path();

    let mut g = c.benchmark_group("verify_scan");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes(fx.segment_bytes));
    g.bench_function("verifier_full", |b| b.iter(|| verify_full(dir)));
    g.bench_function("scan_log_mmap_full", |b| b.iter(|| scan_mmap_full(dir)));
    g.finish();

    let mut g = c.benchmark_group("verify_scan_entries");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(ENTRIES as u64));
    g.bench_function("verifier_full", |b| b.iter(|| verify_full(dir)));
    g.finish();

    let data = payload(PAYLOAD_BYTES, 3);
    let mut g = c.benchmark_group("crc32c");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes(data.len() as u64));
    for buf in [ENTRY_BYTES, BIG_BUF] {
        g.bench_function(BenchmarkId::from_parameter(format!("buf_bytes={buf}")), |b| {
            b.iter(|| crc_chunks(black_box(&data), buf))
        });
    }
    g.finish();

    if std::env::var_os("VERIFY_SCAN_PAIRED").is_none_or(|v| v != "0") {
        paired(&fx, &data);
    }
}

const OPS: [&str; 8] = [
    "verifier_full",
    "scan_log_mmap_full",
    "crc32c 256 B bufs",
    "crc32c 1 MiB bufs",
    "pread_map_only",
    "scan_pooled_pread",
    "crc32c record 3 calls",
    "crc32c record 2 calls",
];

/// Interleaves the operations (rotating which goes first) for up to 25 rounds or 10 s and prints
/// medians and the ratios the issue asks for.
fn paired(fx: &Fixture, data: &[u8]) {
    const ROUNDS: usize = 25;
    const BUDGET: Duration = Duration::from_secs(10);
    let dir = fx.dir.path();
    let pooled = PooledPread { inner: ReadOnlyDir::new(dir), pool: Mutex::new(None) };
    let mut times: [Vec<f64>; OPS.len()] = Default::default();
    let started = Instant::now();
    for round in 0..ROUNDS {
        if started.elapsed() > BUDGET {
            break;
        }
        for k in 0..OPS.len() {
            let op = (round + k) % OPS.len();
            let t = Instant::now();
            match op {
                0 => black_box(verify_full(dir)),
                1 => black_box(scan_mmap_full(dir)),
                2 => u64::from(black_box(crc_chunks(data, ENTRY_BYTES))),
                3 => u64::from(black_box(crc_chunks(data, BIG_BUF))),
                4 => black_box(pread_map_only(dir)),
                5 => black_box(scan_pooled_pread(&pooled)),
                6 => u64::from(black_box(crc_record_shaped(data, false))),
                _ => u64::from(black_box(crc_record_shaped(data, true))),
            };
            times[op].push(t.elapsed().as_secs_f64());
        }
    }
    let n = times[0].len();
    let med: Vec<f64> = times
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let mbps = |bytes: u64, s: f64| bytes as f64 / s / 1e6;
    eprintln!("paired: {n} rounds in {:.1} s; medians:", started.elapsed().as_secs_f64());
    let rec_bytes = wal::format::RECORD_HEADER_LEN + ENTRY_BYTES;
    for (i, name) in OPS.iter().enumerate() {
        let detail = match i {
            2 | 3 => format!("{:>6.0} MB/s of buffer bytes", mbps(data.len() as u64, med[i])),
            6 | 7 => format!(
                "{:>6.0} MB/s of buffer bytes, {:.0} ns per {rec_bytes}-byte record",
                mbps(data.len() as u64, med[i]),
                med[i] / (data.len() / rec_bytes) as f64 * 1e9
            ),
            _ => format!(
                "{:>6.0} MB/s of segment bytes, {:.0} ns/record, {:.2} M entries/s",
                mbps(fx.segment_bytes, med[i]),
                med[i] / fx.records as f64 * 1e9,
                ENTRIES as f64 / med[i] / 1e6
            ),
        };
        eprintln!("  {name:<20} {:>8.2} ms  {detail}", med[i] * 1e3);
    }
    let verifier = mbps(fx.segment_bytes, med[0]);
    let mmap = mbps(fx.segment_bytes, med[1]);
    let crc256 = mbps(data.len() as u64, med[2]);
    let crc1m = mbps(data.len() as u64, med[3]);
    let pooled = mbps(fx.segment_bytes, med[5]);
    eprintln!(
        "paired ratios: verifier/crc32c_256B {:.2} (requirement >= 0.50), verifier/crc32c_1MiB {:.2}, \
         scan_log_mmap/crc32c_256B {:.2}, scan_pooled_pread/crc32c_256B {:.2}, verifier/scan_log_mmap {:.2}; \
         pread_map_only is {:.0}% of verifier_full",
        verifier / crc256,
        verifier / crc1m,
        mmap / crc256,
        pooled / crc256,
        verifier / mmap,
        med[4] / med[0] * 100.0
    );
}

criterion_group!(benches, verify_scan);
criterion_main!(benches);
