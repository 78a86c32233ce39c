//! The writer thread's operations other than a plain append (append at an LSN, truncate, reset,
//! metadata, epoch), and the submit side's copy of the log's logical position that checks them.
//!
//! An operation is checked and given its LSN at submission, under the submit lock, exactly as
//! [`Wal`] will check and place it when the writer thread stages it: a refusal is an `Error` at
//! once and consumes nothing, and the queue order is the order the log applies them in. The
//! writer thread compares the log's position after each operation with the one promised here,
//! and fences the log if they ever differ (a bug, never a quiet misplacement).

use super::Payload;
use crate::error::{Error, Result};
use crate::format::{MAX_META_KEYS, MAX_META_VALUE_LEN};
use crate::log::Wal;
use crate::Epoch;

/// One queued operation that changes the log's position or state.
#[derive(Debug)]
pub(crate) enum Control {
    /// [`Wal::append_at`] (one entry) or [`Wal::append_batch_at`] (a user batch).
    AppendAt { lsn: u64, payload: Payload },
    /// [`Wal::truncate_after`].
    TruncateAfter(u64),
    /// [`Wal::reset`].
    Reset(u64),
    /// [`Wal::set_meta`].
    SetMeta { key: u32, value: Vec<u8> },
    /// [`Wal::advance_epoch`].
    AdvanceEpoch(u64),
}

impl Control {
    /// Entries and payload bytes it adds (what it holds of the queue's bounds).
    pub(crate) fn size(&self) -> (usize, usize) {
        match self {
            Control::AppendAt { payload, .. } => (payload.entries(), payload.bytes()),
            Control::SetMeta { value, .. } => (0, value.len()),
            _ => (0, 0),
        }
    }

    /// The writer epoch the operation is checked against, for those that carry one.
    pub(crate) fn carries_epoch(&self) -> bool {
        matches!(self, Control::AppendAt { .. } | Control::TruncateAfter(_) | Control::Reset(_))
    }

    /// Runs it on the log (on the writer thread); returns the log's next LSN after it.
    pub(crate) fn run(&self, wal: &mut Wal, epoch: Epoch) -> Result<u64> {
        match self {
            Control::AppendAt { lsn, payload: Payload::One(p) } => {
                wal.append_at(epoch, crate::Lsn(*lsn), p)?;
            }
            Control::AppendAt { lsn, payload: Payload::Group(g) } => {
                let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                wal.append_batch_at(epoch, crate::Lsn(*lsn), &refs)?;
            }
            Control::TruncateAfter(after) => wal.truncate_after(epoch, crate::Lsn(*after))?,
            Control::Reset(next) => wal.reset(epoch, crate::Lsn(*next))?,
            Control::SetMeta { key, value } => wal.set_meta(*key, value)?,
            Control::AdvanceEpoch(new) => wal.advance_epoch(Epoch(*new))?,
        }
        Ok(wal.next_lsn().0)
    }
}

/// The log's logical position as the submit side sees it: every admitted operation moved it
/// already, whether or not the writer thread has staged it yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    /// The LSN the next plain append takes.
    pub next_lsn: u64,
    /// The first live entry's LSN (`None`: the log holds no live entry).
    pub first_lsn: Option<u64>,
    /// The writer epoch appends must carry.
    pub epoch: u64,
    /// Metadata keys set so far (at most [`MAX_META_KEYS`]).
    pub meta_keys: Vec<u32>,
}

impl Position {
    pub(crate) fn of(wal: &Wal) -> Position {
        Position {
            next_lsn: wal.next_lsn().0,
            first_lsn: wal.first_lsn().map(|l| l.0),
            epoch: wal.epoch().0,
            meta_keys: wal.meta_keys(),
        }
    }

    /// The writer-epoch check every append makes ([`Wal`]'s, word for word).
    pub(crate) fn check_epoch(&self, given: Epoch) -> Result<()> {
        // Mutant (tools/mutants.sh, I7): an append from a stale writer is accepted.
        if given.0 < self.epoch && !crate::mutants::on("stale-epoch-accepted") {
            return Err(Error::StaleEpoch { current: self.epoch, given: given.0 });
        }
        if given.0 > self.epoch {
            return Err(Error::EpochNotAdvanced { current: self.epoch, given: given.0 });
        }
        Ok(())
    }

    /// A plain append of `entries` admitted: returns its first LSN.
    pub(crate) fn append(&mut self, entries: usize) -> u64 {
        let lsn = self.next_lsn;
        self.first_lsn.get_or_insert(lsn);
        self.next_lsn += entries as u64;
        lsn
    }

    /// Checks `op` as the log will (the epoch already checked where it carries one) and moves
    /// the position as it will. Returns the LSN its ticket carries: an append's first LSN, or
    /// else the next LSN after the operation.
    pub(crate) fn admit(&mut self, op: &Control, max_payload: usize) -> Result<u64> {
        match op {
            Control::AppendAt { lsn, payload } => {
                if payload.entries() == 0 {
                    return Err(Error::InvalidArgument("empty batch".into()));
                }
                let largest = payload.largest();
                if largest > max_payload {
                    return Err(Error::TooLarge { len: largest as u64, max: max_payload as u64 });
                }
                if *lsn > self.next_lsn && self.first_lsn.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "append at LSN {lsn} would leave a gap after {}",
                        self.next_lsn - 1
                    )));
                }
                if *lsn != self.next_lsn {
                    self.cut(*lsn);
                }
                Ok(self.append(payload.entries()))
            }
            Control::TruncateAfter(after) => {
                if *after >= self.next_lsn {
                    return Err(Error::InvalidArgument(format!(
                        "truncate after {after} is at or past the end of the log (next LSN {})",
                        self.next_lsn
                    )));
                }
                self.cut(after + 1);
                Ok(self.next_lsn)
            }
            Control::Reset(next) => {
                self.first_lsn = None;
                self.next_lsn = *next;
                Ok(self.next_lsn)
            }
            Control::SetMeta { key, value } => {
                if value.len() > MAX_META_VALUE_LEN {
                    return Err(Error::TooLarge { len: value.len() as u64, max: MAX_META_VALUE_LEN as u64 });
                }
                if !self.meta_keys.contains(key) {
                    if self.meta_keys.len() >= MAX_META_KEYS {
                        return Err(Error::InvalidArgument(format!("at most {MAX_META_KEYS} metadata keys")));
                    }
                    self.meta_keys.push(*key);
                }
                Ok(self.next_lsn)
            }
            Control::AdvanceEpoch(new) => {
                if *new <= self.epoch {
                    return Err(Error::StaleEpoch { current: self.epoch, given: *new });
                }
                self.epoch = *new;
                Ok(self.next_lsn)
            }
        }
    }

    /// The next entry takes `keep_lt`: a truncation when a live entry stays below it, else a
    /// reset (the log's `stage_cut`).
    fn cut(&mut self, keep_lt: u64) {
        let live_below = self.first_lsn.is_some_and(|f| f < keep_lt);
        if !(live_below && keep_lt <= self.next_lsn) {
            self.first_lsn = None;
        }
        self.next_lsn = keep_lt;
    }
}
