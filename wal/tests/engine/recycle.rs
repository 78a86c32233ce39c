//! Recycling purged segment files (`wal/src/log/recycle.rs`): a purge sets files aside, the next
//! segment is made of one, which keeps its old contents beside a stale table (FORMAT.md section
//! 2.2); a file a replay maps is never overwritten; the pool survives a reopen within its limit;
//! every entry reads back as written throughout; damage to what a recycled segment keeps is
//! found and a crash's old sectors are not.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use wal::format::SegmentHeader;
use wal::format::{parse_recycle_file_name, parse_segment_file_name, recycle_file_name, segment_file_name};
use wal::stale::{Owner, StaleTable};
use wal::{CrcVerdict, Epoch, Lsn, Options, SegmentFill, Wal};
use zerocopy::FromBytes;

const SEG: u32 = 64 * 1024;

fn opts(recycle: usize) -> Options {
    Options { segment_len_bytes: SEG, recycle_segments: recycle, ..Options::default() }
}

fn payload(i: u64) -> Vec<u8> {
    (0..200).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// Appends entries `from..to`, syncing every 10.
fn fill(log: &mut Wal, from: u64, to: u64) {
    for i in from..to {
        assert_eq!(log.append(Epoch(0), &payload(i)).unwrap(), Lsn(i));
        if i % 10 == 0 {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
}

fn names(dir: &Path) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let (mut segs, mut pool) = (BTreeSet::new(), BTreeSet::new());
    for e in std::fs::read_dir(dir).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        segs.extend(parse_segment_file_name(&n));
        pool.extend(parse_recycle_file_name(&n));
    }
    (segs, pool)
}

fn ino(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).unwrap().ino()
}

/// Every entry the log holds, from its oldest segment on, checked against what was written:
/// they begin at or below `first` and end with `end - 1`.
fn check_replay(log: &Wal, first: u64, end: u64) {
    let got = log.replay().unwrap().collect_entries().unwrap();
    let start = got.first().map_or(end, |e| e.0);
    assert!(start <= first, "the replay starts at {start}, after {first}");
    let want: Vec<(u64, Vec<u8>)> = (start..end).map(|i| (i, payload(i))).collect();
    assert_eq!(got, want);
}

#[test]
fn a_purged_segment_becomes_a_later_segment_with_a_stale_table() {
    purged_segments_become_later_segments(SegmentFill::Zeros);
}

/// With reserved new segments too: a recycled file is never zeroed, reserved or written.
#[test]
fn a_purged_segment_becomes_a_later_segment_when_new_ones_are_reserved() {
    purged_segments_become_later_segments(SegmentFill::Reserved);
}

/// The header of segment file `seq` in `dir`, its bytes, and its stale table if it has one.
fn recycled(dir: &Path, seq: u64) -> (SegmentHeader, Vec<u8>, Option<std::sync::Arc<StaleTable>>) {
    let bytes = std::fs::read(dir.join(segment_file_name(seq))).unwrap();
    let h = SegmentHeader::read_from_bytes(&bytes[..64]).unwrap();
    let t = StaleTable::find(&bytes, h.segment_len.get(), Owner::of(&h));
    (h, bytes, t)
}

fn purged_segments_become_later_segments(how: SegmentFill) {
    let dir = tempfile::tempdir().unwrap();
    let opts = |n| Options { segment_fill: how, ..opts(n) };
    let (mut log, _) = Wal::open(dir.path(), opts(2)).unwrap();
    fill(&mut log, 1, 1500);
    assert!(log.segment_count() >= 5, "needs several segments, got {}", log.segment_count());
    let r = log.purge_before(Lsn(1200)).unwrap();
    assert!(r.segments_removed.len() >= 3, "{r:?}");
    let (_, pool) = names(dir.path());
    // The newest two purged files are set aside, the others removed.
    let newest: BTreeSet<u64> = r.segments_removed.iter().rev().take(2).copied().collect();
    assert_eq!(pool, newest);
    let inodes: BTreeSet<u64> = pool.iter().map(|&s| ino(dir.path(), &recycle_file_name(s))).collect();
    let first = 1200;
    // Enough for two more segments: both set-aside files become segments.
    let before: BTreeSet<u64> = names(dir.path()).0;
    fill(&mut log, 1500, 2400);
    let (segs, pool) = names(dir.path());
    assert!(pool.is_empty(), "every set-aside file was taken, left {pool:?}");
    let made: BTreeSet<u64> =
        segs.difference(&before).map(|&s| ino(dir.path(), &segment_file_name(s))).collect();
    assert!(inodes.is_subset(&made), "new segments {made:?} should include the recycled files {inodes:?}");
    // Each recycled file says so in its header, holds a stale table naming it, and kept old
    // contents (not zeros) past its data.
    let made_of_recycled: Vec<u64> = segs
        .difference(&before)
        .copied()
        .filter(|&s| inodes.contains(&ino(dir.path(), &segment_file_name(s))))
        .collect();
    assert_eq!(made_of_recycled.len(), 2);
    for &s in &made_of_recycled {
        let (h, bytes, t) = recycled(dir.path(), s);
        assert!(h.is_recycled(), "segment {s}");
        assert!(t.is_some(), "segment {s} has no stale table");
        let limit = wal::stale::table_offset(SEG);
        let old = (0..limit / 512).filter(|i| bytes[i * 512..i * 512 + 512].iter().any(|&b| b != 0)).count();
        assert!(old > 0, "segment {s}: nothing but data and zeros");
    }
    check_replay(&log, first, 2400);
    log.close().unwrap();
    let (log, rep) = Wal::open(dir.path(), opts(2)).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    check_replay(&log, first, 2400);
    // A full scan (what walcheck reads) finds nothing amiss.
    let scan = wal::scan_log(&**log.storage(), true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok);
}

#[test]
fn with_recycling_off_a_purge_removes_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(dir.path(), opts(0)).unwrap();
    fill(&mut log, 1, 1500);
    let r = log.purge_before(Lsn(1200)).unwrap();
    assert!(!r.segments_removed.is_empty());
    assert!(names(dir.path()).1.is_empty());
    fill(&mut log, 1500, 1800);
    check_replay(&log, 1200, 1800);
}

#[test]
fn a_segment_a_replay_maps_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(dir.path(), opts(1)).unwrap();
    fill(&mut log, 1, 1500);
    let segs: Vec<u64> = names(dir.path()).0.into_iter().collect();
    // A replay that has mapped the first segment and read into it.
    let mut replay = log.replay().unwrap();
    let mut n = 0u64;
    for i in 1..=5u64 {
        let it = replay.next().unwrap().unwrap();
        assert_eq!(it.lsn.0, i);
        n = i;
    }
    // Purge only the first segment: it is the one mapped, and the only one set aside.
    let below = first_lsn_of(&log, segs[1]);
    let r = log.purge_before(Lsn(below)).unwrap();
    assert_eq!(r.segments_removed, vec![segs[0]]);
    let mapped_ino = ino(dir.path(), &recycle_file_name(segs[0]));
    let before = names(dir.path()).0;
    fill(&mut log, 1500, 2000);
    let (now, pool) = names(dir.path());
    assert_eq!(pool, BTreeSet::from([segs[0]]), "the mapped file stays set aside");
    for s in now.difference(&before) {
        assert_ne!(ino(dir.path(), &segment_file_name(*s)), mapped_ino, "segment {s} reused a mapped file");
    }
    // The replay reads the rest of its segment as it was written.
    while let Some(it) = replay.next() {
        let it = it.unwrap();
        if it.lsn.0 >= below {
            break;
        }
        n += 1;
        assert_eq!((it.lsn.0, it.payload), (n, &payload(n)[..]));
    }
    assert_eq!(n, below - 1);
    drop(replay);
    // Unmapped now: the next segment is made of it.
    let before = names(dir.path()).0;
    fill(&mut log, 2000, 2600);
    let (now, pool) = names(dir.path());
    assert!(pool.is_empty());
    assert!(now.difference(&before).any(|s| ino(dir.path(), &segment_file_name(*s)) == mapped_ino));
    check_replay(&log, below, 2600);
}

/// The LSN of the first entry in segment `seq`.
fn first_lsn_of(log: &Wal, seq: u64) -> u64 {
    let scan = wal::scan_log(&**log.storage(), true).unwrap();
    let before: u64 =
        scan.segments.iter().take_while(|s| s.seq < seq).map(|s| u64::from(s.counts.entries)).sum();
    before + 1
}

#[test]
fn a_reopen_keeps_the_pool_within_its_limit_and_drops_misfits() {
    let dir = tempfile::tempdir().unwrap();
    // No spare prepared in the background: it would take a file of the pool at the open.
    let opts = |n| Options { prepare_in_background: false, ..opts(n) };
    let (mut log, _) = Wal::open(dir.path(), opts(3)).unwrap();
    fill(&mut log, 1, 1500);
    log.purge_before(Lsn(1200)).unwrap();
    let pool = names(dir.path()).1;
    assert_eq!(pool.len(), 3, "{pool:?}");
    log.close().unwrap();
    // A file of the wrong length (an older segment size) is not reused.
    let odd = 7_777u64;
    std::fs::write(dir.path().join(recycle_file_name(odd)), vec![1u8; 4096]).unwrap();
    let (mut log, _) = Wal::open(dir.path(), opts(2)).unwrap();
    let kept = names(dir.path()).1;
    let newest: BTreeSet<u64> = pool.iter().rev().take(2).copied().collect();
    assert_eq!(kept, newest, "the newest two of the right length stay");
    let first = 1200;
    fill(&mut log, 1500, 2400);
    assert!(names(dir.path()).1.is_empty());
    check_replay(&log, first, 2400);
    // A reader never touches the pool.
    log.close().unwrap();
    std::fs::write(dir.path().join(recycle_file_name(odd)), vec![1u8; 4096]).unwrap();
    let ro = Options { read_only: true, ..opts(2) };
    let (log, rep) = Wal::open(dir.path(), ro).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    check_replay(&log, first, 2400);
    assert_eq!(names(dir.path()).1, BTreeSet::from([odd]));
}

/// A log whose last segment (cleanly closed) is made of a recycled file with old contents past
/// its data, followed by a spare made of a recycled file too: the directory, that segment's
/// number, and where its data and table start.
///
/// Which files the background preparer makes of recycled ones depends on when it runs (a spare
/// it began before the purge is a new file; on a loaded machine one can appear after the names
/// below were taken), so the log is built again, a bounded number of times, until it has that
/// shape; every use then asserts on the shape it got.
fn log_ending_in_a_recycled_segment() -> (tempfile::TempDir, u64, usize, usize) {
    let mut last_try = String::new();
    for _ in 0..10 {
        match try_log_ending_in_a_recycled_segment() {
            Ok(built) => return built,
            Err(why) => last_try = why,
        }
    }
    panic!("no log ending in a recycled segment and a recycled spare in 10 tries: {last_try}");
}

fn try_log_ending_in_a_recycled_segment() -> Result<(tempfile::TempDir, u64, usize, usize), String> {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(dir.path(), opts(2)).unwrap();
    fill(&mut log, 1, 1500);
    log.purge_before(Lsn(1200)).unwrap();
    let before = names(dir.path()).0;
    // A little more than a segment: the last one is recycled and mostly old contents.
    let mut end = 1500;
    while names(dir.path()).0.difference(&before).count() < 2 {
        fill(&mut log, end, end + 50);
        end += 50;
    }
    fill(&mut log, end, end + 20);
    log.close().unwrap();
    let scan = full_scan(dir.path());
    assert_eq!(scan.verdict, CrcVerdict::Ok);
    let last = scan.segments.last().unwrap().seq;
    let (h, bytes, t) = recycled(dir.path(), last);
    if !(h.is_recycled() && t.is_some()) {
        return Err("the last segment is not recycled".into());
    }
    if scan.recycled_spares.is_empty() {
        return Err(format!("no recycled spare: {:?}", scan.spares));
    }
    // Where the data ends: the first sector past the footer's data end.
    let data_end = scan.segments.last().unwrap().data_end as usize;
    let rest = data_end.next_multiple_of(512);
    let table = wal::stale::table_offset(SEG);
    assert!(bytes[rest..table].chunks(512).any(|c| c.iter().any(|&b| b != 0)), "no old contents left");
    Ok((dir, last, rest, table))
}

/// A full scan of `dir`, whole and through windows of a few sectors (as the verifier's storage
/// streams segments, and classifies damage by reading only what it needs): the two must agree
/// on everything.
fn full_scan(dir: &Path) -> wal::LogScan {
    let whole = wal::scan_log(&wal::storage::FileStorage::new(dir, false).unwrap(), true).unwrap();
    let windowed = Windowed { inner: wal::storage::FileStorage::new(dir, false).unwrap(), maps: 0.into() };
    let scan = wal::scan_log(&windowed, true).unwrap();
    assert_eq!(format!("{scan:?}"), format!("{whole:?}"), "the windowed scan differs");
    whole
}

/// How many segment files a windowed full scan of `dir` reads whole.
fn whole_reads(dir: &Path) -> usize {
    let windowed = Windowed { inner: wal::storage::FileStorage::new(dir, false).unwrap(), maps: 0.into() };
    wal::scan_log(&windowed, true).unwrap();
    windowed.maps.load(std::sync::atomic::Ordering::Relaxed)
}

/// A file storage that asks a full scan to stream segments through windows of 4 KiB, and
/// counts whole-file reads (maps).
#[derive(Debug)]
struct Windowed {
    inner: wal::storage::FileStorage,
    maps: std::sync::atomic::AtomicUsize,
}

impl wal::storage::Writer for Windowed {
    wal::forward_storage!(inner: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill);
}

impl wal::storage::Completions for Windowed {
    wal::forward_storage!(inner: submit, reap);
}

impl wal::storage::Reader for Windowed {
    wal::forward_storage!(inner: list, open, close, len, read_at, written_end, not_regular, lock_shared);
    fn map(&self, file: wal::storage::FileId) -> std::io::Result<wal::storage::Mapping> {
        self.maps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.map(file)
    }
    fn scan_window(&self) -> Option<usize> {
        Some(4096)
    }
}

/// Every sector of a recycled last segment (its header, data, old contents, stale table and
/// footer slot) with a bit flipped, and zeroed: the windowed scan judges it as the whole scan.
#[test]
fn damage_anywhere_in_a_recycled_segment_is_judged_alike_through_windows() {
    let (dir, last, _, _) = log_ending_in_a_recycled_segment();
    let orig = std::fs::read(dir.path().join(segment_file_name(last))).unwrap();
    let mut seen = BTreeSet::new();
    for s in 0..orig.len() / 512 {
        let mut flipped = orig[s * 512..s * 512 + 512].to_vec();
        flipped[(s * 37) % 512] ^= 1 << (s % 8);
        for bytes in [flipped, vec![0; 512]] {
            patch(dir.path(), last, s * 512, &bytes);
            seen.insert(format!("{:?}", full_scan(dir.path()).verdict));
            patch(dir.path(), last, 0, &orig);
        }
    }
    assert!(seen.len() >= 2, "{seen:?}");
}

fn patch(dir: &Path, seq: u64, at: usize, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(dir.join(segment_file_name(seq))).unwrap();
    f.write_all_at(bytes, at as u64).unwrap();
}

/// Old contents past the data are blank; a sector there that is neither zero nor old, or a
/// damaged stale table, is damage (attested: a clean close sealed the segment).
#[test]
fn damage_among_a_recycled_segments_old_contents_is_found() {
    let (dir, last, rest, table) = log_ending_in_a_recycled_segment();
    let orig = std::fs::read(dir.path().join(segment_file_name(last))).unwrap();
    let restore = || patch(dir.path(), last, 0, &orig);
    let old =
        (rest / 512..table / 512).find(|i| orig[i * 512..i * 512 + 512].iter().any(|&b| b != 0)).unwrap();
    // Zeroing an old sector changes nothing a reader needs: zero is blank too.
    patch(dir.path(), last, old * 512, &[0; 512]);
    assert_eq!(full_scan(dir.path()).verdict, CrcVerdict::Ok);
    restore();
    // One bit of an old sector: neither zero nor old contents.
    let mut s = orig[old * 512..old * 512 + 512].to_vec();
    s[100] ^= 4;
    patch(dir.path(), last, old * 512, &s);
    let scan = full_scan(dir.path());
    assert_eq!(scan.verdict, CrcVerdict::Corrupt, "{:?}", scan.damage);
    let d = scan.damage.unwrap();
    assert_eq!((d.segment, d.offset as usize / 512), (last, old), "{d:?}");
    restore();
    // One bit of the table.
    let mut t = orig[table..table + 512].to_vec();
    t[50] ^= 1;
    patch(dir.path(), last, table, &t);
    assert_eq!(full_scan(dir.path()).verdict, CrcVerdict::Corrupt);
    restore();
    assert_eq!(full_scan(dir.path()).verdict, CrcVerdict::Ok);
    // And the writer's open agrees once the clean close is forgotten (a crash): the segment is
    // walked, its old contents are blank, nothing is cut.
    std::fs::remove_file(dir.path().join("wal.close")).ok();
    let (log, rep) = Wal::open(dir.path(), opts(2)).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    assert!(rep.cut.is_none());
    drop(log);
}

/// A segment header whose checksum holds but whose flags this build does not know was written
/// by a newer version: UNSUPPORTED_VERSION, never CORRUPT. The RECYCLED flag on a segment that
/// holds no stale table is CORRUPT.
#[test]
fn unknown_segment_flags_are_a_newer_writers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(dir.path(), opts(0)).unwrap();
    fill(&mut log, 1, 400);
    log.close().unwrap();
    let with_flags = |flags: u8| {
        let p = dir.path().join(segment_file_name(1));
        let mut b = std::fs::read(&p).unwrap();
        b[52] = flags;
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
        full_scan(dir.path())
    };
    let scan = with_flags(0b10);
    assert_eq!(scan.verdict, CrcVerdict::UnsupportedVersion, "{:?}", scan.damage);
    let d = scan.damage.unwrap();
    assert_eq!((d.kind, d.segment), (wal::DamageKind::UnsupportedSegmentFlags(0b10), 1));
    let scan = with_flags(wal::format::SEGMENT_FLAG_RECYCLED);
    assert_eq!(scan.verdict, CrcVerdict::Corrupt, "{:?}", scan.damage);
    assert_eq!(with_flags(0).verdict, CrcVerdict::Ok);
}

/// A spare made of a recycled file (a zero header, old contents, a stale table) and a segment
/// whose header was zeroed are judged through windows, as the whole scan judges them, without
/// reading either file whole: the verifier's memory stays a window for them too.
#[test]
fn recycled_spares_and_zeroed_headers_are_judged_without_a_whole_read() {
    let (dir, last, _, _) = log_ending_in_a_recycled_segment();
    let scan = full_scan(dir.path());
    assert!(!scan.recycled_spares.is_empty(), "no recycled spare: {:?}", scan.spares);
    assert_eq!(whole_reads(dir.path()), 0, "a segment was read whole");
    patch(dir.path(), last, 0, &[0; 512]);
    let scan = full_scan(dir.path());
    let d = scan.damage.unwrap();
    assert_eq!((d.verdict, d.segment, d.offset), (CrcVerdict::Corrupt, last, 0), "{d}");
    assert_eq!(whole_reads(dir.path()), 0, "a segment was read whole");
}
