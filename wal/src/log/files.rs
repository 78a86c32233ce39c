//! The segment files the writer holds, and the record chain through them: the segments holding
//! records (from the purge floor), the active one, the spares after them, the purged files set
//! aside for recycling and the pins that keep a replay's from being overwritten, the next
//! segment being prepared (or waiting for the open's check to be), how new files get their
//! zeros, and the next record sequence and chain value. Only the methods here change them, and
//! they check (in debug builds) what a change must keep: one active segment at a time, no
//! activation or preparation of a segment at or below the last holding records, the record
//! sequence only growing, a footer only on the active segment, next in the chain.
//!
//! The I/O behind each change (opening, preparing, writing, syncing, closing files) is the
//! log's, in `segments.rs`, `flush.rs`, `close.rs` and `recycle.rs`; a change that lets go of a
//! file hands its id back for the log to close.

use super::options::SegmentFill;
use super::recycle::Pins;
use crate::batch::merge_counts;
use crate::format::*;
use crate::recovery::SegmentInfo;
use crate::scan::{Counts, FooterInfo};
use crate::storage::FileId;
use std::sync::Arc;
use std::thread::JoinHandle;
use zerocopy::little_endian::U64;

/// A pre-created segment file after the last one holding records, which never took a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spare {
    pub(crate) seq: u64,
    /// Made of a recycled file: the header it gets must say so (FORMAT.md section 2.2).
    pub(crate) recycled: bool,
}

/// The segment being appended to.
#[derive(Debug)]
pub(crate) struct Active {
    pub(crate) seq: u64,
    pub(crate) header: SegmentHeader,
    pub(crate) file: FileId,
    /// Bytes written into the file (the next batch goes here).
    pub(crate) write_off: u64,
    pub(crate) index: Vec<IndexPoint>,
    pub(crate) index_stride: u32,
    pub(crate) batches: u32,
}

/// What a written batch was, for the bookkeeping after it ([`Files::batch_written`]).
pub(crate) struct Written<'a> {
    /// The record sequence and chain value the next record continues from.
    pub(crate) next_seq: u64,
    pub(crate) last_crc: u32,
    /// The first entry's LSN, where the frame starts and where its bytes end in the file.
    pub(crate) frame_lsn: u64,
    pub(crate) frame_off: u64,
    pub(crate) data_end: u64,
    /// Its records' counts, and how many records it holds (its frame not counted).
    pub(crate) counts: &'a Counts,
    pub(crate) records: u32,
}

/// How many helper threads dropping cached pages may run at once.
pub(crate) const MAX_UNCACHING: usize = 2;

/// A background preparation of a segment: its result says whether the file was made of a
/// recycled one.
type Preparing = (u64, JoinHandle<std::io::Result<bool>>);

/// The segment files of a log handle.
#[derive(Debug)]
pub(crate) struct Files {
    segments: Vec<SegmentInfo>,
    active: Option<Active>,
    spares: Vec<Spare>,
    /// Purged segment files set aside for reuse, by the sequence they had, ascending.
    pool: Vec<u64>,
    /// The segments that replays of this process have mapped (never overwritten meanwhile).
    pins: Arc<Pins>,
    /// The record sequence and chain value the next record continues from.
    next_seq: u64,
    last_crc: u32,
    /// The next segment being prepared on a helper thread.
    preparing: Option<Preparing>,
    /// The helper threads telling the OS to drop sealed segments' pages
    /// (`Wal::drop_beyond_cache_budget`) that were started and not yet joined.
    uncaching: Vec<JoinHandle<()>>,
    /// The next segment to prepare once the open's trust was checked (preparing creates a
    /// file: not before).
    deferred_prepare: Option<u64>,
    /// Whether new segment files are reserved rather than written (see [`SegmentFill`]).
    reserve_segments: bool,
    /// Syncs that an acknowledgement waited for (`Wal::sync`, or a pipelined sync covering a
    /// durable entry) since the active segment was activated; `None` before the first
    /// activation of this process (nothing to judge the next segment's fill on).
    syncs_in_segment: Option<u64>,
}

impl Files {
    /// At an open: the segments the scan found, the spares after them, the set-aside files
    /// adopted, and the chain the next record continues.
    pub(crate) fn opened(
        segments: Vec<SegmentInfo>,
        spares: Vec<Spare>,
        pool: Vec<u64>,
        next_seq: u64,
        last_crc: u32,
    ) -> Files {
        Files {
            segments,
            active: None,
            spares,
            pool,
            pins: Default::default(),
            next_seq,
            last_crc,
            preparing: None,
            uncaching: Vec::new(),
            deferred_prepare: None,
            reserve_segments: false,
            syncs_in_segment: None,
        }
    }

    /// Segment files holding records (from the purge floor), oldest first.
    pub(crate) fn segments(&self) -> &[SegmentInfo] {
        &self.segments
    }

    /// The last segment holding records.
    pub(crate) fn last(&self) -> Option<&SegmentInfo> {
        self.segments.last()
    }

    /// The segment being appended to.
    pub(crate) fn active(&self) -> Option<&Active> {
        self.active.as_ref()
    }

    /// The spare prepared for segment `seq`.
    pub(crate) fn spare(&self, seq: u64) -> Option<Spare> {
        self.spares.iter().find(|s| s.seq == seq).copied()
    }

    /// The pins of this process's replays.
    pub(crate) fn pins(&self) -> &Arc<Pins> {
        &self.pins
    }

    /// How many purged files are set aside.
    pub(crate) fn pool_len(&self) -> usize {
        self.pool.len()
    }

    /// The record sequence the next record takes.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The checksum the next record chains to (unless it starts a segment).
    pub(crate) fn last_crc(&self) -> u32 {
        self.last_crc
    }

    /// Whether a segment is being prepared in the background.
    pub(crate) fn preparing(&self) -> bool {
        self.preparing.is_some()
    }

    /// Whether new segment files are reserved rather than written.
    pub(crate) fn reserve_segments(&self) -> bool {
        self.reserve_segments
    }

    /// Segment files on disk: the ones holding records, the active one, spares, set-aside ones.
    pub(crate) fn file_count(&self) -> u64 {
        let active_unlisted =
            self.active.as_ref().is_some_and(|a| self.segments.last().map(|s| s.seq) != Some(a.seq));
        (self.segments.len() + self.spares.len() + self.pool.len() + usize::from(active_unlisted)) as u64
    }

    /// At an open: the last segment, not sealed, is appended to again.
    pub(crate) fn resume(&mut self, active: Active) {
        debug_assert!(self.active.is_none(), "a second active segment");
        debug_assert_eq!(self.segments.last().map(|s| s.seq), Some(active.seq), "resuming another segment");
        self.active = Some(active);
    }

    /// At an open: segment `seq` is prepared once the open's trust was checked.
    pub(crate) fn defer_prepare(&mut self, seq: u64) {
        self.deferred_prepare = Some(seq);
    }

    /// The preparation deferred by the open, taken when the check is done.
    pub(crate) fn take_deferred_prepare(&mut self) -> Option<u64> {
        self.deferred_prepare.take()
    }

    /// At an activation, how the next segment files get their zeros, decided on the segment
    /// just sealed by how many syncs someone waited for while it took its bytes (the seal's own
    /// syncs and the syncs that only bound `Written` entries do not count). Restarts the count.
    pub(crate) fn choose_fill(&mut self, fill: SegmentFill, per_sync: u64, segment_len: u32) {
        let last = self.syncs_in_segment.replace(0);
        self.reserve_segments = match fill {
            SegmentFill::Zeros => false,
            SegmentFill::Reserved => true,
            SegmentFill::Adaptive => last.is_some_and(|syncs| syncs * per_sync <= u64::from(segment_len)),
        };
    }

    /// Counts a sync that an acknowledgement waits for, for [`SegmentFill::Adaptive`].
    pub(crate) fn count_waited_sync(&mut self) {
        if let Some(n) = &mut self.syncs_in_segment {
            *n += 1;
        }
    }

    /// Segment `seq` is made the active one (in `file`, of a spare or not): no spare of it stays.
    pub(crate) fn activate(&mut self, active: Active) {
        debug_assert!(self.active.is_none(), "a second active segment");
        debug_assert!(self.preparing.as_ref().is_none_or(|p| p.0 != active.seq), "activated while prepared");
        debug_assert!(self.segments.last().is_none_or(|s| s.seq < active.seq), "activated over records");
        let seq = active.seq;
        self.spares.retain(|s| s.seq != seq);
        self.active = Some(active);
    }

    /// The active segment took no record after all: it is a spare again. Returns its file, for
    /// the log to close.
    pub(crate) fn active_back_to_spares(&mut self) -> Option<FileId> {
        let a = self.active.take()?;
        self.spares.push(Spare { seq: a.seq, recycled: a.header.is_recycled() });
        Some(a.file)
    }

    /// A batch was written in full into the active segment: the chain continues after it, the
    /// segment's write offset moves to the next sector, its index and the counts of the segment
    /// (listed now if this is its first batch) take it. False when no segment is active.
    pub(crate) fn batch_written(&mut self, w: &Written<'_>) -> bool {
        debug_assert!(w.next_seq > self.next_seq, "a written batch moved the record sequence back");
        self.next_seq = w.next_seq;
        self.last_crc = w.last_crc;
        let Some(a) = self.active.as_mut() else { return false };
        // The next batch starts on a sector boundary (FORMAT.md: batches never share a sector).
        debug_assert!(w.data_end > a.write_off, "a batch written before the write offset");
        a.write_off = w.data_end.next_multiple_of(SECTOR as u64);
        a.batches += 1;
        if w.counts.cuts > 0 || a.index_stride == 0 {
            // Seeking by index assumes LSNs grow within the segment; a cut ends that.
            a.index.clear();
            a.index_stride = 0;
        } else if a.batches % a.index_stride == 0 {
            a.index.push(IndexPoint { lsn: U64::new(w.frame_lsn), offset: U64::new(w.frame_off) });
            if a.index.len() > MAX_INDEX_POINTS {
                a.index = a.index.iter().skip(1).step_by(2).copied().collect();
                a.index_stride *= 2;
            }
        }
        let (seq, header) = (a.seq, a.header);
        if self.segments.last().is_none_or(|l| l.seq != seq) {
            self.segments.push(SegmentInfo {
                seq,
                header,
                footer: None,
                counts: Counts { min_keep_lt: u64::MAX, ..Counts::default() },
                data_end: 0,
            });
        }
        if let Some(info) = self.segments.last_mut() {
            merge_counts(&mut info.counts, w.counts, 1 + w.records);
            info.data_end = w.data_end;
        }
        true
    }

    /// The active segment was sealed: its footer record (the next in the chain, checksum
    /// `crc`) written and synced. Returns its file, for the log to close.
    pub(crate) fn sealed(&mut self, footer: FooterInfo) -> Option<FileId> {
        debug_assert_eq!(footer.seq, self.next_seq, "a footer out of the record sequence");
        debug_assert!(
            self.active.as_ref().map(|a| a.seq) == self.segments.last().map(|s| s.seq),
            "a footer for a segment holding no records"
        );
        self.next_seq += 1;
        self.last_crc = footer.crc;
        if let Some(last) = self.segments.last_mut() {
            last.footer = Some(footer);
        }
        self.active.take().map(|a| a.file)
    }

    /// A purge: the first `k` segments are no longer the log's; returns them.
    pub(crate) fn purge_front(&mut self, k: usize) -> Vec<SegmentInfo> {
        debug_assert!(k < self.segments.len(), "a purge of the last segment holding records");
        self.segments.drain(..k).collect()
    }

    /// The purged file of segment `seq` was set aside for reuse.
    pub(crate) fn set_aside(&mut self, seq: u64) {
        self.pool.push(seq);
        self.pool.sort_unstable();
    }

    /// Takes a file to recycle: the newest one no replay has mapped.
    pub(crate) fn take_recyclable(&mut self) -> Option<u64> {
        let i = self.pool.iter().rposition(|&s| !self.pins.is_pinned(s))?;
        Some(self.pool.remove(i))
    }

    /// Whether segment `seq` may be prepared in the background now: no spare of it exists and
    /// no other preparation runs.
    pub(crate) fn may_prepare(&self, seq: u64) -> bool {
        !self.spares.iter().any(|s| s.seq == seq) && self.preparing.is_none()
    }

    /// Segment `seq` is being prepared on the helper thread `h`.
    pub(crate) fn preparing_started(&mut self, seq: u64, h: JoinHandle<std::io::Result<bool>>) {
        debug_assert!(self.preparing.is_none(), "two preparations at once");
        debug_assert!(self.segments.last().is_none_or(|s| s.seq < seq), "preparing over records");
        self.preparing = Some((seq, h));
    }

    /// Waits for a background preparation; a prepared `seq` becomes a spare. A failed one, or
    /// one of another segment, is forgotten.
    pub(crate) fn finish_preparing(&mut self, seq: Option<u64>) {
        if let Some((s, h)) = self.preparing.take() {
            let done = match h.join() {
                Ok(Ok(recycled)) => Some(recycled),
                _ => None,
            };
            if let (Some(recycled), true) = (done, Some(s) == seq) {
                self.spares.push(Spare { seq: s, recycled });
            }
        }
    }

    /// A helper thread dropping cached pages was started. The ones that finished are joined
    /// now; one still running (a slow drop) is left to run beside this one. Should drops fall
    /// behind the seals (a slow file system), the oldest is waited for once
    /// [`MAX_UNCACHING`] run, so that helpers never pile up.
    pub(crate) fn uncaching_started(&mut self, h: JoinHandle<()>) {
        let (done, mut running): (Vec<_>, Vec<_>) = self.uncaching.drain(..).partition(|h| h.is_finished());
        for h in done {
            let _ = h.join();
        }
        while running.len() >= MAX_UNCACHING {
            let _ = running.remove(0).join();
        }
        self.uncaching = running;
        self.uncaching.push(h);
    }

    /// Waits for every helper thread dropping cached pages.
    pub(crate) fn finish_uncaching(&mut self) {
        for h in self.uncaching.drain(..) {
            let _ = h.join();
        }
    }
}
