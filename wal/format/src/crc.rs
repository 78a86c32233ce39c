//! The two checksums of a record (FORMAT.md), computed together, for up to three records at once.
//!
//! A record's `header_crc` is crc32c over header bytes 8..48 and its `crc` is crc32c over header
//! bytes 4..48 and the payload. Computed one after the other with [`crc32c::crc32c`], the header
//! bytes are read twice, each call pays its dispatch, and each checksum is one chain of dependent
//! `crc32` instructions: a record of a few hundred bytes is bound by the instruction's latency
//! (3 cycles per 8 bytes), not its throughput (1 per cycle). Here the header words are loaded once
//! and feed both checksums, and the checksums of up to three records, which do not depend on each
//! other, run as interleaved chains, so the CPU overlaps them.
//!
//! The results are exactly crc32c's (the tests compare them byte for byte); without SSE 4.2 this
//! falls back to the `crc32c` crate.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::format::RECORD_HEADER_LEN;

/// `(header_crc, crc)` of each record. Every slice is one record's header and payload (without
/// its padding), so at least [`RECORD_HEADER_LEN`] bytes; a shorter one gets `(0, 0)`.
#[inline]
pub fn record_crcs<const N: usize>(recs: [&[u8]; N]) -> [(u32, u32); N] {
    if recs.iter().any(|r| r.len() < RECORD_HEADER_LEN) {
        return [(0, 0); N];
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the only requirement of a `target_feature` function is that the CPU has the
            // feature, which was just checked.
            return unsafe { hw::record_crcs(recs) };
        }
    }
    recs.map(|r| {
        let h = crc32c::crc32c(r.get(8..RECORD_HEADER_LEN).unwrap_or_default());
        (h, crc32c::crc32c(r.get(4..).unwrap_or_default()))
    })
}

#[cfg(target_arch = "x86_64")]
mod hw {
    use crate::format::RECORD_HEADER_LEN;
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};

    /// The little-endian word at `at` (zero past the end: never reached, callers stay inside).
    #[inline(always)]
    fn word(b: &[u8], at: usize) -> u64 {
        b.get(at..at + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()).map_or(0, u64::from_le_bytes)
    }

    /// Continues the checksum states `st` over `data`, one lane each: the lanes' words are
    /// interleaved as long as every lane has one, then each lane finishes alone.
    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn lanes<const N: usize>(st: &mut [u64; N], data: [&[u8]; N]) {
        let words = data.iter().map(|d| d.len() / 8).min().unwrap_or(0);
        for i in 0..words {
            for k in 0..N {
                if let (Some(s), Some(d)) = (st.get_mut(k), data.get(k)) {
                    *s = _mm_crc32_u64(*s, word(d, i * 8));
                }
            }
        }
        for (s, d) in st.iter_mut().zip(data) {
            let rest = d.get(words * 8..).unwrap_or_default();
            let mut chunks = rest.chunks_exact(8);
            for c in &mut chunks {
                *s = _mm_crc32_u64(*s, word(c, 0));
            }
            for &b in chunks.remainder() {
                *s = u64::from(_mm_crc32_u8(*s as u32, b));
            }
        }
    }

    #[target_feature(enable = "sse4.2")]
    pub(super) fn record_crcs<const N: usize>(recs: [&[u8]; N]) -> [(u32, u32); N] {
        let mut h = [u64::from(u32::MAX); N];
        let mut c = [0u64; N];
        for (c, r) in c.iter_mut().zip(recs) {
            let w = r.get(4..8).and_then(|w| <[u8; 4]>::try_from(w).ok()).map_or(0, u32::from_le_bytes);
            *c = u64::from(_mm_crc32_u32(u32::MAX, w));
        }
        // Header bytes 8..48: loaded once, into both checksums.
        for i in 0..(RECORD_HEADER_LEN - 8) / 8 {
            for k in 0..N {
                if let (Some(h), Some(c), Some(r)) = (h.get_mut(k), c.get_mut(k), recs.get(k)) {
                    let w = word(r, 8 + i * 8);
                    *h = _mm_crc32_u64(*h, w);
                    *c = _mm_crc32_u64(*c, w);
                }
            }
        }
        let mut payloads: [&[u8]; N] = [&[]; N];
        for (p, r) in payloads.iter_mut().zip(recs) {
            *p = r.get(RECORD_HEADER_LEN..).unwrap_or_default();
        }
        lanes(&mut c, payloads);
        let mut out = [(0, 0); N];
        for ((o, h), c) in out.iter_mut().zip(h).zip(c) {
            *o = (!(h as u32), !(c as u32));
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn bytes(len: usize, salt: u32) -> Vec<u8> {
        (0..len as u32).map(|i| (i.wrapping_mul(2654435761).wrapping_add(salt) >> 13) as u8).collect()
    }

    fn want(r: &[u8]) -> (u32, u32) {
        (crc32c::crc32c(&r[8..48]), crc32c::crc32c(&r[4..]))
    }

    #[test]
    fn one_record_every_payload_length_and_alignment() {
        let buf = bytes(48 + 700 + 8, 7);
        for start in 0..8 {
            for plen in 0..=700 {
                let r = &buf[start..start + 48 + plen];
                assert_eq!(record_crcs([r]), [want(r)], "start {start} payload {plen}");
            }
        }
    }

    #[test]
    fn three_records_of_different_lengths() {
        let buf = bytes(4096, 99);
        for (a, b, c) in [(0, 0, 0), (256, 256, 256), (1, 300, 17), (700, 0, 64), (5, 9, 1000), (63, 64, 65)]
        {
            let ra = &buf[3..3 + 48 + a];
            let rb = &buf[1000..1000 + 48 + b];
            let rc = &buf[2001..2001 + 48 + c];
            assert_eq!(record_crcs([ra, rb, rc]), [want(ra), want(rb), want(rc)], "{a} {b} {c}");
            assert_eq!(record_crcs([ra, rb]), [want(ra), want(rb)], "{a} {b}");
        }
    }

    #[test]
    fn too_short_is_zero() {
        assert_eq!(record_crcs([&[1u8; 47][..]]), [(0, 0)]);
    }
}
