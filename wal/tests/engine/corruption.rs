//! Damage to a cleanly closed log (docs/invariants.md I4): after a clean close every batch is attested,
//! so every single-bit flip and every zeroed sector must be CORRUPT at the right segment and
//! offset: never accepted, never TORN_TAIL or CORRUPT_TAIL, never a panic.
//!
//! The CI run flips every bit of every byte that holds data (headers, records, padding, footers,
//! `wal.meta`) and every bit of every 61st byte of the zero-filled remainder; the exhaustive
//! sweep over every bit of every byte is `cargo test -p wal --test engine corruption:: --
//! --ignored`.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use wal::format::{footer_offset, record_len, segment_file_name, Kind, META_FILE_NAME};
use wal::scan::{read_start, Expect, Start, Step, Walker};
use wal::storage::{Completions, FileId, Mapping, Reader, Writer};
use wal::{CrcVerdict, DamageKind, Epoch, Lsn, Options, Wal};
use wal_sim::MemStorage;

const SEG: u32 = 64 * 1024;

/// A small log of four segments holding every record kind, cleanly closed.
fn clean_log() -> Vec<(String, Vec<u8>)> {
    let st = MemStorage::new();
    let opts = Options { segment_len_bytes: SEG, ..Options::default() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts).unwrap();
    log.append_at(Epoch(0), Lsn(10), b"start at ten").unwrap();
    for seg in 0..4u64 {
        for i in 0..6u64 {
            let p: Vec<u8> = (0..(20 + i * 9)).map(|j| (seg * 31 + i * 7 + j) as u8).collect();
            log.append(Epoch(seg), &p).unwrap();
            if i % 2 == 1 {
                log.sync().unwrap();
            }
        }
        log.append_batch(Epoch(seg), &[b"group one", b"group two"]).unwrap();
        let next = log.next_lsn().0;
        log.checkpoint(
            Epoch(seg),
            Lsn(next - 1),
            &wal::Checkpoint {
                digest: [seg as u8; 32],
                entity_count: seg,
                digest_version: 1,
                state_machine_version: 1,
            },
        )
        .unwrap();
        log.truncate_after(Epoch(seg), Lsn(next - 2)).unwrap();
        log.append(Epoch(seg), b"after the cut").unwrap();
        log.set_meta(seg as u32, b"meta value").unwrap();
        log.advance_epoch(Epoch(seg + 1)).unwrap();
        log.sync().unwrap();
        if seg < 3 {
            log.rotate().unwrap();
        }
    }
    log.close().unwrap();
    let state = st.state();
    let mut files: Vec<(String, Vec<u8>)> =
        state.file_names().into_iter().map(|n| (n.clone(), state.file_bytes(&n).unwrap().to_vec())).collect();
    files.sort();
    files
}

/// Record extents (start, end) of a clean segment, its header and footer included.
fn extents(bytes: &[u8], seq: u64, log_id: [u8; 16]) -> Vec<(usize, usize)> {
    let expect = Expect { segment_seq: seq, log_id, first_record_seq: None, prev_crc: None };
    let Start::Segment(h) = read_start(bytes, &expect) else { panic!("segment {seq} is not clean") };
    let mut out = vec![(0, 64)];
    let mut w = Walker::new(h, None);
    loop {
        match w.next(bytes) {
            Step::Record(r) => {
                out.push((r.offset as usize, r.offset as usize + record_len(r.payload.len())));
                if r.kind == Kind::Footer {
                    assert_eq!(r.offset as usize, footer_offset(SEG));
                }
            }
            Step::End => break,
            Step::Damage(d) => panic!("clean segment {seq} has damage {d:?}"),
        }
    }
    assert!(w.sealed(), "segment {seq} is not sealed after a clean close");
    out
}

/// Where the damage must be reported for a change at `b`: the record holding it; in the zero
/// region, the sector boundary where the next batch frame would start if `b` falls inside that
/// frame's header; else the 8-byte word.
fn expected_offset(ext: &[(usize, usize)], b: usize) -> usize {
    if let Some(&(s, _)) = ext.iter().find(|&&(s, e)| s <= b && b < e) {
        return s;
    }
    let data_end = ext.iter().filter(|&&(s, _)| s < footer_offset(SEG)).map(|&(_, e)| e).max().unwrap_or(64);
    let next_frame = data_end.next_multiple_of(512);
    if (next_frame..next_frame + 48).contains(&b) {
        return next_frame;
    }
    b & !7
}

/// A segment file of the fixture: (file index, segment seq, record extents).
type SegmentFile = (usize, u64, Vec<(usize, usize)>);

struct Fixture {
    files: Vec<(String, Vec<u8>)>,
    segments: Vec<SegmentFile>,
    meta_index: usize,
}

fn fixture() -> Fixture {
    let files = clean_log();
    let meta_index = files.iter().position(|f| f.0 == META_FILE_NAME).unwrap();
    let log_id: [u8; 16] = files[meta_index].1[16..32].try_into().unwrap();
    let mut segments = Vec::new();
    for (i, (name, bytes)) in files.iter().enumerate() {
        if let Some(seq) = wal::format::parse_segment_file_name(name) {
            if bytes.iter().any(|&b| b != 0) {
                segments.push((i, seq, extents(bytes, seq, log_id)));
            }
        }
    }
    assert!(segments.len() >= 4, "want at least 4 segments, got {}", segments.len());
    let st = MemStorage::from_files(files.clone());
    assert_eq!(wal::scan_log(&st, true).unwrap().verdict, CrcVerdict::Ok);
    Fixture { files, segments, meta_index }
}

/// `MemStorage` that asks a full scan to stream segments through windows of `window` bytes (as
/// the verifier's pread storage does), and counts whole-file maps.
#[derive(Debug)]
struct Windowed {
    inner: MemStorage,
    window: usize,
    maps: AtomicUsize,
    /// The longest read asked for.
    max_read: AtomicUsize,
}

impl Windowed {
    fn new(inner: MemStorage, window: usize) -> Self {
        Windowed { inner, window, maps: AtomicUsize::new(0), max_read: AtomicUsize::new(0) }
    }
}

impl Writer for Windowed {
    wal::forward_storage!(inner: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill);
}

impl Completions for Windowed {
    wal::forward_storage!(inner: submit, reap);
}

impl Reader for Windowed {
    wal::forward_storage!(inner: list, open, close, len, lock_shared);

    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.max_read.fetch_max(buf.len(), Ordering::Relaxed);
        self.inner.read_at(file, offset, buf)
    }
    fn map(&self, file: FileId) -> io::Result<Mapping> {
        self.maps.fetch_add(1, Ordering::Relaxed);
        self.inner.map(file)
    }
    fn scan_window(&self) -> Option<usize> {
        Some(self.window)
    }
}

/// Records a windowed scan must cross a window's end on: smaller than a segment.
const WINDOW: usize = 4096;

/// Scans `files` with file `fi` replaced by `bytes`, whole and through windows: the two scans
/// must agree on everything (verdict, damage and its location, the segments, what was walked).
fn scan_with(files: &[(String, Vec<u8>)], fi: usize, bytes: Vec<u8>) -> wal::LogScan {
    let mut v = files.to_vec();
    v[fi].1 = bytes;
    let st = MemStorage::from_files(v);
    let whole = wal::scan_log(&st, true).unwrap();
    let windowed = wal::scan_log(&Windowed::new(st, WINDOW), true).unwrap();
    assert_eq!(format!("{windowed:?}"), format!("{whole:?}"), "the windowed scan differs");
    whole
}

fn check(
    fx: &Fixture,
    fi: usize,
    bytes: Vec<u8>,
    what: &str,
    want: Option<(u64, std::ops::RangeInclusive<usize>)>,
) {
    let scan = scan_with(&fx.files, fi, bytes);
    let d = scan.damage.unwrap_or_else(|| panic!("{what}: accepted as OK"));
    assert_eq!(d.verdict, CrcVerdict::Corrupt, "{what}: {d}");
    if let Some((seg, range)) = want {
        assert_eq!(d.segment, seg, "{what}: {d}");
        assert!(
            range.contains(&(d.offset as usize)),
            "{what}: reported at offset {}, want {range:?}: {d}",
            d.offset
        );
    }
}

fn flips(exhaustive: bool) -> u64 {
    let fx = fixture();
    let mut n = 0u64;
    for (fi, seq, ext) in &fx.segments {
        let clean = &fx.files[*fi].1;
        for b in 0..clean.len() {
            let in_record = ext.iter().any(|&(s, e)| s <= b && b < e);
            if !exhaustive && !in_record && b % 61 != 0 {
                continue;
            }
            let at = expected_offset(ext, b);
            for bit in 0..8 {
                let mut bytes = clean.clone();
                bytes[b] ^= 1 << bit;
                check(
                    &fx,
                    *fi,
                    bytes,
                    &format!("bit {bit} of byte {b} in segment {seq}"),
                    Some((*seq, at..=at)),
                );
                n += 1;
            }
        }
    }
    let meta = &fx.files[fx.meta_index].1;
    for b in 0..meta.len() {
        for bit in 0..8 {
            let mut bytes = meta.clone();
            bytes[b] ^= 1 << bit;
            let scan = scan_with(&fx.files, fx.meta_index, bytes);
            let d = scan.damage.unwrap_or_else(|| panic!("bit {bit} of wal.meta byte {b}: accepted"));
            assert!(matches!(d.verdict, CrcVerdict::Corrupt), "wal.meta byte {b}: {d}");
            assert!(matches!(d.kind, DamageKind::BadMetaFile(_)), "wal.meta byte {b}: {d}");
            n += 1;
        }
    }
    n
}

/// A clean log scanned through windows of many sizes (records and batches across every kind of
/// window end) gives what a whole scan gives, and never falls back to reading a segment whole.
#[test]
fn a_windowed_scan_of_a_clean_log_matches_the_whole_scan() {
    let fx = fixture();
    let st = MemStorage::from_files(fx.files.clone());
    let whole = wal::scan_log(&st, true).unwrap();
    assert_eq!(whole.verdict, CrcVerdict::Ok);
    assert!(!whole.spares.is_empty(), "the fixture should have a spare segment: {whole:?}");
    for window in [1, 4096, 8192, 12288, 16384, 32768, 65536, 1 << 20] {
        let w = Windowed::new(st.clone(), window);
        let scan = wal::scan_log(&w, true).unwrap();
        assert_eq!(format!("{scan:?}"), format!("{whole:?}"), "window {window}");
        assert_eq!(w.maps.load(Ordering::Relaxed), 0, "window {window}: a segment was read whole");
        // One window at a time (the records here are smaller than any window).
        let most = window.next_multiple_of(4096);
        assert!(w.max_read.load(Ordering::Relaxed) <= most, "window {window}: a read longer than a window");
    }
}

/// Segments whose footers index their batch frames (the main fixture cuts in every segment,
/// which drops the index): a windowed scan checks the index points as a whole scan does, from
/// the frames it walked, also when an index point is moved.
#[test]
fn a_windowed_scan_checks_footer_index_points() {
    let st = MemStorage::new();
    let opts = Options { segment_len_bytes: SEG, ..Options::default() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts).unwrap();
    for i in 0..300u32 {
        log.append(Epoch(0), &i.to_le_bytes()).unwrap();
        log.flush().unwrap();
    }
    log.close().unwrap();
    let state = st.state();
    let mut files: Vec<(String, Vec<u8>)> =
        state.file_names().into_iter().map(|n| (n.clone(), state.file_bytes(&n).unwrap().to_vec())).collect();
    files.sort();
    let st = MemStorage::from_files(files.clone());
    let whole = wal::scan_log(&st, true).unwrap();
    assert_eq!(whole.verdict, CrcVerdict::Ok);
    let indexed =
        whole.segments.iter().filter(|s| s.footer.as_ref().is_some_and(|f| f.index.len() > 4)).count();
    assert!(indexed >= 2, "want segments with index points: {whole:?}");
    for window in [4096, 8192, 65536, 1 << 20] {
        let w = Windowed::new(st.clone(), window);
        let scan = wal::scan_log(&w, true).unwrap();
        assert_eq!(format!("{scan:?}"), format!("{whole:?}"), "window {window}");
        assert_eq!(w.maps.load(Ordering::Relaxed), 0, "window {window}: a segment was read whole");
    }
    // Move the first segment's third index point (checksums redone): onto the next batch frame
    // (the index still checks out: the chain into the next segment breaks), and into the middle
    // of a frame (the index does not).
    let seg = &whole.segments[0];
    let fi = files.iter().position(|f| f.0 == segment_file_name(seg.seq)).unwrap();
    let at = footer_offset(SEG);
    let point = at + 48 + wal::format::FOOTER_FIXED_LEN + 2 * wal::format::INDEX_POINT_LEN + 8;
    let payload_len = u32::from_le_bytes(files[fi].1[at + 12..at + 16].try_into().unwrap()) as usize;
    for (moved, want) in [(512u64, None), (8, Some("index point does not name a batch frame"))] {
        let mut bytes = files[fi].1.clone();
        let off = u64::from_le_bytes(bytes[point..point + 8].try_into().unwrap()) + moved;
        bytes[point..point + 8].copy_from_slice(&off.to_le_bytes());
        let h = crc32c::crc32c(&bytes[at + 8..at + 48]);
        bytes[at + 4..at + 8].copy_from_slice(&h.to_le_bytes());
        let c = crc32c::crc32c(&bytes[at + 4..at + 48 + payload_len]);
        bytes[at..at + 4].copy_from_slice(&c.to_le_bytes());
        let d = scan_with(&files, fi, bytes).damage.expect("a changed footer is damage");
        match want {
            Some(why) => assert_eq!((d.segment, &d.kind), (seg.seq, &DamageKind::BadFooter(why)), "{d}"),
            None => assert_eq!(d.segment, seg.seq + 1, "{d}"),
        }
    }
}

#[test]
fn every_bit_flip_in_data_is_corrupt_at_its_record() {
    let n = flips(false);
    println!("checked {n} single-bit flips");
    assert!(n > 30_000, "{n}");
    assert_eq!(n, 85_520, "docs/testing.md quotes this count");
}

#[test]
#[ignore = "long sweep: every bit of every byte (about 2 million flips)"]
fn every_bit_flip_anywhere_is_corrupt_at_its_record() {
    let n = flips(true);
    println!("checked {n} single-bit flips");
}

#[test]
fn every_zeroed_sector_is_corrupt_at_its_segment() {
    let fx = fixture();
    let mut n = 0;
    for (fi, seq, ext) in &fx.segments {
        let clean = &fx.files[*fi].1;
        for s in 0..clean.len() / 512 {
            let (a, b) = (s * 512, s * 512 + 512);
            if clean[a..b].iter().all(|&x| x == 0) {
                continue; // zeroing zeros changes nothing
            }
            let mut bytes = clean.clone();
            bytes[a..b].fill(0);
            // The first damaged record is the first one overlapping the sector; if the sector
            // starts a batch, the walker sees the end of data and reports the first non-zero byte
            // after it (still inside the sector's records), or a missing footer at the data end.
            let first = ext.iter().filter(|&&(s0, e0)| e0 > a && s0 < b).map(|&(s0, _)| s0).min().unwrap();
            let last_end = ext.iter().filter(|&&(s0, _)| s0 < b).map(|&(_, e0)| e0).max().unwrap();
            let data_end =
                ext.iter().filter(|&&(s0, _)| s0 < footer_offset(SEG)).map(|&(_, e)| e).max().unwrap();
            let lo = first.min(data_end & !7);
            let hi = last_end.max(b);
            check(&fx, *fi, bytes, &format!("zeroed sector {s} of segment {seq}"), Some((*seq, lo..=hi)));
            n += 1;
        }
    }
    println!("checked {n} zeroed sectors");
    assert!(n >= 12, "{n}");
}

#[test]
fn a_missing_middle_segment_and_a_foreign_segment_are_corrupt() {
    let fx = fixture();
    let (fi, seq, _) = &fx.segments[1];
    let mut v = fx.files.clone();
    v.remove(*fi);
    let d = wal::scan_log(&MemStorage::from_files(v), true).unwrap().damage.unwrap();
    assert_eq!(d.verdict, CrcVerdict::Corrupt);
    assert_eq!(d.kind, DamageKind::MissingSegment { segment: *seq });

    // The same segment from another log (same layout, different log id) never validates.
    let other = clean_log();
    let name = segment_file_name(*seq);
    let foreign = other.iter().find(|f| f.0 == name).unwrap().1.clone();
    let d = scan_with(&fx.files, *fi, foreign).damage.unwrap();
    assert_eq!((d.verdict, d.segment), (CrcVerdict::Corrupt, *seq), "{d}");
    assert_eq!(d.kind, DamageKind::ForeignSegment);
}

#[test]
fn a_truncated_sealed_segment_is_corrupt() {
    let fx = fixture();
    let (fi, seq, _) = &fx.segments[1];
    for keep in [0usize, 63, 64, 4096, (SEG - 1) as usize] {
        let bytes = fx.files[*fi].1[..keep].to_vec();
        check(&fx, *fi, bytes, &format!("segment {seq} cut to {keep} bytes"), None);
    }
}

/// Found by the fault sweep: after a clean close, `wal.meta` names the segment the close sealed,
/// so that segment missing is CORRUPT, not a shorter log that scans OK (it held acknowledged
/// entries: an OK verdict would lose them silently).
#[test]
fn a_missing_last_segment_after_a_clean_close_is_corrupt() {
    let fx = fixture();
    let (_, seq, _) = fx.segments.last().unwrap();
    // Without it and the spare prepared after it (a log with no spare has just the one).
    let v: Vec<_> = fx
        .files
        .iter()
        .filter(|f| wal::format::parse_segment_file_name(&f.0).is_none_or(|s| s < *seq))
        .cloned()
        .collect();
    let scan = wal::scan_log(&MemStorage::from_files(v.clone()), true).unwrap();
    let d = scan.damage.unwrap_or_else(|| panic!("segment {seq} missing scanned {:?}", scan.verdict));
    assert_eq!(d.verdict, CrcVerdict::Corrupt, "{d}");
    assert_eq!(d.kind, DamageKind::MissingSegment { segment: *seq }, "{d}");
    // A writer's open (a fast scan) refuses it too.
    let opts = Options { segment_len_bytes: SEG, ..Options::default() };
    assert!(matches!(Wal::open_with(Arc::new(MemStorage::from_files(v)), opts), Err(wal::Error::Damaged(_))));
}

/// Found by the fault sweep: a read that fails while a full scan reads the log (also the read of
/// `wal.close`, which a clean close leaves) is an I/O error, never a verdict about the bytes: an
/// unreadable `wal.close` used to be reported CORRUPT (BadCloseFile).
#[test]
fn a_failed_read_during_a_scan_is_an_io_error_never_a_verdict() {
    use wal_sim::{Call, FailCall};
    let fx = fixture();
    assert!(fx.files.iter().any(|f| f.0 == wal::format::CLOSE_FILE_NAME), "the fixture has no wal.close");
    let probe = MemStorage::from_files(fx.files.clone());
    wal::scan_log(&probe, true).unwrap();
    let reads = probe.faults().calls[Call::ALL.iter().position(|c| *c == Call::Read).unwrap()];
    assert!(reads > 4, "{reads} reads");
    for nth in 0..reads {
        let st = MemStorage::from_files(fx.files.clone());
        st.faults().fail_calls = vec![FailCall { call: Call::Read, nth, errno: 5 }];
        match wal::scan_log(&st, true) {
            Err(wal::Error::Io { .. }) => {}
            other => panic!("read #{nth} failing gave {:?}", other.map(|s| (s.verdict, s.damage))),
        }
    }
}

/// Found by the fault sweep: a sealed segment whose footer slot was replaced by another log's (a
/// misdirected or foreign write of the same layout) is CORRUPT to a full scan, but an open's fast
/// scan used to take that footer's counts (its own checksums pass; the chain broke only at the
/// next segment's header). A salvage read then replayed the segment with the wrong cut count and
/// yielded entries the log had cut, next to the ones that replaced them. An open now takes a
/// footer without a walk only when the next header chains to it.
#[test]
fn a_salvage_read_past_a_replaced_footer_yields_no_cut_entry() {
    let fx = fixture();
    let (fi, seq, _) = &fx.segments[1];
    // Another log of the same segment size whose segments cut nothing.
    let other = MemStorage::new();
    let (mut log, _) =
        Wal::open_with(Arc::new(other.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
            .unwrap();
    while log.segment_count() < 4 {
        log.append(Epoch(0), &[7; 300]).unwrap();
        log.flush().unwrap();
    }
    log.close().unwrap();
    let name = segment_file_name(*seq);
    let foreign = other.state().file_bytes(&name).unwrap().to_vec();
    let at = footer_offset(SEG);
    let mut v = fx.files.clone();
    v[*fi].1[at..].copy_from_slice(&foreign[at..]);
    let st = MemStorage::from_files(v);
    assert_eq!(wal::scan_log(&st, true).unwrap().verdict, CrcVerdict::Corrupt);
    let salvage =
        Options { segment_len_bytes: SEG, recovery: wal::RecoveryMode::Salvage, ..Options::default() };
    let (log, _) = Wal::open_with(Arc::new(st), salvage).unwrap();
    let mut r = log.replay().unwrap();
    let mut last = None;
    while let Some(Ok(item)) = r.next() {
        if item.kind == wal::ItemKind::Entry {
            assert!(last.is_none_or(|l| item.lsn.0 > l), "LSN {} after {last:?}: a cut entry", item.lsn.0);
            last = Some(item.lsn.0);
        }
    }
}

/// Found by the fault sweep once its oracle asked for a state the log really held: an open does
/// not walk sealed segments, so damage inside one is met by the replay, which used to return the
/// first entries of a user batch before the damage in the batch's later records. A consumer
/// applying entries as they come then applied part of a batch (I2: all of it or none). The
/// replay now checks a user batch whole before returning its first entry.
#[test]
fn a_replay_never_returns_part_of_a_damaged_user_batch() {
    let st = MemStorage::new();
    let opts = Options { segment_len_bytes: SEG, ..Options::default() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts.clone()).unwrap();
    log.append(Epoch(0), b"before").unwrap();
    let first =
        log.append_batch(Epoch(0), &[b"one of four", b"two of four", b"three of four", b"four"]).unwrap();
    log.append(Epoch(0), b"after").unwrap();
    log.sync().unwrap();
    log.rotate().unwrap();
    log.append(Epoch(0), b"in the next segment").unwrap();
    log.close().unwrap();
    // Flip a bit in the third entry's payload (sealed segment 1: the open does not walk it).
    let state = st.state();
    let mut files: Vec<_> =
        state.file_names().into_iter().map(|n| (n.clone(), state.file_bytes(&n).unwrap().to_vec())).collect();
    let seg = files.iter_mut().find(|f| f.0 == segment_file_name(1)).unwrap();
    let at = seg.1.windows(13).position(|w| w == b"three of four").unwrap();
    seg.1[at + 2] ^= 0x10;
    let (log, rep) = Wal::open_with(Arc::new(MemStorage::from_files(files)), opts).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok, "the open walked the sealed segment");
    let mut r = log.replay().unwrap();
    let mut read = Vec::new();
    let err = loop {
        match r.next() {
            Some(Ok(item)) => read.push(item.lsn.0),
            Some(Err(e)) => break e,
            None => panic!("the replay read past the damage: {read:?}"),
        }
    };
    assert_eq!(read, vec![first.0 - 1], "entries of the damaged batch were returned");
    match err {
        wal::Error::Damaged(d) => assert_eq!((d.verdict, d.segment), (CrcVerdict::Corrupt, 1), "{d}"),
        e => panic!("{e}"),
    }
}
