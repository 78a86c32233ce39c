//! The log's logical position (next LSN, first live LSN, writer epoch, metadata) and the one
//! implementation of admitting an operation against it: the writer-epoch check (docs/invariants.md
//! I7), the size checks, the gap check, the cut a truncation, a reset or an append below the next
//! LSN makes, the metadata key bound, the epoch advance, and the assignment of LSNs.
//!
//! Two holders run it, each on its own copy: the synchronous log ([`Wal`](super::Wal)), which
//! stages the records an admitted operation makes at the LSNs its position assigned, and the
//! writer thread's submit side (`io_thread/submit.rs`), which admits an operation under its
//! submit lock so that a refusal is an error at once and the ticket carries the LSN the log will
//! give it. Both apply the same operations in the same order (the queue's), so they assign the
//! same LSNs; the writer thread checks that they did and fences the log if not (a bug, never a
//! quiet misplacement).
//!
//! An admission is two steps, [`Position::plan`] (every check, nothing moves) and
//! [`Position::apply`] (moves the position, cannot fail), so the log can make room for the
//! records between them (which may fail, disk full) without moving anything when it does.

use crate::error::{Error, Result};
use crate::format::{MAX_META_KEYS, MAX_META_VALUE_LEN};
use crate::scan::Logical;
use crate::Epoch;
use std::sync::Arc;

/// The log's logical position after every operation its holder admitted. Only the methods here
/// move it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    l: Logical,
}

/// An operation that moves the position, as both holders describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    /// `entries` entries (one, or a user batch taking consecutive LSNs): at the next LSN
    /// (`at: None`), or at `at`: below the next LSN the entries from `at` on are cut first; above
    /// it, only into a log with no live entry (the log then starts at `at`).
    Append { at: Option<u64>, entries: usize },
    /// Every entry after this LSN is cut.
    TruncateAfter(u64),
    /// Every entry is cut; the next takes this LSN.
    Reset(u64),
    /// A metadata value recorded.
    SetMeta { key: u32, value: &'a [u8] },
    /// The writer epoch raised to this.
    AdvanceEpoch(u64),
}

/// What an admitted operation does: decided by [`Position::plan`], done by [`Position::apply`]
/// (and, in the log, the records staged for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// Entries from `first` on (after `cut`, when the append is not at the next LSN).
    Append { cut: Option<Cut>, first: u64, entries: u64 },
    /// A truncation or a reset.
    Cut(Cut),
    /// A metadata value.
    Meta { key: u32, value: &'a [u8] },
    /// The new writer epoch.
    Epoch(u64),
}

/// How the next entry comes to take a given LSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// A live entry below `keep_lt` stays: the entries from `keep_lt` on are cut (a Truncate
    /// record).
    Truncate { keep_lt: u64 },
    /// No live entry stays: every entry is cut and the next takes `next` (a Reset record).
    Reset { next: u64 },
}

impl From<Logical> for Position {
    fn from(l: Logical) -> Position {
        Position { l }
    }
}

impl Position {
    /// The logical state it holds (what a State record or `wal.close` encodes).
    pub(crate) fn logical(&self) -> &Logical {
        &self.l
    }

    /// The LSN the next plain append takes.
    pub(crate) fn next_lsn(&self) -> u64 {
        self.l.next_lsn
    }

    /// The first live entry's LSN (`None`: no entry is live).
    pub(crate) fn first_lsn(&self) -> Option<u64> {
        self.l.first_lsn
    }

    /// The writer epoch appends must carry.
    pub(crate) fn epoch(&self) -> u64 {
        self.l.epoch
    }

    /// The last value recorded for a metadata key.
    pub(crate) fn meta(&self, key: u32) -> Option<&[u8]> {
        self.l.meta.get(&key).map(Vec::as_slice)
    }

    /// The writer-epoch check every append, truncation, reset and checkpoint makes (I7): an
    /// older epoch is a stale writer, a newer one was never advanced to.
    pub(crate) fn check_epoch(&self, given: Epoch) -> Result<()> {
        let current = self.l.epoch;
        // Mutant (tools/mutants.sh, I7): an append from a stale writer is accepted.
        if given.0 < current && !crate::mutants::on("stale-epoch-accepted") {
            return Err(Error::StaleEpoch { current, given: given.0 });
        }
        if given.0 > current {
            return Err(Error::EpochNotAdvanced { current, given: given.0 });
        }
        Ok(())
    }

    /// The size checks of an append of `entries` entries whose payload lengths are `lens` (all
    /// of them, or only the largest: the first over `max` is the one refused).
    pub(crate) fn check_entries(
        entries: usize,
        lens: impl IntoIterator<Item = usize>,
        max: usize,
    ) -> Result<()> {
        if entries == 0 {
            return Err(Error::InvalidArgument("empty batch".into()));
        }
        if let Some(len) = lens.into_iter().find(|&len| len > max) {
            return Err(Error::TooLarge { len: len as u64, max: max as u64 });
        }
        Ok(())
    }

    /// A checkpoint covers only entries the log has taken.
    pub(crate) fn check_checkpoint(&self, lsn: u64) -> Result<()> {
        if lsn >= self.l.next_lsn {
            return Err(Error::InvalidArgument(format!(
                "checkpoint at {lsn} covers an entry the log has not taken (next LSN {})",
                self.l.next_lsn
            )));
        }
        Ok(())
    }

    /// Checks `op` (the writer epoch and an append's sizes are checked before, by
    /// [`Position::check_epoch`] and [`Position::check_entries`]) and says what it does, without
    /// moving anything.
    pub(crate) fn plan<'a>(&self, op: Op<'a>) -> Result<Step<'a>> {
        let next = self.l.next_lsn;
        Ok(match op {
            Op::Append { at, entries } => {
                let at = at.unwrap_or(next);
                if at > next && self.l.first_lsn.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "append at LSN {at} would leave a gap after {}",
                        next - 1
                    )));
                }
                let cut = (at != next).then(|| self.cut_to(at));
                Step::Append { cut, first: at, entries: entries as u64 }
            }
            Op::TruncateAfter(after) => {
                if after >= next {
                    return Err(Error::InvalidArgument(format!(
                        "truncate after {after} is at or past the end of the log (next LSN {next})"
                    )));
                }
                Step::Cut(self.cut_to(after + 1))
            }
            Op::Reset(next) => Step::Cut(Cut::Reset { next }),
            Op::SetMeta { key, value } => {
                if value.len() > MAX_META_VALUE_LEN {
                    return Err(Error::TooLarge { len: value.len() as u64, max: MAX_META_VALUE_LEN as u64 });
                }
                if !self.l.meta.contains_key(&key) && self.l.meta.len() >= MAX_META_KEYS {
                    return Err(Error::InvalidArgument(format!("at most {MAX_META_KEYS} metadata keys")));
                }
                Step::Meta { key, value }
            }
            Op::AdvanceEpoch(new) => {
                if new <= self.l.epoch {
                    return Err(Error::StaleEpoch { current: self.l.epoch, given: new });
                }
                Step::Epoch(new)
            }
        })
    }

    /// Does what [`Position::plan`] decided (nothing may have moved the position between the
    /// two). Returns the LSN the operation's ticket carries: an append's first LSN, or else the
    /// next LSN after the operation.
    pub(crate) fn apply(&mut self, step: &Step<'_>) -> u64 {
        match *step {
            Step::Append { cut, first, entries } => {
                if let Some(cut) = cut {
                    self.cut(cut);
                }
                debug_assert_eq!(first, self.l.next_lsn, "an append planned at another LSN");
                self.append(entries)
            }
            Step::Cut(cut) => {
                self.cut(cut);
                self.l.next_lsn
            }
            Step::Meta { key, value } => {
                Arc::make_mut(&mut self.l.meta).insert(key, value.to_vec());
                self.l.next_lsn
            }
            Step::Epoch(new) => {
                self.l.epoch = new;
                self.l.next_lsn
            }
        }
    }

    /// [`Position::plan`] then [`Position::apply`]: what the submit side does, which has nothing
    /// to make room for.
    pub(crate) fn admit(&mut self, op: Op<'_>) -> Result<u64> {
        let step = self.plan(op)?;
        Ok(self.apply(&step))
    }

    /// A plain append of `entries` entries at the next LSN (its checks passed): assigns their
    /// LSNs, consecutive, and returns the first.
    pub(crate) fn append(&mut self, entries: u64) -> u64 {
        let first = self.l.next_lsn;
        self.l.first_lsn.get_or_insert(first);
        self.l.next_lsn += entries;
        first
    }

    /// How the next entry comes to take `keep_lt`: a truncation when a live entry stays below
    /// it, else a reset.
    fn cut_to(&self, keep_lt: u64) -> Cut {
        let live_below = self.l.first_lsn.is_some_and(|f| f < keep_lt);
        if live_below && keep_lt <= self.l.next_lsn {
            Cut::Truncate { keep_lt }
        } else {
            Cut::Reset { next: keep_lt }
        }
    }

    fn cut(&mut self, cut: Cut) {
        match cut {
            Cut::Truncate { keep_lt } => self.l.next_lsn = keep_lt,
            Cut::Reset { next } => {
                self.l.first_lsn = None;
                self.l.next_lsn = next;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(next_lsn: u64, first_lsn: Option<u64>) -> Position {
        Position::from(Logical { next_lsn, first_lsn, epoch: 3, meta: Default::default() })
    }

    #[test]
    fn an_append_takes_the_next_lsns() {
        let mut p = at(10, None);
        assert_eq!(p.admit(Op::Append { at: None, entries: 3 }).unwrap(), 10);
        assert_eq!((p.next_lsn(), p.first_lsn()), (13, Some(10)));
        assert_eq!(p.append(1), 13);
        assert_eq!((p.next_lsn(), p.first_lsn()), (14, Some(10)));
    }

    #[test]
    fn an_append_below_the_next_lsn_truncates_or_resets() {
        let p = at(10, Some(5));
        let truncate = Step::Append { cut: Some(Cut::Truncate { keep_lt: 7 }), first: 7, entries: 1 };
        assert_eq!(p.plan(Op::Append { at: Some(7), entries: 1 }).unwrap(), truncate);
        // Nothing live below it stays: a reset.
        let reset = Step::Append { cut: Some(Cut::Reset { next: 5 }), first: 5, entries: 1 };
        assert_eq!(p.plan(Op::Append { at: Some(5), entries: 1 }).unwrap(), reset);
        let mut q = p.clone();
        assert_eq!(q.apply(&reset), 5);
        assert_eq!((q.next_lsn(), q.first_lsn()), (6, Some(5)));
    }

    #[test]
    fn an_append_above_the_next_lsn_only_into_an_empty_log() {
        let e = at(10, Some(5)).plan(Op::Append { at: Some(12), entries: 1 }).unwrap_err();
        assert_eq!(
            e.to_string(),
            Error::InvalidArgument("append at LSN 12 would leave a gap after 9".into()).to_string()
        );
        let mut p = at(10, None);
        assert_eq!(p.admit(Op::Append { at: Some(12), entries: 2 }).unwrap(), 12);
        assert_eq!((p.next_lsn(), p.first_lsn()), (14, Some(12)));
    }

    #[test]
    fn a_refused_operation_moves_nothing() {
        let mut p = at(10, Some(5));
        let before = p.clone();
        assert!(p.admit(Op::TruncateAfter(10)).is_err());
        assert!(p.admit(Op::AdvanceEpoch(3)).is_err());
        assert!(p.admit(Op::SetMeta { key: 1, value: &[0; MAX_META_VALUE_LEN + 1] }).is_err());
        assert!(p.check_epoch(Epoch(2)).is_err() && p.check_epoch(Epoch(4)).is_err());
        assert!(p.check_checkpoint(10).is_err() && p.check_checkpoint(9).is_ok());
        assert_eq!(p, before);
        for key in 0..MAX_META_KEYS as u32 {
            p.admit(Op::SetMeta { key, value: b"v" }).unwrap();
        }
        assert!(p.admit(Op::SetMeta { key: 99, value: b"v" }).is_err());
        assert_eq!(p.meta(0), Some(&b"v"[..]));
    }

    #[test]
    fn the_size_checks_refuse_the_first_payload_over_the_limit() {
        assert!(matches!(Position::check_entries(0, [], 8), Err(Error::InvalidArgument(_))));
        let e = Position::check_entries(3, [1, 9, 12], 8).unwrap_err();
        assert!(matches!(e, Error::TooLarge { len: 9, max: 8 }), "{e:?}");
        assert!(Position::check_entries(2, [8, 8], 8).is_ok());
    }
}
