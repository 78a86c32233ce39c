//! How new segment files get their zeros (`Options::segment_fill`), on real files: written for a
//! log that syncs often, reserved (`fallocate`) after a segment that took at most one sync per
//! `RESERVE_BYTES_PER_SYNC` bytes, and a log made of reserved segments reads, verifies and
//! reopens like any other (the format cannot tell the two apart).

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};
use wal::storage::{Completions, FileId, FileStorage, Reader, Writer};
use wal::{Epoch, Options, SegmentFill, Wal};

/// `FileStorage` that records how each file was prepared: its zeros reserved (`fallocate`
/// asked for) or written, as segment preparation asks the blocking side for them. A recycled
/// segment (no `create`, no zeros) is not recorded: the logs here are never purged, so none is.
#[derive(Debug)]
struct Recording {
    inner: FileStorage,
    /// (file name, reserved) in the order the preparations started.
    prepared: Mutex<Vec<(String, bool)>>,
    /// The names of the files created, by handle.
    names: Mutex<HashMap<FileId, String>>,
}

impl Recording {
    fn prepared(&self) -> Vec<(String, bool)> {
        self.prepared.lock().unwrap().clone()
    }
}

impl Reader for Recording {
    wal::forward_storage!(inner: list, open, close, len, read_at, map, lock_shared);
}

impl Writer for Recording {
    wal::forward_storage!(inner: remove, rename, lock_exclusive, write_at, sync_data, sync_dir);

    fn create(&self, name: &str) -> io::Result<FileId> {
        let f = self.inner.create(name)?;
        self.names.lock().unwrap().insert(f, name.to_string());
        Ok(f)
    }
    fn reserve(&self, file: FileId, len: u64) -> io::Result<bool> {
        let name = self.names.lock().unwrap().get(&file).cloned().unwrap_or_default();
        self.prepared.lock().unwrap().push((name, true));
        self.inner.reserve(file, len)
    }
    /// Zeros written: a preparation of its own, unless it follows a reservation the file system
    /// could not make (then the file counts as reserved, as asked).
    fn zero_fill(&self, file: FileId, len: u64) -> io::Result<()> {
        let name = self.names.lock().unwrap().get(&file).cloned().unwrap_or_default();
        let mut p = self.prepared.lock().unwrap();
        if p.last().is_none_or(|(last, _)| *last != name) {
            p.push((name, false));
        }
        drop(p);
        self.inner.zero_fill(file, len)
    }
}

impl Completions for Recording {
    wal::forward_storage!(inner: submit, reap);
}

const SEG: u32 = 256 << 10;
const ENTRY: usize = 4096;

fn open(dir: &std::path::Path, fill: SegmentFill) -> (Wal, Arc<Recording>) {
    let st = Arc::new(Recording {
        inner: FileStorage::new(dir, true).unwrap(),
        prepared: Mutex::new(Vec::new()),
        names: Mutex::default(),
    });
    // Preparation on the appending thread, so the record is complete when a rotation returns.
    let opts = Options {
        segment_len_bytes: SEG,
        prepare_in_background: false,
        segment_fill: fill,
        ..Options::default()
    };
    let (log, _) = Wal::open_with(st.clone(), opts).unwrap();
    (log, st)
}

fn entry(i: u64) -> Vec<u8> {
    (0..ENTRY).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// Appends until `segments` more segment files were prepared (one per rotation: nothing is
/// prepared in the background), with a sync after every entry or only a flush.
fn fill(log: &mut Wal, st: &Recording, next: &mut u64, segments: usize, sync_each: bool) {
    let stop = st.prepared().len() + segments;
    while st.prepared().len() < stop {
        log.append(Epoch(0), &entry(*next)).unwrap();
        *next += 1;
        if sync_each {
            log.sync().unwrap();
        } else {
            log.flush().unwrap();
        }
    }
}

#[test]
fn a_sync_heavy_segment_keeps_written_zeros_and_a_bulk_one_makes_the_next_reserved() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, st) = open(dir.path(), SegmentFill::Adaptive);
    let mut next = 0u64;
    // A sync per 4 KiB entry: 64 syncs in a 256 KiB segment, far more than one per 128 KiB.
    fill(&mut log, &st, &mut next, 2, true);
    // Three more synced entries in the segment just activated, which phase B then finishes:
    // more waited syncs than one per 128 KiB of it, so it still counts as sync-heavy.
    for _ in 0..3 {
        log.append(Epoch(0), &entry(next)).unwrap();
        log.sync().unwrap();
        next += 1;
    }
    let phase_a = st.prepared().len();
    assert!(
        st.prepared().iter().all(|(_, reserved)| !reserved),
        "a log syncing every 4 KiB got a reserved segment: {:?}",
        st.prepared()
    );
    // The same entries with no sync but the seal's: the segments after it are reserved.
    fill(&mut log, &st, &mut next, 2, false);
    // The first file of this phase was chosen on the last sync-heavy segment, the second on a
    // bulk one.
    let b: Vec<bool> = st.prepared()[phase_a..].iter().map(|(_, r)| *r).collect();
    assert_eq!(b, [false, true], "{:?}", st.prepared());
    // Back to syncing often: the next decision returns to written zeros.
    let before = st.prepared().len();
    fill(&mut log, &st, &mut next, 2, true);
    let later = st.prepared();
    assert_eq!(later.last().map(|(_, r)| *r), Some(false), "{later:?}");
    assert!(later.len() > before);
    // Every reserved file is the segment's full length, with its blocks allocated (not sparse).
    for (name, reserved) in st.prepared() {
        let m = match std::fs::metadata(dir.path().join(&name)) {
            Ok(m) => m,
            Err(_) => continue,
        };
        assert_eq!(m.len(), u64::from(SEG), "{name}");
        if reserved {
            assert!(m.blocks() * 512 >= u64::from(SEG), "{name} is sparse: {} blocks", m.blocks());
        }
    }
    log.close().unwrap();
    // The log reads back whole, verifies OK (every byte that must be zero is) and carries on.
    let (mut log, _) = open(dir.path(), SegmentFill::Adaptive);
    let got = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(got.len() as u64, next);
    for (i, (_, p)) in got.iter().enumerate() {
        assert_eq!(p, &entry(i as u64), "entry {i}");
    }
    log.append(Epoch(0), &entry(next)).unwrap();
    log.sync().unwrap();
    log.close().unwrap();
    let scan = wal::scan_log(&FileStorage::new(dir.path(), false).unwrap(), true).unwrap();
    assert_eq!(scan.verdict, wal::CrcVerdict::Ok, "{:?}", scan.damage);
}

#[test]
fn forced_fills_ignore_the_history() {
    for (mode, want) in [(SegmentFill::Zeros, false), (SegmentFill::Reserved, true)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, st) = open(dir.path(), mode);
        let mut next = 0;
        // Filled the way that would make `Adaptive` choose the opposite.
        fill(&mut log, &st, &mut next, 3, !want);
        let prepared = st.prepared();
        assert!(prepared.len() >= 3);
        assert!(prepared.iter().all(|(_, r)| *r == want), "{mode:?}: {prepared:?}");
        log.close().unwrap();
    }
}

/// Through the I/O thread: entries only `Written` (syncs that bound them but that nobody waits
/// for) make the next segments reserved, and so do durable entries of more than
/// `RESERVE_BYTES_PER_SYNC` per waited sync (the zeros would cost more bandwidth than the journal
/// commits); smaller durable entries keep written zeros, since a reserved segment's journal
/// commit would lengthen every sync they wait for.
#[test]
fn the_io_thread_reserves_after_written_only_segments_and_not_after_durable_ones() {
    use wal::{AsyncOptions, AsyncWal, Durability};
    for (durability, entry, want_reserved) in [
        (Durability::Written, 4096usize, true),
        (Durability::Durable, 64 << 10, false),
        (Durability::Durable, 160 << 10, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (log, st) = open(dir.path(), SegmentFill::Adaptive);
        let log = AsyncWal::start(log, AsyncOptions::default()).unwrap();
        let mut last = None;
        let mut n = 0u64;
        while st.prepared().len() < 4 {
            assert!(n < 10_000, "no rotation after {n} entries");
            let t = log.append(Epoch(0), entry_of(n, entry), durability).unwrap();
            if durability == Durability::Durable {
                t.wait().unwrap();
            }
            last = Some(t);
            n += 1;
        }
        last.unwrap().wait_durable().unwrap();
        log.close().unwrap();
        let reserved = st.prepared().iter().any(|(_, r)| *r);
        assert_eq!(reserved, want_reserved, "{durability:?} {entry} B: {:?}", st.prepared());
        let scan = wal::scan_log(&FileStorage::new(dir.path(), false).unwrap(), true).unwrap();
        assert_eq!(scan.verdict, wal::CrcVerdict::Ok, "{:?}", scan.damage);
    }
}

fn entry_of(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 7 + j) as u8).collect()
}
