//! The I/O thread (first step of issue 3): tickets, group commit, fail-stop, rejection.

use std::future::Future;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Error, Failure, Lsn, Options, Payload, Wal, WhenFull};
use wal_sim::{MemStorage, SectorFate};

const SEG: u32 = 64 * 1024;

fn start(st: &MemStorage, opts: AsyncOptions) -> AsyncWal {
    let (wal, _) =
        Wal::open_with(Arc::new(st.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
            .unwrap();
    AsyncWal::start(wal, opts).unwrap()
}

/// A log on `st` that prepares its next segment on the appending thread: the only syncs are
/// the batches' own (a test that holds or times a sync holds or times one of those).
fn open_unprepared(st: Arc<dyn wal::storage::Storage>) -> Wal {
    Wal::open_with(st, Options { segment_len_bytes: SEG, prepare_in_background: false, ..Options::default() })
        .unwrap()
        .0
}

fn reopen(st: &MemStorage) -> Vec<(u64, Vec<u8>)> {
    let (wal, _) =
        Wal::open_with(Arc::new(st.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
            .unwrap();
    wal.replay().unwrap().collect_entries().unwrap()
}

#[test]
fn many_submitters_share_syncs_and_every_acknowledged_entry_is_durable() {
    let st = MemStorage::new();
    let log = Arc::new(start(&st, AsyncOptions::default()));
    let syncs_before = st.faults().syncs_seen;
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..150u32)
                    .map(|i| {
                        let p = format!("thread {t} entry {i}").into_bytes();
                        let lsn =
                            log.append(Epoch(0), p.clone(), Durability::Durable).unwrap().wait().unwrap();
                        (lsn.0, p)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut acked: Vec<(u64, Vec<u8>)> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
    acked.sort();
    let syncs = st.faults().syncs_seen - syncs_before;
    let stats = log.stats();
    assert_eq!(stats.appends, 1200);
    assert_eq!(stats.payload_bytes, acked_bytes(&acked));
    assert_eq!(stats.entries_per_batch.count(), stats.batches);
    assert_eq!(stats.sync_latency_us.count(), stats.syncs);
    assert!(stats.entries_per_batch.max() > 1, "no batch held more than one entry");
    assert_eq!(stats.queue_depth, 0);
    // Acknowledged entries survive a crash that keeps only synced bytes.
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let got = reopen(&crashed);
    assert_eq!(got.len(), 1200);
    assert_eq!(got, acked, "LSNs are dense and every payload is where its ticket said");
    Arc::try_unwrap(log).unwrap().close().unwrap();
    println!("1200 durable appends from 8 threads took {syncs} data syncs");
    assert!(syncs < 1200, "no group commit: {syncs} syncs for 1200 appends");
}

fn acked_bytes(v: &[(u64, Vec<u8>)]) -> u64 {
    v.iter().map(|e| e.1.len() as u64).sum()
}

#[test]
fn a_ticket_is_a_future_without_a_runtime() {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let mut t = std::pin::pin!(log.append(Epoch(0), b"awaited".to_vec(), Durability::Durable).unwrap());
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let got = loop {
        match t.as_mut().poll(&mut cx) {
            Poll::Ready(r) => break r,
            Poll::Pending => std::thread::park_timeout(Duration::from_secs(1)),
        }
    };
    assert_eq!(got, Ok(Lsn(1)));
    log.close().unwrap();
}

#[test]
fn a_failed_sync_fences_every_pending_and_later_append() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    log.append(Epoch(0), b"durable".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    let t = log.append(Epoch(0), b"lost".to_vec(), Durability::Durable).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Indeterminate(_))), "a failed sync acknowledged an entry");
    // Fenced: later appends are refused (no LSN, nothing queued), even once the device is fine.
    st.faults().fail_sync_from = None;
    assert!(matches!(log.append(Epoch(0), b"x".to_vec(), Durability::Durable), Err(Error::Fenced { .. })));
    assert!(log.close().is_err(), "closing a fenced log must say so");
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed), vec![(1, b"durable".to_vec())]);
}

#[test]
fn rejected_appends_consume_no_lsn() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    assert!(matches!(
        log.append(Epoch(1), b"x".to_vec(), Durability::Durable),
        Err(Error::EpochNotAdvanced { .. })
    ));
    let too_big = vec![0u8; 1 << 20];
    let e = log.append(Epoch(0), too_big, Durability::Durable).unwrap_err();
    assert!(e.is_rejected(), "{e}");
    let t = log.append(Epoch(0), b"first".to_vec(), Durability::Written).unwrap();
    assert_eq!(t.lsn, Lsn(1));
    assert_eq!(t.wait(), Ok(Lsn(1)));
    log.close().unwrap();
    assert_eq!(reopen(&st), vec![(1, b"first".to_vec())]);
}

#[test]
fn a_full_queue_answers_busy_when_asked_not_to_wait() {
    let st = MemStorage::new();
    // Hold the I/O thread inside its first fdatasync until told to go on.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let opts = AsyncOptions { queue_entries: 2, when_full: WhenFull::Busy, ..AsyncOptions::default() };
    let log = start(&st, opts);
    let armed = std::sync::atomic::AtomicBool::new(true);
    st.set_sync_observer(move |_| {
        if armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            let _ = entered_tx.send(());
            let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
        }
    });
    let a = log.append(Epoch(0), b"a".to_vec(), Durability::Durable).unwrap();
    entered_rx.recv_timeout(Duration::from_secs(10)).unwrap(); // "a" is being synced
    let b = log.append(Epoch(0), b"b".to_vec(), Durability::Durable).unwrap();
    // "a" is still counted until its batch resolves, "b" is queued: the queue is full.
    assert!(matches!(log.append(Epoch(0), b"c".to_vec(), Durability::Durable), Err(Error::Busy)));
    assert!(a.poll_outcome().is_none(), "resolved before its sync completed");
    go_tx.send(()).unwrap();
    assert_eq!(a.wait(), Ok(Lsn(1)));
    assert_eq!(b.wait(), Ok(Lsn(2)), "the refused append consumed an LSN");
    log.close().unwrap();
}

/// A `Written` entry gives its place in the queue back once it is written, before its sync:
/// the queue bounds what waits to be written. A `Durable` entry keeps its place until durable.
/// With the first sync held on the storage's sync thread and a queue of two entries, written
/// entries keep being taken (each written, none durable yet) where the old accounting answered
/// Busy at the second; a second durable entry still finds the queue full.
#[test]
fn a_written_entry_frees_its_queue_place_once_written() {
    let st = MemStorage::new();
    st.set_sync_thread(true).unwrap();
    let wal = open_unprepared(Arc::new(st.clone()));
    // Every append written at once, also while a sync is in flight.
    let opts = AsyncOptions {
        queue_entries: 2,
        when_full: WhenFull::Busy,
        overlap_write_bytes: 0,
        ..AsyncOptions::default()
    };
    let log = AsyncWal::start(wal, opts).unwrap();
    let release = st.hold_next_sync();
    let a = log.append(Epoch(0), b"a".to_vec(), Durability::Durable).unwrap();
    assert!(st.wait_sync_held(Duration::from_secs(20)), "the sync of the first batch never started");
    let mut written = Vec::new();
    for i in 0..5u8 {
        let w = log.append(Epoch(0), vec![b'w', i], Durability::Written);
        let w = w.unwrap_or_else(|e| panic!("written entry {i} refused with a full queue: {e}"));
        assert_eq!(w.wait_timeout(Duration::from_secs(20)), Some(Ok(w.lsn)), "entry {i} was not written");
        assert!(w.poll_durable().is_none(), "entry {i} durable while the sync is held");
        written.push(w);
    }
    let d = log.append(Epoch(0), b"d".to_vec(), Durability::Durable).unwrap();
    assert!(matches!(log.append(Epoch(0), b"e".to_vec(), Durability::Durable), Err(Error::Busy)));
    assert!(a.poll_outcome().is_none(), "resolved before its sync completed");
    drop(release);
    assert_eq!(a.wait(), Ok(Lsn(1)));
    for w in &written {
        assert_eq!(w.wait_durable_timeout(Duration::from_secs(20)), Some(Ok(w.lsn)));
    }
    assert_eq!(d.wait(), Ok(Lsn(7)));
    log.close().unwrap();
    let got = reopen(&st);
    assert_eq!(got.len(), 7);
    assert_eq!(got[6], (7, b"d".to_vec()));
}

#[test]
fn disk_full_rejects_what_was_never_written_and_the_log_stays_usable() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    // Room for the first segment and wal.meta only: the first rotation cannot get a segment.
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut durable = Vec::new();
    let rejected = loop {
        let t = log.append(Epoch(0), vec![7; 500], Durability::Durable).unwrap();
        match t.wait() {
            Ok(lsn) => durable.push(lsn.0),
            Err(f) => break f,
        }
        assert!(durable.len() < 1000, "never ran out of space");
    };
    assert!(matches!(rejected, Failure::Rejected(_)), "{rejected:?}");
    // Not fenced: with space again, appends carry on at the next LSN.
    st.faults().capacity_bytes = None;
    let next = log.append(Epoch(0), b"after".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    assert_eq!(next.0, durable.len() as u64 + 1, "the rejected entry's LSN was not given again");
    log.close().unwrap();
    let got = reopen(&st);
    assert_eq!(got.len(), durable.len() + 1);
    assert!(got.iter().enumerate().all(|(i, e)| e.0 == i as u64 + 1), "LSNs are dense");
    assert_eq!(got.last().unwrap().1, b"after".to_vec());
}

/// An event loop collects many tickets through one completion channel, each tagged; a user
/// batch takes consecutive LSNs and resolves as one.
#[test]
fn one_completion_channel_collects_many_tickets_and_groups_resolve_whole() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut tickets = Vec::new();
    for tag in 0..20u64 {
        let payload = if tag % 5 == 4 {
            wal::Payload::Group(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
        } else {
            wal::Payload::One(format!("entry {tag}").into_bytes())
        };
        let notify = wal::Notify { tx: tx.clone(), tag };
        tickets.push(log.append_with(Epoch(0), payload, Durability::Durable, Some(notify)).unwrap());
    }
    let mut got: Vec<wal::Completion> =
        (0..20).map(|_| rx.recv_timeout(Duration::from_secs(20)).unwrap()).collect();
    got.sort_by_key(|c| c.tag);
    let mut next = 1u64;
    for (tag, c) in got.iter().enumerate() {
        assert_eq!(c.tag, tag as u64);
        assert_eq!(c.lsn, Lsn(next), "tag {tag}");
        assert_eq!(c.outcome, Ok(Lsn(next)));
        assert_eq!(tickets[tag].poll_outcome(), Some(Ok(Lsn(next))), "the ticket agrees with the channel");
        next += if tag % 5 == 4 { 3 } else { 1 };
    }
    assert!(rx.try_recv().is_err(), "exactly one completion per ticket");
    log.close().unwrap();
    let entries = reopen(&st);
    assert_eq!(entries.len() as u64, next - 1);
    assert_eq!(entries[4], (5, b"a".to_vec()));
}

/// A storage whose fdatasync takes at least 30 ms, inside `submit` as the portable backend's
/// does.
#[derive(Debug)]
struct SlowSync {
    inner: MemStorage,
}

impl wal::storage::Reader for SlowSync {
    wal::forward_storage!(inner: list, open, close, len, read_at, map, written_end, scan_window, lock_shared);
}

impl wal::storage::Writer for SlowSync {
    wal::forward_storage!(inner: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill, reserve);
}

impl wal::storage::Completions for SlowSync {
    wal::forward_storage!(inner: reap, concurrent_wait, wait);

    fn submit(&self, sub: wal::storage::Submission) -> std::io::Result<()> {
        if matches!(sub.op, wal::storage::Op::SyncData { .. }) {
            std::thread::sleep(Duration::from_millis(30));
        }
        self.inner.submit(sub)
    }
}

/// The sync latency histogram and the slow-sync count measure the fdatasync itself, also on a
/// backend that runs it inside `submit` (they measured from after the submission, about 1 us).
#[test]
fn sync_latency_counts_a_sync_run_inside_submit() {
    let st = Arc::new(SlowSync { inner: MemStorage::new() });
    let log = open_unprepared(st);
    let opts = AsyncOptions { slow_sync: Duration::from_millis(10), ..AsyncOptions::default() };
    let log = AsyncWal::start(log, opts).unwrap();
    for i in 0..3u8 {
        log.append(Epoch(0), vec![i; 100], Durability::Durable).unwrap().wait().unwrap();
    }
    let s = log.stats();
    assert!(s.syncs >= 3, "{s:?}");
    assert!(s.sync_latency_us.quantile(0.5) >= 30_000, "p50 {} us", s.sync_latency_us.quantile(0.5));
    assert!(s.slow_syncs >= 3, "{s:?}");
    log.close().unwrap();
}

/// A ticket dropped at once is not observed, and the I/O thread skips its resolution; its entry
/// is logged all the same, and a dropped ticket that has a completion channel still reports
/// through it (the channel is an observer).
#[test]
fn dropped_tickets_are_logged_and_still_report_to_their_channel() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut kept = Vec::new();
    for i in 0..300u64 {
        let notify = (i % 3 == 0).then(|| wal::Notify { tx: tx.clone(), tag: i });
        let d = if i % 2 == 0 { Durability::Written } else { Durability::Durable };
        let t = log.append_with(Epoch(0), wal::Payload::One(i.to_le_bytes().to_vec()), d, notify).unwrap();
        if i % 10 == 9 {
            kept.push((i, t));
        }
    }
    for (i, t) in &kept {
        assert_eq!(t.wait_durable().unwrap(), Lsn(i + 1));
    }
    // Entries with a channel: Written ones report written and then durable, Durable ones once.
    let want: usize = (0..300u64).filter(|i| i % 3 == 0).map(|i| if i % 2 == 0 { 2 } else { 1 }).sum();
    let got: Vec<wal::Completion> =
        (0..want).map(|_| rx.recv_timeout(Duration::from_secs(20)).unwrap()).collect();
    assert!(got.iter().all(|c| c.outcome == Ok(c.lsn) && c.lsn == Lsn(c.tag + 1)), "{got:?}");
    log.close().unwrap();
    assert!(rx.try_recv().is_err(), "no completion for an entry without a channel");
    let entries = reopen(&st);
    assert_eq!(entries.len(), 300);
    assert!(entries.iter().enumerate().all(|(i, e)| e.0 == i as u64 + 1 && e.1 == (i as u64).to_le_bytes()));
}

/// docs/invariants.md I5: appending only enqueues. With the sync of the entry's own batch held on the
/// storage's sync thread, `append` still returns at once and its ticket stays unresolved until
/// the sync completes. Bounded: an append that blocks fails the test after 5 s instead of
/// hanging it (the `mutant-append-blocks-on-sync` mutant of tools/mutants.sh fails here).
#[test]
fn append_returns_while_the_sync_of_its_own_batch_is_held() {
    let st = MemStorage::new();
    st.set_sync_thread(true).unwrap();
    let wal = open_unprepared(Arc::new(st.clone()));
    let log = Arc::new(AsyncWal::start(wal, AsyncOptions::default()).unwrap());
    // Released on any exit, so a failed assertion cannot leave the appender or the close waiting.
    let release = st.hold_next_sync();
    let (tx, rx) = mpsc::channel();
    let appender = {
        let log = log.clone();
        std::thread::spawn(move || {
            let t = log.append(Epoch(0), b"held".to_vec(), Durability::Durable);
            let _ = tx.send(());
            t
        })
    };
    let returned = rx.recv_timeout(Duration::from_secs(5)).is_ok();
    let held = st.wait_sync_held(Duration::from_secs(20));
    if !returned {
        drop(release);
        let _ = appender.join();
        panic!("append blocked while the sync of its batch was in flight (I5)");
    }
    assert!(held, "the sync of the entry's batch never started");
    let ticket = appender.join().unwrap().unwrap();
    assert!(ticket.poll_outcome().is_none(), "the ticket resolved before its sync completed");
    drop(release);
    assert_eq!(ticket.wait_timeout(Duration::from_secs(20)), Some(Ok(Lsn(1))));
    Arc::try_unwrap(log).unwrap().close().unwrap();
}

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

/// Untracked appends (no ticket, a pooled copy of a borrowed slice) from several threads,
/// mixed with ticketed ones: every entry lands at the LSN it was given, in each thread's order,
/// byte for byte, and one ticket's durability covers every untracked entry before it.
#[test]
fn untracked_appends_take_their_lsns_in_order_beside_ticketed_ones() {
    let st = MemStorage::new();
    let log = Arc::new(start(&st, AsyncOptions::default()));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut buf = Vec::new();
                for i in 0..300u32 {
                    buf.clear();
                    buf.extend_from_slice(&[t; 3]);
                    buf.extend_from_slice(&i.to_le_bytes());
                    buf.resize(7 + (i as usize * 13) % 700, t);
                    let lsn = if i % 25 == 24 {
                        log.append(Epoch(0), buf.clone(), Durability::Written).unwrap().lsn
                    } else {
                        log.append_untracked(Epoch(0), &buf, Durability::Written).unwrap()
                    };
                    mine.push((lsn.0, buf.clone()));
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<(u64, Vec<u8>)> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
    // One durable ticket after them all: its sync covers everything written before it.
    let last = log.append(Epoch(0), b"last".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    assert_eq!(last.0, 1201);
    assert!(log.fenced().is_none());
    Arc::try_unwrap(log).unwrap().close().unwrap();
    all.sort();
    all.push((1201, b"last".to_vec()));
    assert_eq!(reopen(&st), all, "every entry at the LSN its append returned, byte for byte");
}

/// An untracked append is refused exactly like a ticketed one, and a refusal takes no LSN.
#[test]
fn untracked_appends_are_refused_without_taking_an_lsn() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    assert_eq!(log.append_untracked(Epoch(0), b"a", Durability::Written).unwrap(), Lsn(1));
    assert!(matches!(
        log.append_untracked(Epoch(1), b"b", Durability::Written),
        Err(Error::EpochNotAdvanced { current: 0, given: 1 })
    ));
    let huge = vec![0u8; SEG as usize];
    assert!(matches!(
        log.append_untracked(Epoch(0), &huge, Durability::Durable),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(log.next_lsn(), Lsn(2));
    assert_eq!(log.append_untracked(Epoch(0), b"c", Durability::Durable).unwrap(), Lsn(2));
    log.close().unwrap();
    assert_eq!(reopen(&st), vec![(1, b"a".to_vec()), (2, b"c".to_vec())]);
}

/// Disk full gives up what was never written. A ticketed entry hears Rejected and the log
/// stays usable (`disk_full_rejects_what_was_never_written_and_the_log_stays_usable`); an
/// untracked one has nobody to hear it, so the log fences: the caller's next append fails
/// instead of the loss passing unnoticed. What the log kept is a prefix of what was appended.
#[test]
fn disk_full_that_gives_up_untracked_entries_fences_the_log() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    // Room for the first segment and wal.meta only: the first rotation cannot get a segment.
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut appended = Vec::new();
    let refused = loop {
        assert!(appended.len() < 100_000, "untracked appends were never refused");
        let payload = (appended.len() as u32).to_le_bytes().repeat(100);
        match log.append_untracked(Epoch(0), &payload, Durability::Written) {
            Ok(lsn) => appended.push((lsn.0, payload)),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(refused, Error::Fenced { ref cause } if cause.contains("without a ticket")),
        "{refused:?}"
    );
    assert!(log.fenced().is_some());
    let ticket = log.append(Epoch(0), b"after".to_vec(), Durability::Durable);
    assert!(ticket.is_err(), "a fenced log takes no append");
    drop(log);
    st.faults().capacity_bytes = None;
    let kept = reopen(&st);
    assert!(kept.len() < appended.len(), "some entries were given up");
    assert_eq!(kept[..], appended[..kept.len()], "the log kept a prefix of the appends, byte for byte");
}

// ----- every operation of the synchronous handle, on the I/O thread -----

use proptest::prelude::*;

/// One operation, as both handles take it.
#[derive(Clone, Debug)]
enum Op {
    Append { epoch: u64, len: usize },
    Group { epoch: u64, n: usize },
    AppendAt { epoch: u64, delta: i64, len: usize },
    TruncateAfter { epoch: u64, back: u64 },
    Reset { epoch: u64, next: u64 },
    SetMeta { key: u32, len: usize },
    AdvanceEpoch { by: i64 },
}

/// Mostly the right epoch, sometimes a stale or a future one; mostly small payloads, sometimes
/// one over the limit (with the right epoch only: the handles check those two in different
/// orders, both refusals).
fn op() -> impl Strategy<Value = Op> {
    let epoch = prop_oneof![8 => Just(0u64), 1 => Just(1u64), 1 => Just(2u64)];
    let len = prop_oneof![20 => 0usize..300, 1 => Just(70_000usize)];
    prop_oneof![
        6 => (epoch.clone(), len.clone())
            .prop_map(|(epoch, len)| Op::Append { epoch: if len > 1000 { 0 } else { epoch }, len }),
        1 => (epoch.clone(), 1usize..4).prop_map(|(epoch, n)| Op::Group { epoch, n }),
        4 => (epoch.clone(), -6i64..4, len).prop_map(|(epoch, delta, len)| Op::AppendAt {
            epoch: if len > 1000 { 0 } else { epoch },
            delta,
            len
        }),
        2 => (epoch.clone(), 0u64..8).prop_map(|(epoch, back)| Op::TruncateAfter { epoch, back }),
        1 => (epoch, 0u64..60).prop_map(|(epoch, next)| Op::Reset { epoch, next }),
        2 => (0u32..20, prop_oneof![9 => 0usize..40, 1 => Just(300usize)])
            .prop_map(|(key, len)| Op::SetMeta { key, len }),
        1 => (-1i64..3).prop_map(|by| Op::AdvanceEpoch { by }),
    ]
}

fn bytes(tag: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (tag * 31 + i) as u8).collect()
}

/// The epoch an op carries: relative to the log's current one (0 = current, 1 = stale, 2 = a
/// future one).
fn epoch_for(current: Epoch, e: u64) -> Epoch {
    match e {
        0 => current,
        1 => Epoch(current.0.wrapping_sub(1)),
        _ => Epoch(current.0 + 1),
    }
}

/// What an operation answered, comparable across the two handles: the LSN it reports (an
/// append's first LSN, otherwise the next LSN after it) or the kind of refusal.
fn outcome<T>(r: Result<T, Error>, lsn: impl FnOnce(T) -> u64) -> Result<u64, std::mem::Discriminant<Error>> {
    r.map(lsn).map_err(|e| std::mem::discriminant(&e))
}

/// Runs `ops` on a synchronous handle and on the I/O thread (each on its own simulated disk)
/// and checks that every answer, every placement and the reopened logs are the same.
fn same_on_both(ops: &[Op]) -> Result<(), TestCaseError> {
    let (a, b) = (MemStorage::new(), MemStorage::new());
    let mut sync = open_unprepared(Arc::new(a.clone()));
    let log = start(&b, AsyncOptions::default());
    let mut tickets = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (cur, next) = (sync.epoch(), sync.next_lsn().0);
        prop_assert_eq!(log.epoch(), cur, "epoch before op {} {:?}", i, op);
        prop_assert_eq!(log.next_lsn().0, next, "next LSN before op {} {:?}", i, op);
        let (want, got) = match *op {
            Op::Append { epoch, len } => {
                let e = epoch_for(cur, epoch);
                let w = outcome(sync.append(e, &bytes(i, len)), |l| l.0);
                let t = log.append(e, bytes(i, len), Durability::Written);
                (w, outcome(t.map(|t| tickets.push(t.clone())).map(|_| tickets.last().unwrap().lsn), |l| l.0))
            }
            Op::Group { epoch, n } => {
                let e = epoch_for(cur, epoch);
                let g: Vec<Vec<u8>> = (0..n).map(|k| bytes(i + k, 10)).collect();
                let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                let w = outcome(sync.append_batch(e, &refs), |l| l.0);
                let t = log.append_with(e, Payload::Group(g), Durability::Written, None);
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::AppendAt { epoch, delta, len } => {
                let e = epoch_for(cur, epoch);
                let at = Lsn((next as i64 + delta).max(0) as u64);
                let w = outcome(sync.append_at(e, at, &bytes(i, len)), |l| l.0);
                let t = log.append_at(e, at, Payload::One(bytes(i, len)), Durability::Durable);
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::TruncateAfter { epoch, back } => {
                let e = epoch_for(cur, epoch);
                let after = Lsn(next.saturating_sub(back).saturating_add(1).saturating_sub(1));
                let w = outcome(sync.truncate_after(e, after), |()| after.0 + 1);
                let t = log.truncate_after(e, after);
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::Reset { epoch, next } => {
                let e = epoch_for(cur, epoch);
                let w = outcome(sync.reset(e, Lsn(next)), |()| next);
                (w, outcome(log.reset(e, Lsn(next)), |t| t.lsn.0))
            }
            Op::SetMeta { key, len } => {
                let w = outcome(sync.set_meta(key, &bytes(i, len)), |()| next);
                (w, outcome(log.set_meta(key, &bytes(i, len), Durability::Durable), |t| t.lsn.0))
            }
            Op::AdvanceEpoch { by } => {
                let new = Epoch((cur.0 as i64 + by).max(0) as u64);
                let w = outcome(sync.advance_epoch(new), |()| next);
                (w, outcome(log.advance_epoch(new), |t| t.lsn.0))
            }
        };
        prop_assert_eq!(want, got, "op {} {:?}", i, op);
        if want.is_ok() {
            // The placement the submit side promised is the log's own.
            let reported = match op {
                Op::Append { .. } | Op::Group { .. } | Op::AppendAt { .. } => None,
                _ => Some(sync.next_lsn().0),
            };
            if let Some(n) = reported {
                prop_assert_eq!(want, Ok(n), "op {} {:?}", i, op);
            }
        }
    }
    for t in tickets {
        prop_assert!(t.wait_durable().is_ok(), "{:?}", t.wait_durable());
    }
    sync.close().unwrap();
    log.close().unwrap();
    let reopen_both = |st: &MemStorage| {
        let (w, _) =
            Wal::open_with(Arc::new(st.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
                .unwrap();
        let metas: Vec<Option<Vec<u8>>> = (0..20).map(|k| w.meta(k).map(<[u8]>::to_vec)).collect();
        (w.replay().unwrap().collect_entries().unwrap(), metas, w.epoch(), w.next_lsn())
    };
    prop_assert_eq!(reopen_both(&a), reopen_both(&b));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every operation exists on the I/O thread with the synchronous handle's checks, answers
    /// and placement (the submit side assigns every LSN once, in queue order), and both leave
    /// the same log.
    #[test]
    fn every_operation_answers_and_places_as_the_synchronous_handle_does(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        same_on_both(&ops)?;
    }
}

#[test]
fn operations_queued_behind_a_failed_sync_fail_and_later_ones_are_refused() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    log.append(Epoch(0), b"kept".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    let meta = log.set_meta(3, b"vote", Durability::Written).unwrap();
    let cut = log.truncate_after(Epoch(0), Lsn(0)).unwrap();
    // Asked for `Written`: its final word is the one a failed sync decides.
    assert!(matches!(meta.wait_durable(), Err(Failure::Indeterminate(_))), "{:?}", meta.wait_durable());
    assert!(matches!(cut.wait(), Err(Failure::Indeterminate(_))), "{:?}", cut.wait());
    st.faults().fail_sync_from = None;
    assert!(matches!(log.reset(Epoch(0), Lsn(9)), Err(Error::Fenced { .. })));
    assert!(matches!(log.advance_epoch(Epoch(1)), Err(Error::Fenced { .. })));
    assert!(log.close().is_err());
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed), vec![(1, b"kept".to_vec())]);
}

#[test]
fn disk_full_rejects_queued_operations_and_gives_their_position_back() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut durable = 0u64;
    let rejected = loop {
        let t =
            log.append_at(Epoch(0), log.next_lsn(), Payload::One(vec![7; 500]), Durability::Durable).unwrap();
        let cut = log.set_meta(1, &durable.to_le_bytes(), Durability::Durable).unwrap();
        match (t.wait(), cut.wait()) {
            (Ok(_), Ok(_)) => durable += 1,
            (Err(f), Err(g)) => {
                assert!(matches!(g, Failure::Rejected(_)), "{g:?}");
                break f;
            }
            other => panic!("an entry and the record queued after it disagree: {other:?}"),
        }
        assert!(durable < 1000, "never ran out of space");
    };
    assert!(matches!(rejected, Failure::Rejected(_)), "{rejected:?}");
    assert_eq!(log.next_lsn(), Lsn(durable + 1), "the rejected entry's LSN is the next one again");
    st.faults().capacity_bytes = None;
    log.truncate_after(Epoch(0), Lsn(durable - 1)).unwrap().wait().unwrap();
    let t =
        log.append_at(Epoch(0), Lsn(durable), Payload::One(b"after".to_vec()), Durability::Durable).unwrap();
    assert_eq!(t.wait(), Ok(Lsn(durable)));
    log.close().unwrap();
    let got = reopen(&st);
    assert_eq!(got.len() as u64, durable);
    assert_eq!(got.last().unwrap(), &(durable, b"after".to_vec()));
}

#[test]
fn a_written_replay_sees_every_operation_queued_before_it() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    for i in 1..=5u8 {
        log.append(Epoch(0), vec![i], Durability::Written).unwrap();
    }
    log.truncate_after(Epoch(0), Lsn(3)).unwrap();
    log.append_at(Epoch(0), Lsn(4), Payload::One(b"four".to_vec()), Durability::Written).unwrap();
    // Nothing waited on yet: the replay itself writes what is staged.
    let got = log.replay_from(Some(Lsn(2)), wal::Durability::Written).unwrap().collect_entries().unwrap();
    assert_eq!(got, vec![(2, vec![2]), (3, vec![3]), (4, b"four".to_vec())]);
    log.close().unwrap();
}

#[test]
fn abandon_leaves_what_a_crash_leaves_and_a_shared_handle_closes_once() {
    let clean = start(&MemStorage::new(), AsyncOptions::default());
    clean.close().unwrap();
    assert!(clean.close().is_ok(), "a second close of a cleanly closed log is Ok again");
    let st = MemStorage::new();
    let log = Arc::new(start(&st, AsyncOptions::default()));
    log.set_meta(2, b"term 5", Durability::Durable).unwrap().wait().unwrap();
    let durable = log.append(Epoch(0), b"durable".to_vec(), Durability::Durable).unwrap();
    durable.wait().unwrap();
    let other = log.clone();
    other.abandon();
    let after = log.append(Epoch(0), b"x".to_vec(), Durability::Durable);
    assert!(matches!(after, Err(Error::Fenced { .. } | Error::ReadOnly)), "{after:?}");
    assert!(matches!(log.close(), Err(Error::Fenced { .. })), "a close after an abandon says so");
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let (w, _) =
        Wal::open_with(Arc::new(crashed), Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    assert_eq!(w.meta(2), Some(&b"term 5"[..]));
    assert_eq!(w.replay().unwrap().collect_entries().unwrap(), vec![(1, b"durable".to_vec())]);
}

#[test]
fn a_checkpoint_is_checked_as_the_synchronous_handle_checks_it() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let lsn = log.append(Epoch(0), b"x".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    let cp =
        wal::Checkpoint { digest: [7; 32], entity_count: 1, digest_version: 1, state_machine_version: 1 };
    assert!(matches!(log.checkpoint(Epoch(1), lsn, &cp), Err(Error::EpochNotAdvanced { .. })));
    assert!(matches!(log.checkpoint(Epoch(0), Lsn(lsn.0 + 1), &cp), Err(Error::InvalidArgument(_))));
    log.advance_epoch(Epoch(2)).unwrap();
    assert!(matches!(log.checkpoint(Epoch(0), lsn, &cp), Err(Error::StaleEpoch { .. })));
    log.checkpoint(Epoch(2), lsn, &cp).unwrap();
    log.close().unwrap();
    let (w, _) =
        Wal::open_with(Arc::new(st), Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    let mut r = w.replay().unwrap();
    let mut found = Vec::new();
    while let Some(item) = r.next() {
        if let wal::ItemKind::Checkpoint(c) = item.unwrap().kind {
            found.push(c);
        }
    }
    assert_eq!(found, vec![cp], "the one accepted checkpoint is in the log");
}

#[test]
fn a_log_that_fences_on_disk_full_gives_nothing_up_quietly() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions { fence_on_disk_full: true, ..AsyncOptions::default() });
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut durable = 0u64;
    let failed = loop {
        let t = log.append(Epoch(0), vec![7; 500], Durability::Durable).unwrap();
        match t.wait() {
            Ok(_) => durable += 1,
            Err(f) => break f,
        }
        assert!(durable < 1000, "never ran out of space");
    };
    assert!(matches!(failed, Failure::Indeterminate(_)), "{failed:?}");
    st.faults().capacity_bytes = None;
    // Fenced: nothing is taken after the entry that was given up, even with space again.
    assert!(matches!(
        log.append_at(Epoch(0), Lsn(durable + 2), Payload::One(vec![1]), Durability::Durable),
        Err(Error::Fenced { .. })
    ));
    assert!(matches!(log.reset(Epoch(0), Lsn(100)), Err(Error::Fenced { .. })));
    assert!(log.close().is_err());
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed).len() as u64, durable, "every acknowledged entry, nothing else");
}

#[test]
fn a_user_batch_larger_than_a_segment_is_rejected_and_the_log_carries_on() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    log.append(Epoch(0), b"before".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    // Each entry fits a segment; together they do not (64 KiB segments).
    let group = Payload::Group(vec![vec![5; 40_000], vec![6; 40_000]]);
    let t = log.append_with(Epoch(0), group, Durability::Durable, None).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Rejected(_))), "{:?}", t.wait());
    let at = Payload::Group(vec![vec![5; 40_000], vec![6; 40_000]]);
    let t = log.append_at(Epoch(0), Lsn(2), at, Durability::Durable).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Rejected(_))), "{:?}", t.wait());
    // Not fenced, and the refused entries' LSNs are given again.
    let next = log.append(Epoch(0), b"after".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    assert_eq!(next, Lsn(2));
    log.close().unwrap();
    assert_eq!(reopen(&st), vec![(1, b"before".to_vec()), (2, b"after".to_vec())]);
}
