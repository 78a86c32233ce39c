//! The verdict vocabulary of docs/invariants.md: what damage was found (`DamageKind`), where
//! (`Damage`: segment, offset, LSN, record), and how it is classified (`CrcVerdict`). The engine
//! reports it, the verifier prints it, the decision table (`classify`) produces it.

use std::fmt;
use std::io;

/// What was found wrong, with enough detail to explain it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DamageKind {
    /// An all-zero record header where a record was expected.
    ZeroHeader,
    /// The file ends early: before its segment header's length, or inside a record.
    ShortAtEof,
    /// A header fails its own checksum: a record header's `header_crc` (over its bytes 8..48)
    /// or a segment header's (over its bytes 0..60).
    HeaderChecksum {
        /// The checksum stored in the header.
        expected: u32,
        /// The checksum computed over the bytes read.
        actual: u32,
    },
    /// A record whose header checks out fails its `crc` (the header's bytes 4..48 and the
    /// payload).
    Checksum {
        /// The checksum stored in the record header.
        expected: u32,
        /// The checksum computed over the bytes read.
        actual: u32,
    },
    /// A length beyond the maximum or past the segment's data area.
    BadLength {
        /// The payload length the record header declares, in bytes.
        payload_len: u64,
    },
    /// A record kind byte that is not one of FORMAT.md section 3.1 (the byte read).
    BadKind(u8),
    /// Record flags not allowed for the record's kind (the byte read): only entries may carry
    /// `GROUP_CONT`.
    BadFlags(u8),
    /// Reserved bytes of a record or segment header that are not zero.
    NonZeroReserved,
    /// Non-zero padding: after a record's payload, between the keys of a State record, or
    /// between a batch's end and the next sector boundary.
    NonZeroPadding,
    /// Bytes after the end of the data (or in the footer slot) that should be zero.
    NonZeroTail,
    /// A record sequence (or a segment header's first record sequence) that does not follow
    /// the one before it.
    SeqGap {
        /// The record sequence that should have come next.
        expected: u64,
        /// The record sequence found.
        found: u64,
    },
    /// A `prev_crc` that is not the previous record's checksum (or, for a segment's first
    /// record, its chain seed; for a segment header, the previous segment's last checksum).
    ChainBreak {
        /// The link the chain requires.
        expected: u32,
        /// The link stored.
        found: u32,
    },
    /// An entry whose LSN is not the log's next LSN at that point.
    LsnGap {
        /// The next LSN the records before it left.
        expected: u64,
        /// The LSN the entry carries.
        found: u64,
    },
    /// A record written under a writer epoch older than the one in force (or an Epoch record
    /// that does not raise it).
    StaleEpoch {
        /// The writer epoch in force at that point.
        current: u64,
        /// The epoch the record carries.
        found: u64,
    },
    /// Batch frames and the records they declare disagree.
    BadFrame(&'static str),
    /// A record that checks out but breaks a rule of the log's logical state (FORMAT.md section
    /// 3.1): a State record that disagrees with the log before it, a record before the
    /// segment's State, an epoch newer than the log's, an LSN overflow; the text says which.
    BadState(&'static str),
    /// A segment header that is unreadable, or checks out but breaks a rule (magic, sequence,
    /// length, recycled without a valid stale table), or an empty segment before one holding
    /// data; the text says which.
    BadSegmentHeader(&'static str),
    /// A footer that is not one, or checks out but disagrees with its segment (or with the
    /// footer a clean close recorded); the text says which.
    BadFooter(&'static str),
    /// A segment header whose log id is not the log's: the file belongs to another log.
    ForeignSegment,
    /// A segment the log needs does not exist: one in the gap-free run from the purge floor,
    /// or the one `wal.meta` says a clean close sealed last.
    MissingSegment {
        /// The sequence of the missing segment.
        segment: u64,
    },
    /// A sealed segment has no footer, yet a later segment holds data (rotation writes the
    /// footer first).
    MissingFooter,
    /// The segment `wal.meta` names as the purge floor (the first that must exist) is missing.
    MissingPurgeFloor,
    /// `wal.meta` is missing, of the wrong length, fails its checksum or names an impossible
    /// floor; the text says which.
    BadMetaFile(&'static str),
    /// `wal.close` names the clean close `wal.meta` records but does not hold the state the
    /// walk found (only a full scan reads both).
    BadCloseFile(&'static str),
    /// A segment header or `wal.meta` with a format version this build does not read (the
    /// version found).
    UnsupportedVersion(u32),
    /// A segment header, its checksum valid, with flags this build does not know: written by a
    /// newer version (FORMAT.md section 2.1).
    UnsupportedSegmentFlags(u8),
    /// A name the log owns (a segment's, `wal.meta`, `wal.close`) is not a regular file in the
    /// log directory: a FIFO, a socket, a device, a directory or a symbolic link (FORMAT.md
    /// section 1). It is not read.
    NotRegularFile(Box<NotRegularFile>),
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
    /// OK: every record's checksum and the chain check out.
    Ok,
    /// TORN_TAIL: the last batch is incomplete with evidence of a torn write, and everything
    /// before it is intact. A writer cuts it (`RecoveryMode::TruncateTornTail`).
    TornTail,
    /// CORRUPT_TAIL: the last batch is damaged without evidence of a torn write. It may hold
    /// acknowledged data, so a writer refuses to open.
    CorruptTail,
    /// CORRUPT: damage before the last batch, a chain break, a gap, or a missing or
    /// non-regular file; never skipped.
    Corrupt,
    /// UNSUPPORTED_VERSION: a format version (or segment header flags) this build does not
    /// know: a newer version wrote the log.
    UnsupportedVersion,
}

impl CrcVerdict {
    /// The verdict's word as docs/invariants.md and walcheck spell it (`"TORN_TAIL"`, say).
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

/// The verdict's word, as [`CrcVerdict::as_str`] spells it (`"TORN_TAIL"`, say).
#[cfg(feature = "serde")]
impl serde::Serialize for CrcVerdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Damage found in a log, classified, with where it is. With the `serde` feature it serializes
/// as walcheck's JSON shows it: the verdict and the kind as words (the kind's `Display` text),
/// then where, under the fields' names.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Damage {
    /// How the damage is classified (FORMAT.md section 8): never [`CrcVerdict::Ok`].
    pub verdict: CrcVerdict,
    /// What was found wrong.
    #[cfg_attr(feature = "serde", serde(serialize_with = "serialize_display"))]
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

/// A value as its `Display` text (a [`Damage`]'s kind).
#[cfg(feature = "serde")]
fn serialize_display<S: serde::Serializer>(v: &impl fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// A name the log owns that is not a regular file: never read, never written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} is {what}, not a regular file (not read)")]
pub struct NotRegularFile {
    /// The file's name in the log directory.
    pub name: String,
    /// What it is instead: "a FIFO", "a symbolic link to a regular file", ...
    pub what: &'static str,
}

impl NotRegularFile {
    /// The [`NotRegularFile`] an I/O error carries, if it is one.
    pub fn of(e: &io::Error) -> Option<&NotRegularFile> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<NotRegularFile>())
    }

    /// The I/O error that carries it (kind `InvalidInput`): how the storage seam refuses the name.
    pub fn io_error(name: &str, what: &'static str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, NotRegularFile { name: name.to_string(), what })
    }
}
