//! A verifiable, segmented write-ahead log for controllers: group commit on a writer thread,
//! durable acknowledgements only after fdatasync, replay over memory maps, crash-safe truncation
//! and purge, epoch fencing. After a crash, recovery tells a torn tail (cut) from corruption
//! (refused, naming segment, offset and LSN).
//!
//! # Quick start
//!
//! Open the log with its writer thread, append from several threads, wait for durability, close,
//! reopen and replay (the README's example; `wal/examples/quickstart.rs`):
//!
#![doc = concat!("```\n", include_str!("../examples/quickstart.rs"), "```")]
//!
//! # Which handle
//!
//! - [`Wal`] (`&mut self`): `append*` stage records without I/O, [`Wal::sync`] writes them and
//!   runs one fdatasync. For one thread that owns the log, and for tools.
//! - [`AsyncWal`] (`&self`, share it in an `Arc`): every operation of `Wal`, in queue order, on
//!   one writer thread that groups concurrent appends into one write and one fdatasync; each
//!   operation answers with a [`Ticket`].
//! - The commit pipeline, in the `wal-state` crate: a state machine kept in step with the log
//!   (pre-hooks, commit, apply, notify; checkpoints and snapshots), over an [`AsyncWal`].
//!
//! An open is fast (O(segments) bytes): it takes sealed segments on their footers and a clean
//! close on `wal.close`. No write lands after an acknowledged record that fails its checksum
//! without [`Error::Damaged`] first: the first write walks the whole log unless a replay of the
//! whole log through the handle already checked every record ([`OpenCheck`]). `FORMAT.md`
//! describes every byte and the crash-correctness argument.
//!
//! The synchronous handle alone:
//!
//! ```
//! use wal::{Epoch, Options, Wal};
//! let dir = tempfile::tempdir().unwrap();
//! let opts = Options { segment_len_bytes: 64 * 1024, ..Options::default() };
//! let (mut log, _report) = Wal::open(dir.path(), opts.clone()).unwrap();
//! let lsn = log.append(Epoch(0), b"create job 7").unwrap();
//! log.sync().unwrap(); // a real fdatasync: the entry is durable now
//! assert_eq!(log.durable_lsn(), Some(lsn));
//! log.close().unwrap();
//!
//! let (log, report) = Wal::open(dir.path(), opts).unwrap();
//! assert_eq!(report.verdict, wal::CrcVerdict::Ok);
//! let entries = log.replay().unwrap().collect_entries().unwrap();
//! assert_eq!(entries, vec![(lsn.0, b"create job 7".to_vec())]);
//! ```

// Without `internal`, code only the workspace's own crates call is unused here.
#![cfg_attr(not(feature = "internal"), allow(dead_code, unused_imports))]
// Every item a controller's build can reach is documented.
#![cfg_attr(not(feature = "internal"), deny(missing_docs))]

// The on-disk format, the walker and the decision table live in the format crate (wal/format,
// no I/O); the engine names them as its own modules, and the workspace's crates reach them
// through here with `internal`. So do the test-only mutants of tools/mutants.sh (`mutants::on`,
// chosen by WAL_MUTANT at build time: never a cargo feature a dependent could switch on).
use wal_format::batch;
#[cfg(feature = "internal")]
#[doc(hidden)]
pub use wal_format::{classify, format, mutants, scan, stale};
#[cfg(not(feature = "internal"))]
use wal_format::{classify, format, mutants, scan, stale};

// Modules the workspace's own crates read (the verifier, walcheck, fixtures, fuzzing, the Raft
// adapter, the tests): public only with the `internal` feature, and hidden from the docs. A
// controller sees the root's items and `seam` (the state layer is the `wal-state` crate).
#[cfg(feature = "internal")]
#[doc(hidden)]
pub mod lifecycle;
#[cfg(not(feature = "internal"))]
mod lifecycle;
#[cfg(feature = "internal")]
#[doc(hidden)]
pub mod recovery;
#[cfg(not(feature = "internal"))]
mod recovery;
#[cfg(feature = "internal")]
#[doc(hidden)]
pub mod storage;
#[cfg(not(feature = "internal"))]
mod storage;

mod close_state;
mod error;
mod io_thread;
mod log;
mod log_files;
mod metrics;
mod open;
#[cfg(feature = "prometheus")]
pub mod prometheus;
mod replay;
mod segment_read;
mod ticket;

pub use error::{CrcVerdict, Damage, DamageKind, Error, Result};
pub use io_thread::{AsyncOptions, AsyncWal, IntoPayload, Payload, WhenFull};
pub use log::{Backend, Checkpoint, OpenCheck, OpenReport, Options, PurgeReport, SegmentFill, Wal};
pub use metrics::{Histogram, Stats};
pub use recovery::RecoveryMode;
pub use replay::{Entries, Item, ItemKind, Replay};
pub use ticket::{Ack, Completion, DurableFuture, Failure, Notify, Resolver, Stage, Ticket};

/// The storage seam's read and write sides, for a layer that keeps files of its own beside the
/// log through the same backend the log runs on (the state crate's snapshots: real files here,
/// the simulator in its crash tests). [`seam::FileStorage`] is real files in a directory.
pub mod seam {
    pub use crate::storage::{write_all_at, FileId, FileStorage, LockGuard, Mapping, Reader, Writer};
}

#[cfg(feature = "internal")]
#[doc(hidden)]
pub use log::RESERVE_BYTES_PER_SYNC;
#[cfg(feature = "internal")]
#[doc(hidden)]
pub use recovery::{scan_log, scan_log_with, Depth, LogScan, SegmentInfo};

/// A log sequence number: an entry's position as the log's users see it (the Raft index in
/// replicated mode). Truncation can reuse an LSN; the record sequence behind it never repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

/// The two levels an entry reaches: handed to the OS (written), then covered by a completed
/// fdatasync (durable). An append says which one its ticket resolves at; a replay says how far
/// it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Made durable by a completed fdatasync. An append's ticket resolves after the sync that
    /// covers it completed; a replay reads only batches such a sync covered.
    Durable,
    /// Handed to the OS. An append's ticket resolves when its batch is written, and its final
    /// outcome ([`Ticket::wait_durable`], or a second [`Completion`]) follows when the sync
    /// covering it completed or failed, at most about [`AsyncOptions::written_sync_delay`]
    /// later; a replay reads everything written (in-process readers, e.g. a Raft library).
    Written,
}

/// A writer (leader) epoch: only grows on disk; appends under an older one are rejected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u64);

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
