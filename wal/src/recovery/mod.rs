//! Reading a whole log directory: the meta file, the segment sequence, each segment's walk, and
//! the CRC verdict with where the first damage is.
//!
//! Two depths: a *fast* scan reads only the header and footer of every sealed segment (O(segments))
//! and walks the last one; a *full* scan walks every record of every segment (the verifier's).
//!
//! This file holds the scan of the directory ([`scan_log_with`]: one long function, the
//! sequence of checks a directory goes through in order, segment by segment, kept in one place
//! so that its order can be read whole) and what it returns; beside it, `files.rs` reads the
//! files (`wal.meta`, a segment's ends, maps) and `windowed.rs` walks one segment through a
//! reused buffer a window at a time, for a backend that asks for it.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod files;
mod windowed;

pub(crate) use files::{map_segment, map_segment_written, only_blank_segments, read_meta};

use crate::classify::classify;
use crate::error::{CrcVerdict, Damage, DamageKind, Error, Result};
use crate::format::*;
use crate::scan::{self, Counts, Expect, FooterInfo, Logical, RawDamage, Rec, Start, Walked, Walker, Window};
use crate::stale::{Owner, StaleTable};
use crate::storage::Reader;
use files::{read_ends, valid_header};
use windowed::{classify_windowed, walk_windowed, StaleLookup, Windowed};

/// How an open treats damage. The verifier always reports; this decides what a writer does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Any damage refuses the open, even a torn tail.
    Strict,
    /// The writers' default: a TORN_TAIL (damage in the unattested last batch with evidence of a
    /// torn write) is cut; CORRUPT_TAIL and CORRUPT refuse the open with where they are.
    #[default]
    TruncateTornTail,
    /// Read-only: open whatever is readable up to the first damage and report the damage. Never
    /// writes. Only when asked for by name.
    Salvage,
}

/// What is known of one segment that holds records.
#[derive(Clone, Debug)]
pub struct SegmentInfo {
    pub seq: u64,
    pub header: SegmentHeader,
    pub footer: Option<FooterInfo>,
    pub counts: Counts,
    /// Offset just past the last valid batch.
    pub data_end: u64,
}

impl SegmentInfo {
    pub fn sealed(&self) -> bool {
        self.footer.is_some()
    }
}

/// The result of scanning a log directory.
#[derive(Debug)]
pub struct LogScan {
    pub meta: Option<MetaFile>,
    /// Segments holding records, from the purge floor on, up to the first damage.
    pub segments: Vec<SegmentInfo>,
    /// Pre-created segments after the last one holding records.
    pub spares: Vec<u64>,
    /// The spares made of recycled files (holding a stale table: FORMAT.md section 2.2).
    pub recycled_spares: Vec<u64>,
    /// Segment files below the purge floor (left by an interrupted purge).
    pub leftovers: Vec<u64>,
    pub damage: Option<Damage>,
    pub verdict: CrcVerdict,
    /// The record sequence and chain value the next record continues from.
    pub next_seq: u64,
    pub last_crc: u32,
    /// Logical state at the end of the valid records (None if no segment holds records).
    pub logical: Option<Logical>,
    /// Highest record sequence the log itself attests as synced.
    pub durable_seq: u64,
    /// Records walked (a fast scan walks only the last segment).
    pub records_walked: u64,
    /// Segments taken on their footer (and `wal.close`) without a walk: their records are
    /// unchecked (a writer checks them before its first write: `log/open_check.rs`).
    pub trusted: usize,
}

impl LogScan {
    /// Takes a walked segment's end as the log's end so far and records the segment.
    fn absorb_walk(&mut self, seq: u64, header: SegmentHeader, w: &mut Walker) {
        self.next_seq = w.expect_seq;
        self.last_crc = w.prev_crc;
        self.durable_seq = self.durable_seq.max(w.durable_seq);
        if let Some(f) = &w.footer {
            self.durable_seq = self.durable_seq.max(f.seq);
        }
        let counts = std::mem::take(&mut w.counts);
        self.segments.push(SegmentInfo {
            seq,
            header,
            footer: w.footer.take(),
            counts,
            data_end: w.data_end,
        });
    }
}

fn damage_at(verdict: CrcVerdict, kind: DamageKind, segment: u64, offset: u64) -> Damage {
    Damage { verdict, kind, segment, offset, lsn: 0, seq: 0, batch_start: offset, batch_lsn: 0 }
}

fn spare_before_data(seq: u64) -> Damage {
    let kind = DamageKind::BadSegmentHeader("empty segment before a segment holding data");
    damage_at(CrcVerdict::Corrupt, kind, seq, 0)
}

fn classified(bytes: &[u8], segment: u64, r: &RawDamage, later: bool, stale: Option<&StaleTable>) -> Damage {
    damage_of(classify(bytes, r, later, stale), segment, r)
}

/// Raw damage in `segment` with its verdict.
fn damage_of(verdict: CrcVerdict, segment: u64, r: &RawDamage) -> Damage {
    Damage {
        verdict,
        kind: r.kind.clone(),
        segment,
        offset: r.offset,
        lsn: r.lsn,
        seq: r.seq,
        batch_start: r.batch_start,
        batch_lsn: r.batch_lsn,
    }
}

/// The checks of a segment walked to its clean end. `Some` is the damage they find.
fn check_walked_end(
    seq: u64,
    header: &SegmentHeader,
    w: &Walker,
    later_data: bool,
    meta: &MetaFile,
    lsn_here: u64,
) -> Option<Damage> {
    let closed = meta.closed_segment_seq.get();
    let lsn_end = w.logical.as_ref().map_or(lsn_here, |l| l.next_lsn);
    let at_lsn = |mut d: Damage| {
        d.lsn = lsn_end;
        d.batch_lsn = lsn_end;
        d
    };
    if w.footer.is_none() && (later_data || seq == closed) {
        return Some(at_lsn(damage_at(CrcVerdict::Corrupt, DamageKind::MissingFooter, seq, w.data_end)));
    }
    if seq == closed && w.footer.as_ref().is_some_and(|f| f.crc != meta.closed_footer_crc.get()) {
        let at = footer_offset(header.segment_len.get()) as u64;
        return Some(at_lsn(damage_at(
            CrcVerdict::Corrupt,
            DamageKind::BadFooter("differs from the footer the clean close recorded"),
            seq,
            at,
        )));
    }
    None
}

/// How deep a scan reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Headers and footers only: segment continuity in O(segments); the unsealed last segment's
    /// records are not read.
    Quick,
    /// Footers of sealed segments, every record of the last one (what an open does).
    Fast,
    /// Every record of every segment (what the verifier does).
    Full,
}

/// Scans the log in `storage`. `Err` only when the directory cannot be read or holds no log.
pub fn scan_log(storage: &dyn Reader, full: bool) -> Result<LogScan> {
    scan_log_with(storage, if full { Depth::Full } else { Depth::Fast }, &mut |_, _| {})
}

/// Scans the log, calling `visit(segment, record)` for every valid record walked, in log order.
pub fn scan_log_with(
    storage: &dyn Reader,
    depth: Depth,
    visit: &mut impl FnMut(u64, &Rec<'_>),
) -> Result<LogScan> {
    let full = depth == Depth::Full;
    let names = storage.list().map_err(|e| Error::io("listing the log directory", e))?;
    let mut seqs: Vec<u64> = names.iter().filter_map(|n| parse_segment_file_name(n)).collect();
    seqs.sort_unstable();
    let mut out = LogScan {
        meta: None,
        segments: Vec::new(),
        spares: Vec::new(),
        recycled_spares: Vec::new(),
        leftovers: Vec::new(),
        damage: None,
        verdict: CrcVerdict::Ok,
        next_seq: 1,
        last_crc: 0,
        logical: None,
        durable_seq: 0,
        records_walked: 0,
        trusted: 0,
    };
    // Before anything is read: a FIFO named like a log file would block the read forever.
    if let Some(d) = crate::log_files::not_regular_damage(storage, &names)? {
        out.verdict = d.verdict;
        out.damage = Some(d);
        return Ok(out);
    }
    let has_meta = names.iter().any(|n| n == META_FILE_NAME);
    if !has_meta {
        if seqs.is_empty() {
            return Err(Error::NotFound("no wal.meta and no segments".into()));
        }
        if only_blank_segments(storage, &seqs)? {
            // Creation writes the first (blank) segment before wal.meta: it was interrupted.
            return Err(Error::NotFound("an interrupted creation (blank segments, no wal.meta)".into()));
        }
        out.damage = Some(damage_at(CrcVerdict::Corrupt, DamageKind::BadMetaFile("missing"), 0, 0));
        out.verdict = CrcVerdict::Corrupt;
        return Ok(out);
    }
    let meta = match read_meta(storage)? {
        Ok(m) => m,
        Err(kind) => {
            let verdict = if matches!(kind, DamageKind::UnsupportedVersion(_)) {
                CrcVerdict::UnsupportedVersion
            } else {
                CrcVerdict::Corrupt
            };
            out.damage = Some(damage_at(verdict, kind, 0, 0));
            out.verdict = verdict;
            return Ok(out);
        }
    };
    out.meta = Some(meta);
    let floor = meta.floor_segment_seq.get();
    out.leftovers = seqs.iter().copied().filter(|&s| s < floor).collect();
    let live: Vec<u64> = seqs.into_iter().filter(|&s| s >= floor).collect();
    if live.first() != Some(&floor) {
        out.damage = Some(damage_at(CrcVerdict::Corrupt, DamageKind::MissingPurgeFloor, floor, 0));
        out.verdict = CrcVerdict::Corrupt;
        return Ok(out);
    }
    let mut valid = Vec::with_capacity(live.len());
    for &s in &live {
        valid.push(valid_header(storage, s)?);
    }
    // A segment is attested when a later one holds data (rotation synced it first) or a clean
    // close sealed it or a later one (wal.meta, replaced atomically, names the last such).
    let closed = meta.closed_segment_seq.get();
    let later_data = |i: usize| valid.get(i + 1..).is_some_and(|v| v.iter().any(Option::is_some));
    // A sealed segment's footer is taken without a walk only where the next segment's header
    // chains to it: the footer's own checksums pass for any footer of this layout, another log's
    // or an older one's in the same slot, whose counts (cuts above all) would misread the
    // segment. Where the chain breaks, the walk finds where and why.
    let chained = |i: usize, fh: &RecordHeader| {
        valid.get(i + 1).copied().flatten().is_some_and(|h| {
            h.prev_crc.get() == fh.crc.get() && h.first_record_seq.get() == fh.seq.get().wrapping_add(1)
        })
    };
    let later_valid = |i: usize| later_data(i) || live.get(i).is_some_and(|&s| s <= closed);

    out.next_seq = meta.floor_first_record_seq.get();
    out.last_crc = meta.floor_prev_crc.get();
    let mut logical: Option<Logical> = None;
    // The one buffer a windowed scan reads into.
    let mut buf = Vec::new();
    // The next LSN at the end of the previous segment, once known: whole-file damage is
    // reported at it.
    let mut lsn_here = 0u64;
    let at_lsn = |mut d: Damage, lsn: u64| {
        d.lsn = lsn;
        d.batch_lsn = lsn;
        d
    };
    for (i, &seq) in live.iter().enumerate() {
        let later = later_valid(i);
        let want = floor + i as u64;
        if seq != want {
            let d = damage_at(CrcVerdict::Corrupt, DamageKind::MissingSegment { segment: want }, seq, 0);
            out.damage = Some(at_lsn(d, lsn_here));
            break;
        }
        let expect = Expect {
            segment_seq: seq,
            log_id: meta.log_id,
            first_record_seq: Some(out.next_seq),
            prev_crc: Some(out.last_crc),
        };
        // Records of this segment a windowed walk already visited.
        let mut visited_until = 0u64;
        if let (true, Some(window)) = (full, storage.scan_window()) {
            let walked = &mut out.records_walked;
            let windowed =
                walk_windowed(storage, seq, &expect, logical.clone(), window, None, &mut buf, &mut |r| {
                    *walked += 1;
                    visit(seq, r);
                })?;
            match windowed {
                Windowed::Clean(header, mut w) => {
                    // As a whole walk does: the walker took the state at the segment's start.
                    logical = None;
                    if let Some(d) = check_walked_end(seq, &header, &w, later_data(i), &meta, lsn_here) {
                        out.damage = Some(d);
                        break;
                    }
                    logical = w.logical.clone();
                    lsn_here = logical.as_ref().map_or(lsn_here, |l| l.next_lsn);
                    out.absorb_walk(seq, header, &mut w);
                    continue;
                }
                Windowed::Spare { recycled } => {
                    if later {
                        out.damage = Some(at_lsn(spare_before_data(seq), lsn_here));
                        break;
                    }
                    out.spares.push(seq);
                    if recycled {
                        out.recycled_spares.push(seq);
                    }
                    continue;
                }
                Windowed::Unsupported(kind) => {
                    let d = damage_at(CrcVerdict::UnsupportedVersion, kind, seq, 0);
                    out.damage = Some(at_lsn(d, lsn_here));
                    break;
                }
                Windowed::AtStart { raw, stale } => {
                    if let Ok(v) = classify_windowed(storage, seq, window, &mut buf, &raw, later, stale) {
                        out.damage = Some(at_lsn(damage_of(v, seq, &raw), lsn_here));
                        break;
                    }
                }
                Windowed::Damaged { header, walker, raw, stale } => {
                    let stale = StaleLookup::Known(stale);
                    let judged = classify_windowed(storage, seq, window, &mut buf, &raw, later, stale);
                    // The valid prefix up to the damaged batch's start, as a whole walk finds it
                    // (below): walked again through windows, to that batch's start.
                    let again = |buf: &mut Vec<u8>| {
                        let stop = Some(walker.data_end);
                        walk_windowed(storage, seq, &expect, logical.clone(), window, stop, buf, &mut |_| {})
                    };
                    // Any failure (the file changed under the scan, a read error): judged whole.
                    if let Ok(verdict) = judged {
                        if let Windowed::Clean(_, mut whole) = again(&mut buf)? {
                            out.damage = Some(damage_of(verdict, seq, &raw));
                            out.absorb_walk(seq, header, &mut whole);
                            out.logical = whole.logical.take();
                            break;
                        }
                    }
                    visited_until = walker.offset();
                }
                Windowed::Redo { visited_until: v } => visited_until = v,
            }
        }
        let (bytes, written) = if depth == Depth::Quick {
            let b = read_ends(storage, seq)?;
            let len = b.len();
            (b, len)
        } else {
            map_segment_written(storage, seq)?
        };
        // Past `written` every byte is zero: neither a spare's check nor the walk's reads it
        // (a spare's map is not touched at all: a first fault would read ahead megabytes).
        let seen = bytes.get(..written.max(SEGMENT_HEADER_LEN)).unwrap_or(&bytes);
        let start = if written == 0 {
            Start::Spare { recycled: false }
        } else {
            scan::read_start_in(seen, bytes.len(), &expect)
        };
        let header = match start {
            Start::Spare { recycled } => {
                if later {
                    out.damage = Some(at_lsn(spare_before_data(seq), lsn_here));
                    break;
                }
                out.spares.push(seq);
                if recycled {
                    out.recycled_spares.push(seq);
                }
                continue;
            }
            Start::Unsupported(kind) => {
                out.damage = Some(at_lsn(damage_at(CrcVerdict::UnsupportedVersion, kind, seq, 0), lsn_here));
                break;
            }
            Start::Damage(r) => {
                // A header a crash dropped leaves a recycled file's table to judge the rest by.
                let stale = scan::stale_of(&bytes, None, scan::owner_of(&expect)).ok().flatten();
                out.damage = Some(at_lsn(classified(&bytes, seq, &r, later, stale.as_deref()), lsn_here));
                break;
            }
            Start::Segment(h) => h,
        };
        // The last segment a clean close sealed needs no walk either when `wal.close` holds the
        // logical state at that close (the walk would only rebuild it).
        let closed_state = || {
            let (fh, _) = scan::read_footer_fast(&bytes, header.segment_len.get())?;
            if seq != closed || fh.crc.get() != meta.closed_footer_crc.get() {
                return None;
            }
            // Unreadable: walk the segment instead (the walk reads what it needs itself).
            let l = crate::close_state::read_close_state(storage, seq, fh.crc.get()).ok().flatten()?;
            (l.next_lsn == fh.lsn.get()).then_some(Logical { epoch: fh.epoch.get(), ..l })
        };
        // (A footer slot past the written end is zero: no footer, and nothing to read.)
        let slot_written = written > crate::format::footer_offset(header.segment_len.get());
        let at_close =
            if depth == Depth::Fast && !later_data(i) && slot_written { closed_state() } else { None };
        if depth == Depth::Quick || (!full && later_data(i)) || at_close.is_some() {
            if let Some((fh, info)) = scan::read_footer_fast(&bytes, header.segment_len.get()) {
                let first = header.first_record_seq.get();
                // A footer whose sequence cannot be followed is not trusted, nor one the next
                // segment's header does not chain to: walk the segment. (A quick check reports
                // that break at the next header; wal.meta attests a clean close's footer.)
                let vouched = depth == Depth::Quick || at_close.is_some() || chained(i, &fh);
                if fh.seq.get() > first && fh.seq.get() < u64::MAX && vouched {
                    out.next_seq = fh.seq.get() + 1;
                    out.last_crc = fh.crc.get();
                    out.durable_seq = fh.seq.get();
                    lsn_here = fh.lsn.get();
                    let p = &info.payload;
                    let counts = Counts {
                        records: p.record_count.get(),
                        entries: p.entry_count.get(),
                        min_lsn: p.min_lsn.get(),
                        max_lsn: p.max_lsn.get(),
                        min_keep_lt: p.min_keep_lt.get(),
                        cuts: p.cut_count.get(),
                    };
                    let data_end = p.data_end.get();
                    out.segments.push(SegmentInfo { seq, header, footer: Some(info), counts, data_end });
                    out.trusted += 1;
                    logical = at_close.clone();
                    continue;
                }
            }
        }
        if depth == Depth::Quick {
            // No footer: the last (unsealed) segment, whose records a quick check does not read.
            if later_data(i) {
                out.damage =
                    Some(at_lsn(damage_at(CrcVerdict::Corrupt, DamageKind::MissingFooter, seq, 0), lsn_here));
                break;
            }
            out.segments.push(SegmentInfo {
                seq,
                header,
                footer: None,
                counts: Counts::default(),
                data_end: SEGMENT_HEADER_LEN as u64,
            });
            continue;
        }
        let stale = match scan::stale_of(&bytes, Some(&header), Owner::of(&header)) {
            Ok(t) => t,
            Err(r) => {
                out.damage = Some(at_lsn(classified(&bytes, seq, &r, later, None), lsn_here));
                break;
            }
        };
        // The state at the segment's start, for a second walk if damage stops this one.
        let at_start = logical.clone();
        let mut w = Walker::new(header, logical.take());
        w.zeros_from(written);
        w.stale(stale.clone());
        let walked = &mut out.records_walked;
        let end = w.walk(&Window::whole(&bytes), &mut |r| {
            if r.offset >= visited_until {
                *walked += 1;
                visit(seq, r);
            }
        });
        let damage = match end {
            Walked::End => None,
            Walked::Damage(r) => Some(r),
            Walked::Record(_) | Walked::NeedMore { .. } => {
                // A whole segment holds every byte there is: never reached.
                return Err(Error::io(
                    format!("walking segment {seq}"),
                    std::io::Error::other("the walk of a whole segment stopped early"),
                ));
            }
        };
        if let Some(r) = damage {
            out.damage = Some(classified(&bytes, seq, &r, later, stale.as_deref()));
            // The valid prefix of this segment is still the log's end (salvage reads it), up to
            // the end of its last whole batch: a replay stops there and a writer cuts the damaged
            // batch, so what that batch's records before the damage applied (a next LSN, an
            // epoch, a truncation) is not the log's. The walk above went on to the damage; walk
            // again to the batch's start for the state there (only a damaged log pays for it).
            let mut whole = Walker::new(header, at_start);
            whole.stale(stale);
            whole.stop_at = Some(w.data_end);
            let _ = whole.walk(&Window::whole(&bytes), &mut |_| {});
            out.absorb_walk(seq, header, &mut whole);
            out.logical = whole.logical;
            break;
        }
        if let Some(d) = check_walked_end(seq, &header, &w, later_data(i), &meta, lsn_here) {
            out.damage = Some(d);
            break;
        }
        logical = w.logical.clone();
        lsn_here = logical.as_ref().map_or(lsn_here, |l| l.next_lsn);
        out.absorb_walk(seq, header, &mut w);
    }
    // The segment a clean close sealed (wal.meta names it) must be there: without it the log
    // would end at an earlier sealed segment and scan OK, its acknowledged entries gone.
    if out.damage.is_none() && closed >= floor && live.last().is_none_or(|&l| l < closed) {
        let d = damage_at(CrcVerdict::Corrupt, DamageKind::MissingSegment { segment: closed }, closed, 0);
        out.damage = Some(at_lsn(d, lsn_here));
    }
    if out.logical.is_none() {
        out.logical = logical;
    }
    if full && out.damage.is_none() && names.iter().any(|n| n == CLOSE_FILE_NAME) {
        out.damage = check_close_file(storage, &out, &meta)?;
    }
    out.verdict = out.damage.as_ref().map_or(CrcVerdict::Ok, |d| d.verdict);
    Ok(out)
}

/// A full scan's check of `wal.close` (FORMAT.md section 6.1): when `wal.meta` records the clean
/// close of the last segment holding records, a `wal.close` naming that close must hold the
/// state the walk ended with, or an open would start from a wrong state. (It is written, synced
/// and renamed before `wal.meta` records the close, so only damage makes it disagree.)
fn check_close_file(storage: &dyn Reader, scan: &LogScan, meta: &MetaFile) -> Result<Option<Damage>> {
    let Some(last) = scan.segments.last() else { return Ok(None) };
    let Some(footer) = last.footer.as_ref() else { return Ok(None) };
    if last.seq != meta.closed_segment_seq.get() || footer.crc != meta.closed_footer_crc.get() {
        return Ok(None);
    }
    let Some(walked) = scan.logical.as_ref() else { return Ok(None) };
    let bad = |w| Ok(Some(damage_at(CrcVerdict::Corrupt, DamageKind::BadCloseFile(w), 0, 0)));
    match crate::close_state::read_close_state(storage, last.seq, footer.crc)? {
        Some(l)
            if (l.next_lsn, l.first_lsn, &l.meta) == (walked.next_lsn, walked.first_lsn, &walked.meta) =>
        {
            Ok(None)
        }
        Some(_) => bad("its state differs from the state at the end of the log"),
        None => bad("unreadable, or it names another close than wal.meta"),
    }
}
