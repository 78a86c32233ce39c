//! The `--json` file: one line per sample and per disk probe, written through plain structs,
//! and read back (`--report FILE`), older files included. Separate from the tables: the file's
//! format, which committed results files hold to.

use crate::engines::{Practice, Res};
use crate::{Cfg, Probe, Sample};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

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
