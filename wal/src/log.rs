//! The log handle: open and recovery, the synchronous append path, rotation and sealing,
//! logical truncation, prefix purge and clean close.
//!
//! Appends are *staged* into one batch buffer (no I/O); [`Wal::flush`] writes the batch as one
//! frame (handed to the OS, visible to in-process readers) and [`Wal::sync`] flushes and then
//! runs a real fdatasync whenever unsynced bytes exist. A failed write or sync poisons the handle
//! (docs/invariants.md I6); disk full withdraws the unsynced batch and leaves the log usable.
//!
//! The I/O thread also *pipelines*: it submits an fdatasync over every batch written so far
//! (`start_sync`) and writes the next batches while it is in flight; `poll_sync` takes its
//! completion. At most one sync is in flight; it covers exactly the batches whose writes had
//! completed in full when it was submitted, and only its successful completion moves the durable
//! watermark (`durable_seq`, the durable LSN and replay end) to what it covered, so the
//! watermark advances over contiguous successful syncs and only grows. A frame records the
//! watermark as it is when the frame is written, so its `durable_seq` names only completed syncs.
//! Anything else that syncs or writes outside the append path (rotation, close, purge, a
//! withdrawal after disk full) first waits for the sync in flight.

use crate::batch::{self, merge_counts, seal_batch, Frame, FRAME_LEN};
use crate::error::{CrcVerdict, Damage, Error, Result};
use crate::format::*;

pub use crate::open_check::OpenCheck;
use crate::open_check::Trust;
use crate::recovery::{RecoveryMode, SegmentInfo};
use crate::replay::Replay;
use crate::scan::{self, Counts, FooterInfo, Logical};
use crate::storage::{self, FileId, LockGuard, Op, Storage, Submission};
use crate::Durability;
use crate::{Epoch, Lsn};
use std::time::{Duration, Instant};

use std::sync::Arc;
use zerocopy::little_endian::{U32, U64};
use zerocopy::IntoBytes;

/// The largest State record (all metadata keys at their largest values).
pub(crate) const STATE_MAX_LEN: usize =
    RECORD_HEADER_LEN + STATE_FIXED_LEN + MAX_META_KEYS * (8 + MAX_META_VALUE_LEN);

/// An fdatasync submitted by `start_sync` and not yet taken, with what it covers.
#[derive(Debug)]
pub(crate) struct SyncInFlight {
    token: u64,
    /// The written sequence, logical state and end when it was submitted.
    seq: u64,
    logical: Logical,
    end: Option<(u64, u64)>,
    started: Instant,
}

/// The pipelined-sync state of a handle.
#[derive(Debug, Default)]
pub(crate) struct Pipelined {
    pub(crate) sync: Option<SyncInFlight>,
    /// Completions reaped while waiting for another operation's.
    pub(crate) stash: Vec<storage::Completion>,
}

/// Which storage backend a log on real files uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The backend measured fastest here: pwrite + fdatasync, run by the I/O thread itself.
    /// `cargo bench -p wal-benches --bench group_commit` (`benches/RESULTS-group-commit.md`)
    /// compared it in the same runs with the I/O thread writing the next batches while a sync is
    /// in flight, on io_uring (writes and syncs through the ring), on io_uring for the syncs only
    /// (`UringStorage::with_inline_writes`) and on pwrite with each fdatasync on a helper thread
    /// (`FileStorage::with_sync_thread`): none measured better for 1, 8 or 64 waiting
    /// submitters or 1 MiB batches, only a window of 64 small entries in flight was at times.
    /// On this disk an fdatasync's time grows with the bytes it flushes, while writing them
    /// into the page cache is cheap: a sync leaves little to overlap, and handing it to another
    /// thread (a kernel worker or ours) costs a wake-up each time. A buffered write through
    /// the ring is itself handed to a kernel worker (about 25 us for 512 bytes against 4 us).
    #[default]
    Auto,
    /// io_uring for writes and syncs, or an error where it is unavailable.
    Uring,
    /// pwrite + fdatasync.
    Portable,
}

/// How to open a log.
#[derive(Clone, Debug)]
pub struct Options {
    /// Size of every new segment file (zero-filled before it takes appends). 64 KiB to 1 GiB,
    /// a multiple of 512.
    pub segment_len_bytes: u32,
    /// Largest accepted payload; `None` for the most a segment can hold (at most 16 MiB).
    pub max_payload_bytes: Option<u32>,
    /// What an open does with damage (default [`RecoveryMode::TruncateTornTail`]: a torn tail
    /// is cut, CORRUPT_TAIL and CORRUPT refuse the open).
    pub recovery: RecoveryMode,
    /// Create the log if the directory holds none.
    pub create: bool,
    /// Open for reading only: shared lock, never writes (implied by `RecoveryMode::Salvage`).
    pub read_only: bool,
    /// The LSN of the first entry of a new log (openraft starts at 0).
    pub first_lsn: u64,
    /// The id of a new log. `None` (the default) draws a random one, which is what keeps bytes
    /// of another log from ever validating; fixed ids are for reproducible fixtures and tests.
    pub log_id: Option<[u8; 16]>,
    /// The storage backend for [`Wal::open`] (ignored by `open_with`).
    pub backend: Backend,
    /// Prepare the next segment (create, zero-fill, sync, directory sync) on a helper thread as
    /// soon as one is activated, so rotation does not stall an append.
    pub prepare_in_background: bool,
    /// A size budget for the segment files (spares included): a rotation that would need a
    /// new file beyond it fails with [`Error::DiskFull`] before the file system is full, with
    /// the same outcome as a real disk full (the entry is refused, the log stays usable).
    /// `None`: only the file system limits the log.
    pub max_log_bytes: Option<u64>,
    /// How new segment files get their zero bytes (FORMAT.md section 4: both read the same).
    pub segment_fill: SegmentFill,
    /// How many purged segment files a purge may set aside (`{seq}.recycle`) to become later
    /// segments, their old contents kept beside a stale table (FORMAT.md section 2.2), instead
    /// of removing them: overwriting page-cache pages
    /// and disk blocks that exist costs less than allocating new ones (README), and cannot run
    /// out of space. They count against `max_log_bytes` like spares. 0 removes every purged
    /// file.
    pub recycle_segments: usize,
    /// When the records the open takes on trust (sealed segments' footers, `wal.close`) are
    /// checked: before the first write by default (a whole replay counts), at the open, or,
    /// only by name, never (see [`OpenCheck`], README "What an open checks").
    pub open_check: OpenCheck,
}

/// How a new segment file is made of zeros before records overwrite it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SegmentFill {
    /// Zeros written (the default for a log whose acknowledgements wait for syncs), but a
    /// reservation for the next segment when, while the segment just sealed took its bytes,
    /// at most one sync per 128 KiB (`RESERVE_BYTES_PER_SYNC`) had an acknowledgement waiting
    /// for it: a writer that moves bytes rather than syncs then writes them once, not twice.
    /// Waited-for syncs decide because a reserved segment's journal commit lengthens every
    /// sync, which a writer of large batches can afford and small durable appends cannot.
    #[default]
    Adaptive,
    /// Always written: every fdatasync overwrites blocks that are allocated and initialized,
    /// the cheapest sync this file system has.
    Zeros,
    /// Always reserved (`fallocate`; written where the file system cannot reserve): no
    /// writeback for the zeros, but each sync over fresh blocks also commits the journal.
    Reserved,
}

/// [`SegmentFill::Adaptive`]'s threshold. Writing a segment's zeros costs its length in disk
/// bandwidth once (64 MiB: about 55 ms of this machine's device at 1.2 GB/s, in the background
/// but competing with the appends); reserving it costs a journal commit at each sync (about
/// 0.13 ms here). They break even near 400 syncs per 64 MiB, 160 KiB per sync. Measured with
/// nothing purged (docs/performance-journal.md, 2026-12-05): 64 x 4 KiB per sync (256 KiB) runs
/// at 0.87x okaywal reserved against 0.46x with zeros; 64 writers of 256 B (16 KiB per sync)
/// run 1.2x faster with zeros.
pub const RESERVE_BYTES_PER_SYNC: u64 = 128 << 10;

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_len_bytes: 64 << 20,
            max_payload_bytes: None,
            recovery: RecoveryMode::TruncateTornTail,
            create: true,
            read_only: false,
            first_lsn: 1,
            log_id: None,
            backend: Backend::Auto,
            prepare_in_background: true,
            max_log_bytes: None,
            segment_fill: SegmentFill::Adaptive,
            recycle_segments: 2,
            open_check: OpenCheck::BeforeFirstWrite,
        }
    }
}

/// What an open found and did.
#[derive(Clone, Debug)]
pub struct OpenReport {
    /// The verdict of the scan before any repair.
    pub verdict: CrcVerdict,
    /// The damage the scan found, before any repair: a torn tail that was then cut, or what a
    /// [`RecoveryMode::Salvage`] open stops at. `None` when the verdict is OK.
    pub damage: Option<Damage>,
    /// A torn tail that was cut: (segment, offset, bytes zeroed).
    pub cut: Option<(u64, u64, u64)>,
    /// How many segment files holding records the open's scan found (from the purge floor).
    pub segments: usize,
    /// How many records the open's scan walked: only the last segment's unless
    /// [`OpenCheck::AtOpen`] asked for every record (none when `wal.close` was taken).
    pub records_walked: u64,
    /// Segment files below the purge floor that were removed.
    pub leftovers_removed: Vec<u64>,
    /// Whether this open created the log (the directory held none and `Options::create` was
    /// set).
    pub created: bool,
    /// The backend in use: "io_uring", "portable", or "custom" for `open_with`.
    pub backend: &'static str,
}

/// A checkpoint: the online state digest after applying every entry up to an LSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The state digest (FORMAT.md section 10.2).
    pub digest: [u8; 32],
    /// How many entities the state holds.
    pub entity_count: u64,
    /// The version of the digest's definition (1 for FORMAT.md section 10.2).
    pub digest_version: u32,
    /// The state machine's version: which apply semantics produced the state.
    pub state_machine_version: u32,
}

impl Checkpoint {
    /// The checkpoint a `Checkpoint` record's payload holds (FORMAT.md), or `None` if the
    /// payload is not one.
    pub fn from_record_payload(payload: &[u8]) -> Option<Checkpoint> {
        use zerocopy::FromBytes;
        let p = crate::format::CheckpointPayload::read_from_bytes(payload).ok()?;
        Some(Checkpoint {
            digest: p.digest,
            entity_count: p.entity_count.get(),
            digest_version: p.digest_version.get(),
            state_machine_version: p.state_machine_version.get(),
        })
    }
}

/// What a purge removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// The sequences of the segments purged (removed, or set aside for recycling), ascending.
    pub segments_removed: Vec<u64>,
    /// The new purge floor segment.
    pub floor_segment: u64,
}

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

/// A write-ahead log (synchronous handle).
pub struct Wal {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) _lock: LockGuard,
    pub(crate) opts: Options,
    pub(crate) max_payload: u32,
    pub(crate) meta: MetaFile,
    pub(crate) segments: Vec<SegmentInfo>,
    pub(crate) active: Option<Active>,
    pub(crate) spares: Vec<Spare>,
    /// Purged segment files set aside for reuse, by the sequence they had, ascending.
    pub(crate) pool: Vec<u64>,
    /// The segments that replays of this process have mapped (never overwritten meanwhile).
    pub(crate) pins: Arc<crate::recycle::Pins>,
    pub(crate) next_seq: u64,
    pub(crate) last_crc: u32,
    /// After staged records.
    pub(crate) logical: Logical,
    /// After written records (restored when a batch is withdrawn).
    pub(crate) written_logical: Logical,
    pub(crate) durable_logical: Logical,
    pub(crate) written_seq: u64,
    pub(crate) durable_seq: u64,
    /// (segment, offset) just past the last durable batch.
    pub(crate) durable_end: Option<(u64, u64)>,
    pub(crate) staged: Staged,
    pub(crate) fenced: Option<String>,
    /// The next segment being prepared on a helper thread.
    /// (Its result: whether the file was made of a recycled one.)
    pub(crate) preparing: Option<(u64, std::thread::JoinHandle<std::io::Result<bool>>)>,
    /// Syncs that an acknowledgement waited for (`Wal::sync`, or a pipelined sync covering a
    /// durable entry) since the active segment was activated; `None` before the first
    /// activation of this process (nothing to judge the next segment's fill on).
    pub(crate) syncs_in_segment: Option<u64>,
    /// Whether new segment files are reserved rather than written (see [`SegmentFill`]).
    pub(crate) reserve_segments: bool,
    pub(crate) token: u64,
    pub(crate) closed: bool,
    pub(crate) pipe: Pipelined,
    /// Whether the records the open took on trust were checked (`open_check.rs`).
    pub(crate) trust: Arc<Trust>,
    /// The next segment to prepare once they were (preparing creates a file: not before).
    pub(crate) deferred_prepare: Option<u64>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("segments", &self.segments.len())
            .field("next_lsn", &self.logical.next_lsn)
            .field("durable_seq", &self.durable_seq)
            .finish_non_exhaustive()
    }
}

impl Wal {
    // ----- state -----

    /// The LSN the next entry takes.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.logical.next_lsn)
    }

    /// The lowest live LSN, if the log holds live entries (purged segments still count).
    pub fn first_lsn(&self) -> Option<Lsn> {
        self.logical.first_lsn.map(Lsn)
    }

    /// The last LSN that is durable (its batch synced), if any entry is.
    pub fn durable_lsn(&self) -> Option<Lsn> {
        let l = &self.durable_logical;
        l.first_lsn.map(|_| Lsn(l.next_lsn - 1))
    }

    /// The last LSN written to the OS (visible to in-process readers), if any.
    pub fn written_lsn(&self) -> Option<Lsn> {
        let l = &self.written_logical;
        l.first_lsn.map(|_| Lsn(l.next_lsn - 1))
    }

    /// Whether segments were ever purged from the front of the log (the purge floor is past the
    /// first segment): replay from here alone no longer sees the log's whole history.
    pub fn prefix_purged(&self) -> bool {
        self.meta.floor_segment_seq.get() > 1
    }

    /// The log's random identity (in every segment header and snapshot).
    pub fn log_id(&self) -> [u8; 16] {
        self.meta.log_id
    }

    /// The writer epoch in force (one raised by [`Wal::advance_epoch`] counts at once).
    pub fn epoch(&self) -> Epoch {
        Epoch(self.logical.epoch)
    }

    /// The last value recorded for a metadata key ([`Wal::set_meta`]), or `None` if the key
    /// was never set.
    pub fn meta(&self, key: u32) -> Option<&[u8]> {
        self.logical.meta.get(&key).map(Vec::as_slice)
    }

    /// The metadata keys set so far.
    pub(crate) fn meta_keys(&self) -> Vec<u32> {
        self.logical.meta.keys().copied().collect()
    }

    /// The largest payload this log accepts, in bytes: `Options::max_payload_bytes`, or the
    /// most a segment holds (at most 16 MiB) when that is `None`.
    pub fn max_payload_bytes(&self) -> u32 {
        self.max_payload
    }

    /// Segment files holding records (from the purge floor).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Whether a failed write or sync fenced the log: it then accepts nothing until it is
    /// reopened ([`Error::Fenced`]).
    pub fn is_fenced(&self) -> bool {
        self.fenced.is_some()
    }

    /// The storage backend the log reads and writes through.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    // ----- appends (staged) -----

    fn check_writable(&mut self, epoch: Option<Epoch>) -> Result<()> {
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
            if e < current && !cfg!(feature = "mutant-stale-epoch-accepted") {
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

    // ----- staging -----

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

    fn open_frame(&mut self) {
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
    fn stage(&mut self, kind: Kind, flags: u8, lsn: u64, payload: &[u8]) {
        let h = batch::header(kind, flags, payload.len(), lsn, self.logical.epoch);
        let buf = &mut self.staged.buf;
        buf.extend_from_slice(h.as_bytes());
        buf.extend_from_slice(payload);
        buf.resize(buf.len() + align_up(payload.len()) - payload.len(), 0);
        self.staged.records += 1;
    }

    /// Makes the next segment the active one: a zero-filled file made durable in the directory,
    /// and a staged first batch holding the segment header and the log's state.
    fn activate(&mut self) -> Result<()> {
        debug_assert!(self.active.is_none() && !self.staged.open);
        let seq = self.segments.last().map_or(self.meta.floor_segment_seq.get(), |s| s.seq + 1);
        let seg_len = self.opts.segment_len_bytes;
        let name = segment_file_name(seq);
        self.choose_fill();
        self.finish_preparing(Some(seq));
        let spare = self.spares.iter().find(|s| s.seq == seq).copied();
        let (file, recycled) = if let Some(spare) = spare {
            let f =
                self.storage.open(&name, false).map_err(|e| self.fail_io("opening a spare segment", e))?;
            let len = self.storage.len(f).map_err(|e| self.fail_io("sizing a spare segment", e))?;
            if len != u64::from(seg_len) {
                self.storage.close(f);
                self.storage.remove(&name).map_err(|e| self.fail_io("replacing a spare segment", e))?;
                (self.create_segment(&name, seg_len)?, false)
            } else {
                (f, spare.recycled)
            }
        } else if let Some(f) = self.recycle_into(seq, seg_len)? {
            (f, true)
        } else {
            self.check_budget("a new segment")?;
            (self.create_segment(&name, seg_len)?, false)
        };
        self.spares.retain(|s| s.seq != seq);
        let mut header = SegmentHeader::new(self.meta.log_id, seg_len, seq, self.next_seq, self.last_crc);
        if recycled {
            header = header.recycled();
        }
        self.staged.buf.clear();
        self.staged.buf.extend_from_slice(header.as_bytes());
        self.active =
            Some(Active { seq, header, file, write_off: 0, index: Vec::new(), index_stride: 1, batches: 0 });
        self.prepare_next(seq + 1);
        self.open_frame();
        let mut state = Vec::new();
        scan::encode_state(&self.logical, &mut state);
        let lsn = self.logical.next_lsn;
        self.stage(Kind::State, 0, lsn, &state);
        Ok(())
    }

    /// The active segment took no record after all: its file is a spare again.
    fn active_back_to_spares(&mut self) {
        if let Some(a) = self.active.take() {
            self.storage.close(a.file);
            self.spares.push(Spare { seq: a.seq, recycled: a.header.is_recycled() });
        }
    }

    /// Segment files on disk: the ones holding records, the active one, spares.
    fn segment_files(&self) -> u64 {
        let active_unlisted =
            self.active.as_ref().is_some_and(|a| self.segments.last().map(|s| s.seq) != Some(a.seq));
        (self.segments.len() + self.spares.len() + self.pool.len() + usize::from(active_unlisted)) as u64
    }

    /// Refuses one more segment file beyond the size budget.
    fn check_budget(&self, what: &str) -> Result<()> {
        let Some(budget) = self.opts.max_log_bytes else { return Ok(()) };
        let need = (self.segment_files() + 1) * u64::from(self.opts.segment_len_bytes);
        if need > budget {
            return Err(Error::DiskFull {
                context: format!(
                    "creating {what}: the log's size budget of {budget} bytes would be exceeded ({need})"
                ),
            });
        }
        Ok(())
    }

    /// Decides, at an activation, how the next segment files get their zeros: on the
    /// segment just sealed, by how many syncs someone waited for while it took its bytes (the
    /// seal's own syncs and the syncs that only bound `Written` entries do not count).
    fn choose_fill(&mut self) {
        let last = self.syncs_in_segment.replace(0);
        self.reserve_segments = match self.opts.segment_fill {
            SegmentFill::Zeros => false,
            SegmentFill::Reserved => true,
            SegmentFill::Adaptive => last.is_some_and(|syncs| {
                syncs * RESERVE_BYTES_PER_SYNC <= u64::from(self.opts.segment_len_bytes)
            }),
        };
    }

    fn create_segment(&mut self, name: &str, len: u32) -> Result<FileId> {
        let st = self.storage.clone();
        let r = if self.reserve_segments {
            st.prepare_file_reserved(name, len.into())
        } else {
            st.prepare_file(name, len.into())
        };
        r.map_err(|e| self.fail_io(format!("preparing {name}"), e))?;
        st.open(name, false).map_err(|e| self.fail_io(format!("opening {name}"), e))
    }

    /// Prepares segment `seq` (zero-filled, synced, durable in the directory) on a helper thread,
    /// so the rotation that needs it does not wait for it.
    pub(crate) fn prepare_next(&mut self, seq: u64) {
        if !self.opts.prepare_in_background
            || self.spares.iter().any(|s| s.seq == seq)
            || self.preparing.is_some()
        {
            return;
        }
        // A set-aside file, or a new one within the budget.
        let source = self.take_recyclable();
        if source.is_none() && self.check_budget("a spare segment").is_err() {
            return;
        }
        let (st, name, len) =
            (self.storage.clone(), segment_file_name(seq), u64::from(self.opts.segment_len_bytes));
        let reserve = self.reserve_segments;
        let owner = crate::stale::Owner { log_id: self.meta.log_id, segment_seq: seq };
        let spawned = std::thread::Builder::new().name("wal-prepare".into()).spawn(move || {
            // Ok(true): made of a recycled file.
            if source.is_some_and(|old| crate::recycle::recycle(&*st, old, &name, len, owner)) {
                return Ok(true);
            }
            if reserve {
                st.prepare_file_reserved(&name, len).map(|()| false)
            } else {
                st.prepare_file(&name, len).map(|()| false)
            }
        });
        // If no thread can be started, the rotation prepares the segment itself.
        if let Ok(h) = spawned {
            self.preparing = Some((seq, h));
        }
    }

    /// Waits for a background preparation; a prepared `seq` becomes a spare. A failed one is
    /// forgotten: the rotation prepares the segment itself and reports its own error.
    fn finish_preparing(&mut self, seq: Option<u64>) {
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

    fn run(&mut self, op: Op) -> std::io::Result<u64> {
        self.token += 1;
        storage::complete_keeping(&*self.storage, self.token, op, &mut self.pipe.stash).map(|(n, _)| n)
    }

    // ----- pipelined syncs (the I/O thread) -----

    /// The record sequence made durable by the last completed sync.
    pub(crate) fn durable_seq(&self) -> u64 {
        self.durable_seq
    }

    /// The record sequence written to the OS so far.
    pub(crate) fn written_seq(&self) -> u64 {
        self.written_seq
    }

    /// Whether a sync submitted by [`Wal::start_sync`] is still in flight.
    pub(crate) fn syncing(&self) -> bool {
        self.pipe.sync.is_some()
    }

    /// Submits an fdatasync over every batch written so far and returns at once; false when
    /// nothing is unsynced or a sync is in flight already (one per file at most). Only its
    /// completion, taken by [`Wal::poll_sync`], moves the durable watermark.
    /// `waited`: whether an acknowledgement waits for this sync (a durable entry), which is
    /// what [`SegmentFill::Adaptive`] counts.
    pub(crate) fn start_sync(&mut self, waited: bool) -> Result<bool> {
        self.check_writable(None)?;
        if self.pipe.sync.is_some() || self.written_seq <= self.durable_seq {
            return Ok(false);
        }
        if waited {
            self.count_waited_sync();
        }
        let Some(file) = self.active.as_ref().map(|a| a.file) else {
            return Err(Error::InvalidArgument("unsynced records without an active segment".into()));
        };
        self.token += 1;
        let token = self.token;
        // Taken before the submission: a backend that syncs inside `submit` (pwrite +
        // fdatasync) has finished the sync when it returns.
        let started = Instant::now();
        if let Err(e) = self.storage.submit(Submission { token, op: Op::SyncData { file } }) {
            return Err(self.fail_sync(e));
        }
        self.pipe.sync = Some(SyncInFlight {
            token,
            seq: self.written_seq,
            logical: self.written_logical.clone(),
            end: self.written_end(),
            started,
        });
        Ok(true)
    }

    /// Takes the completion of the sync in flight if it has come (with `wait`, waits for it).
    /// Returns how long the sync took when it completed now; a failed sync poisons the log.
    pub(crate) fn poll_sync(&mut self, wait: bool) -> Result<Option<Duration>> {
        let Some(token) = self.pipe.sync.as_ref().map(|s| s.token) else { return Ok(None) };
        loop {
            if let Some(i) = self.pipe.stash.iter().position(|c| c.token == token) {
                let c = self.pipe.stash.swap_remove(i);
                let Some(s) = self.pipe.sync.take() else { return Ok(None) };
                let took = s.started.elapsed();
                if let Err(e) = c.result {
                    // Mutant (tools/mutants.sh, I6): a failed fdatasync is taken as a success
                    // (what a retry that "succeeds" on Linux amounts to); nothing is fenced.
                    if cfg!(feature = "mutant-no-fence-on-sync-error") {
                        let _ = e;
                    } else {
                        return Err(self.fail_sync(e));
                    }
                }
                self.advance_durable(s.seq, s.logical, s.end)?;
                return Ok(Some(took));
            }
            let before = self.pipe.stash.len();
            if let Err(e) = self.storage.reap(&mut self.pipe.stash, wait) {
                return Err(self.fail_sync(e));
            }
            if !wait && self.pipe.stash.len() == before {
                return Ok(None);
            }
        }
    }

    /// Waits for the sync in flight, if any (before anything else syncs or writes out of band).
    fn settle(&mut self) -> Result<()> {
        if self.pipe.sync.is_some() {
            self.poll_sync(true)?;
        }
        Ok(())
    }

    /// A sync failed (or could not be submitted or reaped): the log is fenced, whatever the
    /// error, and no sync is ever retried (after a failed fdatasync the kernel may have dropped
    /// the pages).
    fn fail_sync(&mut self, e: std::io::Error) -> Error {
        self.pipe.sync = None;
        let err = self.fail_io("syncing", e);
        if self.fenced.is_none() {
            self.fenced = Some(err.to_string());
        }
        err
    }

    /// Moves the durable watermark to what a completed sync covered. It only grows; anything
    /// else is a bug, and the log stops rather than acknowledge on a watermark it cannot trust.
    fn advance_durable(&mut self, seq: u64, logical: Logical, end: Option<(u64, u64)>) -> Result<()> {
        if seq < self.durable_seq {
            let why =
                format!("internal: the durable watermark would move back from {} to {seq}", self.durable_seq);
            self.fenced.get_or_insert_with(|| why.clone());
            return Err(Error::Fenced { cause: why });
        }
        debug_assert!(seq <= self.written_seq, "durable {seq} past written {}", self.written_seq);
        self.durable_seq = seq;
        self.durable_logical = logical;
        self.durable_end = end;
        Ok(())
    }

    /// Turns an I/O error into the log's error; anything but disk full poisons the handle.
    pub(crate) fn fail_io(&mut self, context: impl Into<String>, e: std::io::Error) -> Error {
        let err = Error::io(context, e);
        if !matches!(err, Error::DiskFull { .. }) && self.fenced.is_none() {
            self.fenced = Some(err.to_string());
        }
        err
    }

    // ----- writing -----

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
        let Some(a) = self.active.as_ref() else {
            return Err(Error::InvalidArgument("staged records without an active segment".into()));
        };
        let (file, write_off, seg_seq, header) = (a.file, a.write_off, a.seq, a.header);
        let mut buf = std::mem::take(&mut self.staged.buf);
        let frame_at = self.staged.frame_at;
        // A segment's first record links to the segment's chain seed, not to the previous record.
        let prev = if write_off == 0 { header.chain_seed() } else { self.last_crc };
        let frame = Frame {
            at: frame_at,
            lsn: self.staged.frame_lsn,
            epoch: self.staged.frame_epoch,
            records: self.staged.records,
        };
        let (seq_after, crc_after) = seal_batch(&mut buf, &frame, self.next_seq, prev, self.durable_seq);
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
        debug_assert!(seq_after > self.next_seq, "a written batch moved the record sequence back");
        self.next_seq = seq_after;
        self.last_crc = crc_after;
        self.written_seq = seq_after - 1;
        self.written_logical = self.logical.clone();
        let frame_off = write_off + frame_at as u64;
        let a = self.active.as_mut().ok_or_else(|| Error::InvalidArgument("no active segment".into()))?;
        // The next batch starts on a sector boundary (FORMAT.md: batches never share a sector).
        let data_end = write_off + len;
        a.write_off = data_end.next_multiple_of(SECTOR as u64);
        a.batches += 1;
        if s.counts.cuts > 0 || a.index_stride == 0 {
            // Seeking by index assumes LSNs grow within the segment; a cut ends that.
            a.index.clear();
            a.index_stride = 0;
        } else if a.batches % a.index_stride == 0 {
            a.index.push(IndexPoint { lsn: U64::new(s.frame_lsn), offset: U64::new(frame_off) });
            if a.index.len() > MAX_INDEX_POINTS {
                a.index = a.index.iter().skip(1).step_by(2).copied().collect();
                a.index_stride *= 2;
            }
        }
        if self.segments.last().is_none_or(|l| l.seq != seg_seq) {
            self.segments.push(SegmentInfo {
                seq: seg_seq,
                header,
                footer: None,
                counts: Counts { min_keep_lt: u64::MAX, ..Counts::default() },
                data_end: 0,
            });
        }
        if let Some(info) = self.segments.last_mut() {
            merge_counts(&mut info.counts, &s.counts, 1 + s.records);
            info.data_end = data_end;
        }
        Ok(())
    }

    /// A batch write failed. Disk full: zero whatever of it reached the file, sync, forget the
    /// batch (its LSNs are free again) and stay usable. Anything else poisons the log.
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
            self.fenced = Some(format!("withdrawing a batch after disk full failed: {e2}"));
        }
        self.logical = self.written_logical.clone();
        self.staged = Staged::default();
        if off == 0 {
            // The batch carried the segment header: the file is a spare again.
            self.active_back_to_spares();
        }
        err
    }

    /// Flushes and makes everything written durable with a real fdatasync (skipped only when no
    /// unsynced byte exists).
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        if self.written_seq > self.durable_seq {
            self.count_waited_sync();
        }
        self.sync_written()
    }

    /// Counts a sync that an acknowledgement waits for, for [`SegmentFill::Adaptive`].
    fn count_waited_sync(&mut self) {
        if let Some(n) = &mut self.syncs_in_segment {
            *n += 1;
        }
    }

    fn sync_written(&mut self) -> Result<()> {
        self.settle()?;
        if self.written_seq <= self.durable_seq {
            return Ok(());
        }
        let Some(file) = self.active.as_ref().map(|a| a.file) else {
            return Err(Error::InvalidArgument("unsynced records without an active segment".into()));
        };
        if let Err(e) = self.run(Op::SyncData { file }) {
            // Mutant (tools/mutants.sh, I6): a failed fdatasync is retried, and a retry that
            // "succeeds" (Linux: the failed pages were marked clean) is taken as durability.
            let retried =
                cfg!(feature = "mutant-no-fence-on-sync-error") && self.run(Op::SyncData { file }).is_ok();
            if !retried {
                // Never retried: after a failed fdatasync the kernel may have dropped the pages.
                return Err(self.fail_sync(e));
            }
        }
        let (seq, logical, end) = (self.written_seq, self.written_logical.clone(), self.written_end());
        self.advance_durable(seq, logical, end)
    }

    /// Seals the active segment: its data durable, then its footer written and synced. A later
    /// segment only takes records after this, which is what lets a valid later segment attest
    /// every byte of this one.
    fn seal_active(&mut self) -> Result<()> {
        self.flush()?;
        self.sync_written()?;
        let Some(a) = self.active.as_ref() else {
            return Ok(());
        };
        let (file, seq, index, header_len) = (a.file, a.seq, a.index.clone(), a.header.segment_len.get());
        let Some(info) = self.segments.last().filter(|s| s.seq == seq) else {
            // Nothing was ever written into it: leave it as a spare.
            self.active_back_to_spares();
            return Ok(());
        };
        let c = &info.counts;
        let fp = FooterPayload {
            durable_seq: U64::new(self.next_seq - 1),
            data_end: U64::new(info.data_end),
            record_count: U32::new(c.records),
            entry_count: U32::new(c.entries),
            min_lsn: U64::new(c.min_lsn),
            max_lsn: U64::new(c.max_lsn),
            min_keep_lt: U64::new(c.min_keep_lt),
            cut_count: U32::new(c.cuts),
            index_count: U32::new(index.len() as u32),
        };
        let mut payload = fp.as_bytes().to_vec();
        for p in &index {
            payload.extend_from_slice(p.as_bytes());
        }
        let h = batch::header(Kind::Footer, 0, payload.len(), self.logical.next_lsn, self.logical.epoch);
        let mut rec = Vec::with_capacity(record_len(payload.len()));
        let footer_crc = batch::encode_record(h, self.next_seq, self.last_crc, &payload, &mut rec);
        let at = footer_offset(header_len) as u64;
        let r =
            self.run(Op::Write { file, offset: at, data: rec }).and_then(|_| self.run(Op::SyncData { file }));
        if let Err(e) = r {
            let err = self.fail_io("writing a footer", e);
            if self.fenced.is_none() {
                // A footer that may be half on disk cannot be withdrawn like a batch.
                self.fenced = Some(err.to_string());
            }
            return Err(err);
        }
        let footer = FooterInfo { payload: fp, index, seq: self.next_seq, crc: footer_crc };
        self.next_seq += 1;
        self.last_crc = footer_crc;
        self.written_seq = self.next_seq - 1;
        self.durable_seq = self.written_seq;
        if let Some(last) = self.segments.last_mut() {
            last.footer = Some(footer);
        }
        self.durable_end = self.written_end();
        if let Some(a) = self.active.take() {
            self.storage.close(a.file);
        }
        Ok(())
    }

    /// Seals the active segment now (the next append starts a new one).
    pub fn rotate(&mut self) -> Result<()> {
        self.check_writable(None)?;
        self.seal_active()
    }

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
            self.finish_preparing(None);
            return Ok(());
        }
        self.check_writable(None)?;
        let r = self.seal_active().and_then(|()| self.record_close());
        self.closed = true;
        self.finish_preparing(None);
        r
    }

    /// Whether a close would write nothing: no active segment to seal and the last sealed one
    /// already recorded as closed (what `seal_active` and `record_close` skip).
    fn close_writes_nothing(&self) -> bool {
        self.active.is_none()
            && !self.staged.open
            && self
                .segments
                .last()
                .is_none_or(|s| s.footer.is_none() || self.meta.closed_segment_seq.get() == s.seq)
    }

    /// Drops the handle without syncing or sealing: what a crash of the process leaves (written
    /// batches stay in the page cache). For tests and demonstrations.
    pub fn abandon(mut self) {
        self.closed = true;
        self.finish_preparing(None);
    }

    /// Removes whole sealed segments, from the oldest, whose entries all have LSN < `below`.
    /// The last segment holding records is never removed. Crash-safe: the new floor is made
    /// durable in `wal.meta` before any file is unlinked; files left below the floor by a crash
    /// are removed at the next open.
    pub fn purge_before(&mut self, below: Lsn) -> Result<PurgeReport> {
        self.check_writable(None)?;
        self.settle()?;
        let n = self.segments.len().saturating_sub(1);
        let k = self
            .segments
            .iter()
            .take(n)
            .take_while(|s| s.sealed() && (s.counts.entries == 0 || s.counts.max_lsn < below.0))
            .count();
        let Some(floor) = self.segments.get(k) else {
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
        let removed: Vec<SegmentInfo> = self.segments.drain(..k).collect();
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
        let Some((seq, crc)) = self.segments.last().and_then(|s| s.footer.as_ref().map(|f| (s.seq, f.crc)))
        else {
            return Ok(());
        };
        if self.meta.closed_segment_seq.get() == seq {
            return Ok(());
        }
        // The state at the close, so that the next open need not walk the segment for it.
        let st = self.storage.clone();
        if let Err(e) = crate::close_state::write_close_state(&*st, seq, crc, &self.logical) {
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

    // ----- reading -----

    /// A replay of every live entry and checkpoint written so far (including written but not yet
    /// durable batches, as an in-process Raft reader needs).
    pub fn replay(&self) -> Result<Replay> {
        self.replay_from(None, Durability::Written)
    }

    /// A replay from `from` (or the start) to the written or durable end.
    pub fn replay_from(&self, from: Option<Lsn>, bound: Durability) -> Result<Replay> {
        let end = match bound {
            Durability::Written => self.written_end(),
            Durability::Durable => self.durable_end,
        };
        // A replay of the whole log re-checks every record: it stands for the check when it ends
        // cleanly. One from an LSN skips records, so it does not.
        let credit = (from.is_none() && self.trust.unchecked()).then(|| self.trust.clone());
        let mut r =
            Replay::new(self.storage.clone(), self.pins.clone(), &self.segments, end, from.map(|l| l.0))?;
        r.credit = credit;
        Ok(r)
    }

    /// (segment, offset) just past the last written batch.
    pub(crate) fn written_end(&self) -> Option<(u64, u64)> {
        self.segments.last().map(|s| (s.seq, s.data_end))
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if !self.closed && self.fenced.is_none() && !self.opts.read_only {
            let _ = self.close_inner();
        }
        // Never leave a helper thread writing into the directory behind.
        self.finish_preparing(None);
    }
}
