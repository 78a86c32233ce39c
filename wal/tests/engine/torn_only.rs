//! TORN_TAIL only for what a crash can produce (FORMAT.md section 8.1, issue 22).
//!
//! A torn tail is the one damage a writer (and `walcheck repair` without `--lossy`) cuts, so its
//! classification is a safety property. Each row of FORMAT.md's table of damages is checked here
//! from both sides: crash images of the simulated file system that produce it are never
//! CORRUPT (nor CORRUPT_TAIL: these are zero-model crashes), and deliberate damage of the same
//! shape that no crash can produce (checksums recomputed where the damage would break them, so
//! only the meaning is wrong) is never TORN_TAIL. Every damaged log here is unclosed: nothing
//! attests its last batch, so only the evidence of a torn write decides.

use wal_sim::workload::forge;

use forge::{forge_frame, forge_len, forge_segment_len};
use std::sync::Arc;
use wal::format::{footer_offset, record_len, segment_file_name, Kind, SegmentHeader, SECTOR};
use wal::scan::{read_start, Expect, Start, Step, Walker};
use wal::{CrcVerdict, Epoch, LogScan, Options, Wal};
use wal_sim::{MemStorage, SectorFate};

const SEG: u32 = 64 * 1024;

type Files = Vec<(String, Vec<u8>)>;

fn opts() -> Options {
    Options { segment_len_bytes: SEG, prepare_in_background: false, ..Options::default() }
}

fn files_of(st: &MemStorage) -> Files {
    let s = st.state();
    let mut v: Files =
        s.file_names().into_iter().map(|n| (n.clone(), s.file_bytes(&n).unwrap().to_vec())).collect();
    v.sort();
    v
}

/// Payload `i` of a batch: varied lengths, never holding 512 aligned zero bytes.
fn payload(batch: usize, i: usize) -> Vec<u8> {
    (0..(30 + 97 * i + 13 * batch)).map(|j| (j % 251) as u8 | 1).collect()
}

/// An unclosed log: `batches` batches of `per_batch` entries each, each synced (`sync`) or only
/// written, then `finish`, then the writer stops as a crash would stop it.
fn log_of(batches: usize, per_batch: usize, sync: bool, finish: impl FnOnce(&mut Wal)) -> Files {
    let st = MemStorage::new();
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts()).unwrap();
    for b in 0..batches {
        for i in 0..per_batch {
            log.append(Epoch(0), &payload(b, i)).unwrap();
        }
        if sync {
            log.sync().unwrap();
        } else {
            log.flush().unwrap();
        }
    }
    finish(&mut log);
    log.abandon();
    files_of(&st)
}

/// An unclosed log of one segment: `batches` synced batches of three entries each (each spans
/// two sectors or more).
fn unclosed(batches: usize) -> Files {
    log_of(batches, 3, true, |_| {})
}

fn seg_index(files: &Files, seq: u64) -> usize {
    files.iter().position(|f| f.0 == segment_file_name(seq)).unwrap()
}

fn log_id(files: &Files) -> [u8; 16] {
    let meta = &files.iter().find(|f| f.0 == wal::format::META_FILE_NAME).unwrap().1;
    meta[16..32].try_into().unwrap()
}

/// One walked record: its offset, kind and the end of its bytes (padding included).
#[derive(Clone, Copy, Debug)]
struct R {
    off: usize,
    kind: Kind,
    end: usize,
}

/// The records of a clean segment, in order.
fn records(bytes: &[u8], seq: u64, log_id: [u8; 16]) -> Vec<R> {
    let expect = Expect { segment_seq: seq, log_id, first_record_seq: None, prev_crc: None };
    let Start::Segment(h) = read_start(bytes, &expect) else { panic!("segment {seq} is not clean") };
    let mut w = Walker::new(h, None);
    let mut out = Vec::new();
    loop {
        match w.next(bytes) {
            Step::Record(r) => out.push(R {
                off: r.offset as usize,
                kind: r.kind,
                end: r.offset as usize + record_len(r.payload.len()),
            }),
            Step::End => return out,
            Step::Damage(d) => panic!("segment {seq} has damage {d:?}"),
        }
    }
}

fn scan(files: &Files, full: bool) -> LogScan {
    wal::scan_log(&MemStorage::from_files(files.clone()), full).unwrap()
}

/// Deliberate damage no crash can produce: never TORN_TAIL, never OK, by a full scan (the
/// verifier's) and a fast one (a writer's open), and a writer's open refuses it.
fn never_torn(files: &Files, what: &str) -> CrcVerdict {
    let full = scan(files, true);
    let fast = scan(files, false);
    for (depth, s) in [("full", &full), ("fast", &fast)] {
        assert!(
            !matches!(s.verdict, CrcVerdict::TornTail | CrcVerdict::Ok),
            "{what}: a {depth} scan says {}: {:?}",
            s.verdict.as_str(),
            s.damage
        );
    }
    let r = Wal::open_with(Arc::new(MemStorage::from_files(files.clone())), opts());
    assert!(r.is_err(), "{what}: a writer opened it (and would have cut it)");
    full.verdict
}

/// The last batch's records: its frame first.
fn last_batch(rs: &[R]) -> &[R] {
    let f = rs.iter().rposition(|r| r.kind == Kind::Frame).unwrap();
    &rs[f..]
}

// ----- deliberate damage: never TORN_TAIL -----

#[test]
fn a_last_segment_shorter_than_its_header_says_is_corrupt() {
    let base = unclosed(6);
    let i = seg_index(&base, 1);
    let rs = records(&base[i].1, 1, log_id(&base));
    let data_end = rs.last().unwrap().end;
    let mut cuts =
        vec![SEG as usize - 1, SEG as usize - SECTOR, footer_offset(SEG), data_end.next_multiple_of(SECTOR)];
    // Inside the last batch, at sector boundaries and between them; inside the first batch.
    let last = last_batch(&rs);
    cuts.extend([last[0].off + 100, last[1].end, (last[0].off + SECTOR).min(data_end - 1), 200, 600]);
    for cut in cuts {
        let mut v = base.clone();
        v[i].1.truncate(cut);
        let verdict = never_torn(&v, &format!("segment 1 truncated to {cut} bytes"));
        assert_eq!(verdict, CrcVerdict::Corrupt, "segment 1 truncated to {cut} bytes");
    }
}

#[test]
fn a_header_length_that_differs_from_the_file_is_corrupt() {
    let base = unclosed(4);
    let i = seg_index(&base, 1);
    for len in [2 * SEG, SEG + SECTOR as u32] {
        let mut v = base.clone();
        forge_segment_len(&mut v[i].1, len);
        assert!(SegmentHeader::self_valid(&v[i].1).is_some(), "the forged header checks out");
        let verdict = never_torn(&v, &format!("header length {len}, file {SEG}"));
        assert_eq!(verdict, CrcVerdict::Corrupt, "header length {len}");
    }
    // The other way round: the file grew past its header's length.
    let mut v = base.clone();
    v[i].1.resize(2 * SEG as usize, 0);
    assert_eq!(never_torn(&v, "file longer than its header's length"), CrcVerdict::Corrupt);
}

#[test]
fn a_record_length_forged_past_its_batch_is_not_torn() {
    let base = unclosed(6);
    let i = seg_index(&base, 1);
    let rs = records(&base[i].1, 1, log_id(&base));
    let last = last_batch(&rs);
    let batch_end = last.last().unwrap().end;
    // The first entry of the last batch claims more than its batch holds: into the zero rest,
    // past the footer slot's start, past the file (under the format's maximum), and by 8 bytes.
    let r = last[1];
    for claim in [
        batch_end - r.off - 48 + 1024,
        footer_offset(SEG) - r.off,
        SEG as usize,
        1 << 20,
        r.end - r.off - 48 + 8 + (batch_end - r.end),
    ] {
        for with_crc in [false, true] {
            let mut v = base.clone();
            forge_len(&mut v[i].1, r.off, claim as u32, with_crc);
            never_torn(
                &v,
                &format!("payload_len {claim} at {} (record checksum recomputed: {with_crc})", r.off),
            );
        }
    }
    // The same in a batch that is not the last: the file goes on with later (unattested) data.
    let prev = {
        let f = rs[..rs.len() - last.len()].iter().rposition(|r| r.kind == Kind::Frame).unwrap();
        &rs[f..rs.len() - last.len()]
    };
    let r = prev[1];
    let mut v = base.clone();
    forge_len(&mut v[i].1, r.off, (batch_end - r.off - 48 + 2048) as u32, false);
    never_torn(&v, "payload_len past its batch, later batches after it");
}

#[test]
fn a_frame_forged_to_declare_more_records_is_not_torn() {
    let base = unclosed(6);
    let i = seg_index(&base, 1);
    let rs = records(&base[i].1, 1, log_id(&base));
    let last = last_batch(&rs);
    let f = last[0];
    assert_ne!(last.last().unwrap().end % SECTOR, 0, "the batch must end inside a sector");
    for (more_records, more_bytes) in [(1u32, 1024u64), (1, 4096), (3, 8192)] {
        let mut v = base.clone();
        let rest: Vec<usize> = last[1..].iter().map(|r| r.off).collect();
        forge_frame(&mut v[i].1, f.off, more_records, more_bytes, &rest);
        never_torn(&v, &format!("frame forged with {more_records} more records, {more_bytes} more bytes"));
    }
}

#[test]
fn bytes_after_the_data_that_no_batch_wrote_are_not_torn() {
    let base = unclosed(4);
    let i = seg_index(&base, 1);
    let rs = records(&base[i].1, 1, log_id(&base));
    let data_end = rs.last().unwrap().end;
    let next = data_end.next_multiple_of(SECTOR);
    // A byte where the next batch's frame would be (not at its start), and one far after it:
    // sectors of zeros between them are no evidence, the next batch's first sector is not zero.
    let mut v = base.clone();
    v[i].1[next + 100] = 0x5a;
    v[i].1[next + 8 * SECTOR] = 0x5a;
    never_torn(&v, "bytes after the data, the next batch's first sector not zero");
    // Non-zero padding between the last batch's end and its sector's end, and a byte far after.
    let mut v = base.clone();
    v[i].1[data_end + 8] = 0x5a;
    v[i].1[next + 8 * SECTOR] = 0x5a;
    never_torn(&v, "non-zero padding after the last batch");
}

#[test]
fn a_damaged_record_in_the_last_batch_is_not_torn_by_zeros_elsewhere() {
    // The last batch holds 1 KiB of zeros in a payload: a crash's zero sector would look the
    // same, but the damage (a flipped header bit in the batch before it) is not in those
    // sectors, so the zeros are no evidence for it.
    let base = log_of(3, 3, false, |log| {
        let mut zeros = vec![0u8; 1500];
        zeros.extend([7u8; 40]);
        log.append(Epoch(0), &zeros).unwrap();
        log.sync().unwrap();
    });
    let i = seg_index(&base, 1);
    let rs = records(&base[i].1, 1, log_id(&base));
    // The second entry of the third batch (none of the later frames attest it: one sync).
    let frames: Vec<usize> =
        rs.iter().enumerate().filter(|(_, r)| r.kind == Kind::Frame).map(|(k, _)| k).collect();
    let r = rs[frames[2] + 2];
    let mut v = base.clone();
    v[i].1[r.off + 20] ^= 0x10;
    never_torn(&v, "a flipped header bit, zeros in a later payload");
}

#[test]
fn junk_after_a_footer_in_a_sealed_last_segment_is_not_torn() {
    let base = log_of(3, 1, true, |log| log.rotate().unwrap());
    let i = seg_index(&base, 1);
    let at = footer_offset(SEG);
    let mut v = base.clone();
    v[i].1[at + 3 * SECTOR + 8] = 0x5a;
    never_torn(&v, "a byte in the footer slot after the footer");
}

#[test]
fn a_forged_batch_that_a_later_footer_covers_is_corrupt() {
    // The footer (rotation, no clean close) says every record of the segment was synced: damage
    // in its last batch, even after that batch's records (a frame forged to declare more of
    // them), is no torn write, and a cut from the batch's start would remove synced entries.
    let base = log_of(3, 3, true, |log| log.rotate().unwrap());
    let i = seg_index(&base, 1);
    let rs = records(&base[i].1, 1, log_id(&base));
    let rs: Vec<R> = rs.into_iter().filter(|r| r.kind != Kind::Footer).collect();
    let last = last_batch(&rs);
    let rest: Vec<usize> = last[1..].iter().map(|r| r.off).collect();
    let mut v = base.clone();
    forge_frame(&mut v[i].1, last[0].off, 1, 4096, &rest);
    // The forged frame's checksum changed: the footer's chain breaks too, so re-link it.
    let footer = footer_offset(SEG);
    forge::rechain(&mut v[i].1, &[last.last().unwrap().off, footer]);
    assert_eq!(never_torn(&v, "a forged last batch under a footer"), CrcVerdict::Corrupt);
}

#[test]
fn a_dropped_batch_that_the_next_frame_attests_is_corrupt() {
    // One-sector batches, each synced: every frame attests the batch before it. The
    // next-to-last batch zeroed is followed at once by the last frame, the only one that says
    // it was synced.
    let mut v = log_of(5, 1, true, |_| {});
    let i = seg_index(&v, 1);
    let rs = records(&v[i].1, 1, log_id(&v));
    let frames: Vec<usize> = rs.iter().filter(|r| r.kind == Kind::Frame).map(|r| r.off).collect();
    assert_eq!((frames.len(), frames[4] - frames[3]), (5, SECTOR), "five one-sector batches");
    v[i].1[frames[3]..frames[4]].fill(0);
    assert_eq!(never_torn(&v, "a zeroed batch the next frame attests"), CrcVerdict::Corrupt);
}

// ----- crash images: never CORRUPT -----

/// Every combination of kept and dropped sectors of the unsynced batches written after
/// `synced` synced ones (`unsynced` of them, flushed behind each other as a pipelined writer
/// does) recovers: OK or TORN_TAIL, a writer opens it and keeps every synced entry.
fn every_crash_of(synced: usize, unsynced: usize, rotate_first: bool) {
    let st = MemStorage::new();
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts()).unwrap();
    let mut acked = Vec::new();
    for b in 0..synced {
        for i in 0..3 {
            let p = payload(b, i);
            acked.push((log.append(Epoch(0), &p).unwrap().0, p));
        }
        log.sync().unwrap();
    }
    if rotate_first {
        log.rotate().unwrap();
    }
    let points = Arc::new(std::sync::Mutex::new(Vec::new()));
    for b in 0..unsynced {
        for i in 0..3 {
            log.append(Epoch(0), &payload(synced + b, i)).unwrap();
        }
        log.flush().unwrap();
    }
    {
        let p2 = points.clone();
        st.set_sync_observer(move |cp| p2.lock().unwrap().push(cp));
    }
    log.sync().unwrap();
    st.set_sync_observer(|_| {});
    log.abandon();
    let cp = points.lock().unwrap()[0].clone();
    let dirty = cp.state.effective_dirty_sectors();
    assert!(!dirty.is_empty() && dirty.len() <= 12, "{} unsynced sectors", dirty.len());
    let mut torn = 0;
    for mask in 0..1u64 << dirty.len() {
        let img = cp.state.crash(|n, s| match dirty.iter().position(|&d| d == (n, s)) {
            Some(k) if mask >> k & 1 == 1 => SectorFate::New,
            _ => SectorFate::Old,
        });
        let what = format!("mask {mask:#x} of {} unsynced sectors", dirty.len());
        for full in [true, false] {
            let s = wal::scan_log(&img, full).unwrap();
            assert!(matches!(s.verdict, CrcVerdict::Ok | CrcVerdict::TornTail), "{what}: {:?}", s.damage);
            torn += usize::from(full && s.verdict == CrcVerdict::TornTail);
        }
        let (log, _) = Wal::open_with(Arc::new(img), opts()).unwrap_or_else(|e| panic!("{what}: {e}"));
        let got = log.replay().unwrap().collect_entries().unwrap();
        assert!(got.len() >= acked.len() && got[..acked.len()] == acked[..], "{what}: lost a synced entry");
    }
    assert!(torn > 0, "no combination was torn");
}

#[test]
fn every_crash_of_a_last_batch_is_ok_or_torn() {
    every_crash_of(3, 1, false);
}

#[test]
fn every_crash_of_pipelined_batches_is_ok_or_torn() {
    every_crash_of(2, 2, false);
}

#[test]
fn every_crash_of_a_segments_first_batch_is_ok_or_torn() {
    // The header sector holds the header and the start of the first batch: dropped together.
    every_crash_of(2, 1, true);
}
