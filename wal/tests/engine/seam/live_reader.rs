//! `Wal::open_reader` (the read-only handle) on a log that a live writer holds open and keeps
//! appending to, on real files. Through the file backend the reader asks for the directory's
//! shared lock, and is refused with `Error::Locked` (after the lock's patience), leaving the
//! writer's lock as it was. Through a reader whose lock locks nothing (as the verifier's pread
//! directory, which finds the live writer another way: `Reader::lock_shared`) it opens, and reads
//! a prefix of what was written holding every entry acknowledged before it opened: what a live
//! writer is in the middle of may be a torn tail (never CORRUPT), which a read-only open never
//! cuts. All the while the writer goes on appending, and in the end its log holds everything.

use super::{entries, payload};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use wal::storage::{FileStorage, LockGuard, Reader};
use wal::{CrcVerdict, Epoch, Error, Lsn, Options, RecoveryMode, Wal};

/// The file backend's read side, with a shared lock that locks nothing.
#[derive(Debug)]
struct Unlocked {
    inner: FileStorage,
}

impl Reader for Unlocked {
    wal::forward_storage!(inner: list, not_regular, open, close, len, read_at, map, written_end, scan_window);
    fn lock_shared(&self) -> std::io::Result<LockGuard> {
        Ok(LockGuard::new(Box::new(())))
    }
}

/// Small segments: the writer rotates (and prepares spares in the background) every ~200 entries.
fn opts() -> Options {
    Options { segment_len_bytes: 64 * 1024, ..Options::default() }
}

/// Checks what a reader opened on the live log holds: a prefix of what was written, at least
/// the first `acked` entries, that refuses to be written to. Returns how many entries it read.
fn read_prefix(log: &mut Wal, acked: u64, ctx: &str) -> u64 {
    let got = log.replay().unwrap_or_else(|e| panic!("{ctx}: replay: {e}")).collect_entries().unwrap();
    let n = got.len() as u64;
    assert!(n >= acked, "{ctx}: read {n} entries, {acked} were acknowledged before it opened");
    assert_eq!(got, entries(1, n + 1), "{ctx}");
    assert!(matches!(log.append(Epoch(0), b"x"), Err(Error::ReadOnly)), "{ctx}");
    n
}

#[test]
fn a_reader_of_a_live_log_is_locked_out_or_reads_an_acknowledged_prefix_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(dir.path(), opts()).unwrap();
    for i in 1..50 {
        log.append(Epoch(0), &payload(i)).unwrap();
    }
    log.sync().unwrap();
    // The writer appends until told to stop, syncing every few entries; `acked` is the last
    // entry a completed sync covers.
    let acked = Arc::new(AtomicU64::new(49));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 50;
            while !stop.load(Ordering::SeqCst) || i < 600 {
                assert_eq!(log.append(Epoch(0), &payload(i)).unwrap(), Lsn(i));
                if i % 4 == 0 {
                    log.sync().unwrap();
                    acked.store(i, Ordering::SeqCst);
                }
                i += 1;
            }
            log.sync().unwrap();
            (log, i)
        })
    };
    let mut torn = 0;
    let rounds = 20;
    for round in 1..=rounds {
        let ctx = format!("round {round}");
        let before = acked.load(Ordering::SeqCst);
        // Through the file backend: the writer's lock refuses the reader.
        let files: Arc<dyn Reader> = Arc::new(FileStorage::new(dir.path(), false).unwrap());
        match Wal::open_reader(files, opts()) {
            Err(Error::Locked(_)) => {}
            r => panic!("{ctx}: a locking reader of a live log got {:?}", r.map(|(_, rep)| rep)),
        }
        // Without the lock, salvaging: opens, up to whatever the writer is in the middle of.
        let unlocked = || -> Arc<dyn Reader> {
            Arc::new(Unlocked { inner: FileStorage::new(dir.path(), false).unwrap() })
        };
        let salvage = Options { recovery: RecoveryMode::Salvage, ..opts() };
        let (mut r, rep) = Wal::open_reader(unlocked(), salvage).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(
            matches!(rep.verdict, CrcVerdict::Ok | CrcVerdict::TornTail | CrcVerdict::CorruptTail),
            "{ctx}: a live writer's tail read as {:?}",
            rep.damage
        );
        torn += u64::from(rep.verdict != CrcVerdict::Ok);
        assert_eq!(rep.cut, None, "{ctx}");
        read_prefix(&mut r, before, &ctx);
        drop(r);
        // The default recovery, read-only: opens, or refuses a torn tail it may not cut.
        let before = acked.load(Ordering::SeqCst);
        match Wal::open_reader(unlocked(), opts()) {
            Ok((mut r, rep)) => {
                assert_eq!((rep.verdict, rep.cut), (CrcVerdict::Ok, None), "{ctx}");
                read_prefix(&mut r, before, &ctx);
            }
            Err(Error::Damaged(d)) if matches!(d.verdict, CrcVerdict::TornTail | CrcVerdict::CorruptTail) => {
                torn += 1;
            }
            Err(e) => panic!("{ctx}: a reader of a live log failed: {e}"),
        }
    }
    let during = acked.load(Ordering::SeqCst);
    // The readers left the writer's lock as it was: another writer is still refused.
    assert!(matches!(Wal::open(dir.path(), opts()), Err(Error::Locked(_))));
    stop.store(true, Ordering::SeqCst);
    let (log, end) = writer.join().unwrap();
    assert!(during > 49, "the writer appended nothing while readers came and went");
    println!("live reader: {rounds} rounds, {torn} torn tails seen, writer at {end}");
    // Not locked out: the writer's handle still works, and closes cleanly.
    log.close().unwrap();
    let (log, rep) = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!((rep.verdict, rep.cut), (CrcVerdict::Ok, None));
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), entries(1, end));
    assert_eq!(wal::scan_log(&**log.storage(), true).unwrap().verdict, CrcVerdict::Ok);
}
