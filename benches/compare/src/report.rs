//! JSON lines out and in, and the Markdown tables, one set per practice: medians with min/max
//! over the kept rounds, this engine's same-round ratio to each other engine, and the targets
//! of issues 3, 8 and 27.
//!
//! Here: the progress line, the report's headings and each practice's tables. The JSON lines
//! are in `report/json.rs`, the statistics over samples in `report/measure.rs`, the targets and
//! their table in `report/targets.rs`.

mod json;
mod measure;
mod targets;

pub use json::{from_json, probe_json, sample_json};
pub use measure::usable;

use crate::engines::Practice;
use crate::{Probe, Sample, KEPT, WORKLOADS};
use measure::{best_peer, cpu_per_gib, get, median, ratios, rounds_of, spread, us, Measure};
use std::fmt::Write as _;
use targets::render_targets;

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

#[cfg(test)]
mod tests;
