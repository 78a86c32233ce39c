//! JSON lines out and in, and the Markdown tables, one set per practice: medians with min/max
//! over the kept rounds, this engine's same-round ratio to each other engine, and the targets
//! of issues 3, 8 and 27.

use crate::engines::{Practice, Res};
use crate::{Cfg, Probe, Sample, KEPT, WORKLOADS};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The peers (the floors compare with the best of these; `raw` is the machine's own limit).
const PEERS: [&str; 2] = ["raft-engine", "okaywal"];

pub fn describe(w: &str) -> &'static str {
    match w {
        "durable-1" => "1 writer, 256 B entries, each append waits until durable",
        "durable-8" => "8 writer threads, 256 B entries, each waits for its own entry to be durable",
        "durable-64" => "64 writer threads, 256 B entries, each waits for its own entry to be durable",
        "batch4k-64" => "1 writer, 64 x 4 KiB entries per append call (one atomic batch), durable",
        "pipelined" => "this engine only: 1 submitter keeping a window of durable 256 B entries in flight",
        "pipelined-1m" => "1 MiB durable entries: this engine with a window in flight, the raw loop one write + fdatasync at a time",
        "bulk-1k" => "1 writer, 1 KiB entries appended without durability, then one sync (timed to the end of that sync)",
        "replay-warm" => "reopen bulk-1k's log and iterate every entry (checksums checked), page cache warm",
        "replay-cold" => "the same after `sync; echo 3 > /proc/sys/vm/drop_caches`",
        "first-minute" => "a new log: its open timed together with durable-8 (8 writers, 256 B entries, each waits)",
        "retained" => "the log kept whole (nothing purged), 1 writer, 64 x 4 KiB per durable call, volume-bound",
        _ => "",
    }
}

pub fn progress(s: Option<&Sample>) {
    let Some(s) = s else { return };
    let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    eprintln!(
        "  {:<11} {:<12} {:<7} {:>10.0} ops/s {:>8.1} MiB/s  p50 {:>6} us  p99 {:>6} us  ({:.2} s, cpu {:.2} s{})",
        s.engine,
        s.workload,
        s.practice.id(),
        s.ops_per_s,
        s.mib_per_s,
        us(s.p50_us),
        us(s.p99_us),
        s.secs,
        s.cpu_s,
        match (s.workload.as_str(), s.cold) {
            ("replay-cold", Some(true)) => ", cache dropped",
            ("replay-cold", _) => ", cache NOT dropped",
            _ => "",
        }
    );
}

/// One sample's line of the `--json` file. Written through a `serde_json::Value`, whose keys
/// are sorted (serde_json without `preserve_order`): the order every results file has.
#[derive(Serialize)]
struct SampleJson<'a> {
    kind: &'static str,
    engine: &'a str,
    workload: &'a str,
    practice: &'static str,
    round: usize,
    slot: usize,
    kept: bool,
    ops_per_s: f64,
    mib_per_s: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    secs: f64,
    entries: u64,
    bytes: u64,
    cpu_s: f64,
    open_s: Option<f64>,
    cold: Option<bool>,
    probe_syncs_per_s: f64,
    /// The window in flight, for the workloads that keep one.
    window: Option<usize>,
    first_secs: Option<f64>,
    quick: bool,
    started_unix: u64,
    unix: u64,
    load1: f64,
    machine: &'a str,
}

/// One probe's line of the `--json` file, keyed like a sample's where they mean the same.
#[derive(Serialize)]
struct ProbeJson<'a> {
    kind: &'static str,
    engine: &'static str,
    workload: &'static str,
    round: usize,
    before_workload: &'a str,
    practice: &'static str,
    before: &'a str,
    kept: bool,
    ops_per_s: f64,
    mib_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    started_unix: u64,
    unix: u64,
}

/// A view as one JSON line, its keys sorted.
fn json_line(view: &impl Serialize) -> String {
    serde_json::to_value(view).expect("a JSON line serializes").to_string()
}

pub fn sample_json(s: &Sample, cfg: &Cfg, (started, now): (u64, u64), load1: f64, machine: &str) -> String {
    json_line(&SampleJson {
        kind: "sample",
        engine: &s.engine,
        workload: &s.workload,
        practice: s.practice.id(),
        round: s.round,
        slot: s.slot,
        kept: s.kept,
        ops_per_s: s.ops_per_s,
        mib_per_s: s.mib_per_s,
        p50_us: s.p50_us,
        p99_us: s.p99_us,
        p999_us: s.p999_us,
        secs: s.secs,
        entries: s.entries,
        bytes: s.bytes,
        cpu_s: s.cpu_s,
        open_s: s.open_s,
        cold: s.cold,
        probe_syncs_per_s: s.probe,
        window: match s.workload.as_str() {
            "pipelined" => Some(cfg.window),
            "pipelined-1m" if s.engine == "wal" => Some(cfg.window_1m),
            _ => None,
        },
        first_secs: (s.workload == "first-minute").then_some(cfg.first_secs),
        quick: cfg.quick,
        started_unix: started,
        unix: now,
        load1,
        machine,
    })
}

pub fn probe_json(p: &Probe, started: u64, now: u64) -> String {
    json_line(&ProbeJson {
        kind: "probe",
        engine: "probe",
        workload: "probe",
        round: p.round,
        before_workload: &p.workload,
        practice: p.practice.id(),
        before: &p.before,
        kept: p.kept,
        ops_per_s: p.syncs_per_s,
        mib_per_s: p.syncs_per_s * 4096.0 / (1 << 20) as f64,
        p50_us: p.p50_us,
        p99_us: p.p99_us,
        started_unix: started,
        unix: now,
    })
}

/// Reads a `--json` file back: samples, probes and the engines in the canonical order. A line
/// without a `practice` (files written before issue 27) is read as [`Practice::Best`]: `wal`
/// purged every 100 ms in the synced workloads then; raft-engine was never purged (its default)
/// and okaywal and the raw loop ran as under either practice now.
pub fn from_json(path: &Path) -> Res<(Vec<Sample>, Vec<Probe>, Vec<String>)> {
    let text = std::fs::read_to_string(path)?;
    let (mut samples, mut probes) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let round = v.get("round").and_then(Value::as_u64).unwrap_or(0) as usize;
        let practice = match v.get("practice").and_then(Value::as_str) {
            None => Practice::Best,
            Some(p) => Practice::parse(p)
                .ok_or_else(|| format!("{}:{}: unknown practice {p:?}", path.display(), i + 1))?,
        };
        match v.get("kind").and_then(Value::as_str) {
            Some("probe") => probes.push(Probe {
                round,
                workload: s("before_workload"),
                practice,
                kept: v.get("kept").and_then(Value::as_bool).unwrap_or(true),
                before: s("before"),
                syncs_per_s: f("ops_per_s").unwrap_or(0.0),
                p50_us: f("p50_us").unwrap_or(0.0),
                p99_us: f("p99_us").unwrap_or(0.0),
            }),
            Some("sample") => samples.push(Sample {
                engine: s("engine"),
                workload: s("workload"),
                practice,
                round,
                slot: v.get("slot").and_then(Value::as_u64).unwrap_or(0) as usize,
                kept: v.get("kept").and_then(Value::as_bool).unwrap_or(true),
                ops_per_s: f("ops_per_s").unwrap_or(0.0),
                mib_per_s: f("mib_per_s").unwrap_or(0.0),
                p50_us: f("p50_us"),
                p99_us: f("p99_us"),
                p999_us: f("p999_us"),
                secs: f("secs").unwrap_or(0.0),
                entries: v.get("entries").and_then(Value::as_u64).unwrap_or(0),
                bytes: v.get("bytes").and_then(Value::as_u64).unwrap_or(0),
                cpu_s: f("cpu_s").unwrap_or(0.0),
                open_s: f("open_s"),
                cold: v.get("cold").and_then(Value::as_bool),
                probe: f("probe_syncs_per_s").unwrap_or(0.0),
            }),
            _ => {}
        }
    }
    let engines = crate::engines::ENGINES
        .iter()
        .filter(|e| samples.iter().any(|s| s.engine == **e))
        .map(|e| e.to_string())
        .collect();
    Ok((samples, probes, engines))
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// `median [min-max]` with `digits` decimals.
fn spread(v: &[f64], digits: usize) -> String {
    let Some(m) = median(v) else { return "-".into() };
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() == 1 {
        format!("{m:.digits$}")
    } else {
        format!("{m:.digits$} [{lo:.digits$}-{hi:.digits$}]")
    }
}

/// The samples the tables use: the kept rounds, or every round if none was kept.
pub fn usable(samples: &[Sample]) -> (Vec<&Sample>, bool) {
    let kept: Vec<&Sample> = samples.iter().filter(|s| s.kept).collect();
    if kept.is_empty() {
        (samples.iter().collect(), false)
    } else {
        (kept, true)
    }
}

fn get<'a>(ss: &[&'a Sample], engine: &str, workload: &str, round: usize) -> Option<&'a Sample> {
    ss.iter().copied().find(|s| s.engine == engine && s.workload == workload && s.round == round)
}

fn rounds_of(ss: &[&Sample]) -> Vec<usize> {
    let mut r: Vec<usize> = ss.iter().map(|s| s.round).collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// CPU seconds (all threads) per GiB of payload.
fn cpu_per_gib(s: &Sample) -> Option<f64> {
    (s.bytes > 0).then(|| s.cpu_s / (s.bytes as f64 / (1u64 << 30) as f64))
}

/// What a target compares: throughput (higher is better), CPU per GiB or p99 (lower is better).
#[derive(Clone, Copy, PartialEq)]
enum Measure {
    Throughput,
    CpuPerGib,
    P99,
}

impl Measure {
    fn of(self, s: &Sample) -> Option<f64> {
        match self {
            Measure::Throughput => Some(s.ops_per_s),
            Measure::CpuPerGib => cpu_per_gib(s),
            Measure::P99 => s.p99_us,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Measure::Throughput => "entries/s",
            Measure::CpuPerGib => "CPU s/GiB",
            Measure::P99 => "p99",
        }
    }

    /// The better of two values.
    fn better(self, a: f64, b: f64) -> f64 {
        match self {
            Measure::Throughput => a.max(b),
            Measure::CpuPerGib | Measure::P99 => a.min(b),
        }
    }
}

/// Same-round ratios of `wal`'s measure over `other(round)`, one per round where both exist.
fn ratios(ss: &[&Sample], workload: &str, m: Measure, other: impl Fn(usize) -> Option<f64>) -> Vec<f64> {
    rounds_of(ss)
        .into_iter()
        .filter_map(|r| {
            let w = m.of(get(ss, "wal", workload, r)?)?;
            let o = other(r)?;
            (o > 0.0).then_some(w / o)
        })
        .collect()
}

/// The best peer's measure in `round`: the higher throughput, the lower CPU per GiB or p99.
fn best_peer(ss: &[&Sample], workload: &str, m: Measure, round: usize) -> Option<f64> {
    PEERS
        .iter()
        .filter_map(|p| get(ss, p, workload, round).and_then(|s| m.of(s)))
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| m.better(a, x))))
}

/// Whom a target compares `wal` with.
#[derive(Clone, Copy)]
enum Versus {
    BestPeer,
    Engine(&'static str),
}

impl Versus {
    fn name(self) -> &'static str {
        match self {
            Versus::BestPeer => "best peer",
            Versus::Engine(e) => e,
        }
    }

    fn value(self, ss: &[&Sample], workload: &str, m: Measure, round: usize) -> Option<f64> {
        match self {
            Versus::BestPeer => best_peer(ss, workload, m, round),
            Versus::Engine(e) => get(ss, e, workload, round).and_then(|s| m.of(s)),
        }
    }
}

/// One target: the ratio `wal ÷ versus` of `measure` must be at least (`at_least`) or at most
/// `bound`; `goal` is the higher aim where an issue sets one.
struct Target {
    workload: &'static str,
    measure: Measure,
    versus: Versus,
    at_least: bool,
    bound: f64,
    goal: Option<f64>,
    issue: &'static str,
}

const fn floor(workload: &'static str, versus: Versus, bound: f64, issue: &'static str) -> Target {
    Target { workload, measure: Measure::Throughput, versus, at_least: true, bound, goal: None, issue }
}

/// Issues 3 and 8 (appends, replay), then issue 27 (defaults: a log that is never purged, and
/// the CPU an append costs).
fn targets() -> Vec<Target> {
    use Versus::{BestPeer, Engine};
    vec![
        floor("durable-1", BestPeer, 0.9, "3"),
        Target { goal: Some(1.5), ..floor("durable-8", BestPeer, 1.0, "3") },
        Target { goal: Some(3.0), ..floor("durable-64", BestPeer, 1.0, "3") },
        floor("batch4k-64", BestPeer, 1.0, "3"),
        floor("bulk-1k", BestPeer, 1.0, "3"),
        floor("replay-warm", BestPeer, 2.0, "8"),
        floor("replay-cold", BestPeer, 0.0, "8"),
        floor("pipelined-1m", Engine("raw"), 0.5, "3"),
        floor("batch4k-64", BestPeer, 0.9, "27"),
        floor("batch4k-64", Engine("raw"), 0.8, "27"),
        floor("retained", BestPeer, 0.9, "27"),
        floor("retained", Engine("raw"), 0.8, "27"),
        Target {
            measure: Measure::CpuPerGib,
            at_least: false,
            ..floor("bulk-1k", Engine("okaywal"), 1.5, "27")
        },
        floor("bulk-1k", Engine("okaywal"), 1.0, "27"),
        Target { measure: Measure::P99, at_least: false, ..floor("durable-64", BestPeer, 1.0, "27") },
    ]
}

/// `median [min-max]` of latencies in microseconds (one decimal below 10 us).
fn us(v: Vec<f64>) -> String {
    match median(&v) {
        None => "-".to_string(),
        Some(m) if m < 10.0 => spread(&v, 1),
        Some(_) => spread(&v, 0),
    }
}

fn practice_heading(p: Practice) -> &'static str {
    match p {
        Practice::Default => {
            "Default practice: each engine with its default options and no maintenance thread \
             (`wal` and raft-engine never purged, okaywal checkpointing by itself as it must)"
        }
        Practice::Best => {
            "Best practice: each engine's documented steady state (`wal` purged every 100 ms, \
             raft-engine compacted and `purge_expired_files` every 100 ms with recycling, okaywal as by default)"
        }
    }
}

pub fn render(samples: &[Sample], probes: &[Probe], engines: &[String]) -> String {
    let mut o = String::new();
    let (ss, any_kept) = usable(samples);
    let all_rounds = rounds_of(&samples.iter().collect::<Vec<_>>());
    let _ = writeln!(o, "\n### Disk probes (4 KiB pwrite + fdatasync before each engine's run)\n");
    let _ =
        writeln!(o, "| round | before | practice | probes in engine order (fdatasync/s) | max/min | kept |");
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    let mut groups: Vec<(usize, &str, Practice)> =
        probes.iter().map(|p| (p.round, p.workload.as_str(), p.practice)).collect();
    groups.dedup();
    let in_group =
        |(r, w, pr): (usize, &str, Practice), p: &Probe| p.round == r && p.workload == w && p.practice == pr;
    for &g in &groups {
        let ps: Vec<&Probe> = probes.iter().filter(|p| in_group(g, p)).collect();
        let text: Vec<String> = ps.iter().map(|p| format!("{} {:.0}", p.before, p.syncs_per_s)).collect();
        let lo = ps.iter().map(|p| p.syncs_per_s).fold(f64::INFINITY, f64::min);
        let hi = ps.iter().map(|p| p.syncs_per_s).fold(0.0, f64::max);
        let kept = ps.iter().all(|p| p.kept);
        let (r, w, pr) = g;
        let pr = if KEPT.contains(&w) { "-" } else { pr.id() };
        let w = if w.is_empty() { "every workload" } else { w };
        let _ = writeln!(
            o,
            "| {r} | {w} | {pr} | {} | {:.2} | {} |",
            text.join(", "),
            hi / lo,
            if kept { "yes" } else { "no" }
        );
    }
    let kept_groups =
        groups.iter().filter(|&&g| probes.iter().filter(|p| in_group(g, p)).all(|p| p.kept)).count();
    let _ = writeln!(
        o,
        "\n{kept_groups} of {} probed runs kept ({} rounds){}. Cells: median [min-max] over the kept \
         rounds of each workload; ratios are computed within each round, then summarised the same way. \
         CPU s/GiB: process CPU time (all threads) over the timed region per GiB of payload.",
        groups.len(),
        all_rounds.len(),
        if any_kept { "" } else { " (none was: every round is shown, treat as indicative only)" }
    );
    for practice in Practice::ALL {
        let mine: Vec<&Sample> = ss.iter().copied().filter(|s| s.practice == practice).collect();
        if mine.is_empty() {
            continue;
        }
        let every: Vec<&Sample> = samples.iter().filter(|s| s.practice == practice).collect();
        render_practice(&mut o, practice, &mine, &every, engines);
    }
    o
}

/// One practice's tables: a table per workload, the targets, the pipelined note.
fn render_practice(
    o: &mut String,
    practice: Practice,
    ss: &[&Sample],
    every: &[&Sample],
    engines: &[String],
) {
    let _ = writeln!(o, "\n### {}\n", practice_heading(practice));
    let kept_here: Vec<&str> = KEPT.iter().copied().filter(|w| ss.iter().any(|s| s.workload == *w)).collect();
    match practice {
        Practice::Default if !kept_here.is_empty() => {
            let _ = writeln!(
                o,
                "The log is kept whole in {}: no engine purges there under either practice, so they run once and are shown here only.",
                kept_here.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(", ")
            );
        }
        Practice::Best if kept_here.is_empty() => {
            let _ = writeln!(
                o,
                "The workloads that keep the whole log (`retained`, `bulk-1k` and its replays) run once, under the default practice."
            );
        }
        _ => {}
    }
    for w in WORKLOADS {
        let rows: Vec<&String> =
            engines.iter().filter(|e| ss.iter().any(|s| s.engine == **e && s.workload == w)).collect();
        if rows.is_empty() {
            continue;
        }
        let replay = w.starts_with("replay");
        let first = w == "first-minute";
        let _ = writeln!(o, "\n#### {w} ({}): {}\n", practice.id(), describe(w));
        let head = if replay {
            "open s | CPU s"
        } else if first {
            "open s | p50 us | p99 us | p999 us | CPU s/GiB"
        } else {
            "p50 us | p99 us | p999 us | CPU s/GiB"
        };
        let _ = writeln!(o, "| engine | entries/s | MiB/s | {head} | wal ÷ engine |");
        let _ = writeln!(o, "|{}", "---|".repeat(4 + head.matches('|').count() + 1));
        for e in rows {
            let mine: Vec<&Sample> =
                ss.iter().copied().filter(|s| s.engine == **e && s.workload == w).collect();
            let col = |f: fn(&Sample) -> Option<f64>| mine.iter().filter_map(|s| f(s)).collect::<Vec<_>>();
            let mut cells = Vec::new();
            if replay || first {
                cells.push(spread(&col(|s| s.open_s), 2));
            }
            if replay {
                cells.push(spread(&col(|s| Some(s.cpu_s)), 2));
            } else {
                cells.push(us(col(|s| s.p50_us)));
                cells.push(us(col(|s| s.p99_us)));
                cells.push(us(col(|s| s.p999_us)));
                cells.push(spread(&col(cpu_per_gib), 2));
            }
            let ratio = if e == "wal" {
                "1".to_string()
            } else {
                let v = ratios(ss, w, Measure::Throughput, |r| get(ss, e, w, r).map(|s| s.ops_per_s));
                if v.is_empty() {
                    "-".into()
                } else {
                    spread(&v, 2)
                }
            };
            let _ = writeln!(
                o,
                "| {e} | {} | {} | {} | {ratio} |",
                spread(&col(|s| Some(s.ops_per_s)), 0),
                spread(&col(|s| Some(s.mib_per_s)), 1),
                cells.join(" | ")
            );
        }
        if w == "replay-cold" {
            let not_cold = ss.iter().filter(|s| s.workload == w && s.cold == Some(false)).count();
            if not_cold > 0 {
                let _ =
                    writeln!(o, "\n{not_cold} replay-cold runs could NOT drop the page cache (not cold).");
            }
        }
    }
    render_targets(o, practice, ss, every);
    if let Some(p) = median(
        &ss.iter()
            .filter(|s| s.workload == "pipelined" && s.engine == "wal")
            .map(|s| s.ops_per_s)
            .collect::<Vec<_>>(),
    ) {
        let v = ratios(ss, "pipelined", Measure::Throughput, |r| {
            best_peer(ss, "durable-1", Measure::Throughput, r)
        });
        let _ = writeln!(
            o,
            "\n`pipelined` (one submitter, a window in flight): {p:.0} entries/s, {} x the best peer's durable-1 \
             in the same round (the peers' blocking APIs cannot keep a window).",
            spread(&v, 2)
        );
    }
}

/// The targets table of one practice (each target's ratio from that practice's samples).
fn render_targets(o: &mut String, practice: Practice, ss: &[&Sample], every: &[&Sample]) {
    let _ = writeln!(
        o,
        "\n#### Against the targets ({} practice; {})\n",
        practice.id(),
        match practice {
            Practice::Default => {
                "issue 27's targets are about this one: a log that is never purged, default options"
            }
            Practice::Best => {
                "issue 3's and 8's floors were first measured like this, `wal` purging every 100 ms; \
                 issue 27's rows are shown for comparison"
            }
        }
    );
    let _ = writeln!(
        o,
        "| workload | measure | wal ÷ | ratio | bound | goal | bound met (median) | in every kept round | every round, discarded too | issue |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
    for t in targets() {
        let of = |ss: &[&Sample]| {
            ratios(ss, t.workload, t.measure, |r| t.versus.value(ss, t.workload, t.measure, r))
        };
        let v = of(ss);
        if v.is_empty() {
            continue;
        }
        let all = of(every);
        let m = median(&v).unwrap_or(f64::NAN);
        // The round that is furthest from the bound.
        let worst = if t.at_least {
            v.iter().copied().fold(f64::INFINITY, f64::min)
        } else {
            v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        };
        let sign = if t.at_least { ">=" } else { "<=" };
        let bound_txt = if t.bound > 0.0 { format!("{sign} {}x", t.bound) } else { "none".into() };
        let goal_txt =
            t.goal.map_or("-".into(), |g| format!("{g}x{}", if m >= g { " (met)" } else { " (not met)" }));
        let met = |x: f64| {
            if t.bound <= 0.0 {
                "-"
            } else if (t.at_least && x >= t.bound) || (!t.at_least && x <= t.bound) {
                "yes"
            } else {
                "no"
            }
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {bound_txt} | {goal_txt} | {} | {} | {} | {} |",
            t.workload,
            t.measure.name(),
            t.versus.name(),
            spread(&v, 2),
            met(m),
            met(worst),
            spread(&all, 2),
            t.issue
        );
    }
    let _ = writeln!(
        o,
        "\nThe best peer is the better of raft-engine and okaywal in the same round for the measure of the row: \
         the higher entries/s, the lower CPU s/GiB or p99. A `<=` bound is a ceiling: the ratio must stay at or under it."
    );
}

#[cfg(test)]
mod tests;
