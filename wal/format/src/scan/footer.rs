//! A segment's footer: checked at the end of a walk (its chain, counts, data end and index
//! against the segment, nothing after it in its slot), or read alone from the footer slot when
//! an open takes a sealed segment on its footer. Also the footer payload's codec.

use super::decode::{decode, decode_in, header_span, record_span, DecodeFail, Window};
use super::{Phase, Rec, Walked, Walker};
use crate::damage::DamageKind;
use crate::format::*;
use zerocopy::FromBytes;

/// Decoded summary of a footer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FooterInfo {
    pub payload: FooterPayload,
    pub index: Vec<IndexPoint>,
    pub seq: u64,
    pub crc: u32,
}

impl Walker {
    pub(super) fn read_footer<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        let at = footer_offset(self.header.segment_len.get());
        // A slot past the written end is zero without being read (read through a map, its first
        // byte would make the kernel read megabytes of zeros around it).
        if self.zeros_from <= at {
            self.enter(Phase::Done);
            return Walked::End;
        }
        if !win.covers(at + FOOTER_SLOT_LEN) {
            return Walked::NeedMore { from: at as u64, end: (at + FOOTER_SLOT_LEN) as u64 };
        }
        self.enter(Phase::Done);
        let slot = win.get(at, at + FOOTER_SLOT_LEN).unwrap_or_default();
        if is_zero(slot) {
            return Walked::End;
        }
        // The footer is its own write: damage in it is judged as a batch of its own.
        self.batch_start = at;
        self.batch_end = at + FOOTER_SLOT_LEN;
        self.batch_seq = self.expect_seq;
        self.batch_left = 0;
        self.check_footer(win, at)
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
pub fn frame_at(win: &Window<'_>, off: usize, data_end: usize) -> bool {
    off >= win.base && matches!(decode_in(win, off, data_end), Ok(d) if d.kind == Kind::Frame)
}

pub fn parse_footer(payload: &[u8], seq: u64, crc: u32) -> Result<FooterInfo, DamageKind> {
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
