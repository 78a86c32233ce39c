//! `Reader::written_end` on real files, and the open that uses it: the zeros past a reserved
//! segment's data (and a reserved spare) are taken from the file system's word instead of read,
//! while a byte written anywhere in them is still found.

use std::os::unix::fs::FileExt;
use wal::storage::prepare::prepare_file;
use wal::storage::{FileStorage, Reader, Writer};
use wal::{CrcVerdict, Epoch, Options, SegmentFill, Wal};

/// Larger than this machine's read-ahead (8 MiB for its disk), which maps in zero pages past
/// the data the walk reads.
const SEG: u32 = 32 << 20;
const PAGE: usize = 4096;

/// Whether the file system of `dir` reports unwritten reserved blocks (ext4, xfs, tmpfs do):
/// where it does not, `written_end` is the length, which is always allowed.
fn reports_holes(st: &FileStorage) -> bool {
    prepare_file(st, "probe", 1 << 20, true).unwrap();
    let f = st.open("probe").unwrap();
    let end = st.written_end(f).unwrap();
    st.close(f);
    st.remove("probe").unwrap();
    end == 0
}

#[test]
fn written_end_covers_every_written_byte() {
    let dir = tempfile::tempdir().unwrap();
    let st = FileStorage::new(dir.path(), true).unwrap();
    let exact = reports_holes(&st);
    let len = 1u64 << 20;
    prepare_file(&st, "r", len, true).unwrap();
    let path = dir.path().join("r");
    let raw = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let f = st.open("r").unwrap();
    let end = |st: &FileStorage| st.written_end(f).unwrap();
    if exact {
        assert_eq!(end(&st), 0, "a reserved file holds no data");
    }
    raw.write_all_at(&[7; 8], 8192).unwrap();
    let e = end(&st);
    assert!(e >= 8200 && e <= len, "{e}: the bytes at 8192..8200 are past it");
    if exact {
        assert!(e < len / 2, "{e}: the rest of the file was never written");
    }
    // Written once more, far out: the end follows it.
    raw.write_all_at(&[9], 700_000).unwrap();
    let e = end(&st);
    assert!(e > 700_000, "{e}");
    raw.write_all_at(&[1], len - 1).unwrap();
    assert_eq!(end(&st), len);
    st.close(f);
    // Zeros written for real are data to every file system: nothing is skipped.
    prepare_file(&st, "z", len, false).unwrap();
    let f = st.open("z").unwrap();
    assert_eq!(st.written_end(f).unwrap(), len);
    st.close(f);
}

fn opts(create: bool) -> Options {
    Options { segment_len_bytes: SEG, segment_fill: SegmentFill::Reserved, create, ..Options::default() }
}

/// A log of two segments, abandoned (a crash: no footer): the first (a log's first segment
/// gets written zeros) full, the second (reserved) holding about 512 KiB. Returns the entries.
fn small_log(dir: &std::path::Path) -> u64 {
    let (mut log, _) = Wal::open(dir, opts(true)).unwrap();
    let n = (SEG as u64 >> 16) + 8;
    for i in 0..n {
        log.append(Epoch(0), &vec![i as u8; 64 << 10]).unwrap();
    }
    log.sync().unwrap();
    log.abandon();
    n
}

/// The segment files, oldest first: the one holding the data, then any spare prepared for the
/// next rotation.
fn segments(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut segs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segs.sort();
    assert!(!segs.is_empty(), "no segment file");
    segs
}

/// Pages of `path` in `range` (bytes) that are in the page cache.
fn resident_pages(path: &std::path::Path, range: std::ops::Range<usize>) -> usize {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a read-only map of a file nobody shrinks while the test looks at it.
    let m = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    let mut vec = vec![0u8; m.len().div_ceil(PAGE)];
    // SAFETY: `m` is a live mapping of `m.len()` bytes; `vec` has a byte per page of it.
    let r = unsafe { libc::mincore(m.as_ptr() as *mut libc::c_void, m.len(), vec.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    vec[range.start / PAGE..range.end / PAGE].iter().filter(|&&b| b & 1 != 0).count()
}

/// A file and the byte range of it that nothing should have read.
type Unread = (std::path::PathBuf, std::ops::Range<usize>);

/// The crashed two-segment log of [`small_log`] in a new directory, its entries, and the
/// page ranges of its segment files that nothing should read: the last data segment from 16 MiB
/// on (far past its data and the read-ahead after it) to the footer slot, and every page of each
/// spare. `None` where the file system does not report unwritten blocks (nothing to show).
fn reserved_log() -> Option<(tempfile::TempDir, u64, Vec<Unread>)> {
    let dir = tempfile::tempdir().unwrap();
    if !reports_holes(&FileStorage::new(dir.path(), true).unwrap()) {
        eprintln!("this file system does not report unwritten blocks: nothing to show");
        return None;
    }
    let n = small_log(dir.path());
    let segs = segments(dir.path());
    assert!(segs.len() >= 3, "a data segment and a spare after the first: {segs:?}");
    let ranges: Vec<_> = segs
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, p)| (p.clone(), if i == 1 { (16 << 20)..(SEG as usize - 8192) } else { 0..SEG as usize }))
        .collect();
    for (p, r) in &ranges {
        assert_eq!(resident_pages(p, r.clone()), 0, "nothing read {} yet", p.display());
    }
    Some((dir, n, ranges))
}

/// The open walks the data of the last segment and stops reading where the file system says
/// nothing was written: the reserved rest of the segment (megabytes the kernel would allocate
/// and clear page by page) never enters the page cache.
#[test]
fn an_open_does_not_read_the_reserved_rest_of_the_last_segment() {
    let Some((dir, n, ranges)) = reserved_log() else { return };
    let (log, report) = Wal::open(dir.path(), opts(false)).unwrap();
    assert_eq!(report.verdict, CrcVerdict::Ok, "{:?}", report.damage);
    assert_eq!(log.replay().unwrap().collect_entries().unwrap().len() as u64, n);
    for (p, r) in &ranges {
        assert_eq!(resident_pages(p, r.clone()), 0, "the open read the reserved zeros of {}", p.display());
    }
    log.close().unwrap();
}

/// One byte written deep in the reserved rest (a later batch a crash kept in part, or damage)
/// is data to the file system, and the open finds it as it always did: bytes past the data with
/// zero sectors before them are a torn later batch, cut.
#[test]
fn a_byte_written_in_the_reserved_rest_is_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let n = small_log(dir.path());
    let seg = segments(dir.path()).remove(1);
    let at = SEG as u64 / 2 + 1234;
    std::fs::OpenOptions::new().write(true).open(&seg).unwrap().write_all_at(&[0x5a], at).unwrap();
    let scan = wal::scan_log(&FileStorage::new(dir.path(), false).unwrap(), false).unwrap();
    let d = scan.damage.expect("damage past the data");
    assert_eq!((d.segment, d.offset), (2, at & !7), "{d}");
    assert_eq!(scan.verdict, CrcVerdict::TornTail, "{d}");
    let (log, report) = Wal::open(dir.path(), opts(false)).unwrap();
    assert_eq!(report.verdict, CrcVerdict::TornTail);
    assert_eq!(log.replay().unwrap().collect_entries().unwrap().len() as u64, n);
    drop(log);
    let mut b = [1u8];
    std::fs::File::open(&seg).unwrap().read_exact_at(&mut b, at).unwrap();
    assert_eq!(b, [0], "the cut zeroed the byte");
}

/// `FileStorage` that asks full scans to stream segments through windows of 1 MiB read with
/// `pread`, as the verifier's storage does.
#[derive(Debug)]
struct Windowed {
    inner: FileStorage,
}

impl Reader for Windowed {
    wal::forward_storage!(inner: list, open, close, len, read_at, map, written_end, lock_shared);

    fn scan_window(&self) -> Option<usize> {
        Some(1 << 20)
    }
}

/// A full scan that reads through windows (the verifier's way) skips the same zeros.
#[test]
fn a_windowed_full_scan_does_not_read_the_reserved_rest_either() {
    let Some((dir, n, ranges)) = reserved_log() else { return };
    let scan =
        wal::scan_log(&Windowed { inner: FileStorage::new(dir.path(), false).unwrap() }, true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok, "{:?}", scan.damage);
    assert!(scan.records_walked >= n, "{} records for {n} entries", scan.records_walked);
    for (p, r) in &ranges {
        assert_eq!(resident_pages(p, r.clone()), 0, "the scan read the reserved zeros of {}", p.display());
    }
}
