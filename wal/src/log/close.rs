//! The two changes `wal.meta` records: a clean close (the last segment sealed, `wal.close`
//! holding the state at the close) and a prefix purge (the new floor made durable before any
//! file goes). Also abandoning a handle and dropping one.

use super::Wal;
use crate::error::{Error, Result};
use crate::format::*;
use crate::recovery::SegmentInfo;
use crate::storage::Op;
use crate::Lsn;

/// What a purge removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// The sequences of the segments purged (removed, or set aside for recycling), ascending.
    pub segments_removed: Vec<u64>,
    /// The new purge floor segment.
    pub floor_segment: u64,
}

impl Wal {
    /// Clean close: everything synced and the last segment sealed, so every batch is attested.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if self.closed || self.opts.read_only {
            self.closed = true;
            return Ok(());
        }
        if self.trust.unchecked() && self.close_writes_nothing() {
            // Nothing to seal or record: the log stays as the open found it, unchecked.
            self.closed = true;
            self.finish_helpers();
            return Ok(());
        }
        self.check_writable(None)?;
        let r = self.seal_active().and_then(|()| self.record_close());
        self.closed = true;
        self.finish_helpers();
        r
    }

    /// Whether a close would write nothing: no active segment to seal and the last sealed one
    /// already recorded as closed (what `seal_active` and `record_close` skip).
    fn close_writes_nothing(&self) -> bool {
        self.files.active().is_none()
            && !self.staged.open
            && self
                .files
                .last()
                .is_none_or(|s| s.footer.is_none() || self.meta.closed_segment_seq.get() == s.seq)
    }

    /// Drops the handle without syncing or sealing: what a crash of the process leaves (written
    /// batches stay in the page cache). For tests and demonstrations.
    pub fn abandon(mut self) {
        self.closed = true;
        self.finish_helpers();
    }

    /// Removes whole sealed segments, from the oldest, whose entries all have LSN < `below`.
    /// The last segment holding records is never removed. Crash-safe: the new floor is made
    /// durable in `wal.meta` before any file is unlinked; files left below the floor by a crash
    /// are removed at the next open.
    pub fn purge_before(&mut self, below: Lsn) -> Result<PurgeReport> {
        self.check_writable(None)?;
        self.settle()?;
        let n = self.files.segments().len().saturating_sub(1);
        let k = self
            .files
            .segments()
            .iter()
            .take(n)
            .take_while(|s| s.sealed() && (s.counts.entries == 0 || s.counts.max_lsn < below.0))
            .count();
        let Some(floor) = self.files.segments().get(k) else {
            return Ok(PurgeReport::default());
        };
        if k == 0 {
            return Ok(PurgeReport { segments_removed: Vec::new(), floor_segment: floor.seq });
        }
        let meta = MetaFile::new(
            self.meta.log_id,
            floor.seq,
            floor.header.first_record_seq.get(),
            floor.header.prev_crc.get(),
        )
        .with_close(self.meta.closed_segment_seq.get(), self.meta.closed_footer_crc.get());
        self.write_meta(&meta)?;
        self.meta = meta;
        let removed: Vec<SegmentInfo> = self.files.purge_front(k);
        self.remove_or_set_aside(&removed)?;
        let removed: Vec<u64> = removed.iter().map(|s| s.seq).collect();
        if let Err(e) = self.run(Op::SyncDir) {
            return Err(self.fail_io("syncing the directory after a purge", e));
        }
        Ok(PurgeReport { segments_removed: removed, floor_segment: meta.floor_segment_seq.get() })
    }

    /// Records in `wal.meta` that the last segment was sealed by a clean close, which attests
    /// its footer (otherwise the last write of the log, hence unattested).
    fn record_close(&mut self) -> Result<()> {
        let Some((seq, crc)) = self.files.last().and_then(|s| s.footer.as_ref().map(|f| (s.seq, f.crc)))
        else {
            return Ok(());
        };
        if self.meta.closed_segment_seq.get() == seq {
            return Ok(());
        }
        // The state at the close, so that the next open need not walk the segment for it.
        let st = self.storage.clone();
        if let Err(e) = crate::close_state::write_close_state(&*st, seq, crc, self.position.logical()) {
            let err = self.fail_io("writing wal.close", e);
            if !matches!(err, Error::DiskFull { .. }) {
                return Err(err);
            }
            // A full disk has no block for it: close without it (the next open walks the last
            // segment instead), after removing an older one for good, which would name another
            // close than the one wal.meta is about to record.
            let _ = st.remove(crate::format::CLOSE_TMP_NAME);
            match st.remove(crate::format::CLOSE_FILE_NAME) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(self.fail_io("removing an older wal.close", e));
                }
                _ => {}
            }
            if let Err(e) = self.run(Op::SyncDir) {
                return Err(self.fail_io("syncing the directory without wal.close", e));
            }
        }
        let meta = self.meta.with_close(seq, crc);
        self.write_meta(&meta)?;
        self.meta = meta;
        Ok(())
    }

    fn write_meta(&mut self, meta: &MetaFile) -> Result<()> {
        let st = self.storage.clone();
        crate::lifecycle::replace_meta(&*st, meta).map_err(|e| self.fail_io("replacing wal.meta", e))
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if !self.closed && self.fenced.is_none() && !self.opts.read_only {
            let _ = self.close_inner();
        }
        // Never leave a helper thread writing into the directory behind.
        self.finish_helpers();
    }
}
