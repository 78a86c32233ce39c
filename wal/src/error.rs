//! Errors and the verdict vocabulary of docs/invariants.md, shared by the engine and the verifier.

use std::fmt;
use std::io;

/// What was found wrong, with enough detail to explain it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DamageKind {
    /// An all-zero record header where a record was expected.
    ZeroHeader,
    /// The file ends early: before its segment header's length, or inside a record.
    ShortAtEof,
    HeaderChecksum {
        expected: u32,
        actual: u32,
    },
    Checksum {
        expected: u32,
        actual: u32,
    },
    /// A length beyond the maximum or past the segment's data area.
    BadLength {
        payload_len: u64,
    },
    BadKind(u8),
    BadFlags(u8),
    NonZeroReserved,
    NonZeroPadding,
    /// Bytes after the end of the data (or in the footer slot) that should be zero.
    NonZeroTail,
    SeqGap {
        expected: u64,
        found: u64,
    },
    ChainBreak {
        expected: u32,
        found: u32,
    },
    LsnGap {
        expected: u64,
        found: u64,
    },
    StaleEpoch {
        current: u64,
        found: u64,
    },
    /// Batch frames and the records they declare disagree.
    BadFrame(&'static str),
    BadState(&'static str),
    BadSegmentHeader(&'static str),
    BadFooter(&'static str),
    ForeignSegment,
    MissingSegment {
        segment: u64,
    },
    MissingFooter,
    MissingPurgeFloor,
    BadMetaFile(&'static str),
    /// `wal.close` names the clean close `wal.meta` records but does not hold the state the
    /// walk found (only a full scan reads both).
    BadCloseFile(&'static str),
    UnsupportedVersion(u32),
    /// A segment header, its checksum valid, with flags this build does not know: written by a
    /// newer version (FORMAT.md section 2.1).
    UnsupportedSegmentFlags(u8),
    /// A name the log owns (a segment's, `wal.meta`, `wal.close`) is not a regular file in the
    /// log directory: a FIFO, a socket, a device, a directory or a symbolic link (FORMAT.md
    /// section 1). It is not read.
    NotRegularFile(Box<crate::storage::NotRegularFile>),
}

impl fmt::Display for DamageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DamageKind::ZeroHeader => write!(f, "all-zero record header"),
            DamageKind::ShortAtEof => write!(f, "file ends early (shorter than its segment length)"),
            DamageKind::HeaderChecksum { expected, actual } => {
                write!(f, "header checksum mismatch (stored {expected:#010x}, computed {actual:#010x})")
            }
            DamageKind::Checksum { expected, actual } => {
                write!(f, "record checksum mismatch (stored {expected:#010x}, computed {actual:#010x})")
            }
            DamageKind::BadLength { payload_len } => {
                write!(f, "impossible payload length {payload_len}")
            }
            DamageKind::BadKind(k) => write!(f, "unknown record kind {k}"),
            DamageKind::BadFlags(x) => write!(f, "flags {x:#04x} not allowed for this kind"),
            DamageKind::NonZeroReserved => write!(f, "non-zero reserved bytes"),
            DamageKind::NonZeroPadding => write!(f, "non-zero padding"),
            DamageKind::NonZeroTail => write!(f, "non-zero bytes where the segment must be zero"),
            DamageKind::SeqGap { expected, found } => {
                write!(f, "record sequence gap (expected {expected}, found {found})")
            }
            DamageKind::ChainBreak { expected, found } => {
                write!(f, "checksum chain break (expected link {expected:#010x}, found {found:#010x})")
            }
            DamageKind::LsnGap { expected, found } => {
                write!(f, "LSN gap (expected {expected}, found {found})")
            }
            DamageKind::StaleEpoch { current, found } => {
                write!(f, "stale writer epoch {found} (current {current})")
            }
            DamageKind::BadFrame(w) => write!(f, "bad batch frame: {w}"),
            DamageKind::BadState(w) => write!(f, "bad state record: {w}"),
            DamageKind::BadSegmentHeader(w) => write!(f, "bad segment header: {w}"),
            DamageKind::BadFooter(w) => write!(f, "bad footer: {w}"),
            DamageKind::ForeignSegment => write!(f, "segment belongs to another log"),
            DamageKind::MissingSegment { segment } => write!(f, "segment {segment} is missing"),
            DamageKind::MissingFooter => {
                write!(f, "sealed segment has no footer but a later segment holds data")
            }
            DamageKind::MissingPurgeFloor => write!(f, "the purge floor segment is missing"),
            DamageKind::BadMetaFile(w) => write!(f, "bad wal.meta: {w}"),
            DamageKind::BadCloseFile(w) => {
                write!(f, "bad wal.close: {w} (the log's records are intact; without the file an open walks the last segment)")
            }
            DamageKind::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            DamageKind::NotRegularFile(n) => write!(f, "{n} (the log never makes one)"),
            DamageKind::UnsupportedSegmentFlags(v) => {
                write!(f, "segment flags {v:#04x} that this version does not know (a newer writer's)")
            }
        }
    }
}

/// The CRC verdict of docs/invariants.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrcVerdict {
    Ok,
    TornTail,
    CorruptTail,
    Corrupt,
    UnsupportedVersion,
}

impl CrcVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            CrcVerdict::Ok => "OK",
            CrcVerdict::TornTail => "TORN_TAIL",
            CrcVerdict::CorruptTail => "CORRUPT_TAIL",
            CrcVerdict::Corrupt => "CORRUPT",
            CrcVerdict::UnsupportedVersion => "UNSUPPORTED_VERSION",
        }
    }

    /// walcheck's exit code for this verdict.
    pub fn exit_code(self) -> i32 {
        match self {
            CrcVerdict::Ok => 0,
            CrcVerdict::TornTail => 1,
            CrcVerdict::CorruptTail => 2,
            CrcVerdict::Corrupt => 3,
            CrcVerdict::UnsupportedVersion => 6,
        }
    }
}

impl fmt::Display for CrcVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Damage found in a log, classified, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub verdict: CrcVerdict,
    pub kind: DamageKind,
    /// Segment sequence of the file holding the damage.
    pub segment: u64,
    /// Byte offset of the damaged record (or region) in that file.
    pub offset: u64,
    /// The LSN the next entry would have had at that point.
    pub lsn: u64,
    /// The record sequence expected at that point.
    pub seq: u64,
    /// Where a cut would start (the first byte of the damaged batch)...
    pub batch_start: u64,
    /// ...and the LSN the first entry of that batch has: a cut loses entries from it on.
    pub batch_lsn: u64,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at segment {} offset {} (LSN {}, record {}): {}",
            self.verdict, self.segment, self.offset, self.lsn, self.seq, self.kind
        )
    }
}

/// Errors of the log API. [`Error::is_rejected`] tells the two kinds of docs/invariants.md I1 apart.
#[derive(Debug)]
pub enum Error {
    /// An I/O error, with what was being done.
    Io { context: String, source: io::Error },
    /// The device is full (or the configured budget is spent); the unsynced tail was withdrawn
    /// and the log remains usable.
    DiskFull { context: String },
    /// A previous write or sync failed; the log accepts nothing until it is reopened.
    Fenced { cause: String },
    /// The log is damaged in a way the recovery mode does not repair.
    Damaged(Damage),
    /// Another process holds the directory lock.
    Locked(String),
    /// An append carried a writer epoch older than the log's.
    StaleEpoch { current: u64, given: u64 },
    /// An append carried a writer epoch newer than the log's: call `advance_epoch` first.
    EpochNotAdvanced { current: u64, given: u64 },
    /// A payload larger than the log accepts.
    TooLarge { len: u64, max: u64 },
    /// Arguments that make no sense (named in the message).
    InvalidArgument(String),
    /// The directory holds no log (and `create` was not asked for).
    NotFound(String),
    /// A write on a read-only handle (or on a log that is closing).
    ReadOnly,
    /// The I/O thread's queue is full and the caller asked not to wait.
    Busy,
    /// A snapshot file is damaged or does not rebuild the state it records.
    BadSnapshot { name: String, what: String },
    /// A snapshot or checkpoint names a format, digest or state-machine version this build does
    /// not know.
    Unsupported(String),
    /// A reader's position was purged: the log now starts at `first`.
    PurgedPast { position: u64, first: u64 },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
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
                | Error::ReadOnly
                | Error::Busy
                | Error::Locked(_)
                | Error::NotFound(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "I/O error while {context}: {source}"),
            Error::DiskFull { context } => write!(f, "disk full while {context}"),
            Error::Fenced { cause } => {
                write!(f, "log is fenced after a failed write or sync ({cause}); reopen it")
            }
            Error::Damaged(d) => write!(f, "log is damaged: {d}"),
            Error::Locked(w) => write!(f, "log is locked: {w}"),
            Error::StaleEpoch { current, given } => {
                write!(f, "rejected: writer epoch {given} is older than the log's epoch {current}")
            }
            Error::EpochNotAdvanced { current, given } => {
                write!(f, "rejected: writer epoch {given} is newer than the log's epoch {current}; advance it first")
            }
            Error::TooLarge { len, max } => {
                write!(f, "rejected: payload of {len} bytes exceeds the maximum {max}")
            }
            Error::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            Error::NotFound(w) => write!(f, "no log: {w}"),
            Error::ReadOnly => write!(f, "the log was opened read-only or is closing"),
            Error::Busy => write!(f, "rejected: the queue is full"),
            Error::BadSnapshot { name, what } => write!(f, "snapshot {name} is unusable: {what}"),
            Error::Unsupported(w) => write!(f, "unsupported version: {w}"),
            Error::PurgedPast { position, first } => {
                write!(f, "position {position} was purged; the log now starts at LSN {first}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
