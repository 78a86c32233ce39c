//! The writer thread's operations other than a plain append (append at an LSN, truncate, reset,
//! metadata, epoch, a sync), admitted on the submit side's copy of the log's position and run on the log.
//!
//! An operation is checked and given its LSN at submission, under the submit lock, by the same
//! code that checks and places it in [`Wal`] when the writer thread stages it
//! ([`Position`], `log/position.rs`), each on its own copy of the position: a refusal is an
//! `Error` at once and consumes nothing, and the queue order is the order the log applies them
//! in. The writer thread compares the log's next LSN after each operation with the one promised
//! here, and fences the log if they ever differ (a bug, never a quiet misplacement).

use super::Payload;
use crate::error::Result;
use crate::log::{Op, Position, Wal};
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
    /// [`Wal::sync`]: moves nothing; queued as a durable operation, it makes the writer sync
    /// everything before it now.
    Sync,
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

    /// The operation on the log's position (none for a sync, which leaves it where it is).
    fn op(&self) -> Option<Op<'_>> {
        Some(match self {
            Control::AppendAt { lsn, payload } => Op::Append { at: Some(*lsn), entries: payload.entries() },
            Control::TruncateAfter(after) => Op::TruncateAfter(*after),
            Control::Reset(next) => Op::Reset(*next),
            Control::SetMeta { key, value } => Op::SetMeta { key: *key, value },
            Control::AdvanceEpoch(new) => Op::AdvanceEpoch(*new),
            Control::Sync => return None,
        })
    }

    /// Checks it as the log will (the epoch already checked where it carries one) and moves
    /// `pos` as the log will. Returns the LSN its ticket carries: an append's first LSN, or else
    /// the next LSN after the operation.
    pub(crate) fn admit(&self, pos: &mut Position, max_payload: usize) -> Result<u64> {
        if let Control::AppendAt { payload, .. } = self {
            Position::check_entries(payload.entries(), [payload.largest()], max_payload)?;
        }
        match self.op() {
            Some(op) => pos.admit(op),
            None => Ok(pos.next_lsn()),
        }
    }

    /// Runs it on the log (on the writer thread); returns the log's next LSN after it, which
    /// the submit side's position promised (an append at an LSN is staged at that LSN, so its
    /// next LSN after says where its last entry went).
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
            // The writer syncs for it: it is staged as a durable operation.
            Control::Sync => {}
        }
        Ok(wal.next_lsn().0)
    }
}
