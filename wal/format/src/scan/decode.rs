//! A segment file's bytes seen through a window ([`Window`]: the whole file, or the part a
//! streaming walk holds), and decoding one record from it: both checksums (in one pass), kind,
//! flags, reserved bytes, length and padding, in the order the format asks (no chain or logical
//! checks: the walker makes those). Also the bytes a damaged record was judged by, which the
//! classification looks for a blank sector in.

use crate::damage::DamageKind;
use crate::format::*;
use std::fmt;
use zerocopy::FromBytes;

/// Judges a batch frame where a footer index point names one (`offset`, with the footer's
/// `data_end`) when the window does not hold it: true only when
/// `decode(file, offset, data_end)` would give a frame. A `false` from a probe that could not
/// decide is damage, so a walker that streams windows must check such damage again whole.
pub type FrameProbe<'p> = &'p dyn Fn(u64, u64) -> bool;

/// Bytes of a segment file seen through a window: `bytes` are the file's bytes from offset
/// `base`, and the file is `file_len` bytes long. Offsets are always offsets in the file.
#[derive(Clone, Copy)]
pub struct Window<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) base: usize,
    pub(super) file_len: usize,
    pub(super) probe: Option<FrameProbe<'a>>,
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
    pub fn covers(&self, end: usize) -> bool {
        end <= self.end() || self.end() >= self.file_len
    }

    /// The file's bytes `start..end`, if the window holds them.
    #[inline]
    pub fn get(&self, start: usize, end: usize) -> Option<&'a [u8]> {
        self.bytes.get(start.checked_sub(self.base)?..end.checked_sub(self.base)?)
    }
}

/// Outcome of decoding one record's bytes (no chain or logical checks).
#[derive(Debug)]
pub struct Decoded<'a> {
    pub header: &'a RecordHeader,
    pub kind: Kind,
    pub payload: &'a [u8],
    pub total_len: usize,
}

/// Why a record's bytes do not decode: what is wrong, whether its header checked out, and
/// whether the fault is in what the bytes mean rather than in their checksums.
#[derive(Debug)]
pub struct DecodeError {
    pub kind: DamageKind,
    pub header_ok: bool,
    pub semantic: bool,
}

/// Why a record could not be decoded from a window.
#[derive(Debug)]
pub enum DecodeFail {
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
pub fn decode(bytes: &[u8], off: usize, limit: usize) -> Result<Decoded<'_>, DecodeError> {
    match decode_in(&Window::whole(bytes), off, limit) {
        Ok(d) => Ok(d),
        Err(DecodeFail::Bad(e)) => Err(e),
        // A whole file holds every byte there is.
        Err(DecodeFail::More(_)) => {
            Err(DecodeError { kind: DamageKind::ShortAtEof, header_ok: false, semantic: false })
        }
    }
}

/// `decode` from a window: the same checks in the same order, and `More` when the window
/// ends before the bytes the next check needs.
#[inline]
pub fn decode_in<'a>(win: &Window<'a>, off: usize, limit: usize) -> Result<Decoded<'a>, DecodeFail> {
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

/// The bytes of a record header at `off`: where a dropped sector would have to be for a header
/// that does not check out to be a torn write.
pub(super) fn header_span(off: usize) -> (usize, usize) {
    (off, off + RECORD_HEADER_LEN)
}

/// The bytes a damaged record at `off` was judged by ([`RawDamage::torn_span`]): its header,
/// or, when the header checks out (so its length is the writer's), the whole record up to
/// `room`. An all-zero header is torn only if the sector it starts in was dropped: a header
/// the writer wrote has its kind byte (offset 8) and sequence set, so its bytes in a sector
/// that was kept are not all zero.
pub(super) fn record_span(win: &Window<'_>, off: usize, e: &DecodeError, room: usize) -> (usize, usize) {
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
