//! Reading a whole log directory: the meta file, the segment sequence, each segment's walk, and
//! the CRC verdict with where the first damage is.
//!
//! Two depths: a *fast* scan reads only the header and footer of every sealed segment (O(segments))
//! and walks the last one; a *full* scan walks every record of every segment (the verifier's).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::classify::{classify, classify_in, SegmentBytes};
use crate::error::{CrcVerdict, Damage, DamageKind, Error, Result};
use crate::format::*;
use crate::scan::{self, Counts, Expect, FooterInfo, Logical, RawDamage, Rec, Start, Walked, Walker, Window};
use crate::segment_read::SegmentReader;
use crate::segment_read::READ_ALIGN;
use crate::stale::{table_range, Owner, StaleTable};
use crate::storage::{FileId, Mapping, Storage};
use std::cell::Cell;
use std::sync::Arc;
use zerocopy::FromBytes;

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
    /// unchecked (a writer checks them before its first write: `open_check.rs`).
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

pub(crate) fn read_meta(storage: &dyn Storage) -> Result<std::result::Result<MetaFile, DamageKind>> {
    let f = storage.open(META_FILE_NAME, false).map_err(|e| Error::io("opening wal.meta", e))?;
    let mut buf = [0u8; META_FILE_LEN + 1];
    let n = storage.read_at(f, 0, &mut buf);
    storage.close(f);
    let n = n.map_err(|e| Error::io("reading wal.meta", e))?;
    if n != META_FILE_LEN {
        return Ok(Err(DamageKind::BadMetaFile("wrong length")));
    }
    let Ok(m) = MetaFile::read_from_bytes(buf.get(..META_FILE_LEN).unwrap_or_default()) else {
        return Ok(Err(DamageKind::BadMetaFile("unreadable")));
    };
    if m.crc.get() != m.compute_crc() {
        return Ok(Err(DamageKind::BadMetaFile("checksum mismatch")));
    }
    if m.magic != META_MAGIC {
        return Ok(Err(DamageKind::BadMetaFile("bad magic")));
    }
    if m.format_version.get() != FORMAT_VERSION {
        return Ok(Err(DamageKind::UnsupportedVersion(m.format_version.get())));
    }
    if matches!(m.floor_first_record_seq.get(), 0 | u64::MAX) || m.floor_segment_seq.get() == 0 {
        return Ok(Err(DamageKind::BadMetaFile("impossible floor")));
    }
    Ok(Ok(m))
}

/// True when every listed segment file is entirely zero (never took a record).
pub(crate) fn only_blank_segments(storage: &dyn Storage, seqs: &[u64]) -> Result<bool> {
    for &s in seqs {
        let (map, written) = map_segment_written(storage, s)?;
        if !is_zero(map.get(..written).unwrap_or_default()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A segment's header and footer slot at their offsets in a zero buffer of the file's length
/// (a quick check reads nothing else).
fn read_ends(storage: &dyn Storage, seq: u64) -> Result<Mapping> {
    let buf = on_segment(storage, seq, "reading", |f| {
        let len = storage.len(f)? as usize;
        let mut buf = vec![0u8; len];
        let head = len.min(SEGMENT_HEADER_LEN);
        storage.read_at(f, 0, buf.get_mut(..head).unwrap_or_default())?;
        if len >= MIN_SEGMENT_LEN as usize {
            let at = len - FOOTER_SLOT_LEN;
            storage.read_at(f, at as u64, buf.get_mut(at..).unwrap_or_default())?;
        }
        Ok(buf)
    })?;
    // Not copied into an `Arc<[u8]>`: the zeros between would all become resident.
    Ok(Mapping::Shared(std::sync::Arc::new(buf)))
}

/// Opens segment `seq`, runs `op` on it and closes it; an error of `op` is reported as
/// "`doing` {file name}".
fn on_segment<T>(
    storage: &dyn Storage,
    seq: u64,
    doing: &str,
    op: impl FnOnce(FileId) -> std::io::Result<T>,
) -> Result<T> {
    let name = segment_file_name(seq);
    let f = storage.open(&name, false).map_err(|e| Error::io(format!("opening {name}"), e))?;
    let r = op(f);
    storage.close(f);
    r.map_err(|e| Error::io(format!("{doing} {name}"), e))
}

/// Maps a segment file by sequence.
pub(crate) fn map_segment(storage: &dyn Storage, seq: u64) -> Result<Mapping> {
    on_segment(storage, seq, "mapping", |f| storage.map(f))
}

/// [`map_segment`], and where the segment's written bytes end ([`written_within`]): every
/// byte of the map past it is zero.
pub(crate) fn map_segment_written(storage: &dyn Storage, seq: u64) -> Result<(Mapping, usize)> {
    on_segment(storage, seq, "mapping", |f| {
        let m = storage.map(f)?;
        let written = written_within(storage, f, m.len())?;
        Ok((m, written))
    })
}

/// [`Storage::written_end`] of `f`, at most `len` (the bytes at hand).
fn written_within(storage: &dyn Storage, f: FileId, len: usize) -> std::io::Result<usize> {
    Ok(usize::try_from(storage.written_end(f)?).unwrap_or(usize::MAX).min(len))
}

/// A segment's header when it checks out on its own (magic and checksum; whether it fits the
/// chain is judged where the segment is walked).
///
/// A file nothing was written to (a reserved spare) is not read: a read would put zero pages
/// in the page cache, which some file systems (ext4) then report as written data.
fn valid_header(storage: &dyn Storage, seq: u64) -> Result<Option<SegmentHeader>> {
    let b = on_segment(storage, seq, "reading", |f| {
        if storage.written_end(f).is_ok_and(|end| end == 0) {
            return Ok(None);
        }
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        Ok((storage.read_at(f, 0, &mut b)? == SEGMENT_HEADER_LEN).then_some(b))
    })?;
    Ok(b.and_then(|b| SegmentHeader::self_valid(&b)))
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

/// What a windowed walk of one segment ended with.
enum Windowed {
    /// The segment checked out to its clean end: its header and the walker there.
    Clean(SegmentHeader, Box<Walker>),
    /// Every byte is zero, or blank by a valid stale table (`recycled`): a pre-created segment
    /// that never took a record.
    Spare { recycled: bool },
    /// Damage in the records (the walk judged every byte it needed, as a walk of the whole file
    /// does): the walker there and the segment's stale table; it is classified by reading what
    /// the classification needs ([`crate::segment_read`]).
    Damaged { header: SegmentHeader, walker: Box<Walker>, raw: RawDamage, stale: Option<Arc<StaleTable>> },
    /// Damage at the segment's start, judged by its header alone (a header that is not all
    /// zero: [`scan::read_start_in`] reads nothing else), or a recycled header's stale table
    /// that does not check out (`stale` is `Known(None)` then). Classified as `Damaged` is.
    AtStart { raw: RawDamage, stale: StaleLookup },
    /// A header of a newer version.
    Unsupported(DamageKind),
    /// Anything else (a file that changed length or failed a read, one too short for a
    /// header, a footer index point a probe could not read): the segment is read whole and
    /// walked again, which judges it exactly as a scan of a map does.
    /// Records below `visited_until` were visited.
    Redo { visited_until: u64 },
}

/// Where classifying damage finds a segment's stale table.
enum StaleLookup {
    /// Already known.
    Known(Option<Arc<StaleTable>>),
    /// Looked up at the end of the file as this owner's (as [`scan::stale_of`] does for a file
    /// whose header is unreadable).
    Find(Owner),
}

/// Classifies `raw` in segment `seq` by reading only what the classification needs, a window
/// at a time ([`SegmentReader`]). `Err`: the bytes could not be read as the scan saw
/// them (the file changed, a read failed); the caller then judges the segment whole.
#[allow(clippy::too_many_arguments)]
fn classify_windowed(
    storage: &dyn Storage,
    seq: u64,
    window: usize,
    buf: &mut Vec<u8>,
    raw: &RawDamage,
    later: bool,
    stale: StaleLookup,
) -> std::io::Result<CrcVerdict> {
    let f = storage.open(&segment_file_name(seq), false)?;
    let judged = (|| {
        let mut src = SegmentReader::new(storage, f, window, buf)?;
        let stale = match stale {
            StaleLookup::Known(t) => t,
            StaleLookup::Find(owner) => find_table(&mut src, owner)?.map(|(_, t)| Arc::new(t)),
        };
        classify_in(&mut src, raw, later, stale.as_deref())
    })();
    storage.close(f);
    judged
}

/// A segment file whose header is all zero and which holds data, as [`scan::read_start_in`]
/// judges it whole, read a window at a time: a spare made of a recycled file when its stale
/// table checks out, every sector before the table is blank and its footer slot is zero;
/// else damage at its start.
fn zero_header(
    storage: &dyn Storage,
    f: FileId,
    window: usize,
    buf: &mut Vec<u8>,
    expect: &Expect,
) -> std::io::Result<Windowed> {
    let mut src = SegmentReader::new(storage, f, window, buf)?;
    let owner = scan::owner_of(expect);
    let spare = recycled_spare(&mut src, window, owner)?;
    Ok(match scan::zero_header_start(spare, src.file_len(), expect) {
        Start::Spare { recycled } => Windowed::Spare { recycled },
        Start::Damage(raw) => Windowed::AtStart { raw, stale: StaleLookup::Find(owner) },
        // Never made of a zero header; judged whole if it were.
        Start::Segment(_) | Start::Unsupported(_) => Windowed::Redo { visited_until: 0 },
    })
}

/// The stale table of `owner`'s file read by `src`, if it holds one (as
/// [`StaleTable::find`] finds it in the whole file).
fn find_table(src: &mut SegmentReader<'_>, owner: Owner) -> std::io::Result<Option<(u32, StaleTable)>> {
    let Some(len) = scan::segment_len_of(src.file_len()) else { return Ok(None) };
    let at = table_range(len);
    let win = src.window(at.start, at.end)?;
    Ok(win.get(at.start, at.end).and_then(|r| StaleTable::parse(r, len, owner)).map(|t| (len, t)))
}

/// Is the file `src` reads a spare made of a recycled file (`scan::recycled_spare`): a valid
/// stale table, every sector before it blank, a zero footer slot? Read a window at a time.
fn recycled_spare(src: &mut SegmentReader<'_>, window: usize, owner: Owner) -> std::io::Result<bool> {
    let Some((len, t)) = find_table(src, owner)? else { return Ok(false) };
    // Past the written end every sector is zero, so blank (whole sectors: one the written end
    // cuts is judged whole, its zeros after that end included).
    let limit = crate::stale::table_offset(len).min(src.written().next_multiple_of(SECTOR));
    let mut base = 0;
    while base < limit {
        let end = (base + window).min(limit);
        let win = src.window(base, end)?;
        if crate::stale::first_nonblank(Some(&t), win.get(base, end).unwrap_or_default(), base).is_some() {
            return Ok(false);
        }
        base = end;
    }
    let (slot, file_len) = (footer_offset(len), src.file_len());
    let win = src.window(slot, file_len)?;
    Ok(win.get(slot, file_len).is_none_or(is_zero))
}

/// Walks segment `seq` through windows of about `window` bytes read into `buf` (one buffer,
/// reused; it grows only for a record longer than a window), each walked while it is in cache;
/// with `stop_at`, up to the first batch starting there.
#[allow(clippy::too_many_arguments)]
fn walk_windowed(
    storage: &dyn Storage,
    seq: u64,
    expect: &Expect,
    logical: Option<Logical>,
    window: usize,
    stop_at: Option<u64>,
    buf: &mut Vec<u8>,
    visit: &mut impl FnMut(&Rec<'_>),
) -> Result<Windowed> {
    on_segment(storage, seq, "reading", |f| {
        walk_file(storage, f, expect, logical, window, stop_at, buf, visit)
    })
}

/// Reads `len` bytes at `at` into the front of `buf` (grown if needed): false when the file
/// ended first (it changed length under the scan).
fn fill(storage: &dyn Storage, f: FileId, buf: &mut Vec<u8>, at: usize, len: usize) -> std::io::Result<bool> {
    if buf.is_empty() {
        // Zeroed by the allocator (fresh pages are zero already), not by a memset.
        *buf = vec![0u8; len];
    } else if buf.len() < len {
        buf.resize(len, 0);
    }
    let n = storage.read_at(f, at as u64, buf.get_mut(..len).unwrap_or_default())?;
    Ok(n == len)
}

#[allow(clippy::too_many_arguments)]
fn walk_file(
    storage: &dyn Storage,
    f: FileId,
    expect: &Expect,
    logical: Option<Logical>,
    window: usize,
    stop_at: Option<u64>,
    buf: &mut Vec<u8>,
    visit: &mut impl FnMut(&Rec<'_>),
) -> std::io::Result<Windowed> {
    let redo = |w: Option<&Walker>| Ok(Windowed::Redo { visited_until: w.map_or(0, |w| w.offset()) });
    let file_len = storage.len(f)? as usize;
    // Past it every byte is zero: not read (see `map_segment_written`).
    let written = written_within(storage, f, file_len)?;
    if written == 0 {
        return Ok(Windowed::Spare { recycled: false });
    }
    let window = window.next_multiple_of(READ_ALIGN).max(READ_ALIGN);
    let mut base = 0usize;
    let mut len = window.min(file_len);
    if !fill(storage, f, buf, 0, len)? {
        return redo(None);
    }
    // A file too short for a header is judged whole.
    if file_len < SEGMENT_HEADER_LEN {
        return redo(None);
    }
    if is_zero(buf.get(..SEGMENT_HEADER_LEN).unwrap_or_default()) {
        // A spare if every byte is zero; anything else is a recycled spare or damage.
        loop {
            if !is_zero(buf.get(..len).unwrap_or_default()) {
                return match zero_header(storage, f, window, buf, expect) {
                    Ok(w) => Ok(w),
                    // The file changed under the scan, or a read failed: judged whole.
                    Err(_) => redo(None),
                };
            }
            base += len;
            if base >= written {
                return Ok(Windowed::Spare { recycled: false });
            }
            len = window.min(file_len - base);
            if !fill(storage, f, buf, base, len)? {
                return redo(None);
            }
        }
    }
    let header = match scan::read_start_in(buf.get(..len).unwrap_or_default(), file_len, expect) {
        Start::Segment(h) => h,
        Start::Damage(raw) => {
            let stale = StaleLookup::Find(scan::owner_of(expect));
            return Ok(Windowed::AtStart { raw, stale });
        }
        Start::Unsupported(kind) => return Ok(Windowed::Unsupported(kind)),
        Start::Spare { .. } => return redo(None),
    };
    let mut w = Walker::new(header, logical);
    w.zeros_from(written);
    w.stop_at = stop_at;
    let mut stale = None;
    if header.is_recycled() {
        // Its stale table, read whole; one that does not check out is judged by the map path.
        let at = table_range(header.segment_len.get());
        let mut region = vec![0u8; at.len()];
        if storage.read_at(f, at.start as u64, &mut region)? != at.len() {
            return redo(None);
        }
        match StaleTable::parse(&region, header.segment_len.get(), Owner::of(&header)) {
            Some(t) => {
                stale = Some(Arc::new(t));
                w.stale(stale.clone());
            }
            None => {
                let raw = scan::bad_stale_table(&header);
                return Ok(Windowed::AtStart { raw, stale: StaleLookup::Known(None) });
            }
        }
    }
    // The batch frames this walk accepted, one bit per sector (batches start on a sector, the
    // first right after the segment header): a footer's index point that names one needs no
    // read. The frame checked out with the same bytes and its batch ended before the footer's
    // data end, so decoding it again there gives the same frame.
    let frames: Vec<Cell<u64>> = (0..file_len.div_ceil(SECTOR * 64)).map(|_| Cell::new(0)).collect();
    let first_frame = Cell::new(false);
    let bit = |off: u64| {
        let off = off as usize;
        (off.is_multiple_of(SECTOR)).then(|| (frames.get(off / SECTOR / 64), 1u64 << (off / SECTOR % 64)))
    };
    let visit = &mut |r: &Rec<'_>| {
        if r.kind == Kind::Frame {
            if r.offset == SEGMENT_HEADER_LEN as u64 {
                first_frame.set(true);
            } else if let Some((Some(word), b)) = bit(r.offset) {
                word.set(word.get() | b);
            }
        }
        visit(r);
    };
    // A footer's index point outside the window: a frame this walk accepted, or read just it.
    // A read that fails leaves the probe undecided: damage it led to is judged whole.
    let undecided = Cell::new(false);
    let probe = |off: u64, data_end: u64| {
        let walked = if off == SEGMENT_HEADER_LEN as u64 {
            first_frame.get()
        } else {
            bit(off).is_some_and(|(word, b)| word.is_some_and(|w| w.get() & b != 0))
        };
        if walked {
            return true;
        }
        let end = (data_end as usize).min(file_len);
        let n = record_len(FRAME_PAYLOAD_LEN).min(end.saturating_sub(off as usize));
        let mut b = [0u8; record_len(FRAME_PAYLOAD_LEN)];
        let Some(b) = b.get_mut(..n) else { return false };
        if !matches!(storage.read_at(f, off, b), Ok(k) if k == n) {
            undecided.set(true);
            return false;
        }
        let win = Window::new(b, off, file_len as u64, None);
        scan::frame_at(&win, off as usize, data_end as usize)
    };
    loop {
        let win = Window::new(buf.get(..len).unwrap_or_default(), base as u64, file_len as u64, Some(&probe));
        match w.walk(&win, visit) {
            Walked::End => return Ok(Windowed::Clean(header, Box::new(w))),
            Walked::Damage(raw) if !undecided.get() => {
                return Ok(Windowed::Damaged { header, walker: Box::new(w), raw, stale })
            }
            Walked::Record(_) | Walked::Damage(_) => return redo(Some(&w)),
            Walked::NeedMore { from, end } => {
                let (from, end) = (from as usize, (end as usize).min(file_len));
                let at = from - from % READ_ALIGN;
                if at < base || at >= file_len {
                    // Never asked for: a walk only moves forward, inside the file.
                    return redo(Some(&w));
                }
                base = at;
                len = window.max(end.saturating_sub(at)).min(file_len - at);
                if !fill(storage, f, buf, at, len)? {
                    return redo(Some(&w));
                }
            }
        }
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
pub fn scan_log(storage: &dyn Storage, full: bool) -> Result<LogScan> {
    scan_log_with(storage, if full { Depth::Full } else { Depth::Fast }, &mut |_, _| {})
}

/// Scans the log, calling `visit(segment, record)` for every valid record walked, in log order.
pub fn scan_log_with(
    storage: &dyn Storage,
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
fn check_close_file(storage: &dyn Storage, scan: &LogScan, meta: &MetaFile) -> Result<Option<Damage>> {
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
