//! Replica comparison (`walcheck compare`): several nodes' logs must hold the same entries at
//! the same LSNs (the Raft index in replicated mode; each node's own metadata and checkpoint
//! records are ignored) and reach the same state digest at the highest LSN they all have.
//! Each log is read pread-only, once, all of them in lockstep.

use crate::pread::ReadOnlyDir;
use crate::state::{StateMachineSpec, DEFAULT_DEDUPE_WINDOW};
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use wal::{Durability, Lsn, Options, RecoveryMode, Wal};
use wal::{ItemKind, Replay};
use wal_state::{recorded_dedupe_window, Applier, Replayer, StateMachine, DEDUPE_WINDOW_META_KEY};

/// The verdict of a comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaVerdict {
    /// Same entries over the common range and the same digest at its end.
    Agree,
    /// The first difference, with where.
    Differ(String),
    /// The logs could not be compared, with why.
    NotChecked(String),
    /// There was nothing to compare: a replica holds no entries or they share no LSN.
    NotCompared(String),
    /// A log could not be read (IO_ERROR), with where.
    Unreadable(String),
}

impl ReplicaVerdict {
    /// Why, for every verdict but AGREE.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ReplicaVerdict::Agree => None,
            ReplicaVerdict::Differ(w)
            | ReplicaVerdict::NotChecked(w)
            | ReplicaVerdict::NotCompared(w)
            | ReplicaVerdict::Unreadable(w) => Some(w),
        }
    }

    pub fn word(&self) -> &'static str {
        match self {
            ReplicaVerdict::Agree => "AGREE",
            ReplicaVerdict::Differ(_) => "DIVERGENT",
            ReplicaVerdict::NotChecked(_) => "NOT_CHECKED",
            ReplicaVerdict::NotCompared(_) => "NOT_COMPARED",
            ReplicaVerdict::Unreadable(_) => "IO_ERROR",
        }
    }
}

/// One replica's part of the comparison.
#[derive(Clone, Debug)]
pub struct Replica {
    pub dir: PathBuf,
    pub crc: &'static str,
    /// The exit code `walcheck verify` gives this log's CRC verdict alone.
    pub crc_code: i32,
    pub first_lsn: Option<Lsn>,
    pub last_lsn: Option<Lsn>,
    /// The state digest at the common end (hex), when replayed from the start.
    pub digest: Option<String>,
    pub entity_count: Option<u64>,
}

/// What `walcheck compare` found.
#[derive(Clone, Debug)]
pub struct ReplicaReport {
    pub verdict: ReplicaVerdict,
    pub replicas: Vec<Replica>,
    /// The LSN range all replicas hold.
    pub common: Option<(Lsn, Lsn)>,
    pub entries_compared: u64,
}

impl ReplicaReport {
    /// 0 when they agree, 4 (DIVERGENT) when they differ, 5 when one could not be read, 8
    /// when there was nothing to compare, and never less than the worst replica's CRC code.
    pub fn exit_code(&self) -> i32 {
        let worst = self.replicas.iter().map(|r| r.crc_code).max().unwrap_or(0);
        match self.verdict {
            ReplicaVerdict::Agree => worst,
            ReplicaVerdict::Differ(_) => worst.max(4),
            ReplicaVerdict::NotChecked(_) => worst,
            ReplicaVerdict::NotCompared(_) => worst.max(crate::exit::EXIT_NOT_COMPARED),
            ReplicaVerdict::Unreadable(_) => worst.max(crate::exit::EXIT_IO_ERROR),
        }
    }

    /// The JSON shape of the report (`walcheck compare --json`).
    pub fn json_view(&self) -> ReplicaReportJson<'_> {
        let lsn = |l: Option<Lsn>| l.map(|l| l.0);
        ReplicaReportJson {
            verdict: self.verdict.word(),
            reason: self.verdict.reason(),
            common: self.common.map(|(a, b)| [a.0, b.0]),
            entries_compared: self.entries_compared,
            replicas: self
                .replicas
                .iter()
                .map(|r| ReplicaJson {
                    dir: r.dir.display().to_string(),
                    crc: r.crc,
                    first_lsn: lsn(r.first_lsn),
                    last_lsn: lsn(r.last_lsn),
                    digest: r.digest.as_deref(),
                    entity_count: r.entity_count,
                })
                .collect(),
        }
    }

    /// [`ReplicaReport::json_view`] as a JSON value (its objects' keys sorted, as printed).
    pub fn to_json(&self) -> Value {
        crate::to_value(&self.json_view())
    }
}

/// The JSON of a [`ReplicaReport`]: every key always present (`null` when there is nothing to
/// say); the common range as `[first, last]`.
#[derive(Debug, Serialize)]
pub struct ReplicaReportJson<'a> {
    pub verdict: &'static str,
    pub reason: Option<&'a str>,
    pub common: Option<[u64; 2]>,
    pub entries_compared: u64,
    pub replicas: Vec<ReplicaJson<'a>>,
}

/// One replica's part of [`ReplicaReportJson`].
#[derive(Debug, Serialize)]
pub struct ReplicaJson<'a> {
    pub dir: String,
    pub crc: &'static str,
    pub first_lsn: Option<u64>,
    pub last_lsn: Option<u64>,
    pub digest: Option<&'a str>,
    pub entity_count: Option<u64>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The next entry of `r` (checkpoints go to `rp`), copied out; `None` at the end. A read
/// error is returned, never taken for the end.
fn next_entry<S: StateMachine>(
    r: &mut Replay,
    rp: &mut Replayer<S>,
    end: Lsn,
) -> wal::Result<Option<(Lsn, Vec<u8>)>> {
    while let Some(item) = r.next() {
        let item = item?;
        match item.kind {
            ItemKind::Checkpoint(cp) => rp.checkpoint(item.lsn, &cp),
            ItemKind::Entry if item.lsn > end => return Ok(None),
            ItemKind::Entry => {
                rp.entry(item.lsn, item.epoch, item.payload);
                return Ok(Some((item.lsn, item.payload.to_vec())));
            }
        }
    }
    Ok(None)
}

/// Why a lockstep walk ([`lockstep`]) stopped before the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Apart {
    /// The logs differ: the first difference, and where.
    Differ(String),
    /// Reading log `.0` failed.
    Failed(usize, String),
}

/// Walks several logs in lockstep over the positions `lo..=hi` and compares their entries byte
/// for byte: the one comparison loop of `walcheck compare` and of the Raft nodes' offline
/// `compare` (which decodes its entries differently). `next(i)` gives log `i`'s next entry at
/// or below `hi` (its position and bytes) or `None` past `hi` or at the log's end. The walk
/// starts at the common start: the highest of `lo` and every log's first entry. Logs compacted
/// at different points hold different prefixes of one history (a log's first position is where
/// its own purge left it, not a position every log holds), so the prefix only some logs hold is
/// read and skipped, not taken for a gap. `dirs` names the logs and `unit` their positions
/// ("LSN", "index") in the reasons.
pub fn lockstep<E: std::fmt::Display>(
    dirs: &[PathBuf],
    range: (u64, u64),
    unit: &str,
    next: impl FnMut(usize) -> Result<Option<(u64, Vec<u8>)>, E>,
) -> Result<Walked, Apart> {
    let mut walked = Walked::default();
    lockstep_counting(dirs, range, unit, next, &mut walked).map(|()| walked)
}

/// What a lockstep walk covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Walked {
    /// The first position compared: the common start (none when a log held no entry in range).
    pub start: Option<u64>,
    /// How many positions matched.
    pub compared: u64,
}

/// [`lockstep`], filling `walked` as it goes: the positions that matched are counted also when
/// it stops at a difference (then: the positions before it).
pub fn lockstep_counting<E: std::fmt::Display>(
    dirs: &[PathBuf],
    (lo, hi): (u64, u64),
    unit: &str,
    mut next: impl FnMut(usize) -> Result<Option<(u64, Vec<u8>)>, E>,
    walked: &mut Walked,
) -> Result<(), Apart> {
    // Each log's first entry at or above `lo`, to find the common start.
    let mut heads = Vec::with_capacity(dirs.len());
    for i in 0..dirs.len() {
        heads.push(next_from(&mut next, i, lo)?);
    }
    let start = heads.iter().map(|h| h.as_ref().map(|e| e.0)).collect::<Option<Vec<u64>>>();
    let start = start.and_then(|s| s.into_iter().max()).unwrap_or(lo).max(lo);
    walked.start = heads.iter().all(Option::is_some).then_some(start);
    let mut heads: Vec<_> = heads.into_iter().map(|h| h.filter(|e| e.0 >= start)).collect();
    let mut next = |i: usize| match heads[i].take() {
        Some(e) => Ok(Some(e)),
        None => next_from(&mut next, i, start),
    };
    // Bounded by the entries of the shortest log: every round consumes one entry of each.
    loop {
        let mut first: Option<(usize, u64, Vec<u8>)> = None;
        let mut ended = None;
        for i in 0..dirs.len() {
            let got = next(i)?;
            match (&first, got) {
                (_, None) => {
                    ended.get_or_insert(i);
                }
                (None, Some((at, bytes))) => first = Some((i, at, bytes)),
                (Some((j, at0, _)), Some((at, _))) if at != *at0 => {
                    return Err(Apart::Differ(format!(
                        "{} has {unit} {at} where {} has {unit} {at0} (a gap in one of them)",
                        dirs[i].display(),
                        dirs[*j].display()
                    )))
                }
                (Some((j, at0, bytes0)), Some((_, bytes))) if bytes != *bytes0 => {
                    return Err(Apart::Differ(format!(
                        "the entry at {unit} {at0} differs between {} and {}",
                        dirs[*j].display(),
                        dirs[i].display()
                    )))
                }
                (Some(_), Some(_)) => {}
            }
        }
        match (ended, first) {
            (None, _) => walked.compared += 1,
            (Some(_), None) => return Ok(()),
            (Some(i), Some(_)) => {
                return Err(Apart::Differ(format!(
                    "{} ends before {unit} {hi}, which every log claims to hold",
                    dirs[i].display()
                )))
            }
        }
    }
}

/// Log `i`'s next entry at or above `from` (earlier ones are read and skipped).
fn next_from<E: std::fmt::Display>(
    next: &mut impl FnMut(usize) -> Result<Option<(u64, Vec<u8>)>, E>,
    i: usize,
    from: u64,
) -> Result<Option<(u64, Vec<u8>)>, Apart> {
    loop {
        match next(i) {
            Ok(Some((at, _))) if at < from => continue,
            Ok(got) => return Ok(got),
            Err(e) => return Err(Apart::Failed(i, e.to_string())),
        }
    }
}

/// Compares the logs in `dirs` (at least two).
pub fn compare_replicas<S: StateMachine>(dirs: &[PathBuf], spec: &StateMachineSpec<S>) -> ReplicaReport {
    let mut report = ReplicaReport {
        verdict: ReplicaVerdict::Agree,
        replicas: Vec::new(),
        common: None,
        entries_compared: 0,
    };
    let mut logs = Vec::new();
    for dir in dirs {
        let crc = crate::verify(dir, &crate::VerifyOptions::default(), &mut |_| {});
        let opts =
            Options { recovery: RecoveryMode::Salvage, read_only: true, create: false, ..Options::default() };
        let opened = Wal::open_reader(Arc::new(ReadOnlyDir::new(dir)), opts);
        let (first, last) = match &opened {
            Ok((w, _)) => (w.first_lsn(), w.first_lsn().and(w.next_lsn().0.checked_sub(1)).map(Lsn)),
            Err(_) => (None, None),
        };
        report.replicas.push(Replica {
            dir: dir.clone(),
            crc: crc.crc_word(),
            crc_code: crc.exit_code(),
            first_lsn: first,
            last_lsn: last,
            digest: None,
            entity_count: None,
        });
        match opened {
            Ok((w, _))
                if matches!(crc.crc, wal::CrcVerdict::Ok | wal::CrcVerdict::TornTail)
                    && crc.io_error.is_none() =>
            {
                logs.push(w)
            }
            Ok(_) => {
                report.verdict = ReplicaVerdict::NotChecked(format!(
                    "{} is {}: compare after repair",
                    dir.display(),
                    crc.crc_word()
                ));
                return report;
            }
            Err(e) => {
                report.verdict = ReplicaVerdict::NotChecked(format!("{}: {e}", dir.display()));
                return report;
            }
        }
    }
    let lo = report.replicas.iter().map(|r| r.first_lsn).max().flatten();
    let hi = report.replicas.iter().map(|r| r.last_lsn).min().flatten();
    let (Some(lo), Some(hi)) = (lo, hi) else {
        let empty: Vec<String> = report
            .replicas
            .iter()
            .filter(|r| r.last_lsn.is_none())
            .map(|r| r.dir.display().to_string())
            .collect();
        report.verdict = ReplicaVerdict::NotCompared(format!("{} holds no entries", empty.join(", ")));
        return report;
    };
    if lo > hi {
        report.verdict =
            ReplicaVerdict::NotCompared(format!("the replicas share no LSN (common start {lo}, end {hi})"));
        return report;
    }
    report.common = Some((lo, hi));
    // Digests need the whole history: only replicas whose prefix is intact are replayed from
    // the start; entries are compared over the common range regardless.
    let full = logs.iter().all(|w| !w.prefix_purged());
    let mut replays = Vec::new();
    let mut replayers = Vec::new();
    for w in &logs {
        let window = recorded_dedupe_window(w.meta(DEDUPE_WINDOW_META_KEY)).unwrap_or(DEFAULT_DEDUPE_WINDOW);
        let from = if full { None } else { Some(lo) };
        match w.replay_from(from, Durability::Written) {
            Ok(r) => replays.push(r),
            Err(e) => {
                report.verdict = ReplicaVerdict::NotChecked(format!("replay: {e}"));
                return report;
            }
        }
        replayers.push(Replayer::new(Applier::new((spec.fresh)(), window)));
    }
    let next = |i: usize| {
        let (r, rp) = (&mut replays[i], &mut replayers[i]);
        next_entry(r, rp, hi).map(|e| e.map(|(l, p)| (l.0, p)))
    };
    let mut walked = Walked::default();
    let result = lockstep_counting(dirs, (lo.0, hi.0), "LSN", next, &mut walked);
    report.entries_compared = walked.compared;
    if let (Some(start), Some(common)) = (walked.start, report.common.as_mut()) {
        common.0 = Lsn(start);
    }
    match result {
        Ok(()) => {}
        Err(Apart::Differ(why)) => {
            report.verdict = ReplicaVerdict::Differ(why);
            return report;
        }
        Err(Apart::Failed(i, e)) => {
            report.verdict =
                ReplicaVerdict::Unreadable(format!("{}: the replay failed: {e}", dirs[i].display()));
            return report;
        }
    }
    if !full {
        report.verdict = ReplicaVerdict::Agree;
        return report;
    }
    let mut digests = Vec::new();
    for (rep, rp) in report.replicas.iter_mut().zip(replayers) {
        let (a, c) = rp.finish();
        if let Some(d) = c.divergence {
            report.verdict = ReplicaVerdict::Differ(format!(
                "{} disagrees with its own checkpoint at LSN {}: {}",
                rep.dir.display(),
                d.lsn,
                d.reason
            ));
            return report;
        }
        let cp = a.checkpoint();
        rep.digest = Some(hex(&cp.digest));
        rep.entity_count = Some(cp.entity_count);
        digests.push(cp);
    }
    if digests.windows(2).any(|w| w[0] != w[1]) {
        report.verdict = ReplicaVerdict::Differ(format!(
            "same entries through LSN {hi}, but the state digests at LSN {hi} differ"
        ));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    type Log = Vec<(u64, Vec<u8>)>;

    /// Runs `lockstep` over in-memory logs; `fail` makes reading that log fail at its end.
    fn walk(logs: &[Log], lo: u64, hi: u64, fail: Option<usize>) -> Result<u64, Apart> {
        walk_from(logs, lo, hi, fail).map(|w| w.compared)
    }

    fn walk_from(logs: &[Log], lo: u64, hi: u64, fail: Option<usize>) -> Result<Walked, Apart> {
        let dirs: Vec<PathBuf> = (0..logs.len()).map(|i| PathBuf::from(format!("r{i}"))).collect();
        let mut at = vec![0usize; logs.len()];
        lockstep(&dirs, (lo, hi), "LSN", |i| {
            let e = logs[i].get(at[i]).filter(|e| e.0 <= hi).cloned();
            at[i] += 1;
            match e {
                None if fail == Some(i) => Err("boom"),
                e => Ok(e),
            }
        })
    }

    fn log(range: std::ops::RangeInclusive<u64>) -> Log {
        range.map(|l| (l, vec![l as u8; 3])).collect()
    }

    #[test]
    fn agreeing_logs_count_the_common_range_only() {
        // r0 holds a prefix the others purged: read, not compared.
        assert_eq!(walk(&[log(1..=9), log(4..=9), log(4..=12)], 4, 9, None), Ok(6));
    }

    #[test]
    fn logs_purged_at_different_points_are_compared_from_their_common_start() {
        // Each log starts where its own purge left it; none of them holds the range's start.
        let logs = [log(3..=9), log(6..=9), log(5..=12)];
        assert_eq!(walk_from(&logs, 1, 9, None), Ok(Walked { start: Some(6), compared: 4 }));
        let mut changed = log(4..=9);
        changed[4].1[0] ^= 1;
        let err = walk(&[log(3..=9), changed], 1, 9, None).unwrap_err();
        assert_eq!(err, Apart::Differ("the entry at LSN 8 differs between r0 and r1".into()));
        // A hole after the common start is still a gap.
        let mut gap = log(5..=9);
        gap.remove(2);
        let err = walk(&[log(3..=9), gap], 1, 9, None).unwrap_err();
        assert_eq!(err, Apart::Differ("r1 has LSN 8 where r0 has LSN 7 (a gap in one of them)".into()));
    }

    #[test]
    fn a_changed_entry_a_gap_and_a_short_log_are_named() {
        let mut changed = log(1..=5);
        changed[2].1[0] ^= 1;
        let err = walk(&[log(1..=5), changed], 1, 5, None).unwrap_err();
        assert_eq!(err, Apart::Differ("the entry at LSN 3 differs between r0 and r1".into()));

        let mut gap = log(1..=5);
        gap.remove(1);
        let err = walk(&[log(1..=5), gap], 1, 5, None).unwrap_err();
        assert_eq!(err, Apart::Differ("r1 has LSN 3 where r0 has LSN 2 (a gap in one of them)".into()));

        // Two logs end early, the third does not: the first short one is named.
        let err = walk(&[log(1..=3), log(1..=3), log(1..=5)], 1, 5, None).unwrap_err();
        assert_eq!(err, Apart::Differ("r0 ends before LSN 5, which every log claims to hold".into()));
    }

    #[test]
    fn a_read_error_is_not_taken_for_the_end() {
        assert_eq!(walk(&[log(1..=5), log(1..=5)], 1, 5, Some(1)), Err(Apart::Failed(1, "boom".into())));
    }
}
