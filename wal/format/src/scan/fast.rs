//! The walker's hand-tuned fast path: the entries of a checked batch in a tight loop, three
//! records' checksums at a time. An entry is accepted here only if every check of the general
//! step (`data.rs`, `rules.rs`) passes, with the same effect on the walker; anything else goes
//! back to that step, which judges it as usual. Its own file so that the general step stays the
//! one definition of the rules and this loop can be read against it.

use super::decode::Window;
use super::{Rec, Walker};
use crate::format::*;
use zerocopy::FromBytes;

impl Walker {
    /// The entries of the current batch, in a tight loop: up to three records are located by
    /// the lengths in their (not yet checked) headers and their checksums computed at once, then
    /// each is checked and applied in order. A record is accepted here only if every check
    /// [`Walker::step`] makes passes, with the same effect on the walker; at anything else (a
    /// failed check, another kind of record, the end of the window) this returns, and `step`
    /// judges that record as usual.
    pub(super) fn walk_entries<'a>(&mut self, win: &Window<'a>, visit: &mut impl FnMut(&Rec<'a>)) {
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
