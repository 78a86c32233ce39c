//! The log handle: open and recovery, the synchronous append path, rotation and sealing,
//! logical truncation, prefix purge and clean close.
//!
//! Appends are *staged* into one batch buffer (no I/O); [`Wal::flush`] writes the batch as one
//! frame (handed to the OS, visible to in-process readers) and [`Wal::sync`] flushes and then
//! runs a real fdatasync whenever unsynced bytes exist. A failed write or sync fences the handle
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
//!
//! The handle's methods are in one file per part of its work; this one holds the handle, what
//! its callers pass and get back, and the queries on its state:
//!
//! - `options.rs`: how to open a log ([`Options`], [`Backend`], [`SegmentFill`]);
//! - `position.rs`: the log's logical position and the one implementation of admitting an
//!   operation against it (epoch, size, gap, cut, metadata keys, epoch advance) and assigning
//!   LSNs, which the writer thread's submit side runs on its own copy;
//! - `staging.rs`: the appends and other records staged into the next batch at the LSNs the
//!   position gave them, and the checks every write makes first;
//! - `files.rs`: the segment files the handle holds (records, active, spares, set aside, being
//!   prepared) and the record chain, and the only changes to them;
//! - `segments.rs`: a segment's life: activated (a spare, a recycled file or a new one),
//!   prepared ahead on a helper thread, sealed with its footer;
//! - `watermarks.rs`: how far records are written and durable, and the only moves of those
//!   watermarks (each checked in debug builds);
//! - `durability.rs`: syncs, pipelined or not, and the durable watermark they move; a failed
//!   sync fences the log;
//! - `flush.rs`: writing the staged batch, and withdrawing it after disk full;
//! - `close.rs`: the clean close and the prefix purge, the two changes `wal.meta` records;
//! - `open_check.rs`: what an open takes on trust, and the check before the first write;
//! - `recycle.rs`: purged segment files set aside and made into later segments.
//!
//! Opening is `open.rs`, and the replay a handle hands out is `replay.rs`.

mod close;
mod durability;
mod files;
mod flush;
pub(crate) mod open_check;
mod options;
mod position;
pub(crate) mod recycle;
mod segments;
mod staging;
mod watermarks;

pub use close::PurgeReport;
pub(crate) use durability::Pipelined;
pub(crate) use files::{Active, Files, Spare};
pub use open_check::OpenCheck;
pub use options::{Backend, Options, SegmentFill, RESERVE_BYTES_PER_SYNC};
pub(crate) use position::{Op, Position};
pub(crate) use staging::Staged;
pub(crate) use watermarks::Watermarks;

use crate::error::{CrcVerdict, Damage};
use crate::format::*;
use crate::recovery::SegmentInfo;
use crate::storage::{LockGuard, Storage};
use crate::{Durability, Epoch, Lsn};
use open_check::Trust;
use recycle::Pins;
use std::sync::Arc;

/// The largest State record (all metadata keys at their largest values).
pub(crate) const STATE_MAX_LEN: usize =
    RECORD_HEADER_LEN + STATE_FIXED_LEN + MAX_META_KEYS * (8 + MAX_META_VALUE_LEN);

/// What an open found and did.
#[derive(Clone, Debug)]
pub struct OpenReport {
    /// The verdict of the scan before any repair.
    pub verdict: CrcVerdict,
    /// The damage the scan found, before any repair: a torn tail that was then cut, or what a
    /// [`RecoveryMode::Salvage`](crate::RecoveryMode::Salvage) open stops at. `None` when the verdict is OK.
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

/// A write-ahead log (synchronous handle).
///
/// Its fields are private to `log/`: each part (`files`, `position`, `marks`, `staged`) changes
/// only through its own methods, and the rest of the crate reads the handle through the queries
/// below.
pub struct Wal {
    storage: Arc<dyn Storage>,
    _lock: LockGuard,
    opts: Options,
    max_payload: u32,
    meta: MetaFile,
    /// The segment files and the record chain; only its methods change them (`files.rs`).
    files: Files,
    /// The logical position after staged records: the one place that admits an operation
    /// and assigns its LSNs (`position.rs`).
    position: Position,
    /// How far records are written and durable; only its methods move it (`watermarks.rs`).
    marks: Watermarks,
    staged: Staged,
    fenced: Option<String>,
    token: u64,
    closed: bool,
    pipe: Pipelined,
    /// Whether the records the open took on trust were checked (`open_check.rs`).
    trust: Arc<Trust>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("segments", &self.files.segments().len())
            .field("next_lsn", &self.position.next_lsn())
            .field("durable_seq", &self.marks.durable_seq())
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// The LSN the next entry takes.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.position.next_lsn())
    }

    /// The lowest live LSN, if the log holds live entries (purged segments still count).
    pub fn first_lsn(&self) -> Option<Lsn> {
        self.position.first_lsn().map(Lsn)
    }

    /// The last LSN that is durable (its batch synced), if any entry is.
    pub fn durable_lsn(&self) -> Option<Lsn> {
        self.marks.durable_lsn().map(Lsn)
    }

    /// The last LSN written to the OS (visible to in-process readers), if any.
    pub fn written_lsn(&self) -> Option<Lsn> {
        self.marks.written_lsn().map(Lsn)
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
        Epoch(self.position.epoch())
    }

    /// The last value recorded for a metadata key ([`Wal::set_meta`]), or `None` if the key
    /// was never set.
    pub fn meta(&self, key: u32) -> Option<&[u8]> {
        self.position.meta(key)
    }

    /// The logical position after every operation staged so far.
    pub(crate) fn position(&self) -> &Position {
        &self.position
    }

    /// The largest payload this log accepts, in bytes: `Options::max_payload_bytes`, or the
    /// most a segment holds (at most 16 MiB) when that is `None`.
    pub fn max_payload_bytes(&self) -> u32 {
        self.max_payload
    }

    /// Segment files holding records (from the purge floor).
    pub fn segment_count(&self) -> usize {
        self.files.segments().len()
    }

    /// Whether a failed write or sync fenced the log: it then accepts nothing until it is
    /// reopened ([`Error::Fenced`](crate::Error::Fenced)).
    pub fn is_fenced(&self) -> bool {
        self.fenced.is_some()
    }

    /// Why the log is fenced, if it is (the first cause; as `AsyncWal::fenced`).
    pub fn fenced(&self) -> Option<String> {
        self.fenced.clone()
    }

    /// Fences the handle: from now on it refuses every write until it is reopened. The first
    /// cause stays (a later failure is usually a consequence of the first). The only way the
    /// fence is set.
    pub(crate) fn fence(&mut self, cause: String) {
        if self.fenced.is_none() {
            self.fenced = Some(cause);
        }
    }

    /// The storage backend the log reads and writes through.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// What fenced the log, if it is fenced.
    pub(crate) fn fence_cause(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    /// (segment, offset) just past the last written batch.
    pub(crate) fn written_end(&self) -> Option<(u64, u64)> {
        self.files.last().map(|s| (s.seq, s.data_end))
    }

    /// The handle an open builds from what its scan found (`open.rs`): nothing staged, not
    /// fenced, no sync in flight.
    pub(crate) fn from_open(o: Opened) -> Wal {
        Wal {
            storage: o.storage,
            _lock: o.lock,
            opts: o.opts,
            max_payload: o.max_payload,
            meta: o.meta,
            files: o.files,
            position: o.position,
            marks: o.marks,
            staged: Staged::default(),
            fenced: None,
            token: 0,
            closed: false,
            pipe: Pipelined::default(),
            trust: o.trust,
        }
    }

    /// What a replay of this handle reads, to the written or the durable end (`replay.rs`).
    pub(crate) fn replay_source(&self, bound: Durability) -> ReplaySource<'_> {
        let end = match bound {
            Durability::Written => self.written_end(),
            Durability::Durable => self.marks.durable_end(),
        };
        ReplaySource {
            storage: self.storage.clone(),
            pins: self.files.pins().clone(),
            segments: self.files.segments(),
            end,
            unchecked: self.trust.unchecked().then(|| self.trust.clone()),
        }
    }
}

/// What a replay reads: the storage, the pins that keep its segments from being recycled under
/// it, the segments holding records and where it ends; `unchecked` holds the open's trust while
/// records it took on trust are not yet checked (a whole replay that ends cleanly checks them).
pub(crate) struct ReplaySource<'a> {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) pins: Arc<Pins>,
    pub(crate) segments: &'a [SegmentInfo],
    pub(crate) end: Option<(u64, u64)>,
    pub(crate) unchecked: Option<Arc<Trust>>,
}

/// What an open found, for [`Wal::from_open`]: the storage and its lock, the options, and the
/// state its scan rebuilt.
pub(crate) struct Opened {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) lock: LockGuard,
    pub(crate) opts: Options,
    pub(crate) max_payload: u32,
    pub(crate) meta: MetaFile,
    pub(crate) files: Files,
    pub(crate) position: Position,
    pub(crate) marks: Watermarks,
    pub(crate) trust: Arc<Trust>,
}
