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

mod args;
mod engines;
mod okaywal_engine;
mod plot;
mod raft_engine_engine;
mod raft_log_engine;
mod raw_engine;
mod report;
mod wal_engine;
mod workloads;

use args::{parse_args, Cfg};
use engines::{Practice, Res};
use std::io::Write;
use std::path::Path;
use workloads::{bulk, first_minute, retained, synced};

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

/// Whether `engine` runs `workload`: the pipelined workloads need a non-blocking append
/// (only this engine has one); `pipelined-1m` compares it with the raw loop's 1 MiB syncs.
pub fn applies(engine: &str, workload: &str) -> bool {
    match workload {
        "pipelined" => engine == "wal",
        "pipelined-1m" => engine == "wal" || engine == "raw",
        // The loop into fresh blocks is the bound of a log that keeps what it writes: the
        // durable rows that write more than a segment.
        _ if engine == "raw-fresh" => matches!(workload, "batch4k-64" | "retained"),
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
    raw_engine::zero_fill(&probe_file, 1 << 20)?;
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
