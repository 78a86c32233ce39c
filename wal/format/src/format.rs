//! On-disk layout: constants, the segment header, the record header and the payloads of the
//! fixed-layout record kinds. `FORMAT.md` at the repository root is the normative description;
//! this module mirrors it field by field. All integers are little-endian.
//!
//! ```text
//! segment file  {segment_seq:020}.wal, exactly `segment_len` bytes, zero-filled before use
//! +--------------------+------------------------------------+...zeros...+-------------------+
//! | SegmentHeader (64) | frame | records ... | frame | ...      |           | footer slot (2 KiB)|
//! +--------------------+------------------------------------+...........+-------------------+
//!
//! record = RecordHeader (48) | payload (payload_len) | zero padding to 8 bytes
//! ```
//!
//! Every byte of a segment is covered by a checksum or required to be zero.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic at the start of every segment. The high-bit byte and the CR LF / ^Z sequence catch
/// 7-bit and text-mode damage, as PNG's signature does.
pub const SEGMENT_MAGIC: [u8; 8] = *b"\x89WAL\r\n\x1a\n";
/// Magic at the start of the `wal.meta` file.
pub const META_MAGIC: [u8; 8] = *b"\x89WALMT\r\n";
/// The one format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

pub const SEGMENT_HEADER_LEN: usize = 64;
/// Segment header flag (byte 52): the segment was made of a recycled file and holds a stale
/// table (FORMAT.md section 2.2).
pub const SEGMENT_FLAG_RECYCLED: u8 = 1;
pub const RECORD_HEADER_LEN: usize = 48;
pub const META_FILE_LEN: usize = 64;
/// Record alignment inside a segment.
pub const ALIGN: usize = 8;
/// The tearing granularity assumed of the device (see FORMAT.md, "assumptions").
pub const SECTOR: usize = 512;
/// Reserved at the end of every segment for the sealing footer.
pub const FOOTER_SLOT_LEN: usize = 2048;
/// Sparse offset index points a footer may hold.
pub const MAX_INDEX_POINTS: usize = 64;
pub const MIN_SEGMENT_LEN: u32 = 64 * 1024;
pub const MAX_SEGMENT_LEN: u32 = 1 << 30;
/// Hard upper bound on any payload, checked before anything is allocated or read.
pub const MAX_PAYLOAD_LEN: u32 = 16 << 20;
/// Metadata: at most this many keys, each value at most this long.
pub const MAX_META_KEYS: usize = 16;
pub const MAX_META_VALUE_LEN: usize = 256;

const _: () = assert!(std::mem::size_of::<SegmentHeader>() == SEGMENT_HEADER_LEN);
const _: () = assert!(std::mem::size_of::<RecordHeader>() == RECORD_HEADER_LEN);
const _: () = assert!(std::mem::size_of::<MetaFile>() == META_FILE_LEN);
const _: () = assert!(RECORD_HEADER_LEN.is_multiple_of(ALIGN) && SEGMENT_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(FOOTER_SLOT_LEN.is_multiple_of(SECTOR));
const _: () =
    assert!(RECORD_HEADER_LEN + FOOTER_FIXED_LEN + MAX_INDEX_POINTS * INDEX_POINT_LEN <= FOOTER_SLOT_LEN);
const _: () = assert!((MIN_SEGMENT_LEN as usize).is_multiple_of(SECTOR));

/// Round `n` up to the record alignment.
pub const fn align_up(n: usize) -> usize {
    (n + ALIGN - 1) & !(ALIGN - 1)
}

/// Total on-disk size of a record with `payload_len` payload bytes.
pub const fn record_len(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + align_up(payload_len)
}

/// First byte of the footer slot of a segment of `segment_len` bytes; data ends before it.
pub const fn footer_offset(segment_len: u32) -> usize {
    segment_len as usize - FOOTER_SLOT_LEN
}

/// The 64-byte header at offset 0 of every segment. Written with the segment's first batch.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct SegmentHeader {
    pub magic: [u8; 8],
    pub format_version: U32,
    pub segment_len: U32,
    pub log_id: [u8; 16],
    pub segment_seq: U64,
    pub first_record_seq: U64,
    /// The checksum of the previous segment's last record (its footer); 0 for a log's first segment.
    pub prev_crc: U32,
    /// Byte 0: flags ([`SEGMENT_FLAG_RECYCLED`]); the rest zero.
    pub reserved: [u8; 8],
    /// crc32c of bytes 0..60.
    pub header_crc: U32,
}

impl SegmentHeader {
    pub fn new(
        log_id: [u8; 16],
        segment_len: u32,
        segment_seq: u64,
        first_record_seq: u64,
        prev_crc: u32,
    ) -> Self {
        let mut h = SegmentHeader {
            magic: SEGMENT_MAGIC,
            format_version: U32::new(FORMAT_VERSION),
            segment_len: U32::new(segment_len),
            log_id,
            segment_seq: U64::new(segment_seq),
            first_record_seq: U64::new(first_record_seq),
            prev_crc: U32::new(prev_crc),
            reserved: [0; 8],
            header_crc: U32::new(0),
        };
        h.header_crc = U32::new(h.compute_crc());
        h
    }

    pub fn compute_crc(&self) -> u32 {
        let b = self.as_bytes();
        crc32c::crc32c(b.get(..60).unwrap_or_default())
    }

    /// The header of a segment made of a recycled file: it holds a stale table and its data ends
    /// before it (FORMAT.md section 2.2).
    pub fn recycled(mut self) -> Self {
        self.reserved[0] |= SEGMENT_FLAG_RECYCLED;
        self.header_crc = U32::new(self.compute_crc());
        self
    }

    /// The header at the start of `bytes` if it checks out on its own (magic and checksum;
    /// whether it fits the log is judged where the segment is walked).
    pub fn self_valid(bytes: &[u8]) -> Option<SegmentHeader> {
        let h = SegmentHeader::read_from_bytes(bytes.get(..SEGMENT_HEADER_LEN)?).ok()?;
        (h.magic == SEGMENT_MAGIC && h.header_crc.get() == h.compute_crc()).then_some(h)
    }

    pub fn is_recycled(&self) -> bool {
        self.reserved[0] & SEGMENT_FLAG_RECYCLED != 0
    }

    /// Flags and reserved bytes hold nothing this version does not know.
    pub fn reserved_ok(&self) -> bool {
        self.reserved[0] & !SEGMENT_FLAG_RECYCLED == 0 && self.reserved[1..] == [0; 7]
    }

    // Where its data must end, `data_limit`, is in stale.rs, beside the stale table a recycled
    // segment's data ends before.

    /// The seed of the segment's checksum chain: the `prev_crc` of its first record. It binds the
    /// chain to the log id, the segment sequence, the previous segment's last checksum and the first
    /// record sequence, so bytes of another log, another slot or an older life never validate.
    pub fn chain_seed(&self) -> u32 {
        let b = self.as_bytes();
        crc32c::crc32c(b.get(16..52).unwrap_or_default())
    }
}

/// The kind byte of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Opens a group-commit batch: `Frame` payload. Its `seq`/`prev_crc` are the previous batch's end.
    Frame = 1,
    /// A user entry; takes an LSN. Flag [`FLAG_GROUP_CONT`]: the next entry is in the same user batch.
    Entry = 2,
    /// The online state digest after applying every entry up to `lsn`: `Checkpoint` payload.
    Checkpoint = 3,
    /// Logical suffix truncation: entries with LSN > `lsn` are cut; the next entry is `lsn + 1`.
    Truncate = 4,
    /// Every earlier entry is cut; the next entry is `lsn` (starting a log at a given LSN).
    Reset = 5,
    /// The writer epoch becomes this record's `epoch`, strictly greater than the current one.
    Epoch = 6,
    /// A metadata value (what a Raft library stores besides entries): `key: u32, len: u32, value`.
    Meta = 7,
    /// First record of every segment's first batch: the log's state at the segment's start.
    State = 8,
    /// The sealing footer, in the footer slot at the end of the segment.
    Footer = 9,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Frame,
            2 => Kind::Entry,
            3 => Kind::Checkpoint,
            4 => Kind::Truncate,
            5 => Kind::Reset,
            6 => Kind::Epoch,
            7 => Kind::Meta,
            8 => Kind::State,
            9 => Kind::Footer,
            _ => return None,
        })
    }

    /// The only flags each kind may carry; every other flag bit must be zero.
    pub fn allowed_flags(self) -> u8 {
        match self {
            Kind::Entry => FLAG_GROUP_CONT,
            _ => 0,
        }
    }
}

/// On an entry: the next record is an entry of the same user batch (applied all or nothing).
pub const FLAG_GROUP_CONT: u8 = 1;

/// The 48-byte header in front of every record.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct RecordHeader {
    /// crc32c over header bytes 4..48 and the payload: covers `header_crc` and `prev_crc`, so the
    /// record checks itself and its link in the chain.
    pub crc: U32,
    /// crc32c over header bytes 8..48: the length is trusted before the payload is read, so a
    /// flipped length never passes for a record torn at the end of the file.
    pub header_crc: U32,
    pub kind: u8,
    pub flags: u8,
    pub reserved0: [u8; 2],
    pub payload_len: U32,
    /// Record sequence: +1 for every record of the log, never reused (drives the chain).
    pub seq: U64,
    /// The entry's LSN for `Entry`; the kind's LSN argument for `Checkpoint`, `Truncate`, `Reset`;
    /// the next LSN for the others.
    pub lsn: U64,
    /// The writer epoch in force when the record was written (the new one for `Epoch`).
    pub epoch: U64,
    /// The previous record's `crc` (the segment's chain seed for its first record).
    pub prev_crc: U32,
    pub reserved1: [u8; 4],
}

impl RecordHeader {
    pub fn compute_header_crc(&self) -> u32 {
        crc32c::crc32c(self.as_bytes().get(8..).unwrap_or_default())
    }

    /// The record checksum over this header (with `header_crc` already set) and the payload.
    pub fn compute_crc(&self, payload: &[u8]) -> u32 {
        let h = crc32c::crc32c(self.as_bytes().get(4..).unwrap_or_default());
        crc32c::crc32c_append(h, payload)
    }
}

/// Payload of [`Kind::Frame`].
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct FramePayload {
    /// The highest record sequence made durable by a completed sync before this batch was formed.
    /// Damage at or below it is never a torn write.
    pub durable_seq: U64,
    /// Records in the batch after this frame.
    pub record_count: U32,
    pub reserved: [u8; 4],
    /// Bytes in the batch after this frame record.
    pub batch_len: U64,
}
pub const FRAME_PAYLOAD_LEN: usize = 24;
const _: () = assert!(std::mem::size_of::<FramePayload>() == FRAME_PAYLOAD_LEN);

/// Payload of [`Kind::Checkpoint`].
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct CheckpointPayload {
    pub digest: [u8; 32],
    pub entity_count: U64,
    pub digest_version: U32,
    pub state_machine_version: U32,
}
pub const CHECKPOINT_PAYLOAD_LEN: usize = 48;
const _: () = assert!(std::mem::size_of::<CheckpointPayload>() == CHECKPOINT_PAYLOAD_LEN);

/// Fixed part of [`Kind::State`]; `meta_count` (key u32, len u32, value, pad to 8) items follow.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct StatePayload {
    /// The LSN the next entry takes.
    pub next_lsn: U64,
    /// The lowest live (written and not cut) LSN; meaningful only with `has_entries`.
    pub first_lsn: U64,
    /// 1 if the log holds at least one live entry (so `next_lsn - 1` is live).
    pub has_entries: u8,
    pub reserved: [u8; 3],
    pub meta_count: U32,
}
pub const STATE_FIXED_LEN: usize = 24;
const _: () = assert!(std::mem::size_of::<StatePayload>() == STATE_FIXED_LEN);

/// Fixed part of [`Kind::Footer`]; `index_count` [`IndexPoint`]s follow.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct FooterPayload {
    /// Every record before the footer is durable: always `footer.seq - 1`.
    pub durable_seq: U64,
    /// Offset just past the last data record (the rest of the data area is zero).
    pub data_end: U64,
    pub record_count: U32,
    pub entry_count: U32,
    /// Smallest and largest LSN of the entry records in the segment (as written; 0 if none).
    pub min_lsn: U64,
    pub max_lsn: U64,
    /// The smallest "keep below" bound of a `Truncate` (lsn + 1) or `Reset` (0) in the segment;
    /// `u64::MAX` when the segment cuts nothing.
    pub min_keep_lt: U64,
    pub cut_count: U32,
    pub index_count: U32,
}
pub const FOOTER_FIXED_LEN: usize = 56;
const _: () = assert!(std::mem::size_of::<FooterPayload>() == FOOTER_FIXED_LEN);

/// One point of a footer's sparse offset index: the batch frame at `offset` is followed by the
/// entry with LSN `lsn` (the next LSN at that frame).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct IndexPoint {
    pub lsn: U64,
    pub offset: U64,
}
pub const INDEX_POINT_LEN: usize = 16;

/// The `wal.meta` file: the log's identity, the purge floor and the last clean close.
/// Replaced atomically (temporary name, fsync, rename, directory fsync), so it never tears:
/// that is what lets it attest the footer a clean close wrote last.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct MetaFile {
    pub magic: [u8; 8],
    pub format_version: U32,
    /// The floor segment's expected `prev_crc`.
    pub floor_prev_crc: U32,
    pub log_id: [u8; 16],
    /// The first segment that must exist; older ones were purged.
    pub floor_segment_seq: U64,
    /// The floor segment's expected `first_record_seq`.
    pub floor_first_record_seq: U64,
    /// The segment a clean close sealed last (0: none), and its footer's checksum.
    pub closed_segment_seq: U64,
    pub closed_footer_crc: U32,
    /// crc32c of bytes 0..60.
    pub crc: U32,
}

impl MetaFile {
    pub fn new(log_id: [u8; 16], floor_seq: u64, floor_first_record_seq: u64, floor_prev_crc: u32) -> Self {
        MetaFile {
            magic: META_MAGIC,
            format_version: U32::new(FORMAT_VERSION),
            floor_prev_crc: U32::new(floor_prev_crc),
            log_id,
            floor_segment_seq: U64::new(floor_seq),
            floor_first_record_seq: U64::new(floor_first_record_seq),
            closed_segment_seq: U64::new(0),
            closed_footer_crc: U32::new(0),
            crc: U32::new(0),
        }
        .sealed()
    }

    /// The same meta with a clean close of `segment` (footer checksum `footer_crc`) recorded.
    pub fn with_close(mut self, segment: u64, footer_crc: u32) -> Self {
        self.closed_segment_seq = U64::new(segment);
        self.closed_footer_crc = U32::new(footer_crc);
        self.sealed()
    }

    fn sealed(mut self) -> Self {
        self.crc = U32::new(self.compute_crc());
        self
    }

    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(self.as_bytes().get(..60).unwrap_or_default())
    }
}

/// File name of a segment.
pub fn segment_file_name(seq: u64) -> String {
    format!("{seq:020}.wal")
}

/// Parses a segment file name; `None` for any other file.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    parse_seq_name(name, ".wal")
}

/// The sequence of a name made of 20 decimal digits and `suffix`.
fn parse_seq_name(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// File name of a purged segment kept for reuse (FORMAT.md section 1), named by the sequence
/// it had: readers ignore it, a writer overwrites it with zeros before it becomes a segment.
pub fn recycle_file_name(seq: u64) -> String {
    format!("{seq:020}.recycle")
}

/// Parses a recycled segment's file name; `None` for any other file.
pub fn parse_recycle_file_name(name: &str) -> Option<u64> {
    parse_seq_name(name, ".recycle")
}

pub const META_FILE_NAME: &str = "wal.meta";
pub const META_TMP_NAME: &str = "wal.meta.tmp";
/// The logical state a clean close left (section 6.1).
pub const CLOSE_FILE_NAME: &str = "wal.close";
pub const CLOSE_TMP_NAME: &str = "wal.close.tmp";
pub const CLOSE_MAGIC: [u8; 8] = *b"\x89WALCS\r\n";

/// The fixed start of `wal.close`: which clean close it belongs to. A [`Kind::State`] payload
/// follows, then a CRC-32C of everything before it.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, PartialEq, Eq)]
#[repr(C)]
pub struct CloseHeader {
    pub magic: [u8; 8],
    pub format_version: U32,
    /// Bytes of the State payload that follows.
    pub state_len: U32,
    /// The segment the close sealed and its footer's `crc`: what `wal.meta` must also name.
    pub closed_segment_seq: U64,
    pub closed_footer_crc: U32,
    pub reserved: U32,
}
pub const CLOSE_HEADER_LEN: usize = 32;
const _: () = assert!(std::mem::size_of::<CloseHeader>() == CLOSE_HEADER_LEN);
pub const LOCK_FILE_NAME: &str = "LOCK";

/// True if every byte is zero (the hot path of zero checks; auto-vectorised).
pub fn is_zero(b: &[u8]) -> bool {
    // The OR of a fixed-size block compiles to vector instructions: one branch per 64 bytes.
    let mut blocks = b.chunks_exact(64);
    for block in &mut blocks {
        if block.iter().fold(0u8, |acc, &x| acc | x) != 0 {
            return false;
        }
    }
    blocks.remainder().iter().fold(0u8, |acc, &x| acc | x) == 0
}

/// Index of the first non-zero byte.
pub fn first_nonzero(b: &[u8]) -> Option<usize> {
    let mut at = 0;
    for chunk in b.chunks(4096) {
        if !is_zero(chunk) {
            return chunk.iter().position(|&x| x != 0).map(|p| at + p);
        }
        at += chunk.len();
    }
    None
}

/// Index just past the last non-zero byte.
pub fn end_of_nonzero(b: &[u8]) -> usize {
    let mut end = b.len();
    while end > 0 {
        let start = end.saturating_sub(4096);
        let chunk = b.get(start..end).unwrap_or_default();
        if !is_zero(chunk) {
            return start + chunk.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1);
        }
        end = start;
    }
    0
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_reject_others() {
        assert_eq!(parse_segment_file_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name("42.wal"), None);
        assert_eq!(parse_segment_file_name("0000000000000000004x.wal"), None);
        assert_eq!(parse_segment_file_name("wal.meta"), None);
        assert_eq!(parse_recycle_file_name(&recycle_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name(&recycle_file_name(42)), None);
        assert_eq!(parse_recycle_file_name(&segment_file_name(42)), None);
    }

    #[test]
    fn is_zero_finds_any_nonzero_byte() {
        let mut b = vec![0u8; 77];
        assert!(is_zero(&b));
        for i in 0..b.len() {
            b[i] = 1;
            assert!(!is_zero(&b), "byte {i}");
            b[i] = 0;
        }
    }

    #[test]
    fn chain_seed_depends_on_every_identity_field() {
        let base = SegmentHeader::new([7; 16], MIN_SEGMENT_LEN, 3, 100, 0xdead_beef);
        let seeds = [
            SegmentHeader::new([8; 16], MIN_SEGMENT_LEN, 3, 100, 0xdead_beef).chain_seed(),
            SegmentHeader::new([7; 16], MIN_SEGMENT_LEN, 4, 100, 0xdead_beef).chain_seed(),
            SegmentHeader::new([7; 16], MIN_SEGMENT_LEN, 3, 101, 0xdead_beef).chain_seed(),
            SegmentHeader::new([7; 16], MIN_SEGMENT_LEN, 3, 100, 0xdead_beee).chain_seed(),
        ];
        for s in seeds {
            assert_ne!(s, base.chain_seed());
        }
    }
}
