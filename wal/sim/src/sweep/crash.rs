//! The crash classes (`crash`, `crash-garbage`): a crash at every operation boundary of the
//! workload, every unsynced sector kept, dropped or garbage.

use super::model::candidates;
use super::oracle::{Oracle, Seen, GARBAGE, ZERO};
use super::workload::{new_model, run_workload, Model, Plan, Ran};
use super::{lock, panic_message, Cases, Class, Only, Summary};
use crate::workload::history::{seeded, Rng};
use crate::{Boundary, CrashPoint, MemStorage, SectorFate};
use std::sync::{Arc, Mutex};

struct CrashChecker {
    seed: u64,
    rng: Rng,
    zero: Cases,
    garbage: Cases,
    sum: Summary,
    /// The first failure: kept, not panicked on inside the storage (the log is mid-call there),
    /// and reported once the workload returns.
    failed: Option<String>,
}

impl CrashChecker {
    fn point(&mut self, cp: &CrashPoint, md: &Model) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.check_point(cp, md))) {
            self.failed = Some(panic_message(e));
        }
    }

    fn check_point(&mut self, cp: &CrashPoint, md: &Model) {
        let cands = candidates(&md.hist, md.acked, md.staged);
        let dirty = cp.state.effective_dirty_sectors();
        let rotation = matches!(cp.at, Boundary::Create | Boundary::ZeroFill)
            && matches!(
                md.phase,
                "append" | "batch" | "flush" | "sync" | "checkpoint" | "truncate" | "epoch"
            );
        // Making a set-aside file a segment: its rename outside a purge or close (its writes are
        // writes, counted in the phase they happen in).
        let recycle = cp.at == Boundary::Rename
            && matches!(
                md.phase,
                "append" | "batch" | "flush" | "sync" | "checkpoint" | "truncate" | "epoch"
            );
        let phase = if recycle {
            "recycle"
        } else if rotation {
            "rotation"
        } else if md.cut_pending && matches!(cp.at, Boundary::Write | Boundary::SyncData) {
            "truncate (the cut's write and sync)"
        } else {
            md.phase
        };
        *self.sum.crash_phases.entry(format!("{phase} {:?}", cp.at)).or_default() += 1;
        let oracle = |carry_on| Oracle {
            candidates: &cands,
            allow: ZERO,
            purging: md.purging,
            snapshots: &md.snapshots,
            carry_on,
        };
        let k = dirty.len();
        let masks: Vec<u64> = if k <= 4 {
            (0..1u64 << k).collect()
        } else {
            let mut v = vec![0, u64::MAX];
            v.extend((0..6).map(|_| self.rng.next_u64()));
            v
        };
        for mask in masks {
            let Some(n) = self.zero.take() else { continue };
            let fate = |node: u64, s: u64| match dirty.iter().position(|&d| d == (node, s)) {
                Some(i) if mask.rotate_right(i as u32 % 64) & 1 == 1 => SectorFate::New,
                _ => SectorFate::Old,
            };
            let img = cp.state.crash(fate);
            let what = format!(
                "crash at {phase} {:?} (sync #{}), {k} unsynced sectors, mask {mask:#x}",
                cp.at, cp.sync_index
            );
            let seen = oracle(n % 16 == 0)
                .check(&img)
                .unwrap_or_else(|e| panic!("{}: {e}", self.zero.ctx(n, &what)));
            self.count(Class::Crash, &seen);
            self.sum.fault("crash images", 1);
            self.sum.fault(
                "unsynced sectors dropped",
                (0..k).filter(|i| mask.rotate_right(*i as u32 % 64) & 1 == 0).count() as u64,
            );
        }
        if k == 0 {
            return;
        }
        let draws = if k <= 2 { 3u64.pow(k as u32) } else { 8 };
        for d in 0..draws {
            let fates: Vec<SectorFate> = (0..k)
                .map(|i| {
                    let r = if k <= 2 { (d / 3u64.pow(i as u32)) % 3 } else { self.rng.below(3) };
                    match r {
                        0 => SectorFate::Old,
                        1 => SectorFate::New,
                        _ => SectorFate::Garbage(self.rng.next_u64()),
                    }
                })
                .collect();
            let Some(n) = self.garbage.take() else { continue };
            let img = cp.state.crash(|node, s| match dirty.iter().position(|&x| x == (node, s)) {
                Some(i) => fates[i],
                None => SectorFate::Old,
            });
            let what = format!("crash at {phase} {:?} (sync #{}), sectors {fates:?}", cp.at, cp.sync_index);
            let o = Oracle { allow: GARBAGE, ..oracle(false) };
            let seen = o.check(&img).unwrap_or_else(|e| panic!("{}: {e}", self.garbage.ctx(n, &what)));
            self.count(Class::CrashGarbage, &seen);
            self.sum.fault(
                "garbage sectors",
                fates.iter().filter(|f| matches!(f, SectorFate::Garbage(_))).count() as u64,
            );
        }
    }

    fn count(&mut self, class: Class, seen: &Seen) {
        *self.sum.cases.entry(class.name()).or_default() += 1;
        if let Some(v) = seen.verdict {
            self.sum.verdict(class, v);
        }
        self.sum.acked_checked += seen.acked;
        self.sum.checkpoints_checked += seen.checkpoints;
    }
}

/// The crash classes of one seed; returns the workload's end (cleanly closed) for the others.
pub fn crash_classes(seed: u64, only: Option<Only>, sum: &mut Summary) -> Ran {
    let plan = Plan::full(seed);
    let st = MemStorage::new();
    {
        let mut f = st.faults();
        f.seed = Some(seed ^ 0x5151);
        f.observe_every_op = only.is_none_or(|o| matches!(o.class, Class::Crash | Class::CrashGarbage));
        f.short_write_max = plan.short_writes.then_some(4096);
    }
    let model = new_model();
    let checker = Arc::new(Mutex::new(CrashChecker {
        seed,
        rng: seeded(seed ^ 0xc0ffee),
        zero: Cases::new(seed, Class::Crash, only),
        garbage: Cases::new(seed, Class::CrashGarbage, only),
        sum: Summary::default(),
        failed: None,
    }));
    {
        let (model, checker) = (model.clone(), checker.clone());
        st.set_sync_observer(move |cp| {
            let md = lock(&model);
            lock(&checker).point(&cp, &md);
        });
    }
    let ran = run_workload(&st, &plan, &model);
    st.set_sync_observer(|_| {});
    st.faults().observe_every_op = false;
    let ck = lock(&checker);
    if let Some(why) = &ck.failed {
        panic!("{why}");
    }
    if let Some((e, _)) = &ran.error {
        panic!("seed {seed}: the crash workload failed without a fault: {e}");
    }
    sum.merge(&ck.sum);
    sum.fault("short writes", st.faults().short_writes_done);
    sum.fault("stale-epoch appends rejected", ran.stale_rejected);
    *sum.cases.entry(Class::StaleEpoch.name()).or_default() += ran.stale_rejected;
    ran
}
