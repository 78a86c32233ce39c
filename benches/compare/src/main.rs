//! Side-by-side comparison (issue 8): this engine (`wal`), raft-engine 0.4.2, okaywal 0.3.1,
//! raft-log 0.4.6 and a raw preallocated pwrite + fdatasync loop, in one process, on the same
//! workloads.
//!
//! Each engine runs two ways (issue 27): as its users get it by default (no purge thread), and
//! with its documented best practice (its purge or checkpoint policy running); see
//! [`engines::Practice`]. The workloads that keep the whole log (`retained`, the bulk load and
//! its replays) purge nothing under either practice and run once.
//!
//! A round runs every workload in turn and, for each practice, every engine back to back (the
//! order of the engines, and of the practices, rotates from round to round); before each
//! engine's run a short raw fdatasync loop probes the disk, and a workload's round whose probes
//! moved more than 2x from its first probe is discarded. Medians with min/max, latency
//! percentiles and this engine's same-round ratio to each other engine are printed as Markdown,
//! one set of tables per practice. See `README.md` for the workloads and caveats.
//!
//! ```sh
//! cargo run --release --manifest-path benches/compare/Cargo.toml -- --quick
//! cargo run --release --manifest-path benches/compare/Cargo.toml -- --json results.jsonl
//! cargo run --release --manifest-path benches/compare/Cargo.toml -- --report results.jsonl
//! ```

mod engines;
mod plot;
mod raft_log_engine;
mod report;
mod wal_engine;

use engines::{Engine, Mode, Practice, Res};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

pub const WORKLOADS: [&str; 11] = [
    "durable-1",
    "durable-8",
    "durable-64",
    "batch4k-64",
    "pipelined",
    "pipelined-1m",
    "first-minute",
    "retained",
    "bulk-1k",
    "replay-warm",
    "replay-cold",
];

/// The bulk load and the replays of its log: one group.
const BULK: [&str; 3] = ["bulk-1k", "replay-warm", "replay-cold"];

/// The workloads that keep the whole log, so that no engine purges under either practice: they
/// run once, and their samples carry [`Practice::Default`] (no maintenance is what they get).
pub const KEPT: [&str; 4] = ["retained", "bulk-1k", "replay-warm", "replay-cold"];

/// Whether `workload` runs once per practice.
pub fn per_practice(workload: &str) -> bool {
    !KEPT.contains(&workload)
}

const HELP: &str = "\
compare: wal vs raft-engine vs okaywal vs raft-log vs a raw fdatasync loop (issue 8)

  --quick            2 short rounds: a smoke test, not a measurement (0.4 s per workload,
                     0.1 s warm-up, 32 MiB bulk, 64 MiB retained, 1 s first-minute, 150 ms
                     probes)
  --rounds N         rounds (default 7; engine order rotates each round)
  --practice P       default, best or both (default both): each engine as its users get it by
                     default (no purge thread), with its documented purge/checkpoint policy, or
                     both, as two sets of tables
  --secs S           seconds per time-bound workload (default 3)
  --warmup S         untimed seconds before each time-bound workload (default 1)
  --bulk-mib M       bulk-1k volume in MiB (default 1024)
  --retained-gib G   retained volume in GiB, fractions allowed (default 4)
  --first-secs S     first-minute: seconds of durable-8 after the timed open (default 20)
  --window N         in-flight entries of `pipelined` (default 64)
  --window-1m N      in-flight 1 MiB entries of `pipelined-1m` (default 4)
  --probe-ms MS      length of each disk probe (default 500)
  --engines LIST     comma-separated subset of wal,raft-engine,okaywal,raft-log,raw
  --workloads LIST   comma-separated subset of the workload ids
  --dir DIR          where the logs are made (default /tmp); a fresh subdirectory is used
  --json FILE        append one JSON object per sample and per probe to FILE
  --report FILE      print the tables from a JSON file instead of running
  --plot DIR         also write throughput-vs-writers.svg and latency-vs-writers.svg there
";

#[derive(Clone, Debug)]
pub struct Cfg {
    pub quick: bool,
    pub rounds: usize,
    pub secs: f64,
    pub warmup: f64,
    pub bulk_mib: u64,
    /// `retained`'s volume in bytes.
    pub retained_bytes: u64,
    pub first_secs: f64,
    pub practices: Vec<Practice>,
    pub window: usize,
    pub window_1m: usize,
    pub probe_ms: u64,
    pub engines: Vec<String>,
    pub workloads: Vec<String>,
    pub dir: PathBuf,
    pub json: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

fn list(v: &str, allowed: &[&str]) -> Res<Vec<String>> {
    let out: Vec<String> = v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    for x in &out {
        if !allowed.contains(&x.as_str()) {
            return Err(format!("unknown id {x:?}; known: {}", allowed.join(",")).into());
        }
    }
    Ok(out)
}

fn parse_args() -> Res<Cfg> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut c = Cfg {
        quick,
        rounds: if quick { 2 } else { 7 },
        secs: if quick { 0.4 } else { 3.0 },
        warmup: if quick { 0.1 } else { 1.0 },
        bulk_mib: if quick { 32 } else { 1024 },
        retained_bytes: if quick { 64 << 20 } else { 4 << 30 },
        first_secs: if quick { 1.0 } else { 20.0 },
        practices: Practice::ALL.to_vec(),
        window: 64,
        window_1m: 4,
        probe_ms: if quick { 150 } else { 500 },
        engines: engines::ENGINES.iter().map(|s| s.to_string()).collect(),
        workloads: WORKLOADS.iter().map(|s| s.to_string()).collect(),
        dir: PathBuf::from("/tmp"),
        json: None,
        report: None,
        plot: None,
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => {}
            "--rounds" => c.rounds = val()?.parse()?,
            "--secs" => c.secs = val()?.parse()?,
            "--warmup" => c.warmup = val()?.parse()?,
            "--bulk-mib" => c.bulk_mib = val()?.parse()?,
            "--retained-gib" => {
                let g: f64 = val()?.parse()?;
                c.retained_bytes = (g * (1u64 << 30) as f64) as u64;
            }
            "--first-secs" => c.first_secs = val()?.parse()?,
            "--practice" => {
                let v = val()?;
                c.practices = match v.as_str() {
                    "both" => Practice::ALL.to_vec(),
                    one => vec![Practice::parse(one)
                        .ok_or_else(|| format!("--practice {one:?}: default, best or both"))?],
                };
            }
            "--window" => c.window = val()?.parse()?,
            "--window-1m" => c.window_1m = val()?.parse()?,
            "--probe-ms" => c.probe_ms = val()?.parse()?,
            "--engines" => c.engines = list(&val()?, &engines::ENGINES)?,
            "--workloads" => c.workloads = list(&val()?, &WORKLOADS)?,
            "--dir" => c.dir = PathBuf::from(val()?),
            "--json" => c.json = Some(PathBuf::from(val()?)),
            "--report" => c.report = Some(PathBuf::from(val()?)),
            "--plot" => c.plot = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{HELP}").into()),
        }
    }
    if c.rounds == 0
        || c.window == 0
        || c.window_1m == 0
        || c.secs <= 0.0
        || c.bulk_mib == 0
        || c.first_secs <= 0.0
        || c.retained_bytes < RETAINED_CALL
    {
        return Err(
            "--rounds, --secs, --bulk-mib, --first-secs, the windows and --retained-gib (at least one \
             call of 256 KiB) must be positive"
                .into(),
        );
    }
    Ok(c)
}

/// Whether `engine` runs `workload`: the pipelined workloads need a non-blocking append
/// (only this engine has one); `pipelined-1m` compares it with the raw loop's 1 MiB syncs.
pub fn applies(engine: &str, workload: &str) -> bool {
    match workload {
        "pipelined" => engine == "wal",
        "pipelined-1m" => engine == "wal" || engine == "raw",
        _ => true,
    }
}

/// One measured workload run.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub engine: String,
    pub workload: String,
    pub practice: Practice,
    pub round: usize,
    /// Position of the engine in the round's order.
    pub slot: usize,
    pub kept: bool,
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub secs: f64,
    pub entries: u64,
    pub bytes: u64,
    pub cpu_s: f64,
    pub open_s: Option<f64>,
    pub cold: Option<bool>,
    /// The probe taken before this engine's block in this round (fdatasync/s).
    pub probe: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Probe {
    pub round: usize,
    /// The workload group the probe preceded (its first workload); empty in files written
    /// before rounds were split by workload, when one probe preceded an engine's whole block.
    pub workload: String,
    pub practice: Practice,
    pub before: String,
    pub syncs_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Whether the group's round was kept (every probe within 2x of its first).
    pub kept: bool,
}

/// Incompressible filler; every entry starts with `seq u64 LE | stream u32 LE | 4 zero bytes`.
struct Filler {
    bytes: Vec<u8>,
}

impl Filler {
    fn new(len: usize) -> Filler {
        // xorshift64: the filler every published run wrote.
        let mut rng = wal_rng::Rng::xorshift64(0x9e37_79b9_7f4a_7c15);
        let bytes = (0..len).map(|_| rng.next_u64() as u8).collect();
        Filler { bytes }
    }

    fn fill(&self, buf: &mut Vec<u8>, len: usize, stream: u32, seq: u64) {
        buf.clear();
        buf.extend_from_slice(&self.bytes[..len]);
        stamp(buf, stream, seq);
    }
}

fn stamp(buf: &mut [u8], stream: u32, seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..12].copy_from_slice(&stream.to_le_bytes());
    buf[12..16].fill(0);
}

fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn sync_all_fs() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`; whether the cache could be dropped.
fn drop_caches() -> bool {
    sync_all_fs();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// What one timed region produced.
struct Measured {
    secs: f64,
    entries: u64,
    bytes: u64,
    cpu_s: f64,
    lat: Vec<u64>,
}

impl Measured {
    fn sample(mut self, engine: &str, workload: &str, practice: Practice) -> Sample {
        self.lat.sort_unstable();
        let p = |q| (!self.lat.is_empty()).then(|| engines::pct(&self.lat, q));
        Sample {
            engine: engine.into(),
            workload: workload.into(),
            practice,
            ops_per_s: self.entries as f64 / self.secs,
            mib_per_s: self.bytes as f64 / self.secs / (1 << 20) as f64,
            p50_us: p(0.50),
            p99_us: p(0.99),
            p999_us: p(0.999),
            secs: self.secs,
            entries: self.entries,
            bytes: self.bytes,
            cpu_s: self.cpu_s,
            ..Sample::default()
        }
    }
}

/// `threads` writers, each appending `per_call` entries of `len` bytes per call and waiting for
/// them to be durable: `warmup` untimed, then `dur` timed (every writer starts the timed part
/// together). Latency is per call.
fn writers(
    log: &dyn Engine,
    filler: &Filler,
    threads: usize,
    per_call: usize,
    len: usize,
    warmup: Duration,
    dur: Duration,
) -> Res<Measured> {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| -> Res<Measured> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> Res<(u64, Vec<u64>)> {
                    let mut bufs: Vec<Vec<u8>> = (0..per_call)
                        .map(|_| {
                            let mut b = Vec::new();
                            filler.fill(&mut b, len, t as u32, 0);
                            b
                        })
                        .collect();
                    let mut lat = Vec::with_capacity(1 << 16);
                    let mut seq = 0u64;
                    let mut run = |until: Instant, seq: &mut u64, lat: Option<&mut Vec<u64>>| -> Res<()> {
                        let mut lat = lat;
                        while Instant::now() < until {
                            for b in &mut bufs {
                                *seq += 1;
                                stamp(b, t as u32, *seq);
                            }
                            let refs: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
                            let t0 = Instant::now();
                            log.append(t as u32, &refs, true)?;
                            if let Some(lat) = lat.as_deref_mut() {
                                lat.push(t0.elapsed().as_nanos() as u64);
                            }
                        }
                        Ok(())
                    };
                    // A failed writer still meets both barriers, so nobody waits forever.
                    barrier.wait();
                    let warm = run(Instant::now() + warmup, &mut seq, None);
                    barrier.wait();
                    let before = seq;
                    warm?;
                    run(Instant::now() + dur, &mut seq, Some(&mut lat))?;
                    Ok((seq - before, lat))
                })
            })
            .collect();
        barrier.wait();
        barrier.wait();
        let cpu0 = cpu_secs();
        let start = Instant::now();
        let mut m = Measured { secs: 0.0, entries: 0, bytes: 0, cpu_s: 0.0, lat: Vec::new() };
        let mut err = None;
        for h in hs {
            match h.join() {
                Ok(Ok((n, lat))) => {
                    m.entries += n;
                    m.lat.extend(lat);
                }
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some("a writer thread panicked".into()),
            }
        }
        m.secs = start.elapsed().as_secs_f64();
        m.cpu_s = cpu_secs() - cpu0;
        m.bytes = m.entries * len as u64;
        match err {
            Some(e) => Err(e),
            None => Ok(m),
        }
    })
}

/// This engine's own workload: one submitter keeping `window` durable entries of `len` bytes in
/// flight for `dur`. Latency is submit to durable, per entry.
fn pipelined(
    log: &wal_engine::WalEngine,
    filler: &Filler,
    window: usize,
    len: usize,
    dur: Duration,
) -> Res<Measured> {
    let mut inflight: VecDeque<(wal_engine::Pending, Instant)> = VecDeque::with_capacity(window);
    let mut lat = Vec::with_capacity(1 << 16);
    let (cpu0, start) = (cpu_secs(), Instant::now());
    let deadline = start + dur;
    let mut seq = 0u64;
    while Instant::now() < deadline {
        if inflight.len() == window {
            if let Some((t, at)) = inflight.pop_front() {
                t.wait()?;
                lat.push(at.elapsed().as_nanos() as u64);
            }
        }
        seq += 1;
        let mut e = Vec::with_capacity(len);
        filler.fill(&mut e, len, 0, seq);
        let at = Instant::now();
        inflight.push_back((log.submit(e)?, at));
    }
    for (t, at) in inflight.drain(..) {
        t.wait()?;
        lat.push(at.elapsed().as_nanos() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Measured { secs, entries: seq, bytes: seq * len as u64, cpu_s: cpu_secs() - cpu0, lat })
}

/// The raw loop's file in the synced workloads (it wraps around it).
fn raw_bytes(cfg: &Cfg) -> u64 {
    if cfg.quick {
        16 << 20
    } else {
        64 << 20
    }
}

/// Runs one time-bound synced workload for one engine under `practice`, in a fresh directory.
fn synced(
    cfg: &Cfg,
    base: &Path,
    engine: &str,
    w: &str,
    practice: Practice,
    round: usize,
    filler: &Filler,
) -> Res<Sample> {
    let dur = Duration::from_secs_f64(cfg.secs);
    let warm = Duration::from_secs_f64(cfg.warmup);
    let dir = fresh(base, engine, w, practice, round);
    let m = if engine == "wal" && w.starts_with("pipelined") {
        let log = wal_engine::WalEngine::open(&dir, practice)?;
        sync_all_fs();
        let (window, len) = if w == "pipelined" { (cfg.window, 256) } else { (cfg.window_1m, 1 << 20) };
        pipelined(&log, filler, window, len, warm)?;
        let m = pipelined(&log, filler, window, len, dur)?;
        Box::new(log).close()?;
        m
    } else {
        let log = engines::open(engine, &dir, Mode::Synced { raw_bytes: raw_bytes(cfg), practice })?;
        sync_all_fs();
        let m = match w {
            "durable-1" => writers(&*log, filler, 1, 1, 256, warm, dur)?,
            "durable-8" => writers(&*log, filler, 8, 1, 256, warm, dur)?,
            "durable-64" => writers(&*log, filler, 64, 1, 256, warm, dur)?,
            "batch4k-64" => writers(&*log, filler, 1, 64, 4096, warm, dur)?,
            // The raw loop's 1 MiB write + fdatasync, one at a time.
            "pipelined-1m" => writers(&*log, filler, 1, 1, 1 << 20, warm, dur)?,
            other => return Err(format!("{engine} does not run {other}").into()),
        };
        log.close()?;
        m
    };
    remove(&dir);
    Ok(m.sample(engine, w, practice))
}

/// `first-minute`: a brand-new log, its open timed together with `first_secs` of `durable-8`
/// (no warm-up): what a new log's first segments cost (creation, first preparation, rotations
/// onto fresh files). Latency is per append call; `open_s` is the open alone.
fn first_minute(
    cfg: &Cfg,
    base: &Path,
    engine: &str,
    practice: Practice,
    round: usize,
    filler: &Filler,
) -> Res<Sample> {
    let dir = fresh(base, engine, "first-minute", practice, round);
    sync_all_fs();
    let (cpu0, start) = (cpu_secs(), Instant::now());
    let log = engines::open(engine, &dir, Mode::Synced { raw_bytes: raw_bytes(cfg), practice })?;
    let open_s = start.elapsed().as_secs_f64();
    let dur = Duration::from_secs_f64(cfg.first_secs);
    let mut m = writers(&*log, filler, 8, 1, 256, Duration::ZERO, dur)?;
    m.secs = start.elapsed().as_secs_f64();
    m.cpu_s = cpu_secs() - cpu0;
    log.close()?;
    remove(&dir);
    let mut s = m.sample(engine, "first-minute", practice);
    s.open_s = Some(open_s);
    Ok(s)
}

/// Entries per call of `retained` (and of `batch4k-64`), and the bytes of one call.
const RETAINED_ENTRIES: usize = 64;
const RETAINED_LEN: usize = 4096;
const RETAINED_CALL: u64 = (RETAINED_ENTRIES * RETAINED_LEN) as u64;

/// `retained`: the log kept whole (no engine purges, okaywal does not checkpoint, the raw loop
/// writes one file preallocated to the whole volume), 64 x 4 KiB durable per call until
/// `retained_bytes` are written; timed from the first append to the return of the last (whose
/// sync is the last). Latency is per call.
fn retained(cfg: &Cfg, base: &Path, engine: &str, round: usize, filler: &Filler) -> Res<Sample> {
    let calls = cfg.retained_bytes / RETAINED_CALL;
    let dir = fresh(base, engine, "retained", Practice::Default, round);
    let raw = calls * RETAINED_ENTRIES as u64 * (RETAINED_LEN as u64 + engines::RAW_HEADER);
    let log = engines::open(engine, &dir, Mode::Kept { bytes: raw })?;
    sync_all_fs();
    let mut bufs: Vec<Vec<u8>> = (0..RETAINED_ENTRIES)
        .map(|_| {
            let mut b = Vec::new();
            filler.fill(&mut b, RETAINED_LEN, 0, 0);
            b
        })
        .collect();
    let mut lat = Vec::with_capacity(calls as usize);
    let mut seq = 0u64;
    let (cpu0, start) = (cpu_secs(), Instant::now());
    for _ in 0..calls {
        for b in &mut bufs {
            seq += 1;
            stamp(b, 0, seq);
        }
        let refs: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let t0 = Instant::now();
        log.append(0, &refs, true)?;
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    let m = Measured { secs, entries: seq, bytes: seq * RETAINED_LEN as u64, cpu_s: cpu_secs() - cpu0, lat };
    log.close()?;
    remove(&dir);
    Ok(m.sample(engine, "retained", Practice::Default))
}

/// A fresh (absent) directory for one run.
fn fresh(base: &Path, engine: &str, w: &str, practice: Practice, round: usize) -> PathBuf {
    let d = base.join(format!("{engine}-{w}-{}-r{round}", practice.id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The bulk load for one engine, then the selected replays of what it wrote.
fn bulk(cfg: &Cfg, base: &Path, engine: &str, round: usize, filler: &Filler) -> Res<Vec<Sample>> {
    const LEN: usize = 1024;
    let want = |w: &str| cfg.workloads.iter().any(|x| x == w);
    let mut out = Vec::new();
    let n = (cfg.bulk_mib << 20) / LEN as u64;
    let dir = fresh(base, engine, "bulk-1k", Practice::Default, round);
    let log = engines::open(engine, &dir, Mode::Kept { bytes: n * (LEN as u64 + engines::RAW_HEADER) })?;
    sync_all_fs();
    let mut lat = Vec::with_capacity(n as usize);
    let (cpu0, start) = (cpu_secs(), Instant::now());
    log.bulk(n, &mut |seq, buf| filler.fill(buf, LEN, 0, seq), &mut lat)?;
    let secs = start.elapsed().as_secs_f64();
    let m = Measured { secs, entries: n, bytes: n * LEN as u64, cpu_s: cpu_secs() - cpu0, lat };
    log.close()?;
    if want("bulk-1k") {
        out.push(m.sample(engine, "bulk-1k", Practice::Default));
        report::progress(out.last());
    }
    for (w, cold) in [("replay-warm", false), ("replay-cold", true)] {
        if !want(w) {
            continue;
        }
        let dropped = cold && drop_caches();
        let (cpu0, start) = (cpu_secs(), Instant::now());
        let r = engines::replay(engine, &dir, n, LEN)?;
        let secs = start.elapsed().as_secs_f64();
        let m =
            Measured { secs, entries: r.entries, bytes: r.bytes, cpu_s: cpu_secs() - cpu0, lat: Vec::new() };
        let mut s = m.sample(engine, w, Practice::Default);
        s.open_s = Some(r.open_s);
        s.cold = Some(dropped);
        out.push(s);
        report::progress(out.last());
    }
    remove(&dir);
    Ok(out)
}

/// The groups a round runs, in order: each other workload alone, then the bulk load with the
/// replays of its log. Every engine runs a group back to back (order rotated per round), so the
/// engines' runs of one workload are seconds apart rather than a whole block apart: the disk's
/// regime, which moves over minutes, is shared by the runs a ratio compares. A group runs once
/// per practice if its workload depends on the practice ([`per_practice`]), else once.
fn groups(cfg: &Cfg) -> Vec<Vec<&'static str>> {
    let want = |w: &str| cfg.workloads.iter().any(|x| x == w);
    let mut g: Vec<Vec<&'static str>> =
        WORKLOADS.into_iter().filter(|w| want(w) && !BULK.contains(w)).map(|w| vec![w]).collect();
    let tail: Vec<&'static str> = BULK.into_iter().filter(|w| want(w)).collect();
    if !tail.is_empty() {
        g.push(tail);
    }
    g
}

/// Runs one engine's part of a group under `practice`.
fn run_group(
    cfg: &Cfg,
    base: &Path,
    engine: &str,
    group: &[&str],
    practice: Practice,
    round: usize,
    filler: &Filler,
) -> Res<Vec<Sample>> {
    if group.iter().any(|w| BULK.contains(w)) {
        return bulk(cfg, base, engine, round, filler);
    }
    let mut out = Vec::new();
    for w in group.iter().filter(|w| applies(engine, w)) {
        out.push(match *w {
            "first-minute" => first_minute(cfg, base, engine, practice, round, filler)?,
            "retained" => retained(cfg, base, engine, round, filler)?,
            _ => synced(cfg, base, engine, w, practice, round, filler)?,
        });
        report::progress(out.last());
    }
    Ok(out)
}

/// The practices a group runs under in `round`: each selected one if the group depends on the
/// practice (their order rotates per round, as the engines' does), else once, as
/// [`Practice::Default`].
fn practices_for(cfg: &Cfg, group: &[&str], round: usize) -> Vec<Practice> {
    if !group.iter().any(|w| per_practice(w)) {
        return vec![Practice::Default];
    }
    let n = cfg.practices.len();
    (0..n).map(|k| cfg.practices[(k + round) % n]).collect()
}

/// Removes a log and syncs, so that the file system's work for the deletion (the mount has
/// `discard`) is done before the next measurement rather than in its first journal commit.
fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    sync_all_fs();
}

/// "2 vCPU <model>, Linux <release>": recorded with every sample, since the VM these runs share
/// has moved between hosts with different CPUs.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
        .map_or("unknown CPU", str::trim)
        .to_string();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{n} vCPU {model}, Linux {}", kernel.trim())
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn run(cfg: &Cfg) -> Res<()> {
    let base = cfg.dir.join(format!("wal-compare-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let result = run_in(cfg, &base);
    let _ = std::fs::remove_dir_all(&base);
    result
}

/// One group of one round under one practice: every engine that runs it, in the round's order,
/// each after a disk probe; the samples and probes are marked kept if every probe stayed within
/// 2x of the first.
fn run_probed(
    cfg: &Cfg,
    base: &Path,
    group: &[&str],
    practice: Practice,
    round: usize,
    probe_file: &std::fs::File,
    filler: &Filler,
) -> Res<(Vec<Sample>, Vec<Probe>)> {
    let label = group[0];
    let tag =
        if group.iter().any(|w| per_practice(w)) { format!(" ({})", practice.id()) } else { String::new() };
    let in_group: Vec<&String> = cfg.engines.iter().filter(|e| group.iter().any(|w| applies(e, w))).collect();
    let n = in_group.len();
    let order: Vec<&String> = (0..n).map(|k| in_group[(k + round) % n]).collect();
    let (mut rs, mut rp) = (Vec::new(), Vec::<Probe>::new());
    for (slot, engine) in order.iter().enumerate() {
        let (rate, p50, p99) = engines::probe(probe_file, cfg.probe_ms)?;
        eprintln!(
            "round {round} {label}{tag}: probe before {engine}: {rate:.0} fdatasync/s (p50 {p50:.0} us)"
        );
        rp.push(Probe {
            round,
            workload: label.to_string(),
            practice,
            before: engine.to_string(),
            syncs_per_s: rate,
            p50_us: p50,
            p99_us: p99,
            kept: true,
        });
        for mut s in run_group(cfg, base, engine, group, practice, round, filler)? {
            s.round = round;
            s.slot = slot;
            s.probe = rate;
            rs.push(s);
        }
    }
    let first = rp.first().map_or(0.0, |p| p.syncs_per_s);
    let kept = rp.iter().all(|p| p.syncs_per_s <= 2.0 * first && p.syncs_per_s >= first / 2.0);
    if !kept {
        eprintln!("round {round} {label}{tag}: DISCARDED (a probe moved more than 2x)");
    }
    for s in &mut rs {
        s.kept = kept;
    }
    for p in &mut rp {
        p.kept = kept;
    }
    Ok((rs, rp))
}

fn run_in(cfg: &Cfg, base: &Path) -> Res<()> {
    let mut json = match &cfg.json {
        Some(p) => Some(std::fs::OpenOptions::new().create(true).append(true).open(p)?),
        None => None,
    };
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let machine = machine();
    let filler = Filler::new(1 << 20);
    let probe_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(base.join("probe"))?;
    engines::zero_fill(&probe_file, 1 << 20)?;
    eprintln!(
        "wal-compare: {} rounds, practices {}, {} s per synced workload after {} s warm-up, first-minute {} s, retained {} MiB, bulk {} MiB, windows {} x 256 B and {} x 1 MiB, load {:.2}, dir {}, {}",
        cfg.rounds,
        cfg.practices.iter().map(|p| p.id()).collect::<Vec<_>>().join(","),
        cfg.secs,
        cfg.warmup,
        cfg.first_secs,
        cfg.retained_bytes >> 20,
        cfg.bulk_mib,
        cfg.window,
        cfg.window_1m,
        load1(),
        base.display(),
        machine
    );
    let (mut samples, mut probes) = (Vec::new(), Vec::new());
    let groups = groups(cfg);
    for round in 0..cfg.rounds {
        for group in &groups {
            for practice in practices_for(cfg, group, round) {
                let (rs, rp) = run_probed(cfg, base, group, practice, round, &probe_file, &filler)?;
                if let Some(f) = &mut json {
                    let (now, load) = (
                        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
                        load1(),
                    );
                    for p in &rp {
                        writeln!(f, "{}", report::probe_json(p, started, now))?;
                    }
                    for s in &rs {
                        writeln!(f, "{}", report::sample_json(s, cfg, (started, now), load, &machine))?;
                    }
                    f.flush()?;
                }
                samples.extend(rs);
                probes.extend(rp);
            }
        }
        eprintln!("round {round} done");
    }
    eprintln!("load at the end {:.2}", load1());
    print!("{}", report::render(&samples, &probes, &cfg.engines));
    if let Some(dir) = &cfg.plot {
        plot::write(dir, &report::usable(&samples).0, &cfg.engines)?;
    }
    Ok(())
}

fn main() {
    let cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let r = match &cfg.report {
        Some(p) => report::from_json(p).and_then(|(s, p, engines)| {
            print!("{}", report::render(&s, &p, &engines));
            match &cfg.plot {
                Some(dir) => plot::write(dir, &report::usable(&s).0, &engines),
                None => Ok(()),
            }
        }),
        None => run(&cfg),
    };
    if let Err(e) = r {
        eprintln!("wal-compare: {e}");
        std::process::exit(1);
    }
}
