//! What the start of a segment file says: a spare (all zero, or a recycled file's old contents
//! under a valid stale table), a segment header that checks out against what the log around it
//! expects, damage, or a newer format. Also finding a recycled segment's stale table.

use super::RawDamage;
use crate::damage::DamageKind;
use crate::format::*;
use crate::stale::{Owner, StaleTable};
use zerocopy::FromBytes;

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
pub fn bad_stale_table(h: &SegmentHeader) -> RawDamage {
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
/// a spare made of a recycled file (`recycled_spare`), else damage.
pub fn zero_header_start(recycled_spare: bool, file_len: usize, expect: &Expect) -> Start {
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
pub fn read_start_in(bytes: &[u8], file_len: usize, expect: &Expect) -> Start {
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
