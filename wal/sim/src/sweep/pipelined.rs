//! The `pipelined` class: the I/O thread on a simulated file system that holds completions back
//! and reorders them, with crash images at every sync, and syncs a caller asks for.

use super::model::candidates;
use super::oracle::{Oracle, ZERO};
use super::workload::{command, opts};
use super::{lock, panic_message, Cases, Class, Only, Summary};
use crate::workload::history::{seeded, History, Op as HOp};
use crate::{MemStorage, SectorFate};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use wal::{AsyncOptions, AsyncWal, Completion, Durability, Epoch, Notify, Payload, Stage, Wal};

/// The I/O thread on a simulated file system that holds completions back and runs a seeded part
/// of them in a seeded order, with writes split short: at every sync, images (synced bytes only,
/// and unsynced sectors kept or dropped) keep everything acknowledged.
pub fn pipelined_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let cases = Arc::new(Mutex::new(Cases::new(seed, Class::Pipelined, only)));
    let st = MemStorage::new();
    let (wal, _) = Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap();
    let log = AsyncWal::start(wal, AsyncOptions { max_batch_entries: 3, ..AsyncOptions::default() }).unwrap();
    {
        let mut f = st.faults();
        f.seed = Some(seed ^ 0x919e);
        f.defer = true;
        f.short_write_max = Some(1024 + 512 * (seed % 4));
    }
    let (tx, rx) = crossbeam_channel::unbounded::<Completion>();
    let hist = Arc::new(Mutex::new(History::new()));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let local = Arc::new(Mutex::new(Summary::default()));
    let failed = Arc::new(Mutex::new(None::<String>));
    {
        let (hist, acked, local, cases) = (hist.clone(), acked.clone(), local.clone(), cases.clone());
        let mut rng = seeded(seed ^ 0xabc);
        let failed = failed.clone();
        // On the I/O thread, inside the storage: a failure is kept (the thread must not unwind
        // through the log mid-call) and reported once the run is over.
        st.set_sync_observer(move |cp| {
            if lock(&failed).is_some() {
                return;
            }
            let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut a = lock(&acked);
                for c in rx.try_iter() {
                    if c.stage == Stage::Final {
                        a.insert(c.lsn.0);
                    }
                }
                // Tickets resolve oldest first: the acknowledged LSNs are a dense prefix.
                let n_acked = a.len();
                assert!(
                    a.iter().copied().eq(1..=n_acked as u64),
                    "seed {seed}: acknowledgements out of order"
                );
                let h = lock(&hist).clone();
                let cands = candidates(&h, n_acked, h.len());
                let dirty = cp.state.effective_dirty_sectors();
                let mut masks = vec![0u64, u64::MAX];
                masks.extend((0..3).map(|_| rng.next_u64()));
                let mut cs = lock(&cases);
                let mut sum = lock(&local);
                for mask in masks {
                    let Some(n) = cs.take() else { continue };
                    let img = cp.state.crash(|node, s| match dirty.iter().position(|&d| d == (node, s)) {
                        Some(i) if mask.rotate_right(i as u32 % 64) & 1 == 1 => SectorFate::New,
                        _ => SectorFate::Old,
                    });
                    let o = Oracle {
                        candidates: &cands,
                        allow: ZERO,
                        purging: false,
                        snapshots: &[],
                        carry_on: false,
                    };
                    let what = format!("sync #{}, {} acknowledged, mask {mask:#x}", cp.sync_index, n_acked);
                    let seen = o.check(&img).unwrap_or_else(|e| panic!("{}: {e}", cs.ctx(n, &what)));
                    *sum.cases.entry(Class::Pipelined.name()).or_default() += 1;
                    sum.acked_checked += seen.acked;
                    sum.checkpoints_checked += seen.checkpoints;
                    if let Some(v) = seen.verdict {
                        sum.verdict(Class::Pipelined, v);
                    }
                    sum.fault("crash images", 1);
                }
            }));
            if let Err(e) = checked {
                *lock(&failed) = Some(panic_message(e));
            }
        });
    }
    let mut rng = seeded(seed ^ 0x7177);
    let mut window = std::collections::VecDeque::new();
    let mut asked = 0u64;
    for i in 0..90u64 {
        let p = command(&mut rng, i);
        let lsn = log.next_lsn().0;
        lock(&hist).push(HOp::Put(lsn, p.clone()), true);
        let d = if rng.below(3) == 0 { Durability::Written } else { Durability::Durable };
        let t = log
            .append_with(Epoch(0), Payload::One(p), d, Some(Notify { tx: tx.clone(), tag: i }))
            .unwrap_or_else(|e| panic!("seed {seed}: append: {e}"));
        assert_eq!(t.lsn.0, lsn);
        window.push_back(t);
        // Now and then a caller asks for a sync: once its ticket resolves, every entry appended
        // before it is durable, with completions held back and reordered or not.
        if i % 15 == 14 {
            let s = log.sync().unwrap_or_else(|e| panic!("seed {seed}: sync: {e}"));
            assert_eq!(s.lsn.0, lsn + 1, "seed {seed}: a sync's ticket carries the next LSN");
            assert!(s.wait().is_ok(), "seed {seed}: a sync failed with no fault injected");
            for t in &window {
                let d = t.poll_durable();
                assert!(matches!(d, Some(Ok(_))), "seed {seed}: entry {} is {d:?} after a sync", t.lsn.0);
            }
            asked += 1;
        }
        if window.len() > 12 {
            let t = window.pop_front().unwrap();
            assert!(t.wait_durable().is_ok(), "seed {seed}: no fault was injected");
        }
        if lock(&failed).is_some() {
            break;
        }
    }
    for t in window {
        assert!(t.wait_durable().is_ok(), "seed {seed}");
    }
    log.close().unwrap_or_else(|e| panic!("seed {seed}: close: {e}"));
    st.set_sync_observer(|_| {});
    if let Some(why) = lock(&failed).take() {
        panic!("{why}");
    }
    let f = st.faults();
    assert_eq!(f.syncs_over_unreaped_writes, 0, "seed {seed}: a sync was submitted over an unreaped write");
    assert_eq!(f.overlapping_syncs, 0, "seed {seed}: two syncs in flight on one file");
    sum.merge(&lock(&local));
    sum.fault("short writes", f.short_writes_done);
    sum.fault("completions out of order", f.ran_out_of_order);
    sum.fault("syncs asked by a caller", asked);
}
