//! The records a handle stages into its next batch, without I/O: appends (plain, as a user
//! batch, at an LSN), truncation, reset, epoch, metadata, checkpoints; the checks every write
//! makes first (fenced, read-only, the open's check, the writer epoch, the size); and making
//! room, which activates or rotates segments.

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
        if let Some(Epoch(e)) = epoch {
            let current = self.logical.epoch;
            // Mutant (tools/mutants.sh, I7): an append from a stale writer is accepted.
            if e < current && !crate::mutants::on("stale-epoch-accepted") {
                return Err(Error::StaleEpoch { current, given: e });
            }
            if e > current {
                return Err(Error::EpochNotAdvanced { current, given: e });
            }
        }
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len > self.max_payload as usize {
            return Err(Error::TooLarge { len: len as u64, max: self.max_payload.into() });
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
        self.check_writable(Some(epoch))?;
        if payloads.is_empty() {
            return Err(Error::InvalidArgument("empty batch".into()));
        }
        let mut need = 0;
        for p in payloads {
            self.check_len(p.len())?;
            need += record_len(p.len());
        }
        self.reserve(need)?;
        let first = self.logical.next_lsn;
        let n = payloads.len();
        for (i, p) in payloads.iter().enumerate() {
            let flags = if i + 1 < n { FLAG_GROUP_CONT } else { 0 };
            let lsn = self.logical.next_lsn;
            self.stage(Kind::Entry, flags, lsn, p);
            self.logical.first_lsn.get_or_insert(lsn);
            self.logical.next_lsn += 1;
            let c = &mut self.staged.counts;
            c.min_lsn = if c.entries == 0 { lsn } else { c.min_lsn.min(lsn) };
            c.max_lsn = if c.entries == 0 { lsn } else { c.max_lsn.max(lsn) };
            c.entries += 1;
        }
        Ok(Lsn(first))
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
        self.check_writable(Some(epoch))?;
        if payloads.is_empty() {
            return Err(Error::InvalidArgument("empty batch".into()));
        }
        let mut need = 2 * RECORD_HEADER_LEN;
        for p in payloads {
            self.check_len(p.len())?;
            need += record_len(p.len());
        }
        let next = self.logical.next_lsn;
        match lsn.0.cmp(&next) {
            std::cmp::Ordering::Equal => {}
            std::cmp::Ordering::Less => {
                self.reserve(need)?;
                self.stage_cut(lsn.0);
            }
            std::cmp::Ordering::Greater => {
                if self.logical.first_lsn.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "append at LSN {} would leave a gap after {}",
                        lsn.0,
                        next - 1
                    )));
                }
                self.reserve(need)?;
                self.stage_cut(lsn.0);
            }
        }
        self.append_batch(epoch, payloads)
    }

    /// Cuts every entry with LSN > `after` (logical suffix truncation). The next entry is
    /// `after + 1`. Durable at the next sync; replay drops the cut entries.
    pub fn truncate_after(&mut self, epoch: Epoch, after: Lsn) -> Result<()> {
        self.check_writable(Some(epoch))?;
        if after.0 >= self.logical.next_lsn {
            return Err(Error::InvalidArgument(format!(
                "truncate after {} is at or past the end of the log (next LSN {})",
                after.0, self.logical.next_lsn
            )));
        }
        self.reserve(RECORD_HEADER_LEN)?;
        self.stage_cut(after.0 + 1);
        Ok(())
    }

    /// Cuts every entry; the next entry takes `next` (e.g. after installing a Raft snapshot).
    pub fn reset(&mut self, epoch: Epoch, next: Lsn) -> Result<()> {
        self.check_writable(Some(epoch))?;
        self.reserve(RECORD_HEADER_LEN)?;
        self.stage_reset(next.0);
        Ok(())
    }

    /// Makes the next entry `keep_lt`, cutting what is at or above it (a Truncate, or a Reset when
    /// nothing below stays live).
    fn stage_cut(&mut self, keep_lt: u64) {
        let live_below = self.logical.first_lsn.is_some_and(|f| f < keep_lt);
        if live_below && keep_lt <= self.logical.next_lsn {
            self.stage(Kind::Truncate, 0, keep_lt - 1, &[]);
            self.logical.next_lsn = keep_lt;
            self.staged.counts.cuts += 1;
            self.staged.counts.min_keep_lt = self.staged.counts.min_keep_lt.min(keep_lt);
        } else {
            self.stage_reset(keep_lt);
        }
    }

    fn stage_reset(&mut self, next: u64) {
        self.stage(Kind::Reset, 0, next, &[]);
        self.logical.first_lsn = None;
        self.logical.next_lsn = next;
        self.staged.counts.cuts += 1;
        self.staged.counts.min_keep_lt = 0;
    }

    /// Raises the writer epoch; appends carrying an older epoch are rejected from now on.
    pub fn advance_epoch(&mut self, new: Epoch) -> Result<()> {
        self.check_writable(None)?;
        if new.0 <= self.logical.epoch {
            return Err(Error::StaleEpoch { current: self.logical.epoch, given: new.0 });
        }
        self.reserve(RECORD_HEADER_LEN)?;
        let lsn = self.logical.next_lsn;
        self.logical.epoch = new.0;
        self.stage(Kind::Epoch, 0, lsn, &[]);
        Ok(())
    }

    /// Records a metadata value (e.g. a Raft vote); carried into every new segment's state.
    pub fn set_meta(&mut self, key: u32, value: &[u8]) -> Result<()> {
        self.check_writable(None)?;
        if value.len() > MAX_META_VALUE_LEN {
            return Err(Error::TooLarge { len: value.len() as u64, max: MAX_META_VALUE_LEN as u64 });
        }
        if !self.logical.meta.contains_key(&key) && self.logical.meta.len() >= MAX_META_KEYS {
            return Err(Error::InvalidArgument(format!("at most {MAX_META_KEYS} metadata keys")));
        }
        let mut payload = Vec::with_capacity(8 + value.len());
        payload.extend_from_slice(&key.to_le_bytes());
        payload.extend_from_slice(&(value.len() as u32).to_le_bytes());
        payload.extend_from_slice(value);
        self.reserve(record_len(payload.len()))?;
        let lsn = self.logical.next_lsn;
        self.stage(Kind::Meta, 0, lsn, &payload);
        std::sync::Arc::make_mut(&mut self.logical.meta).insert(key, value.to_vec());
        Ok(())
    }

    /// Records the online state digest after applying every live entry with LSN ≤ `lsn` (an
    /// LSN already given to an entry).
    pub fn checkpoint(&mut self, epoch: Epoch, lsn: Lsn, cp: &Checkpoint) -> Result<()> {
        self.check_writable(Some(epoch))?;
        if lsn.0 >= self.logical.next_lsn {
            return Err(Error::InvalidArgument(format!(
                "checkpoint at {} covers an entry the log has not taken (next LSN {})",
                lsn.0, self.logical.next_lsn
            )));
        }
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
            if self.active.is_none() {
                self.activate()?;
            }
            if !self.staged.open {
                self.open_frame();
            }
            let a = self.active.as_ref().ok_or_else(|| Error::InvalidArgument("no active segment".into()))?;
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
        s.frame_lsn = self.logical.next_lsn;
        s.frame_epoch = self.logical.epoch;
        s.open = true;
        s.counts = Counts { min_keep_lt: u64::MAX, ..Counts::default() };
    }

    /// Encodes a record into the staged batch; sequence, chain and checksums are set at flush.
    pub(super) fn stage(&mut self, kind: Kind, flags: u8, lsn: u64, payload: &[u8]) {
        let h = batch::header(kind, flags, payload.len(), lsn, self.logical.epoch);
        let buf = &mut self.staged.buf;
        buf.extend_from_slice(h.as_bytes());
        buf.extend_from_slice(payload);
        buf.resize(buf.len() + align_up(payload.len()) - payload.len(), 0);
        self.staged.records += 1;
    }
}
