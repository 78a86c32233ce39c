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

mod corrupt;
mod crash;
mod io_errors;
mod json;
mod model;
mod oracle;
mod pipelined;
mod stale_epoch;
pub mod torn_cut;
mod workload;

pub use corrupt::corrupt_class;
pub use crash::crash_classes;
pub use history::{seeded, Rng};
pub use io_errors::{disk_full_class, read_error_class, sync_eio_class, syscall_class};
pub use json::{to_json, RunInfo};
pub use model::Candidate;
pub use oracle::{Oracle, Seen};
pub use pipelined::pipelined_class;
pub use stale_epoch::stale_epoch_class;
pub use workload::{new_model, run_workload, Model, Plan, Ran};

use crate::workload::history;
use crate::MemState;
use io_errors::faulty;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use wal::CrcVerdict;

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
