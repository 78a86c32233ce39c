//! The three classic races (docs/invariants.md I9), run concurrently through the real commit pipeline:
//! whatever order the threads reach the log in, apply decides in log order and exactly one
//! side of each race wins.

use catalog::{Catalog, Command, EntityId, EntityKind, Receipt};
use std::sync::{Arc, Barrier};
use wal::storage::Storage;
use wal::{Options, Wal};
use wal_sim::MemStorage;
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions, Resolution};
use wal_state::{Applied, Outcome};

fn start() -> Pipeline<Catalog> {
    let st = MemStorage::new();
    let o = PipelineOptions {
        log: Options { segment_len_bytes: 1 << 20, create: true, ..Options::default() },
        ..PipelineOptions::default()
    };
    let (wal, open) = Wal::open_with(Arc::new(st), o.log.clone()).unwrap();
    let snaps: Arc<dyn Storage> = Arc::new(MemStorage::new());
    Pipeline::start(wal, open, snaps, o, Hooks::default(), Catalog::new).unwrap().0
}

fn run(p: &Pipeline<Catalog>, c: Command) -> Resolution {
    p.submit(&c.encode(), None).unwrap().wait()
}

fn created(r: Resolution) -> EntityId {
    match r.unwrap().applied {
        Applied::Outcome(Outcome::Done(b)) => Receipt::decode(&b).unwrap().id,
        other => panic!("{other:?}"),
    }
}

fn won(r: &Resolution) -> bool {
    match &r.as_ref().unwrap().applied {
        Applied::Outcome(Outcome::Done(_)) => true,
        Applied::Outcome(Outcome::Refused(_)) => false,
        other => panic!("{other:?}"),
    }
}

/// Runs `a` and `b` from two threads released together; returns both resolutions.
fn race(p: &Arc<Pipeline<Catalog>>, a: Command, b: Command) -> (Resolution, Resolution) {
    let gate = Arc::new(Barrier::new(2));
    let (p2, g2) = (p.clone(), gate.clone());
    let t = std::thread::spawn(move || {
        g2.wait();
        run(&p2, b)
    });
    gate.wait();
    let ra = run(p, a);
    (ra, t.join().unwrap())
}

fn create(parent: Option<EntityId>, kind: EntityKind, name: &str) -> Command {
    Command::Create { parent, kind, name: name.into(), props: vec![] }
}

#[test]
fn concurrent_races_have_exactly_one_winner_in_log_order() {
    let p = Arc::new(start());
    let lake = created(run(&p, create(None, EntityKind::Metalake, "lake")));
    for round in 0..20 {
        // TOCTOU rename: two catalogs renamed to one free name at once.
        let a = created(run(&p, create(Some(lake), EntityKind::Catalog, &format!("a{round}"))));
        let b = created(run(&p, create(Some(lake), EntityKind::Catalog, &format!("b{round}"))));
        let target = format!("same{round}");
        let (ra, rb) = race(
            &p,
            Command::Rename { id: a, expected_version: 1, new_name: target.clone() },
            Command::Rename { id: b, expected_version: 1, new_name: target.clone() },
        );
        assert!(won(&ra) ^ won(&rb), "round {round}: both or neither rename won");
        let winner_lsn = if won(&ra) { ra.as_ref().unwrap().lsn } else { rb.as_ref().unwrap().lsn };
        let loser_lsn = if won(&ra) { rb.as_ref().unwrap().lsn } else { ra.as_ref().unwrap().lsn };
        assert!(winner_lsn < loser_lsn, "the first in the log must win");
        assert!(p.read(|c| c.lookup(Some(lake), &target).is_some()));

        // Orphan: drop a schema while a table is created under it.
        let schema = created(run(&p, create(Some(a), EntityKind::Schema, "s")));
        let (rd, rc) = race(
            &p,
            Command::Drop { id: schema, expected_version: None, cascade: false },
            create(Some(schema), EntityKind::Table, "t"),
        );
        assert!(won(&rd) ^ won(&rc), "round {round}: drop and child create both won or both lost");
        p.read(|c| {
            for e in c.iter() {
                if let Some(parent) = e.parent {
                    assert!(c.get(parent).is_some(), "orphan {e:?}");
                }
            }
        });

        // ABA: two updates against the same version; exactly one wins, and a later update at
        // that version is refused even with the original content.
        let c = created(run(&p, create(Some(lake), EntityKind::Catalog, &format!("c{round}"))));
        let (u1, u2) = race(
            &p,
            Command::Update { id: c, expected_version: 1, props: b"x".to_vec() },
            Command::Update { id: c, expected_version: 1, props: vec![] },
        );
        assert!(won(&u1) ^ won(&u2), "round {round}: both or neither update at version 1 won");
        assert!(!won(&run(&p, Command::Update { id: c, expected_version: 1, props: vec![] })));
    }
    Arc::try_unwrap(p).ok().unwrap().close().unwrap();
}
