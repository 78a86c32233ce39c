//! The statistics the tables show: medians with min/max over the kept rounds, the measures a
//! target compares ([`Measure`]), `wal`'s same-round ratios to another engine or the best peer.
//! Separate from the tables (`report.rs`, `targets.rs`), which lay these out.

use crate::Sample;

/// The peers (the floors compare with the best of these; `raw` is the machine's own limit).
pub(super) const PEERS: [&str; 2] = ["raft-engine", "okaywal"];

pub(super) fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// `median [min-max]` with `digits` decimals.
pub(super) fn spread(v: &[f64], digits: usize) -> String {
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

pub(super) fn get<'a>(ss: &[&'a Sample], engine: &str, workload: &str, round: usize) -> Option<&'a Sample> {
    ss.iter().copied().find(|s| s.engine == engine && s.workload == workload && s.round == round)
}

pub(super) fn rounds_of(ss: &[&Sample]) -> Vec<usize> {
    let mut r: Vec<usize> = ss.iter().map(|s| s.round).collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// CPU seconds (all threads) per GiB of payload.
pub(super) fn cpu_per_gib(s: &Sample) -> Option<f64> {
    (s.bytes > 0).then(|| s.cpu_s / (s.bytes as f64 / (1u64 << 30) as f64))
}

/// What a target compares: throughput (higher is better), CPU per GiB or p99 (lower is better).
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Measure {
    Throughput,
    CpuPerGib,
    P99,
}

impl Measure {
    pub(super) fn of(self, s: &Sample) -> Option<f64> {
        match self {
            Measure::Throughput => Some(s.ops_per_s),
            Measure::CpuPerGib => cpu_per_gib(s),
            Measure::P99 => s.p99_us,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Measure::Throughput => "entries/s",
            Measure::CpuPerGib => "CPU s/GiB",
            Measure::P99 => "p99",
        }
    }

    /// The better of two values.
    pub(super) fn better(self, a: f64, b: f64) -> f64 {
        match self {
            Measure::Throughput => a.max(b),
            Measure::CpuPerGib | Measure::P99 => a.min(b),
        }
    }
}

/// Same-round ratios of `wal`'s measure over `other(round)`, one per round where both exist.
pub(super) fn ratios(
    ss: &[&Sample],
    workload: &str,
    m: Measure,
    other: impl Fn(usize) -> Option<f64>,
) -> Vec<f64> {
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
pub(super) fn best_peer(ss: &[&Sample], workload: &str, m: Measure, round: usize) -> Option<f64> {
    PEERS
        .iter()
        .filter_map(|p| get(ss, p, workload, round).and_then(|s| m.of(s)))
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| m.better(a, x))))
}

/// `median [min-max]` of latencies in microseconds (one decimal below 10 us).
pub(super) fn us(v: Vec<f64>) -> String {
    match median(&v) {
        None => "-".to_string(),
        Some(m) if m < 10.0 => spread(&v, 1),
        Some(_) => spread(&v, 0),
    }
}
