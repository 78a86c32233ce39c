//! Walking the bytes of one segment: decoding records, checking the checksum chain, the batch
//! structure and the logical rules, and classifying the first damage.
//!
//! The walker is pull-based ([`Walker::next`]) so that recovery, the replay iterator and the
//! verifier share it. It works on a byte slice (a map, or a buffer filled with pread) and never
//! allocates per record.
//!
//! The decision table that classifies the first damage lives in [`crate::classify`].
//!
//! One part of the walk per file:
//!
//! - this file: what a walk yields (records, damage, the end, the bytes it needs next) and the
//!   walker's state and steps, up to the check that the rest of the data area is zero or blank;
//! - `decode.rs`: a window of a segment file, and decoding one record from it;
//! - `start.rs`: what the start of a segment file says (a spare, a header, damage);
//! - `data.rs`: the data area, batch by batch: alignment, frames, the batch's structure;
//! - `fast.rs`: the hand-tuned loop over a checked batch's entries;
//! - `rules.rs`: the logical rules a record keeps (epochs, LSNs, cuts, metadata);
//! - `footer.rs`: the footer: checked at the end of a walk, or read alone at a fast open;
//! - `logical.rs`: the logical state and the payloads that carry it (State, Meta).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod data;
mod decode;
mod fast;
mod footer;
mod logical;
mod rules;
mod start;

pub use decode::{decode_in, DecodeFail};
pub use decode::{FrameProbe, Window};
pub use footer::frame_at;
pub use footer::{read_footer_fast, FooterInfo};
pub use logical::{encode_state, parse_state};
pub use logical::{parse_meta, Logical};
pub use start::{bad_stale_table, read_start_in, zero_header_start};
pub use start::{owner_of, read_start, segment_len_of, stale_of, Expect, Start};

use crate::damage::DamageKind;
use crate::format::*;
use crate::stale::StaleTable;
use decode::{decode, header_span};

/// One valid record, borrowed from the segment's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec<'a> {
    pub kind: Kind,
    pub flags: u8,
    pub seq: u64,
    pub lsn: u64,
    pub epoch: u64,
    pub payload: &'a [u8],
    /// Offset of the record header in the segment.
    pub offset: u64,
    pub crc: u32,
    pub prev_crc: u32,
}

/// The first damage in a segment, before it is classified against the rest of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDamage {
    pub kind: DamageKind,
    pub offset: u64,
    /// First byte of the batch the damage is in (where a cut would start).
    pub batch_start: u64,
    /// The bytes a crash would have had to drop for this damage to be a torn write
    /// (FORMAT.md section 8.1): a blank sector among them is the evidence. For a record, the
    /// bytes the walk judged it by (its header, or the whole record as its header, which checks
    /// out, declares it); after the end of the data, the sector where the next batch's frame
    /// would start. `None` where no crash can produce the damage at all (non-zero padding
    /// after a batch, bytes after a footer, a file shorter than its header says).
    pub torn_span: Option<(u64, u64)>,
    pub header_ok: bool,
    pub body_ok: bool,
    pub semantic: bool,
    /// Record sequence expected at the damage.
    pub seq: u64,
    /// Record sequence of the damaged batch's first record (its frame; `seq` when the damage is
    /// not inside a batch whose frame checked out): a later `durable_seq` at or past it says the
    /// whole batch was synced, so a cut from its start would remove synced records.
    pub batch_seq: u64,
    /// LSN the next entry would have had.
    pub lsn: u64,
    /// The next LSN at the start of the damaged batch: a cut there loses entries from it on.
    pub batch_lsn: u64,
}

/// One step of a walk.
#[derive(Debug)]
pub enum Step<'a> {
    Record(Rec<'a>),
    /// The segment ended cleanly (sealed or not).
    End,
    Damage(RawDamage),
}

/// One step of a walk over a [`Window`]: a [`Step`], or the bytes the walk needs next.
#[derive(Debug)]
pub enum Walked<'a> {
    Record(Rec<'a>),
    End,
    Damage(RawDamage),
    /// The next step needs the file's bytes `from..end`, which the window does not hold (and the
    /// window does not reach the end of the file). Call again with a window starting at or
    /// before `from`; nothing the walk has done is lost.
    NeedMore {
        from: u64,
        end: u64,
    },
}

/// Running counts a footer must agree with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub records: u32,
    pub entries: u32,
    pub min_lsn: u64,
    pub max_lsn: u64,
    pub min_keep_lt: u64,
    pub cuts: u32,
}

/// Walks the records of one segment.
#[derive(Clone, Debug)]
pub struct Walker {
    pub header: SegmentHeader,
    off: usize,
    limit: usize,
    pub expect_seq: u64,
    pub prev_crc: u32,
    batch_start: usize,
    batch_end: usize,
    batch_left: u32,
    batch_lsn: u64,
    /// Record sequence of the current batch's frame.
    batch_seq: u64,
    /// Where the zero rest of the data area starts, and how far it is checked (phase `Tail`).
    tail_start: usize,
    tail_at: usize,
    /// Every byte of the file from here on is zero, as its storage reported
    /// ([`Walker::zeros_from`]): the tail check does not read them.
    zeros_from: usize,
    /// A recycled segment's stale table ([`Walker::stale`]): its blank sectors are zero or old.
    stale: Option<std::sync::Arc<StaleTable>>,
    first_batch: bool,
    group_open: bool,
    phase: Phase,
    /// Validate footer counts (false when the walk resumed mid-segment).
    full: bool,
    /// Logical state; `None` until the segment's State record is read.
    pub logical: Option<Logical>,
    /// Highest `durable_seq` any frame declared.
    pub durable_seq: u64,
    pub counts: Counts,
    /// Offset just past the last valid batch.
    pub data_end: u64,
    pub footer: Option<FooterInfo>,
    /// Stop (as if the data ended) at this offset: a reader's bound inside the live segment.
    pub stop_at: Option<u64>,
}

/// Where a walk is in its segment. Phases only go forward, in this order ([`Walker::enter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Data,
    /// Checking that the rest of the data area, from `tail_start`, is zero; done up to `tail_at`.
    Tail,
    Footer,
    Done,
}

impl Walker {
    /// Moves the walk to phase `next`: the data, the zero rest of the data area, the footer,
    /// done; never back (a walk that went back could pass a record twice or judge a footer as
    /// data).
    #[inline]
    fn enter(&mut self, next: Phase) {
        debug_assert!(next >= self.phase, "walker phase from {:?} back to {next:?}", self.phase);
        self.phase = next;
    }

    /// Starts at the first batch. `logical` is the state at the segment's start if known.
    pub fn new(header: SegmentHeader, logical: Option<Logical>) -> Walker {
        let limit = header.data_limit();
        Walker {
            off: SEGMENT_HEADER_LEN,
            limit,
            expect_seq: header.first_record_seq.get(),
            prev_crc: header.chain_seed(),
            header,
            batch_start: SEGMENT_HEADER_LEN,
            batch_end: SEGMENT_HEADER_LEN,
            batch_left: 0,
            batch_lsn: 0,
            batch_seq: 0,
            tail_start: 0,
            tail_at: 0,
            zeros_from: usize::MAX,
            stale: None,
            first_batch: true,
            group_open: false,
            phase: Phase::Data,
            full: true,
            logical,
            durable_seq: 0,
            counts: Counts { min_keep_lt: u64::MAX, ..Counts::default() },
            data_end: SEGMENT_HEADER_LEN as u64,
            footer: None,
            stop_at: None,
        }
    }

    /// Tells the walk that every byte of the file from `at` on reads as zero, because nothing
    /// was ever written there (the engine's storage seam knows it: `Reader::written_end`): the check that the
    /// rest of the data area and the footer slot are zero stops at `at` instead of reading
    /// (and, through a map, faulting in) up to 64 MiB of reserved blocks that the kernel
    /// would allocate and clear page by page.
    pub fn zeros_from(&mut self, at: usize) {
        self.zeros_from = at;
    }

    /// Gives the walk of a recycled segment its stale table ([`crate::stale`]): past the last
    /// batch, a sector reads as blank when it is zero or still holds the file's old contents.
    /// A recycled segment walked without it reads its old contents as damage.
    pub fn stale(&mut self, table: Option<std::sync::Arc<StaleTable>>) {
        self.stale = table;
    }

    /// At a batch boundary `off` of a recycled segment: the rest holds old contents, which can
    /// be whole records of the file's earlier life (valid on their own, but not here), so a
    /// blank sector ends the data before anything in it is decoded. `None`: a batch starts here.
    /// Out of line: the walk of every other segment never comes here, and its loop stays small.
    #[cold]
    #[inline(never)]
    fn old_contents_at<'a>(&mut self, win: &Window<'a>, off: usize) -> Option<Walked<'a>> {
        let t = self.stale.clone()?;
        let Some(s) = win.get(off, (off + SECTOR).min(self.limit)) else {
            return Some(Walked::NeedMore { from: off as u64, end: (off + SECTOR) as u64 });
        };
        let blank = off.is_multiple_of(SECTOR) && crate::stale::is_blank(Some(&t), off, s);
        blank.then(|| self.enter_tail(win, off))
    }

    /// The data ends at `off`: the rest of the data area is checked from there.
    fn enter_tail<'a>(&mut self, win: &Window<'a>, off: usize) -> Walked<'a> {
        self.enter(Phase::Tail);
        self.tail_start = off;
        self.tail_at = off;
        self.read_tail(win)
    }

    /// Resumes at the batch frame at `offset` (a footer index point) with `next_lsn` there.
    /// Chain state is taken from the frame's own (checked) header.
    pub fn resume(header: SegmentHeader, bytes: &[u8], offset: u64, next_lsn: u64) -> Option<Walker> {
        let mut w = Walker::new(header, None);
        let d = decode(bytes, offset as usize, w.limit).ok()?;
        if d.kind != Kind::Frame {
            return None;
        }
        w.off = offset as usize;
        w.batch_start = w.off;
        w.batch_end = w.off;
        w.expect_seq = d.header.seq.get();
        w.prev_crc = d.header.prev_crc.get();
        w.first_batch = false;
        w.full = false;
        w.logical = Some(Logical {
            next_lsn,
            first_lsn: None,
            epoch: d.header.epoch.get(),
            meta: Default::default(),
        });
        Some(w)
    }

    /// Offset of the next record to read.
    pub fn offset(&self) -> u64 {
        self.off as u64
    }

    pub fn sealed(&self) -> bool {
        self.footer.is_some()
    }

    fn next_lsn(&self) -> u64 {
        self.logical.as_ref().map_or(0, |l| l.next_lsn)
    }

    fn damage(
        &mut self,
        kind: DamageKind,
        off: usize,
        header_ok: bool,
        body_ok: bool,
        semantic: bool,
        torn_span: Option<(usize, usize)>,
    ) -> RawDamage {
        self.enter(Phase::Done);
        let in_batch = self.batch_left > 0 || off < self.batch_end;
        let batch_start = if in_batch { self.batch_start } else { off };
        RawDamage {
            kind,
            offset: off as u64,
            batch_start: batch_start as u64,
            torn_span: torn_span.map(|(a, b)| (a as u64, b as u64)),
            header_ok,
            body_ok,
            semantic,
            seq: self.expect_seq,
            batch_seq: if in_batch { self.batch_seq } else { self.expect_seq },
            lsn: self.next_lsn(),
            batch_lsn: if in_batch { self.batch_lsn } else { self.next_lsn() },
        }
    }

    fn semantic(&mut self, kind: DamageKind, off: usize) -> Walked<'static> {
        Walked::Damage(self.damage(kind, off, true, true, true, Some(header_span(off))))
    }

    /// The rest of the data area after the last batch must be zero up to the footer slot.
    fn read_tail<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        let start = self.tail_start;
        let end = self.limit.min(win.file_len);
        // What lies past the file's written end is zero without being read.
        let checked = end.min(self.zeros_from.max(self.tail_at));
        let mut upto = checked.min(win.end());
        if self.stale.is_some() && upto < checked {
            // Old contents are judged a whole sector at a time.
            upto = self.tail_at.max(upto - upto % SECTOR);
        }
        if self.tail_at < upto {
            let rest = win.get(self.tail_at, upto).unwrap_or_default();
            if let Some(p) = crate::stale::first_nonblank(self.stale.as_deref(), rest, self.tail_at) {
                let at = start + ((p - start) & !(ALIGN - 1));
                // Bytes after the end of the data can only be a later batch: a cut starts here.
                // A crash leaves them only if that batch's first sector, which holds its
                // frame, was dropped: the sector at `start`.
                let mut r =
                    self.damage(DamageKind::NonZeroTail, at, false, false, false, Some((start, start + 1)));
                r.batch_start = start as u64;
                return Walked::Damage(r);
            }
            self.tail_at = upto;
        }
        if self.tail_at < checked {
            // Any next window will do: the rest is checked a window at a time.
            return Walked::NeedMore { from: self.tail_at as u64, end: self.tail_at as u64 + 1 };
        }
        self.tail_at = self.tail_at.max(end);
        if win.file_len < self.limit {
            // Only a file shorter than its header says (never walked: `read_start`).
            return Walked::Damage(self.damage(DamageKind::ShortAtEof, win.file_len, true, true, true, None));
        }
        self.enter(Phase::Footer);
        self.read_footer(win)
    }

    /// The next valid record, the clean end of the segment, or the first damage.
    ///
    /// `#[inline]`: the replay's loop (in the engine, another crate) calls this once per record;
    /// without the attribute it could not be inlined there.
    #[inline]
    pub fn next<'a>(&mut self, bytes: &'a [u8]) -> Step<'a> {
        match self.step(&Window::whole(bytes)) {
            Walked::Record(r) => Step::Record(r),
            Walked::End => Step::End,
            Walked::Damage(d) => Step::Damage(d),
            // A whole file holds every byte there is; never reached.
            Walked::NeedMore { from, .. } => {
                Step::Damage(self.damage(DamageKind::ShortAtEof, from as usize, false, false, false, None))
            }
        }
    }

    /// Walks to the clean end of the segment, the first damage, or the end of what `win` holds,
    /// calling `visit` for every valid record. Never returns [`Walked::Record`].
    #[inline]
    pub fn walk<'a>(&mut self, win: &Window<'a>, visit: &mut impl FnMut(&Rec<'a>)) -> Walked<'a> {
        loop {
            if self.phase == Phase::Data && self.batch_left > 0 {
                self.walk_entries(win, visit);
            }
            match self.step(win) {
                Walked::Record(r) => visit(&r),
                other => return other,
            }
        }
    }

    /// One step over a window: like [`Walker::next`], or [`Walked::NeedMore`].
    #[inline]
    pub fn step<'a>(&mut self, win: &Window<'a>) -> Walked<'a> {
        match self.phase {
            Phase::Done => Walked::End,
            Phase::Footer => self.read_footer(win),
            Phase::Tail => self.read_tail(win),
            Phase::Data => self.read_data(win),
        }
    }
}
