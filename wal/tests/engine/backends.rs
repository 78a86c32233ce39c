//! Both real-file backends on one suite: the io_uring backend must write exactly the bytes the
//! portable pwrite + fdatasync backend writes (the portable one is its differential oracle).

use std::path::Path;
use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, Backend, CrcVerdict, Durability, Epoch, Lsn, Options, Wal};
use wal_sim::Rng;

fn opts(backend: Backend) -> Options {
    Options {
        segment_len_bytes: 64 * 1024,
        log_id: Some(*b"backend-differen"),
        backend,
        ..Options::default()
    }
}

/// A seeded workload over several segments with every record kind.
fn workload(dir: &Path, backend: Backend) -> &'static str {
    let (log, rep) = Wal::open(dir, opts(backend)).unwrap();
    run_workload(log);
    rep.backend
}

fn run_workload(mut log: Wal) {
    let mut rng = Rng::xorshift64(0x9e37_79b9_7f4a_7c15);
    for i in 0..1200u64 {
        let x = rng.next_u64();
        let p: Vec<u8> = (0..(x % 700)).map(|j| (j ^ x) as u8).collect();
        match x % 17 {
            0 => log.sync().unwrap(),
            1 => log.append_batch(Epoch(0), &[&p, b"pair"]).map(|_| ()).unwrap(),
            2 if i > 20 => log.truncate_after(Epoch(0), Lsn(log.next_lsn().0 - 3)).unwrap(),
            3 => log.set_meta((x % 4) as u32, b"value").unwrap(),
            4 => log.flush().unwrap(),
            _ => log.append(Epoch(0), &p).map(|_| ()).unwrap(),
        }
    }
    log.close().unwrap();
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn io_uring_writes_exactly_what_the_portable_backend_writes() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("portable"), d.path().join("uring"));
    assert_eq!(workload(&a, Backend::Portable), "portable");
    assert_eq!(workload(&b, Backend::Uring), "io_uring", "io_uring must be usable on this machine");
    let (fa, fb) = (files(&a), files(&b));
    assert!(fa.len() >= 4, "{} files", fa.len());
    assert_eq!(fa.len(), fb.len());
    for ((na, ba), (nb, bb)) in fa.iter().zip(&fb) {
        assert_eq!(na, nb);
        assert!(ba == bb, "{na} differs between the backends");
    }
    let (log, rep) = Wal::open(&b, opts(Backend::Uring)).unwrap();
    assert_eq!((rep.verdict, rep.backend), (CrcVerdict::Ok, "io_uring"));
    assert!(!log.replay().unwrap().collect_entries().unwrap().is_empty());
}

/// io_uring for the syncs only (writes by pwrite on the I/O thread): the same bytes as the
/// portable backend, and one ring operation per sync.
#[test]
fn with_inline_writes_only_syncs_go_through_the_ring_and_the_bytes_are_the_same() {
    use wal::storage::UringStorage;
    let d = tempfile::tempdir().unwrap();
    let (a, b, c) = (d.path().join("portable"), d.path().join("inline"), d.path().join("count"));
    assert_eq!(workload(&a, Backend::Portable), "portable");
    let (log, _) =
        Wal::open_with(Arc::new(UringStorage::with_inline_writes(&b, true).unwrap()), opts(Backend::Uring))
            .unwrap();
    run_workload(log);
    let (fa, fb) = (files(&a), files(&b));
    assert!(fa.len() >= 4, "{} files", fa.len());
    assert!(fa == fb, "io_uring with inline writes wrote other bytes than the portable backend");
    let st = Arc::new(UringStorage::with_inline_writes(&c, true).unwrap());
    assert!(st.inline_writes());
    let (mut log, _) = Wal::open_with(st.clone(), opts(Backend::Uring)).unwrap();
    let before = st.ring_ops();
    for i in 0..10u8 {
        log.append(Epoch(0), &[i; 100]).unwrap();
        log.sync().unwrap();
    }
    assert_eq!(st.ring_ops() - before, 10, "one ring operation (the fdatasync) per sync");
    log.close().unwrap();
}

#[test]
fn writes_and_syncs_go_through_the_ring() {
    let d = tempfile::tempdir().unwrap();
    let st = Arc::new(wal::storage::UringStorage::new(d.path(), true).unwrap());
    let (mut log, _) = Wal::open_with(st.clone(), opts(Backend::Uring)).unwrap();
    let before = st.ring_ops();
    for i in 0..10u8 {
        log.append(Epoch(0), &[i; 100]).unwrap();
        log.sync().unwrap();
    }
    // Each sync is one write and one fdatasync through the ring.
    assert!(st.ring_ops() - before >= 20, "{} ring operations", st.ring_ops() - before);
    log.close().unwrap();
}

#[test]
fn the_io_thread_on_io_uring_acknowledges_only_durable_entries() {
    let d = tempfile::tempdir().unwrap();
    let (wal, rep) = Wal::open(d.path(), opts(Backend::Uring)).unwrap();
    assert_eq!(rep.backend, "io_uring");
    let log = Arc::new(AsyncWal::start(wal, AsyncOptions::default()).unwrap());
    let hs: Vec<_> = (0..4u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                for i in 0..100u32 {
                    log.append(Epoch(0), vec![t; 200 + i as usize], Durability::Durable)
                        .unwrap()
                        .wait()
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let n: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(n, 400);
    Arc::try_unwrap(log).unwrap().close().unwrap();
    let (log, rep) = Wal::open(d.path(), opts(Backend::Portable)).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    let e = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(e.len(), 400);
    assert!(e.iter().enumerate().all(|(i, (lsn, _))| *lsn == i as u64 + 1));
}

/// The pipelined I/O thread on one real-file backend: two submitters keeping windows of
/// appends in flight (a third Written), one completion channel, a lone Written entry synced by
/// the delay alone, and a reopen that finds every entry. Returns the batches written while a
/// sync was in flight.
fn pipelined_io_thread(dir: &Path, storage: Arc<dyn wal::storage::Storage>) -> u64 {
    use wal::{Completion, Notify, Payload, Stage};
    let (wal, _) = Wal::open_with(storage, opts(Backend::Portable)).unwrap();
    let delay = std::time::Duration::from_millis(100);
    let log = Arc::new(
        AsyncWal::start(
            wal,
            AsyncOptions { written_sync_delay: delay, overlap_write_bytes: 0, ..AsyncOptions::default() },
        )
        .unwrap(),
    );
    let (tx, rx) = crossbeam_channel::unbounded::<Completion>();
    let hs: Vec<_> = (0..2u64)
        .map(|t| {
            let (log, tx) = (log.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut window = std::collections::VecDeque::new();
                for i in 0..300u64 {
                    let d = if i.is_multiple_of(3) { Durability::Written } else { Durability::Durable };
                    let p = vec![(t * 7 + i) as u8; 100 + (i as usize * 37) % 900];
                    let n = Notify { tx: tx.clone(), tag: t * 1000 + i };
                    window.push_back(log.append_with(Epoch(0), Payload::One(p), d, Some(n)).unwrap());
                    if window.len() > 16 {
                        window.pop_front().unwrap().wait_durable().unwrap();
                    }
                }
                window.into_iter().for_each(|t| assert!(t.wait_durable().is_ok()));
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    // A completion is sent just after its ticket resolves: receive them, do not just look.
    let got: Vec<Completion> =
        (0..800).map(|_| rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap()).collect();
    assert!(rx.try_recv().is_err(), "more completions than tickets and stages");
    assert_eq!(got.iter().filter(|c| c.stage == Stage::Final && c.outcome.is_ok()).count(), 600);
    assert_eq!(got.iter().filter(|c| c.stage == Stage::Written).count(), 200);
    // A lone Written entry: durable within the delay (plus slack), with no append after it.
    let t0 = std::time::Instant::now();
    let lone = log.append(Epoch(0), b"lone".to_vec(), Durability::Written).unwrap();
    assert_eq!(lone.wait(), Ok(Lsn(601)));
    assert_eq!(lone.wait_durable_timeout(delay + std::time::Duration::from_secs(10)), Some(Ok(Lsn(601))));
    assert!(t0.elapsed() >= delay, "synced before the delay");
    let during = log.stats().batches_during_sync;
    Arc::try_unwrap(log).unwrap().close().unwrap();
    let (log, rep) = Wal::open(dir, opts(Backend::Portable)).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    let e = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(e.len(), 601);
    assert!(e.iter().enumerate().all(|(i, (lsn, _))| *lsn == i as u64 + 1));
    during
}

#[test]
fn the_pipelined_io_thread_on_every_backend() {
    let d = tempfile::tempdir().unwrap();
    let (a, b, c, e) = (
        d.path().join("portable"),
        d.path().join("sync-thread"),
        d.path().join("uring"),
        d.path().join("inline"),
    );
    let inline = pipelined_io_thread(&a, Arc::new(wal::storage::FileStorage::new(&a, true).unwrap()));
    assert_eq!(inline, 0, "the inline portable backend cannot write during a sync: it runs it");
    // Whether a write overlaps a sync depends on how the threads are scheduled: on a loaded
    // machine one run may see none, so each backend gets up to three runs (each run checks
    // every entry every time).
    let overlapped = |dir: &Path, make: &dyn Fn(&Path) -> Arc<dyn wal::storage::Storage>| {
        (0..3)
            .map(|i| {
                let d = dir.join(format!("run{i}"));
                pipelined_io_thread(&d, make(&d))
            })
            .find(|&n| n > 0)
            .unwrap_or(0)
    };
    let threaded =
        overlapped(&b, &|d| Arc::new(wal::storage::FileStorage::with_sync_thread(d, true).unwrap()));
    let uring = overlapped(&c, &|d| Arc::new(wal::storage::UringStorage::new(d, true).unwrap()));
    let inline =
        overlapped(&e, &|d| Arc::new(wal::storage::UringStorage::with_inline_writes(d, true).unwrap()));
    println!(
        "batches written during a sync: portable+sync thread {threaded}, io_uring {uring}, io_uring syncs with inline writes {inline}"
    );
    assert!(threaded > 0, "the sync thread never overlapped a write");
    assert!(uring > 0, "io_uring never overlapped a write");
    assert!(inline > 0, "io_uring with inline writes never overlapped a write");
}
