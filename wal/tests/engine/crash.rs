//! Crash test through the storage seam (docs/invariants.md I3, I4).
//!
//! A seeded workload writes a log of at least three segments holding every record kind. At every
//! sync (data or directory) the in-memory backend hands us its whole state; from each such state
//! we build crash images in which every sector written since the last sync is either kept or
//! dropped (every combination up to 10 such sectors, 1,024 seeded random ones beyond). Each image
//! must scan as OK or TORN_TAIL (never CORRUPT or CORRUPT_TAIL: the zero model), must open, and
//! must replay to the state after some prefix of the staged operations that includes everything
//! acknowledged by a completed `sync` and never ends inside a user batch.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use wal::{CrcVerdict, Epoch, Lsn, Options, Wal};
use wal_sim::workload::history::{apply, History, Op, Rng};
use wal_sim::{CrashPoint, MemStorage, SectorFate};

const SEG: u32 = 64 * 1024;

fn payload(rng: &mut Rng, lsn: u64) -> Vec<u8> {
    let len = 1 + rng.below(400) as usize;
    (0..len).map(|i| (lsn as usize * 7 + i * 13) as u8).collect()
}

struct Run {
    /// (state, acked ops, staged ops, a purge had started)
    points: Vec<(CrashPoint, usize, usize, bool)>,
    hist: History,
    purged: bool,
}

/// Runs the workload, recording every sync point with (acked, staged) history lengths.
fn run_workload(seed: u64) -> Run {
    let st = MemStorage::new();
    let acked = Arc::new(AtomicUsize::new(0));
    let staged = Arc::new(AtomicUsize::new(0));
    let points = Arc::new(Mutex::new(Vec::new()));
    let purging = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (acked, staged, points, purging) =
            (acked.clone(), staged.clone(), points.clone(), purging.clone());
        st.set_sync_observer(move |cp| {
            let p = purging.load(Ordering::SeqCst);
            points.lock().unwrap().push((cp, acked.load(Ordering::SeqCst), staged.load(Ordering::SeqCst), p));
        });
    }
    let opts = Options { segment_len_bytes: SEG, ..Options::default() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts).unwrap();
    let mut rng = Rng::xorshift64_star(seed);
    let mut hist = History::new();
    let mut epoch = 0u64;
    // Start the log at LSN 100 (a Reset record).
    hist.push(Op::Cut(0), true);
    staged.store(hist.ops.len(), Ordering::SeqCst);
    log.append_at(Epoch(epoch), Lsn(100), b"first").unwrap();
    hist.push(Op::Put(100, b"first".to_vec()), true);
    staged.store(hist.ops.len(), Ordering::SeqCst);
    let mut step = 0;
    let mut purged = false;
    while log.segment_count() < 4 && step < 5000 {
        step += 1;
        let next = log.next_lsn().0;
        if !purged && log.segment_count() == 3 {
            // Purge the first segment: crash points inside the purge (wal.meta replaced, files
            // unlinked, directory synced) must all recover.
            log.sync().unwrap();
            acked.store(hist.ops.len(), Ordering::SeqCst);
            purging.store(true, Ordering::SeqCst);
            let r = log.purge_before(Lsn(next - 1)).unwrap();
            purged = !r.segments_removed.is_empty();
        }
        match rng.below(100) {
            0..=59 => {
                let p = payload(&mut rng, next);
                hist.push(Op::Put(next, p.clone()), true);
                staged.store(hist.ops.len(), Ordering::SeqCst);
                log.append(Epoch(epoch), &p).unwrap();
            }
            60..=69 => {
                let n = 2 + rng.below(3);
                let ps: Vec<Vec<u8>> = (0..n).map(|i| payload(&mut rng, next + i)).collect();
                for (i, p) in ps.iter().enumerate() {
                    hist.push(Op::Put(next + i as u64, p.clone()), i as u64 + 1 == n);
                }
                staged.store(hist.ops.len(), Ordering::SeqCst);
                let refs: Vec<&[u8]> = ps.iter().map(Vec::as_slice).collect();
                log.append_batch(Epoch(epoch), &refs).unwrap();
            }
            70..=74 => {
                let cp = wal::Checkpoint {
                    digest: [step as u8; 32],
                    entity_count: step,
                    digest_version: 1,
                    state_machine_version: 1,
                };
                log.checkpoint(Epoch(epoch), Lsn(next - 1), &cp).unwrap();
            }
            75..=77 if next > 105 => {
                let after = next - 1 - rng.below(3);
                hist.push(Op::Cut(after + 1), true);
                staged.store(hist.ops.len(), Ordering::SeqCst);
                log.truncate_after(Epoch(epoch), Lsn(after)).unwrap();
            }
            78 => {
                epoch += 1;
                log.advance_epoch(Epoch(epoch)).unwrap();
            }
            79..=80 => log.set_meta(rng.below(4) as u32, &next.to_le_bytes()).unwrap(),
            81..=84 => log.flush().unwrap(),
            _ => {
                log.sync().unwrap();
                acked.store(hist.ops.len(), Ordering::SeqCst);
            }
        }
    }
    log.sync().unwrap();
    acked.store(hist.ops.len(), Ordering::SeqCst);
    log.close().unwrap();
    let points = std::mem::take(&mut *points.lock().unwrap());
    Run { points, hist, purged }
}

#[test]
fn every_crash_at_every_sync_recovers_a_prefix_with_everything_acknowledged() {
    let seed = std::env::var("WAL_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026_u64);
    println!("crash test seed {seed} (set WAL_CRASH_SEED to replay another)");
    let run = run_workload(seed);
    assert!(run.points.len() > 20, "too few sync points: {}", run.points.len());
    let mut states = 0u64;
    let mut torn = 0u64;
    let mut rng = Rng::xorshift64_star(seed ^ 0xdead_beef);
    assert!(run.purged, "the workload never purged a segment");
    for (pi, (cp, acked, staged, purging)) in run.points.iter().enumerate() {
        // Candidate recovered states: after ops[..k], acked <= k <= staged, k a boundary.
        let mut m = BTreeMap::new();
        for op in &run.hist.ops[..*acked] {
            apply(&mut m, op);
        }
        let mut candidates = Vec::new();
        for k in *acked..=*staged {
            if k > *acked {
                apply(&mut m, &run.hist.ops[k - 1]);
            }
            if run.hist.ok[k] {
                candidates.push(m.clone().into_iter().collect::<Vec<_>>());
            }
        }
        let dirty = cp.state.effective_dirty_sectors();
        let masks: Vec<u64> = if dirty.len() <= 10 {
            (0..1u64 << dirty.len()).collect()
        } else {
            (0..1024).map(|_| rng.next_u64()).collect()
        };
        for mask in masks {
            states += 1;
            let fate = |n: u64, s: u64| {
                let i = dirty.iter().position(|&d| d == (n, s));
                match i {
                    Some(i) if i < 64 && mask & (1 << i) != 0 => SectorFate::New,
                    Some(i) if i >= 64 && (mask.rotate_left(i as u32) & 1) != 0 => SectorFate::New,
                    _ => SectorFate::Old,
                }
            };
            let img = cp.state.crash(fate);
            let ctx = format!(
                "seed {seed} sync point {pi} (sync #{}) mask {mask:#x} of {} sectors",
                cp.sync_index,
                dirty.len()
            );
            let scan = match wal::scan_log(&img, true) {
                Err(wal::Error::NotFound(_)) => {
                    // The crash came before the log's creation was durable: nothing was acknowledged.
                    assert_eq!(*acked, 0, "{ctx}: the log vanished after acknowledgements");
                    continue;
                }
                r => r.unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}")),
            };
            assert!(
                matches!(scan.verdict, CrcVerdict::Ok | CrcVerdict::TornTail),
                "{ctx}: a pure crash gave {:?}",
                scan.damage
            );
            if scan.verdict == CrcVerdict::TornTail {
                torn += 1;
            }
            let opts = Options { segment_len_bytes: SEG, ..Options::default() };
            let (log, _) = Wal::open_with(Arc::new(img.clone()), opts)
                .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
            let got =
                log.replay().unwrap().collect_entries().unwrap_or_else(|e| panic!("{ctx}: replay: {e}"));
            // After a purge started, the recovered log may begin later: compare from its start.
            let matches = |c: &Vec<(u64, Vec<u8>)>| {
                if !*purging {
                    return *c == got;
                }
                let from = got.first().map_or(u64::MAX, |e| e.0);
                c.iter().filter(|e| e.0 >= from).eq(got.iter()) && c.last() == got.last()
            };
            assert!(
                candidates.iter().any(matches),
                "{ctx}: recovered {} entries (last {:?}), not a prefix state between acked op {} and staged op {}",
                got.len(),
                got.last().map(|e| e.0),
                acked,
                staged
            );
            // The recovered log must carry on: the next entry follows the last one recovered,
            // and a clean close and reopen find it there (a torn first batch of a fresh segment
            // once lost the log's state here).
            let mut log = log;
            let next = log.next_lsn();
            assert!(
                got.last().is_none_or(|e| e.0 < next.0),
                "{ctx}: next LSN {next} after {:?}",
                got.last().map(|e| e.0)
            );
            let at =
                log.append(Epoch(log.epoch().0), b"after recovery").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            log.close().unwrap_or_else(|e| panic!("{ctx}: close after recovery: {e}"));
            let after = wal::scan_log(&img, true).unwrap();
            assert_eq!(after.verdict, CrcVerdict::Ok, "{ctx}: not OK after recovery: {:?}", after.damage);
            let opts = Options { segment_len_bytes: SEG, ..Options::default() };
            let (log, _) =
                Wal::open_with(Arc::new(img.clone()), opts).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let again = log.replay().unwrap().collect_entries().unwrap();
            assert_eq!(again.last(), Some(&(at.0, b"after recovery".to_vec())), "{ctx}");
            assert_eq!(again.len(), got.len() + 1, "{ctx}");
            log.abandon();
        }
    }
    println!(
        "crash test: {} sync points, {states} crash states checked, {torn} torn tails cut",
        run.points.len()
    );
    assert!(
        torn > 0,
        "no crash state produced a torn tail: the test would not notice a recovery that never cuts"
    );
}
