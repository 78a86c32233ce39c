//! The walker's step through the data area, batch by batch: the zero gap before a batch's
//! sector boundary, where the data ends (a zero header, or a blank sector of a recycled
//! segment), the batch frame and the structure of its records (count, length, user batches,
//! the segment's State record first), the chain; each record's logical checks are `rules.rs`.

use super::decode::{decode_in, header_span, record_span, DecodeFail, Window};
use super::{Phase, Rec, Walked, Walker};
use crate::damage::DamageKind;
use crate::format::*;
use zerocopy::FromBytes;

impl Walker {
    #[inline]
    pub(super) fn read_data<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        let mut off = self.off;
        if self.batch_left == 0 {
            if self.stop_at.is_some_and(|s| off as u64 >= s) {
                self.enter(Phase::Done);
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
}
