//! The long fault sweep: the fast subset's classes over many more seeds, for a case
//! count or a time budget, with a JSON summary.
//!
//! ```sh
//! cargo run --release -p wal-sim --bin wal-sweep -- --seconds 600 --json reliability/sweep-summary.json
//! cargo run --release -p wal-sim --bin wal-sweep -- --cases 2000000 --first-seed 1000
//! cargo run -p wal-sim --bin wal-sweep -- --first-seed 1 --only crash:40   # one case (CI: seconds)
//! ```
//!
//! A failing case panics with its seed, its case and the command that replays it alone.

use wal_sim::sweep;

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let usage =
        "usage: sweep (--cases N | --seconds S | --seeds N | --only CLASS:CASE) [--first-seed N] [--threads N] [--json PATH]";
    let num = |name: &str| {
        value(name).map(|v| {
            v.parse::<u64>().unwrap_or_else(|_| {
                eprintln!("{name}: not a number: {v}\n{usage}");
                std::process::exit(64)
            })
        })
    };
    let (cases, seconds, seeds) = (num("--cases"), num("--seconds"), num("--seeds"));
    // One case of the first seed (a seed runs every class: minutes in a debug build).
    let only = value("--only").map(|v| {
        let parsed = v.split_once(':').and_then(|(class, n)| {
            Some(sweep::Only { class: sweep::Class::parse(class)?, case: n.parse().ok()? })
        });
        parsed.unwrap_or_else(|| {
            eprintln!("--only: not CLASS:CASE with a known class: {v}\n{usage}");
            std::process::exit(64)
        })
    });
    if cases.is_none() && seconds.is_none() && seeds.is_none() && only.is_none() {
        eprintln!("{usage}");
        std::process::exit(64);
    }
    let first = num("--first-seed").unwrap_or(1000);
    let threads = num("--threads")
        .map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |t| t as usize);
    let started = Instant::now();
    let deadline = seconds.map(|s| started + Duration::from_secs(s));
    let sum = match only {
        Some(o) => {
            let sum = sweep::run_seed(first, Some(o));
            if sum.cases.get(o.class.name()) != Some(&1) {
                eprintln!("seed {first} has no case {} of class {}", o.case, o.class.name());
                std::process::exit(1);
            }
            sum
        }
        None => sweep::sweep(first, seeds, cases, deadline, threads),
    };
    let mut info = sweep::RunInfo::detect();
    info.command = format!("cargo run --release -p wal-sim --bin wal-sweep -- {}", args.join(" "));
    info.first_seed = first;
    info.duration_s = started.elapsed().as_secs_f64();
    info.threads = threads;
    info.profile = if cfg!(debug_assertions) { "debug".into() } else { "release".into() };
    let json = sweep::to_json(&sum, &info);
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    println!("{text}");
    if let Some(path) = value("--json") {
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("writing {path}: {e}");
            std::process::exit(1);
        }
    }
    if sum.entries_lost != 0 || !sum.failures.is_empty() {
        eprintln!("FAILED: {:#?}", sum.failures);
        std::process::exit(1);
    }
}
