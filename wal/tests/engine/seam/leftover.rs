//! A segment name left behind by a failed preparation or recycling whose cleanup's removal
//! failed too (`wal/src/storage/prepare.rs`, `forget`), while the log goes on: the log does not
//! know the name as a spare, and its next rotation makes that very segment. The fault is gone
//! by then, so the rotation must not fail on the name being there (AlreadyExists) and fence the
//! log: the leftover never held a record (its seq is past every segment holding records), and
//! the writer removes it and makes the segment again, as an open would (FORMAT.md section 1).
//! Every acknowledged entry survives a crash and a close and reopen after that.

use super::{entries, fill, opens_and_carries_on, opts, payload, purged_log, SEG};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal::format::{recycle_file_name, segment_file_name};
use wal::{CrcVerdict, Epoch, Lsn, Options, Wal};
use wal_sim::{Boundary, Call, FailCall, Faults, MemStorage, SectorFate};

/// Arms `arm` once, just before the first call at crash point `at` made while `name` is in the
/// live directory (before that call is counted or run, so `arm` can aim at it by the counters).
/// Returns the name of the thread it ran on, once it has. The caller makes no call of its own
/// until the faults have fired ([`wait_for_failures`]): the counters are shared by every thread.
fn arm_at(
    st: &MemStorage,
    at: Boundary,
    name: String,
    arm: impl FnOnce(&mut Faults) + Send + 'static,
) -> Arc<Mutex<Option<String>>> {
    let fired: Arc<Mutex<Option<String>>> = Arc::default();
    let (f, me, mut arm) = (fired.clone(), st.clone(), Some(arm));
    st.set_sync_observer(move |cp| {
        if cp.at == at && cp.state.file_names().contains(&name) {
            if let Some(arm) = arm.take() {
                arm(&mut me.faults());
                *f.lock().unwrap() = std::thread::current().name().map(String::from);
            }
        }
    });
    fired
}

/// Waits until `n` calls have failed by `fail_calls`, then drops the observer (which holds a
/// handle on the storage).
fn wait_for_failures(st: &MemStorage, n: u64) {
    let until = Instant::now() + Duration::from_secs(20);
    while st.faults().calls_failed < n {
        assert!(Instant::now() < until, "the faults never fired: {} failed", st.faults().calls_failed);
        std::thread::sleep(Duration::from_millis(1));
    }
    st.set_sync_observer(|_| {});
}

/// Fails the directory sync of a recycling (after its rename) and its cleanup's removal of the
/// new name (the cleanup first removes the set-aside name, already gone, then the new one).
fn fail_recycling_dir_sync_and_removal(f: &mut Faults) {
    let (dirs, removes) = (f.calls[Call::SyncDir as usize], f.calls[Call::Remove as usize]);
    f.fail_calls = vec![
        FailCall { call: Call::SyncDir, nth: dirs, errno: 5 },
        FailCall { call: Call::Remove, nth: removes + 1, errno: 5 },
    ];
}

/// Seals the active segment and appends entry `next` (acknowledged), which makes segment `seq`:
/// that must work, and a full scan then finds `seq` the last segment.
fn rotates_into(st: &MemStorage, log: &mut Wal, seq: u64, next: u64) {
    let segments = log.segment_count();
    log.rotate().unwrap();
    log.append(Epoch(0), &payload(next))
        .unwrap_or_else(|e| panic!("the rotation into segment {seq} failed: {e}"));
    log.sync().unwrap();
    assert_eq!(log.segment_count(), segments + 1);
    let scan = wal::scan_log(st, true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok, "{:?}", scan.damage);
    assert_eq!(scan.segments.last().map(|s| s.seq), Some(seq));
}

/// Entries `first..next` are acknowledged: appends more, then checks that every acknowledged
/// entry is replayed after a crash (unsynced sectors all dropped, all kept) and after a close,
/// and that the log carries on from each.
fn survives(st: &MemStorage, mut log: Wal, opts: Options, first: u64, next: u64) {
    fill(&mut log, next, next + 20);
    let acked = entries(first, next + 20);
    let crashed = [SectorFate::Old, SectorFate::New].map(|fate| (st.state().crash(|_, _| fate), fate));
    log.close().unwrap();
    for (img, fate) in &crashed {
        opens_and_carries_on(img, opts.clone(), &acked, &[], &format!("after a crash, sectors {fate:?}"));
    }
    opens_and_carries_on(st, opts, &acked, &[], "after a close");
}

/// The background preparation of segment 2 fails (its fdatasync, EIO, once) and the cleanup
/// cannot remove `{2}.wal` (EIO, once): the name stays, full of zeros, unknown to the log. The
/// rotation into segment 2 makes it again.
#[test]
fn a_failed_background_preparation_whose_removal_fails_does_not_fence_the_rotation() {
    let st = MemStorage::new();
    let opts = Options { prepare_in_background: true, ..opts(0) };
    let name = segment_file_name(2);
    // The preparation's fdatasync, and the next removal (the cleanup's), fail.
    let fired = arm_at(&st, Boundary::SyncData, name.clone(), |f| {
        f.fail_sync_from = Some(f.syncs_seen);
        f.fail_sync_until = Some(f.syncs_seen + 1);
        f.fail_calls = vec![FailCall { call: Call::Remove, nth: f.calls[Call::Remove as usize], errno: 5 }];
    });
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts.clone()).unwrap();
    // The first append makes segment 1 the active one and starts preparing segment 2.
    log.append(Epoch(0), &payload(1)).unwrap();
    wait_for_failures(&st, 1);
    assert_eq!(fired.lock().unwrap().as_deref(), Some("wal-prepare"), "not a background preparation");
    log.sync().unwrap();
    fill(&mut log, 2, 20);
    assert_eq!(log.segment_count(), 1);
    let left = st.state().file_bytes(&name).map(<[u8]>::len);
    assert_eq!(left, Some(SEG as usize), "the leftover");
    rotates_into(&st, &mut log, 2, 20);
    survives(&st, log, opts, 1, 21);
}

/// A recycling of the set-aside file into the next segment (in the background, or on the
/// writer's thread within the rotation) renames it, then its directory sync fails (EIO) and the
/// cleanup cannot remove the new name (EIO): `{seq}.wal` stays, the set-aside file under its
/// segment name (the set-aside name gone), unknown to the log. The background preparation then
/// finds the name taken too, and fails. The rotation into `seq` makes the segment again.
fn a_failed_recycling_whose_removal_fails(background: bool) {
    let st = MemStorage::new();
    let opts = Options { prepare_in_background: background, ..opts(1) };
    let (mut log, purged, first, mut next) = if background {
        // Three segments, the fourth prepared while the third was active (nothing set aside
        // yet), then the first two purged, the newer set aside.
        let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts.clone()).unwrap();
        let mut next = 1;
        while log.segment_count() < 3 {
            fill(&mut log, next, next + 10);
            next += 10;
        }
        let r = log.purge_before(Lsn(next - 1)).unwrap();
        let first = log.replay().unwrap().collect_entries().unwrap()[0].0;
        (log, r.segments_removed, first, next)
    } else {
        purged_log(&st, 1, 3)
    };
    assert_eq!(purged.len(), 2);
    let set_aside = recycle_file_name(*purged.iter().max().unwrap());
    assert!(st.state().file_names().contains(&set_aside));
    // In the background segment 4 is the prepared spare and segment 5 is made of the set-aside
    // file; on the writer's thread segment 4 is.
    let seq = if background { 5 } else { 4 };
    let name = segment_file_name(seq);
    let renames = st.faults().calls[Call::Rename as usize];
    let fired = arm_at(&st, Boundary::SyncDir, name.clone(), fail_recycling_dir_sync_and_removal);
    if background {
        log.rotate().unwrap();
        // Activates segment 4 and starts making segment 5 of the set-aside file.
        log.append(Epoch(0), &payload(next)).unwrap();
        wait_for_failures(&st, 2);
        assert_eq!(fired.lock().unwrap().as_deref(), Some("wal-prepare"), "not a background recycling");
        log.sync().unwrap();
        fill(&mut log, next + 1, next + 5);
        next += 5;
        assert_eq!(log.segment_count(), 2);
        let left = st.state().file_bytes(&name).map(<[u8]>::len);
        assert_eq!(left, Some(SEG as usize), "the leftover");
        rotates_into(&st, &mut log, seq, next);
    } else {
        // The recycling runs within this rotation, which then finds the name taken.
        rotates_into(&st, &mut log, seq, next);
        wait_for_failures(&st, 2);
        assert_ne!(fired.lock().unwrap().as_deref(), Some("wal-prepare"));
    }
    assert_eq!(
        st.faults().calls[Call::Rename as usize],
        renames + 1,
        "the recycling got as far as its rename"
    );
    assert!(!st.state().file_names().contains(&set_aside), "{set_aside} is still there");
    survives(&st, log, opts, first, next + 1);
}

#[test]
fn a_failed_background_recycling_whose_removal_fails_does_not_fence_the_rotation() {
    a_failed_recycling_whose_removal_fails(true);
}

#[test]
fn a_failed_recycling_whose_removal_fails_does_not_fence_the_rotation() {
    a_failed_recycling_whose_removal_fails(false);
}
