//! Walking one segment through windows of one reused buffer (`Reader::scan_window`: the
//! verifier's pread storage), a window at a time, each walked while it is in cache, and
//! classifying damage by reading only what the classification needs (`segment_read.rs`).
//! Anything a window cannot judge as a walk of the whole file would (a file that changed
//! length or failed a read) says so ([`Windowed::Redo`]), and the scan reads it whole.

use super::files::{on_segment, written_within};
use crate::classify::{classify_in, SegmentBytes};
use crate::error::{CrcVerdict, DamageKind, Result};
use crate::format::*;
use crate::scan::{self, Expect, Logical, RawDamage, Rec, Start, Walked, Walker, Window};
use crate::segment_read::SegmentReader;
use crate::segment_read::READ_ALIGN;
use crate::stale::{table_range, Owner, StaleTable};
use crate::storage::{FileId, Reader};
use std::cell::Cell;
use std::sync::Arc;

/// What a windowed walk of one segment ended with.
pub(super) enum Windowed {
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
pub(super) enum StaleLookup {
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
pub(super) fn classify_windowed(
    storage: &dyn Reader,
    seq: u64,
    window: usize,
    buf: &mut Vec<u8>,
    raw: &RawDamage,
    later: bool,
    stale: StaleLookup,
) -> std::io::Result<CrcVerdict> {
    let f = storage.open(&segment_file_name(seq))?;
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
pub(super) fn zero_header(
    storage: &dyn Reader,
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
pub(super) fn find_table(
    src: &mut SegmentReader<'_>,
    owner: Owner,
) -> std::io::Result<Option<(u32, StaleTable)>> {
    let Some(len) = scan::segment_len_of(src.file_len()) else { return Ok(None) };
    let at = table_range(len);
    let win = src.window(at.start, at.end)?;
    Ok(win.get(at.start, at.end).and_then(|r| StaleTable::parse(r, len, owner)).map(|t| (len, t)))
}

/// Is the file `src` reads a spare made of a recycled file (`scan::recycled_spare`): a valid
/// stale table, every sector before it blank, a zero footer slot? Read a window at a time.
pub(super) fn recycled_spare(
    src: &mut SegmentReader<'_>,
    window: usize,
    owner: Owner,
) -> std::io::Result<bool> {
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
pub(super) fn walk_windowed(
    storage: &dyn Reader,
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
pub(super) fn fill(
    storage: &dyn Reader,
    f: FileId,
    buf: &mut Vec<u8>,
    at: usize,
    len: usize,
) -> std::io::Result<bool> {
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
pub(super) fn walk_file(
    storage: &dyn Reader,
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
