//! `Options::cached_log_bytes` on real files: each seal tells the OS to drop the cached pages of
//! the sealed segments it pushed beyond the budget, newest sealed segments within it and the
//! active one stay cached, and the log reads back whole either way. `mincore` over a fresh
//! read-only mapping counts what is cached (a mapping faults nothing in by being made).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use wal::{Epoch, Options, Wal};

const SEG: u32 = 1 << 20;
const ENTRY: usize = 16 << 10;

/// (pages of `path` in the page cache, pages of `path`).
fn cached_pages(path: &Path) -> (usize, usize) {
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let page = 4096;
    let pages = len.div_ceil(page);
    if len == 0 {
        return (0, 0);
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: a read-only shared mapping of `len` bytes of an open file, unmapped before
    // return; `vec` has one byte per page of it, as mincore writes.
    unsafe {
        let addr = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0);
        assert_ne!(addr, libc::MAP_FAILED, "mmap {}", path.display());
        let r = libc::mincore(addr, len, vec.as_mut_ptr());
        libc::munmap(addr, len);
        assert_eq!(r, 0, "mincore {}", path.display());
    }
    (vec.iter().filter(|&&b| b & 1 == 1).count(), pages)
}

/// A directory on the build's disk (not a tmpfs, whose pages no advice drops), after checking
/// that its file system drops a synced file's pages when told to: without that, nothing here
/// could be told apart.
fn dir() -> tempfile::TempDir {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let probe = d.path().join("probe");
    let f = File::create(&probe).unwrap();
    f.write_all_at(&vec![1u8; 256 << 10], 0).unwrap();
    f.sync_data().unwrap();
    assert!(
        cached_pages(&probe).0 > 0,
        "a file just written is not cached: mincore cannot see the cache here"
    );
    // SAFETY: plain syscall on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
    assert_eq!(
        cached_pages(&probe).0,
        0,
        "the file system under CARGO_TARGET_TMPDIR keeps a synced file's pages after DONTNEED; these tests need one that drops them (ext4, xfs, btrfs)"
    );
    std::fs::remove_file(&probe).unwrap();
    d
}

/// Writes 6.5 segments of durable entries with `cached_log_bytes = budget`; returns the
/// directory, the entries, and (cached, total) pages of each segment file holding records, in
/// order (the last is the active one).
fn log_with(budget: u64) -> (tempfile::TempDir, Vec<Vec<u8>>, Vec<(usize, usize)>) {
    let d = dir();
    let opts = Options { segment_len_bytes: SEG, cached_log_bytes: budget, ..Options::default() };
    let (mut log, _) = Wal::open(d.path(), opts).unwrap();
    let n = (SEG as usize * 13 / 2) / ENTRY;
    let mut want = Vec::new();
    for i in 0..n {
        let p: Vec<u8> = (0..ENTRY).map(|j| (i * 7 + j) as u8).collect();
        log.append(Epoch(0), &p).unwrap();
        want.push(p);
        if i % 8 == 7 {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
    let mut names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    // Segments prepared ahead hold no records: the ones before the first whose records end
    // here are what was written (7: six sealed and the active one).
    names.truncate(7);
    let pages = names.iter().map(|n| cached_pages(&d.path().join(n))).collect();
    drop(log);
    (d, want, pages)
}

fn check_reads_back(d: &Path, want: &[Vec<u8>]) {
    let (log, _) = Wal::open(d, Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    let got = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(want).all(|((_, g), w)| g == w), "an entry read back differs");
}

#[test]
fn seals_drop_the_segments_beyond_the_budget_and_keep_the_newest() {
    let (d, want, pages) = log_with(2 * u64::from(SEG));
    assert_eq!(pages.len(), 7, "{pages:?}");
    for (i, &(cached, total)) in pages.iter().enumerate() {
        if i < 4 {
            assert_eq!(cached, 0, "segment {i} of {pages:?} is beyond the budget but still cached");
        } else {
            assert!(cached * 2 > total, "segment {i} of {pages:?} is within the budget but was dropped");
        }
    }
    check_reads_back(d.path(), &want);
}

#[test]
fn a_budget_of_zero_drops_every_sealed_segment_and_never_the_active_one() {
    let (d, want, pages) = log_with(0);
    for (i, &(cached, _)) in pages.iter().take(6).enumerate() {
        assert_eq!(cached, 0, "sealed segment {i} of {pages:?} still cached");
    }
    assert!(pages[6].0 > 0, "the active segment was dropped: {pages:?}");
    check_reads_back(d.path(), &want);
}

#[test]
fn the_largest_budget_leaves_every_segment_cached() {
    let (d, want, pages) = log_with(u64::MAX);
    for (i, &(cached, total)) in pages.iter().enumerate() {
        assert!(cached * 2 > total, "segment {i} of {pages:?} was dropped with no budget");
    }
    check_reads_back(d.path(), &want);
}
