//! Classifying the first damage of a log: the decision table.
//!
//! # The decision table
//!
//! A record is *damaged* when its header checksum fails (`header_ok = false`), or its header
//! checks out but its body does not (`body_ok = false`: record checksum, padding, or a zero tail
//! that is not zero), or it checks out entirely but breaks a rule no torn write can produce
//! (`semantic`: sequence gap, chain break, LSN gap, stale epoch, bad batch structure, wrong
//! segment identity, a length past its room, a file shorter than its header says). For the
//! first damaged record of the log:
//!
//! | header ok | body ok | semantic | attested | blank sector | verdict |
//! |---|---|---|---|---|---|
//! | yes | yes | no | - | - | valid record |
//! | yes | yes | yes | - | - | CORRUPT |
//! | any | any | - | yes | - | CORRUPT |
//! | any | any | - | no | yes | TORN_TAIL |
//! | any | any | - | no | no | CORRUPT_TAIL |
//!
//! *Attested*: a later segment has a valid header (rotation syncs the old segment first), or a
//! self-valid batch frame or footer at or after the damage in the same segment declares
//! `durable_seq` at or past the damaged batch's first record: that batch was synced (a sync
//! covers whole batches), so its damage cannot be a torn write and a cut from its start would
//! remove synced records. *Blank sector*:
//! an all-zero (in a recycled segment: blank) 512-byte-aligned sector among the bytes a crash
//! would have had to drop for this damage ([`RawDamage::torn_span`], FORMAT.md section 8.1):
//! the damaged record's own bytes, never a sector elsewhere in its batch or the file. A file
//! that ends early is no evidence: segment files never shrink. See [`decide`] and its
//! exhaustive test.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::error::CrcVerdict;
use crate::format::*;
use crate::scan::{decode, RawDamage};
use crate::stale::{is_blank, StaleTable};
use zerocopy::FromBytes;

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

/// The decision table of the module docs.
pub fn decide(
    header_ok: bool,
    body_ok: bool,
    semantic: bool,
    attested: bool,
    blank_sector: bool,
) -> Option<CrcVerdict> {
    if header_ok && body_ok && !semantic {
        return None;
    }
    // Mutant (tools/mutants.sh, I4): damage in attested (synced, acknowledged) data with a
    // zero sector or a short record passes for a torn tail, so a writer would cut it.
    let attested = attested && !cfg!(feature = "mutant-attested-damage-as-torn");
    if semantic || attested {
        return Some(CrcVerdict::Corrupt);
    }
    if blank_sector {
        return Some(CrcVerdict::TornTail);
    }
    Some(CrcVerdict::CorruptTail)
}

/// Is there a self-valid frame or footer at or after `from` whose `durable_seq` covers `seq`?
/// (At `from` itself: bytes found after the end of the data start with the frame that follows
/// the dropped one, and it can attest it.)
pub fn attested_later(bytes: &[u8], from: u64, seq: u64) -> bool {
    let mut off = (from as usize).next_multiple_of(ALIGN);
    while off + RECORD_HEADER_LEN <= bytes.len() {
        let hb = bytes.get(off..off + RECORD_HEADER_LEN).unwrap_or_default();
        // Fast reject: the kind byte must be a frame or footer.
        let kind = hb.get(8).copied().unwrap_or(0);
        if (kind == Kind::Frame as u8 || kind == Kind::Footer as u8) && !is_zero(hb) {
            if let Ok(d) = decode(bytes, off, bytes.len()) {
                let durable = match d.kind {
                    Kind::Frame => FramePayload::read_from_bytes(d.payload).ok().map(|f| f.durable_seq.get()),
                    Kind::Footer => d.header.seq.get().checked_sub(1),
                    _ => None,
                };
                if durable.is_some_and(|ds| ds >= seq) && d.header.seq.get() > seq {
                    return true;
                }
            }
        }
        off += ALIGN;
    }
    false
}

/// Is an all-zero sector inside `[start, end)` (whole sectors of the file only)?
pub fn zero_sector_in(bytes: &[u8], start: u64, end: u64) -> bool {
    let first = start as usize / SECTOR;
    let last = (end as usize).div_ceil(SECTOR);
    (first..last).any(|s| bytes.get(s * SECTOR..(s + 1) * SECTOR).is_some_and(is_zero))
}

/// Is a blank sector (all zero, or in a recycled segment its old contents: [`crate::stale`])
/// inside `[start, end)` (whole sectors of the file only)?
pub fn blank_sector_in(bytes: &[u8], start: u64, end: u64, stale: Option<&StaleTable>) -> bool {
    let Some(t) = stale else { return zero_sector_in(bytes, start, end) };
    let first = start as usize / SECTOR;
    let last = (end as usize).div_ceil(SECTOR);
    (first..last)
        .any(|s| bytes.get(s * SECTOR..(s + 1) * SECTOR).is_some_and(|b| is_blank(Some(t), s * SECTOR, b)))
}

/// Classifies raw damage in a segment's bytes; `later_segment` says a later segment holds data;
/// `stale` is the segment's stale table if it was recycled ([`crate::scan::stale_of`]).
pub fn classify(bytes: &[u8], d: &RawDamage, later_segment: bool, stale: Option<&StaleTable>) -> CrcVerdict {
    // A cut starts at the damaged batch's start: a later durable_seq that covers any of the
    // batch (its frame, written with the rest in one write) says a sync covered all of it.
    let attested = later_segment || attested_later(bytes, d.offset, d.batch_seq);
    let blank = d.torn_span.is_some_and(|(from, to)| blank_sector_in(bytes, from, to, stale));
    // A record that checks out but breaks a rule is no torn write's doing where a dropped sector
    // reads as zero. In a recycled segment it reads as old contents, which can hold a whole
    // record of the file's earlier life: one that starts in a sector of old contents is what a
    // crash dropped there.
    let at = d.offset as usize - d.offset as usize % SECTOR;
    let old = stale.is_some() && bytes.get(at..at + SECTOR).is_some_and(|b| is_blank(stale, at, b));
    let semantic = d.semantic && !old;
    decide(d.header_ok, d.body_ok && !old, semantic, attested, blank).unwrap_or(CrcVerdict::Corrupt)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// Every combination of the decision table's inputs, against the table in the module docs.
    #[test]
    fn decision_table_every_combination() {
        let mut seen = std::collections::BTreeMap::new();
        for bits in 0u32..32 {
            let b = |i: u32| bits & (1 << i) != 0;
            let (h, body, sem, att, blank) = (b(0), b(1), b(2), b(3), b(4));
            let got = decide(h, body, sem, att, blank);
            let want = if h && body && !sem {
                None
            } else if sem || att {
                Some(CrcVerdict::Corrupt)
            } else if blank {
                Some(CrcVerdict::TornTail)
            } else {
                Some(CrcVerdict::CorruptTail)
            };
            assert_eq!(
                got, want,
                "inputs header_ok={h} body_ok={body} semantic={sem} attested={att} blank={blank}"
            );
            *seen.entry(format!("{got:?}")).or_insert(0) += 1;
        }
        // Each outcome is reachable.
        assert_eq!(seen.len(), 4, "{seen:?}");
        // Attested damage is CORRUPT even with evidence of tearing.
        assert_eq!(decide(true, false, false, true, true), Some(CrcVerdict::Corrupt));
    }

    #[test]
    fn zero_and_nonzero_scans() {
        let mut b = vec![0u8; 10_000];
        assert_eq!(first_nonzero(&b), None);
        assert_eq!(end_of_nonzero(&b), 0);
        b[5000] = 1;
        b[7001] = 2;
        assert_eq!(first_nonzero(&b), Some(5000));
        assert_eq!(end_of_nonzero(&b), 7002);
        assert!(zero_sector_in(&b, 0, 600));
        assert!(!zero_sector_in(&b, 4608, 5120));
    }
}
