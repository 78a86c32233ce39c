//! The replay iterator: streams live entries and checkpoints over memory maps of the segments,
//! re-checking every record's checksum and chain as it goes. Memory is O(segments + cuts in one
//! segment), never O(entries); nothing is allocated per record.
//!
//! Liveness under logical truncation: an entry (or checkpoint) at position *p* with LSN *l* is
//! live iff every cut written after *p* keeps it, i.e. *l* < min(keep bound of the cuts after
//! *p*), where a `Truncate{after}` keeps LSNs below `after + 1` and a `Reset` keeps none. The
//! minimum over later segments comes from their footers (or their walk); cuts inside the current
//! segment are collected by a pre-pass over that segment only.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::error::{CrcVerdict, Damage, Error, Result};
use crate::format::{
    IndexPoint, Kind, SegmentHeader, FLAG_GROUP_CONT, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::log::recycle::{Pin, Pins};
use crate::log::{Checkpoint, Wal};
use crate::recovery::{map_segment, SegmentInfo};
use crate::scan::{RawDamage, Step, Walker};
use crate::stale::StaleTable;
use crate::storage::{Mapping, Reader};
use crate::{Durability, Epoch, Lsn};
use std::sync::Arc;

/// What a replayed item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// A live entry: its payload is the user's bytes.
    Entry,
    /// A live checkpoint record and the digest it carries.
    Checkpoint(Checkpoint),
}

/// One live entry or checkpoint, borrowed from the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item<'a> {
    /// An entry or a checkpoint.
    pub kind: ItemKind,
    /// The entry's LSN; for a checkpoint, the LSN its digest covers (every live entry up to
    /// it applied).
    pub lsn: Lsn,
    /// The writer epoch the record was written under.
    pub epoch: Epoch,
    /// The entry's payload (empty for a checkpoint).
    pub payload: &'a [u8],
    /// The next entry belongs to the same user batch.
    pub group_continues: bool,
}

#[derive(Clone, Debug)]
struct Seg {
    seq: u64,
    header: SegmentHeader,
    cuts: u32,
    min_keep_lt: u64,
    entries: u32,
    max_lsn: u64,
    index: Vec<IndexPoint>,
}

struct Cur {
    map: Mapping,
    /// Held as long as `map` (declared after it: dropped after it).
    _pin: Pin,
    walker: Walker,
    /// (offset, min keep bound of this and every later cut in the segment), by offset.
    cuts: Vec<(u64, u64)>,
    next_cut: usize,
    keep_after: u64,
    /// Records of a user batch below this offset were checked whole before its first was returned.
    group_checked_until: u64,
}

/// Streams live entries and checkpoints. Call [`Replay::next`] until `None`.
pub struct Replay {
    storage: Arc<dyn Reader>,
    /// Pins the segment mapped in `cur`, so that the writer never recycles it meanwhile.
    pins: Arc<Pins>,
    segs: Vec<Seg>,
    /// min keep bound of all cuts in segments after index i.
    keep_after: Vec<u64>,
    end_offset: u64,
    from: Option<u64>,
    i: usize,
    cur: Option<Cur>,
    /// The handle's check, when this replay walks the whole log of a handle whose open took
    /// segments on trust: marked done when the replay reaches its end without damage.
    credit: Option<Arc<crate::log::open_check::Trust>>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay").field("segment", &self.segs.get(self.i).map(|s| s.seq)).finish()
    }
}

fn damaged(seq: u64, r: &RawDamage) -> Error {
    Error::Damaged(Damage {
        verdict: CrcVerdict::Corrupt,
        kind: r.kind.clone(),
        segment: seq,
        offset: r.offset,
        lsn: r.lsn,
        seq: r.seq,
        batch_start: r.batch_start,
        batch_lsn: r.batch_lsn,
    })
}

/// The stale table a walk of a recycled segment's map needs past its last batch.
fn stale_table(map: &[u8], seq: u64, header: &SegmentHeader) -> Result<Option<Arc<StaleTable>>> {
    crate::scan::stale_of(map, Some(header), crate::stale::Owner::of(header)).map_err(|r| damaged(seq, &r))
}

/// Cuts in a segment up to `stop`: (offset, keep bound), by offset.
fn collect_cuts(map: &[u8], seq: u64, header: SegmentHeader, stop: Option<u64>) -> Result<Vec<(u64, u64)>> {
    let mut w = Walker::new(header, None);
    w.stale(stale_table(map, seq, &header)?);
    w.stop_at = stop;
    let mut cuts = Vec::new();
    loop {
        match w.next(map) {
            Step::Record(r) => match r.kind {
                Kind::Truncate => cuts.push((r.offset, r.lsn + 1)),
                Kind::Reset => cuts.push((r.offset, 0)),
                _ => {}
            },
            Step::End => return Ok(cuts),
            Step::Damage(r) => return Err(damaged(seq, &r)),
        }
    }
}

/// Where the user batch whose first record the walker just returned ends (the offset of its last
/// record), its records checked on a copy of the walker: a replay never returns part of a user
/// batch that damage cut short, so a consumer applying entries as they come applies all of it or
/// none (a user batch never spans disk batches, so the look-ahead stays inside one).
fn group_end(walker: &Walker, map: &[u8]) -> std::result::Result<u64, RawDamage> {
    let mut w = walker.clone();
    loop {
        match w.next(map) {
            Step::Record(r) if r.flags & FLAG_GROUP_CONT != 0 => {}
            Step::Record(r) => return Ok(r.offset),
            Step::End => return Ok(u64::MAX),
            Step::Damage(d) => return Err(d),
        }
    }
}

impl Wal {
    /// A replay of every live entry and checkpoint written so far (including written but not yet
    /// durable batches, as an in-process Raft reader needs).
    pub fn replay(&self) -> Result<Replay> {
        self.replay_from(None, Durability::Written)
    }

    /// A replay from `from` (or the start) to the written or durable end.
    pub fn replay_from(&self, from: Option<Lsn>, bound: Durability) -> Result<Replay> {
        let src = self.replay_source(bound);
        // A replay of the whole log re-checks every record: it stands for the check when it ends
        // cleanly. One from an LSN skips records, so it does not.
        let credit = if from.is_none() { src.unchecked } else { None };
        Replay::over(src.storage, src.pins, src.segments, src.end, from.map(|l| l.0), credit)
    }
}

impl Replay {
    /// A replay of `segments` from `from` (or the start) to `end`; `credit`, when the open took
    /// records on trust, is marked checked if the replay walks to its end cleanly.
    pub(crate) fn over(
        storage: Arc<dyn Reader>,
        pins: Arc<Pins>,
        segments: &[SegmentInfo],
        end: Option<(u64, u64)>,
        from: Option<u64>,
        credit: Option<Arc<crate::log::open_check::Trust>>,
    ) -> Result<Replay> {
        let Some((end_seq, end_offset)) = end else {
            return Ok(Replay {
                storage,
                pins,
                segs: Vec::new(),
                keep_after: Vec::new(),
                end_offset: 0,
                from,
                i: 0,
                cur: None,
                credit,
            });
        };
        let mut segs: Vec<Seg> = segments
            .iter()
            .take_while(|s| s.seq <= end_seq)
            .map(|s| Seg {
                seq: s.seq,
                header: s.header,
                cuts: s.counts.cuts,
                min_keep_lt: s.counts.min_keep_lt,
                entries: s.counts.entries,
                max_lsn: s.counts.max_lsn,
                index: s.footer.as_ref().map(|f| f.index.clone()).unwrap_or_default(),
            })
            .collect();
        // The last segment may hold cuts past the bound: count only those before it.
        if let Some(last) = segs.last_mut() {
            if last.cuts > 0 {
                let map = map_segment(&*storage, last.seq)?;
                let cuts = collect_cuts(&map, last.seq, last.header, Some(end_offset))?;
                last.min_keep_lt = cuts.iter().map(|c| c.1).min().unwrap_or(u64::MAX);
                last.cuts = cuts.len() as u32;
            }
        }
        let mut keep_after = vec![u64::MAX; segs.len()];
        let mut acc = u64::MAX;
        for (i, s) in segs.iter().enumerate().rev() {
            if let Some(k) = keep_after.get_mut(i) {
                *k = acc;
            }
            acc = acc.min(s.min_keep_lt);
        }
        let mut i = 0;
        if let Some(from) = from {
            // Segments whose entries all lie below `from` hold nothing to return.
            i = segs.iter().position(|s| s.entries > 0 && s.max_lsn >= from).unwrap_or(segs.len());
        }
        Ok(Replay { storage, pins, segs, keep_after, end_offset, from, i, cur: None, credit })
    }

    fn open_current(&mut self) -> Result<()> {
        let Some(seg) = self.segs.get(self.i) else {
            return Ok(());
        };
        let pin = self.pins.pin(seg.seq);
        let map = map_segment(&*self.storage, seg.seq)?;
        let is_last = self.i + 1 == self.segs.len();
        let stop = is_last.then_some(self.end_offset);
        let cuts = if seg.cuts > 0 { collect_cuts(&map, seg.seq, seg.header, stop)? } else { Vec::new() };
        let mut suffix = Vec::with_capacity(cuts.len());
        let mut acc = u64::MAX;
        for &(off, keep) in cuts.iter().rev() {
            acc = acc.min(keep);
            suffix.push((off, acc));
        }
        suffix.reverse();
        // Seek with the footer's sparse index when the segment cuts nothing. Never to the
        // segment's first batch: it opens with the State record, which only a walk from the
        // segment header expects (starting there is a walk from the start anyway).
        let first_batch = SEGMENT_HEADER_LEN as u64;
        let start = match (self.from, seg.cuts) {
            (Some(from), 0) => {
                seg.index.iter().rev().find(|p| p.lsn.get() <= from && p.offset.get() > first_batch).copied()
            }
            _ => None,
        };
        let mut walker = start
            .and_then(|p| Walker::resume(seg.header, &map, p.offset.get(), p.lsn.get()))
            .unwrap_or_else(|| Walker::new(seg.header, None));
        walker.stale(stale_table(&map, seg.seq, &seg.header)?);
        walker.stop_at = stop;
        let keep_after = self.keep_after.get(self.i).copied().unwrap_or(u64::MAX);
        self.cur = Some(Cur {
            map,
            _pin: pin,
            walker,
            cuts: suffix,
            next_cut: 0,
            keep_after,
            group_checked_until: 0,
        });
        Ok(())
    }

    /// Ends the replay at an error: it returns nothing more and checked nothing.
    fn fail(&mut self, e: Error) -> Error {
        self.cur = None;
        self.i = self.segs.len();
        self.credit = None;
        e
    }

    /// The next live entry or checkpoint, `None` at the bound, or the damage met on the way.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Item<'_>>> {
        let found = loop {
            if self.cur.is_none() {
                if self.i >= self.segs.len() {
                    // Every record to the bound checked out (damage drops the credit first).
                    if let Some(c) = self.credit.take() {
                        c.replayed_whole();
                    }
                    return None;
                }
                if let Err(e) = self.open_current() {
                    return Some(Err(self.fail(e)));
                }
            }
            let seq = self.segs.get(self.i).map_or(0, |s| s.seq);
            let cur = self.cur.as_mut()?;
            let step = cur.walker.next(&cur.map);
            let (kind, lsn, epoch, flags, offset, len) = match step {
                Step::End => {
                    self.cur = None;
                    self.i += 1;
                    continue;
                }
                Step::Damage(r) => return Some(Err(self.fail(damaged(seq, &r)))),
                Step::Record(r) => {
                    if r.flags & FLAG_GROUP_CONT != 0 && r.offset >= cur.group_checked_until {
                        match group_end(&cur.walker, &cur.map) {
                            Ok(end) => cur.group_checked_until = end,
                            Err(d) => return Some(Err(self.fail(damaged(seq, &d)))),
                        }
                    }
                    (r.kind, r.lsn, r.epoch, r.flags, r.offset, r.payload.len())
                }
            };
            if !matches!(kind, Kind::Entry | Kind::Checkpoint) {
                continue;
            }
            while cur.cuts.get(cur.next_cut).is_some_and(|c| c.0 <= offset) {
                cur.next_cut += 1;
            }
            let bound = cur.cuts.get(cur.next_cut).map_or(u64::MAX, |c| c.1).min(cur.keep_after);
            if lsn >= bound || self.from.is_some_and(|f| lsn < f) {
                continue;
            }
            break (kind, lsn, epoch, flags, offset, len);
        };
        let (kind, lsn, epoch, flags, offset, len) = found;
        let cur = self.cur.as_ref()?;
        let start = offset as usize + RECORD_HEADER_LEN;
        let payload = cur.map.get(start..start + len).unwrap_or_default();
        let kind = match kind {
            Kind::Checkpoint => ItemKind::Checkpoint(Checkpoint::from_record_payload(payload)?),
            _ => ItemKind::Entry,
        };
        let payload = if kind == ItemKind::Entry { payload } else { &[] };
        Some(Ok(Item {
            kind,
            lsn: Lsn(lsn),
            epoch: Epoch(epoch),
            payload,
            group_continues: flags & FLAG_GROUP_CONT != 0,
        }))
    }

    /// The remaining live entries as an [`Iterator`] of owned `(LSN, payload)` pairs,
    /// checkpoints skipped, for a `for` loop. Each payload is copied out of the map;
    /// [`Replay::next`] (a lending iterator: each item borrows the replay) copies nothing.
    pub fn entries(self) -> Entries {
        Entries(self)
    }

    /// Collects the remaining live entries as (LSN, payload) pairs (tests and small logs).
    pub fn collect_entries(self) -> Result<Vec<(u64, Vec<u8>)>> {
        self.entries().map(|e| e.map(|(lsn, p)| (lsn.0, p))).collect()
    }
}

/// The live entries of a [`Replay`] as owned pairs ([`Replay::entries`]); after an error it
/// returns nothing more.
#[derive(Debug)]
pub struct Entries(Replay);

impl Iterator for Entries {
    type Item = Result<(Lsn, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.0.next()? {
                Ok(item) if item.kind == ItemKind::Entry => {
                    return Some(Ok((item.lsn, item.payload.to_vec())))
                }
                Ok(_) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// `for entry in replay`: the live entries as owned pairs, as [`Replay::entries`].
impl IntoIterator for Replay {
    type Item = Result<(Lsn, Vec<u8>)>;
    type IntoIter = Entries;

    fn into_iter(self) -> Entries {
        self.entries()
    }
}
