//! Failures: a failed sync leaves every pending entry Indeterminate (docs/invariants.md I1, I6),
//! facts follow the fence policy, a panic in apply or a hook fences without exiting (I8), and a
//! crash keeps a user batch whole or not at all.

use super::{done, opts, put, start_mem};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wal::{Error, Failure, Lsn};
use wal_sim::workload::kv::Kv;
use wal_sim::{MemStorage, SectorFate};
use wal_state::pipeline::{FactsWhenFenced, Hooks, LsnFate, PipelineOptions, RequestFate};
use wal_state::EntryKind;

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
        hooks
            .after
            .push(Box::new(move |_: &Kv, _: &wal_state::pipeline::Notice<'_>| *h2.lock().unwrap() += 1)
                as wal_state::pipeline::AfterHook<Kv>);
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
        hooks.after.push(Box::new(move |_: &Kv, n: &wal_state::pipeline::Notice<'_>| {
            k2.lock().unwrap().push(n.kind)
        }) as wal_state::pipeline::AfterHook<Kv>);
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

/// A panic in a pre-hook or an after-hook fences the pipeline like a panic in apply: the
/// submission is refused or the applied entry still resolves, the reason is kept, the process
/// goes on.
#[test]
fn a_panic_in_a_hook_fences_the_pipeline_without_exiting() {
    for which in ["pre", "after"] {
        let st = MemStorage::new();
        let mut hooks = Hooks::default();
        if which == "pre" {
            hooks.pre.push(Box::new(|_: &Kv, p: &wal_state::pipeline::Proposal<'_>| {
                assert!(!p.body.starts_with(b"put boom"), "pre-hook bug");
                Ok(())
            }) as wal_state::pipeline::PreHook<Kv>);
        } else {
            hooks.after.push(Box::new(|_: &Kv, n: &wal_state::pipeline::Notice<'_>| {
                assert!(!n.body.starts_with(b"put boom"), "after-hook bug");
            }) as wal_state::pipeline::AfterHook<Kv>);
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
