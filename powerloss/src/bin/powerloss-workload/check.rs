//! The oracle for a plain log (`sync` and `async`), and what every kind's check shares.
//!
//! From the ack lines, in order, the model of what the image must hold:
//! - `entry` makes its LSN required with its generation's bytes;
//! - `cut-begin A` / `cut A G` release every required LSN > A (later `entry` lines make the
//!   rewritten LSNs required again); `cut` also forbids any surviving entry > A older than
//!   generation G (a durable truncation never lets the old entry back);
//! - `purge-begin B` / `purge B` release every required LSN < B (present or not, both are fine);
//! - `epoch E` requires the log's epoch to be at least E.
//!
//! Then the image: walcheck's verify logic (the `verifier` library with walcheck's catalog
//! spec, so nothing is printed on our stdout) must say OK or TORN_TAIL with no state verdict
//! worse than CLEAN; the log must open read-write through the public API (as a restart would:
//! a torn tail is cut) with the same CRC verdict; every entry it replays must be exactly
//! `content` of what it claims to be, at its own LSN; every required LSN must be there with its
//! acknowledged bytes. A missing directory, or one holding no log or an interrupted creation,
//! is fine only when nothing is required.

use crate::acks::{self, Ack};
use std::collections::BTreeMap;
use std::path::Path;
use verifier::report::NoLog;
use verifier::state::{StateOptions, StateVerdict};
use wal::{Options, Wal};

/// How a check ends: violations (exit 1) or a setup error (exit 2).
#[derive(Debug)]
pub enum Failed {
    Violations(Vec<String>),
    Setup(String),
}

impl From<String> for Failed {
    fn from(s: String) -> Failed {
        Failed::Setup(s)
    }
}

pub type Checked = Result<String, Failed>;

/// The walcheck verdict of a log directory, or `None` when it holds no log.
#[derive(Debug)]
pub struct Walcheck {
    pub crc: wal::CrcVerdict,
    pub code: i32,
    pub state: String,
    /// The state verdict's explanation.
    pub why: String,
}

/// Runs walcheck's `verify` on `dir` (with `base` as `--base`); `None`: no log there.
pub fn verify(dir: &Path, base: Option<&Path>) -> Option<verifier::Report> {
    if !dir.exists() {
        return None;
    }
    let opts = StateOptions { base: base.map(Path::to_path_buf), state: None, diff_limit: 5 };
    let r = verifier::verify_with_state(dir, false, &opts, &walcheck::catalog_spec(), &mut |_| {});
    match r.no_log {
        Some(NoLog::Absent | NoLog::InterruptedCreation) => None,
        None => Some(r),
    }
}

/// walcheck's verdict on a report: OK or TORN_TAIL (exit 0 or 1), or a violation.
pub fn judge(dir: &Path, r: &verifier::Report) -> Result<Walcheck, Failed> {
    if let Some(e) = &r.io_error {
        return Err(Failed::Violations(vec![format!(
            "FAIL: walcheck verify {}: I/O error: {e}",
            dir.display()
        )]));
    }
    let state = r.state.as_ref().map_or(StateVerdict::NotChecked("quick".into()), |s| s.verdict.clone());
    let code = r.exit_code();
    if code > 1 {
        let damage =
            r.damage.as_ref().map_or(String::new(), |d| format!(": {}", verifier::report::describe(d)));
        let why = r.state.as_ref().map(|s| s.summary()).unwrap_or_default();
        return Err(Failed::Violations(vec![format!(
            "FAIL: walcheck verify {} exit {code}: CRC {} STATE {}{damage} {why}",
            dir.display(),
            r.crc.as_str(),
            state.word()
        )]));
    }
    let why = r.state.as_ref().map(|s| s.summary()).unwrap_or_default();
    Ok(Walcheck { crc: r.crc, code, state: state.word().to_string(), why })
}

/// [`verify`] and [`judge`] without a base snapshot.
pub fn walcheck(dir: &Path) -> Result<Option<Walcheck>, Failed> {
    verify(dir, None).map(|r| judge(dir, &r)).transpose()
}

/// The verdict on an image that holds no log (missing, empty, or an interrupted creation):
/// fine when `required` (how many promises need a log) is zero, a violation otherwise. The ok
/// line keeps the contract's `verdict=OK` (nothing is wrong) and says `log=none`.
pub fn no_log(kind: &str, dir: &Path, acks: usize, required: usize, what: &str) -> Checked {
    if required == 0 {
        return Ok(format!("ok {kind} required={acks} verdict=OK log=none"));
    }
    Err(Failed::Violations(vec![format!(
        "FAIL: {} holds no {kind} log, but {required} {what} acknowledged",
        dir.display()
    )]))
}

/// What the acks require of a plain log.
#[derive(Debug, Default)]
struct Model {
    /// LSN → (generation, seed).
    required: BTreeMap<u64, (u64, u64)>,
    /// Durable truncations: (after, generation).
    cuts: Vec<(u64, u64)>,
    epoch: Option<u64>,
    acks: usize,
}

impl Model {
    fn build(acks: &[Ack]) -> Result<Model, Failed> {
        let mut m = Model { acks: acks.len(), ..Model::default() };
        for a in acks {
            match *a {
                Ack::Entry { lsn, gen, seed } => {
                    m.required.insert(lsn, (gen, seed));
                }
                Ack::CutBegin { after } => m.required.retain(|&l, _| l <= after),
                Ack::Cut { after, gen } => {
                    m.required.retain(|&l, _| l <= after);
                    m.cuts.push((after, gen));
                }
                Ack::PurgeBegin { below } | Ack::Purge { below } => m.required.retain(|&l, _| l >= below),
                Ack::Epoch { epoch } => m.epoch = m.epoch.max(Some(epoch)),
                Ack::Cmd { .. } | Ack::Raft { .. } => {
                    return Err(Failed::Setup(format!("{a} does not belong to a plain log's acks")))
                }
            }
        }
        Ok(m)
    }
}

/// The segment files of `dir` and the LSN ranges their scan gives, for failure messages.
pub fn segment_of(dir: &Path, lsn: u64) -> String {
    let Ok(st) = wal::storage::FileStorage::new(dir, false) else { return "no segments".into() };
    let Ok(scan) = wal::scan_log(&st, false) else { return "segments unreadable".into() };
    let covering = scan.segments.iter().find(|s| s.counts.entries > 0 && s.counts.max_lsn >= lsn);
    match (covering, scan.segments.last()) {
        (Some(s), _) => format!("segment {} (LSN {}..={})", s.seq, s.counts.min_lsn, s.counts.max_lsn),
        (None, Some(s)) => format!("past the last segment {} (ends at LSN {})", s.seq, s.counts.max_lsn),
        (None, None) => "no segment holds records".into(),
    }
}

/// The options a checker opens a log with (only the segment size matters for a new segment).
pub fn open_options(segment_len_bytes: u32) -> Options {
    Options { segment_len_bytes, create: false, ..Options::default() }
}

pub fn check(dir: &Path, acks: &[Ack], kind: &str) -> Checked {
    let model = Model::build(acks)?;
    let Some(wc) = walcheck(dir)? else {
        let n = model.required.len() + usize::from(model.epoch.is_some_and(|e| e > 0));
        return no_log(kind, dir, model.acks, n, "entries or epochs were");
    };
    let (wal, report) = Wal::open(dir, open_options(crate::SEGMENT_LEN))
        .map_err(|e| Failed::Violations(vec![format!("FAIL: the log does not open: {e}")]))?;
    let mut fails = Vec::new();
    if report.verdict != wc.crc {
        fails.push(format!(
            "FAIL: the open's verdict {} disagrees with walcheck's {}",
            report.verdict.as_str(),
            wc.crc.as_str()
        ));
    }
    let found = wal
        .replay()
        .and_then(|r| r.collect_entries())
        .map_err(|e| Failed::Violations(vec![format!("FAIL: replay: {e}")]))?;
    let epoch = wal.epoch().0;
    wal.close().map_err(|e| Failed::Violations(vec![format!("FAIL: closing the recovered log: {e}")]))?;
    let mut present = BTreeMap::new();
    // The engine's scanner says the log is whole; this says it independently: the LSNs it
    // replays rise by exactly one (a hole or a repeat would be an entry lost or doubled).
    for pair in found.windows(2) {
        if pair[1].0 != pair[0].0 + 1 {
            fails.push(format!(
                "FAIL: replay gave LSN {} after LSN {} ({}): the live LSNs are not dense",
                pair[1].0,
                pair[0].0,
                segment_of(dir, pair[1].0)
            ));
        }
    }
    for (lsn, payload) in &found {
        match acks::decode(payload) {
            Some((seed, l, gen)) if l == *lsn => {
                present.insert(*lsn, (gen, seed));
            }
            _ => fails.push(format!(
                "FAIL: LSN {lsn} ({}) holds {} bytes that are no workload payload for it",
                segment_of(dir, *lsn),
                payload.len()
            )),
        }
    }
    for (&lsn, &(gen, seed)) in &model.required {
        match present.get(&lsn) {
            Some(&got) if got == (gen, seed) => {}
            Some(&(g, s)) => fails.push(format!(
                "FAIL: LSN {lsn} ({}): expected gen={gen} seed={seed}, found gen={g} seed={s}",
                segment_of(dir, lsn)
            )),
            None => fails.push(format!(
                "FAIL: acknowledged LSN {lsn} (gen={gen} seed={seed}) is missing ({}; the log holds {})",
                segment_of(dir, lsn),
                range(&present)
            )),
        }
    }
    for &(after, gen) in &model.cuts {
        for (&lsn, &(g, _)) in present.range(after + 1..) {
            if g < gen {
                fails.push(format!(
                    "FAIL: LSN {lsn} of gen {g} survived the acknowledged truncation after {after} (gen {gen})"
                ));
            }
        }
    }
    if let Some(e) = model.epoch.filter(|&e| epoch < e) {
        fails.push(format!("FAIL: epoch {e} was acknowledged, the log's is {epoch}"));
    }
    // After the restart's recovery and a clean close, the log must verify OK.
    if let Some(after) = walcheck(dir)? {
        if after.code != 0 {
            fails.push(format!("FAIL: after recovery and close, walcheck says {}", after.crc.as_str()));
        }
    }
    if !fails.is_empty() {
        return Err(Failed::Violations(fails));
    }
    Ok(format!(
        "ok {kind} required={} verdict={} state={} entries={} live_required={} epoch={epoch} range={}",
        model.acks,
        wc.crc.as_str(),
        wc.state,
        found.len(),
        model.required.len(),
        range(&present)
    ))
}

fn range<V>(m: &BTreeMap<u64, V>) -> String {
    match (m.keys().next(), m.keys().next_back()) {
        (Some(a), Some(b)) => format!("{a}..={b}"),
        _ => "nothing".into(),
    }
}
