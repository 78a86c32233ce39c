//! `pipeline`: the commit pipeline with the reference catalog as its state machine.
//!
//! Two phases of 200 `Create` commands (metalakes named and filled from (seed, i)), submitted
//! in windows of eight with request ids; each promise is waited for (bounded) and a resolved
//! one is printed as `ack cmd lsn=L i=I seed=S`: committed (durable), applied, and entity L is
//! command I's. The pipeline checkpoints its state digest every 16 entries and snapshots every
//! 120, purging the segments below the older kept snapshot (whose files are recycled). Between
//! the phases, an explicit snapshot, a clean close and a reopen (state rebuilt from the newest
//! snapshot and the log, every checkpoint compared).
//!
//! The check: walcheck's verify with the newest usable snapshot as `--base` (the prefix may be
//! purged) must say OK or TORN_TAIL and, when anything is required, STATE CLEAN (or
//! NOT_CHECKED because no checkpoint follows the base yet: an image cut early); the pipeline
//! must reopen on the image unfenced (no DIVERGENT replay), its applied LSN at least the
//! highest acknowledged one, and every acknowledged command's entity there with its exact name
//! and properties. A purge never removes an acknowledged command's effect: the state carries it.

use crate::acks::{self, Ack, Acker};
use crate::check::{self, Checked, Failed};
use catalog::{Catalog, EntityId};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions, Resolution};
use wal_state::Applied;

const PER_PHASE: u64 = 200;
const WINDOW: u64 = 8;
const PROMISE_TIMEOUT: Duration = Duration::from_secs(20);

fn options() -> PipelineOptions {
    let mut o = PipelineOptions {
        checkpoint_every_entries: 16,
        snapshot_every_entries: Some(120),
        purge_after_snapshot: true,
        ..PipelineOptions::default()
    };
    o.log.segment_len_bytes = crate::SEGMENT_LEN;
    o
}

fn open(dir: &Path) -> Result<Pipeline<Catalog>, String> {
    let (p, report) = Pipeline::open(dir, options(), Hooks::default(), Catalog::new)
        .map_err(|e| format!("opening the pipeline in {}: {e}", dir.display()))?;
    match report.fenced {
        Some(why) => Err(format!("the pipeline opened fenced: {why}")),
        None => Ok(p),
    }
}

fn settle(r: Option<Resolution>, i: u64) -> Result<u64, String> {
    match r {
        None => Err(format!("command {i} did not resolve in {PROMISE_TIMEOUT:?}")),
        Some(Err(f)) => Err(format!("command {i} failed: {f:?}")),
        Some(Ok(done)) => match done.applied {
            Applied::Outcome(o) if o.is_refused() => Err(format!("command {i} was refused: {o:?}")),
            _ => Ok(done.lsn.0),
        },
    }
}

fn phase(p: &Pipeline<Catalog>, seed: u64, from: u64, acker: &Acker) -> Result<(), String> {
    let mut i = from;
    while i < from + PER_PHASE {
        let mut promises = Vec::new();
        for j in i..(i + WINDOW).min(from + PER_PHASE) {
            let body = acks::command(seed, j).encode();
            let promise = p.submit(&body, Some(j + 1)).map_err(|f| format!("submit {j}: {f:?}"))?;
            promises.push((j, promise));
        }
        for (j, promise) in promises {
            let lsn = settle(promise.wait_timeout(PROMISE_TIMEOUT), j)?;
            acker.say(&Ack::Cmd { lsn, i: j, seed })?;
            i = j + 1;
        }
    }
    Ok(())
}

pub fn run(dir: &Path, seed: u64, acker: &Acker) -> Result<(), String> {
    let p = open(dir)?;
    phase(&p, seed, 0, acker)?;
    p.snapshot().map_err(|e| format!("snapshot: {e}"))?;
    p.close().map_err(|e| format!("close: {e}"))?;
    let p = open(dir)?;
    phase(&p, seed, PER_PHASE, acker)?;
    p.close().map_err(|e| format!("close: {e}"))
}

/// Snapshot files in `dir`, newest first.
fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let Ok(st) = wal::storage::FileStorage::new(dir, false) else { return Vec::new() };
    let mut names = wal_state::snapshot::list_snapshots(&st).unwrap_or_default();
    names.reverse();
    names.into_iter().map(|(_, n)| dir.join(n)).collect()
}

pub fn check(dir: &Path, acks: &[Ack]) -> Checked {
    let mut required = BTreeMap::new();
    for a in acks {
        match *a {
            Ack::Cmd { lsn, i, seed } => required.insert(lsn, (i, seed)),
            _ => return Err(Failed::Setup(format!("{a} does not belong to a pipeline's acks"))),
        };
    }
    // The newest snapshot walcheck accepts as a base (a purged prefix needs one), else none.
    let mut found = None;
    for base in snapshots(dir).iter().map(Some).chain([None]) {
        match check::verify(dir, base.map(PathBuf::as_path)) {
            Some(r) if r.exit_code() == verifier::report::EXIT_USAGE => continue,
            r => {
                found = Some(r);
                break;
            }
        }
    }
    let Some(Some(report)) = found else {
        return check::no_log("pipeline", dir, acks.len(), required.len(), "commands were");
    };
    let wc = check::judge(dir, &report)?;
    let mut fails = Vec::new();
    // NOT_CHECKED is walcheck's word for a replay with no checkpoint after its base (an image
    // cut before the first checkpoint after a snapshot): nothing to compare, nothing wrong.
    // Any other reason not to check is a failure.
    let uncheckable = wc.state == "NOT_CHECKED" && wc.why.contains("no checkpoint to compare");
    if !required.is_empty() && wc.state != "CLEAN" && !uncheckable {
        fails.push(format!("FAIL: walcheck's state verdict is {}, CLEAN expected: {}", wc.state, wc.why));
    }
    let (p, restart) = Pipeline::open(dir, options(), Hooks::default(), Catalog::new)
        .map_err(|e| Failed::Violations(vec![format!("FAIL: the pipeline does not reopen: {e}")]))?;
    if let Some(why) = &restart.fenced {
        fails.push(format!("FAIL: the pipeline reopened fenced: {why}"));
    }
    if restart.open.verdict != wc.crc {
        fails.push(format!(
            "FAIL: the open's verdict {} disagrees with walcheck's {}",
            restart.open.verdict.as_str(),
            wc.crc.as_str()
        ));
    }
    let (applied, _) = p.applied();
    if let Some(&max) = required.keys().next_back() {
        if applied.is_none_or(|a| a.0 < max) {
            fails.push(format!(
                "FAIL: command at LSN {max} acknowledged, the state is applied to {applied:?}"
            ));
        }
    }
    let entities = p.read(|c| {
        let mut wrong = Vec::new();
        for (&lsn, &(i, seed)) in &required {
            let want = acks::command(seed, i);
            let catalog::Command::Create { name, props, .. } = &want else { continue };
            match c.get(EntityId(lsn)) {
                None => wrong.push(format!(
                    "FAIL: command {i} acknowledged at LSN {lsn} ({}): entity {lsn} is missing",
                    check::segment_of(dir, lsn)
                )),
                Some(e) if e.name() != name || e.props() != props.as_slice() => wrong.push(format!(
                    "FAIL: entity {lsn}: expected {name:?} with {} property bytes, found {:?} with {}",
                    props.len(),
                    e.name(),
                    e.props().len()
                )),
                Some(_) => {}
            }
        }
        (wrong, c.len())
    });
    fails.extend(entities.0);
    p.close().map_err(|e| Failed::Violations(vec![format!("FAIL: closing the reopened pipeline: {e}")]))?;
    if !fails.is_empty() {
        return Err(Failed::Violations(fails));
    }
    Ok(format!(
        "ok pipeline required={} verdict={} state={} applied={} entities={} snapshots={}",
        acks.len(),
        wc.crc.as_str(),
        wc.state,
        applied.map_or("-".into(), |a| a.0.to_string()),
        entities.1,
        snapshots(dir).len()
    ))
}
