//! Two SVG charts from the samples (`--plot DIR`), for the README: durable entries per second
//! against the number of writers each waiting for its own entry, and the p50/p99 latency of
//! those appends against the same load, one line per engine, medians over the kept rounds; one
//! pair per practice (`-best` in the names of the best practice's).
//! Hand-written SVG: a line chart with log axes is a page of code, not worth a plotting
//! dependency in a crate whose point is to build the peers.

use crate::engines::{Practice, Res};
use crate::Sample;
use std::fmt::Write as _;
use std::path::Path;

/// The workloads that form the load axis, with their number of writers.
const LOAD: [(&str, f64); 3] = [("durable-1", 1.0), ("durable-8", 8.0), ("durable-64", 64.0)];
const COLORS: [(&str, &str); 6] = [
    ("wal", "#d62728"),
    ("raft-engine", "#1f77b4"),
    ("okaywal", "#2ca02c"),
    ("raft-log", "#9467bd"),
    ("raw", "#7f7f7f"),
    ("raw-fresh", "#bcbd22"),
];
const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

struct Line {
    label: String,
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite() && *x > 0.0);
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// One engine's median of `f` at each load, over the samples given.
fn series(ss: &[&Sample], engine: &str, f: impl Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    LOAD.iter()
        .filter_map(|(w, x)| {
            let v: Vec<f64> =
                ss.iter().filter(|s| s.engine == engine && s.workload == *w).filter_map(|s| f(s)).collect();
            median(v).map(|y| (*x, y))
        })
        .collect()
}

/// Log-scale position of `v` in `[lo, hi]` mapped onto `[a, b]`.
fn scale(v: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    a + (v.ln() - lo.ln()) / (hi.ln() - lo.ln()) * (b - a)
}

/// Powers of ten (and 2x, 5x) between `lo` and `hi`, for grid lines.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut p = 10f64.powf(lo.log10().floor());
    while p <= hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let t = p * m;
            if t >= lo * 0.9999 && t <= hi * 1.0001 {
                out.push(t);
            }
        }
        p *= 10.0;
    }
    out
}

fn label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else {
        format!("{v}")
    }
}

fn chart(title: &str, y_name: &str, lines: &[Line]) -> String {
    let ys: Vec<f64> = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).collect();
    let (mut lo, mut hi) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(*y), b.max(*y)));
    if ys.is_empty() {
        (lo, hi) = (1.0, 10.0);
    }
    // Whole decades, so the grid reads easily.
    let (lo, hi) =
        (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)));
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let px = |x: f64| scale(x, 1.0, 64.0, x0, x1);
    let py = |y: f64| scale(y, lo, hi, y0, y1);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>"#,
        (x0 + x1) / 2.0
    );
    for t in ticks(lo, hi) {
        let y = py(t);
        let _ = writeln!(s, r##"<line x1="{x0}" x2="{x1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##);
        let _ =
            writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, x0 - 6.0, y + 4.0, label(t));
    }
    for (_, x) in LOAD {
        let xx = px(x);
        let _ = writeln!(s, r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{y0}" y2="{y1}" stroke="#ddd"/>"##);
        let _ = writeln!(s, r#"<text x="{xx:.1}" y="{}" text-anchor="middle">{x}</text>"#, y0 + 18.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">writers, each waiting for its own 256 B durable entry</text>"#,
        (x0 + x1) / 2.0,
        H - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{y_name}</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        x1 - x0,
        y0 - y1
    );
    for (i, l) in lines.iter().enumerate() {
        let pts: Vec<String> = l.points.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let dash = if l.dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
            pts.join(" "),
            l.color
        );
        for (x, y) in &l.points {
            let _ =
                writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#, px(*x), py(*y), l.color);
        }
        let ly = y1 + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            x1 + 12.0,
            x1 + 36.0,
            l.color,
            x1 + 42.0,
            ly + 4.0,
            l.label
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes `throughput-vs-writers.svg` and `latency-vs-writers.svg` into `dir` from the samples of
/// the default practice, and the same names ending in `-best` from the best practice's, for each
/// practice that has samples at these loads.
pub fn write(dir: &Path, samples: &[&Sample], engines: &[String]) -> Res<()> {
    for practice in Practice::ALL {
        let mine: Vec<&Sample> = samples.iter().copied().filter(|s| s.practice == practice).collect();
        if !mine.iter().any(|s| LOAD.iter().any(|(w, _)| s.workload == *w)) {
            continue;
        }
        let suffix = match practice {
            Practice::Default => "",
            Practice::Best => "-best",
        };
        write_one(dir, &mine, engines, suffix, practice)?;
    }
    Ok(())
}

fn write_one(
    dir: &Path,
    samples: &[&Sample],
    engines: &[String],
    suffix: &str,
    practice: Practice,
) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let color = |e: &str| COLORS.iter().find(|(n, _)| *n == e).map_or("#000", |(_, c)| c);
    let mut tput = Vec::new();
    let mut lat = Vec::new();
    for e in engines {
        let points = series(samples, e, |s| Some(s.ops_per_s));
        if points.is_empty() {
            continue;
        }
        tput.push(Line { label: e.clone(), color: color(e), dashed: false, points });
        for (q, dashed, f) in [
            ("p50", false, (|s: &Sample| s.p50_us) as fn(&Sample) -> Option<f64>),
            ("p99", true, |s: &Sample| s.p99_us),
        ] {
            lat.push(Line {
                label: format!("{e} {q}"),
                color: color(e),
                dashed,
                points: series(samples, e, f),
            });
        }
    }
    let title = |t: &str| format!("{t} ({} practice)", practice.id());
    std::fs::write(
        dir.join(format!("throughput-vs-writers{suffix}.svg")),
        chart(&title("Durable appends per second"), "entries/s", &tput),
    )?;
    std::fs::write(
        dir.join(format!("latency-vs-writers{suffix}.svg")),
        chart(&title("Append latency, submit to durable"), "µs", &lat),
    )?;
    Ok(())
}
