//! A recycling interrupted twice (FORMAT.md section 9, Recycle): a crash at each point of a
//! recycling (after each of its writes, before its fdatasync, after its rename, before its
//! directory sync), each dirty sector kept, dropped or mixed; the reopen of that image
//! recycles again, and a crash interrupts it at each of its points too; the final open must
//! replay exactly the acknowledged entries and the log must carry on (the half-recycled files
//! set aside again and recycled, a full scan OK).

use super::{entries, opens_and_carries_on, opts, payload, purged_log};
use std::sync::{Arc, Mutex};
use wal::format::{parse_recycle_file_name, parse_segment_file_name};
use wal::{CrcVerdict, Epoch, Lsn, Wal};
use wal_sim::{Boundary, CrashPoint, MemStorage, SectorFate};

type Fate = fn(u64, u64) -> SectorFate;

/// Each dirty sector new, old, or alternately one and the other.
const FATES: [(&str, Fate); 3] = [
    ("new", |_, _| SectorFate::New),
    ("old", |_, _| SectorFate::Old),
    ("mixed", |_, s| if s % 2 == 0 { SectorFate::New } else { SectorFate::Old }),
];

/// The crash points of a recycling and of the first batch the recycled segment takes, and the
/// entry whose append made it: from `lsn` on, the log is rotated (the last segment sealed), an
/// entry appended and synced, until an activation recycles a set-aside file rather than take a
/// spare a crash left (the batch is only staged by the append, written by the sync). The
/// entries before the one returned are acknowledged. The log is left without a close.
fn points_of_a_recycling(st: &MemStorage, mut log: Wal, mut lsn: u64) -> (Vec<CrashPoint>, u64) {
    let pool =
        |st: &MemStorage| st.state().file_names().iter().filter_map(|n| parse_recycle_file_name(n)).count();
    let before = pool(st);
    assert!(before > 0, "nothing set aside to recycle");
    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let p = points.clone();
    st.set_sync_observer(move |cp| p.lock().unwrap().push(cp));
    st.faults().observe_every_op = true;
    loop {
        log.rotate().unwrap();
        points.lock().unwrap().clear();
        assert_eq!(log.append(Epoch(0), &payload(lsn)).unwrap(), Lsn(lsn));
        let recycled = pool(st) < before;
        log.sync().unwrap();
        if recycled {
            break;
        }
        lsn += 1;
    }
    st.set_sync_observer(|_| {});
    st.faults().observe_every_op = false;
    log.abandon();
    let points = std::mem::take(&mut *points.lock().unwrap());
    let seen: Vec<Boundary> = points.iter().map(|p| p.at).collect();
    for b in [Boundary::Write, Boundary::SyncData, Boundary::Rename, Boundary::SyncDir] {
        assert!(seen.contains(&b), "no {b:?} among the recycling's crash points: {seen:?}");
    }
    (points, lsn)
}

/// The highest segment number in the directory.
fn last_seg(st: &MemStorage) -> Option<u64> {
    st.state().file_names().iter().filter_map(|n| parse_segment_file_name(n)).max()
}

#[test]
fn a_recycling_interrupted_twice_loses_no_acknowledged_entry() {
    let st = MemStorage::new();
    // Two files set aside: the second recycling may take the one the first did not.
    let (log, _, first, next) = purged_log(&st, 2, 4);
    let acked = entries(first, next);
    let sealed = last_seg(&st);
    let (mut images, mut unfinished, mut recycled) = (0, 0, 0);
    let (points, at) = points_of_a_recycling(&st, log, next);
    assert_eq!(at, next, "no spare to take: the first append recycles");
    for (i, p1) in points.iter().enumerate() {
        for (f1, fate1) in FATES {
            let img1 = p1.state.crash(fate1);
            let ctx1 = format!("first crash at point {i} ({:?}), sectors {f1}", p1.at);
            // Before the recycling's directory sync the new segment's name is not durable.
            if last_seg(&img1) == sealed {
                unfinished += 1;
            } else {
                recycled += 1;
            }
            let (log, rep) = Wal::open_with(Arc::new(img1.clone()), opts(2))
                .unwrap_or_else(|e| panic!("{ctx1}: the open failed: {e}"));
            assert!(matches!(rep.verdict, CrcVerdict::Ok | CrcVerdict::TornTail), "{ctx1}: {:?}", rep.damage);
            // Exactly the acknowledged entries, and the one being synced if the crash kept it.
            let got = log.replay().unwrap().collect_entries().unwrap();
            let unacked = entries(next, next + 1);
            assert!(
                got == acked || got == [&acked[..], &unacked[..]].concat(),
                "{ctx1}: {} entries",
                got.len()
            );
            // The reopen's own recycling (of what the first one left: the newest set aside),
            // interrupted at each of its points.
            let lsn = got.last().unwrap().0 + 1;
            let (points, at) = points_of_a_recycling(&img1, log, lsn);
            let acked = [&got[..], &entries(lsn, at)[..]].concat();
            for (j, p2) in points.iter().enumerate() {
                for (f2, fate2) in FATES {
                    let img2 = p2.state.crash(fate2);
                    let ctx = format!("{ctx1}; second crash at point {j} ({:?}), sectors {f2}", p2.at);
                    let (rep, _) = opens_and_carries_on(&img2, opts(2), &acked, &entries(at, at + 1), &ctx);
                    assert!(rep.cut.is_none() || rep.verdict == CrcVerdict::TornTail, "{ctx}");
                    images += 1;
                }
            }
        }
    }
    println!("recycling interrupted twice: {images} final images; first crashes {unfinished} before the recycling finished, {recycled} after");
    assert!(
        unfinished > 0 && recycled > 0,
        "crashes before the recycling finished {unfinished}, after {recycled}"
    );
    assert!(images >= 100, "only {images} final images");
}
