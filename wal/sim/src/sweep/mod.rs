//! The fault sweep: seeded workloads on
//! the simulated file system (`MemStorage` with `Faults::seed`), every case of the fault matrix
//! checked by one oracle ([`Oracle`]), counted into a [`Summary`].
//!
//! Shared by the fast subset (`wal/sim/tests/fault_sweep.rs`, in `cargo test`) and the long
//! sweep (the `wal-sweep` binary). Everything a case does follows from
//! its seed, so a failure names the seed and the case and one command replays it:
//! `WAL_SWEEP_SEED=<seed> WAL_SWEEP_CASE=<class>:<n> cargo test -p wal-sim --test fault_sweep
//! replay_one_case -- --nocapture`. (The `pipelined` class runs the I/O thread, whose batching
//! depends on timing: its seed fixes the simulated file system's choices, not the batches.)
//!
//! Classes (the matrix rows they cover):
//! - `crash` (A1, A2, A4-A6, A8, A9): a crash at every operation boundary of a workload that
//!   appends, batches, flushes, syncs, checkpoints, cuts a suffix, advances the epoch, rotates
//!   (create, zero-fill, sync, directory sync), writes a snapshot (tmp, sync, rename, directory
//!   sync) and purges the prefix below it; every unsynced sector kept or dropped (every subset
//!   up to 4 such sectors, 8 seeded ones beyond). Un-synced names roll back; close never syncs.
//! - `crash-garbage`: the same points, each unsynced sector new, old or garbage.
//! - `pipelined` (A3, C3): the I/O thread on a simulated file system that holds completions back,
//!   runs a seeded part of them in a seeded order and splits writes short; images at every sync.
//! - `corrupt` (B1-B5, I7 on disk): a cleanly closed log with a bit flipped, a sector zeroed,
//!   filled with garbage, replaced by a stale, misdirected or foreign sector, a file truncated, a
//!   segment missing, two segments swapped.
//! - `sync-eio` (C1, C2): fdatasync fails at the k-th call, for every k, once or from then on,
//!   on the synchronous API and through the I/O thread (with `append_wait` rounds on the
//!   caller's thread mixed in).
//! - `disk-full` (C4): the device fills at a seeded point.
//! - `syscall-fail` (C5): a create, rename, remove, directory sync, zero-fill or write fails.
//! - `read-error` (C6): a read fails while scanning or opening.
//! - `stale-epoch` (I7): appends from an older writer epoch, on both APIs.
#![allow(dead_code)]

pub mod torn_cut;

use crate::workload::{history, kv};

use crate::{Boundary, Call, CrashPoint, FailCall, MemState, MemStorage, SectorFate};
use history::{apply as apply_op, next_lsn_after, History, Op as HOp};
pub use history::{seeded, Rng};
use kv::Kv;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use wal::state::snapshot::{list_snapshots, read_snapshot, write_snapshot};
use wal::state::{Applier, EntryKind, Envelope, Replayer};
use wal::storage::Storage;
use wal::{
    AsyncOptions, AsyncWal, Checkpoint, Completion, CrcVerdict, Durability, Epoch, Error, Failure, Lsn,
    Notify, Options, Payload, RecoveryMode, Stage, Wal,
};

pub const SEG: u32 = 64 * 1024;

/// The classes of the matrix, in the order a seed runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Crash,
    CrashGarbage,
    Pipelined,
    Corrupt,
    SyncEio,
    DiskFull,
    SyscallFail,
    ReadError,
    StaleEpoch,
}

impl Class {
    pub const ALL: [Class; 9] = [
        Class::Crash,
        Class::CrashGarbage,
        Class::Pipelined,
        Class::Corrupt,
        Class::SyncEio,
        Class::DiskFull,
        Class::SyscallFail,
        Class::ReadError,
        Class::StaleEpoch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::Crash => "crash",
            Class::CrashGarbage => "crash-garbage",
            Class::Pipelined => "pipelined",
            Class::Corrupt => "corrupt",
            Class::SyncEio => "sync-eio",
            Class::DiskFull => "disk-full",
            Class::SyscallFail => "syscall-fail",
            Class::ReadError => "read-error",
            Class::StaleEpoch => "stale-epoch",
        }
    }

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// What a sweep did. Every counter is a sum over seeds; `lost` must stay 0 (a loss fails the
/// case before it is counted, so a summary with cases in it is itself the evidence).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub cases: BTreeMap<&'static str, u64>,
    /// Faults injected, by kind (crash images, sectors dropped, bit flips, failed syncs, ...).
    pub faults: BTreeMap<&'static str, u64>,
    /// CRC verdicts seen, by class and verdict.
    pub verdicts: BTreeMap<String, u64>,
    /// Crash points by the operation they interrupted.
    pub crash_phases: BTreeMap<String, u64>,
    /// Acknowledged entries found intact, byte for byte, summed over cases.
    pub acked_checked: u64,
    pub entries_lost: u64,
    /// Checkpoints replay compared with the online digest (the state verdict CLEAN).
    pub checkpoints_checked: u64,
    pub seeds: u64,
    /// Failed cases (each message names the seed, the case and the replay command). The sweep
    /// stops at the first.
    pub failures: Vec<String>,
}

impl Summary {
    pub fn total(&self) -> u64 {
        self.cases.values().sum()
    }

    pub fn merge(&mut self, o: &Summary) {
        for (k, v) in &o.cases {
            *self.cases.entry(k).or_default() += v;
        }
        for (k, v) in &o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        for (k, v) in &o.verdicts {
            *self.verdicts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.crash_phases {
            *self.crash_phases.entry(k.clone()).or_default() += v;
        }
        self.acked_checked += o.acked_checked;
        self.entries_lost += o.entries_lost;
        self.checkpoints_checked += o.checkpoints_checked;
        self.seeds += o.seeds;
        self.failures.extend(o.failures.iter().cloned());
    }

    fn fault(&mut self, kind: &'static str, n: u64) {
        *self.faults.entry(kind).or_default() += n;
    }

    fn verdict(&mut self, class: Class, v: CrcVerdict) {
        *self.verdicts.entry(format!("{}/{}", class.name(), v.as_str())).or_default() += 1;
    }
}

/// Which cases of a seed to run: all, or one (a replay).
#[derive(Clone, Copy, Debug)]
pub struct Only {
    pub class: Class,
    pub case: u64,
}

/// Numbers the cases of one class of one seed and says whether each runs.
struct Cases {
    seed: u64,
    class: Class,
    next: u64,
    only: Option<Only>,
}

impl Cases {
    fn new(seed: u64, class: Class, only: Option<Only>) -> Cases {
        Cases { seed, class, next: 0, only }
    }

    /// The next case's number if it is to run.
    fn take(&mut self) -> Option<u64> {
        let n = self.next;
        self.next += 1;
        match self.only {
            Some(o) if o.class != self.class || o.case != n => None,
            _ => Some(n),
        }
    }

    fn ctx(&self, n: u64, what: &str) -> String {
        format!(
            "seed {} case {}:{n} ({what}); replay: WAL_SWEEP_SEED={} WAL_SWEEP_CASE={}:{n} cargo test -p wal-sim \
             --test fault_sweep replay_one_case -- --nocapture",
            self.seed,
            self.class.name(),
            self.seed,
            self.class.name()
        )
    }
}

/// The message a panic carried.
fn panic_message(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ----- the model -----

/// A state the log may recover to: its entries and (computed when first needed) the digest
/// replaying them through the apply seam gives.
#[derive(Debug)]
pub struct Candidate {
    pub entries: Vec<(u64, Vec<u8>)>,
    digest: std::cell::OnceCell<Checkpoint>,
}

impl Candidate {
    fn new(entries: Vec<(u64, Vec<u8>)>) -> Candidate {
        Candidate { entries, digest: std::cell::OnceCell::new() }
    }

    /// The digest of the state after these entries, through the apply seam.
    fn state(&self) -> Checkpoint {
        *self.digest.get_or_init(|| model_state(&self.entries).checkpoint())
    }
}

fn model_state(entries: &[(u64, Vec<u8>)]) -> Applier<Kv> {
    let mut a = Applier::new(Kv::default(), 1024);
    for (l, p) in entries {
        let _ = a.apply(Lsn(*l), Epoch(0), p);
    }
    a
}

/// The states recoverable between `acked` and `staged` ops of `hist`; the first is the acked one.
fn candidates(hist: &History, acked: usize, staged: usize) -> Vec<Candidate> {
    let mut m = BTreeMap::new();
    for op in &hist.ops[..acked] {
        apply_op(&mut m, op);
    }
    let mut out = Vec::new();
    for k in acked..=staged {
        if k > acked {
            apply_op(&mut m, &hist.ops[k - 1]);
        }
        if hist.ok[k] {
            out.push(Candidate::new(m.iter().map(|(l, p)| (*l, p.clone())).collect()));
        }
    }
    out
}

// ----- the oracle -----

/// One oracle for every case (docs/testing.md, the fault sweep).
#[derive(Debug)]
pub struct Oracle<'a> {
    /// The states the log may hold; the first is everything acknowledged.
    pub candidates: &'a [Candidate],
    /// Verdicts this fault allows.
    pub allow: &'a [CrcVerdict],
    /// A prefix purge had started: the recovered log may begin later, its state coming from a
    /// snapshot.
    pub purging: bool,
    /// Snapshots written so far: (LSN, the state's checkpoint).
    pub snapshots: &'a [(u64, Checkpoint)],
    /// Also append, close and reopen after recovery.
    pub carry_on: bool,
}

/// What a passing check saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub verdict: Option<CrcVerdict>,
    pub acked: u64,
    pub checkpoints: u64,
}

impl Oracle<'_> {
    /// Checks the image `img` a restart finds. `Err` says what broke.
    pub fn check(&self, img: &MemStorage) -> Result<Seen, String> {
        let acked = &self.candidates[0];
        let scan = match wal::scan_log(img, true) {
            Err(Error::NotFound(_)) if acked.entries.is_empty() => return Ok(Seen::default()),
            Err(e) => return Err(format!("the scan failed: {e}")),
            Ok(s) => s,
        };
        if !self.allow.contains(&scan.verdict) {
            return Err(format!(
                "verdict {} is not one of {:?}: {:?}",
                scan.verdict.as_str(),
                self.allow,
                scan.damage
            ));
        }
        // Every snapshot under its final name is whole and holds the state it was taken of.
        let snaps = list_snapshots(img).map_err(|e| e.to_string())?;
        let mut bases = Vec::new();
        for (lsn, name) in &snaps {
            let (a, _) =
                read_snapshot::<Kv>(img, name).map_err(|e| format!("snapshot {name} unreadable: {e}"))?;
            let want = self.snapshots.iter().find(|s| Some(Lsn(s.0)) == *lsn).map(|s| s.1);
            if want != Some(a.checkpoint()) {
                return Err(format!("snapshot {name} does not hold the state it was taken of"));
            }
            bases.push(a);
        }
        let writer = scan.verdict != CrcVerdict::CorruptTail;
        let opts = Options {
            segment_len_bytes: SEG,
            recovery: if writer { RecoveryMode::TruncateTornTail } else { RecoveryMode::Salvage },
            prepare_in_background: false,
            ..Options::default()
        };
        let (log, _) =
            Wal::open_with(Arc::new(img.clone()), opts.clone()).map_err(|e| format!("open: {e}"))?;
        let got =
            log.replay().map_err(|e| e.to_string())?.collect_entries().map_err(|e| format!("replay: {e}"))?;
        // The recovered entries: a state between the acknowledged and the staged one (exactly,
        // for a writer; a prefix that keeps everything acknowledged, for a salvage read). With a
        // purge under way the log may start later; the state then comes from a snapshot.
        // (An empty log after a purge starts at its next LSN: its state is all in a snapshot.)
        let from = got.first().map_or(log.next_lsn().0, |e| e.0);
        let tail = |c: &Candidate| -> Vec<(u64, Vec<u8>)> {
            if self.purging {
                c.entries.iter().filter(|e| e.0 >= from).cloned().collect()
            } else {
                c.entries.clone()
            }
        };
        let fits = |c: &Candidate| {
            let t = tail(c);
            if writer {
                return t == got;
            }
            let keep = acked.entries.iter().zip(&c.entries).take_while(|(a, b)| a == b).count();
            let keep = tail(&Candidate::new(c.entries[..keep].to_vec())).len();
            got.len() >= keep && t.starts_with(&got)
        };
        let Some(c) = self.candidates.iter().find(|c| fits(c)) else {
            let first_diff = tail(acked).iter().zip(&got).find(|(a, b)| a != b).map(|(a, _)| a.0);
            return Err(format!(
                "recovered {} entries ({:?}..{:?}), not a state between the acknowledged ({} entries, last {:?}) \
                 and the staged ones ({} states); first LSN unlike the acknowledged state: {first_diff:?}",
                got.len(),
                got.first().map(|e| e.0),
                got.last().map(|e| e.0),
                acked.entries.len(),
                acked.entries.last().map(|e| e.0),
                self.candidates.len(),
            ));
        };
        let acked_here = acked.entries.iter().filter(|e| got.contains(e)).count() as u64;
        // Replay through the apply seam: every checkpoint matches (CLEAN), and the state is the
        // model's for the recovered entries (for a salvage read, the prefix read).
        let first_model = c.entries.first().map_or(u64::MAX, |e| e.0);
        let start = if from > first_model && self.purging {
            let base = bases
                .into_iter()
                .filter(|a| a.applied().is_some_and(|l| l.0 + 1 >= from))
                .min_by_key(|a| a.applied())
                .ok_or_else(|| {
                    format!("the log starts at LSN {from} but no snapshot covers what was purged")
                })?;
            base
        } else {
            Applier::new(Kv::default(), 1024)
        };
        let from_lsn = start.applied().map(|l| Lsn(l.0 + 1));
        let mut r = Replayer::new(start);
        let mut it = log.replay_from(from_lsn, Durability::Written).map_err(|e| e.to_string())?;
        r.run(&mut it).map_err(|e| format!("replay through the seam: {e}"))?;
        let (applier, report) = r.finish();
        if let Some(d) = &report.divergence {
            return Err(format!("DIVERGENT (not CLEAN): {d:?}"));
        }
        if let Some(u) = &report.unsupported {
            return Err(format!("unsupported: {u}"));
        }
        let want = if writer {
            c.state()
        } else {
            // The salvaged prefix (on top of the snapshot, when the replay started from one).
            let upto = got.last().map(|e| e.0).max(report.base.map(|b| b.0)).unwrap_or(0);
            let prefix: Vec<_> = c.entries.iter().filter(|e| e.0 <= upto).cloned().collect();
            model_state(&prefix).checkpoint()
        };
        if applier.checkpoint() != want {
            return Err("the replayed state is not the model's".into());
        }
        if self.carry_on && writer {
            let mut log = log;
            let at = log
                .append(log.epoch(), b"after recovery")
                .map_err(|e| format!("append after recovery: {e}"))?;
            log.close().map_err(|e| format!("close after recovery: {e}"))?;
            let (log, rep) =
                Wal::open_with(Arc::new(img.clone()), opts).map_err(|e| format!("reopen: {e}"))?;
            if rep.verdict != CrcVerdict::Ok {
                return Err(format!("not OK after recovery and a clean close: {:?}", rep.damage));
            }
            let again =
                log.replay().map_err(|e| e.to_string())?.collect_entries().map_err(|e| e.to_string())?;
            if again.last() != Some(&(at.0, b"after recovery".to_vec())) || again.len() != got.len() + 1 {
                return Err("the entry appended after recovery did not survive a reopen".into());
            }
            log.abandon();
        }
        Ok(Seen { verdict: Some(scan.verdict), acked: acked_here, checkpoints: report.checkpoints_checked })
    }
}

// ----- the workload (synchronous API) -----

/// What the observer needs of the workload at a crash point (updated by the workload between
/// log calls, never during one: the observer runs inside them).
#[derive(Debug)]
pub struct Model {
    hist: History,
    acked: usize,
    staged: usize,
    purging: bool,
    phase: &'static str,
    /// A cut is staged and not yet synced: writes and syncs now are the suffix truncation's.
    cut_pending: bool,
    snapshots: Vec<(u64, Checkpoint)>,
}

/// A command for the key-value state machine, in the entry envelope.
fn command(rng: &mut Rng, i: u64) -> Vec<u8> {
    let k = rng.below(13);
    let body = if rng.below(6) == 0 {
        format!("del k{k}")
    } else {
        let len = 100 + rng.below(2400) as usize;
        let v: String = (0..len).map(|j| (b'a' + ((i as usize * 7 + j * 13) % 26) as u8) as char).collect();
        format!("put k{k} {v}")
    };
    Envelope::encode(EntryKind::Command, None, body.as_bytes())
}

fn opts(seed: u64) -> Options {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&seed.to_le_bytes());
    id[8] = 0x5e;
    Options { segment_len_bytes: SEG, prepare_in_background: false, log_id: Some(id), ..Options::default() }
}

/// How a workload runs.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub seed: u64,
    /// Split writes short (at seeded sector boundaries).
    pub short_writes: bool,
    /// Stop after this many steps (the error classes run shorter logs).
    pub steps: usize,
    /// Segments to reach before stopping.
    pub segments: usize,
    pub snapshot_and_purge: bool,
    /// Suffix truncations. Off where disk full may withdraw a batch: the model then finds what
    /// stayed from the log's next LSN, which a cut and a re-append of the same LSN in one
    /// withdrawn batch would make ambiguous.
    pub cuts: bool,
}

impl Plan {
    pub fn full(seed: u64) -> Plan {
        Plan {
            seed,
            short_writes: seed % 2 == 1,
            steps: 600,
            segments: 4,
            snapshot_and_purge: true,
            cuts: true,
        }
    }
    pub fn short(seed: u64) -> Plan {
        Plan {
            seed,
            short_writes: seed % 2 == 1,
            steps: 40,
            segments: 2,
            snapshot_and_purge: false,
            cuts: true,
        }
    }
}

/// How a workload ended.
#[derive(Debug)]
pub struct Ran {
    pub st: MemStorage,
    hist: History,
    acked: usize,
    staged: usize,
    purged: bool,
    snapshots: Vec<(u64, Checkpoint)>,
    /// The first error a log call returned (with the log fenced or not), if any.
    pub error: Option<(Error, bool)>,
    pub stale_rejected: u64,
    /// After a poisoning error: whether every later call was refused without a sync (or what
    /// was not).
    pub later_refused: Option<Result<(), String>>,
    /// The open (creating the log) succeeded.
    pub opened: bool,
    /// The failure came from `close` (which consumes the log: nothing to call after it).
    pub close_failed: bool,
    /// The state when the log reached its next-to-last segment (for stale sectors).
    pub mid: Option<MemState>,
}

/// Runs the seeded workload on `st` (whose faults the caller set). Stops at the first error a
/// log call returns when the log is fenced; otherwise the refused operation leaves the model,
/// as it left the log, and the workload goes on.
pub fn run_workload(st: &MemStorage, plan: &Plan, model: &Arc<Mutex<Model>>) -> Ran {
    let set = |f: &mut dyn FnMut(&mut Model)| f(&mut lock(model));
    let mut rng = seeded(plan.seed ^ 0x0077_6f72_6b6c_6f61);
    let mut ran = Ran {
        st: st.clone(),
        hist: History::new(),
        acked: 0,
        staged: 0,
        purged: false,
        snapshots: Vec::new(),
        error: None,
        stale_rejected: 0,
        later_refused: None,
        opened: false,
        close_failed: false,
        mid: None,
    };
    let (mut log, _) = match Wal::open_with(Arc::new(st.clone()), opts(plan.seed)) {
        Ok(l) => l,
        Err(e) => {
            let p = matches!(e, Error::Fenced { .. }) || !matches!(e, Error::DiskFull { .. });
            ran.error = Some((e, p));
            return ran;
        }
    };
    ran.opened = true;
    let mut hist = History::new();
    let mut acked = 0usize;
    let mut flushed = 0usize;
    let mut epoch = 0u64;
    let mut last_cp = 0u64;
    let mut snapshotted = false;
    let mut purging = false;
    let sync_model = |hist: &History, acked: usize, purging: bool, phase: &'static str| {
        set(&mut |md: &mut Model| {
            md.hist = hist.clone();
            md.acked = acked;
            md.staged = hist.len();
            md.purging = purging;
            md.phase = phase;
            let last_sync = hist.ops[acked..].iter().any(|o| matches!(o, HOp::Cut(_)));
            md.cut_pending = last_sync;
        })
    };
    for step in 0..plan.steps {
        if log.segment_count() >= plan.segments && step > 10 {
            break;
        }
        if ran.mid.is_none() && log.segment_count() >= plan.segments.saturating_sub(1).max(1) {
            ran.mid = Some(st.state());
        }
        let next = log.next_lsn().0;
        let before = hist.len();
        epoch = log.epoch().0;
        // Snapshot, then purge below it, once the log has three segments.
        if plan.snapshot_and_purge && !snapshotted && log.segment_count() >= 3 && next > 2 {
            snapshotted = true;
            sync_model(&hist, acked, purging, "sync");
            if let Err(e) = log.sync() {
                ran.error = Some((e, log.is_fenced()));
                break;
            }
            acked = hist.len();
            flushed = acked;
            let mut m = BTreeMap::new();
            hist.ops.iter().for_each(|o| apply_op(&mut m, o));
            let entries: Vec<(u64, Vec<u8>)> = m.into_iter().collect();
            let state = model_state(&entries);
            if let Some(l) = state.applied() {
                // Applied state: never cut below it (a cut only removes uncommitted entries).
                last_cp = last_cp.max(l.0);
                set(&mut |md: &mut Model| md.snapshots.push((l.0, state.checkpoint())));
                ran.snapshots.push((l.0, state.checkpoint()));
                sync_model(&hist, acked, purging, "snapshot");
                if let Err(e) = write_snapshot(st as &dyn Storage, &state, log.log_id()) {
                    ran.error = Some((e, log.is_fenced()));
                    continue;
                }
                purging = true;
                sync_model(&hist, acked, purging, "purge");
                match log.purge_before(Lsn(l.0 + 1)) {
                    Ok(r) => ran.purged |= !r.segments_removed.is_empty(),
                    Err(e) => {
                        let p = log.is_fenced();
                        ran.error = Some((e, p));
                        if p {
                            break;
                        }
                    }
                }
            }
            continue;
        }
        let r: Result<&'static str, Error> = match rng.below(100) {
            0..=54 => {
                let p = command(&mut rng, next);
                hist.push(HOp::Put(next, p.clone()), true);
                sync_model(&hist, acked, purging, "append");
                log.append(Epoch(epoch), &p).map(|_| "append")
            }
            55..=64 => {
                let n = 2 + rng.below(3);
                let ps: Vec<Vec<u8>> = (0..n).map(|i| command(&mut rng, next + i)).collect();
                for (i, p) in ps.iter().enumerate() {
                    hist.push(HOp::Put(next + i as u64, p.clone()), i as u64 + 1 == n);
                }
                sync_model(&hist, acked, purging, "batch");
                let refs: Vec<&[u8]> = ps.iter().map(Vec::as_slice).collect();
                log.append_batch(Epoch(epoch), &refs).map(|_| "batch")
            }
            65..=69 if next > 1 => {
                let mut m = BTreeMap::new();
                hist.ops.iter().for_each(|o| apply_op(&mut m, o));
                let entries: Vec<(u64, Vec<u8>)> = m.into_iter().collect();
                match entries.last().map(|e| e.0) {
                    Some(l) => {
                        last_cp = l;
                        let cp = model_state(&entries).checkpoint();
                        sync_model(&hist, acked, purging, "checkpoint");
                        log.checkpoint(Epoch(epoch), Lsn(l), &cp).map(|_| "checkpoint")
                    }
                    None => Ok("checkpoint"),
                }
            }
            70..=72 if plan.cuts && next > last_cp + 2 && next > 3 => {
                // A conflicting leader's cut, above the last checkpoint.
                let after = (next - 1 - rng.below(3)).max(last_cp);
                hist.push(HOp::Cut(after + 1), true);
                sync_model(&hist, acked, purging, "truncate");
                log.truncate_after(Epoch(epoch), Lsn(after)).map(|_| "truncate")
            }
            73..=74 => {
                sync_model(&hist, acked, purging, "epoch");
                let r = log.advance_epoch(Epoch(epoch + 1));
                epoch += u64::from(r.is_ok());
                r.map(|_| "epoch")
            }
            75..=76 if epoch > 0 => {
                // A stale writer: Rejected, no LSN consumed, nothing staged.
                match log.append(Epoch(epoch - 1), b"REJECTED stale writer") {
                    Err(Error::StaleEpoch { .. }) if log.next_lsn().0 == next => {
                        ran.stale_rejected += 1;
                        Ok("stale")
                    }
                    other => panic!("seed {}: a stale append gave {other:?}", plan.seed),
                }
            }
            77..=84 => {
                sync_model(&hist, acked, purging, "flush");
                log.flush().map(|_| "flush")
            }
            _ => {
                sync_model(&hist, acked, purging, "sync");
                log.sync().map(|_| "sync")
            }
        };
        match r {
            Ok("sync") => {
                acked = hist.len();
                flushed = acked;
            }
            Ok("flush") => flushed = hist.len(),
            Ok(_) => {}
            Err(e) => {
                let poisoned = log.is_fenced();
                if !poisoned {
                    // Refused (disk full): what the call staged is gone; a batch write that ran
                    // out of space also withdrew the rest of the unwritten batch, while a sync
                    // refused at a rotation leaves it staged. The log's next LSN says which.
                    // (A batch also goes out when an append fills it or rotates, so the
                    // withdrawn part may start after the last explicit flush: the latest point
                    // that fits.)
                    let now = log.next_lsn().0;
                    let keep = [hist.len(), before]
                        .into_iter()
                        .chain((acked..=hist.len()).rev())
                        .find(|&k| hist.ok[k] && next_lsn_after(&hist.ops[..k]) == now)
                        .unwrap_or_else(|| {
                            panic!("seed {}: after {e} the log's next LSN {now} fits no model", plan.seed)
                        });
                    hist.truncate(keep);
                    flushed = flushed.min(keep);
                }
                let first = ran.error.is_none();
                if first {
                    ran.error = Some((e, poisoned));
                }
                sync_model(&hist, acked, purging, "refused");
                if poisoned {
                    break;
                }
            }
        }
    }
    if ran.error.as_ref().is_none_or(|e| !e.1) {
        sync_model(&hist, acked, purging, "close");
        match log.close() {
            Ok(()) => acked = hist.len(),
            Err(e) => {
                if ran.error.is_none() {
                    // Disk full at a close (no room for wal.close or wal.meta's replacement)
                    // is an error like any disk full: the sealed segment holds everything.
                    let poisoned = !matches!(e, Error::DiskFull { .. });
                    ran.error = Some((e, poisoned));
                    ran.close_failed = true;
                }
            }
        }
    } else {
        // Fenced (I6): every later call fails, and nothing is retried into a success.
        let syncs = st.faults().syncs_seen;
        let calls = [
            ("append", log.append(Epoch(epoch), b"after the fence").map(|_| ())),
            ("sync", log.sync()),
            ("flush", log.flush()),
        ];
        let wrong: Vec<String> = calls
            .into_iter()
            .filter(|(_, r)| !matches!(r, Err(Error::Fenced { .. })))
            .map(|(c, r)| format!("{c} gave {r:?}"))
            .collect();
        let retried = st.faults().syncs_seen - syncs;
        ran.later_refused = Some(if wrong.is_empty() && retried == 0 {
            Ok(())
        } else {
            Err(format!("after the fence: {wrong:?}, {retried} syncs issued"))
        });
        log.abandon();
    }
    sync_model(&hist, acked, purging, "after");
    ran.hist = hist;
    ran.acked = acked;
    ran.staged = ran.hist.len();
    ran.purged |= purging;
    ran
}

pub fn new_model() -> Arc<Mutex<Model>> {
    Arc::new(Mutex::new(Model {
        hist: History::new(),
        acked: 0,
        staged: 0,
        purging: false,
        phase: "open",
        cut_pending: false,
        snapshots: Vec::new(),
    }))
}

// ----- crash classes: every operation boundary of the workload -----

const ZERO: &[CrcVerdict] = &[CrcVerdict::Ok, CrcVerdict::TornTail];
const GARBAGE: &[CrcVerdict] = &[CrcVerdict::Ok, CrcVerdict::TornTail, CrcVerdict::CorruptTail];

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
        // Making a set-aside file a segment: its zeros, and its rename outside a purge or close.
        let recycle = cp.at == Boundary::Recycle
            || (cp.at == Boundary::Rename
                && matches!(
                    md.phase,
                    "append" | "batch" | "flush" | "sync" | "checkpoint" | "truncate" | "epoch"
                ));
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

// ----- corruption of a cleanly closed log -----

type Files = Vec<(String, Vec<u8>)>;

fn files_of(state: &MemState) -> Files {
    let mut v: Files = state
        .file_names()
        .into_iter()
        .filter_map(|n| Some((n.clone(), state.file_bytes(&n)?.to_vec())))
        .collect();
    v.sort();
    v
}

/// Damage to attested data: CORRUPT, never OK, TORN_TAIL or CORRUPT_TAIL (so never CLEAN: the
/// state is not checked on a CORRUPT log), and a salvage read yields a state the log really held:
/// the live entries after some prefix of its history (at a user-batch boundary), from the first
/// entry it reads on. (It stops at the damage, so cuts written after it are not applied: the
/// entries they cut may appear, as they were live at that point. A state the log never held, such
/// as a cut entry next to the one that replaced it, fails.)
fn check_corrupt(files: Files, hist: &History) -> Result<CrcVerdict, String> {
    let img = MemStorage::from_files(files);
    let scan = wal::scan_log(&img, true).map_err(|e| format!("scan failed: {e}"))?;
    if scan.verdict != CrcVerdict::Corrupt {
        return Err(format!("damage to attested data gave {} ({:?})", scan.verdict.as_str(), scan.damage));
    }
    // (A writer's open walks only the last segment, so it is not asked here; a read of the log
    // meets the damage.)
    let salvage = Options { segment_len_bytes: SEG, recovery: RecoveryMode::Salvage, ..Options::default() };
    if let Ok((log, _)) = Wal::open_with(Arc::new(img), salvage) {
        if let Ok(mut r) = log.replay() {
            let mut read = Vec::new();
            while let Some(Ok(item)) = r.next() {
                if item.kind == wal::ItemKind::Entry {
                    read.push((item.lsn.0, item.payload.to_vec()));
                }
            }
            if !held_state(hist, &read) {
                let span = read.first().zip(read.last()).map(|(a, b)| (a.0, b.0));
                return Err(format!(
                    "salvage read {} entries {span:?}: no state the log ever held",
                    read.len()
                ));
            }
        }
    }
    Ok(scan.verdict)
}

/// Whether `read` is the live entries, from its first LSN on, after some prefix of `hist` that
/// ends at a user-batch boundary (an empty read always is).
fn held_state(hist: &History, read: &[(u64, Vec<u8>)]) -> bool {
    let Some(first) = read.first().map(|e| e.0) else { return true };
    let mut m: BTreeMap<u64, &[u8]> = BTreeMap::new();
    let same = |m: &BTreeMap<u64, &[u8]>| {
        m.range(first..).count() == read.len()
            && m.range(first..).zip(read).all(|((l, p), (rl, rp))| l == rl && *p == &rp[..])
    };
    for k in 0..=hist.ops.len() {
        if k > 0 {
            match &hist.ops[k - 1] {
                HOp::Put(l, p) => {
                    m.insert(*l, p);
                }
                HOp::Cut(c) => {
                    m.split_off(c);
                }
            }
        }
        if hist.ok[k] && same(&m) {
            return true;
        }
    }
    false
}

/// Byte ranges of a segment file that hold data (sectors that are not blank: non-zero, and in a
/// recycled segment not the file's old contents either), as sector numbers.
fn data_sectors(bytes: &[u8]) -> Vec<usize> {
    let table = stale_table(bytes);
    (0..bytes.len() / 512)
        .filter(|s| !wal::stale::is_blank(table.as_deref(), s * 512, &bytes[s * 512..s * 512 + 512]))
        .collect()
}

/// A recycled segment file's stale table.
fn stale_table(bytes: &[u8]) -> Option<Arc<wal::stale::StaleTable>> {
    let h = wal::format::SegmentHeader::self_valid(bytes)?;
    let len = h.segment_len.get();
    (h.is_recycled() && len as usize == bytes.len())
        .then(|| wal::stale::StaleTable::find(bytes, len, wal::stale::Owner::of(&h)))
        .flatten()
}

pub fn corrupt_class(seed: u64, ran: &Ran, foreign: &Files, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::Corrupt, only);
    let mut rng = seeded(seed ^ 0xbadbad);
    let files = files_of(&ran.st.state());
    let base = MemStorage::from_files(files.clone());
    let scan = wal::scan_log(&base, true).unwrap_or_else(|e| panic!("seed {seed}: clean log: {e}"));
    assert_eq!(scan.verdict, CrcVerdict::Ok, "seed {seed}: the clean log is not OK: {:?}", scan.damage);
    let want = {
        let (log, _) = Wal::open_with(
            Arc::new(base.clone()),
            Options { read_only: true, segment_len_bytes: SEG, ..Options::default() },
        )
        .unwrap();
        log.replay().unwrap().collect_entries().unwrap()
    };
    let segs: Vec<usize> = files
        .iter()
        .enumerate()
        .filter(|(_, (n, b))| wal::format::parse_segment_file_name(n).is_some() && b.iter().any(|&x| x != 0))
        .map(|(i, _)| i)
        .collect();
    let meta = files.iter().position(|f| f.0 == wal::format::META_FILE_NAME);
    let mid = ran.mid.as_ref().map(files_of).unwrap_or_default();
    // The history the oracle searches is this log's: its last state is what the clean log reads.
    assert!(held_state(&ran.hist, &want), "seed {seed}: the clean log is no state of its history");
    let mut run = |what: String, kind: &'static str, v: Files, sum: &mut Summary| {
        let Some(n) = cases.take() else { return };
        let verdict = check_corrupt(v, &ran.hist).unwrap_or_else(|e| panic!("{}: {e}", cases.ctx(n, &what)));
        *sum.cases.entry(Class::Corrupt.name()).or_default() += 1;
        sum.verdict(Class::Corrupt, verdict);
        sum.fault(kind, 1);
        sum.acked_checked += want.len() as u64;
    };
    let mut targets = segs.clone();
    targets.extend(meta);
    for &fi in &targets {
        let len = files[fi].1.len();
        let data = if Some(fi) == meta { (0..len / 512 + 1).collect() } else { data_sectors(&files[fi].1) };
        // Bit flips: in data sectors.
        for _ in 0..40 {
            let s = data[rng.below(data.len() as u64) as usize];
            let b = (s * 512 + rng.below(512) as usize).min(len - 1);
            let bit = rng.below(8);
            let mut v = files.clone();
            v[fi].1[b] ^= 1 << bit;
            run(format!("bit {bit} of byte {b} of {}", files[fi].0), "bit flips", v, sum);
        }
        if Some(fi) == meta {
            continue;
        }
        for &s in &data {
            let r = s * 512..s * 512 + 512;
            let mut v = files.clone();
            v[fi].1[r.clone()].fill(0);
            run(format!("sector {s} of {} zeroed", files[fi].0), "zeroed sectors", v, sum);
            if rng.below(4) == 0 {
                let mut v = files.clone();
                let mut g = seeded(rng.next_u64());
                v[fi].1[r.clone()].iter_mut().for_each(|b| *b = g.next_u64() as u8);
                run(format!("sector {s} of {} garbage", files[fi].0), "garbage sectors", v, sum);
            }
            // Stale: the sector as it was earlier in the run (a lost write, or an older version
            // of it), where that differs.
            if let Some(old) = mid.iter().find(|f| f.0 == files[fi].0) {
                if old.1.get(r.clone()).is_some_and(|o| o != &files[fi].1[r.clone()]) {
                    let mut v = files.clone();
                    v[fi].1[r.clone()].copy_from_slice(&old.1[r.clone()]);
                    run(format!("sector {s} of {} stale", files[fi].0), "stale sectors", v, sum);
                }
            }
            // Misdirected: another data sector of the log written here.
            if rng.below(3) == 0 {
                let (fj, t) = {
                    let fj = segs[rng.below(segs.len() as u64) as usize];
                    let d = data_sectors(&files[fj].1);
                    (fj, d[rng.below(d.len() as u64) as usize])
                };
                if files[fj].1[t * 512..t * 512 + 512] != files[fi].1[r.clone()] {
                    let mut v = files.clone();
                    let src = files[fj].1[t * 512..t * 512 + 512].to_vec();
                    v[fi].1[r.clone()].copy_from_slice(&src);
                    run(
                        format!("sector {s} of {} replaced by sector {t} of {}", files[fi].0, files[fj].0),
                        "misdirected sectors",
                        v,
                        sum,
                    );
                }
            }
            // Foreign: the same sector of another log.
            if let Some(f) = foreign.iter().find(|f| f.0 == files[fi].0) {
                if rng.below(3) == 0
                    && f.1
                        .get(r.clone())
                        .is_some_and(|o| o.iter().any(|&b| b != 0) && o != &files[fi].1[r.clone()])
                {
                    let mut v = files.clone();
                    v[fi].1[r.clone()].copy_from_slice(&f.1[r.clone()]);
                    run(format!("sector {s} of {} from another log", files[fi].0), "foreign sectors", v, sum);
                }
            }
        }
        // Truncation: at a seeded offset in every 509-byte stride, and at every sector boundary
        // of the data.
        let mut cuts: BTreeSet<usize> = (0..len / 509).map(|k| k * 509 + rng.below(509) as usize).collect();
        cuts.extend(data.iter().map(|s| s * 512));
        for cut in cuts.into_iter().filter(|&c| c < len) {
            let mut v = files.clone();
            v[fi].1.truncate(cut);
            run(format!("{} truncated to {cut} bytes", files[fi].0), "truncations", v, sum);
        }
        // Missing.
        let mut v = files.clone();
        v.remove(fi);
        run(format!("{} missing", files[fi].0), "missing segments", v, sum);
    }
    // Reordered: two segments' contents swapped.
    for w in segs.windows(2) {
        let mut v = files.clone();
        let a = v[w[0]].1.clone();
        v[w[0]].1 = std::mem::replace(&mut v[w[1]].1, a);
        run(format!("{} and {} swapped", files[w[0]].0, files[w[1]].0), "reordered segments", v, sum);
    }
}

// ----- I/O errors -----

/// The oracle over the images a crash leaves of `st` now: only durable bytes, and every
/// unsynced sector new (the page cache written back).
fn check_now(st: &MemStorage, ran: &Ran, ctx: &str, sum: &mut Summary, class: Class) {
    let cands = candidates(&ran.hist, ran.acked, ran.staged);
    let state = st.state();
    for fate in [SectorFate::Old, SectorFate::New] {
        let img = state.crash(|_, _| fate);
        let o = Oracle {
            candidates: &cands,
            allow: ZERO,
            purging: ran.purged,
            snapshots: &ran.snapshots,
            carry_on: true,
        };
        let seen =
            o.check(&img).unwrap_or_else(|e| panic!("{ctx}: image with unsynced sectors {fate:?}: {e}"));
        sum.acked_checked += seen.acked;
        sum.checkpoints_checked += seen.checkpoints;
        if let Some(v) = seen.verdict {
            sum.verdict(class, v);
        }
    }
}

fn faulty(seed: u64, short_writes: bool) -> MemStorage {
    let st = MemStorage::new();
    let mut f = st.faults();
    f.seed = Some(seed ^ 0x5151);
    f.short_write_max = short_writes.then_some(4096);
    drop(f);
    st
}

/// fdatasync fails at the k-th call (once, or from then on), for every k of the workload.
pub fn sync_eio_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::SyncEio, only);
    let plan = Plan::short(seed);
    let clean = faulty(seed, plan.short_writes);
    run_workload(&clean, &plan, &new_model());
    let syncs = clean.faults().syncs_seen;
    for k in 0..syncs.min(24) {
        let Some(n) = cases.take() else { continue };
        let transient = (seed + k).is_multiple_of(2);
        let what = format!("synchronous API, fdatasync #{k} fails{}", if transient { " once" } else { "" });
        let ctx = cases.ctx(n, &what);
        let st = faulty(seed, plan.short_writes);
        {
            let mut f = st.faults();
            f.fail_sync_from = Some(k);
            f.fail_sync_until = transient.then_some(k + 1);
        }
        let ran = run_workload(&st, &plan, &new_model());
        match &ran.error {
            Some((_, true)) => {}
            other => panic!("{ctx}: the failed sync did not poison the log: {other:?}"),
        }
        match &ran.later_refused {
            Some(Ok(())) => {}
            None if !ran.opened || ran.close_failed => {}
            other => panic!("{ctx}: {other:?}"),
        }
        if st.faults().syncs_seen != k + 1 {
            panic!("{ctx}: {} syncs after the failed one", st.faults().syncs_seen - k - 1);
        }
        check_now(&st, &ran, &ctx, sum, Class::SyncEio);
        *sum.cases.entry(Class::SyncEio.name()).or_default() += 1;
        sum.fault("fdatasync EIO", 1);
    }
    // Through the I/O thread: every ticket not durable before the failure is Indeterminate,
    // for every k up to a little past the syncs a run without faults issues (the I/O thread
    // batches by timing, so the count varies), the failure once or from then on.
    let probe = faulty(seed, plan.short_writes);
    let _ = io_thread_eio_run(&probe, seed, u64::MAX);
    let syncs = probe.faults().syncs_seen;
    for k in 0..(syncs + 2).min(32) {
        let Some(n) = cases.take() else { continue };
        let transient = (seed + k).is_multiple_of(2);
        let what = format!("I/O thread, fdatasync #{k} fails{}", if transient { " once" } else { "" });
        let ctx = cases.ctx(n, &what);
        let st = faulty(seed, plan.short_writes);
        {
            let mut f = st.faults();
            f.fail_sync_from = Some(k);
            f.fail_sync_until = transient.then_some(k + 1);
        }
        let Some(EioRun { hist, outcomes, fenced, syncs_before_close }) = io_thread_eio_run(&st, seed, k)
        else {
            // The log's creation synced: a failure there is an error to the caller, no log.
            *sum.cases.entry(Class::SyncEio.name()).or_default() += 1;
            continue;
        };
        let ok = outcomes.iter().take_while(|o| o.is_ok()).count();
        if !outcomes[ok..].iter().all(|o| matches!(o, Err(Failure::Indeterminate(_)))) {
            panic!("{ctx}: after the failed sync a ticket was not Indeterminate: {:?}", &outcomes[ok..]);
        }
        let failed = syncs_before_close > k;
        if failed != fenced {
            panic!("{ctx}: the sync failed: {failed}, the log fenced: {fenced}");
        }
        if fenced && st.faults().syncs_seen != k + 1 {
            panic!("{ctx}: a sync was issued after the failed one (no retry, even of a transient failure)");
        }
        let ran = Ran {
            st: st.clone(),
            acked: ok,
            staged: hist.len(),
            hist,
            purged: false,
            snapshots: Vec::new(),
            error: None,
            stale_rejected: 0,
            later_refused: None,
            opened: true,
            close_failed: false,
            mid: None,
        };
        check_now(&st, &ran, &ctx, sum, Class::SyncEio);
        *sum.cases.entry(Class::SyncEio.name()).or_default() += 1;
        sum.fault("fdatasync EIO", u64::from(fenced));
        sum.fault("tickets Indeterminate", (outcomes.len() - ok) as u64);
    }
}

struct EioRun {
    hist: History,
    outcomes: Vec<Result<Lsn, Failure>>,
    fenced: bool,
    syncs_before_close: u64,
}

/// Forty durable appends through the I/O thread, at most five in flight, every third one by
/// `append_wait` (a round on this thread when the I/O thread is idle); `None` when the log
/// could not be created. What was staged, every ticket's outcome in LSN order, and whether
/// the log ended fenced, and the syncs issued before the close.
fn io_thread_eio_run(st: &MemStorage, seed: u64, k: u64) -> Option<EioRun> {
    let ctx = format!("seed {seed}, I/O thread, fdatasync #{k} fails");
    let wal = match Wal::open_with(Arc::new(st.clone()), opts(seed)) {
        Ok((w, _)) => w,
        Err(e) => {
            assert!(matches!(e, Error::Io { .. }), "{ctx}: {e}");
            return None;
        }
    };
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let mut rng = seeded(seed ^ k);
    let mut hist = History::new();
    let mut tickets = std::collections::VecDeque::<wal::Ticket>::new();
    let mut outcomes = Vec::new();
    for i in 0..40u64 {
        let p = command(&mut rng, i);
        let lsn = log.next_lsn().0;
        let appended = if i % 3 == 2 {
            // Its ticket comes back resolved; the ones before it are then resolved too.
            outcomes.extend(tickets.drain(..).map(|t| t.wait()));
            log.append_wait(Epoch(0), Payload::One(p.clone()))
        } else {
            log.append(Epoch(0), p.clone(), Durability::Durable)
        };
        match appended {
            Ok(t) => {
                assert_eq!(t.lsn.0, lsn, "{ctx}");
                hist.push(HOp::Put(lsn, p), true);
                tickets.push_back(t);
            }
            Err(Error::Fenced { .. }) => break,
            Err(e) => panic!("{ctx}: append: {e}"),
        }
        if tickets.len() > 4 {
            outcomes.extend(tickets.pop_front().map(|t| t.wait()));
        }
    }
    outcomes.extend(tickets.into_iter().map(|t| t.wait()));
    let fenced = log.fenced().is_some();
    let syncs = st.faults().syncs_seen;
    let _ = log.close();
    Some(EioRun { hist, outcomes, fenced, syncs_before_close: syncs })
}

/// The device fills at a seeded point: the refused operation is DiskFull, nothing is fenced,
/// everything acknowledged stays, and the log carries on once space returns.
pub fn disk_full_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::DiskFull, only);
    let mut rng = seeded(seed ^ 0xf011);
    for segs in 1..=3u64 {
        let Some(n) = cases.take() else { continue };
        let cap = segs * u64::from(SEG) + rng.below(u64::from(SEG));
        let ctx = cases.ctx(n, &format!("capacity {cap} bytes"));
        let plan = Plan { steps: 150, segments: 5, cuts: false, ..Plan::short(seed) };
        let st = faulty(seed, plan.short_writes);
        st.faults().capacity_bytes = Some(cap);
        let ran = run_workload(&st, &plan, &new_model());
        match &ran.error {
            Some((Error::DiskFull { .. }, false)) => {}
            None => {}
            Some((e, p)) => panic!("{ctx}: disk full gave {e} (poisoned: {p})"),
        }
        check_now(&st, &ran, &ctx, sum, Class::DiskFull);
        // Space returns: the log opens, takes an entry, closes and has it.
        st.faults().capacity_bytes = None;
        if ran.acked > 0 {
            let (mut log, _) =
                Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let at = log.append(log.epoch(), b"space again").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            log.close().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let (log, _) = Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap();
            let got = log.replay().unwrap().collect_entries().unwrap();
            assert_eq!(got.last(), Some(&(at.0, b"space again".to_vec())), "{ctx}");
        }
        *sum.cases.entry(Class::DiskFull.name()).or_default() += 1;
        sum.fault("disk full", u64::from(ran.error.is_some()));
    }
}

/// A create, rename, remove, directory sync, zero-fill or write fails (EIO, or ENOSPC where
/// that is what a real file system says): the call fails, typed; anything but disk full fences;
/// a restart finds everything acknowledged.
pub fn syscall_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::SyscallFail, only);
    let mut rng = seeded(seed ^ 0x5ca11);
    let plan = Plan { steps: 80, segments: 3, cuts: false, ..Plan::short(seed) };
    let clean = faulty(seed, plan.short_writes);
    run_workload(&clean, &plan, &new_model());
    let counts = clean.faults().calls;
    for call in [Call::Create, Call::Rename, Call::Remove, Call::SyncDir, Call::ZeroFill, Call::Write] {
        let count = counts[Call::ALL.iter().position(|c| *c == call).unwrap_or(0)];
        let picks: BTreeSet<u64> =
            if count <= 4 { (0..count).collect() } else { (0..4).map(|_| rng.below(count)).collect() };
        for nth in picks {
            for errno in [5, 28] {
                if errno == 28 && !matches!(call, Call::Create | Call::ZeroFill | Call::Write) {
                    continue;
                }
                let Some(n) = cases.take() else { continue };
                let ctx = cases.ctx(n, &format!("{call:?} #{nth} fails with errno {errno}"));
                let st = faulty(seed, plan.short_writes);
                st.faults().fail_calls = vec![FailCall { call, nth, errno }];
                let ran = run_workload(&st, &plan, &new_model());
                if st.faults().calls_failed != 1 {
                    panic!("{ctx}: the call was not reached");
                }
                match &ran.error {
                    Some((Error::DiskFull { .. }, false)) if errno == 28 => {}
                    Some((_, true)) => {
                        if let Some(Err(why)) = &ran.later_refused {
                            panic!("{ctx}: {why}");
                        }
                    }
                    // A failed call the log does not need (a cleanup) may go unreported.
                    None => {}
                    Some((e, p)) => panic!("{ctx}: gave {e} (poisoned: {p})"),
                }
                check_now(&st, &ran, &ctx, sum, Class::SyscallFail);
                *sum.cases.entry(Class::SyscallFail.name()).or_default() += 1;
                sum.fault("failed calls", 1);
            }
        }
    }
}

/// A read fails while a scan, a read-only open or a writer's open reads the log: an I/O error,
/// never a verdict about the bytes, never a panic, and a failed writer's open changes nothing.
pub fn read_error_class(seed: u64, files: &Files, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::ReadError, only);
    let want = {
        let (log, _) = Wal::open_with(Arc::new(MemStorage::from_files(files.clone())), opts(seed)).unwrap();
        log.replay().unwrap().collect_entries().unwrap()
    };
    let probe = MemStorage::from_files(files.clone());
    wal::scan_log(&probe, true).unwrap();
    let scan_reads = probe.faults().calls[Call::ALL.iter().position(|c| *c == Call::Read).unwrap_or(0)];
    let probe = MemStorage::from_files(files.clone());
    drop(Wal::open_with(Arc::new(probe.clone()), opts(seed)).unwrap());
    let open_reads = probe.faults().calls[Call::ALL.iter().position(|c| *c == Call::Read).unwrap_or(0)];
    for (mode, reads) in [("scan", scan_reads), ("writer open", open_reads)] {
        for nth in 0..reads {
            let Some(n) = cases.take() else { continue };
            let ctx = cases.ctx(n, &format!("{mode}: read #{nth} fails"));
            let st = MemStorage::from_files(files.clone());
            st.faults().fail_calls = vec![FailCall { call: Call::Read, nth, errno: 5 }];
            let r = if mode == "scan" {
                wal::scan_log(&st, true).map(|s| (s.verdict, None))
            } else {
                Wal::open_with(Arc::new(st.clone()), opts(seed)).map(|(log, r)| {
                    st.faults().fail_calls.clear();
                    (r.verdict, log.replay().and_then(|r| r.collect_entries()).ok())
                })
            };
            match r {
                Err(Error::Io { .. }) => {}
                _ if st.faults().calls_failed == 0 => panic!("{ctx}: the read was not reached"),
                // A read the open could do without (wal.close: it walks the segment instead):
                // the log as it is.
                Ok((CrcVerdict::Ok, Some(got))) if got == want => {}
                other => panic!("{ctx}: a failed read gave {:?}, not an I/O error", other.map(|r| r.0)),
            }
            if files_of(&st.state()) != *files {
                panic!("{ctx}: a failed open changed the log");
            }
            *sum.cases.entry(Class::ReadError.name()).or_default() += 1;
            sum.fault("read errors", 1);
        }
    }
}

/// I7 on the I/O thread: an append from an older writer epoch is Rejected and takes no LSN.
pub fn stale_epoch_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::StaleEpoch, only);
    let Some(n) = cases.take() else { return };
    let ctx = cases.ctx(n, "I/O thread, stale epoch");
    let st = MemStorage::new();
    let (mut wal, _) = Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap();
    let e = 1 + seed % 5;
    wal.advance_epoch(Epoch(e)).unwrap();
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap();
    let a = log.append(Epoch(e), b"current".to_vec(), Durability::Durable).unwrap();
    assert!(a.wait().is_ok(), "{ctx}");
    let next = log.next_lsn();
    match log.append(Epoch(e - 1), b"REJECTED stale".to_vec(), Durability::Durable) {
        Err(err) if err.is_rejected() => {}
        other => panic!("{ctx}: a stale append gave {:?}", other.map(|t| t.lsn)),
    }
    assert_eq!(log.next_lsn(), next, "{ctx}: a rejected append consumed an LSN");
    log.close().unwrap();
    let got = {
        let (w, _) = Wal::open_with(Arc::new(st), opts(seed)).unwrap();
        w.replay().unwrap().collect_entries().unwrap()
    };
    assert_eq!(got, vec![(a.lsn.0, b"current".to_vec())], "{ctx}");
    *sum.cases.entry(Class::StaleEpoch.name()).or_default() += 1;
    sum.fault("stale-epoch appends rejected", 1);
}

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
}

// ----- driver -----

/// Runs every class (or the one `only` names) for one seed.
pub fn run_seed(seed: u64, only: Option<Only>) -> Summary {
    let mut sum = Summary { seeds: 1, ..Summary::default() };
    let wants = |c: Class| only.is_none_or(|o| o.class == c);
    let needs_log =
        wants(Class::Crash) || wants(Class::CrashGarbage) || wants(Class::Corrupt) || wants(Class::ReadError);
    if needs_log {
        let ran = crash_classes(seed, only, &mut sum);
        let files = files_of(&ran.st.state());
        if wants(Class::Corrupt) {
            // Another log (another id) of the same shape, for foreign sectors.
            let other = faulty(seed ^ 0xf0f0, false);
            let o = run_workload(&other, &Plan::full(seed ^ 0xf0f0), &new_model());
            corrupt_class(seed, &ran, &files_of(&o.st.state()), only, &mut sum);
        }
        if wants(Class::ReadError) {
            read_error_class(seed, &files, only, &mut sum);
        }
    }
    if wants(Class::Pipelined) {
        pipelined_class(seed, only, &mut sum);
    }
    if wants(Class::SyncEio) {
        sync_eio_class(seed, only, &mut sum);
    }
    if wants(Class::DiskFull) {
        disk_full_class(seed, only, &mut sum);
    }
    if wants(Class::SyscallFail) {
        syscall_class(seed, only, &mut sum);
    }
    if wants(Class::StaleEpoch) {
        stale_epoch_class(seed, only, &mut sum);
    }
    sum
}

// ----- the summary as JSON -----

/// Where and how a sweep ran, for its JSON summary.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub command: String,
    pub first_seed: u64,
    pub duration_s: f64,
    pub git_commit: String,
    pub machine: String,
    pub threads: usize,
    pub profile: String,
}

impl RunInfo {
    /// The commit (`git rev-parse HEAD`) and the machine (CPU model, cores, kernel).
    pub fn detect() -> RunInfo {
        let git = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        RunInfo {
            git_commit: git,
            machine: format!("{cores} vCPU {cpu}, Linux {kernel}"),
            ..RunInfo::default()
        }
    }
}

pub fn to_json(sum: &Summary, info: &RunInfo) -> serde_json::Value {
    serde_json::json!({
        "command": info.command,
        "git_commit": info.git_commit,
        "machine": info.machine,
        "profile": info.profile,
        "threads": info.threads,
        "duration_s": (info.duration_s * 10.0).round() / 10.0,
        "seeds": { "first": info.first_seed, "count": sum.seeds },
        "cases_total": sum.total(),
        "cases_by_class": sum.cases,
        "faults_injected": sum.faults,
        "crash_points_by_phase": sum.crash_phases,
        "verdicts": sum.verdicts,
        "acknowledged_entries_checked": sum.acked_checked,
        "checkpoints_checked": sum.checkpoints_checked,
        "entries_lost": sum.entries_lost,
        "failures": sum.failures,
    })
}

/// Runs seeds `first..` on `threads` threads until `max_seeds` seeds, `max_cases` cases or the
/// deadline, whichever comes first (a seed under way finishes). A failing case panics with its
/// replay command.
pub fn sweep(
    first: u64,
    max_seeds: Option<u64>,
    max_cases: Option<u64>,
    deadline: Option<std::time::Instant>,
    threads: usize,
) -> Summary {
    let next = std::sync::atomic::AtomicU64::new(first);
    let total = Mutex::new(Summary::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if max_seeds.is_some_and(|m| seed >= first + m)
                    || max_cases.is_some_and(|m| lock(&total).total() >= m)
                    || deadline.is_some_and(|d| std::time::Instant::now() >= d)
                    || !lock(&total).failures.is_empty()
                {
                    return;
                }
                // A failing case panics (its message, with the replay command, is printed by
                // the panic hook); it is recorded and the sweep stops rather than losing the run.
                match std::panic::catch_unwind(|| run_seed(seed, None)) {
                    Ok(one) => lock(&total).merge(&one),
                    Err(e) => lock(&total).failures.push(panic_message(e)),
                }
            });
        }
    });
    total.into_inner().unwrap_or_else(|e| e.into_inner())
}
