//! The stale table of a recycled segment (FORMAT.md section 2.2).
//!
//! A segment made of a purged file is not overwritten with zeros: on this machine those zeros
//! were a second write of every byte the log carried, and the whole gap between `batch4k-64`
//! and its peers. What the zeros were for is torn-write evidence: a sector a crash dropped from
//! a batch must read as something no batch could have written. In a recycled file it reads as
//! the file's *old* contents, so the recycling records a CRC-32C of every sector's old contents
//! (the table, 4 bytes per 512, just before the footer slot) and every rule of the format that
//! asks for a zero sector asks for a *blank* one instead: all zero, or matching its entry.
//!
//! The one cost of the table is the read of the old file when it is recycled (on the helper
//! thread that prepares the next segment; the file was written minutes ago and is usually in
//! the page cache) and, at an open after a crash, a checksum per sector of the rest of the last
//! segment where a zero check used to be.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::format::{
    end_of_nonzero, first_nonzero, footer_offset, is_zero, SegmentHeader, FOOTER_SLOT_LEN, SECTOR,
};
use std::sync::Arc;

/// Magic at the start of a stale table.
pub const STALE_MAGIC: [u8; 8] = *b"\x89WALST\r\n";
/// Magic, segment length, sector count, log id, segment sequence; then the entries.
const TABLE_HEAD: usize = 40;
/// The table's own checksum, in its last 4 bytes.
const TABLE_TAIL: usize = 4;

/// How many sectors a stale table covers in a segment of `segment_len` bytes (the data area of
/// a recycled segment: offsets `0..covered * 512`), and how many sectors the table takes.
/// The table takes the fewest whole sectors that hold an entry for every sector before it.
pub const fn table_sectors(segment_len: u32) -> (usize, usize) {
    // (No segment is shorter than its footer slot; a length read from damage may be.)
    let before_slot = (segment_len as usize).saturating_sub(FOOTER_SLOT_LEN) / SECTOR;
    // k sectors hold TABLE_HEAD + 4 * (before_slot - k) + TABLE_TAIL bytes: the smallest k.
    let per = SECTOR + 4;
    let k = (TABLE_HEAD + TABLE_TAIL + 4 * before_slot).div_ceil(per);
    (before_slot.saturating_sub(k), k)
}

/// First byte of a recycled segment's stale table; its data must end before it.
pub const fn table_offset(segment_len: u32) -> usize {
    // (`covered * SECTOR`: the table starts right after the sectors it covers.)
    table_sectors(segment_len).0 * SECTOR
}

/// Bytes of the stale table of a segment of `segment_len` bytes.
pub const fn table_len(segment_len: u32) -> usize {
    table_sectors(segment_len).1 * SECTOR
}

/// The byte range of the stale table of a segment of `segment_len` bytes.
pub const fn table_range(segment_len: u32) -> std::ops::Range<usize> {
    let at = table_offset(segment_len);
    at..at + table_len(segment_len)
}

/// Where a segment's data must end: before the stale table of a recycled segment, before the
/// footer slot of any other.
pub const fn data_limit(segment_len: u32, recycled: bool) -> usize {
    if recycled {
        table_offset(segment_len)
    } else {
        footer_offset(segment_len)
    }
}

impl SegmentHeader {
    /// Where this segment's data must end.
    pub fn data_limit(&self) -> usize {
        data_limit(self.segment_len.get(), self.is_recycled())
    }
}

/// The segment a stale table belongs to: a table of another log or of another segment of this
/// one (an older life of the same file) checks out on its own, and is refused for this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub log_id: [u8; 16],
    pub segment_seq: u64,
}

impl Owner {
    /// The segment whose header is `h`.
    pub fn of(h: &crate::format::SegmentHeader) -> Owner {
        Owner { log_id: h.log_id, segment_seq: h.segment_seq.get() }
    }
}

/// A parsed, checked stale table: the CRC-32C of every covered sector's old contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleTable {
    crcs: Vec<u32>,
}

impl StaleTable {
    /// The table of a file whose bytes are `file` once its header sector reads as zero (the
    /// recycling zeroes it): the bytes of the table region. `file` must be the whole file.
    pub fn build(file: &[u8], segment_len: u32, owner: Owner) -> Vec<u8> {
        let (covered, k) = table_sectors(segment_len);
        let mut out = Vec::with_capacity(k * SECTOR);
        out.extend_from_slice(&STALE_MAGIC);
        out.extend_from_slice(&segment_len.to_le_bytes());
        out.extend_from_slice(&(covered as u32).to_le_bytes());
        out.extend_from_slice(&owner.log_id);
        out.extend_from_slice(&owner.segment_seq.to_le_bytes());
        let zero = crc32c::crc32c(&[0u8; SECTOR]);
        for i in 0..covered {
            let crc = match file.get(i * SECTOR..(i + 1) * SECTOR) {
                Some(s) if i > 0 => crc32c::crc32c(s),
                _ => zero,
            };
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out.resize(k * SECTOR - TABLE_TAIL, 0);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The table in `region` (the bytes at [`table_offset`], [`table_len`] of them) of a segment
    /// of `segment_len` bytes; `None` unless every field and the checksum check out and it
    /// belongs to `owner`.
    pub fn parse(region: &[u8], segment_len: u32, owner: Owner) -> Option<StaleTable> {
        let (covered, k) = table_sectors(segment_len);
        let region = region.get(..k * SECTOR)?;
        let (body, tail) = region.split_at(k * SECTOR - TABLE_TAIL);
        if crc32c::crc32c(body) != u32::from_le_bytes(tail.try_into().ok()?) {
            return None;
        }
        let u32_at = |at: usize| body.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
        if body.get(..8)? != STALE_MAGIC
            || u32_at(8)? != segment_len
            || u32_at(12)? as usize != covered
            || body.get(16..32)? != owner.log_id
            || body.get(32..40)? != owner.segment_seq.to_le_bytes()
        {
            return None;
        }
        let entries = body.get(TABLE_HEAD..TABLE_HEAD + 4 * covered)?;
        if !is_zero(body.get(TABLE_HEAD + 4 * covered..)?) {
            return None;
        }
        let crcs =
            entries.chunks_exact(4).filter_map(|c| c.try_into().ok()).map(u32::from_le_bytes).collect();
        Some(StaleTable { crcs })
    }

    /// The table of the whole file `file` of a segment of `segment_len` bytes, if it holds one
    /// of `owner`'s.
    pub fn find(file: &[u8], segment_len: u32, owner: Owner) -> Option<Arc<StaleTable>> {
        StaleTable::parse(file.get(table_range(segment_len))?, segment_len, owner).map(Arc::new)
    }

    /// Does sector number `sector`, holding `bytes`, read as its old contents?
    pub fn is_stale(&self, sector: usize, bytes: &[u8]) -> bool {
        self.crcs.get(sector).is_some_and(|&c| bytes.len() == SECTOR && crc32c::crc32c(bytes) == c)
    }
}

/// Is the sector at file offset `at` (a multiple of [`SECTOR`]), holding `bytes`, blank: all
/// zero, or (in a recycled segment) its old contents?
pub fn is_blank(stale: Option<&StaleTable>, at: usize, bytes: &[u8]) -> bool {
    is_zero(bytes) || stale.is_some_and(|t| t.is_stale(at / SECTOR, bytes))
}

/// File offset of the first sector that is not blank among the whole sectors of `bytes`, which
/// hold the file from offset `base` (a multiple of [`SECTOR`]); a partial last sector must be
/// zero.
pub fn first_nonblank(stale: Option<&StaleTable>, bytes: &[u8], base: usize) -> Option<usize> {
    let Some(t) = stale else {
        return first_nonzero(bytes).map(|p| base + p);
    };
    bytes
        .chunks(SECTOR)
        .enumerate()
        .find(|(i, s)| !(is_zero(s) || t.is_stale(base / SECTOR + i, s)))
        .map(|(i, s)| base + i * SECTOR + s.iter().position(|&x| x != 0).unwrap_or(0))
}

/// File offset just past the last sector of `bytes` (the file from offset `base`, a multiple of
/// [`SECTOR`]) that is not blank; `base` when all are. Without a table: just past the last
/// non-zero byte.
pub fn end_of_nonblank(stale: Option<&StaleTable>, bytes: &[u8], base: usize) -> usize {
    let Some(t) = stale else {
        return base + end_of_nonzero(bytes);
    };
    let sectors = bytes.chunks(SECTOR).enumerate();
    sectors
        .rev()
        .find(|(i, s)| !(is_zero(s) || t.is_stale(base / SECTOR + i, s)))
        .map_or(base, |(i, s)| base + i * SECTOR + s.len())
}

/// The writes that make a purged file of `segment_len` bytes, holding `file`, a recycled spare:
/// its header sector and footer slot zeroed, its stale table written. (offset, bytes).
pub fn recycling_writes(file: &[u8], segment_len: u32, owner: Owner) -> Vec<(u64, Vec<u8>)> {
    vec![
        (0, vec![0; SECTOR]),
        (table_offset(segment_len) as u64, StaleTable::build(file, segment_len, owner)),
        (footer_offset(segment_len) as u64, vec![0; FOOTER_SLOT_LEN]),
    ]
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::{MAX_SEGMENT_LEN, MIN_SEGMENT_LEN};

    #[test]
    fn the_table_fits_between_the_data_and_the_footer_slot() {
        for len in [MIN_SEGMENT_LEN, 1 << 20, 64 << 20, MAX_SEGMENT_LEN, MIN_SEGMENT_LEN + 512 * 37] {
            let (covered, k) = table_sectors(len);
            assert_eq!((covered + k) * SECTOR, footer_offset(len), "{len}");
            assert!(TABLE_HEAD + 4 * covered + TABLE_TAIL <= k * SECTOR, "{len}: too small");
            assert!(
                TABLE_HEAD + 4 * (covered + 1) + TABLE_TAIL > (k - 1) * SECTOR,
                "{len}: not the smallest"
            );
        }
        assert_eq!(table_len(64 << 20), 1017 * SECTOR);
    }

    const OWNER: Owner = Owner { log_id: [7; 16], segment_seq: 9 };

    fn old_file(len: u32) -> Vec<u8> {
        (0..len as usize).map(|i| (i * 7 + i / 512) as u8).collect()
    }

    #[test]
    fn old_sectors_read_as_blank_and_new_ones_do_not() {
        let len = MIN_SEGMENT_LEN;
        let mut file = old_file(len);
        for (at, b) in recycling_writes(&file.clone(), len, OWNER) {
            file[at as usize..at as usize + b.len()].copy_from_slice(&b);
        }
        let t = StaleTable::find(&file, len, OWNER).unwrap();
        let limit = table_offset(len);
        assert_eq!(first_nonblank(Some(&t), &file[..limit], 0), None);
        assert_eq!(end_of_nonblank(Some(&t), &file[..limit], 0), 0);
        assert!(is_blank(Some(&t), 0, &file[..SECTOR]), "the zeroed header sector");
        file[3 * SECTOR + 9] ^= 1;
        assert_eq!(first_nonblank(Some(&t), &file[..limit], 0), Some(3 * SECTOR));
        assert_eq!(end_of_nonblank(Some(&t), &file[..limit], 0), 4 * SECTOR);
        assert_eq!(first_nonblank(Some(&t), &file[4 * SECTOR..limit], 4 * SECTOR), None);
        // Without the table only zeros are blank.
        assert_eq!(first_nonblank(None, &file[SECTOR..limit], SECTOR), Some(SECTOR));
        // A sector of old contents moved elsewhere is not blank there.
        let moved = file[5 * SECTOR..6 * SECTOR].to_vec();
        assert!(!is_blank(Some(&t), 6 * SECTOR, &moved));
    }

    #[test]
    fn a_damaged_or_foreign_table_is_not_taken() {
        let len = MIN_SEGMENT_LEN;
        let region = StaleTable::build(&old_file(len), len, OWNER);
        assert!(StaleTable::parse(&region, len, OWNER).is_some());
        assert!(StaleTable::parse(&region, len + 512, OWNER).is_none(), "another segment length");
        let other_log = Owner { log_id: [8; 16], ..OWNER };
        assert!(StaleTable::parse(&region, len, other_log).is_none(), "another log's");
        let other_seq = Owner { segment_seq: 10, ..OWNER };
        assert!(StaleTable::parse(&region, len, other_seq).is_none(), "another segment's");
        for at in [0, 9, 13, 20, 33, 44, region.len() - 1] {
            let mut r = region.clone();
            r[at] ^= 0x10;
            assert!(StaleTable::parse(&r, len, OWNER).is_none(), "byte {at}");
        }
        assert!(StaleTable::parse(&vec![0; region.len()], len, OWNER).is_none(), "zeros");
        assert!(StaleTable::parse(&region[..region.len() - 1], len, OWNER).is_none(), "short");
    }
}
