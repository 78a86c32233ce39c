//! The log directory's life on disk outside the append path: creating a log, syncing what a
//! crash may have left unsynced before recovery reads it, and cutting a torn tail.

use crate::error::{Damage, Error, Result};
use crate::format::*;
use crate::recovery;
use crate::scan;
use crate::storage::{self, Op, Storage};
use zerocopy::IntoBytes;

pub(crate) fn sync_dir(storage: &dyn Storage) -> Result<()> {
    storage::complete(storage, u64::MAX, Op::SyncDir)
        .map(|_| ())
        .map_err(|e| Error::io("syncing the directory", e))
}

/// Creates a new log: its first segment (zero-filled, durable), then `wal.meta` naming it.
pub(crate) fn init(storage: &dyn Storage, segment_len: u32, log_id: Option<[u8; 16]>) -> Result<()> {
    let first = segment_file_name(1);
    let f = storage.create(&first).map_err(|e| Error::io(format!("creating {first}"), e))?;
    let r = storage::complete(storage, 1, Op::ZeroFill { file: f, len: segment_len.into() })
        .and_then(|_| storage::complete(storage, 2, Op::SyncData { file: f }));
    storage.close(f);
    r.map_err(|e| Error::io(format!("zero-filling {first}"), e))?;
    sync_dir(storage)?;
    let log_id = match log_id {
        Some(id) => id,
        None => {
            let mut id = [0u8; 16];
            getrandom::fill(&mut id)
                .map_err(|e| Error::io("drawing a log id", std::io::Error::other(e.to_string())))?;
            id
        }
    };
    let meta = MetaFile::new(log_id, 1, 1, 0);
    replace_meta(storage, &meta).map_err(|e| Error::io("writing wal.meta", e))
}

/// Replaces `wal.meta` atomically: temporary file, fdatasync, rename, directory fsync. It never
/// tears, which is what lets it attest a clean close.
pub(crate) fn replace_meta(storage: &dyn Storage, meta: &MetaFile) -> std::io::Result<()> {
    let _ = storage.remove(META_TMP_NAME);
    let f = storage.create(META_TMP_NAME)?;
    let r = storage::complete(storage, 10, Op::Write { file: f, offset: 0, data: meta.as_bytes().to_vec() })
        .and_then(|_| storage::complete(storage, 11, Op::SyncData { file: f }));
    storage.close(f);
    r?;
    storage.rename(META_TMP_NAME, META_FILE_NAME)?;
    storage::complete(storage, 12, Op::SyncDir).map(|_| ())
}

/// Syncs the directory and the newest segment files, so that recovery classifies only bytes
/// that are durable. Older segments were synced (and sealed) before a newer one took records.
pub(crate) fn sync_unsealed(storage: &dyn Storage) -> Result<()> {
    sync_dir(storage)?;
    let names = storage.list().map_err(|e| Error::io("listing the log directory", e))?;
    let mut seqs: Vec<u64> = names.iter().filter_map(|n| parse_segment_file_name(n)).collect();
    seqs.sort_unstable();
    for &s in seqs.iter().rev().take(3) {
        let name = segment_file_name(s);
        let f = storage.open(&name).map_err(|e| Error::io(format!("opening {name}"), e))?;
        let r = storage::complete(storage, 3, Op::SyncData { file: f });
        storage.close(f);
        r.map_err(|e| Error::io(format!("syncing {name}"), e))?;
    }
    Ok(())
}

/// Cuts the log at a damage: zeroes from the start of the damaged batch to the last sector of
/// its segment that is not blank (zero, or in a recycled segment its old contents; a recycled
/// segment's stale table stays), and what the footer slot holds (the length never changes, so
/// no mapped byte disappears), syncs, and removes
/// every later segment file. For a TORN_TAIL this loses nothing acknowledged; for CORRUPT_TAIL or
/// CORRUPT it is lossy and only `walcheck repair --lossy` asks for it. The caller holds the
/// exclusive lock. Returns (segment, offset, bytes zeroed).
pub fn cut_tail(storage: &dyn Storage, d: &Damage) -> Result<(u64, u64, u64)> {
    let bytes = recovery::map_segment(storage, d.segment)?;
    let from = cut_start(d) as usize;
    let log_id = recovery::read_meta(storage)?.map(|m| m.log_id).unwrap_or_default();
    let ranges = cut_ranges(&bytes, from, crate::stale::Owner { log_id, segment_seq: d.segment });
    drop(bytes);
    let name = segment_file_name(d.segment);
    let f = storage.open(&name).map_err(|e| Error::io(format!("opening {name}"), e))?;
    let mut r = Ok((0, None));
    for &(a, b) in &ranges {
        r = r.and_then(|_| {
            storage::complete(storage, 4, Op::Write { file: f, offset: a as u64, data: vec![0; b - a] })
        });
    }
    if !ranges.is_empty() {
        r = r.and_then(|_| storage::complete(storage, 5, Op::SyncData { file: f }));
    }
    storage.close(f);
    r.map_err(|e| Error::io(format!("cutting the torn tail of {name}"), e))?;
    let zeroed: usize = ranges.iter().map(|(a, b)| b - a).sum();
    // A cut into a segment a clean close sealed (only a lossy repair does that) removes its
    // footer: wal.meta must stop attesting it.
    remove_after(storage, d.segment, d.segment)?;
    Ok((d.segment, from as u64, zeroed as u64))
}

/// Where [`cut_tail`] starts zeroing for the damage `d`: the first byte of the damaged batch,
/// or 0 when that batch is the segment's first. The first batch of a segment carries the
/// segment header and the State record: cutting it cuts the header too, so the file is a spare
/// again rather than a header with no state (found by the model test: a torn first batch after
/// a rotation lost the log's state).
pub fn cut_start(d: &Damage) -> u64 {
    if d.batch_start as usize <= SEGMENT_HEADER_LEN {
        0
    } else {
        d.batch_start
    }
}

/// Ends the log with segment `last`: removes every later segment file (and syncs the
/// directory), and makes `wal.meta` stop attesting a clean close of a removed segment. What a
/// lossy repair does when a segment is missing: the segments before the gap are a log on their
/// own (a crash between a rotation's footer and the next segment's first batch leaves one like
/// it), the ones after it cannot be chained to them. The caller holds the exclusive lock.
/// Returns the segments removed.
pub fn cut_after_segment(storage: &dyn Storage, last: u64) -> Result<Vec<u64>> {
    remove_after(storage, last, last + 1)
}

/// Removes every segment file after `last`, then, if `wal.meta` attests a clean close of
/// segment `close_from` or later, replaces it without that close.
fn remove_after(storage: &dyn Storage, last: u64, close_from: u64) -> Result<Vec<u64>> {
    let names = storage.list().map_err(|e| Error::io("listing the log directory", e))?;
    let mut removed: Vec<u64> =
        names.iter().filter_map(|n| parse_segment_file_name(n)).filter(|&s| s > last).collect();
    removed.sort_unstable();
    for &s in &removed {
        storage
            .remove(&segment_file_name(s))
            .map_err(|e| Error::io(format!("removing segment {s} after a cut"), e))?;
    }
    if !removed.is_empty() {
        sync_dir(storage)?;
    }
    if let Ok(Ok(meta)) = recovery::read_meta(storage) {
        if meta.closed_segment_seq.get() >= close_from {
            replace_meta(storage, &meta.with_close(0, 0)).map_err(|e| Error::io("replacing wal.meta", e))?;
        }
    }
    Ok(removed)
}

/// The LSNs of the entries in `bytes` (a segment file, or the part of one from a cut on) whose
/// record checks out on its own (header checksum, record checksum, kind) and whose sequence is
/// above `after_seq`: what a cut of those bytes drops. Found by looking at every 8-byte boundary
/// (records are 8-byte aligned) rather than by walking, because a cut starts at damage the
/// walk stops at; a record found is stepped over whole, so a payload never counts. Records of a
/// recycled file's earlier life have lower sequences and are left out by `after_seq`.
pub fn entries_in(bytes: &[u8], after_seq: u64) -> Vec<u64> {
    use zerocopy::FromBytes;
    let mut lsns = Vec::new();
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + RECORD_HEADER_LEN) {
        let Ok(h) = RecordHeader::read_from_bytes(head) else { break };
        let len = h.payload_len.get() as usize;
        let payload = bytes.get(at + RECORD_HEADER_LEN..).and_then(|p| p.get(..len));
        let found = h.header_crc.get() == h.compute_header_crc()
            && payload.is_some_and(|p| h.crc.get() == h.compute_crc(p));
        if found {
            if h.kind == Kind::Entry as u8 && h.seq.get() > after_seq {
                lsns.push(h.lsn.get());
            }
            at += (RECORD_HEADER_LEN + len).next_multiple_of(ALIGN);
        } else {
            at += ALIGN;
        }
    }
    lsns
}

/// The byte ranges a cut from `from` zeroes in the segment file `bytes`: up to the last sector
/// that is not blank, and in a recycled segment (whose stale table must stay) the footer slot's
/// non-zero bytes apart.
fn cut_ranges(bytes: &[u8], from: usize, owner: crate::stale::Owner) -> Vec<(usize, usize)> {
    // A header that checks out says whether there is a table; a cut from 0 may meet a header
    // sector a crash dropped (then a table is looked for).
    let header = SegmentHeader::self_valid(bytes);
    let table = scan::stale_of(bytes, header.as_ref(), owner).ok().flatten();
    let (Some(t), Some(len)) = (table, scan::segment_len_of(bytes.len())) else {
        let end = from + end_of_nonzero(bytes.get(from..).unwrap_or_default());
        return if end > from { vec![(from, end)] } else { Vec::new() };
    };
    let (limit, slot) = (crate::stale::table_offset(len), crate::format::footer_offset(len));
    let base = from - from % crate::format::SECTOR;
    // Blank sectors stay as they are, but not the rest of the sector the cut starts in: after a
    // batch the walk wants zeros up to the next sector, not old contents.
    let data_end = crate::stale::end_of_nonblank(Some(&t), bytes.get(base..limit).unwrap_or_default(), base)
        .max(from.next_multiple_of(crate::format::SECTOR).min(limit));
    let slot_from = from.max(slot);
    let slot_end = slot_from + end_of_nonzero(bytes.get(slot_from..).unwrap_or_default());
    [(from, data_end), (slot_from, slot_end)].into_iter().filter(|(a, b)| b > a).collect()
}
