//! Restart through the same seam: the replay rebuilds the state and checks the checkpoints (a
//! divergent one starts fenced), request ids stay deduplicated, snapshots bound the replay.

use super::{done, opts, put, start_mem};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wal::{Error, Lsn, Options, Wal};
use wal_sim::workload::kv::{Kv, SKEW, SKEW_LOCK};
use wal_sim::{MemStorage, SectorFate};
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions, RequestFate};
use wal_state::Applied;

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
            let mut r = wal_state::Replayer::new(wal_state::Applier::new(Kv::default(), o.dedupe_window));
            r.run(&mut log.replay().unwrap()).unwrap();
            let (a, rep) = r.finish();
            proptest::prop_assert_eq!(rep.divergence, None);
            proptest::prop_assert_eq!((a.applied(), a.checkpoint()), online);
        }
    }
}
