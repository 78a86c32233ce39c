//! Writing the staged batch as one frame at a sector boundary (sequence, chain and checksums
//! sealed now), the segment's counts and index after it; and withdrawing a batch whose write
//! ran out of space, which leaves the log usable.

use super::files::Written;
use super::{Position, Staged, Wal};
use crate::batch::{seal_batch, Frame};
use crate::error::{Error, Result};
use crate::format::*;
use crate::storage::{self, FileId, Op};

impl Wal {
    /// Writes the staged batch as one frame (handed to the OS, not synced).
    pub fn flush(&mut self) -> Result<()> {
        self.check_writable(None)?;
        if !self.staged.open {
            return Ok(());
        }
        if self.staged.records == 0 {
            // Only a frame placeholder was staged.
            self.staged.buf.clear();
            self.staged.open = false;
            return Ok(());
        }
        let Some(a) = self.files.active() else {
            return Err(Error::InvalidArgument("staged records without an active segment".into()));
        };
        let (file, write_off, header) = (a.file, a.write_off, a.header);
        let mut buf = std::mem::take(&mut self.staged.buf);
        let frame_at = self.staged.frame_at;
        // A segment's first record links to the segment's chain seed, not to the previous record.
        let prev = if write_off == 0 { header.chain_seed() } else { self.files.last_crc() };
        let frame = Frame {
            at: frame_at,
            lsn: self.staged.frame_lsn,
            epoch: self.staged.frame_epoch,
            records: self.staged.records,
        };
        let (seq_after, crc_after) =
            seal_batch(&mut buf, &frame, self.files.next_seq(), prev, self.marks.durable_seq());
        let len = buf.len() as u64;
        if header.is_recycled() {
            // Whole sectors: the padding to the next batch is written, not left to the file's
            // old bytes, which here are not zero (FORMAT.md section 2.2). A new file's are.
            buf.resize(buf.len().next_multiple_of(SECTOR), 0);
        }
        self.token += 1;
        let returned = match storage::complete_keeping(
            &*self.storage,
            self.token,
            Op::Write { file, offset: write_off, data: buf },
            &mut self.pipe.stash,
        ) {
            Ok((_, b)) => b,
            Err(e) => return Err(self.withdraw(e, file, write_off, len)),
        };
        let s = std::mem::take(&mut self.staged);
        self.staged.buf = returned
            .map(|mut b| {
                b.clear();
                b
            })
            .unwrap_or_default();
        let written = Written {
            next_seq: seq_after,
            last_crc: crc_after,
            frame_lsn: s.frame_lsn,
            frame_off: write_off + frame_at as u64,
            data_end: write_off + len,
            counts: &s.counts,
            records: s.records,
        };
        if !self.files.batch_written(&written) {
            return Err(Error::InvalidArgument("no active segment".into()));
        }
        self.marks.written(seq_after - 1, self.position.logical().clone());
        Ok(())
    }

    /// A batch write failed. Disk full: zero whatever of it reached the file, sync, forget the
    /// batch (its LSNs are free again) and stay usable. Anything else fences the log.
    fn withdraw(&mut self, e: std::io::Error, file: FileId, off: u64, len: u64) -> Error {
        let err = self.fail_io("writing a batch", e);
        if !matches!(err, Error::DiskFull { .. }) {
            return err;
        }
        // The zeroing below syncs: the sync in flight completes first (one at a time).
        if let Err(e) = self.settle() {
            return e;
        }
        let zeroed = self
            .run(Op::Write { file, offset: off, data: vec![0; len as usize] })
            .and_then(|_| self.run(Op::SyncData { file }));
        if let Err(e2) = zeroed {
            self.fence(format!("withdrawing a batch after disk full failed: {e2}"));
        }
        self.position = Position::from(self.marks.written_logical().clone());
        self.staged = Staged::default();
        if off == 0 {
            // The batch carried the segment header: the file is a spare again.
            self.active_back_to_spares();
        }
        err
    }
}
