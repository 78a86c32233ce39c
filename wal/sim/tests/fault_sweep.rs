//! The fault sweep's fast subset (the classes and the oracle are in `src/sweep/`),
//! the simulated file system's own semantics. (`cli/tests/walcheck/docs.rs` holds docs/testing.md to the
//! committed long-sweep summary.)
//!
//! A failing case prints its seed and case and the command that replays it alone:
//! `WAL_SWEEP_SEED=<seed> WAL_SWEEP_CASE=<class>:<n> cargo test -p wal-sim --test fault_sweep
//! replay_one_case -- --nocapture`.

use wal_sim::sweep;

use std::time::Instant;
use wal::storage::{Completion, Completions, Op, Reader, Submission, Writer};
use wal_sim::{MemStorage, SectorFate};

/// Seeds of the fast subset: enough for at least 100,000 cases (checked below).
const FAST_SEEDS: u64 = 24;

#[test]
fn fast_subset_of_the_fault_sweep() {
    let t = Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(2);
    let s = sweep::sweep(1, Some(FAST_SEEDS), None, None, threads);
    println!("fault sweep, seeds 1..={FAST_SEEDS}, {:?}: {s:#?}", t.elapsed());
    println!("{} cases", s.total());
    assert!(s.failures.is_empty(), "failed: {:#?}", s.failures);
    assert!(s.total() >= 100_000, "only {} cases", s.total());
    for c in sweep::Class::ALL {
        assert!(s.cases.get(c.name()).is_some_and(|&n| n > 0), "no {} case ran", c.name());
    }
    assert_eq!(s.entries_lost, 0);
    assert!(s.acked_checked > 100_000, "{} acknowledged entries checked", s.acked_checked);
    assert!(s.checkpoints_checked > 1000, "{} checkpoints compared", s.checkpoints_checked);
    // The fault kinds the matrix asks for were all injected, and the crashes met every phase.
    for f in [
        "crash images",
        "garbage sectors",
        "short writes",
        "completions out of order",
        "bit flips",
        "zeroed sectors",
        "stale sectors",
        "foreign sectors",
        "misdirected sectors",
        "truncations",
        "missing segments",
        "reordered segments",
        "fdatasync EIO",
        "tickets Indeterminate",
        "disk full",
        "failed calls",
        "read errors",
        "stale-epoch appends rejected",
        "syncs asked by a caller",
    ] {
        assert!(s.faults.get(f).is_some_and(|&n| n > 0), "no {f} injected: {:?}", s.faults);
    }
    for phase in ["rotation", "recycle", "truncate", "purge", "snapshot", "close", "append", "sync"] {
        assert!(s.crash_phases.keys().any(|k| k.starts_with(phase)), "no crash during {phase}");
    }
    for v in ["crash/TORN_TAIL", "crash/OK", "crash-garbage/CORRUPT_TAIL", "corrupt/CORRUPT"] {
        assert!(s.verdicts.contains_key(v), "never {v}: {:?}", s.verdicts);
    }
}

/// The non-lossy cut's promise (`src/sweep/torn_cut.rs`): over a seeded sample of
/// the sweep's crash images and damaged logs, a cut of a TORN_TAIL never removes an entry that
/// was acknowledged. A longer run: `WAL_TORN_CUT_SEEDS=200 cargo test --release -p wal-sim --test
/// fault_sweep a_torn_tail_cut_never_removes_an_attested_entry -- --nocapture`.
#[test]
fn a_torn_tail_cut_never_removes_an_attested_entry() {
    let seeds = std::env::var("WAL_TORN_CUT_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(16u64);
    let t = Instant::now();
    let mut st = sweep::torn_cut::CutStats::default();
    for seed in 1..=seeds {
        sweep::torn_cut::torn_cuts(seed, 24, 12, &mut st);
    }
    println!("torn-tail cuts, seeds 1..={seeds}, {:?}: {st:#?}", t.elapsed());
    assert!(st.cuts >= 10, "only {} cuts checked", st.cuts);
    assert!(st.attested_checked > 0);
    for kind in ["bit flip", "zeroed sector", "truncated segment", "forged record length", "forged frame"] {
        assert!(st.damage.get(kind).is_some_and(|&n| n > 0), "no {kind}: {:?}", st.damage);
    }
}

fn only_from_env() -> Option<(u64, sweep::Only)> {
    let seed = std::env::var("WAL_SWEEP_SEED").ok()?.parse().ok()?;
    let case = std::env::var("WAL_SWEEP_CASE").ok()?;
    let (class, n) = case.split_once(':')?;
    Some((seed, sweep::Only { class: sweep::Class::parse(class)?, case: n.parse().ok()? }))
}

/// Replays the one case `WAL_SWEEP_SEED` and `WAL_SWEEP_CASE` name (by default, a crash case).
#[test]
fn replay_one_case() {
    let (seed, only) = only_from_env().unwrap_or((1, sweep::Only { class: sweep::Class::Crash, case: 40 }));
    let s = sweep::run_seed(seed, Some(only));
    println!("seed {seed} {only:?}: {s:#?}");
    assert_eq!(s.cases.get(only.class.name()), Some(&1), "the case was not found");
}

/// A seed replays: the same cases, faults and verdicts (the synchronous classes; the I/O
/// thread's batching depends on timing).
#[test]
fn a_seed_replays_exactly() {
    let run = || {
        let mut s = sweep::Summary::default();
        let ran = sweep::crash_classes(3, None, &mut s);
        (format!("{s:?}"), ran.st.state().file_names())
    };
    assert_eq!(run(), run());
}

fn file(st: &MemStorage, name: &str) -> u64 {
    st.create(name).unwrap()
}

fn run(st: &MemStorage, token: u64, op: Op) -> std::io::Result<u64> {
    wal::storage::complete(st, token, op).map(|r| r.0)
}

/// The io_uring hazard (reliability.md A3): a sync submitted before a write it was meant to
/// cover completed. The simulated file system runs held-back operations in a seeded order, so
/// over seeds the sync sometimes runs first and does not cover the write, and it counts the
/// submission (the log itself never does this: `pipelined` checks that count stays 0).
#[test]
fn a_sync_submitted_over_an_unreaped_write_may_not_cover_it() {
    let (mut covered, mut missed) = (0, 0);
    for seed in 0..64u64 {
        let st = MemStorage::new();
        let f = file(&st, "f");
        run(&st, 1, Op::SyncDir).unwrap();
        {
            let mut fl = st.faults();
            fl.seed = Some(seed);
            fl.defer = true;
        }
        st.submit(Submission { token: 2, op: Op::Write { file: f, offset: 0, data: vec![7; 512] } }).unwrap();
        st.submit(Submission { token: 3, op: Op::SyncData { file: f } }).unwrap();
        let mut done: Vec<Completion> = Vec::new();
        while done.len() < 2 {
            st.reap(&mut done, true).unwrap();
        }
        assert_eq!(st.faults().syncs_over_unreaped_writes, 1);
        let img = st.state().crash(|_, _| SectorFate::Old);
        match img.state().file_bytes("f") {
            Some(b) if b == [7; 512] => covered += 1,
            _ => missed += 1,
        }
    }
    assert!(covered > 0 && missed > 0, "covered {covered}, missed {missed}");
}

/// Close never syncs; creates, renames and removes not followed by a directory sync roll back.
#[test]
fn close_never_syncs_and_unsynced_names_roll_back() {
    let st = MemStorage::new();
    let a = file(&st, "a");
    run(&st, 1, Op::Write { file: a, offset: 0, data: vec![1; 100] }).unwrap();
    st.close(a);
    assert!(st.state().crash(|_, _| SectorFate::New).state().file_names().is_empty(), "create survived");
    run(&st, 2, Op::SyncDir).unwrap();
    let img = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(img.state().file_bytes("a"), Some(&[][..]), "data survived a close without a sync");
    st.rename("a", "b").unwrap();
    let c = file(&st, "c");
    st.close(c);
    run(&st, 3, Op::SyncDir).unwrap();
    st.remove("b").unwrap();
    st.rename("c", "d").unwrap();
    let names = st.state().crash(|_, _| SectorFate::New).state().file_names();
    assert_eq!(names, vec!["b".to_string(), "c".to_string()], "unsynced remove and rename kept");
}

/// Linux fsync semantics: a failed fdatasync drops the pages' dirty state, their data stays
/// visible to reads, and a later fdatasync "succeeds" without making them durable.
#[test]
fn a_failed_fdatasync_keeps_the_data_visible_and_a_later_sync_succeeds_without_it() {
    let st = MemStorage::new();
    let f = file(&st, "f");
    run(&st, 1, Op::SyncDir).unwrap();
    st.faults().fail_sync_from = Some(0);
    st.faults().fail_sync_until = Some(1);
    run(&st, 2, Op::Write { file: f, offset: 0, data: vec![9; 1024] }).unwrap();
    assert!(run(&st, 3, Op::SyncData { file: f }).is_err());
    let mut buf = [0u8; 1024];
    assert_eq!(st.read_at(f, 0, &mut buf).unwrap(), 1024);
    assert_eq!(buf, [9; 1024], "the page cache still shows the data");
    assert!(run(&st, 4, Op::SyncData { file: f }).is_ok(), "the retry succeeds");
    let img = st.state().crash(|_, _| SectorFate::New);
    assert!(img.state().file_bytes("f").is_none_or(|b| b.iter().all(|&x| x == 0)), "not durable after all");
}
