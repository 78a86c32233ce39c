//! Walking the bytes of one segment: decoding records, checking the checksum chain, the batch
//! structure and the logical rules, and classifying the first damage.
//!
//! The walker is pull-based ([`Walker::next`]) so that recovery, the replay iterator and the
//! verifier share it. It works on a byte slice (a map, or a buffer filled with pread) and never
//! allocates per record.
//!
//! The decision table that classifies the first damage lives in [`crate::classify`].
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::error::DamageKind;
use crate::format::*;
use crate::stale::{Owner, StaleTable};
use std::collections::BTreeMap;
use std::fmt;
use zerocopy::FromBytes;

/// The log's logical state at a point of the record stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logical {
    /// The LSN the next entry takes.
    pub next_lsn: u64,
    /// The lowest live LSN, if any entry is live.
    pub first_lsn: Option<u64>,
    /// The writer epoch in force.
    pub epoch: u64,
    /// Metadata values by key.
    /// Shared copy-on-write: the writer snapshots this state at every flush and sync, and the
    /// map only changes on a metadata record.
    pub meta: std::sync::Arc<BTreeMap<u32, Vec<u8>>>,
}

/// One valid record, borrowed from the segment's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec<'a> {
    pub kind: Kind,
    pub flags: u8,
    pub seq: u64,
    pub lsn: u64,
    pub epoch: u64,
    pub payload: &'a [u8],
    /// Offset of the record header in the segment.
    pub offset: u64,
    pub crc: u32,
    pub prev_crc: u32,
}

/// The first damage in a segment, before it is classified against the rest of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDamage {
    pub kind: DamageKind,
    pub offset: u64,
    /// First byte of the batch the damage is in (where a cut would start).
    pub batch_start: u64,
    /// The bytes a crash would have had to drop for this damage to be a torn write
    /// (FORMAT.md section 8.1): a blank sector among them is the evidence. For a record, the
    /// bytes the walk judged it by (its header, or the whole record as its header, which checks
    /// out, declares it); after the end of the data, the sector where the next batch's frame
    /// would start. `None` where no crash can produce the damage at all (non-zero padding
    /// after a batch, bytes after a footer, a file shorter than its header says).
    pub torn_span: Option<(u64, u64)>,
    pub header_ok: bool,
    pub body_ok: bool,
    pub semantic: bool,
    /// Record sequence expected at the damage.
    pub seq: u64,
    /// Record sequence of the damaged batch's first record (its frame; `seq` when the damage is
    /// not inside a batch whose frame checked out): a later `durable_seq` at or past it says the
    /// whole batch was synced, so a cut from its start would remove synced records.
    pub batch_seq: u64,
    /// LSN the next entry would have had.
    pub lsn: u64,
    /// The next LSN at the start of the damaged batch: a cut there loses entries from it on.
    pub batch_lsn: u64,
}

/// One step of a walk.
#[derive(Debug)]
pub enum Step<'a> {
    Record(Rec<'a>),
    /// The segment ended cleanly (sealed or not).
    End,
    Damage(RawDamage),
}

/// One step of a walk over a [`Window`]: a [`Step`], or the bytes the walk needs next.
#[derive(Debug)]
pub enum Walked<'a> {
    Record(Rec<'a>),
    End,
    Damage(RawDamage),
    /// The next step needs the file's bytes `from..end`, which the window does not hold (and the
    /// window does not reach the end of the file). Call again with a window starting at or
    /// before `from`; nothing the walk has done is lost.
    NeedMore {
        from: u64,
        end: u64,
    },
}

/// Judges a batch frame where a footer index point names one (`offset`, with the footer's
/// `data_end`) when the window does not hold it: true only when
/// `decode(file, offset, data_end)` would give a frame. A `false` from a probe that could not
/// decide is damage, so a walker that streams windows must check such damage again whole.
pub type FrameProbe<'p> = &'p dyn Fn(u64, u64) -> bool;

/// Bytes of a segment file seen through a window: `bytes` are the file's bytes from offset
/// `base`, and the file is `file_len` bytes long. Offsets are always offsets in the file.
#[derive(Clone, Copy)]
pub struct Window<'a> {
    bytes: &'a [u8],
    base: usize,
    file_len: usize,
    probe: Option<FrameProbe<'a>>,
}

impl fmt::Debug for Window<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Window({}..{} of {})", self.base, self.end(), self.file_len)
    }
}

impl<'a> Window<'a> {
    /// The whole file.
    pub fn whole(bytes: &'a [u8]) -> Self {
        Window { bytes, base: 0, file_len: bytes.len(), probe: None }
    }

    /// `bytes` of a file of `file_len` bytes, starting at offset `base`.
    pub fn new(bytes: &'a [u8], base: u64, file_len: u64, probe: Option<FrameProbe<'a>>) -> Self {
        let base = base as usize;
        let file_len = (file_len as usize).max(base + bytes.len());
        Window { bytes, base, file_len, probe }
    }

    /// Offset just past the window's last byte.
    #[inline]
    pub fn end(&self) -> usize {
        self.base + self.bytes.len()
    }

    /// Whether the bytes up to `end` can be judged from this window: it holds them, or it
    /// reaches the end of the file (so whatever it lacks, the file lacks too).
    #[inline]
    pub(crate) fn covers(&self, end: usize) -> bool {
        end <= self.end() || self.end() >= self.file_len
    }

    /// The file's bytes `start..end`, if the window holds them.
    #[inline]
    pub(crate) fn get(&self, start: usize, end: usize) -> Option<&'a [u8]> {
        self.bytes.get(start.checked_sub(self.base)?..end.checked_sub(self.base)?)
    }
}

/// What the start of a segment file says.
#[derive(Debug)]
pub enum Start {
    /// Every byte is zero, or blank by a valid stale table (`recycled`): a pre-created segment
    /// that never took a record.
    Spare {
        recycled: bool,
    },
    Segment(SegmentHeader),
    Damage(RawDamage),
    /// Written by a newer version: a format version or segment flags this build does not know.
    Unsupported(DamageKind),
}

/// What a segment is expected to be, from the log around it.
#[derive(Clone, Debug)]
pub struct Expect {
    pub segment_seq: u64,
    pub log_id: [u8; 16],
    /// `None` when the previous segment is not known (first segment read, or after a fast open).
    pub first_record_seq: Option<u64>,
    pub prev_crc: Option<u32>,
}

/// Decoded summary of a footer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FooterInfo {
    pub payload: FooterPayload,
    pub index: Vec<IndexPoint>,
    pub seq: u64,
    pub crc: u32,
}

/// Is a file of `file_len` bytes, whose first bytes are `bytes` and the rest zero, a spare made
/// of a recycled file: a valid stale table, every sector before it blank, a zero footer slot
/// (FORMAT.md section 2.2)?
fn recycled_spare(bytes: &[u8], file_len: usize, owner: Owner) -> bool {
    let Some(len) = segment_len_of(file_len) else { return false };
    let Some(t) = StaleTable::find(bytes, len, owner) else { return false };
    let limit = crate::stale::table_offset(len);
    crate::stale::first_nonblank(Some(&t), bytes.get(..limit).unwrap_or_default(), 0).is_none()
        && bytes.get(footer_offset(len)..).is_none_or(is_zero)
}

/// A file length as a segment length, if it can be one.
pub fn segment_len_of(file_len: usize) -> Option<u32> {
    let len = u32::try_from(file_len).ok()?;
    ((MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&len) && file_len.is_multiple_of(SECTOR)).then_some(len)
}

/// The segment `expect` describes, as a stale table names its owner.
pub fn owner_of(expect: &Expect) -> Owner {
    Owner { log_id: expect.log_id, segment_seq: expect.segment_seq }
}

/// The stale table of the whole segment file `bytes` whose header says it was recycled
/// (`Err` with the damage when the table does not check out), or of `owner`'s file whose
/// header is unreadable (`header` `None`), if it holds one (`Ok(None)` when it does not).
pub fn stale_of(
    bytes: &[u8],
    header: Option<&SegmentHeader>,
    owner: Owner,
) -> Result<Option<std::sync::Arc<StaleTable>>, RawDamage> {
    let recycled = header.is_some_and(SegmentHeader::is_recycled);
    if header.is_some() && !recycled {
        return Ok(None);
    }
    let owner = header.map_or(owner, Owner::of);
    let table = segment_len_of(bytes.len()).and_then(|len| StaleTable::find(bytes, len, owner));
    match (table, header) {
        (None, Some(h)) if recycled => Err(bad_stale_table(h)),
        (table, _) => Ok(table),
    }
}

/// The damage of a segment whose header says it was recycled and whose stale table does not
/// check out.
pub(crate) fn bad_stale_table(h: &SegmentHeader) -> RawDamage {
    let at = crate::stale::table_offset(h.segment_len.get()) as u64;
    RawDamage {
        kind: DamageKind::BadSegmentHeader("recycled, without a valid stale table"),
        offset: at,
        batch_start: at,
        torn_span: None,
        header_ok: true,
        body_ok: true,
        semantic: true,
        seq: h.first_record_seq.get(),
        batch_seq: h.first_record_seq.get(),
        lsn: 0,
        batch_lsn: 0,
    }
}

/// Reads and checks a segment header.
pub fn read_start(bytes: &[u8], expect: &Expect) -> Start {
    read_start_in(bytes, bytes.len(), expect)
}

/// What a file of `file_len` bytes whose header is all zero, and which is not all zero, is:
/// a spare made of a recycled file (`recycled_spare`: see [`recycled_spare`]), else damage.
pub(crate) fn zero_header_start(recycled_spare: bool, file_len: usize, expect: &Expect) -> Start {
    if recycled_spare {
        return Start::Spare { recycled: true };
    }
    start_damage(DamageKind::ZeroHeader, false, false, file_len, expect)
}

/// Damage in the segment header of a file of `file_len` bytes.
fn start_damage(
    kind: DamageKind,
    semantic: bool,
    header_ok: bool,
    file_len: usize,
    expect: &Expect,
) -> Start {
    Start::Damage(RawDamage {
        kind,
        offset: 0,
        batch_start: 0,
        // The header is written with the segment's first batch into sector 0: a header that
        // does not check out is torn only when that whole sector is blank (dropped).
        torn_span: (!header_ok && file_len >= SECTOR).then_some((0, SEGMENT_HEADER_LEN as u64)),
        header_ok,
        body_ok: false,
        semantic,
        seq: expect.first_record_seq.unwrap_or(0),
        batch_seq: expect.first_record_seq.unwrap_or(0),
        lsn: 0,
        batch_lsn: 0,
    })
}

/// [`read_start`] for a file of `file_len` bytes of which `bytes` are the first. Unless `bytes`
/// is the whole file, it must hold a segment header that is not all zero, or every byte of the
/// file past it must be zero (a spare is judged on the whole file).
pub(crate) fn read_start_in(bytes: &[u8], file_len: usize, expect: &Expect) -> Start {
    let damage =
        |kind, semantic: bool, header_ok: bool| start_damage(kind, semantic, header_ok, file_len, expect);
    let Some(hb) = bytes.get(..SEGMENT_HEADER_LEN) else {
        if is_zero(bytes) {
            return Start::Spare { recycled: false };
        }
        return damage(DamageKind::ShortAtEof, false, false);
    };
    if is_zero(hb) {
        if is_zero(bytes) {
            return Start::Spare { recycled: false };
        }
        return zero_header_start(recycled_spare(bytes, file_len, owner_of(expect)), file_len, expect);
    }
    let Ok(h) = SegmentHeader::read_from_bytes(hb) else {
        return damage(DamageKind::BadSegmentHeader("unreadable"), false, false);
    };
    let actual = h.compute_crc();
    if h.header_crc.get() != actual {
        return damage(DamageKind::HeaderChecksum { expected: h.header_crc.get(), actual }, false, false);
    }
    if h.magic != SEGMENT_MAGIC {
        return damage(DamageKind::BadSegmentHeader("bad magic"), true, true);
    }
    if h.format_version.get() != FORMAT_VERSION {
        return Start::Unsupported(DamageKind::UnsupportedVersion(h.format_version.get()));
    }
    if h.reserved[0] & !SEGMENT_FLAG_RECYCLED != 0 {
        // The header's checksum holds: a newer writer set a flag this build cannot honour.
        return Start::Unsupported(DamageKind::UnsupportedSegmentFlags(h.reserved[0]));
    }
    if !h.reserved_ok() {
        return damage(DamageKind::NonZeroReserved, true, true);
    }
    if h.log_id != expect.log_id {
        return damage(DamageKind::ForeignSegment, true, true);
    }
    if h.segment_seq.get() != expect.segment_seq {
        return damage(DamageKind::BadSegmentHeader("sequence differs from the file name"), true, true);
    }
    let len = h.segment_len.get();
    if !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&len) || !(len as usize).is_multiple_of(SECTOR) {
        return damage(DamageKind::BadSegmentHeader("impossible segment length"), true, true);
    }
    if (file_len as u64) < u64::from(len) {
        // A segment file is its full length, zeros synced, before it takes a record, and
        // nothing ever shortens it: no crash leaves it shorter than its header says. Reported
        // where the file ends.
        let mut d = damage(DamageKind::ShortAtEof, true, true);
        if let Start::Damage(r) = &mut d {
            r.offset = file_len as u64;
        }
        return d;
    }
    if file_len as u64 > u64::from(len) {
        return damage(DamageKind::BadSegmentHeader("file longer than its segment length"), true, true);
    }
    if matches!(h.first_record_seq.get(), 0 | u64::MAX) {
        return damage(DamageKind::BadSegmentHeader("impossible first record sequence"), true, true);
    }
    if let Some(first) = expect.first_record_seq {
        if h.first_record_seq.get() != first {
            return damage(
                DamageKind::SeqGap { expected: first, found: h.first_record_seq.get() },
                true,
                true,
            );
        }
    }
    if let Some(prev) = expect.prev_crc {
        if h.prev_crc.get() != prev {
            return damage(DamageKind::ChainBreak { expected: prev, found: h.prev_crc.get() }, true, true);
        }
    }
    Start::Segment(h)
}

/// Outcome of decoding one record's bytes (no chain or logical checks).
pub(crate) struct Decoded<'a> {
    pub header: &'a RecordHeader,
    pub kind: Kind,
    pub payload: &'a [u8],
    pub total_len: usize,
}

pub(crate) struct DecodeError {
    pub kind: DamageKind,
    pub header_ok: bool,
    pub semantic: bool,
}

/// Why a record could not be decoded from a window.
pub(crate) enum DecodeFail {
    Bad(DecodeError),
    /// The record's bytes up to this offset are past the window's end.
    More(usize),
}

impl From<DecodeError> for DecodeFail {
    fn from(e: DecodeError) -> Self {
        DecodeFail::Bad(e)
    }
}

/// Decodes the record at `off`, which must end at or before `limit`.
pub(crate) fn decode(bytes: &[u8], off: usize, limit: usize) -> Result<Decoded<'_>, DecodeError> {
    match decode_in(&Window::whole(bytes), off, limit) {
        Ok(d) => Ok(d),
        Err(DecodeFail::Bad(e)) => Err(e),
        // A whole file holds every byte there is.
        Err(DecodeFail::More(_)) => {
            Err(DecodeError { kind: DamageKind::ShortAtEof, header_ok: false, semantic: false })
        }
    }
}

/// [`decode`] from a window: the same checks in the same order, and `More` when the window
/// ends before the bytes the next check needs.
#[inline]
pub(crate) fn decode_in<'a>(win: &Window<'a>, off: usize, limit: usize) -> Result<Decoded<'a>, DecodeFail> {
    let err = |kind, header_ok, semantic| DecodeError { kind, header_ok, semantic };
    if !win.covers(off + RECORD_HEADER_LEN) {
        return Err(DecodeFail::More(off + RECORD_HEADER_LEN));
    }
    let Some(hb) = win.get(off, off + RECORD_HEADER_LEN) else {
        return Err(err(DamageKind::ShortAtEof, false, false).into());
    };
    // Borrowed in place (every field is unaligned-safe): no copy per record.
    let Ok(header) = RecordHeader::ref_from_bytes(hb) else {
        return Err(err(DamageKind::ShortAtEof, false, false).into());
    };
    // Both checksums in one pass when the (not yet trusted) length allows reading the record:
    // they are pure functions of the bytes, so the checks below judge exactly as if each were
    // computed at its turn.
    let payload_len = header.payload_len.get();
    let end = off + record_len(payload_len as usize);
    let fused = (payload_len <= MAX_PAYLOAD_LEN && end <= win.file_len && end <= limit && win.covers(end))
        .then(|| win.get(off, off + RECORD_HEADER_LEN + payload_len as usize))
        .flatten()
        .map(|r| {
            let [c] = crate::crc::record_crcs([r]);
            c
        });
    let actual = fused.map_or_else(|| header.compute_header_crc(), |c| c.0);
    if actual != header.header_crc.get() {
        // Checked only on failure: a valid header is never all zero.
        if is_zero(hb) {
            return Err(err(DamageKind::ZeroHeader, false, false).into());
        }
        return Err(err(
            DamageKind::HeaderChecksum { expected: header.header_crc.get(), actual },
            false,
            false,
        )
        .into());
    }
    let Some(kind) = Kind::from_u8(header.kind) else {
        return Err(err(DamageKind::BadKind(header.kind), true, true).into());
    };
    if header.flags & !kind.allowed_flags() != 0 {
        return Err(err(DamageKind::BadFlags(header.flags), true, true).into());
    }
    if header.reserved0 != [0; 2] || header.reserved1 != [0; 4] {
        return Err(err(DamageKind::NonZeroReserved, true, true).into());
    }
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(err(DamageKind::BadLength { payload_len: payload_len.into() }, true, true).into());
    }
    let total_len = record_len(payload_len as usize);
    // A length that checks out but runs past the room it has (a batch's records their batch,
    // a batch the data area, a footer its slot) was never written so: no torn write changes a
    // header whose checksum holds. The room ends within the file for every walk of a whole
    // segment; past the file's end is the same broken rule.
    if end > limit {
        return Err(err(DamageKind::BadLength { payload_len: payload_len.into() }, true, true).into());
    }
    if end > win.file_len {
        return Err(err(DamageKind::ShortAtEof, true, true).into());
    }
    if !win.covers(end) {
        return Err(DecodeFail::More(end));
    }
    let body = off + RECORD_HEADER_LEN;
    let payload = win.get(body, body + payload_len as usize).unwrap_or_default();
    // The header (from byte 4) and the payload are contiguous: one checksum over both.
    let actual = fused.map_or_else(
        || crc32c::crc32c(win.get(off + 4, body + payload_len as usize).unwrap_or_default()),
        |c| c.1,
    );
    if actual != header.crc.get() {
        return Err(err(DamageKind::Checksum { expected: header.crc.get(), actual }, true, false).into());
    }
    if !is_zero(win.get(body + payload_len as usize, end).unwrap_or_default()) {
        return Err(err(DamageKind::NonZeroPadding, true, false).into());
    }
    Ok(Decoded { header, kind, payload, total_len })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Data,
    /// Checking that the rest of the data area, from `tail_start`, is zero; done up to `tail_at`.
    Tail,
    Footer,
    Done,
}

/// The record at `off` (header and payload) and the offset after it, by the length its header
/// claims (not yet checked), if it ends within `limit` (and so the window).
#[inline(always)]
fn locate<'a>(win: &Window<'a>, off: usize, limit: usize) -> Option<(&'a [u8], usize)> {
    let len =
        win.get(off + 12, off + 16).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes)?;
    let end = off + record_len(len as usize);
    if len > MAX_PAYLOAD_LEN || end > limit {
        return None;
    }
    Some((win.get(off, off + RECORD_HEADER_LEN + len as usize)?, end))
}

/// The bytes of a record header at `off`: where a dropped sector would have to be for a header
/// that does not check out to be a torn write.
fn header_span(off: usize) -> (usize, usize) {
    (off, off + RECORD_HEADER_LEN)
}

/// The bytes a damaged record at `off` was judged by ([`RawDamage::torn_span`]): its header,
/// or, when the header checks out (so its length is the writer's), the whole record up to
/// `room`. An all-zero header is torn only if the sector it starts in was dropped: a header
/// the writer wrote has its kind byte (offset 8) and sequence set, so its bytes in a sector
/// that was kept are not all zero.
fn record_span(win: &Window<'_>, off: usize, e: &DecodeError, room: usize) -> (usize, usize) {
    if matches!(e.kind, DamageKind::ZeroHeader) {
        return (off, off + 1);
    }
    let len = win.get(off + 12, off + 16).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes);
    match len {
        Some(len) if e.header_ok && len <= MAX_PAYLOAD_LEN => {
            (off, (off + record_len(len as usize)).min(room))
        }
        _ => header_span(off),
    }
}

/// Running counts a footer must agree with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub records: u32,
    pub entries: u32,
    pub min_lsn: u64,
    pub max_lsn: u64,
    pub min_keep_lt: u64,
    pub cuts: u32,
}

/// Walks the records of one segment.
#[derive(Clone, Debug)]
pub struct Walker {
    pub header: SegmentHeader,
    off: usize,
    limit: usize,
    pub expect_seq: u64,
    pub prev_crc: u32,
    batch_start: usize,
    batch_end: usize,
    batch_left: u32,
    batch_lsn: u64,
    /// Record sequence of the current batch's frame.
    batch_seq: u64,
    /// Where the zero rest of the data area starts, and how far it is checked (phase `Tail`).
    tail_start: usize,
    tail_at: usize,
    /// Every byte of the file from here on is zero, as its storage reported
    /// ([`Walker::zeros_from`]): the tail check does not read them.
    zeros_from: usize,
    /// A recycled segment's stale table ([`Walker::stale`]): its blank sectors are zero or old.
    stale: Option<std::sync::Arc<StaleTable>>,
    first_batch: bool,
    group_open: bool,
    phase: Phase,
    /// Validate footer counts (false when the walk resumed mid-segment).
    full: bool,
    /// Logical state; `None` until the segment's State record is read.
    pub logical: Option<Logical>,
    /// Highest `durable_seq` any frame declared.
    pub durable_seq: u64,
    pub counts: Counts,
    /// Offset just past the last valid batch.
    pub data_end: u64,
    pub footer: Option<FooterInfo>,
    /// Stop (as if the data ended) at this offset: a reader's bound inside the live segment.
    pub stop_at: Option<u64>,
}

impl Walker {
    /// Starts at the first batch. `logical` is the state at the segment's start if known.
    pub fn new(header: SegmentHeader, logical: Option<Logical>) -> Walker {
        let limit = header.data_limit();
        Walker {
            off: SEGMENT_HEADER_LEN,
            limit,
            expect_seq: header.first_record_seq.get(),
            prev_crc: header.chain_seed(),
            header,
            batch_start: SEGMENT_HEADER_LEN,
            batch_end: SEGMENT_HEADER_LEN,
            batch_left: 0,
            batch_lsn: 0,
            batch_seq: 0,
            tail_start: 0,
            tail_at: 0,
            zeros_from: usize::MAX,
            stale: None,
            first_batch: true,
            group_open: false,
            phase: Phase::Data,
            full: true,
            logical,
            durable_seq: 0,
            counts: Counts { min_keep_lt: u64::MAX, ..Counts::default() },
            data_end: SEGMENT_HEADER_LEN as u64,
            footer: None,
            stop_at: None,
        }
    }

    /// Tells the walk that every byte of the file from `at` on reads as zero, because nothing
    /// was ever written there ([`crate::storage::Storage::written_end`]): the check that the
    /// rest of the data area and the footer slot are zero stops at `at` instead of reading
    /// (and, through a map, faulting in) up to 64 MiB of reserved blocks that the kernel
    /// would allocate and clear page by page.
    pub fn zeros_from(&mut self, at: usize) {
        self.zeros_from = at;
    }

    /// Gives the walk of a recycled segment its stale table ([`crate::stale`]): past the last
    /// batch, a sector reads as blank when it is zero or still holds the file's old contents.
    /// A recycled segment walked without it reads its old contents as damage.
    pub fn stale(&mut self, table: Option<std::sync::Arc<StaleTable>>) {
        self.stale = table;
    }

    /// At a batch boundary `off` of a recycled segment: the rest holds old contents, which can
    /// be whole records of the file's earlier life (valid on their own, but not here), so a
    /// blank sector ends the data before anything in it is decoded. `None`: a batch starts here.
    /// Out of line: the walk of every other segment never comes here, and its loop stays small.
    #[cold]
    #[inline(never)]
    fn old_contents_at<'a>(&mut self, win: &Window<'a>, off: usize) -> Option<Walked<'a>> {
        let t = self.stale.clone()?;
        let Some(s) = win.get(off, (off + SECTOR).min(self.limit)) else {
            return Some(Walked::NeedMore { from: off as u64, end: (off + SECTOR) as u64 });
        };
        let blank = off.is_multiple_of(SECTOR) && crate::stale::is_blank(Some(&t), off, s);
        blank.then(|| self.enter_tail(win, off))
    }

    /// The data ends at `off`: the rest of the data area is checked from there.
    fn enter_tail<'a>(&mut self, win: &Window<'a>, off: usize) -> Walked<'a> {
        self.phase = Phase::Tail;
        self.tail_start = off;
        self.tail_at = off;
        self.read_tail(win)
    }

    /// Resumes at the batch frame at `offset` (a footer index point) with `next_lsn` there.
    /// Chain state is taken from the frame's own (checked) header.
    pub fn resume(header: SegmentHeader, bytes: &[u8], offset: u64, next_lsn: u64) -> Option<Walker> {
        let mut w = Walker::new(header, None);
        let d = decode(bytes, offset as usize, w.limit).ok()?;
        if d.kind != Kind::Frame {
            return None;
        }
        w.off = offset as usize;
        w.batch_start = w.off;
        w.batch_end = w.off;
        w.expect_seq = d.header.seq.get();
        w.prev_crc = d.header.prev_crc.get();
        w.first_batch = false;
        w.full = false;
        w.logical = Some(Logical {
            next_lsn,
            first_lsn: None,
            epoch: d.header.epoch.get(),
            meta: Default::default(),
        });
        Some(w)
    }

    /// Offset of the next record to read.
    pub fn offset(&self) -> u64 {
        self.off as u64
    }

    pub fn sealed(&self) -> bool {
        self.footer.is_some()
    }

    fn next_lsn(&self) -> u64 {
        self.logical.as_ref().map_or(0, |l| l.next_lsn)
    }

    fn damage(
        &mut self,
        kind: DamageKind,
        off: usize,
        header_ok: bool,
        body_ok: bool,
        semantic: bool,
        torn_span: Option<(usize, usize)>,
    ) -> RawDamage {
        self.phase = Phase::Done;
        let in_batch = self.batch_left > 0 || off < self.batch_end;
        let batch_start = if in_batch { self.batch_start } else { off };
        RawDamage {
            kind,
            offset: off as u64,
            batch_start: batch_start as u64,
            torn_span: torn_span.map(|(a, b)| (a as u64, b as u64)),
            header_ok,
            body_ok,
            semantic,
            seq: self.expect_seq,
            batch_seq: if in_batch { self.batch_seq } else { self.expect_seq },
            lsn: self.next_lsn(),
            batch_lsn: if in_batch { self.batch_lsn } else { self.next_lsn() },
        }
    }

    fn semantic(&mut self, kind: DamageKind, off: usize) -> Walked<'static> {
        Walked::Damage(self.damage(kind, off, true, true, true, Some(header_span(off))))
    }

    /// The rest of the data area after the last batch must be zero up to the footer slot.
    fn read_tail<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        let start = self.tail_start;
        let end = self.limit.min(win.file_len);
        // What lies past the file's written end is zero without being read.
        let checked = end.min(self.zeros_from.max(self.tail_at));
        let mut upto = checked.min(win.end());
        if self.stale.is_some() && upto < checked {
            // Old contents are judged a whole sector at a time.
            upto = self.tail_at.max(upto - upto % SECTOR);
        }
        if self.tail_at < upto {
            let rest = win.get(self.tail_at, upto).unwrap_or_default();
            if let Some(p) = crate::stale::first_nonblank(self.stale.as_deref(), rest, self.tail_at) {
                let at = start + ((p - start) & !(ALIGN - 1));
                // Bytes after the end of the data can only be a later batch: a cut starts here.
                // A crash leaves them only if that batch's first sector, which holds its
                // frame, was dropped: the sector at `start`.
                let mut r =
                    self.damage(DamageKind::NonZeroTail, at, false, false, false, Some((start, start + 1)));
                r.batch_start = start as u64;
                return Walked::Damage(r);
            }
            self.tail_at = upto;
        }
        if self.tail_at < checked {
            // Any next window will do: the rest is checked a window at a time.
            return Walked::NeedMore { from: self.tail_at as u64, end: self.tail_at as u64 + 1 };
        }
        self.tail_at = self.tail_at.max(end);
        if win.file_len < self.limit {
            // Only a file shorter than its header says (never walked: `read_start`).
            return Walked::Damage(self.damage(DamageKind::ShortAtEof, win.file_len, true, true, true, None));
        }
        self.phase = Phase::Footer;
        self.read_footer(win)
    }

    /// The next valid record, the clean end of the segment, or the first damage.
    pub fn next<'a>(&mut self, bytes: &'a [u8]) -> Step<'a> {
        match self.step(&Window::whole(bytes)) {
            Walked::Record(r) => Step::Record(r),
            Walked::End => Step::End,
            Walked::Damage(d) => Step::Damage(d),
            // A whole file holds every byte there is; never reached.
            Walked::NeedMore { from, .. } => {
                Step::Damage(self.damage(DamageKind::ShortAtEof, from as usize, false, false, false, None))
            }
        }
    }

    /// Walks to the clean end of the segment, the first damage, or the end of what `win` holds,
    /// calling `visit` for every valid record. Never returns [`Walked::Record`].
    #[inline]
    pub fn walk<'a>(&mut self, win: &Window<'a>, visit: &mut impl FnMut(&Rec<'a>)) -> Walked<'a> {
        loop {
            if self.phase == Phase::Data && self.batch_left > 0 {
                self.walk_entries(win, visit);
            }
            match self.step(win) {
                Walked::Record(r) => visit(&r),
                other => return other,
            }
        }
    }

    /// The entries of the current batch, in a tight loop: up to three records are located by
    /// the lengths in their (not yet checked) headers and their checksums computed at once, then
    /// each is checked and applied in order. A record is accepted here only if every check
    /// [`Walker::step`] makes passes, with the same effect on the walker; at anything else (a
    /// failed check, another kind of record, the end of the window) this returns, and `step`
    /// judges that record as usual.
    fn walk_entries<'a>(&mut self, win: &Window<'a>, visit: &mut impl FnMut(&Rec<'a>)) {
        let limit = self.batch_end.min(win.end());
        while self.batch_left > 0 {
            let left = self.batch_left;
            // Where the next records are, by the lengths their headers claim.
            let Some((a, next)) = locate(win, self.off, limit) else { return };
            let b = if left >= 2 { locate(win, next, limit) } else { None };
            let c = match b {
                Some((_, next)) if left >= 3 => locate(win, next, limit),
                _ => None,
            };
            let (b, c) = (b.map(|b| b.0), c.map(|c| c.0));
            let crcs = match (b, c) {
                (Some(b), Some(c)) => crate::crc::record_crcs([a, b, c]),
                (Some(b), None) => {
                    let [x, y] = crate::crc::record_crcs([a, b]);
                    [x, y, (0, 0)]
                }
                _ => {
                    let [x] = crate::crc::record_crcs([a]);
                    [x, (0, 0), (0, 0)]
                }
            };
            // One call site: the visitor inlines once.
            for (r, crc) in [Some(a), b, c].into_iter().zip(crcs) {
                let Some(r) = r else { break };
                if !self.accept_entry(win, r, crc, visit) {
                    return;
                }
            }
        }
    }

    /// Accepts the entry `r` (header and payload) at the walker's offset, whose checksums are
    /// `(header_crc, crc)`, if everything [`Walker::read_data`], `decode` and
    /// [`Walker::apply`] check of an entry inside a batch passes; then applies it exactly as they
    /// do and visits it. Otherwise changes nothing.
    #[inline(always)]
    fn accept_entry<'a>(
        &mut self,
        win: &Window<'a>,
        r: &'a [u8],
        (header_crc, crc): (u32, u32),
        visit: &mut impl FnMut(&Rec<'a>),
    ) -> bool {
        let off = self.off;
        let Some(h) = r.get(..RECORD_HEADER_LEN).and_then(|b| RecordHeader::ref_from_bytes(b).ok()) else {
            return false;
        };
        let len = h.payload_len.get() as usize;
        let body_end = off + RECORD_HEADER_LEN + len;
        let end = off + record_len(len);
        let last = self.batch_left == 1;
        let cont = h.flags & FLAG_GROUP_CONT != 0;
        // decode: both checksums, kind, flags, reserved bytes, the length (within the batch, the
        // window and so the file), the zero padding (under 8 bytes). Then read_data: the chain,
        // the batch's structure (the last record ends the batch and closes any user batch; no
        // other record reaches its end), not the segment's first record. (`|`, not `||`: cheap
        // comparisons, one branch.)
        let Some(padding) = win.get(body_end, end) else { return false };
        if (h.header_crc.get() != header_crc)
            | (h.crc.get() != crc)
            | (h.kind != Kind::Entry as u8)
            | (h.flags & !Kind::Entry.allowed_flags() != 0)
            | (h.reserved0 != [0; 2])
            | (h.reserved1 != [0; 4])
            | (r.len() != RECORD_HEADER_LEN + len)
            | (end > self.batch_end)
            | (end > win.end())
            | padding.iter().any(|&b| b != 0)
            | (h.seq.get() != self.expect_seq)
            | (h.prev_crc.get() != self.prev_crc)
            | (last != (end == self.batch_end))
            | (last & cont)
            | (self.first_batch & (self.counts.records == 1))
        {
            return false;
        }
        let Some(next_seq) = self.expect_seq.checked_add(1) else { return false };
        // apply: the epoch in force, the next LSN.
        let (lsn, epoch) = (h.lsn.get(), h.epoch.get());
        let Some(l) = self.logical.as_mut() else { return false };
        let Some(next_lsn) = lsn.checked_add(1) else { return false };
        if epoch != l.epoch || lsn != l.next_lsn {
            return false;
        }
        l.first_lsn.get_or_insert(lsn);
        l.next_lsn = next_lsn;
        let c = &mut self.counts;
        c.min_lsn = if c.entries == 0 { lsn } else { c.min_lsn.min(lsn) };
        c.max_lsn = if c.entries == 0 { lsn } else { c.max_lsn.max(lsn) };
        c.entries += 1;
        c.records += 1;
        self.batch_left -= 1;
        self.group_open = cont;
        if last {
            self.first_batch = false;
            self.data_end = end as u64;
        }
        self.off = end;
        self.expect_seq = next_seq;
        self.prev_crc = crc;
        visit(&Rec {
            kind: Kind::Entry,
            flags: h.flags,
            seq: h.seq.get(),
            lsn,
            epoch,
            payload: r.get(RECORD_HEADER_LEN..).unwrap_or_default(),
            offset: off as u64,
            crc,
            prev_crc: h.prev_crc.get(),
        });
        true
    }

    /// One step over a window: like [`Walker::next`], or [`Walked::NeedMore`].
    #[inline]
    pub fn step<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        match self.phase {
            Phase::Done => Walked::End,
            Phase::Footer => self.read_footer(win),
            Phase::Tail => self.read_tail(win),
            Phase::Data => self.read_data(win),
        }
    }

    #[inline]
    fn read_data<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        let mut off = self.off;
        if self.batch_left == 0 {
            if self.stop_at.is_some_and(|s| off as u64 >= s) {
                self.phase = Phase::Done;
                return Walked::End;
            }
            // Every batch starts on a sector boundary (the first one right after the segment
            // header), so no sector holds bytes of two batches: a sector a crash dropped from a
            // batch is all zero. The gap before the boundary must be zero.
            let aligned =
                if off <= SEGMENT_HEADER_LEN { off } else { off.next_multiple_of(SECTOR).min(self.limit) };
            let no_room = aligned + RECORD_HEADER_LEN > self.limit;
            // The gap and the next batch's header (or the start of the zero rest) are judged
            // from one window.
            let need = if no_room { aligned } else { aligned + RECORD_HEADER_LEN };
            if !win.covers(need) {
                return Walked::NeedMore { from: off as u64, end: need as u64 };
            }
            if let Some(p) = first_nonzero(win.get(off, aligned).unwrap_or_default()) {
                let at = off + (p & !(ALIGN - 1));
                // The gap shares its sector with the batch before it, which checked out, and no
                // write puts bytes in a gap: only a dropped sector of a recycled segment (old
                // contents, blank) whose bytes under the batch's end happen to equal the new
                // ones leaves them. So that sector is the evidence.
                let mut r =
                    self.damage(DamageKind::NonZeroPadding, at, false, false, false, Some((at, at + 1)));
                r.batch_start = off as u64;
                return Walked::Damage(r);
            }
            off = aligned;
            self.off = aligned;
            let zero = win.get(off, off + RECORD_HEADER_LEN).is_some_and(is_zero);
            if zero && self.first_batch && self.full && off == SEGMENT_HEADER_LEN {
                // The header is written in the same sector as the segment's first batch, so a
                // header with no batch after it is never a crash's doing (and a writer could
                // not continue it): damage, cut from offset 0 back to a spare.
                let mut r =
                    self.damage(DamageKind::ZeroHeader, off, false, false, false, Some(header_span(off)));
                r.batch_start = 0;
                return Walked::Damage(r);
            }
            if no_room || zero {
                return self.enter_tail(win, off);
            }
            if self.stale.is_some() {
                if let Some(w) = self.old_contents_at(win, off) {
                    return w;
                }
            }
        }
        // A record inside a batch has the rest of its batch as room, a frame the data area.
        let room = if self.batch_left > 0 { self.batch_end } else { self.limit };
        let d = match decode_in(win, off, room) {
            Ok(d) => d,
            Err(DecodeFail::More(end)) => return Walked::NeedMore { from: off as u64, end: end as u64 },
            Err(DecodeFail::Bad(e)) => {
                let body_ok = e.semantic;
                let span = record_span(win, off, &e, room);
                return Walked::Damage(self.damage(
                    e.kind,
                    off,
                    e.header_ok,
                    body_ok,
                    e.semantic,
                    Some(span),
                ));
            }
        };
        let h = &d.header;
        if h.seq.get() != self.expect_seq {
            return self.semantic(DamageKind::SeqGap { expected: self.expect_seq, found: h.seq.get() }, off);
        }
        if h.prev_crc.get() != self.prev_crc {
            return self
                .semantic(DamageKind::ChainBreak { expected: self.prev_crc, found: h.prev_crc.get() }, off);
        }
        let end = off + d.total_len;
        if self.batch_left == 0 {
            if d.kind != Kind::Frame {
                return self.semantic(DamageKind::BadFrame("expected a batch frame"), off);
            }
            let Ok(f) = FramePayload::read_from_bytes(d.payload) else {
                return self.semantic(DamageKind::BadFrame("frame payload size"), off);
            };
            let Some(batch_end) = (end as u64).checked_add(f.batch_len.get()) else {
                return self.semantic(DamageKind::BadFrame("impossible count or length"), off);
            };
            if f.record_count.get() == 0
                || f.reserved != [0; 4]
                || f.batch_len.get() % ALIGN as u64 != 0
                || batch_end > self.limit as u64
                || f.batch_len.get() < (RECORD_HEADER_LEN as u64) * u64::from(f.record_count.get())
            {
                return self.semantic(DamageKind::BadFrame("impossible count or length"), off);
            }
            if f.durable_seq.get() >= h.seq.get() || f.durable_seq.get() < self.durable_seq {
                return self.semantic(DamageKind::BadFrame("durable sequence out of order"), off);
            }
            if let Err(k) = self.check_epoch(Kind::Frame, h.epoch.get()) {
                return self.semantic(k, off);
            }
            self.durable_seq = f.durable_seq.get();
            self.batch_start = off;
            self.batch_end = batch_end as usize;
            self.batch_left = f.record_count.get();
            self.batch_lsn = self.logical.as_ref().map_or(h.lsn.get(), |l| l.next_lsn);
            self.batch_seq = h.seq.get();
        } else {
            if matches!(d.kind, Kind::Frame | Kind::Footer) {
                return self.semantic(DamageKind::BadFrame("frame or footer inside a batch"), off);
            }
            if self.group_open && d.kind != Kind::Entry {
                return self.semantic(DamageKind::BadFrame("user batch interrupted"), off);
            }
            let first_of_segment = self.first_batch && self.counts.records == 1;
            if first_of_segment != (d.kind == Kind::State) {
                return self.semantic(
                    DamageKind::BadState("a segment's first batch must start with its state"),
                    off,
                );
            }
            if let Err(k) = self.apply(&d, off) {
                return self.semantic(k, off);
            }
            self.batch_left -= 1;
            self.group_open = d.kind == Kind::Entry && h.flags & FLAG_GROUP_CONT != 0;
            if self.batch_left == 0 {
                if end != self.batch_end {
                    return self
                        .semantic(DamageKind::BadFrame("batch length disagrees with its records"), off);
                }
                if self.group_open {
                    return self.semantic(DamageKind::BadFrame("user batch split across frames"), off);
                }
                self.first_batch = false;
            } else if end == self.batch_end {
                return self.semantic(DamageKind::BadFrame("fewer records than the frame declares"), off);
            }
        }
        let Some(next_seq) = self.expect_seq.checked_add(1) else {
            return self.semantic(DamageKind::BadState("record sequence overflow"), off);
        };
        self.counts.records += 1;
        self.off = end;
        self.expect_seq = next_seq;
        self.prev_crc = h.crc.get();
        if self.batch_left == 0 {
            self.data_end = end as u64;
        }
        Walked::Record(Rec {
            kind: d.kind,
            flags: h.flags,
            seq: h.seq.get(),
            lsn: h.lsn.get(),
            epoch: h.epoch.get(),
            payload: d.payload,
            offset: off as u64,
            crc: h.crc.get(),
            prev_crc: h.prev_crc.get(),
        })
    }

    fn check_epoch(&self, kind: Kind, epoch: u64) -> Result<(), DamageKind> {
        let Some(l) = &self.logical else {
            return Ok(());
        };
        if kind == Kind::Epoch {
            if epoch <= l.epoch {
                return Err(DamageKind::StaleEpoch { current: l.epoch, found: epoch });
            }
        } else if epoch < l.epoch {
            return Err(DamageKind::StaleEpoch { current: l.epoch, found: epoch });
        } else if epoch > l.epoch {
            return Err(DamageKind::BadState("record epoch newer than the log's"));
        }
        Ok(())
    }

    /// Checks a record against the logical state and applies it.
    fn apply(&mut self, d: &Decoded<'_>, off: usize) -> Result<(), DamageKind> {
        let h = &d.header;
        let (lsn, epoch) = (h.lsn.get(), h.epoch.get());
        if d.kind == Kind::State {
            let st = parse_state(d.payload)?;
            let st = Logical { epoch, ..st };
            if h.lsn.get() != st.next_lsn {
                return Err(DamageKind::BadState("header LSN differs from the state's"));
            }
            match &self.logical {
                Some(l) if self.full && *l != st => {
                    return Err(DamageKind::BadState("does not match the log before it"))
                }
                _ => self.logical = Some(st),
            }
            return Ok(());
        }
        self.check_epoch(d.kind, epoch)?;
        let Some(l) = self.logical.as_mut() else {
            return Err(DamageKind::BadState("record before the segment's state"));
        };
        let empty = d.payload.is_empty();
        match d.kind {
            Kind::Entry => {
                if lsn != l.next_lsn {
                    return Err(DamageKind::LsnGap { expected: l.next_lsn, found: lsn });
                }
                l.first_lsn.get_or_insert(lsn);
                l.next_lsn = lsn.checked_add(1).ok_or(DamageKind::BadState("LSN overflow"))?;
                let c = &mut self.counts;
                c.min_lsn = if c.entries == 0 { lsn } else { c.min_lsn.min(lsn) };
                c.max_lsn = if c.entries == 0 { lsn } else { c.max_lsn.max(lsn) };
                c.entries += 1;
            }
            Kind::Truncate => {
                if !empty || lsn >= l.next_lsn {
                    return Err(DamageKind::BadState("truncation past the end of the log"));
                }
                if l.first_lsn.is_some_and(|f| lsn < f) {
                    l.first_lsn = None;
                }
                l.next_lsn = lsn + 1;
                self.counts.cuts += 1;
                self.counts.min_keep_lt = self.counts.min_keep_lt.min(lsn + 1);
            }
            Kind::Reset => {
                if !empty {
                    return Err(DamageKind::BadState("reset with a payload"));
                }
                l.first_lsn = None;
                l.next_lsn = lsn;
                self.counts.cuts += 1;
                self.counts.min_keep_lt = 0;
            }
            Kind::Epoch => {
                if !empty || lsn != l.next_lsn {
                    return Err(DamageKind::BadState("malformed epoch record"));
                }
                l.epoch = epoch;
            }
            Kind::Checkpoint => {
                if d.payload.len() != CHECKPOINT_PAYLOAD_LEN {
                    return Err(DamageKind::BadState("malformed checkpoint"));
                }
                // FORMAT.md 3.1: `L` < the next LSN (a writer refuses anything else); one for
                // the next LSN or beyond covers an entry the log had not taken.
                if lsn >= l.next_lsn {
                    return Err(DamageKind::BadState("checkpoint for an LSN the log has not taken"));
                }
            }
            Kind::Meta => {
                let (key, value) = parse_meta(d.payload)?;
                if !l.meta.contains_key(&key) && l.meta.len() >= MAX_META_KEYS {
                    return Err(DamageKind::BadState("too many metadata keys"));
                }
                std::sync::Arc::make_mut(&mut l.meta).insert(key, value.to_vec());
            }
            Kind::Frame | Kind::Footer | Kind::State => {
                let _ = off;
                return Err(DamageKind::BadFrame("misplaced record kind"));
            }
        }
        Ok(())
    }

    fn read_footer<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        let at = footer_offset(self.header.segment_len.get());
        // A slot past the written end is zero without being read (read through a map, its first
        // byte would make the kernel read megabytes of zeros around it).
        if self.zeros_from <= at {
            self.phase = Phase::Done;
            return Walked::End;
        }
        if !win.covers(at + FOOTER_SLOT_LEN) {
            return Walked::NeedMore { from: at as u64, end: (at + FOOTER_SLOT_LEN) as u64 };
        }
        self.phase = Phase::Done;
        let slot = win.get(at, at + FOOTER_SLOT_LEN).unwrap_or_default();
        if is_zero(slot) {
            return Walked::End;
        }
        // The footer is its own write: damage in it is judged as a batch of its own.
        self.batch_start = at;
        self.batch_end = at + FOOTER_SLOT_LEN;
        self.batch_seq = self.expect_seq;
        self.batch_left = 0;
        self.phase = Phase::Data;
        let r = self.check_footer(win, at);
        self.phase = Phase::Done;
        r
    }

    fn check_footer<'a>(&mut self, win: &Window<'a>, at: usize) -> Walked<'a> {
        let d = match decode_in(win, at, at + FOOTER_SLOT_LEN) {
            Ok(d) => d,
            Err(DecodeFail::More(_)) => {
                // The slot is in the window: never reached.
                return Walked::Damage(self.damage(DamageKind::ShortAtEof, at, false, false, false, None));
            }
            Err(DecodeFail::Bad(e)) => {
                let body_ok = e.semantic;
                let header_ok = e.header_ok;
                // Evidence of tearing is looked for in the footer's own bytes, not the rest of
                // the zero slot. A header whose own checksum passed declares that extent: a
                // footer longer than a sector (a segment of many batches) torn by a crash
                // during its sync leaves an all-zero sector inside it, which is a torn write.
                let span = record_span(win, at, &e, at + FOOTER_SLOT_LEN);
                let mut r = self.damage(e.kind, at, header_ok, body_ok, e.semantic, Some(span));
                r.batch_start = at as u64;
                return Walked::Damage(r);
            }
        };
        let h = &d.header;
        let bad = |w: &mut Walker, k: DamageKind| {
            let mut r = w.damage(k, at, true, true, true, Some(header_span(at)));
            r.batch_start = at as u64;
            Walked::Damage(r)
        };
        if d.kind != Kind::Footer {
            return bad(self, DamageKind::BadFooter("not a footer"));
        }
        if h.seq.get() != self.expect_seq {
            return bad(self, DamageKind::SeqGap { expected: self.expect_seq, found: h.seq.get() });
        }
        if h.prev_crc.get() != self.prev_crc {
            return bad(self, DamageKind::ChainBreak { expected: self.prev_crc, found: h.prev_crc.get() });
        }
        if let Err(k) = self.check_epoch(Kind::Footer, h.epoch.get()) {
            return bad(self, k);
        }
        let info = match parse_footer(d.payload, h.seq.get(), h.crc.get()) {
            Ok(i) => i,
            Err(k) => return bad(self, k),
        };
        let p = &info.payload;
        if p.durable_seq.get().checked_add(1) != Some(h.seq.get()) || p.data_end.get() != self.data_end {
            return bad(self, DamageKind::BadFooter("durable sequence or data end disagree"));
        }
        if h.lsn.get() != self.next_lsn() && self.full {
            return bad(self, DamageKind::BadFooter("next LSN disagrees"));
        }
        if self.full {
            let c = &self.counts;
            let same = p.record_count.get() == c.records
                && p.entry_count.get() == c.entries
                && p.min_lsn.get() == if c.entries == 0 { 0 } else { c.min_lsn }
                && p.max_lsn.get() == if c.entries == 0 { 0 } else { c.max_lsn }
                && p.min_keep_lt.get() == c.min_keep_lt
                && p.cut_count.get() == c.cuts;
            if !same {
                return bad(self, DamageKind::BadFooter("counts disagree with the segment"));
            }
        }
        if let Err(k) = check_index(win, &info.index, self.data_end) {
            return bad(self, k);
        }
        let rest = win.get(at + d.total_len, at + FOOTER_SLOT_LEN).unwrap_or_default();
        if let Some(p) = first_nonzero(rest) {
            let off = at + d.total_len + (p & !(ALIGN - 1));
            // The footer checked out, and nothing is ever written after it in its slot (zero
            // since the segment was made): no crash leaves these bytes.
            let mut r = self.damage(DamageKind::NonZeroTail, off, false, false, false, None);
            r.batch_start = at as u64;
            return Walked::Damage(r);
        }
        let Some(next_seq) = self.expect_seq.checked_add(1) else {
            return bad(self, DamageKind::BadState("record sequence overflow"));
        };
        self.expect_seq = next_seq;
        self.prev_crc = h.crc.get();
        self.footer = Some(info);
        Walked::Record(Rec {
            kind: Kind::Footer,
            flags: 0,
            seq: h.seq.get(),
            lsn: h.lsn.get(),
            epoch: h.epoch.get(),
            payload: d.payload,
            offset: at as u64,
            crc: h.crc.get(),
            prev_crc: h.prev_crc.get(),
        })
    }
}

/// Reads a footer from the footer slot without walking the segment (fast open). Checks the
/// record itself, not its link to the data before it.
pub fn read_footer_fast(bytes: &[u8], segment_len: u32) -> Option<(RecordHeader, FooterInfo)> {
    let at = footer_offset(segment_len);
    let d = decode(bytes, at, at + FOOTER_SLOT_LEN).ok()?;
    if d.kind != Kind::Footer {
        return None;
    }
    let info = parse_footer(d.payload, d.header.seq.get(), d.header.crc.get()).ok()?;
    if !is_zero(bytes.get(at + d.total_len..at + FOOTER_SLOT_LEN)?) {
        return None;
    }
    Some((*d.header, info))
}

fn check_index(win: &Window<'_>, index: &[IndexPoint], data_end: u64) -> Result<(), DamageKind> {
    let mut last = 0u64;
    for p in index {
        let off = p.offset.get();
        if off < last || off >= data_end || off % ALIGN as u64 != 0 {
            return Err(DamageKind::BadFooter("index point out of order or range"));
        }
        last = off + 1;
        let here = if off as usize >= win.base {
            match decode_in(win, off as usize, data_end as usize) {
                Ok(d) => Some(d.kind == Kind::Frame),
                Err(DecodeFail::Bad(_)) => Some(false),
                Err(DecodeFail::More(_)) => None,
            }
        } else {
            None
        };
        let ok = here.unwrap_or_else(|| win.probe.is_some_and(|probe| probe(off, data_end)));
        if !ok {
            return Err(DamageKind::BadFooter("index point does not name a batch frame"));
        }
    }
    Ok(())
}

/// Whether a batch frame is at `off` of the window (`data_end` bounds it), as a footer's index
/// point must name: false also when the window cannot tell.
pub(crate) fn frame_at(win: &Window<'_>, off: usize, data_end: usize) -> bool {
    off >= win.base && matches!(decode_in(win, off, data_end), Ok(d) if d.kind == Kind::Frame)
}

pub(crate) fn parse_footer(payload: &[u8], seq: u64, crc: u32) -> Result<FooterInfo, DamageKind> {
    let fixed = payload.get(..FOOTER_FIXED_LEN).ok_or(DamageKind::BadFooter("too short"))?;
    let p = FooterPayload::read_from_bytes(fixed).map_err(|_| DamageKind::BadFooter("too short"))?;
    let n = p.index_count.get() as usize;
    if n > MAX_INDEX_POINTS || payload.len() != FOOTER_FIXED_LEN + n * INDEX_POINT_LEN {
        return Err(DamageKind::BadFooter("index size"));
    }
    let mut index = Vec::with_capacity(n);
    for c in payload.get(FOOTER_FIXED_LEN..).unwrap_or_default().chunks_exact(INDEX_POINT_LEN) {
        index.push(IndexPoint::read_from_bytes(c).map_err(|_| DamageKind::BadFooter("index"))?);
    }
    Ok(FooterInfo { payload: p, index, seq, crc })
}

/// A `Meta` record's payload: the key and the value (FORMAT.md).
pub fn parse_meta(payload: &[u8]) -> Result<(u32, &[u8]), DamageKind> {
    let bad = DamageKind::BadState("malformed metadata");
    let key = payload.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()).ok_or(bad.clone())?;
    let len = payload.get(4..8).and_then(|b| <[u8; 4]>::try_from(b).ok()).ok_or(bad.clone())?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_META_VALUE_LEN || payload.len() != 8 + len {
        return Err(bad);
    }
    Ok((u32::from_le_bytes(key), payload.get(8..).unwrap_or_default()))
}

pub(crate) fn parse_state(payload: &[u8]) -> Result<Logical, DamageKind> {
    let bad = |w| DamageKind::BadState(w);
    let fixed = payload.get(..STATE_FIXED_LEN).ok_or(bad("too short"))?;
    let s = StatePayload::read_from_bytes(fixed).map_err(|_| bad("too short"))?;
    if s.reserved != [0; 3] || s.has_entries > 1 || s.meta_count.get() as usize > MAX_META_KEYS {
        return Err(bad("malformed"));
    }
    let mut meta = BTreeMap::new();
    let mut at = STATE_FIXED_LEN;
    for _ in 0..s.meta_count.get() {
        let head = payload.get(at..at + 8).ok_or(bad("metadata runs past the record"))?;
        let (key, len) = head.split_at(4);
        let key = u32::from_le_bytes(<[u8; 4]>::try_from(key).map_err(|_| bad("key"))?);
        let len = u32::from_le_bytes(<[u8; 4]>::try_from(len).map_err(|_| bad("len"))?) as usize;
        if len > MAX_META_VALUE_LEN {
            return Err(bad("metadata value too long"));
        }
        let v = payload.get(at + 8..at + 8 + len).ok_or(bad("metadata runs past the record"))?;
        let padded = align_up(8 + len);
        if !is_zero(payload.get(at + 8 + len..at + padded).unwrap_or_default()) {
            return Err(DamageKind::NonZeroPadding);
        }
        if meta.insert(key, v.to_vec()).is_some() {
            return Err(bad("duplicate metadata key"));
        }
        at += padded;
    }
    if at != payload.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(Logical {
        next_lsn: s.next_lsn.get(),
        first_lsn: (s.has_entries == 1).then(|| s.first_lsn.get()),
        epoch: 0,
        meta: meta.into(),
    })
}

/// Encodes a State payload for `l`.
pub(crate) fn encode_state(l: &Logical, out: &mut Vec<u8>) {
    use zerocopy::IntoBytes;
    let s = StatePayload {
        next_lsn: l.next_lsn.into(),
        first_lsn: l.first_lsn.unwrap_or(0).into(),
        has_entries: u8::from(l.first_lsn.is_some()),
        reserved: [0; 3],
        meta_count: (l.meta.len() as u32).into(),
    };
    out.extend_from_slice(s.as_bytes());
    for (k, v) in l.meta.iter() {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
        out.resize(out.len() + align_up(8 + v.len()) - 8 - v.len(), 0);
    }
}
