//! The targets of issues 3, 8 and 27 (`wal` against the best peer or a named engine, a floor
//! or a ceiling on the ratio) and each practice's targets table. Separate from the per-workload
//! tables (`report.rs`): what the runs are held to, not what they measured.

use super::measure::{best_peer, get, median, ratios, spread, Measure};
use crate::engines::Practice;
use crate::Sample;
use std::fmt::Write as _;

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
        // What a log that keeps what it writes can get from the file system: no bound, the
        // context of the two rows above.
        floor("batch4k-64", Engine("raw-fresh"), 0.0, "27"),
        floor("retained", Engine("raw-fresh"), 0.0, "27"),
        Target {
            measure: Measure::CpuPerGib,
            at_least: false,
            ..floor("bulk-1k", Engine("okaywal"), 1.5, "27")
        },
        floor("bulk-1k", Engine("okaywal"), 1.0, "27"),
        Target { measure: Measure::P99, at_least: false, ..floor("durable-64", BestPeer, 1.0, "27") },
    ]
}

/// The targets table of one practice (each target's ratio from that practice's samples).
pub(super) fn render_targets(o: &mut String, practice: Practice, ss: &[&Sample], every: &[&Sample]) {
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
