//! Classifying the first damage of a log: the decision table.
//!
//! # The decision table
//!
//! A record is *damaged* when its header checksum fails (`header_ok = false`), or its header
//! checks out but its body does not (`body_ok = false`: record checksum, padding, or a zero tail
//! that is not zero), or it checks out entirely but breaks a rule no torn write can produce
//! (`semantic`: sequence gap, chain break, LSN gap, stale epoch, bad batch structure, wrong
//! segment identity, a length past its room, a file shorter than its header says). For the
//! first damaged record of the log (*damaged*: its header or its body fails):
//!
//! | record | breaks a rule no tear can | attested | blank sector | verdict |
//! |---|---|---|---|---|
//! | checks out | no | any | any | valid record |
//! | any | yes | any | any | CORRUPT |
//! | damaged | no | yes | any | CORRUPT |
//! | damaged | no | no | yes | TORN_TAIL |
//! | damaged | no | no | no | CORRUPT_TAIL |
//!
//! The table is data ([`TABLE`]): [`decide`] looks the inputs up in it, a test checks that every
//! combination of inputs matches exactly one row, and that this table and FORMAT.md's are the
//! rendering of it.
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

use crate::damage::CrcVerdict;
use crate::format::*;
use crate::scan::{decode_in, DecodeFail, RawDamage, Window};
use crate::stale::{is_blank, StaleTable};
use zerocopy::FromBytes;

/// What one row of the decision table asks of one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    Yes,
    No,
    Any,
}

impl Match {
    fn matches(self, v: bool) -> bool {
        match self {
            Match::Yes => v,
            Match::No => !v,
            Match::Any => true,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Match::Yes => "yes",
            Match::No => "no",
            Match::Any => "any",
        }
    }
}

/// One row of the decision table: a matcher per input, and the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// `Yes`: the record checks out (header and body); `No`: it is damaged.
    pub record_ok: Match,
    /// It checks out but breaks a rule no torn write can produce.
    pub semantic: Match,
    pub attested: Match,
    pub blank_sector: Match,
    /// `None`: a valid record, not damage.
    pub verdict: Option<CrcVerdict>,
}

/// The decision table of the module docs, one row per case; exactly one row matches any inputs.
pub const TABLE: [Row; 5] = {
    use Match::{Any, No, Yes};
    [
        Row::new(Yes, No, Any, Any, None),
        Row::new(Any, Yes, Any, Any, Some(CrcVerdict::Corrupt)),
        Row::new(No, No, Yes, Any, Some(CrcVerdict::Corrupt)),
        Row::new(No, No, No, Yes, Some(CrcVerdict::TornTail)),
        Row::new(No, No, No, No, Some(CrcVerdict::CorruptTail)),
    ]
};

impl Row {
    const fn new(
        record_ok: Match,
        semantic: Match,
        attested: Match,
        blank_sector: Match,
        verdict: Option<CrcVerdict>,
    ) -> Row {
        Row { record_ok, semantic, attested, blank_sector, verdict }
    }

    fn matches(&self, record_ok: bool, semantic: bool, attested: bool, blank_sector: bool) -> bool {
        self.record_ok.matches(record_ok)
            && self.semantic.matches(semantic)
            && self.attested.matches(attested)
            && self.blank_sector.matches(blank_sector)
    }
}

/// The decision table rendered as Markdown, as the module docs and FORMAT.md show it.
pub fn table_markdown() -> String {
    let mut out = String::from(
        "| record | breaks a rule no tear can | attested | blank sector | verdict |\n|---|---|---|---|---|\n",
    );
    for r in &TABLE {
        let record = match r.record_ok {
            Match::Yes => "checks out",
            Match::No => "damaged",
            Match::Any => "any",
        };
        let verdict = r.verdict.map_or("valid record", CrcVerdict::as_str);
        out += &format!(
            "| {record} | {} | {} | {} | {verdict} |\n",
            r.semantic.word(),
            r.attested.word(),
            r.blank_sector.word()
        );
    }
    out
}

/// Looks the inputs up in [`TABLE`]: `None` for a valid record, else the verdict of the damage.
pub fn decide(
    header_ok: bool,
    body_ok: bool,
    semantic: bool,
    attested: bool,
    blank_sector: bool,
) -> Option<CrcVerdict> {
    // Mutant (tools/mutants.sh, I4): damage in attested (synced, acknowledged) data with a
    // zero sector or a short record passes for a torn tail, so a writer would cut it.
    let attested = attested && !crate::mutants::on("attested-damage-as-torn");
    let record_ok = header_ok && body_ok;
    let row = TABLE.iter().find(|r| r.matches(record_ok, semantic, attested, blank_sector));
    // Every combination matches a row (tested); were one to match none, damage is CORRUPT.
    row.map_or(Some(CrcVerdict::Corrupt), |r| r.verdict)
}

/// A segment file's bytes at their offsets, as classifying damage reads them: held whole (a
/// slice), or read a window at a time (`segment_read.rs`: a verifier's full scan, whose
/// memory stays a window however long the segment is).
pub trait SegmentBytes {
    /// The file's length.
    fn file_len(&self) -> usize;
    /// Where the written bytes end: every byte from here on is zero.
    fn written(&self) -> usize;
    /// A window holding the file's bytes `from..to` (those the file has; perhaps more).
    fn window(&mut self, from: usize, to: usize) -> std::io::Result<Window<'_>>;
}

impl SegmentBytes for &[u8] {
    fn file_len(&self) -> usize {
        self.len()
    }
    fn written(&self) -> usize {
        self.len()
    }
    fn window(&mut self, _: usize, _: usize) -> std::io::Result<Window<'_>> {
        Ok(Window::whole(self))
    }
}

/// Is there a self-valid frame or footer at or after `from` whose `durable_seq` covers `seq`?
/// (At `from` itself: bytes found after the end of the data start with the frame that follows
/// the dropped one, and it can attest it.)
pub fn attested_later(bytes: &[u8], from: u64, seq: u64) -> bool {
    infallible(attested_later_in(&mut { bytes }, from, seq))
}

/// [`attested_later`] of any [`SegmentBytes`]. Headers past the written end are all zero: no
/// frame or footer starts there, so the search stops at it.
pub fn attested_later_in(src: &mut impl SegmentBytes, from: u64, seq: u64) -> std::io::Result<bool> {
    let (len, written) = (src.file_len(), src.written().min(src.file_len()));
    let mut off = (from as usize).next_multiple_of(ALIGN);
    while off + RECORD_HEADER_LEN <= len && off < written {
        let win = src.window(off, off + RECORD_HEADER_LEN)?;
        let hb = win.get(off, off + RECORD_HEADER_LEN).unwrap_or_default();
        // Fast reject: the kind byte must be a frame or footer.
        let kind = hb.get(8).copied().unwrap_or(0);
        if (kind == Kind::Frame as u8 || kind == Kind::Footer as u8) && !is_zero(hb) {
            // As `decode(bytes, off, len)` of the whole file: a window that lacks the record's
            // bytes is widened to them (a frame or footer is short), up to the file's end.
            let mut need = off + RECORD_HEADER_LEN;
            let durable = loop {
                let win = src.window(off, need)?;
                match durable_at(&win, off, len) {
                    Err(n) if n > need && !win.covers(n) => need = n,
                    Err(_) => break None,
                    Ok(d) => break d,
                }
            };
            if durable.is_some_and(|(ds, s)| ds >= seq && s > seq) {
                return Ok(true);
            }
        }
        off += ALIGN;
    }
    Ok(false)
}

/// The `durable_seq` a self-valid frame or footer at `off` declares, with its own sequence
/// (`Ok(None)`: no such record there); `Err(end)` when the window lacks the bytes up to `end`.
fn durable_at(win: &Window<'_>, off: usize, limit: usize) -> Result<Option<(u64, u64)>, usize> {
    let d = match decode_in(win, off, limit) {
        Ok(d) => d,
        Err(DecodeFail::More(n)) => return Err(n),
        Err(DecodeFail::Bad(_)) => return Ok(None),
    };
    let durable = match d.kind {
        Kind::Frame => FramePayload::read_from_bytes(d.payload).ok().map(|f| f.durable_seq.get()),
        Kind::Footer => d.header.seq.get().checked_sub(1),
        _ => None,
    };
    Ok(durable.map(|ds| (ds, d.header.seq.get())))
}

/// Is an all-zero sector inside `[start, end)` (whole sectors of the file only)?
pub fn zero_sector_in(bytes: &[u8], start: u64, end: u64) -> bool {
    blank_sector_in(bytes, start, end, None)
}

/// Is a blank sector (all zero, or in a recycled segment its old contents: [`crate::stale`])
/// inside `[start, end)` (whole sectors of the file only)?
pub fn blank_sector_in(bytes: &[u8], start: u64, end: u64, stale: Option<&StaleTable>) -> bool {
    infallible(blank_sector_in_src(&mut { bytes }, start, end, stale))
}

/// [`blank_sector_in`] of any [`SegmentBytes`], a sector at a time.
fn blank_sector_in_src(
    src: &mut impl SegmentBytes,
    start: u64,
    end: u64,
    stale: Option<&StaleTable>,
) -> std::io::Result<bool> {
    let first = start as usize / SECTOR;
    let last = (end as usize).div_ceil(SECTOR);
    for s in first..last {
        if blank_sector(src, s * SECTOR, stale)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Is the whole sector at `at` in the file and blank (all zero without a stale table)?
fn blank_sector(src: &mut impl SegmentBytes, at: usize, stale: Option<&StaleTable>) -> std::io::Result<bool> {
    let win = src.window(at, at + SECTOR)?;
    Ok(win.get(at, at + SECTOR).is_some_and(|b| match stale {
        Some(t) => is_blank(Some(t), at, b),
        None => is_zero(b),
    }))
}

/// A slice's windows never fail.
fn infallible<T>(r: std::io::Result<T>) -> T {
    r.unwrap_or_else(|_| unreachable!("a slice's windows never fail"))
}

/// Classifies raw damage in a segment's bytes; `later_segment` says a later segment holds data;
/// `stale` is the segment's stale table if it was recycled ([`crate::scan::stale_of`]).
pub fn classify(bytes: &[u8], d: &RawDamage, later_segment: bool, stale: Option<&StaleTable>) -> CrcVerdict {
    infallible(classify_in(&mut { bytes }, d, later_segment, stale))
}

/// [`classify`] of any [`SegmentBytes`]: it reads the damaged record's torn span, the sector
/// the damage starts in, and (a window at a time) the rest of the file for a later frame.
pub fn classify_in(
    src: &mut impl SegmentBytes,
    d: &RawDamage,
    later_segment: bool,
    stale: Option<&StaleTable>,
) -> std::io::Result<CrcVerdict> {
    // A cut starts at the damaged batch's start: a later durable_seq that covers any of the
    // batch (its frame, written with the rest in one write) says a sync covered all of it.
    let attested = later_segment || attested_later_in(src, d.offset, d.batch_seq)?;
    let blank = match d.torn_span {
        Some((from, to)) => blank_sector_in_src(src, from, to, stale)?,
        None => false,
    };
    // A record that checks out but breaks a rule is no torn write's doing where a dropped sector
    // reads as zero. In a recycled segment it reads as old contents, which can hold a whole
    // record of the file's earlier life: one that starts in a sector of old contents is what a
    // crash dropped there.
    let at = d.offset as usize - d.offset as usize % SECTOR;
    let old = stale.is_some() && blank_sector(src, at, stale)?;
    let semantic = d.semantic && !old;
    Ok(decide(d.header_ok, d.body_ok && !old, semantic, attested, blank).unwrap_or(CrcVerdict::Corrupt))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// Every combination of the decision table's inputs matches exactly one row, every row is
    /// reached, and `decide` answers that row's verdict.
    #[test]
    fn decision_table_every_combination() {
        let mut reached = [0u32; TABLE.len()];
        for bits in 0u32..32 {
            let b = |i: u32| bits & (1 << i) != 0;
            let (h, body, sem, att, blank) = (b(0), b(1), b(2), b(3), b(4));
            let rows: Vec<usize> =
                (0..TABLE.len()).filter(|&i| TABLE[i].matches(h && body, sem, att, blank)).collect();
            let what = format!("header_ok={h} body_ok={body} semantic={sem} attested={att} blank={blank}");
            assert_eq!(rows.len(), 1, "{what}: rows {rows:?} match");
            reached[rows[0]] += 1;
            assert_eq!(decide(h, body, sem, att, blank), TABLE[rows[0]].verdict, "{what}");
        }
        assert!(reached.iter().all(|&n| n > 0), "a row no input reaches: {reached:?}");
        // The cases the invariants name (docs/invariants.md I4): attested damage is CORRUPT even
        // with evidence of tearing; unattested damage with it is a torn tail; without it, not.
        assert_eq!(decide(true, false, false, true, true), Some(CrcVerdict::Corrupt));
        assert_eq!(decide(false, true, false, true, true), Some(CrcVerdict::Corrupt));
        assert_eq!(decide(false, false, false, false, true), Some(CrcVerdict::TornTail));
        assert_eq!(decide(true, false, false, false, false), Some(CrcVerdict::CorruptTail));
        assert_eq!(decide(true, true, true, false, true), Some(CrcVerdict::Corrupt));
        assert_eq!(decide(true, true, false, true, false), None);
    }

    /// The module docs and FORMAT.md show the table as [`table_markdown`] renders it.
    #[test]
    fn the_documented_tables_are_the_data() {
        let table = table_markdown();
        let module: String = include_str!("classify.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! ").or(l.strip_prefix("//!")))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(module.contains(&table), "the module docs' table is not:\n{table}");
        let format = include_str!("../../../FORMAT.md");
        assert!(format.contains(&table), "FORMAT.md section 8's table is not:\n{table}");
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
