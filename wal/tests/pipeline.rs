//! The commit pipeline (issue 4): pre-hooks → commit → apply → notify, failures as Rejected or
//! Indeterminate (docs/invariants.md I1), fencing without exiting (I8), restart through the same seam.

mod common;

use common::kv::{Kv, SKEW, SKEW_LOCK};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wal::pipeline::{FactsWhenFenced, Hooks, LsnFate, Pipeline, PipelineOptions, RequestFate};
use wal::state::{Applied, EntryKind, Outcome};
use wal::storage::Storage;
use wal::{Epoch, Error, Failure, Lsn, Options, Wal};
use wal_sim::{MemStorage, SectorFate};

fn opts() -> PipelineOptions {
    PipelineOptions {
        // No background segment preparation: its syncs would reach the sync observers and the
        // failed-sync faults of the crash tests at timing-dependent points.
        log: Options {
            segment_len_bytes: 64 * 1024,
            create: true,
            prepare_in_background: false,
            ..Options::default()
        },
        checkpoint_every_entries: 16,
        dedupe_window: 1000,
        ..PipelineOptions::default()
    }
}

/// A pipeline over a MemStorage log (snapshots in a storage of their own).
fn start_mem(
    st: &MemStorage,
    snaps: &MemStorage,
    o: PipelineOptions,
    hooks: Hooks<Kv>,
) -> (Pipeline<Kv>, wal::pipeline::RestartReport) {
    let (wal, open) = Wal::open_with(Arc::new(st.clone()), o.log.clone()).unwrap();
    let snaps: Arc<dyn Storage> = Arc::new(snaps.clone());
    Pipeline::start(wal, open, snaps, o, hooks, Kv::default).unwrap()
}

fn done(p: &wal::Ack<wal::pipeline::Done>) -> (Lsn, Applied) {
    let d = p.wait_timeout(Duration::from_secs(20)).expect("resolved").expect("committed");
    (d.lsn, d.applied)
}

fn put(k: &str, v: &str) -> Vec<u8> {
    format!("put {k} {v}").into_bytes()
}

/// Entries apply in LSN order, only after they are durable, then after-hooks run, then the
/// acknowledgement resolves; many submitting threads share batches.
#[test]
fn commands_from_many_threads_apply_in_lsn_order_then_notify_then_resolve() {
    let st = MemStorage::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let durable_check = st.clone();
    let mut hooks = Hooks::default();
    hooks.after.push(Box::new(move |kv: &Kv, n: &wal::pipeline::Notice<'_>| {
        // The state already holds the entry's effect, and the entry is in the durable image.
        let text = std::str::from_utf8(n.body).unwrap();
        let k = text.split(' ').nth(1).unwrap();
        assert!(kv.map.contains_key(k), "after-hook saw state without its entry");
        let durable = durable_check.state().crash(|_, _| SectorFate::Old);
        let (log, _) =
            Wal::open_with(Arc::new(durable), Options { read_only: true, ..Options::default() }).unwrap();
        let entries = log.replay().unwrap().collect_entries().unwrap();
        assert!(
            entries.iter().any(|(l, _)| *l == n.lsn.0),
            "after-hook ran before LSN {} was durable",
            n.lsn
        );
        s2.lock().unwrap().push(n.lsn);
    }) as wal::pipeline::AfterHook<Kv>);
    let (p, _) = start_mem(&st, &MemStorage::new(), opts(), hooks);
    let p = Arc::new(p);
    let mut threads = Vec::new();
    for t in 0..4 {
        let p = p.clone();
        threads.push(std::thread::spawn(move || {
            let promises: Vec<_> =
                (0..25).map(|i| p.submit(&put(&format!("t{t}k{i}"), "v"), None).unwrap()).collect();
            promises.iter().map(done).collect::<Vec<_>>()
        }));
    }
    let mut all: Vec<(Lsn, Applied)> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.sort_by_key(|x| x.0);
    assert_eq!(all.len(), 100);
    assert!(all.iter().all(|(_, a)| *a == Applied::Outcome(Outcome::Done(vec![]))));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, all.iter().map(|x| x.0).collect::<Vec<_>>(), "apply order must be LSN order");
    assert_eq!(p.read(|kv| kv.map.len()), 100);
    Arc::try_unwrap(p).unwrap().close().unwrap();
}

/// A pre-hook only validates: a refusal is Rejected, nothing is logged, no LSN is consumed.
#[test]
fn a_pre_hook_rejection_logs_nothing() {
    let st = MemStorage::new();
    let mut hooks = Hooks::default();
    hooks.pre.push(Box::new(|kv: &Kv, prop: &wal::pipeline::Proposal<'_>| {
        if prop.body.starts_with(b"put bad") || kv.map.len() > 100 {
            Err("bad key".to_string())
        } else {
            Ok(())
        }
    }) as wal::pipeline::PreHook<Kv>);
    let (p, _) = start_mem(&st, &MemStorage::new(), opts(), hooks);
    let a = done(&p.submit(&put("a", "1"), None).unwrap());
    match p.submit(&put("bad", "1"), Some(9)) {
        Err(Error::Rejected(why)) => assert!(why.contains("bad key"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.fate(9), RequestFate::NotApplied);
    let b = done(&p.submit(&put("b", "1"), None).unwrap());
    assert_eq!((a.0, b.0), (Lsn(1), Lsn(2)), "a rejected submission must not consume an LSN");
    p.close().unwrap();
    let (log, _) = Wal::open_with(Arc::new(st), Options::default()).unwrap();
    let n = log.replay().unwrap().collect_entries().unwrap().len();
    assert_eq!(n, 2);
}

/// docs/invariants.md I1 and I6: a failed fdatasync leaves the state untouched, every pending acknowledgement
/// Indeterminate, later submissions refused; after a reopen each Indeterminate entry is either
/// applied or absent, and the report says which.
#[test]
fn a_failed_sync_leaves_the_state_untouched_and_every_pending_entry_indeterminate() {
    for crash_keeps_new in [false, true] {
        let st = MemStorage::new();
        let applied_hook = Arc::new(Mutex::new(0u32));
        let h2 = applied_hook.clone();
        let mut hooks = Hooks::default();
        hooks.after.push(Box::new(move |_: &Kv, _: &wal::pipeline::Notice<'_>| *h2.lock().unwrap() += 1)
            as wal::pipeline::AfterHook<Kv>);
        let (p, _) = start_mem(&st, &MemStorage::new(), opts(), hooks);
        for i in 0..5 {
            done(&p.submit(&put(&format!("ok{i}"), "v"), Some(100 + i)).unwrap());
        }
        let before = p.applied();
        let n = st.faults().syncs_seen;
        st.faults().fail_sync_from = Some(n);
        let at_failed_sync = Arc::new(Mutex::new(None));
        let a2 = at_failed_sync.clone();
        st.set_sync_observer(move |cp| {
            a2.lock().unwrap().get_or_insert(cp.state);
        });
        // The I/O thread may sync (and fail) the first before the others are submitted: those
        // are then Rejected at once, with no LSN, which is right; the first always gets one.
        let mut lost = Vec::new();
        for i in 0..5u64 {
            match p.submit(&put(&format!("lost{i}"), "v"), Some(200 + i)) {
                Ok(pr) => lost.push((200 + i, pr)),
                Err(Error::Rejected(why)) if i > 0 => assert!(why.contains("fenced"), "{why}"),
                Err(e) => panic!("submit {i}: {e:?}"),
            }
        }
        let mut indeterminate = Vec::new();
        for (id, pr) in &lost {
            match pr.wait_timeout(Duration::from_secs(20)).expect("resolved") {
                Err(Failure::Indeterminate(_)) => indeterminate.push((*id, pr)),
                other => panic!("a failed sync must not resolve {other:?}"),
            }
        }
        assert!(!indeterminate.is_empty());
        assert_eq!(p.applied(), before, "the state changed after a failed sync");
        assert_eq!(*applied_hook.lock().unwrap(), 5, "an after-hook saw an uncommitted entry");
        assert!(p.fenced().is_some());
        assert!(matches!(p.submit(&put("later", "v"), None), Err(Error::Rejected(_))));
        let lsns: Vec<Lsn> = (0..5).map(|i| Lsn(6 + i)).collect();
        assert!(p.close().is_err(), "closing a fenced pipeline must say so");
        // The pages the failed sync was for may or may not have reached the disk (Linux keeps
        // them readable and may write them back later): crash at that sync with all of them
        // old, or all of them new. Both are legal outcomes for an Indeterminate entry.
        let fate = if crash_keeps_new { SectorFate::New } else { SectorFate::Old };
        let state = at_failed_sync.lock().unwrap().take().expect("the failing sync was observed");
        assert!(!state.dirty_sectors().is_empty());
        let crashed = state.crash(|_, _| fate);
        let (p, report) = start_mem(&crashed, &MemStorage::new(), opts(), Hooks::default());
        assert!(report.fenced.is_none());
        let mut applied_lost = 0;
        for (lsn, (id, _)) in lsns.iter().zip(&indeterminate) {
            let key = format!("lost{}", id - 200);
            let present = p.read(|kv| kv.map.contains_key(&key));
            applied_lost += present as usize;
            match report.fate_at(*lsn) {
                LsnFate::Applied => assert!(present, "LSN {lsn} reported applied but {key} is missing"),
                LsnFate::Absent => assert!(!present, "LSN {lsn} reported absent but {key} is applied"),
            }
            match p.fate(*id) {
                RequestFate::Applied { lsn: at, .. } => assert!(present && at == *lsn),
                RequestFate::NotApplied => assert!(!present),
                RequestFate::Pending { .. } => panic!("nothing is pending after a restart"),
            }
        }
        // Both fates are really exercised: with the failed sync's pages kept, at least the
        // entry it was for is applied (the ones queued behind it were never written).
        assert_eq!(applied_lost >= 1, crash_keeps_new, "{applied_lost} lost entries applied");
        for i in 0..5 {
            assert!(p.read(|kv| kv.map.contains_key(&format!("ok{i}"))), "an acknowledged entry was lost");
        }
        p.close().unwrap();
    }
}

/// Facts are applied only after commit, through the same seam; on a fenced pipeline they are
/// Indeterminate by default (resubmit after reopen) or Rejected when configured so.
#[test]
fn facts_apply_after_commit_and_follow_the_fence_policy() {
    for policy in [FactsWhenFenced::Indeterminate, FactsWhenFenced::Reject] {
        let st = MemStorage::new();
        let kinds = Arc::new(Mutex::new(Vec::new()));
        let k2 = kinds.clone();
        let mut hooks = Hooks::default();
        hooks
            .after
            .push(Box::new(move |_: &Kv, n: &wal::pipeline::Notice<'_>| k2.lock().unwrap().push(n.kind))
                as wal::pipeline::AfterHook<Kv>);
        let (p, _) = start_mem(
            &st,
            &MemStorage::new(),
            PipelineOptions { facts_when_fenced: policy, ..opts() },
            hooks,
        );
        p.report_fact(&put("job7", "started"), None).unwrap();
        let c = done(&p.submit(&put("job8", "submitted"), None).unwrap());
        assert_eq!(c.0, Lsn(2));
        // The fact (LSN 1) was applied before the command (LSN 2) resolved.
        assert_eq!(*kinds.lock().unwrap(), vec![EntryKind::Fact, EntryKind::Command]);
        assert!(p.read(|kv| kv.map.get("job7").map(String::as_str) == Some("started")));
        let n = st.faults().syncs_seen;
        st.faults().fail_sync_from = Some(n);
        let _ = p.submit(&put("x", "1"), None).unwrap().wait();
        match (policy, p.report_fact(&put("job7", "finished"), None)) {
            // Refused now either way (nothing logged); kept for after a reopen, or dropped.
            (FactsWhenFenced::Indeterminate, Err(e @ Error::Fenced { .. })) => assert!(!e.is_rejected()),
            (FactsWhenFenced::Reject, Err(e @ Error::Rejected(_))) => assert!(e.is_rejected()),
            (_, other) => panic!("{policy:?}: {other:?}"),
        }
        assert!(p.close().is_err());
    }
}

/// docs/invariants.md I8: a panic in apply fences the pipeline (read-only, with the reason), resolves
/// the entry Indeterminate and never takes the process down.
#[test]
fn a_panic_in_apply_fences_the_pipeline_without_exiting() {
    let st = MemStorage::new();
    let (p, _) = start_mem(&st, &MemStorage::new(), opts(), Hooks::default());
    done(&p.submit(&put("a", "1"), None).unwrap());
    match p.submit(b"panic", None).unwrap().wait() {
        Err(Failure::Indeterminate(why)) => assert!(why.contains("panicked"), "{why}"),
        other => panic!("{other:?}"),
    }
    let why = p.fenced().expect("fenced");
    assert!(why.contains("apply panicked at LSN 2"), "{why}");
    assert!(matches!(p.submit(&put("b", "1"), None), Err(Error::Rejected(_))));
    assert_eq!(p.read(|kv| kv.map.len()), 1, "the state stays readable");
    assert!(p.close().is_err());
}

#[test]
fn a_stale_writer_epoch_is_rejected() {
    let st = MemStorage::new();
    let (mut wal, open) = Wal::open_with(Arc::new(st.clone()), opts().log).unwrap();
    wal.advance_epoch(Epoch(3)).unwrap();
    let (p, _) =
        Pipeline::start(wal, open, Arc::new(MemStorage::new()), opts(), Hooks::default(), Kv::default)
            .unwrap();
    match p.submit_as(Epoch(2), &put("a", "1"), None) {
        Err(e @ Error::StaleEpoch { .. }) => {
            assert!(e.is_rejected() && e.to_string().contains("epoch"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let (lsn, _) = done(&p.submit_as(Epoch(3), &put("a", "1"), None).unwrap());
    assert_eq!(lsn, Lsn(1));
    p.close().unwrap();
}

/// Restart replays through the same seam, checks the checkpoints, and request ids stay
/// deduplicated across it.
#[test]
fn a_restart_rebuilds_the_state_checks_checkpoints_and_keeps_dropping_duplicates() {
    let st = MemStorage::new();
    let (p, _) = start_mem(&st, &MemStorage::new(), opts(), Hooks::default());
    for i in 0..50u64 {
        done(&p.submit(&put(&format!("k{}", i % 7), &i.to_string()), Some(i + 1)).unwrap());
    }
    let before = p.applied();
    p.close().unwrap();
    let (p, report) = start_mem(&st, &MemStorage::new(), opts(), Hooks::default());
    assert_eq!(report.compare.divergence, None);
    assert!(report.compare.checkpoints_checked >= 3, "{:?}", report.compare);
    assert_eq!(report.compare.verified_through, Some(Lsn(50)), "the close checkpoint covers the end");
    assert_eq!(p.applied(), before);
    let (lsn, applied) = done(&p.submit(&put("k0", "again"), Some(3)).unwrap());
    assert_eq!(applied, Applied::Duplicate { first_lsn: Lsn(3) });
    assert_eq!(lsn, Lsn(51));
    assert_eq!(p.fate(3), RequestFate::Applied { lsn: Lsn(3), refused: false });
    p.close().unwrap();
    // The window is recorded in the log: reopening with another one would replay duplicates
    // differently, so it is refused.
    let (wal, open) = Wal::open_with(Arc::new(st.clone()), opts().log).unwrap();
    let other = PipelineOptions { dedupe_window: 999, ..opts() };
    let err = Pipeline::start(wal, open, Arc::new(MemStorage::new()), other, Hooks::default(), Kv::default)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("dedupe window of 1000"), "{err}");
}

/// docs/invariants.md I8: a restart whose replay disagrees with a recorded checkpoint starts fenced and
/// read-only, and says where.
#[test]
fn a_divergent_restart_starts_fenced_and_says_where() {
    let _g = SKEW_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let st = MemStorage::new();
    let (p, _) = start_mem(&st, &MemStorage::new(), opts(), Hooks::default());
    for i in 0..20 {
        done(&p.submit(&put(&format!("k{i}"), "v"), None).unwrap());
    }
    SKEW.store(true, Ordering::Relaxed);
    for i in 20..40 {
        done(&p.submit(&put(&format!("k{i}"), "v"), None).unwrap());
    }
    SKEW.store(false, Ordering::Relaxed);
    p.close().unwrap();
    let (p, report) = start_mem(&st, &MemStorage::new(), opts(), Hooks::default());
    let d = report.compare.divergence.clone().expect("DIVERGENT");
    assert_eq!(d.last_good, Some(Lsn(16)));
    assert_eq!(d.lsn, Lsn(32), "{d:?}");
    let why = p.fenced().expect("fenced");
    assert!(why.contains("DIVERGENT at LSN 32"), "{why}");
    assert!(matches!(p.submit(&put("z", "1"), None), Err(Error::Rejected(_))));
    assert!(p.close().is_err());
}

/// Snapshots on a policy, a purge only below a durable snapshot, and a restart from the
/// newest snapshot plus the suffix gives the state a full history gave.
#[test]
fn snapshots_purge_below_themselves_and_restart_from_snapshot_plus_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let o = PipelineOptions {
        log: Options { segment_len_bytes: 64 * 1024, create: true, ..Options::default() },
        snapshot_every_entries: Some(150),
        ..opts()
    };
    let (p, _) = Pipeline::open(dir.path(), o.clone(), Hooks::default(), Kv::default).unwrap();
    // One batch (at least 512 bytes) per entry: about 120 entries per segment.
    for i in 0..400u64 {
        let body = put(&format!("k{}", i % 13), &format!("{i:0>40}"));
        done(&p.submit(&body, Some(i + 1)).unwrap());
    }
    let (applied, cp) = p.applied();
    p.close().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().any(|n| n == "snapshot-00000000000000000300.snap"), "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    // Snapshots at 150 and 300 are kept; the log is purged below the older one.
    assert!(names.iter().any(|n| n == "snapshot-00000000000000000150.snap"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "00000000000000000001.wal"),
        "the first segment should be purged: {names:?}"
    );
    let (p, report) = Pipeline::open(dir.path(), o.clone(), Hooks::default(), Kv::default).unwrap();
    assert_eq!(report.snapshot.as_ref().and_then(|s| s.applied), Some(Lsn(300)));
    assert_eq!(report.compare.entries_applied, 100);
    assert_eq!(report.compare.divergence, None);
    assert_eq!(p.applied(), (applied, cp));
    p.close().unwrap();
    // A damaged newest snapshot: the restart falls back to the older one plus a longer suffix,
    // says why, and reaches the same state.
    let newest = dir.path().join("snapshot-00000000000000000300.snap");
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&newest, bytes).unwrap();
    let (p, report) = Pipeline::open(dir.path(), o.clone(), Hooks::default(), Kv::default).unwrap();
    assert_eq!(report.snapshot.as_ref().and_then(|s| s.applied), Some(Lsn(150)));
    assert!(report.snapshots_refused[0].contains("checksum"), "{:?}", report.snapshots_refused);
    assert_eq!(report.compare.entries_applied, 250);
    assert_eq!(p.applied(), (applied, cp));
    p.close().unwrap();
    // With no usable snapshot the purged log cannot rebuild the state: the open refuses.
    std::fs::remove_file(dir.path().join("snapshot-00000000000000000150.snap")).unwrap();
    let err = Pipeline::open(dir.path(), o, Hooks::default(), Kv::default).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("purged"), "{err}");
}

/// A job array is one atomic user batch: after any crash every element exists or none does,
/// whichever subset of its sectors reached the disk before the sync that would have covered it.
#[test]
fn a_user_batch_survives_every_crash_whole_or_not_at_all() {
    let st = MemStorage::new();
    let points = Arc::new(Mutex::new(Vec::new()));
    // No background segment preparation: its syncs would be observed too (a timing-dependent
    // first sync that is not the batch's).
    let mut o = opts();
    o.log.prepare_in_background = false;
    let (p, _) = start_mem(&st, &MemStorage::new(), o, Hooks::default());
    done(&p.submit(&put("before", "1"), None).unwrap());
    let pts = points.clone();
    st.set_sync_observer(move |cp| pts.lock().unwrap().push(cp.state));
    let bodies: Vec<Vec<u8>> = (0..6).map(|i| put(&format!("job-array-1/{i}"), &"x".repeat(200))).collect();
    let items: Vec<(&[u8], Option<u64>)> = bodies.iter().map(|b| (b.as_slice(), None)).collect();
    let promises = p.submit_batch(&items).unwrap();
    let lsns: Vec<Lsn> = promises.iter().map(|pr| done(pr).0).collect();
    assert_eq!(lsns, (2..8).map(Lsn).collect::<Vec<_>>());
    p.close().unwrap();
    // The state at the batch's own fdatasync: its sectors are written but not yet durable.
    let state = points.lock().unwrap()[0].clone();
    let dirty = state.dirty_sectors();
    assert!(dirty.len() >= 3 && dirty.len() <= 10, "the batch should span a few sectors: {dirty:?}");
    let mut outcomes = std::collections::BTreeSet::new();
    for mask in 0u32..(1 << dirty.len()) {
        let crashed = state.crash(|node, sector| {
            let i = dirty.iter().position(|&d| d == (node, sector)).unwrap();
            if mask & (1 << i) != 0 {
                SectorFate::New
            } else {
                SectorFate::Old
            }
        });
        let (p, _) = start_mem(&crashed, &MemStorage::new(), opts(), Hooks::default());
        let present =
            p.read(|kv| (0..6).filter(|i| kv.map.contains_key(&format!("job-array-1/{i}"))).count());
        assert!(present == 0 || present == 6, "mask {mask:#b}: {present} of 6 elements survived");
        assert!(p.read(|kv| kv.map.contains_key("before")), "an acknowledged entry was lost");
        outcomes.insert(present);
        p.close().unwrap();
    }
    assert_eq!(outcomes.into_iter().collect::<Vec<_>>(), vec![0, 6], "both fates must be exercised");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// Random workloads give the same digest online, on a full replay, on a second replay and
    /// from a snapshot plus the suffix (docs/invariants.md I2).
    #[test]
    fn online_replay_and_snapshot_plus_suffix_agree(
        ops in proptest::collection::vec((0u8..8, proptest::bool::ANY, 0u16..1000), 1..60),
        snap_at in 0usize..60,
    ) {
        let st = MemStorage::new();
        let snaps = MemStorage::new();
        let o = PipelineOptions { purge_after_snapshot: false, checkpoint_every_entries: 7, ..opts() };
        let (p, _) = start_mem(&st, &snaps, o.clone(), Hooks::default());
        let mut promises = Vec::new();
        for (i, (k, is_put, v)) in ops.iter().enumerate() {
            let body = if *is_put { put(&format!("k{k}"), &v.to_string()) } else { format!("del k{k}").into_bytes() };
            promises.push(p.submit(&body, Some(i as u64 + 1)).unwrap());
            if i == snap_at {
                for pr in &promises {
                    done(pr);
                }
                p.snapshot().unwrap();
            }
        }
        for pr in &promises {
            done(pr);
        }
        let online = p.applied();
        p.close().unwrap();
        let (p, report) = start_mem(&st, &snaps, o.clone(), Hooks::default());
        proptest::prop_assert_eq!(&report.compare.divergence, &None);
        proptest::prop_assert_eq!(report.snapshot.is_some(), snap_at < ops.len());
        proptest::prop_assert_eq!(p.applied(), online);
        p.close().unwrap();
        for _ in 0..2 {
            let (log, _) = Wal::open_with(Arc::new(st.clone()), Options::default()).unwrap();
            let mut r = wal::state::Replayer::new(wal::state::Applier::new(Kv::default(), o.dedupe_window));
            r.run(&mut log.replay().unwrap()).unwrap();
            let (a, rep) = r.finish();
            proptest::prop_assert_eq!(rep.divergence, None);
            proptest::prop_assert_eq!((a.applied(), a.checkpoint()), online);
        }
    }
}

/// Tailing cursors read committed entries from their own positions, report their lag, pin the
/// prefix purge within the lag cap, and get a typed error once a purge passes them.
#[test]
fn cursors_tail_committed_entries_pin_purges_and_report_being_purged_past() {
    let dir = tempfile::tempdir().unwrap();
    let o = PipelineOptions {
        log: Options { segment_len_bytes: 64 * 1024, create: true, ..Options::default() },
        cursor_pin_max_lag: 280,
        ..opts()
    };
    let (p, _) = Pipeline::open(dir.path(), o, Hooks::default(), Kv::default).unwrap();
    let mut near = p.cursor(Lsn(1));
    let mut far = p.cursor(Lsn(1));
    let mut seen = Vec::new();
    for i in 1..=400u64 {
        done(&p.submit(&put(&format!("k{i}"), "v"), Some(i)).unwrap());
        if i % 50 == 0 {
            // `near` keeps up; `far` never reads.
            for e in near.next_batch(1000).unwrap() {
                seen.push(e);
            }
        }
        if i % 150 == 0 {
            p.snapshot().unwrap();
        }
    }
    assert_eq!(seen.len(), 400);
    assert!(seen
        .iter()
        .enumerate()
        .all(|(i, e)| e.lsn == Lsn(i as u64 + 1) && e.request_id == Some(i as u64 + 1)));
    assert_eq!(seen[6].body, put("k7", "v"));
    assert_eq!(near.lag().unwrap(), 0);
    assert_eq!(far.lag().unwrap(), 400);
    assert!(near.next_batch(10).unwrap().is_empty(), "caught up");
    // Snapshots at 150 and 300 allow a purge below 151, but `far` (at 1) is past the lag cap,
    // so it does not pin: the first segment went, and `far` is told, not given a gap.
    match far.next_batch(10) {
        Err(wal::Error::PurgedPast { position: 1, first }) => assert!(first > 1 && first <= 151, "{first}"),
        other => panic!("{other:?}"),
    }
    // A cursor within the cap pins: one at 200 survives the next snapshot's purge.
    let mut pinned = p.cursor(Lsn(200));
    for i in 401..=460u64 {
        done(&p.submit(&put(&format!("k{i}"), "v"), None).unwrap());
    }
    p.snapshot().unwrap(); // at 460: the older kept snapshot is 300, but the cursor pins 200
    let got = pinned.next_batch(1000).unwrap();
    assert_eq!(got.first().map(|e| e.lsn), Some(Lsn(200)));
    assert_eq!(got.len(), 261);
    drop((near, far, pinned));
    p.close().unwrap();
}

/// A panic in a pre-hook or an after-hook fences the pipeline like a panic in apply: the
/// submission is refused or the applied entry still resolves, the reason is kept, the process
/// goes on.
#[test]
fn a_panic_in_a_hook_fences_the_pipeline_without_exiting() {
    for which in ["pre", "after"] {
        let st = MemStorage::new();
        let mut hooks = Hooks::default();
        if which == "pre" {
            hooks.pre.push(Box::new(|_: &Kv, p: &wal::pipeline::Proposal<'_>| {
                assert!(!p.body.starts_with(b"put boom"), "pre-hook bug");
                Ok(())
            }) as wal::pipeline::PreHook<Kv>);
        } else {
            hooks.after.push(Box::new(|_: &Kv, n: &wal::pipeline::Notice<'_>| {
                assert!(!n.body.starts_with(b"put boom"), "after-hook bug");
            }) as wal::pipeline::AfterHook<Kv>);
        }
        let (p, _) = start_mem(&st, &MemStorage::new(), opts(), hooks);
        done(&p.submit(&put("a", "1"), None).unwrap());
        match (which, p.submit(&put("boom", "1"), None)) {
            ("pre", Err(Error::Rejected(why))) => assert!(why.contains("pre-hook panicked"), "{why}"),
            // The entry was committed and applied before the after-hook ran: its outcome stands.
            ("after", Ok(pr)) => assert_eq!(done(&pr).0, Lsn(2)),
            (w, other) => panic!("{w}: {other:?}"),
        }
        let why = p.fenced().unwrap_or_else(|| panic!("{which}: not fenced"));
        assert!(why.contains("panicked"), "{why}");
        assert!(matches!(p.submit(&put("b", "1"), None), Err(Error::Rejected(_))), "{which}");
        assert!(p.close().is_err());
    }
}

/// Checkpoints also come on a timer when entries trickle in below the count.
#[test]
fn a_checkpoint_comes_after_the_interval_even_below_the_entry_count() {
    let st = MemStorage::new();
    let o = PipelineOptions {
        checkpoint_every_entries: 1_000_000,
        checkpoint_every: Duration::from_millis(50),
        ..opts()
    };
    let (p, _) = start_mem(&st, &MemStorage::new(), o, Hooks::default());
    for i in 0..3 {
        done(&p.submit(&put(&format!("k{i}"), "v"), None).unwrap());
    }
    std::thread::sleep(Duration::from_millis(300));
    // Crash now (no close, so no close checkpoint): the timer's checkpoint must be durable.
    let image = st.state().crash(|_, _| SectorFate::Old);
    drop(p);
    let (log, _) = Wal::open_with(Arc::new(image), Options::default()).unwrap();
    let mut r = log.replay().unwrap();
    let mut checkpoints = Vec::new();
    while let Some(item) = r.next() {
        if let wal::ItemKind::Checkpoint(_) = item.unwrap().kind {
            checkpoints.push(());
        }
    }
    assert!(!checkpoints.is_empty(), "no checkpoint after the interval");
}

/// With an external commit policy (a consensus library's commit index), durable entries wait
/// for `commit_through` before they are applied.
#[test]
fn an_external_commit_policy_gates_apply_on_the_commit_index() {
    let st = MemStorage::new();
    let o = PipelineOptions { commit: wal::pipeline::CommitPolicy::External, ..opts() };
    let (p, _) = start_mem(&st, &MemStorage::new(), o, Hooks::default());
    let a = p.submit(&put("a", "1"), None).unwrap();
    let b = p.submit(&put("b", "1"), None).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(a.poll_outcome().is_none(), "applied before the commit index reached it");
    assert_eq!(p.read(|kv| kv.map.len()), 0);
    p.commit_through(Lsn(1));
    assert_eq!(done(&a).0, Lsn(1));
    std::thread::sleep(Duration::from_millis(50));
    assert!(b.poll_outcome().is_none(), "LSN 2 applied with the commit index at 1");
    assert_eq!(p.read(|kv| kv.map.len()), 1);
    p.commit_through(Lsn(2));
    assert_eq!(done(&b).0, Lsn(2));
    // Closing with an entry durable but never committed does not hang: it is Indeterminate.
    let c = p.submit(&put("c", "1"), None).unwrap();
    p.close().unwrap();
    assert!(matches!(c.wait(), Err(Failure::Indeterminate(ref why)) if why.contains("committed")));
}
