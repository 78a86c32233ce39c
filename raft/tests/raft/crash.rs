//! Crash tests on the durable image (docs/invariants.md I3 for the Raft log).
//!
//! The log runs over `MemStorage`, which keeps a durable image beside the live bytes (a sync
//! copies dirty sectors into it; names become durable with a directory sync). "Crash" = build the
//! storage a restart would find from the durable image (every unsynced sector old, new, or a mix),
//! reopen the adapter on it and read what openraft would read at startup: the vote, the log
//! state, the entries, the committed id. openraft's storage suite never restarts a store, so
//! none of this is covered there.

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::vote::RaftLeaderIdExt;
use openraft::{EntryPayload, RaftTypeConfig, StorageHelper};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wal_raft::{log_options, Entry, LogId, LogStore, Request, StateMachineStore, TypeConfig, Vote};
use wal_sim::{MemState, MemStorage, SectorFate};

const T: Duration = Duration::from_secs(20);

async fn t<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("timed out")
}

fn opts() -> wal::Options {
    let mut o = log_options(64 << 10);
    o.prepare_in_background = false;
    o
}

fn lid(term: u64, index: u64) -> LogId {
    LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry {
    Entry { log_id: lid(term, index), payload: EntryPayload::Blank }
}

/// A catalog create of metalake `name` at `index`.
fn create(term: u64, index: u64, name: &str) -> Entry {
    let cmd = catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: name.into(),
        props: vec![],
    };
    Entry::new_normal(lid(term, index), Request::command(&cmd, None))
}

/// A catalog create at `index` (term 1) carrying `props` bytes of properties.
fn sized(index: u64, props: usize) -> Entry {
    let cmd = catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: format!("m{index}"),
        props: vec![7; props],
    };
    Entry::new_normal(lid(1, index), Request::command(&cmd, None))
}

/// Appends and waits for the durability callback.
async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    let (tx, rx) = TypeConfig::oneshot();
    t(log.append(entries, IOFlushed::signal(tx))).await.expect("append");
    t(rx).await.expect("callback dropped").expect("flush failed");
}

/// What openraft reads from a log store at startup.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Seen {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    last: Option<LogId>,
    entries: Vec<Vec<u8>>,
}

async fn seen(log: &mut LogStore) -> Seen {
    let st = t(log.get_log_state()).await.unwrap();
    let entries = t(log.try_get_log_entries(0..)).await.unwrap();
    Seen {
        vote: t(log.read_vote()).await.unwrap(),
        committed: t(log.read_committed()).await.unwrap(),
        purged: st.last_purged_log_id,
        last: st.last_log_id,
        entries: entries.iter().map(|e| wal_raft::encode_entry(e).unwrap()).collect(),
    }
}

/// The durable image as a restart finds it, every unsynced sector as `fate` says.
fn crash(mem: &MemStorage, fate: SectorFate) -> Arc<MemStorage> {
    Arc::new(mem.state().crash(|_, _| fate))
}

async fn reopen(mem: &MemStorage) -> LogStore {
    LogStore::open_with(crash(mem, SectorFate::Old), opts()).expect("reopen after crash")
}

fn fresh() -> (Arc<MemStorage>, LogStore) {
    let mem = Arc::new(MemStorage::new());
    let log = LogStore::open_with(mem.clone(), opts()).unwrap();
    (mem, log)
}

#[tokio::test]
async fn vote_is_durable_when_save_vote_returns() {
    let (mem, mut log) = fresh();
    for term in 1..=3 {
        let v = Vote::new(term, term);
        t(log.save_vote(&v)).await.unwrap();
        for fate in [SectorFate::Old, SectorFate::New] {
            let mut again = LogStore::open_with(crash(&mem, fate), opts()).unwrap();
            assert_eq!(t(again.read_vote()).await.unwrap(), Some(v), "term {term}, {fate:?}");
            again.abandon();
        }
    }
    log.abandon();
}

#[tokio::test]
async fn appended_entries_are_durable_when_the_callback_fires() {
    let (mem, mut log) = fresh();
    append(&mut log, vec![blank(1, 0)]).await;
    append(&mut log, (1..=5).map(|i| create(1, i, &format!("m{i}"))).collect()).await;
    // The image right when the callback fired (nothing else queued since).
    let image = crash(&mem, SectorFate::Old);
    let live = seen(&mut log).await;
    assert_eq!(live.last, Some(lid(1, 5)));
    assert_eq!(live.entries.len(), 6);
    let mut again = LogStore::open_with(image, opts()).unwrap();
    assert_eq!(seen(&mut again).await, live, "every entry whose callback fired survives");
    // The reopened log goes on at the next index.
    append(&mut again, vec![blank(2, 6)]).await;
    assert_eq!(t(again.get_log_state()).await.unwrap().last_log_id, Some(lid(2, 6)));
    again.abandon();
    log.abandon();
}

/// The callback fires only after the fdatasync: while the sync is held, the callback has not
/// fired and the durable image does not hold the entry; once it completes, both.
#[tokio::test]
async fn append_callback_never_fires_before_the_fdatasync() {
    let mem = Arc::new(MemStorage::new());
    let mut log = LogStore::open_with(mem.clone(), opts()).unwrap();
    append(&mut log, vec![blank(1, 0)]).await;
    mem.set_sync_thread(true).unwrap();
    // Released on any exit, so a failing assertion cannot leave the writer stuck.
    let _release = mem.hold_next_sync();
    let (tx, rx) = TypeConfig::oneshot();
    let (seen_tx, mut fired) = tokio::sync::oneshot::channel();
    t(log.append(vec![blank(1, 1)], IOFlushed::signal(tx))).await.unwrap();
    let waiter = tokio::spawn(async move {
        let r = rx.await;
        let _ = seen_tx.send(r.map(|r| r.is_ok()).unwrap_or(false));
    });
    assert!(mem.wait_sync_held(T), "the writer never synced");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(fired.try_recv().is_err(), "the callback fired while its fdatasync was still held");
    let mut before = reopen(&mem).await;
    assert_eq!(seen(&mut before).await.last, Some(lid(1, 0)), "not durable yet");
    before.abandon();
    mem.release_held_sync();
    assert!(t(fired).await.unwrap(), "the flush failed");
    t(waiter).await.unwrap();
    let mut after = reopen(&mem).await;
    assert_eq!(seen(&mut after).await.last, Some(lid(1, 1)));
    after.abandon();
    log.abandon();
}

/// openraft reads an entry right after appending it (a leader's replication streams, the state
/// machine worker): such a read returns the entry while the fdatasync covering it is still held
/// (it is served from the entries kept in memory). Through the writer's queue it would wait for
/// that sync, which made the leader's sync and its followers' syncs serial.
#[tokio::test]
async fn a_read_of_an_appended_entry_does_not_wait_for_its_fdatasync() {
    let mem = Arc::new(MemStorage::new());
    let mut log = LogStore::open_with(mem.clone(), opts()).unwrap();
    append(&mut log, vec![blank(1, 0)]).await;
    mem.set_sync_thread(true).unwrap();
    // Released on any exit, so a failing assertion cannot leave the writer stuck.
    let _release = mem.hold_next_sync();
    let (tx, rx) = TypeConfig::oneshot();
    t(log.append(vec![create(1, 1, "a"), create(1, 2, "b")], IOFlushed::signal(tx))).await.unwrap();
    assert!(mem.wait_sync_held(T), "the writer never synced");
    let mut reader = log.get_log_reader().await;
    let got = tokio::time::timeout(Duration::from_secs(5), reader.try_get_log_entries(0..3))
        .await
        .expect("the read waited for the held fdatasync")
        .unwrap();
    assert_eq!(got.iter().map(|e| e.log_id).collect::<Vec<_>>(), vec![lid(1, 0), lid(1, 1), lid(1, 2)]);
    assert_eq!(got[1], create(1, 1, "a"));
    mem.release_held_sync();
    t(rx).await.expect("callback dropped").expect("flush failed");
    log.abandon();
}

#[tokio::test]
async fn truncate_after_is_durable_when_it_returns() {
    let (mem, mut log) = fresh();
    append(&mut log, (0..=10).map(|i| blank(1, i)).collect()).await;
    t(log.truncate_after(Some(lid(1, 5)))).await.unwrap();
    let live = seen(&mut log).await;
    assert_eq!((live.last, live.entries.len()), (Some(lid(1, 5)), 6));
    for fate in [SectorFate::Old, SectorFate::New] {
        let mut again = LogStore::open_with(crash(&mem, fate), opts()).unwrap();
        assert_eq!(seen(&mut again).await, live, "{fate:?}: the cut entries stay cut");
        again.abandon();
    }
    // A new leader's entries replace the cut ones, durably.
    append(&mut log, (6..=7).map(|i| blank(2, i)).collect()).await;
    let mut again = reopen(&mem).await;
    let st = t(again.get_log_state()).await.unwrap();
    assert_eq!(st.last_log_id, Some(lid(2, 7)));
    let e = t(again.try_get_log_entries(5..8)).await.unwrap();
    assert_eq!(e.iter().map(|e| e.log_id()).collect::<Vec<_>>(), vec![lid(1, 5), lid(2, 6), lid(2, 7)]);
    again.abandon();
    // Everything cut: the log is empty and takes any index again.
    t(log.truncate_after(None)).await.unwrap();
    let mut again = reopen(&mem).await;
    let s = seen(&mut again).await;
    assert_eq!((s.last, s.entries.len()), (None, 0));
    append(&mut again, vec![blank(3, 4)]).await;
    again.abandon();
    log.abandon();
}

#[tokio::test]
async fn purge_is_durable_when_it_returns() {
    let (mem, mut log) = fresh();
    // Enough bytes for several 64 KiB segments, so the purge also removes files.
    let big = |i: u64| sized(i, 2000);
    for chunk in 0..8 {
        append(&mut log, (chunk * 10..chunk * 10 + 10).map(big).collect()).await;
    }
    t(log.purge(lid(1, 49))).await.unwrap();
    let live = seen(&mut log).await;
    assert_eq!((live.purged, live.last, live.entries.len()), (Some(lid(1, 49)), Some(lid(1, 79)), 30));
    let mut again = reopen(&mem).await;
    assert_eq!(seen(&mut again).await, live);
    assert_eq!(t(again.try_get_log_entries(40..52)).await.unwrap().len(), 2, "nothing at or below the purge");
    again.abandon();
    // Purging past the last entry leaves an empty log whose last id is the purged one.
    t(log.purge(lid(1, 90))).await.unwrap();
    let mut again = reopen(&mem).await;
    let s = seen(&mut again).await;
    assert_eq!((s.purged, s.last, s.entries.len()), (Some(lid(1, 90)), Some(lid(1, 90)), 0));
    append(&mut again, vec![blank(2, 91)]).await;
    assert_eq!(t(again.get_log_state()).await.unwrap().last_log_id, Some(lid(2, 91)));
    again.abandon();
    log.abandon();
}

/// The committed id is a restart hint: `save_committed` queues it behind the entries it covers
/// and returns without waiting; it is durable with the next sync (a later write's, or the
/// writer's own at most `written_sync_delay` later). A crash before that finds the previous
/// one, never a value past the log. A restart re-applies exactly the committed entries through
/// the state machine's apply (openraft's `get_initial_state`).
#[tokio::test]
async fn committed_is_durable_with_the_next_sync_and_restart_reapplies_up_to_it() {
    let (mem, mut log) = fresh();
    append(&mut log, vec![blank(1, 0)]).await;
    append(&mut log, (1..=6).map(|i| create(1, i, &format!("m{i}"))).collect()).await;
    t(log.save_committed(Some(lid(1, 2)))).await.unwrap();
    // A later write that waits for its sync carries the committed id with it.
    t(log.save_vote(&Vote::new(1, 1))).await.unwrap();
    let mut again = reopen(&mem).await;
    assert_eq!(t(again.read_committed()).await.unwrap(), Some(lid(1, 2)));
    again.abandon();
    // With no later write, the writer's own sync makes it durable within the delay.
    let before = mem.faults().syncs_seen;
    t(log.save_committed(Some(lid(1, 4)))).await.unwrap();
    let mut image = reopen(&mem).await;
    let lagging = t(image.read_committed()).await.unwrap();
    image.abandon();
    assert!(
        [Some(lid(1, 2)), Some(lid(1, 4))].contains(&lagging),
        "a crash right after save_committed found {lagging:?}: only the previous or the new id"
    );
    let waited = std::time::Instant::now();
    while mem.faults().syncs_seen == before {
        assert!(waited.elapsed() < Duration::from_secs(10), "the committed id was never synced");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut again = reopen(&mem).await;
    assert_eq!(t(again.read_committed()).await.unwrap(), Some(lid(1, 4)));
    let mut sm = StateMachineStore::open(None).unwrap();
    let state = t(StorageHelper::new(&mut again, &mut sm).with_id(1).get_initial_state()).await.unwrap();
    assert_eq!(state.local_committed(), Some(&lid(1, 4)));
    assert_eq!(t(sm.applied_state()).await.unwrap().0, Some(lid(1, 4)));
    let names: Vec<String> = sm.catalog().iter().map(|e| e.name().to_string()).collect();
    assert_eq!(names, ["m1", "m2", "m3", "m4"], "committed entries re-applied, and only those");
    assert_eq!(seen(&mut again).await.last, Some(lid(1, 6)), "uncommitted entries stay in the log");
    again.abandon();
    log.abandon();
}

/// Every sync of a seeded workload (appends, votes, committed ids, truncations, purges, each
/// waited for): a crash just before the sync takes effect, with every unsynced sector old, new
/// or a seeded mix. The reopened log must show exactly the state after the last acknowledged
/// operation, or after the one in flight, or (an append in flight) a prefix of its entries:
/// never less than acknowledged, never a hole, never another mix.
#[tokio::test]
async fn crash_at_every_sync_keeps_every_acknowledged_operation() {
    let mem = Arc::new(MemStorage::new());
    let mut log = LogStore::open_with(mem.clone(), opts()).unwrap();
    let points: Arc<Mutex<Vec<(u64, MemState)>>> = Arc::default();
    let syncs = Arc::new(AtomicU64::new(0));
    {
        let (points, syncs) = (points.clone(), syncs.clone());
        mem.set_sync_observer(move |p: wal_sim::CrashPoint| {
            // Counted here (p.sync_index also counts the syncs that created the log).
            let j = syncs.fetch_add(1, Ordering::SeqCst);
            points.lock().unwrap().push((j, p.state));
        });
    }
    // models[k] = what a reader saw after operation k was acknowledged; acked_at[k] = syncs
    // observed by then (every later crash point is after the sync that covered it).
    let mut models = vec![seen(&mut log).await];
    let mut acked_at = vec![0u64];
    let mut next = 0u64;
    let mut term = 1u64;
    for step in 0..28u64 {
        match step % 7 {
            0 | 1 | 3 => {
                let n = 1 + step % 3;
                let entries = (next..next + n).map(|i| create(term, i, &format!("s{step}-{i}"))).collect();
                append(&mut log, entries).await;
                next += n;
            }
            2 => {
                term += 1;
                t(log.save_vote(&Vote::new(term, 1))).await.unwrap();
            }
            4 => {
                let c = next.saturating_sub(2);
                let e = t(log.try_get_log_entries(c..=c)).await.unwrap();
                t(log.save_committed(e.first().map(|e| e.log_id()))).await.unwrap();
            }
            5 => {
                // Cut the last entry (a conflicting suffix).
                let st = t(log.get_log_state()).await.unwrap();
                if let Some(last) = st.last_log_id.filter(|l| st.last_purged_log_id != Some(*l)) {
                    let after = last.index.saturating_sub(1);
                    let keep = t(log.try_get_log_entries(after..=after)).await.unwrap();
                    t(log.truncate_after(keep.first().map(|e| e.log_id()))).await.unwrap();
                    next = last.index;
                }
            }
            _ => {
                let st = t(log.get_log_state()).await.unwrap();
                if let Some(last) = st.last_log_id {
                    if last.index >= 2 {
                        let upto = t(log.try_get_log_entries(last.index - 2..=last.index - 2)).await.unwrap();
                        if let Some(e) = upto.first() {
                            t(log.purge(e.log_id())).await.unwrap();
                        }
                    }
                }
            }
        }
        // Taken as soon as the operation was acknowledged, before the reads below.
        acked_at.push(syncs.load(Ordering::SeqCst));
        models.push(seen(&mut log).await);
    }
    log.abandon();
    let points = std::mem::take(&mut *points.lock().unwrap());
    assert!(points.len() > 20, "only {} syncs observed", points.len());
    let mut checked = 0;
    for (j, state) in &points {
        // Operations acknowledged before sync j was even submitted.
        let k = acked_at.iter().rposition(|&m| m <= *j).unwrap_or(0);
        let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ j;
        let mut fates: Vec<Box<dyn FnMut(u64, u64) -> SectorFate>> =
            vec![Box::new(|_, _| SectorFate::Old), Box::new(|_, _| SectorFate::New)];
        for _ in 0..3 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let s = seed;
            fates.push(Box::new(move |n, sec| {
                if (s ^ n.wrapping_mul(31) ^ sec.wrapping_mul(0x9E37)).count_ones().is_multiple_of(2) {
                    SectorFate::New
                } else {
                    SectorFate::Old
                }
            }));
        }
        for (f, fate) in fates.iter_mut().enumerate() {
            let img = Arc::new(state.crash(&mut *fate));
            let mut again = LogStore::open_with(img, opts())
                .unwrap_or_else(|e| panic!("sync {j}, fate {f}: the crash image does not open: {e}"));
            let s = seen(&mut again).await;
            again.abandon();
            // The committed id is a hint that may lag (never waited for): any value saved so
            // far, or none; everything else exactly as acknowledged.
            let saved: Vec<Option<LogId>> = models.iter().take(k + 2).map(|m| m.committed).collect();
            assert!(
                saved.contains(&s.committed),
                "sync {j}, fate {f}: committed {:?} was never saved",
                s.committed
            );
            let hint = |m: &Seen| Seen { committed: s.committed, ..m.clone() };
            // An append in flight may also survive in part: a prefix of its entries (each is
            // its own record, and the writer may have written them in more than one batch;
            // recovery keeps a prefix of the log, never a hole).
            let part_of_append = models.get(k + 1).is_some_and(|next| {
                let (before, after) = (&models[k].entries, &next.entries);
                let n = s.entries.len();
                after.starts_with(&s.entries)
                    && s.entries.starts_with(before)
                    && n > before.len()
                    && n < after.len()
                    && s.last.map(|l| l.index) == next.last.map(|l| l.index - (after.len() - n) as u64)
                    && Seen { entries: Vec::new(), last: None, ..hint(next) }
                        == Seen { entries: Vec::new(), last: None, ..s.clone() }
            });
            let ok =
                s == hint(&models[k]) || models.get(k + 1).map(hint) == Some(s.clone()) || part_of_append;
            assert!(
                ok,
                "sync {j}, fate {f}: recovered {s:?}\nexpected op {k}: {:?}\nor op {}: {:?}",
                models[k],
                k + 1,
                models.get(k + 1)
            );
            checked += 1;
        }
    }
    eprintln!("{} syncs, {checked} crash images checked", points.len());
}

/// Disk full in the middle of an append (three entries, the second one's segment cannot be
/// made): the callback reports the failure, every later write fails (the store fences rather
/// than let a later entry or reset be taken after an earlier one was given up), and the
/// reopened log holds what was acknowledged before, with no hole.
#[tokio::test]
async fn disk_full_inside_an_append_fails_it_and_every_later_write() {
    let (mem, mut log) = fresh();
    append(&mut log, vec![blank(1, 0)]).await;
    let before = seen(&mut log).await;
    // Room for the first segment and wal.meta only: the next rotation cannot get a segment.
    mem.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let big = |i: u64| sized(i, 30_000);
    let (tx, rx) = TypeConfig::oneshot();
    let queued = t(log.append((1..=3).map(big).collect::<Vec<_>>(), IOFlushed::signal(tx))).await;
    let flushed = match queued {
        Ok(()) => t(rx).await.expect("callback dropped"),
        Err(e) => Err(e),
    };
    assert!(flushed.is_err(), "an append the disk could not hold was reported durable");
    mem.faults().capacity_bytes = None;
    assert!(t(log.save_vote(&Vote::new(2, 1))).await.is_err(), "a write after the failure succeeded");
    assert!(t(log.purge(lid(1, 0))).await.is_err(), "a purge after the failure succeeded");
    log.abandon();
    let mut again = reopen(&mem).await;
    let s = seen(&mut again).await;
    let n = s.entries.len();
    assert!(n >= before.entries.len(), "an entry acknowledged before the failure is gone");
    assert_eq!(s.last.map(|l| l.index + 1), Some(n as u64), "entries 0..{n} with no hole");
    again.abandon();
}
