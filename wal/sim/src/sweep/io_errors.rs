//! The I/O-error classes: `sync-eio` (fdatasync fails, on both APIs), `disk-full`,
//! `syscall-fail` and `read-error`, with the check of the images a crash leaves after them.

use super::model::candidates;
use super::oracle::{Oracle, ZERO};
use super::workload::{command, new_model, opts, run_workload, Plan, Ran};
use super::{files_of, Cases, Class, Files, Only, Summary, SEG};
use crate::workload::history::{seeded, History, Op as HOp};
use crate::{Call, FailCall, MemStorage, SectorFate};
use std::collections::BTreeSet;
use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, CrcVerdict, Durability, Epoch, Error, Failure, Lsn, Payload, Wal};

/// The oracle over the images a crash leaves of `st` now: only durable bytes, and every
/// unsynced sector new (the page cache written back).
fn check_now(st: &MemStorage, ran: &Ran, ctx: &str, sum: &mut Summary, class: Class) {
    let cands = candidates(&ran.hist, ran.acked, ran.staged);
    let state = st.state();
    for fate in [SectorFate::Old, SectorFate::New] {
        let img = state.crash(|_, _| fate);
        let o = Oracle {
            candidates: &cands,
            allow: ZERO,
            purging: ran.purged,
            snapshots: &ran.snapshots,
            carry_on: true,
        };
        let seen =
            o.check(&img).unwrap_or_else(|e| panic!("{ctx}: image with unsynced sectors {fate:?}: {e}"));
        sum.acked_checked += seen.acked;
        sum.checkpoints_checked += seen.checkpoints;
        if let Some(v) = seen.verdict {
            sum.verdict(class, v);
        }
    }
}

pub(super) fn faulty(seed: u64, short_writes: bool) -> MemStorage {
    let st = MemStorage::new();
    let mut f = st.faults();
    f.seed = Some(seed ^ 0x5151);
    f.short_write_max = short_writes.then_some(4096);
    drop(f);
    st
}

/// fdatasync fails at the k-th call (once, or from then on), for every k of the workload.
pub fn sync_eio_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::SyncEio, only);
    let plan = Plan::short(seed);
    let clean = faulty(seed, plan.short_writes);
    run_workload(&clean, &plan, &new_model());
    let syncs = clean.faults().syncs_seen;
    for k in 0..syncs.min(24) {
        let Some(n) = cases.take() else { continue };
        let transient = (seed + k).is_multiple_of(2);
        let what = format!("synchronous API, fdatasync #{k} fails{}", if transient { " once" } else { "" });
        let ctx = cases.ctx(n, &what);
        let st = faulty(seed, plan.short_writes);
        {
            let mut f = st.faults();
            f.fail_sync_from = Some(k);
            f.fail_sync_until = transient.then_some(k + 1);
        }
        let ran = run_workload(&st, &plan, &new_model());
        match &ran.error {
            Some((_, true)) => {}
            other => panic!("{ctx}: the failed sync did not fence the log: {other:?}"),
        }
        match &ran.later_refused {
            Some(Ok(())) => {}
            None if !ran.opened || ran.close_failed => {}
            other => panic!("{ctx}: {other:?}"),
        }
        if st.faults().syncs_seen != k + 1 {
            panic!("{ctx}: {} syncs after the failed one", st.faults().syncs_seen - k - 1);
        }
        check_now(&st, &ran, &ctx, sum, Class::SyncEio);
        *sum.cases.entry(Class::SyncEio.name()).or_default() += 1;
        sum.fault("fdatasync EIO", 1);
    }
    // Through the I/O thread: every ticket not durable before the failure is Indeterminate,
    // for every k up to a little past the syncs a run without faults issues (the I/O thread
    // batches by timing, so the count varies), the failure once or from then on.
    let probe = faulty(seed, plan.short_writes);
    let _ = io_thread_eio_run(&probe, seed, u64::MAX);
    let syncs = probe.faults().syncs_seen;
    for k in 0..(syncs + 2).min(32) {
        let Some(n) = cases.take() else { continue };
        let transient = (seed + k).is_multiple_of(2);
        let what = format!("I/O thread, fdatasync #{k} fails{}", if transient { " once" } else { "" });
        let ctx = cases.ctx(n, &what);
        let st = faulty(seed, plan.short_writes);
        {
            let mut f = st.faults();
            f.fail_sync_from = Some(k);
            f.fail_sync_until = transient.then_some(k + 1);
        }
        let Some(EioRun { hist, outcomes, fenced, syncs_before_close }) = io_thread_eio_run(&st, seed, k)
        else {
            // The log's creation synced: a failure there is an error to the caller, no log.
            *sum.cases.entry(Class::SyncEio.name()).or_default() += 1;
            continue;
        };
        let ok = outcomes.iter().take_while(|o| o.is_ok()).count();
        if !outcomes[ok..].iter().all(|o| matches!(o, Err(Failure::Indeterminate(_)))) {
            panic!("{ctx}: after the failed sync a ticket was not Indeterminate: {:?}", &outcomes[ok..]);
        }
        let failed = syncs_before_close > k;
        if failed != fenced {
            panic!("{ctx}: the sync failed: {failed}, the log fenced: {fenced}");
        }
        if fenced && st.faults().syncs_seen != k + 1 {
            panic!("{ctx}: a sync was issued after the failed one (no retry, even of a transient failure)");
        }
        let ran = Ran {
            st: st.clone(),
            acked: ok,
            staged: hist.len(),
            hist,
            purged: false,
            snapshots: Vec::new(),
            error: None,
            stale_rejected: 0,
            later_refused: None,
            opened: true,
            close_failed: false,
            mid: None,
        };
        check_now(&st, &ran, &ctx, sum, Class::SyncEio);
        *sum.cases.entry(Class::SyncEio.name()).or_default() += 1;
        sum.fault("fdatasync EIO", u64::from(fenced));
        sum.fault("tickets Indeterminate", (outcomes.len() - ok) as u64);
    }
}

struct EioRun {
    hist: History,
    outcomes: Vec<Result<Lsn, Failure>>,
    fenced: bool,
    syncs_before_close: u64,
}

/// Forty durable appends through the I/O thread, at most five in flight, every third one by
/// `append_wait` (a round on this thread when the I/O thread is idle); `None` when the log
/// could not be created. What was staged, every ticket's outcome in LSN order, and whether
/// the log ended fenced, and the syncs issued before the close.
fn io_thread_eio_run(st: &MemStorage, seed: u64, k: u64) -> Option<EioRun> {
    let ctx = format!("seed {seed}, I/O thread, fdatasync #{k} fails");
    let wal = match Wal::open_with(Arc::new(st.clone()), opts(seed)) {
        Ok((w, _)) => w,
        Err(e) => {
            assert!(matches!(e, Error::Io { .. }), "{ctx}: {e}");
            return None;
        }
    };
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let mut rng = seeded(seed ^ k);
    let mut hist = History::new();
    let mut tickets = std::collections::VecDeque::<wal::Ticket>::new();
    let mut outcomes = Vec::new();
    for i in 0..40u64 {
        let p = command(&mut rng, i);
        let lsn = log.next_lsn().0;
        let appended = if i % 3 == 2 {
            // Its ticket comes back resolved; the ones before it are then resolved too.
            outcomes.extend(tickets.drain(..).map(|t| t.wait()));
            log.append_wait(Epoch(0), Payload::One(p.clone()))
        } else {
            log.append(Epoch(0), p.clone(), Durability::Durable)
        };
        match appended {
            Ok(t) => {
                assert_eq!(t.lsn.0, lsn, "{ctx}");
                hist.push(HOp::Put(lsn, p), true);
                tickets.push_back(t);
            }
            Err(Error::Fenced { .. }) => break,
            Err(e) => panic!("{ctx}: append: {e}"),
        }
        if tickets.len() > 4 {
            outcomes.extend(tickets.pop_front().map(|t| t.wait()));
        }
    }
    outcomes.extend(tickets.into_iter().map(|t| t.wait()));
    let fenced = log.fenced().is_some();
    let syncs = st.faults().syncs_seen;
    let _ = log.close();
    Some(EioRun { hist, outcomes, fenced, syncs_before_close: syncs })
}

/// The device fills at a seeded point: the refused operation is DiskFull, nothing is fenced,
/// everything acknowledged stays, and the log carries on once space returns.
pub fn disk_full_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::DiskFull, only);
    let mut rng = seeded(seed ^ 0xf011);
    for segs in 1..=3u64 {
        let Some(n) = cases.take() else { continue };
        let cap = segs * u64::from(SEG) + rng.below(u64::from(SEG));
        let ctx = cases.ctx(n, &format!("capacity {cap} bytes"));
        let plan = Plan { steps: 150, segments: 5, cuts: false, ..Plan::short(seed) };
        let st = faulty(seed, plan.short_writes);
        st.faults().capacity_bytes = Some(cap);
        let ran = run_workload(&st, &plan, &new_model());
        match &ran.error {
            Some((Error::DiskFull { .. }, false)) => {}
            None => {}
            Some((e, p)) => panic!("{ctx}: disk full gave {e} (fenced: {p})"),
        }
        check_now(&st, &ran, &ctx, sum, Class::DiskFull);
        // Space returns: the log opens, takes an entry, closes and has it.
        st.faults().capacity_bytes = None;
        if ran.acked > 0 {
            let (mut log, _) =
                Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let at = log.append(log.epoch(), b"space again").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            log.close().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let (log, _) = Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap();
            let got = log.replay().unwrap().collect_entries().unwrap();
            assert_eq!(got.last(), Some(&(at.0, b"space again".to_vec())), "{ctx}");
        }
        *sum.cases.entry(Class::DiskFull.name()).or_default() += 1;
        sum.fault("disk full", u64::from(ran.error.is_some()));
    }
}

/// A create, rename, remove, directory sync, zero-fill or write fails (EIO, or ENOSPC where
/// that is what a real file system says): the call fails, typed; anything but disk full fences;
/// a restart finds everything acknowledged.
pub fn syscall_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::SyscallFail, only);
    let mut rng = seeded(seed ^ 0x5ca11);
    let plan = Plan { steps: 80, segments: 3, cuts: false, ..Plan::short(seed) };
    let clean = faulty(seed, plan.short_writes);
    run_workload(&clean, &plan, &new_model());
    let counts = clean.faults().calls;
    for call in [Call::Create, Call::Rename, Call::Remove, Call::SyncDir, Call::ZeroFill, Call::Write] {
        let count = counts[Call::ALL.iter().position(|c| *c == call).unwrap_or(0)];
        let picks: BTreeSet<u64> =
            if count <= 4 { (0..count).collect() } else { (0..4).map(|_| rng.below(count)).collect() };
        for nth in picks {
            for errno in [5, 28] {
                if errno == 28 && !matches!(call, Call::Create | Call::ZeroFill | Call::Write) {
                    continue;
                }
                let Some(n) = cases.take() else { continue };
                let ctx = cases.ctx(n, &format!("{call:?} #{nth} fails with errno {errno}"));
                let st = faulty(seed, plan.short_writes);
                st.faults().fail_calls = vec![FailCall { call, nth, errno }];
                let ran = run_workload(&st, &plan, &new_model());
                if st.faults().calls_failed != 1 {
                    panic!("{ctx}: the call was not reached");
                }
                match &ran.error {
                    Some((Error::DiskFull { .. }, false)) if errno == 28 => {}
                    Some((_, true)) => {
                        if let Some(Err(why)) = &ran.later_refused {
                            panic!("{ctx}: {why}");
                        }
                    }
                    // A failed call the log does not need (a cleanup) may go unreported.
                    None => {}
                    Some((e, p)) => panic!("{ctx}: gave {e} (fenced: {p})"),
                }
                check_now(&st, &ran, &ctx, sum, Class::SyscallFail);
                *sum.cases.entry(Class::SyscallFail.name()).or_default() += 1;
                sum.fault("failed calls", 1);
            }
        }
    }
}

/// A read fails while a scan, a read-only open or a writer's open reads the log: an I/O error,
/// never a verdict about the bytes, never a panic, and a failed writer's open changes nothing.
pub fn read_error_class(seed: u64, files: &Files, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::ReadError, only);
    let want = {
        let (log, _) = Wal::open_with(Arc::new(MemStorage::from_files(files.clone())), opts(seed)).unwrap();
        log.replay().unwrap().collect_entries().unwrap()
    };
    let probe = MemStorage::from_files(files.clone());
    wal::scan_log(&probe, true).unwrap();
    let scan_reads = probe.faults().calls[Call::ALL.iter().position(|c| *c == Call::Read).unwrap_or(0)];
    let probe = MemStorage::from_files(files.clone());
    drop(Wal::open_with(Arc::new(probe.clone()), opts(seed)).unwrap());
    let open_reads = probe.faults().calls[Call::ALL.iter().position(|c| *c == Call::Read).unwrap_or(0)];
    for (mode, reads) in [("scan", scan_reads), ("writer open", open_reads)] {
        for nth in 0..reads {
            let Some(n) = cases.take() else { continue };
            let ctx = cases.ctx(n, &format!("{mode}: read #{nth} fails"));
            let st = MemStorage::from_files(files.clone());
            st.faults().fail_calls = vec![FailCall { call: Call::Read, nth, errno: 5 }];
            let r = if mode == "scan" {
                wal::scan_log(&st, true).map(|s| (s.verdict, None))
            } else {
                Wal::open_with(Arc::new(st.clone()), opts(seed)).map(|(log, r)| {
                    st.faults().fail_calls.clear();
                    (r.verdict, log.replay().and_then(|r| r.collect_entries()).ok())
                })
            };
            match r {
                Err(Error::Io { .. }) => {}
                _ if st.faults().calls_failed == 0 => panic!("{ctx}: the read was not reached"),
                // A read the open could do without (wal.close: it walks the segment instead):
                // the log as it is.
                Ok((CrcVerdict::Ok, Some(got))) if got == want => {}
                other => panic!("{ctx}: a failed read gave {:?}, not an I/O error", other.map(|r| r.0)),
            }
            if files_of(&st.state()) != *files {
                panic!("{ctx}: a failed open changed the log");
            }
            *sum.cases.entry(Class::ReadError.name()).or_default() += 1;
            sum.fault("read errors", 1);
        }
    }
}
