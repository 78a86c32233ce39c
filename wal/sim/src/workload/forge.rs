//! Damage as an adversary makes it (issue 22): a field of a record or a segment header changed
//! and the checksums recomputed, so that only the meaning is wrong. Shared by
//! `tests/engine/torn_only.rs` and the fault sweep's property test of the non-lossy cut.
#![allow(dead_code)]

use wal::format::RECORD_HEADER_LEN;

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes the `header_crc` of the record at `off` (FORMAT.md section 3: bytes 8..48).
pub fn reseal_header(b: &mut [u8], off: usize) {
    let h = crc32c::crc32c(&b[off + 8..off + RECORD_HEADER_LEN]);
    put_u32(b, off + 4, h);
}

/// Recomputes both checksums of the record at `off` as its header now says: `header_crc`, and
/// `crc` over the header from byte 4 and `payload_len` bytes (as far as the file goes).
pub fn reseal(b: &mut [u8], off: usize) {
    reseal_header(b, off);
    let len = u32_at(b, off + 12) as usize;
    let end = (off + RECORD_HEADER_LEN + len).min(b.len());
    let c = crc32c::crc32c(&b[off + 4..end]);
    put_u32(b, off, c);
}

/// Reseals the records at `offs` in order, each linked (`prev_crc`) to the `crc` of the one
/// before, so that a changed record does not break the chain after it.
pub fn rechain(b: &mut [u8], offs: &[usize]) {
    for w in offs.windows(2) {
        let prev = u32_at(b, w[0]);
        put_u32(b, w[1] + 40, prev);
        reseal(b, w[1]);
    }
}

/// Sets the `payload_len` of the record at `off`, its header checksum recomputed, and its
/// record checksum too when `whole`.
pub fn forge_len(b: &mut [u8], off: usize, len: u32, whole: bool) {
    put_u32(b, off + 12, len);
    if whole {
        reseal(b, off);
    } else {
        reseal_header(b, off);
    }
}

/// Raises the `record_count` of the batch frame at `frame` by `more` and its `batch_len` by
/// `bytes`, resealed, and re-links the records after it (`rest`, their offsets in order).
pub fn forge_frame(b: &mut [u8], frame: usize, more: u32, bytes: u64, rest: &[usize]) {
    // Frame payload (after the 48-byte header): durable_seq u64, record_count u32,
    // reserved u32, batch_len u64.
    let count = frame + RECORD_HEADER_LEN + 8;
    put_u32(b, count, u32_at(b, count) + more);
    let at = frame + RECORD_HEADER_LEN + 16;
    let len = u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) + bytes;
    b[at..at + 8].copy_from_slice(&len.to_le_bytes());
    reseal(b, frame);
    let mut offs = vec![frame];
    offs.extend_from_slice(rest);
    rechain(b, &offs);
}

/// Sets a segment header's `segment_len` (offset 12), its checksum (bytes 0..60) recomputed.
pub fn forge_segment_len(b: &mut [u8], len: u32) {
    put_u32(b, 12, len);
    let crc = crc32c::crc32c(&b[..60]);
    put_u32(b, 60, crc);
}
