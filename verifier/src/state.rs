//! The state verdict (walcheck part 2): the log replayed offline through the controller's own
//! apply function, with `wal`'s replay-and-compare core (not a second implementation), and
//! compared with every checkpoint digest the controller recorded while it ran, and optionally
//! with an exported state (a snapshot file): CLEAN, DIVERGENT, UNSUPPORTED_VERSION, or
//! NOT_CHECKED when nothing trustworthy can be replayed.
//!
//! Reading stays pread-only: the log is opened read-only (salvage: never writes, stops at the
//! first damage) over [`ReadOnlyDir`], and snapshot files are read with `std::fs::read`.

use crate::pread::ReadOnlyDir;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wal::ItemKind;
use wal::{CrcVerdict, Durability, Lsn, Options, RecoveryMode, Wal};
use wal_state::snapshot::{self, SnapshotInfo};
use wal_state::{
    recorded_dedupe_window, Applier, CompareReport, Replayer, StateMachine, DEDUPE_WINDOW_META_KEY,
};

/// The dedupe window a replay uses when the log does not record one (the pipeline's default).
pub const DEFAULT_DEDUPE_WINDOW: u64 = 1 << 20;

/// How `walcheck` knows a state machine: a controller with its own builds its own `walcheck`
/// by handing one of these to `walcheck::run_with`.
pub struct StateMachineSpec<S> {
    /// Shown in reports (e.g. "catalog").
    pub name: &'static str,
    /// An empty state.
    pub fresh: fn() -> S,
    /// Up to `limit` lines describing how two states differ, first differences first (used
    /// when a state snapshot disagrees). May return nothing if the machine cannot say.
    pub diff: fn(&S, &S, usize) -> Vec<String>,
}

impl<S> std::fmt::Debug for StateMachineSpec<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateMachineSpec({})", self.name)
    }
}

/// What to compare the replay with, besides the log's own checkpoints.
#[derive(Clone, Debug, Default)]
pub struct StateOptions {
    /// A snapshot to start from (required when the log's prefix was purged).
    pub base: Option<PathBuf>,
    /// An exported state to compare with, at the snapshot's LSN.
    pub state: Option<PathBuf>,
    /// How many differing entities to name.
    pub diff_limit: usize,
}

/// The state verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateVerdict {
    /// Nothing trustworthy was replayed, with why.
    NotChecked(String),
    Clean,
    /// Replay disagrees with a checkpoint or the given state, with where.
    Divergent(String),
    /// A checkpoint or snapshot names a version this build does not know.
    Unsupported(String),
    /// The replay could not read the log (IO_ERROR), with where.
    Unreadable(String),
    /// A file named on the command line (`--base`, `--state`) cannot be used: not a snapshot,
    /// or (as a base) another log's or one that leaves a gap before the log's first entry. An
    /// error of the invocation (exit 64), not a verdict on the log.
    BadInput(String),
}

impl StateVerdict {
    pub fn word(&self) -> &'static str {
        match self {
            StateVerdict::NotChecked(_) | StateVerdict::BadInput(_) => "NOT_CHECKED",
            StateVerdict::Clean => "CLEAN",
            StateVerdict::Divergent(_) => "DIVERGENT",
            StateVerdict::Unsupported(_) => "UNSUPPORTED_VERSION",
            StateVerdict::Unreadable(_) => "IO_ERROR",
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            StateVerdict::NotChecked(_) | StateVerdict::Clean => 0,
            StateVerdict::Divergent(_) => 4,
            StateVerdict::Unsupported(_) => 6,
            StateVerdict::Unreadable(_) => crate::exit::EXIT_IO_ERROR,
            StateVerdict::BadInput(_) => crate::exit::EXIT_USAGE,
        }
    }
}

/// The comparison with an exported state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateComparison {
    pub name: String,
    pub applied: Option<Lsn>,
    pub matches: bool,
    /// The first differing entities (replay vs the given state).
    pub differences: Vec<String>,
}

/// Everything the replay found.
#[derive(Clone, Debug)]
pub struct StateReport {
    pub machine: &'static str,
    pub verdict: StateVerdict,
    pub compare: Option<CompareReport>,
    pub base: Option<SnapshotInfo>,
    pub state: Option<StateComparison>,
    pub dedupe_window: u64,
    /// The replay was fed by the CRC scan's own walk ([`verify_with_state`](crate::verify_with_state)), not a second
    /// read of the log.
    pub single_pass: bool,
}

impl StateReport {
    pub(crate) fn not_checked(machine: &'static str, why: impl Into<String>) -> StateReport {
        StateReport {
            machine,
            verdict: StateVerdict::NotChecked(why.into()),
            compare: None,
            base: None,
            state: None,
            dedupe_window: 0,
            single_pass: false,
        }
    }

    /// One line of explanation for humans.
    pub fn summary(&self) -> String {
        match &self.verdict {
            StateVerdict::NotChecked(why)
            | StateVerdict::Unsupported(why)
            | StateVerdict::Divergent(why)
            | StateVerdict::Unreadable(why)
            | StateVerdict::BadInput(why) => why.clone(),
            StateVerdict::Clean => {
                let mut s = self.coverage();
                if let Some(st) = &self.state {
                    s.push_str(&format!("; equal to the state in {}", st.name));
                }
                s
            }
        }
    }

    /// What the replay covered: entries replayed, the checkpoints compared, the entries no
    /// checkpoint cross-checks (by LSN) and the checkpoints that could not be compared (by LSN,
    /// with why).
    fn coverage(&self) -> String {
        let c = self.compare.clone().unwrap_or_default();
        let through = c.verified_through.map_or("nothing".to_string(), |l| format!("LSN {l}"));
        let mut s = format!(
            "replayed {} entries through the {} apply function; verified through {through} ({} checkpoint(s) compared)",
            c.entries_applied, self.machine, c.checkpoints_checked
        );
        if let (Some(last), true) = (c.last_applied, c.unchecked_entries > 0) {
            let from = c.verified_through.map(|v| v.0 + 1).or(c.first_applied.map(|f| f.0)).unwrap_or(last.0);
            s.push_str(&format!(
                "; LSN {from}..={last} ({} entries) replayed but not cross-checked by any checkpoint",
                c.unchecked_entries
            ));
        }
        for l in &c.too_old {
            s.push_str(&format!(
                "; checkpoint for LSN {l} not compared: met more than {} entries after it (FORMAT.md 10.3)",
                wal_state::CHECKPOINT_MAX_LAG
            ));
        }
        if c.checkpoints_too_old > c.too_old.len() as u64 {
            s.push_str(&format!("; {} checkpoints too far behind in all", c.checkpoints_too_old));
        }
        if c.checkpoints_before_base > 0 {
            s.push_str(&format!(
                "; {} checkpoint(s) at or below the base snapshot not compared (the base stands for them)",
                c.checkpoints_before_base
            ));
        }
        s
    }

    /// The JSON shape of the report (the `state_detail` of `walcheck verify --json`).
    pub fn json_view(&self) -> StateJson<'_> {
        let lsn = |l: Option<Lsn>| l.map(|l| l.0);
        let c = self.compare.clone().unwrap_or_default();
        StateJson {
            verdict: self.verdict.word(),
            machine: self.machine,
            summary: self.summary(),
            dedupe_window: self.dedupe_window,
            single_pass: self.single_pass,
            base: self.base.as_ref().map(|b| BaseJson { name: &b.name, applied: lsn(b.applied) }),
            entries_replayed: c.entries_applied,
            duplicates: c.duplicates,
            refused: c.refused,
            checkpoints_checked: c.checkpoints_checked,
            checkpoints_too_old: c.checkpoints_too_old,
            too_old_lsns: c.too_old.iter().map(|l| l.0).collect(),
            checkpoints_before_base: c.checkpoints_before_base,
            first_applied: lsn(c.first_applied),
            verified_through: lsn(c.verified_through),
            unchecked_entries: c.unchecked_entries,
            last_applied: lsn(c.last_applied),
            divergence: c.divergence.as_ref().map(|d| DivergenceJson {
                last_good: lsn(d.last_good),
                lsn: d.lsn.0,
                reason: d.reason.clone(),
                recorded_entities: d.recorded.map(|r| r.entity_count),
                replayed_entities: d.replayed.map(|r| r.entity_count),
            }),
            state: self.state.as_ref().map(|s| StateComparisonJson {
                name: &s.name,
                applied: lsn(s.applied),
                matches: s.matches,
                differences: &s.differences,
            }),
        }
    }

    /// [`StateReport::json_view`] as a JSON value.
    pub fn to_json(&self) -> Value {
        crate::to_value(&self.json_view())
    }
}

/// The JSON of a [`StateReport`]: every key always present (`null` when there is nothing to
/// say); LSNs as plain numbers.
#[derive(Debug, Serialize)]
pub struct StateJson<'a> {
    pub verdict: &'static str,
    pub machine: &'static str,
    pub summary: String,
    pub dedupe_window: u64,
    pub single_pass: bool,
    pub base: Option<BaseJson<'a>>,
    pub entries_replayed: u64,
    pub duplicates: u64,
    pub refused: u64,
    pub checkpoints_checked: u64,
    pub checkpoints_too_old: u64,
    pub too_old_lsns: Vec<u64>,
    pub checkpoints_before_base: u64,
    pub first_applied: Option<u64>,
    pub verified_through: Option<u64>,
    pub unchecked_entries: u64,
    pub last_applied: Option<u64>,
    pub divergence: Option<DivergenceJson>,
    pub state: Option<StateComparisonJson<'a>>,
}

/// The snapshot a replay started from.
#[derive(Debug, Serialize)]
pub struct BaseJson<'a> {
    pub name: &'a str,
    pub applied: Option<u64>,
}

/// Where replay and a checkpoint first disagreed.
#[derive(Debug, Serialize)]
pub struct DivergenceJson {
    pub last_good: Option<u64>,
    pub lsn: u64,
    pub reason: String,
    pub recorded_entities: Option<u64>,
    pub replayed_entities: Option<u64>,
}

/// The comparison with an exported state.
#[derive(Debug, Serialize)]
pub struct StateComparisonJson<'a> {
    pub name: &'a str,
    pub applied: Option<u64>,
    pub matches: bool,
    pub differences: &'a [String],
}

fn read_snapshot<S: StateMachine>(path: &Path) -> Result<(Applier<S>, SnapshotInfo), String> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("reading {name}: {e}"))?;
    snapshot::decode::<S>(&name, &bytes).map_err(|e| e.to_string())
}

/// A log whose very first entry carries no apply-seam envelope, with no checkpoint before it,
/// was not written through the pipeline: there is nothing to compare, which is not a
/// divergence.
/// The metadata keys `wal-raft` keeps in a Raft log (what the log is, its vote, committed id and
/// purge point):
/// a log holding one is checked by `walraft-node check`, not by replay through a state machine
/// of the apply seam. `wal_raft::codec` holds them to this range (a test there).
pub const RAFT_META_KEYS: std::ops::RangeInclusive<u32> = 0x5241_4600..=0x5241_46FF;

fn not_seam_entries(d: &wal_state::Divergence, c: &CompareReport) -> bool {
    d.recorded.is_none()
        && c.entries_applied == 0
        && c.checkpoints_checked == 0
        && d.reason.contains("envelope")
}

/// Replays the log in `dir` through `spec`'s state machine and compares (see the module docs).
/// `crc` is the CRC verdict already found: a CORRUPT or unreadable log is not replayed.
pub fn check_state<S: StateMachine>(
    dir: &Path,
    crc: CrcVerdict,
    opts: &StateOptions,
    spec: &StateMachineSpec<S>,
) -> StateReport {
    let m = spec.name;
    if !matches!(crc, CrcVerdict::Ok | CrcVerdict::TornTail | CrcVerdict::CorruptTail) {
        return StateReport::not_checked(m, format!("not replayed: the log is {}", crc.as_str()));
    }
    let storage = Arc::new(ReadOnlyDir::new(dir));
    let wal_opts =
        Options { recovery: RecoveryMode::Salvage, read_only: true, create: false, ..Options::default() };
    let wal = match Wal::open_reader(storage, wal_opts) {
        Ok((w, _)) => w,
        Err(e) => return StateReport::not_checked(m, format!("not replayed: {e}")),
    };
    if RAFT_META_KEYS.clone().any(|k| wal.meta(k).is_some()) {
        return StateReport::not_checked(
            m,
            "not replayed: a Raft log written by wal-raft (its metadata says so): its entries are Raft entries, not the apply seam's; `walraft-node check` on the node's data directory (the one holding this log/ and sm/) replays it through the Raft state machine",
        );
    }
    let window = recorded_dedupe_window(wal.meta(DEDUPE_WINDOW_META_KEY)).unwrap_or(DEFAULT_DEDUPE_WINDOW);
    let mut report = StateReport::not_checked(m, "");
    report.dedupe_window = window;
    let applier = match &opts.base {
        Some(path) => match read_snapshot::<S>(path) {
            Ok((a, info)) => {
                if info.log_id != wal.log_id() {
                    return StateReport {
                        verdict: StateVerdict::BadInput(format!(
                            "--base {}: a snapshot of another log (log id differs)",
                            info.name
                        )),
                        ..report
                    };
                }
                if let (Some(first), Some(at)) = (wal.first_lsn(), info.applied) {
                    if first.0 > at.0 + 1 {
                        let why = format!("--base {}: at LSN {at}, but the log starts at LSN {first}: entries in between are missing", info.name);
                        return StateReport { verdict: StateVerdict::BadInput(why), ..report };
                    }
                }
                report.base = Some(info);
                a
            }
            Err(e) if e.contains("unsupported") => {
                return StateReport { verdict: StateVerdict::Unsupported(e), ..report };
            }
            Err(e) => {
                return StateReport { verdict: StateVerdict::BadInput(format!("--base: {e}")), ..report }
            }
        },
        None if wal.prefix_purged() => {
            let why = "not replayed: the log's prefix was purged; give the snapshot it was purged below with --base";
            return StateReport { verdict: StateVerdict::NotChecked(why.into()), ..report };
        }
        None => Applier::new((spec.fresh)(), window),
    };
    let target = match &opts.state {
        Some(path) => match read_snapshot::<S>(path) {
            Ok(t) => Some(t),
            Err(e) if e.contains("unsupported") => {
                return StateReport { verdict: StateVerdict::Unsupported(e), ..report }
            }
            Err(e) => {
                return StateReport { verdict: StateVerdict::BadInput(format!("--state: {e}")), ..report }
            }
        },
        None => None,
    };
    let stop = target.as_ref().map(|(_, info)| info.applied);
    let mut replayer = Replayer::new(applier);
    let from = replayer.applier().applied().map(|l| Lsn(l.0 + 1));
    let mut replay = match wal.replay_from(from, Durability::Written) {
        Ok(r) => r,
        Err(e) => {
            return StateReport { verdict: StateVerdict::NotChecked(format!("not replayed: {e}")), ..report }
        }
    };
    // Damage ends the replay where the CRC verdict already said it is.
    let mut failed = None;
    while let Some(item) = replay.next() {
        // The replay covers only what the salvage open found intact, so an error here is not the
        // damage the CRC verdict reported: the log could not be read as scanned. Never CLEAN.
        let item = match item {
            Ok(i) => i,
            Err(e) => {
                failed = Some(e.to_string());
                break;
            }
        };
        if stop.is_some_and(|s| s.is_none_or(|s| item.lsn > s)) {
            break;
        }
        match item.kind {
            ItemKind::Entry => replayer.entry(item.lsn, item.epoch, item.payload),
            ItemKind::Checkpoint(cp) => replayer.checkpoint(item.lsn, &cp),
        }
        if replayer.report().stopped() {
            break;
        }
    }
    drop(replay);
    conclude(report, replayer, failed, target, opts, spec)
}

/// The state verdict from a finished replay (`failed`: why it could not read on), compared
/// with the target state when there is one.
pub(crate) fn conclude<S: StateMachine>(
    mut report: StateReport,
    replayer: Replayer<S>,
    failed: Option<String>,
    target: Option<(Applier<S>, SnapshotInfo)>,
    opts: &StateOptions,
    spec: &StateMachineSpec<S>,
) -> StateReport {
    let (replayed, compare) = replayer.finish();
    report.verdict = if let Some(e) = failed {
        StateVerdict::Unreadable(format!(
            "the replay could not read the log after LSN {}: {e}",
            compare.last_applied.map_or("(none)".to_string(), |l| l.to_string())
        ))
    } else if let Some(u) = &compare.unsupported {
        StateVerdict::Unsupported(u.clone())
    } else if let Some(d) = compare.divergence.as_ref().filter(|d| not_seam_entries(d, &compare)) {
        let why = format!(
            "not replayed: entry {} is not an entry of the apply seam ({}); the log was not written through the pipeline",
            d.lsn, d.reason
        );
        StateVerdict::NotChecked(why)
    } else if let Some(d) = &compare.divergence {
        let window = match d.last_good {
            Some(g) if g >= d.lsn => {
                format!("at the checkpoint for LSN {} (an earlier checkpoint for LSN {g} agreed)", d.lsn)
            }
            Some(g) => format!("in LSN {}..={} (verified through LSN {g})", g.0 + 1, d.lsn),
            None => format!("in LSN ..={} (nothing verified before it)", d.lsn),
        };
        StateVerdict::Divergent(format!("first divergence {window}: {}", d.reason))
    } else {
        StateVerdict::Clean
    };
    report.compare = Some(compare);
    if let (Some((expected, info)), StateVerdict::Clean) = (target, &report.verdict) {
        let reached = replayed.applied();
        let matches = reached == info.applied && replayed.checkpoint() == expected.checkpoint();
        let differences = if matches {
            Vec::new()
        } else {
            (spec.diff)(replayed.state(), expected.state(), opts.diff_limit.max(1))
        };
        if !matches {
            let lsn = |l: Option<Lsn>| l.map_or("(none)".to_string(), |l| l.to_string());
            let why = if reached < info.applied {
                format!(
                    "{} is at LSN {} but the log ends at LSN {}",
                    info.name,
                    lsn(info.applied),
                    lsn(reached)
                )
            } else {
                format!(
                    "the replayed state at LSN {} differs from {} ({} difference(s) listed below)",
                    lsn(reached),
                    info.name,
                    differences.len()
                )
            };
            report.verdict = StateVerdict::Divergent(why);
        }
        report.state =
            Some(StateComparison { name: info.name.clone(), applied: info.applied, matches, differences });
    }
    // CLEAN says that something cross-checked the replay: a checkpoint, or the given state.
    let compared = report.compare.as_ref().is_some_and(|c| c.checkpoints_checked > 0)
        || report.state.as_ref().is_some_and(|s| s.matches);
    if report.verdict == StateVerdict::Clean && !compared {
        let c = report.compare.as_ref();
        let none = if c.is_some_and(|c| c.checkpoints_too_old > 0) {
            "none of its checkpoints could be compared"
        } else {
            "the log holds no checkpoint to compare with"
        };
        report.verdict = StateVerdict::NotChecked(format!("{none}: {}", report.coverage()));
    }
    report
}
