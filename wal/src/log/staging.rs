//! The records a handle stages into its next batch, without I/O: appends (plain, as a user
//! batch, at an LSN), truncation, reset, epoch, metadata, checkpoints; the checks every write
//! makes first (fenced, read-only, the open's check; then the writer epoch, the size and the
//! rest of an operation's admission, which are its position's, `position.rs`); and making
//! room, which activates or rotates segments. An operation is admitted by the position
//! (`Position::plan`), room is made for its records, then the position moves
//! (`Position::apply`, which assigns the LSNs) and the records are staged at those LSNs.

use super::position::{Cut, Op, Position, Step};
use super::{Checkpoint, Wal};
use crate::batch::{self, FRAME_LEN};
use crate::error::{Error, Result};
use crate::format::*;
use crate::scan::Counts;
use crate::{Epoch, Lsn};
use zerocopy::little_endian::{U32, U64};
use zerocopy::IntoBytes;

/// Records staged for the next write: `[segment header][frame][records...]`.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    pub(crate) buf: Vec<u8>,
    pub(crate) frame_at: usize,
    pub(crate) records: u32,
    /// LSN and epoch at the frame.
    pub(crate) frame_lsn: u64,
    pub(crate) frame_epoch: u64,
    pub(crate) counts: Counts,
    pub(crate) open: bool,
}

impl Wal {
    pub(super) fn check_writable(&mut self, epoch: Option<Epoch>) -> Result<()> {
        if self.opts.read_only || self.closed {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = &self.fenced {
            return Err(Error::Fenced { cause: cause.clone() });
        }
        // No write lands after a record that fails its checksum (open_check.rs).
        self.check_records()?;
        if let Some(epoch) = epoch {
            self.position.check_epoch(epoch)?;
        }
        Ok(())
    }

    /// Appends one entry under writer epoch `epoch`; returns its LSN. Not durable until
    /// [`Wal::sync`].
    pub fn append(&mut self, epoch: Epoch, payload: &[u8]) -> Result<Lsn> {
        self.append_batch(epoch, &[payload])
    }

    /// Appends a user batch: the entries get consecutive LSNs, are never split across frames or
    /// segments, and survive or vanish together. Returns the first LSN.
    pub fn append_batch(&mut self, epoch: Epoch, payloads: &[&[u8]]) -> Result<Lsn> {
        self.append_entries(epoch, None, payloads)
    }

    /// Appends at a given LSN (as Raft does): at the next LSN it is a plain append; below it, the
    /// entries from `lsn` on are cut first (a durable truncation record in the same batch); above
    /// it, only when the log holds no live entry (the log then starts at `lsn`).
    pub fn append_at(&mut self, epoch: Epoch, lsn: Lsn, payload: &[u8]) -> Result<Lsn> {
        self.append_batch_at(epoch, lsn, &[payload])
    }

    /// [`Wal::append_batch`] at a given first LSN, with [`Wal::append_at`]'s rule for an LSN
    /// that is not the next one.
    pub fn append_batch_at(&mut self, epoch: Epoch, lsn: Lsn, payloads: &[&[u8]]) -> Result<Lsn> {
        self.append_entries(epoch, Some(lsn.0), payloads)
    }

    fn append_entries(&mut self, epoch: Epoch, at: Option<u64>, payloads: &[&[u8]]) -> Result<Lsn> {
        self.check_writable(Some(epoch))?;
        let lens = payloads.iter().map(|p| p.len());
        Position::check_entries(payloads.len(), lens, self.max_payload as usize)?;
        let step = self.position.plan(Op::Append { at, entries: payloads.len() })?;
        self.stage_step(step, payloads).map(Lsn)
    }

    /// Cuts every entry with LSN > `after` (logical suffix truncation). The next entry is
    /// `after + 1`. Durable at the next sync; replay drops the cut entries.
    pub fn truncate_after(&mut self, epoch: Epoch, after: Lsn) -> Result<()> {
        self.check_writable(Some(epoch))?;
        let step = self.position.plan(Op::TruncateAfter(after.0))?;
        self.stage_step(step, &[]).map(drop)
    }

    /// Cuts every entry; the next entry takes `next` (e.g. after installing a Raft snapshot).
    pub fn reset(&mut self, epoch: Epoch, next: Lsn) -> Result<()> {
        self.check_writable(Some(epoch))?;
        let step = self.position.plan(Op::Reset(next.0))?;
        self.stage_step(step, &[]).map(drop)
    }

    /// Raises the writer epoch; appends carrying an older epoch are rejected from now on.
    pub fn advance_epoch(&mut self, new: Epoch) -> Result<()> {
        self.check_writable(None)?;
        let step = self.position.plan(Op::AdvanceEpoch(new.0))?;
        self.stage_step(step, &[]).map(drop)
    }

    /// Records a metadata value (e.g. a Raft vote); carried into every new segment's state.
    pub fn set_meta(&mut self, key: u32, value: &[u8]) -> Result<()> {
        self.check_writable(None)?;
        let step = self.position.plan(Op::SetMeta { key, value })?;
        self.stage_step(step, &[]).map(drop)
    }

    /// Stages the records of an operation its position admitted (`payloads`: an append's
    /// entries): makes room for them, then moves the position (the one place that assigns LSNs,
    /// `position.rs`) and stages them at the LSNs it gave. Returns the LSN a ticket for it
    /// carries (an append's first LSN, else the next LSN after it). Disk full, or records no
    /// segment holds, moves and stages nothing.
    fn stage_step(&mut self, step: Step<'_>, payloads: &[&[u8]]) -> Result<u64> {
        let meta = match step {
            Step::Meta { key, value } => meta_payload(key, value),
            _ => Vec::new(),
        };
        let need = match step {
            // Room for the cut's record as well (two headers' worth), in the frame of the entries.
            Step::Append { cut, .. } => {
                let entries = payloads.iter().map(|p| record_len(p.len())).sum::<usize>();
                entries + if cut.is_some() { 2 * RECORD_HEADER_LEN } else { 0 }
            }
            Step::Meta { .. } => record_len(meta.len()),
            Step::Cut(_) | Step::Epoch(_) => RECORD_HEADER_LEN,
        };
        self.reserve(need)?;
        let lsn = self.position.apply(&step);
        match step {
            Step::Append { cut, first, entries } => {
                debug_assert_eq!(entries, payloads.len() as u64);
                if let Some(cut) = cut {
                    self.stage_cut(cut);
                }
                self.stage_entries(first, payloads);
            }
            Step::Cut(cut) => self.stage_cut(cut),
            Step::Meta { .. } => self.stage(Kind::Meta, 0, self.position.next_lsn(), &meta),
            // The record carries the new epoch (the position has it now).
            Step::Epoch(_) => self.stage(Kind::Epoch, 0, self.position.next_lsn(), &[]),
        }
        Ok(lsn)
    }

    /// Stages `payloads` as entries from `first` on, the LSNs the position just gave them: they
    /// are dense, and the last is the one before the position's next LSN.
    fn stage_entries(&mut self, first: u64, payloads: &[&[u8]]) {
        let n = payloads.len();
        debug_assert_eq!(first + n as u64, self.position.next_lsn(), "entries staged off their LSNs");
        debug_assert!(self.position.first_lsn().is_some_and(|f| f <= first), "entries staged below the log");
        for (i, p) in payloads.iter().enumerate() {
            let flags = if i + 1 < n { FLAG_GROUP_CONT } else { 0 };
            let lsn = first + i as u64;
            let c = &self.staged.counts;
            // Dense within a batch: an entry follows the one staged before it, unless a cut came
            // between.
            debug_assert!(
                c.entries == 0 || c.cuts > 0 || lsn == c.max_lsn + 1,
                "entry {lsn} staged after {}",
                c.max_lsn
            );
            self.stage(Kind::Entry, flags, lsn, p);
            let c = &mut self.staged.counts;
            c.min_lsn = if c.entries == 0 { lsn } else { c.min_lsn.min(lsn) };
            c.max_lsn = if c.entries == 0 { lsn } else { c.max_lsn.max(lsn) };
            c.entries += 1;
        }
    }

    /// Stages the record of a cut its position made: a Truncate, or a Reset when nothing below
    /// stays live.
    fn stage_cut(&mut self, cut: Cut) {
        match cut {
            Cut::Truncate { keep_lt } => {
                self.stage(Kind::Truncate, 0, keep_lt - 1, &[]);
                self.staged.counts.min_keep_lt = self.staged.counts.min_keep_lt.min(keep_lt);
            }
            Cut::Reset { next } => {
                self.stage(Kind::Reset, 0, next, &[]);
                self.staged.counts.min_keep_lt = 0;
            }
        }
        self.staged.counts.cuts += 1;
    }

    /// Records the online state digest after applying every live entry with LSN ≤ `lsn` (an
    /// LSN already given to an entry).
    pub fn checkpoint(&mut self, epoch: Epoch, lsn: Lsn, cp: &Checkpoint) -> Result<()> {
        self.check_writable(Some(epoch))?;
        self.position.check_checkpoint(lsn.0)?;
        let p = CheckpointPayload {
            digest: cp.digest,
            entity_count: U64::new(cp.entity_count),
            digest_version: U32::new(cp.digest_version),
            state_machine_version: U32::new(cp.state_machine_version),
        };
        self.reserve(record_len(CHECKPOINT_PAYLOAD_LEN))?;
        self.stage(Kind::Checkpoint, 0, lsn.0, p.as_bytes());
        Ok(())
    }

    /// Makes room for `need` more bytes of records in the staged batch, activating or rotating
    /// segments as needed. Everything in one call lands in one frame of one segment.
    fn reserve(&mut self, need: usize) -> Result<()> {
        for _ in 0..3 {
            if self.files.active().is_none() {
                self.activate()?;
            }
            if !self.staged.open {
                self.open_frame();
            }
            let a = self.files.active().ok_or_else(|| Error::InvalidArgument("no active segment".into()))?;
            // The segment's own length and kind (its header), which a reopened log may have set
            // differently.
            let limit = a.header.data_limit() as u64;
            let used = a.write_off + self.staged.buf.len() as u64;
            if used + need as u64 <= limit {
                return Ok(());
            }
            let fresh = a.write_off == 0 && self.staged.records <= 1;
            if fresh {
                return Err(Error::TooLarge { len: need as u64, max: self.max_payload.into() });
            }
            self.seal_active()?;
        }
        Err(Error::TooLarge { len: need as u64, max: self.max_payload.into() })
    }

    pub(super) fn open_frame(&mut self) {
        let s = &mut self.staged;
        s.frame_at = s.buf.len();
        s.buf.resize(s.frame_at + FRAME_LEN, 0);
        s.records = 0;
        s.frame_lsn = self.position.next_lsn();
        s.frame_epoch = self.position.epoch();
        s.open = true;
        s.counts = Counts { min_keep_lt: u64::MAX, ..Counts::default() };
    }

    /// Encodes a record into the staged batch; sequence, chain and checksums are set at flush.
    pub(super) fn stage(&mut self, kind: Kind, flags: u8, lsn: u64, payload: &[u8]) {
        let h = batch::header(kind, flags, payload.len(), lsn, self.position.epoch());
        let buf = &mut self.staged.buf;
        buf.extend_from_slice(h.as_bytes());
        buf.extend_from_slice(payload);
        buf.resize(buf.len() + align_up(payload.len()) - payload.len(), 0);
        self.staged.records += 1;
    }
}

/// A Meta record's payload: the key, the value's length, the value (FORMAT.md).
fn meta_payload(key: u32, value: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(8 + value.len());
    payload.extend_from_slice(&key.to_le_bytes());
    payload.extend_from_slice(&(value.len() as u32).to_le_bytes());
    payload.extend_from_slice(value);
    payload
}
