//! The sweep's summary as JSON: where and how it ran, and its figures.

use super::Summary;
use serde::Serialize;
use std::collections::BTreeMap;

/// Where and how a sweep ran, for its JSON summary.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub command: String,
    pub first_seed: u64,
    pub duration_s: f64,
    pub git_commit: String,
    pub machine: String,
    pub threads: usize,
    pub profile: String,
}

impl RunInfo {
    /// The commit (`git rev-parse HEAD`) and the machine (CPU model, cores, kernel).
    pub fn detect() -> RunInfo {
        let git = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        RunInfo {
            git_commit: git,
            machine: format!("{cores} vCPU {cpu}, Linux {kernel}"),
            ..RunInfo::default()
        }
    }
}

/// The summary's JSON object. Its keys are sorted (a `serde_json::Value`'s, without
/// `preserve_order`), the order reliability/sweep-summary.json has always had.
#[derive(Serialize)]
struct SummaryJson<'a> {
    command: &'a str,
    git_commit: &'a str,
    machine: &'a str,
    profile: &'a str,
    threads: usize,
    /// Rounded to tenths of a second.
    duration_s: f64,
    seeds: SeedsJson,
    cases_total: u64,
    cases_by_class: &'a BTreeMap<&'static str, u64>,
    faults_injected: &'a BTreeMap<&'static str, u64>,
    crash_points_by_phase: &'a BTreeMap<String, u64>,
    verdicts: &'a BTreeMap<String, u64>,
    acknowledged_entries_checked: u64,
    checkpoints_checked: u64,
    entries_lost: u64,
    failures: &'a [String],
}

/// The seeds a sweep ran: `count` of them from `first` on.
#[derive(Serialize)]
struct SeedsJson {
    first: u64,
    count: u64,
}

pub fn to_json(sum: &Summary, info: &RunInfo) -> serde_json::Value {
    let view = SummaryJson {
        command: &info.command,
        git_commit: &info.git_commit,
        machine: &info.machine,
        profile: &info.profile,
        threads: info.threads,
        duration_s: (info.duration_s * 10.0).round() / 10.0,
        seeds: SeedsJson { first: info.first_seed, count: sum.seeds },
        cases_total: sum.total(),
        cases_by_class: &sum.cases,
        faults_injected: &sum.faults,
        crash_points_by_phase: &sum.crash_phases,
        verdicts: &sum.verdicts,
        acknowledged_entries_checked: sum.acked_checked,
        checkpoints_checked: sum.checkpoints_checked,
        entries_lost: sum.entries_lost,
        failures: &sum.failures,
    };
    serde_json::to_value(view).expect("the sweep's summary serializes")
}
