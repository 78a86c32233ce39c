//! Open (recovery) time and resident memory against log size (issue 8).
//!
//! For logs of 64 MiB, 256 MiB and 1 GiB of 1 KiB entries in the default 64 MiB segments, on
//! the workspace's disk and read from the page cache (warm):
//!
//! - **open after a clean close** (every segment sealed: headers and footers only) and **open
//!   after a crash** (a copy of the directory taken after the last fdatasync and before `close`,
//!   so the last segment has no footer and is walked), both read-only so every round opens the
//!   same bytes, next to **a full replay** of the same log (open + every entry through the mmap
//!   iterator). The target: opening after a clean close takes under 5% of a full replay.
//! - **resident memory** while replaying (mmap) and while verifying (`walcheck`'s CRC scan,
//!   pread): the growth of RssAnon (heap) and RssFile (mapped file pages) over the process's
//!   value before the pass, the peak of samples taken every 4,096 entries or segment. Anonymous
//!   memory must not grow with the log, and mapped pages must not either: the replay unmaps each
//!   segment when it moves to the next.
//!
//! `cargo bench -p wal-benches --bench open_memory` (about 2 minutes with the build; 1 GiB of
//! disk in /tmp while it runs). `OPEN_MEMORY_MAX_MIB=256` stops at a smaller log.

use std::path::Path;
use std::time::Instant;
use wal::{Epoch, Options, Wal};
use wal_benches::{median, scaled};

const ENTRY: usize = 1024;
const ROUNDS: usize = 5;

/// (RssAnon, RssFile) of this process in bytes, from /proc/self/status.
fn rss() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// The peak growth of (RssAnon, RssFile) over a baseline.
#[derive(Clone, Copy, Default)]
struct Peak {
    base: (u64, u64),
    anon: u64,
    file: u64,
}

impl Peak {
    fn start() -> Peak {
        Peak { base: rss(), ..Peak::default() }
    }

    fn sample(&mut self) {
        let (a, f) = rss();
        self.anon = self.anon.max(a.saturating_sub(self.base.0));
        self.file = self.file.max(f.saturating_sub(self.base.1));
    }
}

/// Writes `bytes` of 1 KiB entries; returns the entry count and the crash copy's directory.
fn build(dir: &Path, crash: &Path, bytes: u64) -> u64 {
    let (mut log, _) = Wal::open(dir, Options::default()).expect("opening the log");
    let payload: Vec<u8> = (0..ENTRY).map(|i| (i % 251) as u8).collect();
    let n = bytes / ENTRY as u64;
    for i in 0..n {
        log.append(Epoch(0), &payload).expect("append");
        if (i + 1) % 256 == 0 {
            log.flush().expect("flush");
        }
    }
    log.sync().expect("sync");
    // The crash image: everything synced, the last segment not sealed.
    std::fs::create_dir_all(crash).expect("crash dir");
    for e in std::fs::read_dir(dir).expect("listing") {
        let e = e.expect("entry");
        if e.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(e.path(), crash.join(e.file_name())).expect("copying a file");
        }
    }
    log.close().expect("close");
    n
}

fn read_only() -> Options {
    Options { read_only: true, create: false, ..Options::default() }
}

fn time_open(dir: &Path) -> f64 {
    let t = Instant::now();
    let (log, _) = Wal::open(dir, read_only()).expect("open");
    let s = t.elapsed().as_secs_f64();
    drop(log);
    s
}

/// Opens and replays every entry; returns seconds, entries and the memory peak.
fn time_replay(dir: &Path) -> (f64, u64, Peak) {
    let mut peak = Peak::start();
    let t = Instant::now();
    let (log, _) = Wal::open(dir, read_only()).expect("open");
    let mut r = log.replay().expect("replay");
    let mut n = 0u64;
    let mut sum = 0usize;
    while let Some(i) = r.next() {
        sum += std::hint::black_box(i.expect("replayed item").payload.len());
        n += 1;
        if n.is_multiple_of(4096) {
            peak.sample();
        }
    }
    let s = t.elapsed().as_secs_f64();
    peak.sample();
    assert_eq!(sum as u64, n * ENTRY as u64);
    (s, n, peak)
}

fn verify_peak(dir: &Path) -> Peak {
    let mut peak = Peak::start();
    let report = verifier::verify(dir, &verifier::VerifyOptions::default(), &mut |_| peak.sample());
    peak.sample();
    assert_eq!(report.crc_word(), "OK");
    peak
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let max_mib: u64 = std::env::var("OPEN_MEMORY_MAX_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    println!(
        "open_memory: 1 KiB entries, 64 MiB segments, warm page cache, {} interleaved rounds, medians",
        scaled(ROUNDS, 1)
    );
    println!(
        "{:>9} {:>9} {:>12} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "log MiB",
        "entries",
        "open clean",
        "open crash",
        "full replay",
        "clean/rep.",
        "replay anon",
        "replay file",
        "verify anon",
        "verify file"
    );
    for size_mib in scaled(vec![64u64, 256, 1024], vec![16]).into_iter().filter(|&s| s <= max_mib) {
        let root = tempfile::Builder::new().prefix("wal-open-").tempdir_in("/tmp").expect("tempdir");
        let (dir, crash) = (root.path().join("log"), root.path().join("crash"));
        let n = build(&dir, &crash, size_mib << 20);
        let (mut clean, mut crashed, mut replay) = (Vec::new(), Vec::new(), Vec::new());
        let (mut rp, mut vp) = (Peak::default(), Peak::default());
        for _ in 0..scaled(ROUNDS, 1) {
            clean.push(time_open(&dir));
            crashed.push(time_open(&crash));
            let (s, count, p) = time_replay(&dir);
            assert_eq!(count, n);
            replay.push(s);
            let v = verify_peak(&dir);
            (rp.anon, rp.file) = (rp.anon.max(p.anon), rp.file.max(p.file));
            (vp.anon, vp.file) = (vp.anon.max(v.anon), vp.file.max(v.file));
        }
        let (c, k, r) = (median(&mut clean), median(&mut crashed), median(&mut replay));
        println!(
            "{size_mib:>9} {n:>9} {:>10.2}ms {:>10.2}ms {:>10.1}ms {:>10.2}% {:>8.1}MiB {:>8.1}MiB {:>8.1}MiB {:>8.1}MiB",
            c * 1e3,
            k * 1e3,
            r * 1e3,
            c / r * 100.0,
            mib(rp.anon),
            mib(rp.file),
            mib(vp.anon),
            mib(vp.file)
        );
    }
}
