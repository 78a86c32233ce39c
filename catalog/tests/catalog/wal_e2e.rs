//! End to end over a real `wal::Wal` (on `MemStorage`): catalog commands are logged in the
//! envelope, applied online after their sync (commit), checkpointed; after a reopen the
//! replay-and-compare core (`Replayer`) rebuilds the same catalog with no divergence, from
//! the start and from a snapshot. A checkpoint that lies about the catalog is DIVERGENT.

use crate::common::{payload, scripted};
use catalog::{diff, Catalog};
use std::sync::Arc;
use wal::{Durability, Epoch, Lsn, Options, Wal};
use wal_sim::{MemStorage, Rng};
use wal_state::snapshot::{list_snapshots, read_snapshot, write_snapshot};
use wal_state::{Applier, CompareReport, Replayer, StateMachine};

fn open(st: &MemStorage) -> Wal {
    let opts = Options { segment_len_bytes: 64 * 1024, ..Options::default() };
    Wal::open_with(Arc::new(st.clone()), opts).unwrap().0
}

/// Logs `n` scripted commands, applying each after its sync, with a checkpoint every `every`
/// entries and a snapshot after entry `snap_at`.
fn run_online(st: &MemStorage, log: &mut Wal, n: usize, every: usize, snap_at: usize) -> Applier<Catalog> {
    let mut a = Applier::new(Catalog::new(), 64);
    // xorshift64: the workload's pseudo-random words.
    let mut rng = Rng::xorshift64(0x9e37_79b9_7f4a_7c15);
    for i in 1..=n {
        let body = scripted(a.state(), rng.next_u64()).encode();
        let p = payload(&body);
        let lsn = log.append(Epoch(0), &p).unwrap();
        log.sync().unwrap();
        a.apply(lsn, Epoch(0), &p).unwrap();
        if i % every == 0 {
            log.checkpoint(Epoch(0), lsn, &a.checkpoint()).unwrap();
        }
        if i == snap_at {
            write_snapshot(st, &a, log.log_id()).unwrap();
        }
    }
    log.sync().unwrap();
    a
}

fn replay(log: &Wal, from: Applier<Catalog>) -> (Applier<Catalog>, CompareReport) {
    let mut r = Replayer::new(from);
    let start = r.applier().applied().map(|l| Lsn(l.0 + 1));
    let mut it = log.replay_from(start, Durability::Durable).unwrap();
    r.run(&mut it).unwrap();
    r.finish()
}

#[test]
fn online_apply_checkpoint_reopen_and_replay_agree() {
    let st = MemStorage::new();
    let mut log = open(&st);
    let online = run_online(&st, &mut log, 400, 25, 210);
    let applied = online.state().len();
    assert!(applied >= 20, "the workload builds a real tree: {applied}");
    log.close().unwrap();

    let log = open(&st);
    let (full, rep) = replay(&log, Applier::new(Catalog::new(), 64));
    assert_eq!(rep.divergence, None, "{rep:?}");
    assert_eq!(rep.unsupported, None);
    assert_eq!((rep.entries_applied, rep.checkpoints_checked), (400, 16));
    assert_eq!((rep.verified_through, rep.unchecked_entries), (Some(Lsn(400)), 0));
    assert!(rep.refused > 20, "the workload exercises refusals: {rep:?}");
    assert_eq!(full.checkpoint(), online.checkpoint());
    assert_eq!(full.state().digest(), online.state().digest());
    assert_eq!(full.state().export_bytes(), online.state().export_bytes());
    assert!(diff(full.state(), online.state(), 5).is_empty());
    full.state().verify().unwrap();

    // From the snapshot at 210: only the suffix is replayed, to the same state.
    let names = list_snapshots(&st).unwrap();
    assert_eq!(names, vec![(Some(Lsn(210)), "snapshot-00000000000000000210.snap".to_string())]);
    let (base, info) = read_snapshot::<Catalog>(&st, &names[0].1).unwrap();
    assert_eq!(info.applied, Some(Lsn(210)));
    let (resumed, rep) = replay(&log, base);
    assert_eq!(rep.divergence, None, "{rep:?}");
    assert_eq!((rep.base, rep.entries_applied, rep.checkpoints_checked), (Some(Lsn(210)), 190, 8));
    assert_eq!(resumed.checkpoint(), online.checkpoint());
    assert_eq!(resumed.state(), online.state());
}

/// The negative control: a checkpoint recording a catalog state that the log does not produce
/// (here, the state before the entry it claims to cover) is found, at that checkpoint.
#[test]
fn a_checkpoint_that_does_not_match_the_catalog_is_divergent() {
    let st = MemStorage::new();
    let mut log = open(&st);
    let mut a = run_online(&st, &mut log, 50, 10, 0);
    let stale = a.checkpoint();
    let body = catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: "fresh-lake".into(),
        props: vec![],
    }
    .encode();
    let p = payload(&body);
    let lsn = log.append(Epoch(0), &p).unwrap();
    log.sync().unwrap();
    a.apply(lsn, Epoch(0), &p).unwrap();
    assert_ne!(a.checkpoint(), stale, "the create changed the catalog");
    log.checkpoint(Epoch(0), lsn, &stale).unwrap();
    log.sync().unwrap();

    let (after, rep) = replay(&log, Applier::new(Catalog::new(), 64));
    let d = rep.divergence.expect("the lying checkpoint is found");
    assert_eq!((d.last_good, d.lsn), (Some(Lsn(50)), lsn));
    let (recorded, replayed) = (d.recorded.unwrap(), d.replayed.unwrap());
    assert_eq!(recorded, stale);
    assert_eq!(replayed, a.checkpoint());
    assert_eq!(replayed.entity_count, recorded.entity_count + 1, "{}", d.reason);
    assert!(after.fenced().is_some());
}
