//! JSON lines out and in, and the Markdown tables: medians with min/max over the kept rounds,
//! this engine's same-round ratio to each other engine, and issue 3's floors.

use crate::engines::Res;
use crate::{Cfg, Probe, Sample, WORKLOADS};
use serde_json::{json, Value};
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
        _ => "",
    }
}

pub fn progress(s: Option<&Sample>) {
    let Some(s) = s else { return };
    let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    eprintln!(
        "  {:<11} {:<12} {:>10.0} ops/s {:>8.1} MiB/s  p50 {:>6} us  p99 {:>6} us  ({:.2} s, cpu {:.2} s{})",
        s.engine,
        s.workload,
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

pub fn sample_json(s: &Sample, cfg: &Cfg, (started, now): (u64, u64), load1: f64, machine: &str) -> String {
    json!({
        "kind": "sample",
        "engine": s.engine,
        "workload": s.workload,
        "round": s.round,
        "slot": s.slot,
        "kept": s.kept,
        "ops_per_s": s.ops_per_s,
        "mib_per_s": s.mib_per_s,
        "p50_us": s.p50_us,
        "p99_us": s.p99_us,
        "p999_us": s.p999_us,
        "secs": s.secs,
        "entries": s.entries,
        "bytes": s.bytes,
        "cpu_s": s.cpu_s,
        "open_s": s.open_s,
        "cold": s.cold,
        "probe_syncs_per_s": s.probe,
        "window": match s.workload.as_str() {
            "pipelined" => Some(cfg.window),
            "pipelined-1m" if s.engine == "wal" => Some(cfg.window_1m),
            _ => None,
        },
        "quick": cfg.quick,
        "started_unix": started,
        "unix": now,
        "load1": load1,
        "machine": machine,
    })
    .to_string()
}

pub fn probe_json(p: &Probe, started: u64, now: u64) -> String {
    json!({
        "kind": "probe",
        "engine": "probe",
        "workload": "probe",
        "round": p.round,
        "before_workload": p.workload,
        "before": p.before,
        "kept": p.kept,
        "ops_per_s": p.syncs_per_s,
        "mib_per_s": p.syncs_per_s * 4096.0 / (1 << 20) as f64,
        "p50_us": p.p50_us,
        "p99_us": p.p99_us,
        "started_unix": started,
        "unix": now,
    })
    .to_string()
}

/// Reads a `--json` file back: samples, probes and the engines in the canonical order.
pub fn from_json(path: &Path) -> Res<(Vec<Sample>, Vec<Probe>, Vec<String>)> {
    let text = std::fs::read_to_string(path)?;
    let (mut samples, mut probes) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let round = v.get("round").and_then(Value::as_u64).unwrap_or(0) as usize;
        match v.get("kind").and_then(Value::as_str) {
            Some("probe") => probes.push(Probe {
                round,
                workload: s("before_workload"),
                kept: v.get("kept").and_then(Value::as_bool).unwrap_or(true),
                before: s("before"),
                syncs_per_s: f("ops_per_s").unwrap_or(0.0),
                p50_us: f("p50_us").unwrap_or(0.0),
                p99_us: f("p99_us").unwrap_or(0.0),
            }),
            Some("sample") => samples.push(Sample {
                engine: s("engine"),
                workload: s("workload"),
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

/// Same-round ratios of `wal` over `other(round)` (ops/s), one per round where both exist.
fn ratios(ss: &[&Sample], workload: &str, num: &str, other: impl Fn(usize) -> Option<f64>) -> Vec<f64> {
    rounds_of(ss)
        .into_iter()
        .filter_map(|r| {
            let w = get(ss, num, workload, r)?.ops_per_s;
            let o = other(r)?;
            (o > 0.0).then_some(w / o)
        })
        .collect()
}

fn best_peer(ss: &[&Sample], workload: &str, round: usize) -> Option<f64> {
    PEERS
        .iter()
        .filter_map(|p| get(ss, p, workload, round).map(|s| s.ops_per_s))
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))))
}

pub fn render(samples: &[Sample], probes: &[Probe], engines: &[String]) -> String {
    let mut o = String::new();
    let (ss, any_kept) = usable(samples);
    let all_rounds = rounds_of(&samples.iter().collect::<Vec<_>>());
    let _ = writeln!(o, "\n### Disk probes (4 KiB pwrite + fdatasync before each engine's run)\n");
    let _ = writeln!(o, "| round | before | probes in engine order (fdatasync/s) | max/min | kept |");
    let _ = writeln!(o, "|---|---|---|---|---|");
    let mut groups: Vec<(usize, &str)> = probes.iter().map(|p| (p.round, p.workload.as_str())).collect();
    groups.dedup();
    for (r, w) in &groups {
        let ps: Vec<&Probe> = probes.iter().filter(|p| p.round == *r && p.workload == *w).collect();
        let text: Vec<String> = ps.iter().map(|p| format!("{} {:.0}", p.before, p.syncs_per_s)).collect();
        let lo = ps.iter().map(|p| p.syncs_per_s).fold(f64::INFINITY, f64::min);
        let hi = ps.iter().map(|p| p.syncs_per_s).fold(0.0, f64::max);
        let kept = ps.iter().all(|p| p.kept);
        let w = if w.is_empty() { "every workload" } else { w };
        let _ = writeln!(
            o,
            "| {r} | {w} | {} | {:.2} | {} |",
            text.join(", "),
            hi / lo,
            if kept { "yes" } else { "no" }
        );
    }
    let kept_groups = groups
        .iter()
        .filter(|(r, w)| probes.iter().filter(|p| p.round == *r && p.workload == *w).all(|p| p.kept))
        .count();
    let _ = writeln!(
        o,
        "\n{kept_groups} of {} probed runs kept ({} rounds){}. Cells: median [min-max] over the kept \
         rounds of each workload; ratios are computed within each round, then summarised the same way.",
        groups.len(),
        all_rounds.len(),
        if any_kept { "" } else { " (none was: every round is shown, treat as indicative only)" }
    );
    let us = |v: Vec<f64>| match median(&v) {
        None => "-".to_string(),
        Some(m) if m < 10.0 => spread(&v, 1),
        Some(_) => spread(&v, 0),
    };
    for w in WORKLOADS {
        let rows: Vec<&String> =
            engines.iter().filter(|e| ss.iter().any(|s| s.engine == **e && s.workload == w)).collect();
        if rows.is_empty() {
            continue;
        }
        let replay = w.starts_with("replay");
        let _ = writeln!(o, "\n#### {w}: {}\n", describe(w));
        let _ = writeln!(
            o,
            "| engine | entries/s | MiB/s | {} | wal ÷ engine |",
            if replay { "open s | CPU s" } else { "p50 us | p99 us" }
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|");
        for e in rows {
            let mine: Vec<&&Sample> = ss.iter().filter(|s| s.engine == **e && s.workload == w).collect();
            let ops: Vec<f64> = mine.iter().map(|s| s.ops_per_s).collect();
            let mib: Vec<f64> = mine.iter().map(|s| s.mib_per_s).collect();
            let (c3, c4) = if replay {
                (
                    spread(&mine.iter().filter_map(|s| s.open_s).collect::<Vec<_>>(), 2),
                    spread(&mine.iter().map(|s| s.cpu_s).collect::<Vec<_>>(), 2),
                )
            } else {
                (
                    us(mine.iter().filter_map(|s| s.p50_us).collect()),
                    us(mine.iter().filter_map(|s| s.p99_us).collect()),
                )
            };
            let ratio = if e == "wal" {
                "1".to_string()
            } else {
                let v = ratios(&ss, w, "wal", |r| get(&ss, e, w, r).map(|s| s.ops_per_s));
                if v.is_empty() {
                    "-".into()
                } else {
                    spread(&v, 2)
                }
            };
            let _ =
                writeln!(o, "| {e} | {} | {} | {c3} | {c4} | {ratio} |", spread(&ops, 0), spread(&mib, 1));
        }
        if w == "replay-cold" {
            let not_cold = ss.iter().filter(|s| s.workload == w && s.cold == Some(false)).count();
            if not_cold > 0 {
                let _ =
                    writeln!(o, "\n{not_cold} replay-cold runs could NOT drop the page cache (not cold).");
            }
        }
    }
    // Issue 3 / issue 8 targets, against the best peer of the same round.
    let targets: [(&str, &str, f64, Option<f64>); 8] = [
        ("durable-1", "best peer", 0.9, None),
        ("durable-8", "best peer", 1.0, Some(1.5)),
        ("durable-64", "best peer", 1.0, Some(3.0)),
        ("batch4k-64", "best peer", 1.0, None),
        ("bulk-1k", "best peer", 1.0, None),
        ("replay-warm", "best peer", 2.0, None),
        ("replay-cold", "best peer", 0.0, None),
        ("pipelined-1m", "raw", 0.5, None),
    ];
    let _ = writeln!(o, "\n### Against the targets (issue 3 appends, issue 8 replay)\n");
    let _ = writeln!(
        o,
        "| workload | wal ÷ | ratio | floor | goal | floor met (median) | in every kept round | every round, discarded too |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    let every: Vec<&Sample> = samples.iter().collect();
    for (w, vs, floor, goal) in targets {
        let of = |ss: &[&Sample]| {
            if vs == "raw" {
                ratios(ss, w, "wal", |r| get(ss, "raw", w, r).map(|s| s.ops_per_s))
            } else {
                ratios(ss, w, "wal", |r| best_peer(ss, w, r))
            }
        };
        let v = of(&ss);
        let all = of(&every);
        if v.is_empty() {
            continue;
        }
        let m = median(&v).unwrap_or(f64::NAN);
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let floor_txt = if floor > 0.0 { format!("{floor}x") } else { "none".into() };
        let goal_txt =
            goal.map_or("-".into(), |g| format!("{g}x{}", if m >= g { " (met)" } else { " (not met)" }));
        let met = |x: f64| {
            if floor <= 0.0 {
                "-"
            } else if x >= floor {
                "yes"
            } else {
                "no"
            }
        };
        let _ = writeln!(
            o,
            "| {w} | {vs} | {} | {floor_txt} | {goal_txt} | {} | {} | {} |",
            spread(&v, 2),
            met(m),
            met(lo),
            spread(&all, 2)
        );
    }
    if let Some(p) = median(
        &ss.iter()
            .filter(|s| s.workload == "pipelined" && s.engine == "wal")
            .map(|s| s.ops_per_s)
            .collect::<Vec<_>>(),
    ) {
        let v = ratios(&ss, "pipelined", "wal", |r| best_peer(&ss, "durable-1", r));
        let _ = writeln!(
            o,
            "\n`pipelined` (one submitter, a window in flight): {p:.0} entries/s, {} x the best peer's durable-1 \
             in the same round (the peers' blocking APIs cannot keep a window).",
            spread(&v, 2)
        );
    }
    o
}
