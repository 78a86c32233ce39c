//! The apply seam, the replay-and-compare core and snapshots (issue 4, docs/invariants.md I1, I2, I8),
//! with a small key-value state machine.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use wal::{Epoch, Error, Lsn, Options, Wal};
use wal_sim::workload::kv::{Kv, SKEW, SKEW_LOCK};
use wal_sim::{MemStorage, Rng};
use wal_state::snapshot::{self, list_snapshots, read_snapshot, write_snapshot};
use wal_state::{Applied, Applier, EntryKind, Envelope, Fate, Outcome, Replayer};

fn cmd(body: &str) -> Vec<u8> {
    Envelope::encode(EntryKind::Command, None, body.as_bytes())
}

fn opts() -> Options {
    Options { segment_len_bytes: 64 * 1024, ..Options::default() }
}

fn open(st: &MemStorage) -> Wal {
    Wal::open_with(Arc::new(st.clone()), opts()).unwrap().0
}

/// Appends `bodies` one by one, applying each online after its sync (commit), with a checkpoint
/// every `every` entries. Returns the online applier.
fn run_online(log: &mut Wal, bodies: &[String], every: usize, mut a: Applier<Kv>) -> Applier<Kv> {
    for (i, b) in bodies.iter().enumerate() {
        let payload = cmd(b);
        let lsn = log.append(Epoch(0), &payload).unwrap();
        log.sync().unwrap();
        a.apply(lsn, Epoch(0), &payload).unwrap();
        if (i + 1) % every == 0 {
            log.checkpoint(Epoch(0), lsn, &a.checkpoint()).unwrap();
        }
    }
    log.sync().unwrap();
    a
}

fn workload(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::xorshift64(seed | 1);
    (0..n)
        .map(|i| {
            let x = rng.next_u64();
            let k = x % 17;
            if x.is_multiple_of(5) {
                format!("del k{k}")
            } else {
                format!("put k{k} v{i}")
            }
        })
        .collect()
}

fn replay_all(log: &Wal, from: Applier<Kv>) -> (Applier<Kv>, wal_state::CompareReport) {
    let mut r = Replayer::new(from);
    let start = r.applier().applied().map(|l| Lsn(l.0 + 1));
    let mut it = log.replay_from(start, wal::Durability::Durable).unwrap();
    r.run(&mut it).unwrap();
    r.finish()
}

#[test]
fn the_seam_drops_duplicate_requests_and_refuses_disorder() {
    let mut a = Applier::new(Kv::default(), 3);
    let put = |id| Envelope::encode(EntryKind::Command, Some(id), b"put a 1");
    assert_eq!(a.apply(Lsn(1), Epoch(0), &put(7)).unwrap(), Applied::Outcome(Outcome::Done(vec![])));
    assert_eq!(a.apply(Lsn(2), Epoch(0), &put(7)).unwrap(), Applied::Duplicate { first_lsn: Lsn(1) });
    assert_eq!(a.fate(7), Fate::Applied { lsn: Lsn(1), refused: false });
    assert_eq!(a.fate(8), Fate::NotApplied);
    let del = Envelope::encode(EntryKind::Fact, Some(9), b"del zzz");
    assert_eq!(
        a.apply(Lsn(3), Epoch(0), &del).unwrap(),
        Applied::Outcome(Outcome::Refused("no key zzz".into()))
    );
    assert_eq!(a.fate(9), Fate::Applied { lsn: Lsn(3), refused: true });
    // Out of order and repeated LSNs are refused before the state machine sees them.
    assert!(a.apply(Lsn(3), Epoch(0), &cmd("put b 2")).unwrap_err().contains("out of order"));
    assert!(a.apply(Lsn(5), Epoch(0), b"short").unwrap_err().contains("envelope"));
    // The window: request 7 (LSN 1) is forgotten once LSN 5 is applied (5 - 1 > 3).
    a.apply(Lsn(6), Epoch(0), &cmd("put c 3")).unwrap();
    assert_eq!(a.fate(7), Fate::NotApplied);
    assert_eq!(a.fate(9), Fate::Applied { lsn: Lsn(3), refused: true });
    assert_eq!(a.state().map.len(), 2);
}

#[test]
fn a_panic_in_apply_fences_the_seam_without_unwinding_into_the_caller() {
    let mut a = Applier::new(Kv::default(), 0);
    a.apply(Lsn(1), Epoch(0), &cmd("put a 1")).unwrap();
    let err = a.apply(Lsn(2), Epoch(0), &cmd("panic now")).unwrap_err();
    assert!(err.contains("apply panicked at LSN 2"), "{err}");
    assert!(a.fenced().is_some());
    let again = a.apply(Lsn(3), Epoch(0), &cmd("put b 2")).unwrap_err();
    assert!(again.contains("fenced"), "{again}");
    assert_eq!(a.applied(), Some(Lsn(2)));
}

#[test]
fn replay_matches_every_checkpoint_online_and_twice_offline() {
    let st = MemStorage::new();
    let mut log = open(&st);
    let bodies = workload(300, 11);
    let online = run_online(&mut log, &bodies, 25, Applier::new(Kv::default(), 100));
    log.close().unwrap();

    let log = open(&st);
    let (first, rep) = replay_all(&log, Applier::new(Kv::default(), 100));
    assert_eq!(rep.divergence, None);
    assert_eq!(rep.unsupported, None);
    assert_eq!(rep.checkpoints_checked, 12);
    assert_eq!(rep.entries_applied, 300);
    assert_eq!(rep.verified_through, Some(Lsn(300)));
    assert_eq!(rep.unchecked_entries, 0);
    assert_eq!(first.checkpoint(), online.checkpoint());
    assert_eq!(first.state().map, online.state().map);
    let (second, _) = replay_all(&log, Applier::new(Kv::default(), 100));
    assert_eq!(second.checkpoint(), online.checkpoint());
}

#[test]
fn entries_after_the_last_checkpoint_are_counted_as_unchecked() {
    let st = MemStorage::new();
    let mut log = open(&st);
    run_online(&mut log, &workload(57, 5), 20, Applier::new(Kv::default(), 0));
    let (_, rep) = replay_all(&log, Applier::new(Kv::default(), 0));
    assert_eq!((rep.checkpoints_checked, rep.verified_through), (2, Some(Lsn(40))));
    assert_eq!(rep.unchecked_entries, 17);
    assert_eq!(rep.last_applied, Some(Lsn(57)));
}

/// A checkpoint for LSN L is written after L was applied, so later entries can sit between L
/// and its checkpoint record: the replayer must compare with the state at L, not the state when
/// the record is met.
#[test]
fn a_checkpoint_behind_later_entries_is_checked_at_its_own_lsn() {
    let st = MemStorage::new();
    let mut log = open(&st);
    let mut a = Applier::new(Kv::default(), 0);
    let mut pending = Vec::new();
    for (i, b) in workload(40, 3).iter().enumerate() {
        let p = cmd(b);
        let lsn = log.append(Epoch(0), &p).unwrap();
        pending.push((lsn, p));
        if i % 10 == 9 {
            // Apply all but the last three (still "in flight"), then checkpoint.
            let keep = pending.split_off(pending.len() - 3);
            for (l, p) in pending.drain(..) {
                a.apply(l, Epoch(0), &p).unwrap();
            }
            log.checkpoint(Epoch(0), a.applied().unwrap(), &a.checkpoint()).unwrap();
            pending = keep;
        }
    }
    log.sync().unwrap();
    let (_, rep) = replay_all(&log, Applier::new(Kv::default(), 0));
    assert_eq!(rep.divergence, None);
    assert_eq!(rep.checkpoints_checked, 4);
    assert_eq!(rep.verified_through, Some(Lsn(37)));
    assert_eq!(rep.unchecked_entries, 3);
}

/// docs/invariants.md I8 and issue 6: a non-deterministic apply is caught as DIVERGENT within one
/// checkpoint interval of where it first diverges, and the seam is fenced, not aborted.
#[test]
fn a_non_deterministic_apply_is_divergent_within_one_checkpoint_interval() {
    let _g = SKEW_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let st = MemStorage::new();
    let mut log = open(&st);
    let bodies = workload(200, 21);
    let mut a = run_online(&mut log, &bodies[..130], 20, Applier::new(Kv::default(), 0));
    // From entry 131 on, online apply behaves differently from what replay will do.
    SKEW.store(true, Ordering::Relaxed);
    let first_put = bodies[130..].iter().position(|b| b.starts_with("put")).unwrap() + 131;
    a = run_online(&mut log, &bodies[130..], 20, a);
    SKEW.store(false, Ordering::Relaxed);
    drop(a);
    let (after, rep) = replay_all(&log, Applier::new(Kv::default(), 0));
    let d = rep.divergence.expect("divergence must be found");
    assert_eq!(d.last_good, Some(Lsn(120)), "{d:?}");
    assert!(d.lsn.0 >= first_put as u64 && d.lsn.0 < first_put as u64 + 20, "{d:?} first {first_put}");
    assert_ne!(d.recorded.unwrap().digest, d.replayed.unwrap().digest);
    assert!(after.fenced().is_some_and(|f| f.contains("DIVERGENT")));
}

#[test]
fn an_unknown_state_machine_version_is_unsupported_not_divergent() {
    let st = MemStorage::new();
    let mut log = open(&st);
    let mut a = run_online(&mut log, &workload(10, 1), 100, Applier::new(Kv::default(), 0));
    let mut cp = a.checkpoint();
    cp.state_machine_version = 4;
    log.checkpoint(Epoch(0), Lsn(10), &cp).unwrap();
    log.sync().unwrap();
    let (_, rep) = replay_all(&log, Applier::new(Kv::default(), 0));
    assert!(rep.unsupported.unwrap().contains("state-machine version 4"));
    assert_eq!(rep.divergence, None);
    // A checkpoint for an LSN the log has not given out is refused at the source.
    let err = log.checkpoint(Epoch(0), Lsn(11), &a.checkpoint()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    a.apply(Lsn(11), Epoch(0), &cmd("put z 1")).unwrap();
}

#[test]
fn snapshot_plus_suffix_gives_the_same_state_as_a_full_replay() {
    let st = MemStorage::new();
    let mut log = open(&st);
    let bodies = workload(250, 8);
    let mut a = Applier::new(Kv::default(), 50);
    // Request ids so the dedupe table is part of what the snapshot must carry.
    for (i, b) in bodies.iter().enumerate() {
        let id = (i as u64 % 40) + 1; // ids repeat: some are duplicates inside the window
        let p = Envelope::encode(EntryKind::Command, Some(id), b.as_bytes());
        let lsn = log.append(Epoch(0), &p).unwrap();
        log.sync().unwrap();
        a.apply(lsn, Epoch(0), &p).unwrap();
        if i % 30 == 29 {
            log.checkpoint(Epoch(0), lsn, &a.checkpoint()).unwrap();
        }
        if i == 149 {
            let side = st.clone();
            write_snapshot(&side, &a, log.log_id()).unwrap();
        }
    }
    log.sync().unwrap();
    let names = list_snapshots(&st).unwrap();
    assert_eq!(names, vec![(Some(Lsn(150)), "snapshot-00000000000000000150.snap".to_string())]);
    let (base, info) = read_snapshot::<Kv>(&st, &names[0].1).unwrap();
    assert_eq!((info.applied, info.log_id), (Some(Lsn(150)), log.log_id()));
    let (from_snap, rep) = replay_all(&log, base);
    assert_eq!(rep.divergence, None);
    assert_eq!(rep.base, Some(Lsn(150)));
    assert_eq!(rep.entries_applied, 100);
    // Replay starts after the base, so only the checkpoints at 180, 210 and 240 are met.
    assert_eq!((rep.checkpoints_checked, rep.verified_through), (3, Some(Lsn(240))), "{rep:?}");
    assert!(rep.duplicates > 0, "the workload must exercise the carried dedupe table: {rep:?}");
    let (full, _) = replay_all(&log, Applier::new(Kv::default(), 50));
    assert_eq!(from_snap.checkpoint(), a.checkpoint());
    assert_eq!(full.checkpoint(), a.checkpoint());
    assert_eq!(from_snap.dedupe_records().collect::<Vec<_>>(), a.dedupe_records().collect::<Vec<_>>());
}

#[test]
fn a_damaged_or_foreign_snapshot_is_refused_with_what_is_wrong() {
    let mut a = Applier::new(Kv::default(), 10);
    for (i, b) in workload(20, 2).iter().enumerate() {
        a.apply(
            Lsn(i as u64 + 1),
            Epoch(0),
            &Envelope::encode(EntryKind::Command, Some(i as u64 + 1), b.as_bytes()),
        )
        .unwrap();
    }
    let good = snapshot::encode(&a, [7; 16]).unwrap();
    let (back, _) = snapshot::decode::<Kv>("s", &good).unwrap();
    assert_eq!(back.checkpoint(), a.checkpoint());
    // Every single-bit flip anywhere in the file is refused (header crc, body crc or digest).
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        match snapshot::decode::<Kv>("s", &bad) {
            Err(Error::BadSnapshot { .. } | Error::Unsupported(_)) => {}
            other => panic!("flip at byte {i}: {:?}", other.map(|(_, i)| i)),
        }
    }
    // Truncated at every length.
    for n in 0..good.len() {
        assert!(snapshot::decode::<Kv>("s", &good[..n]).is_err(), "truncated to {n}");
    }
    // A body whose content does not rebuild the recorded digest (checksums recomputed).
    let mut forged = good.clone();
    let last = forged.len() - 2;
    forged[last] ^= 1;
    let crc = crc32c::crc32c(&forged[128..]);
    forged[112..116].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&forged[..124]);
    forged[124..128].copy_from_slice(&hcrc.to_le_bytes());
    let err = snapshot::decode::<Kv>("s", &forged).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("does not match the recorded digest"), "{err}");
}

/// `Replayer::state_at`, what a Raft node's replay compares digest claims with: the state
/// after the last entry at or below an LSN, the base's before the first replayed entry,
/// nothing before the base or older than the states kept.
#[test]
fn the_replayer_gives_the_state_after_the_last_entry_at_or_below_an_lsn() {
    let empty = Replayer::new(Applier::new(Kv::default(), 0));
    assert_eq!(empty.state_at(Lsn(5)), Some(Applier::new(Kv::default(), 0).checkpoint()), "the empty start");

    let mut base = Applier::new(Kv::default(), 0);
    base.apply(Lsn(10), Epoch(0), &cmd("put a 1")).unwrap();
    let at_base = base.checkpoint();
    let mut r = Replayer::new(base);
    assert_eq!(r.state_at(Lsn(10)), Some(at_base));
    assert_eq!(r.state_at(Lsn(9)), None, "before the base");
    r.entry(Lsn(12), Epoch(0), &cmd("put b 2"));
    let at_12 = r.applier().checkpoint();
    r.entry(Lsn(15), Epoch(0), &cmd("put c 3"));
    let at_15 = r.applier().checkpoint();
    assert_eq!(r.state_at(Lsn(11)), Some(at_base));
    assert_eq!(r.state_at(Lsn(14)), Some(at_12));
    assert_eq!(r.state_at(Lsn(99)), Some(at_15));
    assert!(at_base != at_12 && at_12 != at_15);

    // Past CHECKPOINT_MAX_LAG more entries, the base's state is no longer kept.
    for i in 0..wal_state::CHECKPOINT_MAX_LAG {
        r.entry(Lsn(16 + i), Epoch(0), &cmd("put d 4"));
    }
    assert_eq!(r.state_at(Lsn(11)), None, "trimmed");
    assert_eq!(r.state_at(Lsn(14)), None, "trimmed");
    assert_eq!(r.state_at(Lsn(15)), Some(at_15), "the oldest kept");
}
