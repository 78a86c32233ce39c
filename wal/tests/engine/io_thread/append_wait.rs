//! `append_wait`: a round driven on the caller's own thread, beside the I/O thread's.

use super::{reopen, start};
use std::sync::Arc;
use wal::{AsyncOptions, Durability, Epoch, Error, Failure, Lsn, Payload};
use wal_sim::{MemStorage, SectorFate};

/// `append_wait` on an idle I/O thread: the caller's own thread writes and syncs its batch (the
/// stats count it), the ticket comes back resolved, and the entry survives a crash that keeps
/// only synced bytes, exactly as when the I/O thread does the work.
#[test]
fn append_wait_writes_and_syncs_on_the_callers_thread_when_the_io_thread_is_idle() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let syncs_before = st.faults().syncs_seen;
    let mut acked = Vec::new();
    for i in 0..50u32 {
        let p = format!("entry {i}").into_bytes();
        let t = log.append_wait(Epoch(0), Payload::One(p.clone())).unwrap();
        assert!(t.poll_outcome().is_some(), "append_wait returned an unresolved ticket");
        acked.push((t.wait().unwrap().0, p));
    }
    let g = log.append_wait(Epoch(0), Payload::Group(vec![b"g1".to_vec(), b"g2".to_vec()])).unwrap();
    assert_eq!(g.wait(), Ok(Lsn(51)));
    acked.push((51, b"g1".to_vec()));
    acked.push((52, b"g2".to_vec()));
    let stats = log.stats();
    assert_eq!(stats.appends, 52);
    // The I/O thread sleeps between appends (nothing rings it): most rounds are the caller's.
    assert!(stats.batches_by_waiters >= 40, "{stats:?}");
    assert!(st.faults().syncs_seen - syncs_before >= stats.batches_by_waiters);
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed), acked);
    log.close().unwrap();
}

/// Callers of `append_wait` and of `append` at once, from several threads: one caller drives a
/// round while the others' entries join its batch or go to the I/O thread; every ticket
/// resolves, LSNs stay dense, every acknowledged entry survives a crash, nothing waits forever.
#[test]
fn append_wait_and_append_from_many_threads_share_batches_and_lose_nothing() {
    let st = MemStorage::new();
    let log = Arc::new(start(&st, AsyncOptions::default()));
    let threads: Vec<_> = (0..6u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..120u32)
                    .map(|i| {
                        let p = format!("thread {t} entry {i}").into_bytes();
                        let ticket = if (u32::from(t) + i).is_multiple_of(2) {
                            log.append_wait(Epoch(0), Payload::One(p.clone())).unwrap()
                        } else {
                            log.append(Epoch(0), p.clone(), Durability::Durable).unwrap()
                        };
                        (ticket.wait().unwrap().0, p)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut acked: Vec<(u64, Vec<u8>)> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
    acked.sort();
    let stats = log.stats();
    assert_eq!(stats.appends, 720);
    assert_eq!(stats.queue_depth, 0);
    assert!(stats.batches_by_waiters > 0, "no caller drove a round: {stats:?}");
    assert!(stats.batches_by_waiters < stats.batches, "the I/O thread wrote nothing: {stats:?}");
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed), acked, "LSNs are dense and every payload is where its ticket said");
    Arc::try_unwrap(log).unwrap().close().unwrap();
}

/// A failed fdatasync in a round the caller drives fences the log as on the I/O thread (I6):
/// the ticket is Indeterminate, later appends are refused, the entry acknowledged before stays.
#[test]
fn a_failed_sync_in_a_round_the_caller_drives_fences_the_log() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    log.append_wait(Epoch(0), Payload::One(b"durable".to_vec())).unwrap().wait().unwrap();
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    let t = log.append_wait(Epoch(0), Payload::One(b"lost".to_vec())).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Indeterminate(_))), "a failed sync acknowledged an entry");
    st.faults().fail_sync_from = None;
    assert!(matches!(log.append_wait(Epoch(0), Payload::One(b"x".to_vec())), Err(Error::Fenced { .. })));
    assert!(matches!(log.append(Epoch(0), b"x".to_vec(), Durability::Durable), Err(Error::Fenced { .. })));
    assert!(log.close().is_err(), "closing a fenced log must say so");
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed), vec![(1, b"durable".to_vec())]);
}

/// `append_wait` refuses what `append` refuses, consuming no LSN: a stale epoch, a payload too
/// large, an empty group.
#[test]
fn append_wait_rejects_like_append() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    assert!(matches!(
        log.append_wait(Epoch(1), Payload::One(b"x".to_vec())),
        Err(Error::EpochNotAdvanced { .. })
    ));
    assert!(matches!(log.append_wait(Epoch(0), Payload::Group(vec![])), Err(Error::InvalidArgument(_))));
    assert!(matches!(log.append_wait(Epoch(0), Payload::One(vec![0; 1 << 20])), Err(Error::TooLarge { .. })));
    assert_eq!(log.append_wait(Epoch(0), Payload::One(b"x".to_vec())).unwrap().wait(), Ok(Lsn(1)));
    log.close().unwrap();
}
