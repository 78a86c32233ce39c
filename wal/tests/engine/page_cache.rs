//! `Options::cached_log_bytes` on real files: each seal tells the OS to drop the cached pages of
//! the sealed segments it pushed beyond the budget, newest sealed segments within it and the
//! active one stay cached, and the log reads back whole either way. `mincore` over a fresh
//! read-only mapping counts what is cached (a mapping faults nothing in by being made).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use wal::storage::{Completions, FileId, FileStorage, Reader, Writer};
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
/// directory, the entries, the open log and the names of the segment files holding records,
/// in order (the last is the active one).
fn log_with(budget: u64) -> (tempfile::TempDir, Vec<Vec<u8>>, Wal, Vec<String>) {
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
    assert_eq!(names.len(), 7, "{names:?}");
    (d, want, log, names)
}

/// (cached, total) pages of each named file.
fn pages(d: &Path, names: &[String]) -> Vec<(usize, usize)> {
    names.iter().map(|n| cached_pages(&d.join(n))).collect()
}

/// The pages of `names` once the first `dropped` of them are out of the page cache: the log
/// drops them on a helper thread, so the test waits for it (at most 20 s, then fails).
fn pages_once_dropped(d: &Path, names: &[String], dropped: usize) -> Vec<(usize, usize)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let p = pages(d, names);
        if p.iter().take(dropped).all(|&(cached, _)| cached == 0) {
            return p;
        }
        assert!(Instant::now() < deadline, "the first {dropped} segments are still cached after 20 s: {p:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn check_reads_back(d: &Path, want: &[Vec<u8>]) {
    let (log, _) = Wal::open(d, Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    let got = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(want).all(|((_, g), w)| g == w), "an entry read back differs");
}

#[test]
fn seals_drop_the_segments_beyond_the_budget_and_keep_the_newest() {
    let (d, want, log, names) = log_with(2 * u64::from(SEG));
    let pages = pages_once_dropped(d.path(), &names, 4);
    for (i, &(cached, total)) in pages.iter().enumerate().skip(4) {
        assert!(cached * 2 > total, "segment {i} of {pages:?} is within the budget but was dropped");
    }
    drop(log);
    check_reads_back(d.path(), &want);
}

#[test]
fn a_budget_of_zero_drops_every_sealed_segment_and_never_the_active_one() {
    let (d, want, log, names) = log_with(0);
    let pages = pages_once_dropped(d.path(), &names, 6);
    assert!(pages[6].0 > 0, "the active segment was dropped: {pages:?}");
    drop(log);
    check_reads_back(d.path(), &want);
}

#[test]
fn the_largest_budget_leaves_every_segment_cached() {
    let (d, want, log, names) = log_with(u64::MAX);
    // Were anything dropped, on whatever thread, it would be by the time the log is closed
    // (a close joins the helper threads); the close's own seal drops nothing either.
    drop(log);
    let pages = pages(d.path(), &names);
    for (i, &(cached, total)) in pages.iter().enumerate() {
        assert!(cached * 2 > total, "segment {i} of {pages:?} was dropped with no budget");
    }
    check_reads_back(d.path(), &want);
}

/// Files whose `drop_cached` waits at a gate (at most 10 s) before it counts the drop: what a
/// slow drop of many pages looks like to the writer.
#[derive(Debug)]
struct GatedDrops {
    inner: FileStorage,
    open: Mutex<bool>,
    opened: Condvar,
    drops: AtomicUsize,
}

impl GatedDrops {
    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl Reader for GatedDrops {
    wal::forward_storage!(inner: list, not_regular, open, close, len, read_at, map, written_end, lock_shared);
}

impl Writer for GatedDrops {
    wal::forward_storage!(
        inner: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill, reserve
    );
    fn drop_cached(&self, file: FileId, offset: u64, len: u64) -> std::io::Result<()> {
        let open = self.open.lock().unwrap();
        let _ = self.opened.wait_timeout_while(open, Duration::from_secs(10), |o| !*o).unwrap();
        // A file's drop may come in pieces: count its first.
        if offset == 0 {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.drop_cached(file, offset, len)
    }
}

impl Completions for GatedDrops {
    wal::forward_storage!(inner: submit, reap);
}

/// A log over [`GatedDrops`] with a budget of 0 (every seal drops the segment it makes),
/// after `sealed` sealed segments (at most 2: no more drop helpers run at once) and an entry
/// in the next, synced: `sealed` drops wait at the gate. Asserts that no seal waited for its
/// drop.
fn gated_log_with_drops_waiting(sealed: usize) -> (tempfile::TempDir, Arc<GatedDrops>, Wal) {
    let d = dir();
    let st = Arc::new(GatedDrops {
        inner: FileStorage::new(d.path(), true).unwrap(),
        open: Mutex::new(false),
        opened: Condvar::new(),
        drops: AtomicUsize::new(0),
    });
    let opts = Options { segment_len_bytes: SEG, cached_log_bytes: 0, ..Options::default() };
    let (mut log, _) = Wal::open_with(st.clone(), opts).unwrap();
    let entry = vec![7u8; ENTRY];
    for round in 0..=sealed {
        log.append(Epoch(0), &entry).unwrap();
        log.sync().unwrap();
        if round < sealed {
            log.rotate().unwrap();
            assert_eq!(st.drops.load(Ordering::SeqCst), 0, "seal {round} waited for its drop");
        }
    }
    (d, st, log)
}

/// Opens the gate 300 ms from now, on a thread of its own.
fn open_gate_soon(st: &Arc<GatedDrops>) -> std::thread::JoinHandle<()> {
    let st = st.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        st.open_gate();
    })
}

/// The drop runs beside the writer: a seal returns while its drop still waits, and a close
/// returns only once every drop it started is done.
#[test]
fn a_seal_does_not_wait_for_its_drop_and_a_close_does() {
    let (_d, st, log) = gated_log_with_drops_waiting(1);
    let opener = open_gate_soon(&st);
    // The close seals the second segment and drops it too: two helpers wait at the gate,
    // neither joined by a seal.
    log.close().unwrap();
    assert_eq!(st.drops.load(Ordering::SeqCst), 2, "the close returned before its drops were done");
    opener.join().unwrap();
}

/// A purge that sets files aside for recycling first waits for the drops still running: a
/// helper must not go on advising a file that becomes a spare or the active segment.
#[test]
fn a_purge_waits_for_the_drops_before_it_recycles() {
    let (_d, st, mut log) = gated_log_with_drops_waiting(2);
    let opener = open_gate_soon(&st);
    let report = log.purge_before(log.next_lsn()).unwrap();
    assert_eq!(report.segments_removed.len(), 2, "{report:?}");
    assert_eq!(st.drops.load(Ordering::SeqCst), 2, "the purge set files aside while their drops still ran");
    opener.join().unwrap();
    log.close().unwrap();
}

/// Drops that fall behind the seals do not pile up: with two helpers waiting, the next seal
/// waits for the oldest before it starts a third.
#[test]
fn at_most_two_drops_run_at_once() {
    let (_d, st, mut log) = gated_log_with_drops_waiting(2);
    let opener = open_gate_soon(&st);
    log.rotate().unwrap();
    assert!(st.drops.load(Ordering::SeqCst) >= 1, "a third drop started while two were waiting");
    opener.join().unwrap();
    log.close().unwrap();
    assert_eq!(st.drops.load(Ordering::SeqCst), 3);
}

/// An abandoned handle (what a crash of the process leaves) still joins its drop helpers: no
/// thread of it advises files after `abandon` returns.
#[test]
fn an_abandoned_log_leaves_no_drop_running() {
    let (_d, st, log) = gated_log_with_drops_waiting(1);
    let opener = open_gate_soon(&st);
    log.abandon();
    assert_eq!(st.drops.load(Ordering::SeqCst), 1, "abandon returned while its drop still ran");
    opener.join().unwrap();
}

/// Files on which every drop of cached pages fails (EIO), or the file cannot even be opened
/// for it: the advice is a hint, so the log goes on writing, seals, closes and reads back
/// whole, and nothing is fenced.
#[derive(Debug)]
struct FailingDrops {
    inner: FileStorage,
    /// Whether the drop helper's open of a sealed segment by name fails (its first step).
    fail_open: bool,
    /// Opens by name that were refused.
    refused: AtomicUsize,
    drops: AtomicUsize,
}

impl Reader for FailingDrops {
    wal::forward_storage!(inner: list, not_regular, close, len, read_at, map, written_end, lock_shared);
    fn open(&self, name: &str) -> std::io::Result<FileId> {
        // Only the drop helper's opens: the writer's own go through.
        if self.fail_open && std::thread::current().name() == Some("wal-uncache") {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
        }
        self.inner.open(name)
    }
}

impl Writer for FailingDrops {
    wal::forward_storage!(
        inner: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill, reserve
    );
    fn drop_cached(&self, _file: FileId, _offset: u64, _len: u64) -> std::io::Result<()> {
        self.drops.fetch_add(1, Ordering::SeqCst);
        Err(std::io::Error::from_raw_os_error(libc::EIO))
    }
}

impl Completions for FailingDrops {
    wal::forward_storage!(inner: submit, reap);
}

#[test]
fn a_drop_that_fails_or_cannot_open_its_file_changes_nothing_but_the_cache() {
    for fail_open in [false, true] {
        let d = dir();
        let st = Arc::new(FailingDrops {
            inner: FileStorage::new(d.path(), true).unwrap(),
            fail_open,
            refused: AtomicUsize::new(0),
            drops: AtomicUsize::new(0),
        });
        let opts = Options { segment_len_bytes: SEG, cached_log_bytes: 0, ..Options::default() };
        let (mut log, _) = Wal::open_with(st.clone(), opts).unwrap();
        let mut want = Vec::new();
        for i in 0..4u8 {
            let p = vec![i; ENTRY];
            log.append(Epoch(0), &p).unwrap();
            log.sync().unwrap();
            log.rotate().unwrap();
            want.push(p);
        }
        // The helpers run beside the log: wait (at most 20 s) until each sealed segment's drop
        // has failed, so what follows sees the log after every failure, not before.
        let failures = || match fail_open {
            true => st.refused.load(Ordering::SeqCst),
            false => st.drops.load(Ordering::SeqCst),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while failures() < 4 {
            assert!(
                Instant::now() < deadline,
                "fail_open {fail_open}: {} of 4 drops failed after 20 s",
                failures()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!log.is_fenced(), "fail_open {fail_open}: a failed drop fenced the log");
        // The log still takes and syncs entries after the failures.
        let p = vec![9u8; ENTRY];
        log.append(Epoch(0), &p).unwrap();
        log.sync().unwrap();
        want.push(p);
        log.close().unwrap();
        if fail_open {
            assert_eq!(st.drops.load(Ordering::SeqCst), 0, "a drop was advised on a file not opened");
        }
        check_reads_back(d.path(), &want);
    }
}
