//! How to open a log: [`Options`], with the storage backend ([`Backend`]) and how new segment
//! files get their zeros ([`SegmentFill`]).

use super::OpenCheck;
use crate::recovery::RecoveryMode;

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
    /// The storage backend for [`Wal::open`](crate::Wal::open) (ignored by `open_with`).
    pub backend: Backend,
    /// Prepare the next segment (create, zero-fill, sync, directory sync) on a helper thread as
    /// soon as one is activated, so rotation does not stall an append.
    pub prepare_in_background: bool,
    /// A size budget for the segment files (spares included): a rotation that would need a
    /// new file beyond it fails with [`Error::DiskFull`](crate::Error::DiskFull) before the file system is full, with
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
    /// How many bytes of sealed segments, newest first, the log leaves in the OS page cache.
    /// When a seal pushes an older segment beyond this, the log tells the OS to drop that
    /// segment's pages (`posix_fadvise(POSIX_FADV_DONTNEED)`; all of them are durable by then),
    /// on a helper thread and in 4 MiB pieces, so that the writer does not wait for it.
    /// The page cache then gives the next writes memory the log itself just freed, instead of
    /// growing by a segment's length of new memory for every segment written, which on a
    /// virtual machine can cost more CPU than the copy into it (README, "A log that is never
    /// purged", has the measurements). What it costs: a replay after a restart reads the older segments from
    /// the disk rather than from memory. The active segment always stays cached, and so do
    /// pages still mapped by a reader. The budget covers what the log writes: segments read
    /// back after a restart (a replay, a verifier) stay cached for the OS to evict, and a
    /// seal drops only the segment it pushes past the budget. Default 256 MiB; `u64::MAX`
    /// leaves the cache to the OS.
    pub cached_log_bytes: u64,
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
            cached_log_bytes: 256 << 20,
        }
    }
}
