//! The replay-and-compare core: one implementation for the pipeline's restart and for
//! `walcheck`. It feeds entries through the apply seam ([`Applier::apply`]) and, at every
//! checkpoint record it meets, compares the digest the online path recorded with the digest the
//! replay reached at the same LSN.
//!
//! A checkpoint for LSN `L` (the state after every live entry with LSN ≤ `L`) is written after
//! entry `L` was applied online, so entries after `L` may precede it in the log. The replayer
//! therefore keeps the digest reached after each of the last [`CHECKPOINT_MAX_LAG`] applied
//! entries (40 bytes each) and looks `L` up there. A writer never records a checkpoint further
//! behind than that (FORMAT.md section 10.3); one that is, is counted as too old, not checked.

use super::{Applied, Applier, SetDigest, StateMachine, DIGEST_VERSION};
use std::collections::VecDeque;
use wal::Checkpoint;
use wal::{Epoch, Lsn};
use wal::{ItemKind, Replay};

/// How many entries a checkpoint may trail the log's end when it is written.
pub const CHECKPOINT_MAX_LAG: u64 = 65_536;

/// How many checkpoints too far behind to compare a report names by LSN (the rest are counted).
pub const TOO_OLD_LISTED: usize = 8;

/// Where replay and the recorded state first disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The last LSN a checkpoint (or the base snapshot) confirmed, if any: the divergence lies
    /// in the entries after it, up to and including `lsn`.
    pub last_good: Option<Lsn>,
    /// The checkpoint (or entry) where the disagreement was seen.
    pub lsn: Lsn,
    /// What the log recorded (absent when an entry could not be applied at all).
    pub recorded: Option<Checkpoint>,
    /// What the replay computed at that LSN.
    pub replayed: Option<Checkpoint>,
    /// What disagreed, in words (the digests, the entity counts, an entry apply refused).
    pub reason: String,
}

/// What a replay-and-compare found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompareReport {
    /// The snapshot LSN the replay started from (entries up to it were not replayed).
    pub base: Option<Lsn>,
    /// Entries the replay passed through the apply seam (duplicates and refusals included).
    pub entries_applied: u64,
    /// Of those, entries whose request id was already applied (no-ops).
    pub duplicates: u64,
    /// Of those, entries the state machine refused.
    pub refused: u64,
    /// Checkpoints compared with the replayed state, and equal to it.
    pub checkpoints_checked: u64,
    /// Checkpoints at or below the base snapshot (nothing to compare: the base was checked).
    pub checkpoints_before_base: u64,
    /// Checkpoints further behind than [`CHECKPOINT_MAX_LAG`] (not checked).
    pub checkpoints_too_old: u64,
    /// The LSNs of the first `TOO_OLD_LISTED` of them, so that a report can name them.
    pub too_old: Vec<Lsn>,
    /// The highest LSN a checkpoint confirmed (or the base, when no checkpoint came after it).
    pub verified_through: Option<Lsn>,
    /// Entries replayed after `verified_through` that no checkpoint could cross-check.
    pub unchecked_entries: u64,
    /// The first entry the replay applied.
    pub first_applied: Option<Lsn>,
    /// The last entry the replay applied.
    pub last_applied: Option<Lsn>,
    /// Where the replay and the recorded state first disagreed (DIVERGENT); the replay stops
    /// there.
    pub divergence: Option<Divergence>,
    /// A checkpoint names a digest or state-machine version this build does not know.
    pub unsupported: Option<String>,
}

impl CompareReport {
    /// Replay stopped at a divergence or an unsupported version.
    pub fn stopped(&self) -> bool {
        self.divergence.is_some() || self.unsupported.is_some()
    }
}

/// Replays entries through the apply seam and checks every checkpoint met.
#[derive(Debug)]
pub struct Replayer<S> {
    applier: Applier<S>,
    base: Option<Lsn>,
    /// (LSN, digest after applying it), oldest first; the first element may be the base.
    history: VecDeque<(Option<Lsn>, SetDigest)>,
    trimmed: bool,
    report: CompareReport,
}

impl<S: StateMachine> Replayer<S> {
    /// Starts from `applier` (fresh, or imported from a snapshot at `applier.applied()`).
    pub fn new(applier: Applier<S>) -> Self {
        let base = applier.applied();
        let history = VecDeque::from([(base, applier.digest())]);
        let report = CompareReport { base, verified_through: base, ..Default::default() };
        Replayer { applier, base, history, trimmed: false, report }
    }

    /// Applies one entry (skipped when the base snapshot already holds it).
    pub fn entry(&mut self, lsn: Lsn, epoch: Epoch, payload: &[u8]) {
        if self.report.stopped() || self.base.is_some_and(|b| lsn <= b) {
            return;
        }
        // Mutant (tools/mutants.sh, I2): replay drops the dedupe window the online path keeps.
        if wal_format::mutants::on("replay-ignores-dedupe") {
            self.applier.mutant_forget_request_ids();
        }
        match self.applier.apply(lsn, epoch, payload) {
            Ok(Applied::Duplicate { .. }) => self.report.duplicates += 1,
            Ok(Applied::Outcome(o)) => self.report.refused += o.is_refused() as u64,
            Err(why) => {
                self.report.divergence = Some(Divergence {
                    last_good: self.report.verified_through,
                    lsn,
                    recorded: None,
                    replayed: None,
                    reason: format!("the entry could not be applied: {why}"),
                });
                return;
            }
        }
        self.report.entries_applied += 1;
        self.report.unchecked_entries += 1;
        self.report.first_applied.get_or_insert(lsn);
        self.report.last_applied = Some(lsn);
        self.history.push_back((Some(lsn), self.applier.digest()));
        if self.history.len() as u64 > CHECKPOINT_MAX_LAG + 1 {
            self.history.pop_front();
            self.trimmed = true;
        }
    }

    /// Compares a checkpoint record for LSN `lsn` with the replayed state at that LSN.
    pub fn checkpoint(&mut self, lsn: Lsn, recorded: &Checkpoint) {
        if self.report.stopped() {
            return;
        }
        if recorded.digest_version != DIGEST_VERSION || recorded.state_machine_version != S::VERSION {
            self.report.unsupported = Some(format!(
                "the checkpoint at LSN {lsn} has digest version {} and state-machine version {}; \
                 this build knows digest version {DIGEST_VERSION} and state-machine version {}",
                recorded.digest_version,
                recorded.state_machine_version,
                S::VERSION
            ));
            return;
        }
        if self.base.is_some_and(|b| lsn <= b) {
            self.report.checkpoints_before_base += 1;
            return;
        }
        if self.report.last_applied.is_none_or(|a| a < lsn) && self.base.is_none_or(|b| b < lsn) {
            // A writer records a checkpoint only after applying its LSN: one ahead of its
            // entries in the log describes a state this log never reached.
            let replayed = self.value(self.history.back().map(|h| h.1).unwrap_or_default());
            self.diverge(lsn, recorded, replayed, "the checkpoint comes before the entries it covers");
            return;
        }
        let Some((replayed, newer)) = self.at(lsn) else {
            debug_assert!(self.trimmed);
            self.report.checkpoints_too_old += 1;
            if self.report.too_old.len() < TOO_OLD_LISTED {
                self.report.too_old.push(lsn);
            }
            return;
        };
        if replayed != *recorded {
            self.diverge(lsn, recorded, replayed, "replay and the online digest disagree");
            return;
        }
        self.report.checkpoints_checked += 1;
        if self.report.verified_through.is_none_or(|v| v < lsn) {
            self.report.verified_through = Some(lsn);
            self.report.unchecked_entries = newer;
        }
    }

    /// The replayed state after the last entry at or below `lsn`, and how many kept states are
    /// newer; `None` when that is older than the states kept (the last [`CHECKPOINT_MAX_LAG`]).
    fn at(&self, lsn: Lsn) -> Option<(Checkpoint, u64)> {
        let idx = self.history.partition_point(|h| h.0 <= Some(lsn));
        let newer = (self.history.len() - idx) as u64;
        idx.checked_sub(1).map(|i| (self.value(self.history[i].1), newer))
    }

    /// The replayed state after the last entry at or below `lsn` (the base's, before the first
    /// replayed entry), as a checkpoint value: what another comparison (a Raft node's digest
    /// claims) checks against. `None` when it is older than the states kept.
    pub fn state_at(&self, lsn: Lsn) -> Option<Checkpoint> {
        self.at(lsn).map(|(cp, _)| cp)
    }

    fn value(&self, d: SetDigest) -> Checkpoint {
        Checkpoint {
            digest: d.finalize(S::VERSION),
            entity_count: d.count(),
            digest_version: DIGEST_VERSION,
            state_machine_version: S::VERSION,
        }
    }

    fn diverge(&mut self, lsn: Lsn, recorded: &Checkpoint, replayed: Checkpoint, reason: &str) {
        let mut reason = reason.to_string();
        if recorded.entity_count != replayed.entity_count {
            reason.push_str(&format!(
                " (the log recorded {} entities, replay has {})",
                recorded.entity_count, replayed.entity_count
            ));
        }
        self.report.divergence = Some(Divergence {
            last_good: self.report.verified_through,
            lsn,
            recorded: Some(*recorded),
            replayed: Some(replayed),
            reason,
        });
        self.applier.fence(format!("DIVERGENT at LSN {lsn}"));
    }

    /// Feeds every remaining item of `replay`; stops early at a divergence. Damage in the log
    /// is returned as the error it is.
    pub fn run(&mut self, replay: &mut Replay) -> wal::Result<()> {
        while let Some(item) = replay.next() {
            let item = item?;
            match item.kind {
                ItemKind::Entry => self.entry(item.lsn, item.epoch, item.payload),
                ItemKind::Checkpoint(cp) => self.checkpoint(item.lsn, &cp),
            }
            if self.report.stopped() {
                break;
            }
        }
        Ok(())
    }

    /// What the replay found so far.
    pub fn report(&self) -> &CompareReport {
        &self.report
    }

    /// The applier, holding the state the replay reached.
    pub fn applier(&self) -> &Applier<S> {
        &self.applier
    }

    /// The applier (to go on applying online) and what the replay found.
    pub fn finish(self) -> (Applier<S>, CompareReport) {
        (self.applier, self.report)
    }
}
