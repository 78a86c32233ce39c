//! A command's path: pre-hooks, commit, apply in LSN order, after-hooks, the acknowledgement;
//! a stale writer epoch, and an external commit policy gating apply.

use super::{done, opts, put, start_mem};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wal::{Epoch, Error, Failure, Lsn, Options, Wal};
use wal_sim::workload::kv::Kv;
use wal_sim::{MemStorage, SectorFate};
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions, RequestFate};
use wal_state::{Applied, Outcome};

/// Entries apply in LSN order, only after they are durable, then after-hooks run, then the
/// acknowledgement resolves; many submitting threads share batches.
#[test]
fn commands_from_many_threads_apply_in_lsn_order_then_notify_then_resolve() {
    let st = MemStorage::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let durable_check = st.clone();
    let mut hooks = Hooks::default();
    hooks.after.push(Box::new(move |kv: &Kv, n: &wal_state::pipeline::Notice<'_>| {
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
    }) as wal_state::pipeline::AfterHook<Kv>);
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
    hooks.pre.push(Box::new(|kv: &Kv, prop: &wal_state::pipeline::Proposal<'_>| {
        if prop.body.starts_with(b"put bad") || kv.map.len() > 100 {
            Err("bad key".to_string())
        } else {
            Ok(())
        }
    }) as wal_state::pipeline::PreHook<Kv>);
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

/// With an external commit policy (a consensus library's commit index), durable entries wait
/// for `commit_through` before they are applied.
#[test]
fn an_external_commit_policy_gates_apply_on_the_commit_index() {
    let st = MemStorage::new();
    let o = PipelineOptions { commit: wal_state::pipeline::CommitPolicy::External, ..opts() };
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

/// A command's callback (`on_done`) runs on the apply thread with the outcome, once; given
/// after the outcome it runs at once on the caller's thread; a panic in it fences the pipeline
/// like a panic in a hook, and the acknowledgement keeps its outcome.
#[test]
fn a_callback_runs_on_the_apply_thread_and_a_panic_in_it_fences() {
    use wal_state::pipeline::OnDone;
    let st = MemStorage::new();
    // Commits only when told: the callback is surely registered before the outcome.
    let o = PipelineOptions { commit: wal_state::pipeline::CommitPolicy::External, ..opts() };
    let (p, _) = start_mem(&st, &MemStorage::new(), o, Hooks::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let ack = p.submit(&put("a", "1"), Some(1)).unwrap();
    ack.on_done(move |r| {
        let thread = std::thread::current().name().map(str::to_string);
        s2.lock().unwrap().push((thread, r.as_ref().map(|d| d.lsn).ok()));
    });
    p.commit_through(ack.lsn);
    let (lsn, _) = done(&ack);
    // Waiters wake before the callback runs (outside the ticket's lock): wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(*seen.lock().unwrap(), vec![(Some("wal-apply".to_string()), Some(lsn))]);

    let s3 = seen.clone();
    let here = std::thread::current().name().map(str::to_string);
    ack.on_done(move |r| {
        s3.lock()
            .unwrap()
            .push((std::thread::current().name().map(str::to_string), r.as_ref().map(|d| d.lsn).ok()))
    });
    assert_eq!(seen.lock().unwrap().last(), Some(&(here, Some(lsn))), "a late callback runs at once, here");

    let boom = p.submit(&put("b", "2"), Some(2)).unwrap();
    boom.on_done(|_| panic!("callback boom"));
    p.commit_through(boom.lsn);
    let (lsn_b, _) = done(&boom);
    assert!(lsn_b > lsn);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while p.fenced().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let fenced = p.fenced().expect("a panicking callback fences the pipeline");
    assert!(fenced.contains("callback boom"), "{fenced}");
    assert!(matches!(p.submit(&put("c", "3"), None), Err(Error::Rejected(_))));
    assert_eq!(p.read(|kv| kv.map.len()), 2, "both commands were applied before the fence");
    drop(p);
}
