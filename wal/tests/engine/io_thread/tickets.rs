//! Tickets and group commit: shared syncs, a full queue, a failed sync that fences, refusals
//! that take no LSN, completion channels, sync latency, and an append that only enqueues.

use super::{open_unprepared, reopen, start, start_on_sync_thread};
use std::future::Future;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Error, Failure, Lsn, Ticket, WhenFull};
use wal_sim::{MemStorage, SectorFate};

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
    // A sync takes no place but is admitted only with room, as its doc says.
    assert!(matches!(log.sync(), Err(Error::Busy)));
    assert!(a.poll_outcome().is_none(), "resolved before its sync completed");
    go_tx.send(()).unwrap();
    assert_eq!(a.wait(), Ok(Lsn(1)));
    assert_eq!(b.wait(), Ok(Lsn(2)), "the refused append consumed an LSN");
    log.close().unwrap();
}

/// A writer (queue of two, `WhenFull::Wait`) whose queue is full: "a" (LSN 1) in its sync,
/// held on the storage's sync thread until the returned guard drops, and "b" (LSN 2) queued.
fn full_queue_behind_a_held_sync(st: &MemStorage) -> (Arc<AsyncWal>, wal_sim::HeldSync, Ticket, Ticket) {
    let opts = AsyncOptions { queue_entries: 2, when_full: WhenFull::Wait, ..AsyncOptions::default() };
    let log = Arc::new(start_on_sync_thread(st, opts));
    let release = st.hold_next_sync();
    let a = log.append(Epoch(0), b"a".to_vec(), Durability::Durable).unwrap();
    assert!(st.wait_sync_held(Duration::from_secs(20)), "the sync of the first batch never started");
    let b = log.append(Epoch(0), b"b".to_vec(), Durability::Durable).unwrap();
    (log, release, a, b)
}

/// The default when the queue is full: the append waits for room and takes its LSN once it
/// is admitted. With the first sync held, a third append on a queue of two blocks; it returns
/// once the held batch resolves and frees its places, at the next LSN. A release wakes only
/// appends that wait, so this also checks the waiter is counted (it would sleep forever if not).
#[test]
fn a_full_queue_makes_the_append_wait_for_room_then_admits_it() {
    let st = MemStorage::new();
    let (log, release, a, b) = full_queue_behind_a_held_sync(&st);
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let log = log.clone();
        std::thread::spawn(move || {
            let t = log.append(Epoch(0), b"c".to_vec(), Durability::Durable);
            let _ = tx.send(t.map(|t| t.lsn));
        })
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "an append on a full queue returned while the queue was still full"
    );
    drop(release);
    let c = rx.recv_timeout(Duration::from_secs(20)).expect("the waiting append was never woken");
    assert_eq!(c.unwrap(), Lsn(3));
    waiter.join().unwrap();
    assert_eq!(a.wait(), Ok(Lsn(1)));
    assert_eq!(b.wait(), Ok(Lsn(2)));
    log.close().unwrap();
    let got: Vec<u64> = reopen(&st).into_iter().map(|(l, _)| l).collect();
    assert_eq!(got, vec![1, 2, 3]);
}

/// Two faults at once: appends and a sync wait for room on a full queue while the sync in flight
/// fails. Every waiter returns (none sleeps forever): refused as fenced, or admitted with a
/// ticket that resolves Indeterminate; nothing after the failed sync is acknowledged, and the
/// log refuses what comes next.
#[test]
fn waiters_for_room_are_all_released_when_the_sync_in_flight_fails() {
    let st = MemStorage::new();
    let (log, release, a, b) = full_queue_behind_a_held_sync(&st);
    let (tx, rx) = mpsc::channel();
    let waiters: Vec<_> = (0..3u8)
        .map(|i| {
            let (log, tx) = (log.clone(), tx.clone());
            std::thread::spawn(move || {
                let t = if i == 2 { log.sync() } else { log.append(Epoch(0), vec![i], Durability::Durable) };
                let _ = tx.send(t.map(|t| t.wait()));
            })
        })
        .collect();
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "a waiter returned on a full queue");
    // The held sync (the next one the storage runs) fails once released.
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    drop(release);
    for _ in 0..3 {
        match rx.recv_timeout(Duration::from_secs(20)).expect("a waiter for room was never released") {
            Err(e) => assert!(matches!(e, Error::Fenced { .. }), "{e}"),
            Ok(outcome) => assert!(matches!(outcome, Err(Failure::Indeterminate(_))), "{outcome:?}"),
        }
    }
    for w in waiters {
        w.join().unwrap();
    }
    assert!(matches!(a.wait(), Err(Failure::Indeterminate(_))));
    assert!(matches!(b.wait(), Err(Failure::Indeterminate(_))));
    assert!(matches!(log.sync(), Err(Error::Fenced { .. })));
    st.faults().fail_sync_from = None;
    assert!(log.close().is_err());
}

/// A `Written` entry gives its place in the queue back once it is written, before its sync:
/// the queue bounds what waits to be written. A `Durable` entry keeps its place until durable.
/// With the first sync held on the storage's sync thread and a queue of two entries, written
/// entries keep being taken (each written, none durable yet) where the old accounting answered
/// Busy at the second; a second durable entry still finds the queue full.
#[test]
fn a_written_entry_frees_its_queue_place_once_written() {
    let st = MemStorage::new();
    // Every append written at once, also while a sync is in flight.
    let opts = AsyncOptions {
        queue_entries: 2,
        when_full: WhenFull::Busy,
        overlap_write_bytes: 0,
        ..AsyncOptions::default()
    };
    let log = start_on_sync_thread(&st, opts);
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

/// Every `log` record this test binary's logger was given: (target, level, message).
static LOGGED: std::sync::Mutex<Vec<(String, log::Level, String)>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        let mut v = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
        v.push((r.target().to_string(), r.level(), r.args().to_string()));
    }
    fn flush(&self) {}
}

/// A slow fdatasync is reported to the application's logger (the `log` facade, target `wal`),
/// never written to stderr by the library, and counted.
#[test]
fn a_slow_sync_is_a_warning_through_the_log_facade() {
    // Another test of this binary may have installed it first: either way it is this one.
    let _ = log::set_logger(&Capture);
    log::set_max_level(log::LevelFilter::Trace);
    let st = Arc::new(SlowSync { inner: MemStorage::new() });
    let log = open_unprepared(st);
    let opts = AsyncOptions { slow_sync: Duration::from_millis(10), ..AsyncOptions::default() };
    let log = AsyncWal::start(log, opts).unwrap();
    log.append(Epoch(0), vec![1; 100], Durability::Durable).unwrap().wait().unwrap();
    let slow = log.stats().slow_syncs;
    log.close().unwrap();
    assert!(slow >= 1);
    let v = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        v.iter().any(|(t, l, m)| t == "wal" && *l == log::Level::Warn && m.starts_with("slow fdatasync: ")),
        "{v:?}"
    );
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
    let log = Arc::new(start_on_sync_thread(&st, AsyncOptions::default()));
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
