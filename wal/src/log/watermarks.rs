//! The durability watermarks: how far the log's records are written to the OS and how far a
//! completed sync made them durable (record sequence, logical state, and for the durable one
//! the end a [`Durability::Durable`](crate::Durability) replay stops at). Only the methods here
//! move them, and each checks (in debug builds) what a move must keep: durable never past
//! written, both sequences and the durable end never moving back.
//!
//! Nothing moves them back. A batch withdrawn after disk full never moved them: its write
//! failed before [`Watermarks::written`], and the log's position goes back to
//! [`Watermarks::written_logical`] instead. A sync that would move the durable watermark back is
//! refused by [`Watermarks::durable`] (the log fences: a bug, never a quiet regression).

use crate::scan::Logical;

/// The written and durable watermarks of a log handle.
#[derive(Debug)]
pub(crate) struct Watermarks {
    /// The last record sequence written to the OS, and the logical state after it.
    written_seq: u64,
    written_logical: Logical,
    /// The last record sequence a completed sync covered, and the logical state after it.
    durable_seq: u64,
    durable_logical: Logical,
    /// (segment, offset) just past the last durable batch.
    durable_end: Option<(u64, u64)>,
}

impl Watermarks {
    /// At an open: every record the scan found (up to `seq`, ending at `end`, leaving
    /// `logical`) is written and taken as durable.
    pub(crate) fn opened(seq: u64, logical: Logical, end: Option<(u64, u64)>) -> Watermarks {
        Watermarks {
            written_seq: seq,
            written_logical: logical.clone(),
            durable_seq: seq,
            durable_logical: logical,
            durable_end: end,
        }
    }

    /// The record sequence written to the OS so far.
    pub(crate) fn written_seq(&self) -> u64 {
        self.written_seq
    }

    /// The record sequence made durable by the last completed sync.
    pub(crate) fn durable_seq(&self) -> u64 {
        self.durable_seq
    }

    /// The logical state after the written records (what a withdrawn batch goes back to).
    pub(crate) fn written_logical(&self) -> &Logical {
        &self.written_logical
    }

    /// (segment, offset) just past the last durable batch.
    pub(crate) fn durable_end(&self) -> Option<(u64, u64)> {
        self.durable_end
    }

    /// Whether written records exist that no completed sync covered.
    pub(crate) fn unsynced(&self) -> bool {
        self.written_seq > self.durable_seq
    }

    /// The last LSN written, if any entry is live after the written records.
    pub(crate) fn written_lsn(&self) -> Option<u64> {
        last_lsn(&self.written_logical)
    }

    /// The last LSN durable, if any entry is live after the durable records.
    pub(crate) fn durable_lsn(&self) -> Option<u64> {
        last_lsn(&self.durable_logical)
    }

    /// A batch was written in full: its last record is `seq`, the state after it `logical`.
    pub(crate) fn written(&mut self, seq: u64, logical: Logical) {
        debug_assert!(seq > self.written_seq, "written watermark from {} to {seq}", self.written_seq);
        self.written_seq = seq;
        self.written_logical = logical;
    }

    /// A sync completed, covering the records up to `seq` (the written watermark when it was
    /// submitted: `logical` and `end` with it). False, moving nothing, when that would move the
    /// durable watermark back: a bug, on which the caller stops the log.
    #[must_use]
    pub(crate) fn durable(&mut self, seq: u64, logical: Logical, end: Option<(u64, u64)>) -> bool {
        if seq < self.durable_seq {
            return false;
        }
        debug_assert!(seq <= self.written_seq, "durable {seq} past written {}", self.written_seq);
        debug_assert!(
            seq < self.written_seq || logical == self.written_logical,
            "durable at the written sequence {seq} with another logical state"
        );
        debug_assert!(end >= self.durable_end, "durable end from {:?} to {end:?}", self.durable_end);
        self.durable_seq = seq;
        self.durable_logical = logical;
        self.durable_end = end;
        true
    }

    /// A segment was sealed: after its data was synced (durable up to written), its footer,
    /// record `seq`, was written and synced, and the segment ends at `end`. The footer moves no
    /// logical state.
    pub(crate) fn sealed(&mut self, seq: u64, end: Option<(u64, u64)>) {
        debug_assert_eq!(self.durable_seq, self.written_seq, "a footer written over unsynced records");
        debug_assert!(seq > self.written_seq, "footer {seq} at or before written {}", self.written_seq);
        debug_assert!(end >= self.durable_end, "durable end from {:?} to {end:?}", self.durable_end);
        self.written_seq = seq;
        self.durable_seq = seq;
        self.durable_end = end;
    }
}

fn last_lsn(l: &Logical) -> Option<u64> {
    l.first_lsn.map(|_| l.next_lsn - 1)
}
