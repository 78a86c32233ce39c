//! A segment preparation or recycling that fails and whose cleanup fails too
//! (`wal/src/storage/prepare.rs`: `forget` removes what the failure left and syncs the directory
//! "as far as it can"): a name is left behind. What is left is asserted, then that the next open
//! handles it by the rule of FORMAT.md section 1: a `{seq}.wal` after the last segment holding
//! records is a spare (full length: taken as it is; shorter, an unfinished one: removed and
//! made again when the writer comes to use it), and a `{seq}.recycle` of the right length is
//! set aside again. Every acknowledged entry survives, with and without a crash.

use super::{entries, fill, opens_and_carries_on, opts, payload, purged_log, SEG};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use wal::format::{recycle_file_name, segment_file_name};
use wal::{CrcVerdict, Epoch, Error, Wal};
use wal_sim::{Call, CrashPoint, FailCall, MemStorage, SectorFate};

fn calls(st: &MemStorage, c: Call) -> u64 {
    st.faults().calls[c as usize]
}

fn file_len(st: &MemStorage, name: &str) -> Option<usize> {
    st.state().file_bytes(name).map(<[u8]>::len)
}

/// A new segment's fdatasync fails (EIO), and so does the removal of the half-made file: the
/// rotation fails and fences the log, and `{2}.wal` stays, made durable in the directory by the
/// cleanup's own directory sync. Live it is the segment's length of zeros; after a crash it is
/// empty (the failed sync's pages never reached the disk). Either way the next open takes it
/// for a spare (an unfinished one after the crash) and replays exactly what was acknowledged;
/// the next segment is then made of it or made again in its place.
#[test]
fn a_failed_preparation_whose_removal_fails_leaves_a_spare_the_next_open_uses() {
    let st = MemStorage::new();
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts(0)).unwrap();
    fill(&mut log, 1, 20);
    log.rotate().unwrap();
    let name = segment_file_name(2);
    assert_eq!(file_len(&st, &name), None, "no spare yet: preparation is not in the background");
    {
        // The next fdatasync (the new segment's, inside `prepare_file`) fails once; the next
        // removal (the cleanup's) fails too.
        let mut f = st.faults();
        f.fail_sync_from = Some(f.syncs_seen);
        f.fail_sync_until = Some(f.syncs_seen + 1);
        let nth = f.calls[Call::Remove as usize];
        f.fail_calls = vec![FailCall { call: Call::Remove, nth, errno: 5 }];
    }
    let removes = calls(&st, Call::Remove);
    let e = log.append(Epoch(0), &payload(20)).unwrap_err();
    assert!(
        matches!(&e, Error::Io { context, source } if context.contains("preparing") && source.raw_os_error() == Some(5)),
        "{e}"
    );
    assert_eq!(calls(&st, Call::Remove), removes + 1, "the cleanup tried one removal");
    assert_eq!(st.faults().calls_failed, 1, "the removal failed");
    // The failure fences the log: nothing more is accepted until it is reopened.
    assert!(matches!(log.append(Epoch(0), &payload(20)), Err(Error::Fenced { .. })));
    // What is left: the half-made segment, under its segment name, in the live and (the
    // cleanup synced the directory) the durable directory.
    let state = st.state();
    assert!(state.file_names().contains(&name), "{:?}", state.file_names());
    let live = state.file_bytes(&name).unwrap();
    assert_eq!(live.len(), SEG as usize);
    assert!(live.iter().all(|&b| b == 0));
    let crashed = state.crash(|_, _| SectorFate::Old);
    let crashed_names = crashed.state().file_names();
    assert!(crashed_names.contains(&name), "the name is durable: {crashed_names:?}");
    assert_eq!(file_len(&crashed, &name), Some(0), "the failed sync made none of its zeros durable");
    // Both are a spare after the last segment holding records, not damage.
    for (img, what) in [(&st, "live"), (&crashed, "after a crash")] {
        let scan = wal::scan_log(img, true).unwrap();
        assert_eq!(scan.verdict, CrcVerdict::Ok, "{what}: {:?}", scan.damage);
        assert_eq!(scan.spares, vec![2], "{what}");
        assert_eq!(scan.segments.iter().map(|s| s.seq).collect::<Vec<_>>(), vec![1], "{what}");
    }
    drop(log);
    // The next open: after a crash the empty spare is removed and made again when the log
    // rotates into it; live (the process reopens without a crash) the spare of zeros is taken
    // as it is.
    for (img, what, remade) in [(&crashed, "after a crash", 1), (&st, "live", 0)] {
        let (mut log, rep) = Wal::open_with(Arc::new(img.clone()), opts(0)).unwrap();
        assert_eq!((rep.verdict, rep.cut, rep.leftovers_removed.len()), (CrcVerdict::Ok, None, 0), "{what}");
        assert_eq!(log.replay().unwrap().collect_entries().unwrap(), entries(1, 20), "{what}");
        let (c, r) = (calls(img, Call::Create), calls(img, Call::Remove));
        fill(&mut log, 20, 21);
        assert_eq!(log.segment_count(), 2, "{what}");
        let made = (calls(img, Call::Create) - c, calls(img, Call::Remove) - r);
        assert_eq!(made, (remade, remade), "{what}: (created, removed)");
        assert_eq!(file_len(img, &name), Some(SEG as usize), "{what}");
        log.close().unwrap();
        opens_and_carries_on(img, opts(0), &entries(1, 21), &[], what);
    }
}

/// A recycling (`recycle_file`) whose directory sync after the rename fails, and whose cleanup
/// then removes the new name but cannot sync the directory either: the purged file's
/// `{seq}.recycle` name is still the durable one, over the table and zeroed header the
/// recycling synced. The log carries on with a new file (a failed recycling is not an error).
/// Every crash point of that rotation and after is taken: each opens, replays at least every
/// acknowledged entry and nothing that was not written, and carries on; where the set-aside
/// file is still durable, the open sets it aside again and a later rotation recycles it.
#[test]
fn a_failed_recycling_whose_directory_sync_fails_twice_leaves_a_file_set_aside() {
    let st = MemStorage::new();
    // The newest purged file is set aside.
    let (mut log, purged, first, mut next) = purged_log(&st, 1, 3);
    let set_aside = recycle_file_name(*purged.iter().max().unwrap());
    assert!(st.state().file_names().contains(&set_aside));
    log.rotate().unwrap();
    let acked = Arc::new(AtomicUsize::new(next as usize - 1));
    let points: Arc<Mutex<Vec<(CrashPoint, usize)>>> = Arc::default();
    {
        let (acked, points) = (acked.clone(), points.clone());
        st.set_sync_observer(move |cp| points.lock().unwrap().push((cp, acked.load(Ordering::SeqCst))));
        let mut f = st.faults();
        f.observe_every_op = true;
        // The recycling's directory sync fails, and so does its cleanup's.
        let nth = f.calls[Call::SyncDir as usize];
        f.fail_calls = vec![
            FailCall { call: Call::SyncDir, nth, errno: 5 },
            FailCall { call: Call::SyncDir, nth: nth + 1, errno: 5 },
        ];
    }
    let renames = calls(&st, Call::Rename);
    // The rotation: the recycling fails, a new file takes its place, the append goes on.
    log.append(Epoch(0), &payload(next)).unwrap();
    assert_eq!(st.faults().calls_failed, 2, "both directory syncs failed");
    assert_eq!(calls(&st, Call::Rename), renames + 1, "the recycling got as far as its rename");
    let names = st.state().file_names();
    assert!(!names.contains(&set_aside), "the cleanup removed it from the live directory: {names:?}");
    log.sync().unwrap();
    next += 1;
    acked.store(next as usize - 1, Ordering::SeqCst);
    fill(&mut log, next, next + 5);
    next += 5;
    acked.store(next as usize - 1, Ordering::SeqCst);
    log.close().unwrap();
    let points = std::mem::take(&mut *points.lock().unwrap());
    // Every crash point of the rotation and after: until the new segment's directory sync, the
    // set-aside name is the durable one.
    let mut left_set_aside = 0;
    for (i, (cp, acked)) in points.iter().enumerate() {
        for fate in [SectorFate::Old, SectorFate::New] {
            let img = cp.state.crash(|_, _| fate);
            let ctx = format!("crash point {i} ({:?}, sync #{}) {fate:?}", cp.at, cp.sync_index);
            let durable = img.state().file_names();
            if durable.contains(&set_aside) {
                let bytes = img.state().file_bytes(&set_aside).unwrap().to_vec();
                assert_eq!(bytes.len(), SEG as usize, "{ctx}");
                // Once the cleanup has run, what is left is what the recycling synced: its
                // header sector zeroed (the old segment's header gone).
                if !cp.state.file_names().contains(&set_aside) {
                    left_set_aside += 1;
                    assert!(bytes[..512].iter().all(|&b| b == 0), "{ctx}: the old header is still there");
                }
            }
            let (log, rep) = Wal::open_with(Arc::new(img.clone()), opts(1))
                .unwrap_or_else(|e| panic!("{ctx}: the open failed: {e}"));
            assert!(matches!(rep.verdict, CrcVerdict::Ok | CrcVerdict::TornTail), "{ctx}: {:?}", rep.damage);
            let got = log.replay().unwrap().collect_entries().unwrap();
            let end = got.last().map_or(first, |e| e.0 + 1);
            assert!(end > *acked as u64, "{ctx}: acknowledged entry {acked} lost, replay ends at {end}");
            assert_eq!(got, entries(first, end), "{ctx}");
            // The open sets a durable `.recycle` aside again (it is the right length).
            assert_eq!(img.state().file_names().contains(&set_aside), durable.contains(&set_aside), "{ctx}");
            drop(log);
            let want = entries(first, end);
            opens_and_carries_on(&img, opts(1), &want, &[], &ctx);
            // Carrying on took a recycled file: the set-aside one, when it was there.
            assert!(!img.state().file_names().contains(&set_aside), "{ctx}: never recycled");
        }
    }
    assert!(
        left_set_aside > 0,
        "no crash point after the cleanup left the set-aside file: the test sees nothing"
    );
}
