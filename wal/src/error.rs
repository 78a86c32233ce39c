//! Errors of the log API. The verdict vocabulary they carry (`Damage`, `DamageKind`,
//! `CrcVerdict`) belongs to the format crate, which the verifier reads too.

use std::io;
pub use wal_format::damage::{CrcVerdict, Damage, DamageKind};

/// Errors of the log API. [`Error::is_rejected`] tells the two kinds of docs/invariants.md I1 apart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error, with what was being done.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the log was doing, for the message ("locking the log directory", say).
        context: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The device is full (or the configured budget is spent); the unsynced tail was withdrawn
    /// and the log remains usable.
    #[error("disk full while {context}")]
    DiskFull {
        /// What the log was doing when the space ran out.
        context: String,
    },
    /// The log, or the pipeline over it, is fenced: it accepts nothing until the log is
    /// reopened. Not a rejection ([`Error::is_rejected`] is false): keep what was refused (a
    /// fact, say) and resubmit it after the reopen, which tells what the log holds.
    #[error("fenced ({cause}); nothing is accepted until the log is reopened")]
    Fenced {
        /// Why: most often a failed write or sync (docs/invariants.md I6), but also a close or
        /// an abandon, an I/O or apply thread that stopped or panicked, a broken internal
        /// promise, entries lost to a full disk, or, in a pipeline, a state that diverged from
        /// what the log recorded, or a hook, a callback or the state machine that panicked or
        /// failed on a logged entry.
        cause: String,
    },
    /// The log is damaged in a way the recovery mode does not repair.
    #[error("log is damaged: {0}")]
    Damaged(Damage),
    /// Another process holds the directory lock.
    #[error("log is locked: {0}")]
    Locked(String),
    /// An append carried a writer epoch older than the log's.
    #[error("rejected: writer epoch {given} is older than the log's epoch {current}")]
    StaleEpoch {
        /// The log's writer epoch.
        current: u64,
        /// The epoch the append carried.
        given: u64,
    },
    /// An append carried a writer epoch newer than the log's: call `advance_epoch` first.
    #[error("rejected: writer epoch {given} is newer than the log's epoch {current}; advance it first")]
    EpochNotAdvanced {
        /// The log's writer epoch.
        current: u64,
        /// The epoch the append carried.
        given: u64,
    },
    /// A payload larger than the log accepts.
    #[error("rejected: payload of {len} bytes exceeds the maximum {max}")]
    TooLarge {
        /// The length in bytes of what was refused (an entry's payload, a metadata value).
        len: u64,
        /// The most the log accepts there, in bytes: the log's payload maximum for an entry,
        /// 256 for a metadata value.
        max: u64,
    },
    /// Arguments that make no sense (named in the message).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Refused at submission, with why, and never logged: a pipeline's pre-hook refused the
    /// entry, or the pipeline is fenced or closing.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The directory holds no log (and `create` was not asked for).
    #[error("no log: {0}")]
    NotFound(String),
    /// A write on a read-only handle (or on a log that is closing).
    #[error("the log was opened read-only or is closing")]
    ReadOnly,
    /// The I/O thread's queue is full and the caller asked not to wait.
    #[error("rejected: the queue is full")]
    Busy,
    /// A snapshot file is damaged or does not rebuild the state it records.
    #[error("snapshot {name} is unusable: {what}")]
    BadSnapshot {
        /// The snapshot's file name.
        name: String,
        /// What is wrong with it.
        what: String,
    },
    /// A snapshot or checkpoint names a format, digest or state-machine version this build does
    /// not know.
    #[error("unsupported version: {0}")]
    Unsupported(String),
    /// A reader's position was purged: the log now starts at `first`.
    #[error("position {position} was purged; the log now starts at LSN {first}")]
    PurgedPast {
        /// The LSN the reader was to read next.
        position: u64,
        /// The first LSN the log still holds.
        first: u64,
    },
}

impl Error {
    /// An I/O failure while doing `context` ("writing 00000001.wal"): [`Error::DiskFull`] when
    /// the device is out of space (ENOSPC), else [`Error::Io`].
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        if source.raw_os_error() == Some(28) {
            return Error::DiskFull { context: context.into() };
        }
        Error::Io { context: context.into(), source }
    }

    /// True when the operation certainly left nothing in the log (docs/invariants.md I1 "Rejected");
    /// false when the log decides (Indeterminate).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self,
            Error::StaleEpoch { .. }
                | Error::EpochNotAdvanced { .. }
                | Error::TooLarge { .. }
                | Error::InvalidArgument(_)
                | Error::Rejected(_)
                | Error::ReadOnly
                | Error::Busy
                | Error::Locked(_)
                | Error::NotFound(_)
        )
    }
}

/// The result of the log's operations, [`Error`] by default.
pub type Result<T, E = Error> = std::result::Result<T, E>;
