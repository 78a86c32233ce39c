//! Both real-file backends on one suite: the io_uring backend must write exactly the bytes the
//! portable pwrite + fdatasync backend writes (the portable one is its differential oracle).

use std::path::Path;
use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, Backend, CrcVerdict, Durability, Epoch, Lsn, Options, Wal};

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
    let (mut log, rep) = Wal::open(dir, opts(backend)).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..1200u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
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
    rep.backend
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
