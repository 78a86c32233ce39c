//! The report's tables from samples (practices, targets), its JSON, and the README's
//! performance rows held to the committed results they cite.

use super::*;
use crate::engines::Res;
use std::path::Path;

fn sample(engine: &str, workload: &str, practice: Practice, ops: f64, p99: f64) -> Sample {
    Sample {
        engine: engine.into(),
        workload: workload.into(),
        practice,
        kept: true,
        ops_per_s: ops,
        p99_us: Some(p99),
        bytes: 1 << 30,
        cpu_s: 1.0,
        ..Sample::default()
    }
}

/// A file written before the practices existed reads as the best practice (its `wal`
/// purged); a named practice reads as itself; an unknown one is an error naming the line.
#[test]
fn json_without_practice_is_best_practice() -> Res<()> {
    let path = std::env::temp_dir().join(format!("wal-compare-test-{}-practice.jsonl", std::process::id()));
    let line = |practice: &str| {
        format!(
            r#"{{"kind":"sample","engine":"wal","workload":"durable-1","round":0,"ops_per_s":1.0{practice}}}"#
        )
    };
    std::fs::write(&path, format!("{}\n{}\n", line(""), line(r#","practice":"default""#)))?;
    let (samples, _, engines) = from_json(&path)?;
    assert_eq!(samples.iter().map(|s| s.practice).collect::<Vec<_>>(), [Practice::Best, Practice::Default]);
    assert_eq!(engines, ["wal"]);
    std::fs::write(&path, format!("{}\n{}\n", line(""), line(r#","practice":"sometimes""#)))?;
    let err = from_json(&path).err().map(|e| e.to_string()).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    assert!(err.contains(":2: unknown practice \"sometimes\""), "{err}");
    Ok(())
}

/// Each practice's tables and targets come from its own samples only, and a ceiling target
/// (p99 at most the best peer's, the lower of the peers') is met when the ratio is at or
/// under its bound.
#[test]
fn targets_per_practice_with_ceilings() {
    let engines: Vec<String> = ["wal", "raft-engine", "okaywal"].map(String::from).to_vec();
    let ss = vec![
        sample("wal", "durable-64", Practice::Default, 100.0, 800.0),
        sample("raft-engine", "durable-64", Practice::Default, 50.0, 400.0),
        sample("okaywal", "durable-64", Practice::Default, 80.0, 1600.0),
        sample("wal", "durable-64", Practice::Best, 100.0, 200.0),
        sample("raft-engine", "durable-64", Practice::Best, 50.0, 400.0),
        sample("okaywal", "durable-64", Practice::Best, 80.0, 1600.0),
    ];
    let out = render(&ss, &[], &engines);
    let (default, best) = out.split_once("### Best practice").unwrap_or_default();
    let row = "| durable-64 | p99 | best peer |";
    assert!(default.contains(&format!("{row} 2.00 | <= 1x | - | no | no | 2.00 | 27 |")), "{default}");
    assert!(best.contains(&format!("{row} 0.50 | <= 1x | - | yes | yes | 0.50 | 27 |")), "{best}");
    let floor = "| durable-64 | entries/s | best peer | 1.25 | >= 1x | 3x (not met) | yes | yes | 1.25 | 3 |";
    assert!(default.contains(floor) && best.contains(floor), "{out}");
}

/// The README's performance table and this crate's README's target tables are what
/// `--report` renders from the committed results file they cite: a ratio cannot be edited by
/// hand, or left behind when the file is replaced.
#[test]
fn readme_performance_rows_come_from_the_committed_run() -> Res<()> {
    const RESULTS: &str = "results/2026-12-07-amd-head.jsonl";
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (samples, probes, engines) = from_json(&here.join(RESULTS))?;
    let out = render(&samples, &probes, &engines);
    let (default, best) = out.split_once("### Best practice").ok_or("no best-practice section")?;
    let readme = std::fs::read_to_string(here.join("../../README.md"))?;
    assert!(readme.contains(&format!("benches/compare/{RESULTS}")), "the README names another results file");
    let start = readme.find("<!-- readme-performance -->").ok_or("no readme-performance marker")?;
    let end = readme[start..].find("<!-- /readme-performance -->").ok_or("no end marker")? + start;
    let rows: Vec<&str> = readme[start..end].lines().filter(|l| l.starts_with("| ")).skip(1).collect();
    assert!(rows.len() >= 5, "{rows:?}");
    for row in rows {
        assert!(
            default.lines().any(|l| l.starts_with(row)),
            "README row `{row}` is not in the default practice's rendering of {RESULTS}"
        );
    }
    // This crate's README quotes both practices' target tables from the same file.
    let own = std::fs::read_to_string(here.join("README.md"))?;
    let section = &own[own.find("## Results: 2026-12-07").ok_or("no 2026-12-07 section")?..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let (own_default, own_best) = section.split_once("(best practice;").ok_or("no best-practice table")?;
    let table = |t: &str| -> Vec<String> {
        t.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| workload")).map(String::from).collect()
    };
    for (quoted, rendered) in [(table(own_default), default), (table(own_best), best)] {
        assert!(quoted.len() >= 5, "{quoted:?}");
        for row in quoted {
            assert!(
                rendered.contains(&row),
                "benches/compare/README.md row `{row}` is not rendered from {RESULTS}"
            );
        }
    }
    Ok(())
}
