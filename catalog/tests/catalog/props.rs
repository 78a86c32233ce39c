//! Property tests: random command sequences applied through the one apply seam.
//!
//! (a) the running digest equals one recomputed from scratch (after every entry), and the
//!     outcomes and final entities equal those of a naive model of the rules;
//! (b) a second run gives the same outcomes, digest and export;
//! (c) export → import gives the same catalog, digest and export bytes;
//! (d) a snapshot (export/import through `wal_state::snapshot`) at a random point plus the
//!     suffix gives the same state as the whole sequence.
//!
//! And fuzz-style: random or damaged bytes never make `Command::decode` or `import` panic.

use crate::common::payload;
use catalog::{Catalog, Command, Entity, EntityId, EntityKind, Op, Receipt, Refusal};
use proptest::prelude::*;
use wal::{Epoch, Lsn};
use wal_state::{snapshot, Applied, Applier, Outcome, StateMachine};

/// Which entity a generated command aims at, resolved against the state when it is generated.
#[derive(Clone, Debug)]
enum Pick {
    Root,
    /// The n-th existing entity (modulo the count).
    Existing(u16),
    /// Any id, most likely one that does not exist (or no longer does).
    Any(u64),
}

#[derive(Clone, Debug)]
enum Gen {
    Create { parent: Pick, kind: Option<u8>, name: u8, props: u8 },
    Rename { target: Pick, skew: i8, name: u8 },
    Update { target: Pick, skew: i8, props: u8 },
    Drop { target: Pick, skew: Option<i8>, cascade: bool },
    Garbage(Vec<u8>),
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        1 => Just(Pick::Root),
        8 => any::<u16>().prop_map(Pick::Existing),
        1 => (0..400u64).prop_map(Pick::Any),
    ]
}

/// Mostly the current version; sometimes one off either way.
fn skew() -> impl Strategy<Value = i8> {
    prop_oneof![6 => Just(0i8), 1 => Just(-1i8), 1 => Just(1i8)]
}

fn gen() -> impl Strategy<Value = Gen> {
    prop_oneof![
        5 => (pick(), proptest::option::weighted(0.15, 0..6u8), 0..5u8, 0..3u8)
            .prop_map(|(parent, kind, name, props)| Gen::Create { parent, kind, name, props }),
        2 => (pick(), skew(), 0..5u8).prop_map(|(target, skew, name)| Gen::Rename { target, skew, name }),
        2 => (pick(), skew(), 0..3u8).prop_map(|(target, skew, props)| Gen::Update { target, skew, props }),
        2 => (pick(), proptest::option::of(skew()), any::<bool>())
            .prop_map(|(target, skew, cascade)| Gen::Drop { target, skew, cascade }),
        1 => proptest::collection::vec(any::<u8>(), 0..24).prop_map(Gen::Garbage),
    ]
}

/// (entry, LSN gap before it: 1 means the next LSN).
fn workload(max: usize) -> impl Strategy<Value = Vec<(Gen, u64)>> {
    proptest::collection::vec((gen(), prop_oneof![4 => Just(1u64), 1 => 2..4u64]), 0..max)
}

fn resolve(c: &Catalog, p: &Pick) -> Option<EntityId> {
    match p {
        Pick::Root => None,
        Pick::Existing(n) if !c.is_empty() => c.iter().nth(*n as usize % c.len()).map(|e| e.id),
        Pick::Existing(_) => None,
        Pick::Any(id) => Some(EntityId(*id)),
    }
}

fn version_of(c: &Catalog, id: Option<EntityId>, skew: i8) -> u64 {
    let v = id.and_then(|i| c.get(i)).map_or(1, |e| e.version);
    v.saturating_add_signed(skew as i64)
}

const NAMES: [&str; 5] = ["a", "b", "c", "dd", "é"];

/// Turns a generated command into entry body bytes, aimed by looking at the current state (as a
/// client would have when it sent it).
fn body(c: &Catalog, g: &Gen) -> Vec<u8> {
    let cmd = match g {
        Gen::Create { parent, kind, name, props } => {
            let parent = resolve(c, parent);
            let natural = match parent.and_then(|p| c.get(p)) {
                None if parent.is_none() => Some(EntityKind::Metalake),
                None => Some(EntityKind::Catalog),
                Some(e) => e.kind.child_kind(),
            };
            // A forced kind (or a table's missing child kind) tries the wrong-kind rule.
            let kind = match (kind, natural) {
                (None, Some(k)) => k,
                (forced, _) => {
                    EntityKind::from_code(1 + forced.unwrap_or(3) % 4).unwrap_or(EntityKind::Table)
                }
            };
            Command::Create {
                parent,
                kind,
                name: NAMES[*name as usize].into(),
                props: vec![*props; *props as usize],
            }
        }
        Gen::Rename { target, skew, name } => {
            let id = resolve(c, target).unwrap_or(EntityId(0));
            let expected_version = version_of(c, Some(id), *skew);
            Command::Rename { id, expected_version, new_name: NAMES[*name as usize].into() }
        }
        Gen::Update { target, skew, props } => {
            let id = resolve(c, target).unwrap_or(EntityId(0));
            let expected_version = version_of(c, Some(id), *skew);
            Command::Update { id, expected_version, props: vec![*props; *props as usize] }
        }
        Gen::Drop { target, skew, cascade } => {
            let id = resolve(c, target).unwrap_or(EntityId(0));
            let expected_version = skew.map(|s| version_of(c, Some(id), s));
            Command::Drop { id, expected_version, cascade: *cascade }
        }
        Gen::Garbage(b) => return b.clone(),
    };
    cmd.encode()
}

/// A naive model of the rules (linear scans, no index, no digest): the oracle for apply.
#[derive(Default)]
struct Model {
    ents: Vec<Entity>,
}

impl Model {
    fn find(&self, id: EntityId) -> Option<usize> {
        self.ents.iter().position(|e| e.id == id)
    }

    fn sibling_named(&self, parent: Option<EntityId>, name: &str) -> Option<EntityId> {
        self.ents.iter().find(|e| e.parent == parent && e.name() == name).map(|e| e.id)
    }

    fn apply(&mut self, lsn: u64, body: &[u8]) -> Result<Receipt, Refusal> {
        let cmd = Command::decode(body).map_err(Refusal::Undecodable)?;
        let check = |e: &Entity, expected: u64| {
            if e.version == expected {
                Ok(e.version + 1)
            } else {
                Err(Refusal::StaleVersion { id: e.id, expected, current: e.version })
            }
        };
        match cmd {
            Command::Create { parent, kind, name, props } => {
                if lsn == 0 || self.find(EntityId(lsn)).is_some() {
                    return Err(Refusal::IdUnavailable { lsn });
                }
                let parent_kind = match parent {
                    None => None,
                    Some(p) => Some(self.ents[self.find(p).ok_or(Refusal::NoSuchParent { parent: p })?].kind),
                };
                if parent_kind != kind.parent_kind() {
                    return Err(Refusal::WrongParentKind { kind, parent, parent_kind });
                }
                if let Some(existing) = self.sibling_named(parent, &name) {
                    return Err(Refusal::NameExists { parent, name, existing });
                }
                self.ents.push(Entity::new(EntityId(lsn), parent, kind, 1, &name, &props));
                Ok(Receipt { op: Op::Create, id: EntityId(lsn), version: 1, removed: 0 })
            }
            Command::Rename { id, expected_version, new_name } => {
                let i = self.find(id).ok_or(Refusal::NoSuchEntity { id })?;
                let v = check(&self.ents[i], expected_version)?;
                let parent = self.ents[i].parent;
                if let Some(existing) = self.sibling_named(parent, &new_name).filter(|&o| o != id) {
                    return Err(Refusal::NameExists { parent, name: new_name, existing });
                }
                self.ents[i].set_name(&new_name);
                self.ents[i].version = v;
                Ok(Receipt { op: Op::Rename, id, version: v, removed: 0 })
            }
            Command::Update { id, expected_version, props } => {
                let i = self.find(id).ok_or(Refusal::NoSuchEntity { id })?;
                let v = check(&self.ents[i], expected_version)?;
                self.ents[i].set_props(&props);
                self.ents[i].version = v;
                Ok(Receipt { op: Op::Update, id, version: v, removed: 0 })
            }
            Command::Drop { id, expected_version, cascade } => {
                let i = self.find(id).ok_or(Refusal::NoSuchEntity { id })?;
                let version = self.ents[i].version;
                if let Some(expected) = expected_version {
                    check(&self.ents[i], expected)?;
                }
                let children = self.ents.iter().filter(|e| e.parent == Some(id)).count() as u64;
                if children > 0 && !cascade {
                    return Err(Refusal::HasChildren { id, children });
                }
                let before = self.ents.len();
                self.ents.remove(i);
                // Remove orphans until there are none.
                loop {
                    let n = self.ents.len();
                    let ids: Vec<EntityId> = self.ents.iter().map(|e| e.id).collect();
                    self.ents.retain(|e| e.parent.is_none_or(|p| ids.contains(&p)));
                    if self.ents.len() == n {
                        break;
                    }
                }
                Ok(Receipt { op: Op::Drop, id, version, removed: (before - self.ents.len()) as u64 })
            }
        }
    }

    fn sorted(&self) -> Vec<Entity> {
        let mut v = self.ents.clone();
        v.sort_by_key(|e| e.id);
        v
    }
}

/// A logged entry: (LSN, catalog body).
type Entry = (u64, Vec<u8>);

fn outcome(a: &mut Applier<Catalog>, lsn: u64, body: &[u8]) -> Outcome {
    match a.apply(Lsn(lsn), Epoch(0), &payload(body)).expect("the seam applies every entry") {
        Applied::Outcome(o) => o,
        d => panic!("no request ids here, yet {d:?}"),
    }
}

/// Resolves the workload against the evolving state, applying it once; returns the entries
/// (LSN, body), the outcomes and the final applier. Checks (a) as it goes.
fn first_run(work: &[(Gen, u64)]) -> (Vec<Entry>, Vec<Outcome>, Applier<Catalog>) {
    let mut a = Applier::new(Catalog::new(), 0);
    let mut model = Model::default();
    let (mut entries, mut outcomes) = (Vec::new(), Vec::new());
    let mut lsn = 0;
    for (g, gap) in work {
        lsn += gap;
        let b = body(a.state(), g);
        let o = outcome(&mut a, lsn, &b);
        let want = match model.apply(lsn, &b) {
            Ok(r) => Outcome::Done(r.encode()),
            Err(r) => Outcome::Refused(r.to_string()),
        };
        assert_eq!(o, want, "entry {lsn}: {g:?}");
        // (a) the running digest is the digest of the entity set, after every entry.
        assert_eq!(a.state().digest(), a.state().recompute_digest(), "entry {lsn}: {g:?}");
        entries.push((lsn, b));
        outcomes.push(o);
    }
    assert_eq!(a.state().iter().cloned().collect::<Vec<_>>(), model.sorted());
    a.state().verify().unwrap();
    (entries, outcomes, a)
}

fn replay(from: Applier<Catalog>, entries: &[Entry]) -> (Vec<Outcome>, Applier<Catalog>) {
    let mut a = from;
    let outcomes = entries.iter().map(|(l, b)| outcome(&mut a, *l, b)).collect();
    (outcomes, a)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_through_the_seam(work in workload(200), split in any::<proptest::sample::Index>()) {
        let (entries, outcomes, online) = first_run(&work);
        let export = online.state().export_bytes();
        let done = outcomes.iter().filter(|o| !o.is_refused()).count();
        prop_assume!(entries.is_empty() || done > 0);

        // (b) a second run: the same outcomes, digest and export, byte for byte.
        let (again, second) = replay(Applier::new(Catalog::new(), 0), &entries);
        prop_assert_eq!(&again, &outcomes);
        prop_assert_eq!(second.checkpoint(), online.checkpoint());
        prop_assert_eq!(&second.state().export_bytes(), &export);

        // (c) export → import: the same catalog, digest and bytes.
        let imported = Catalog::import(&export).map_err(TestCaseError::fail)?;
        prop_assert_eq!(imported.digest(), online.state().digest());
        prop_assert_eq!(&imported.export_bytes(), &export);
        prop_assert_eq!(&imported, online.state());

        // (d) a snapshot at a random point, then the suffix: the same state.
        let k = split.index(entries.len() + 1);
        let (_, prefix) = replay(Applier::new(Catalog::new(), 0), &entries[..k]);
        let snap = snapshot::encode(&prefix, [3; 16]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (base, info) = snapshot::decode::<Catalog>("prop", &snap).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(info.applied, k.checked_sub(1).map(|i| Lsn(entries[i].0)));
        prop_assert_eq!(base.state(), prefix.state());
        let (suffix_outcomes, resumed) = replay(base, &entries[k..]);
        prop_assert_eq!(&suffix_outcomes[..], &outcomes[k..]);
        prop_assert_eq!(resumed.checkpoint(), online.checkpoint());
        prop_assert_eq!(&resumed.state().export_bytes(), &export);
    }

    /// Random bytes, and valid commands with bytes changed, never make decode panic; whatever
    /// decodes re-encodes to the same bytes (one encoding per command).
    #[test]
    fn decode_never_panics(
        raw in proptest::collection::vec(any::<u8>(), 0..80),
        work in workload(4),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<proptest::sample::Index>(),
    ) {
        if let Ok(c) = Command::decode(&raw) {
            prop_assert_eq!(c.encode(), raw);
        }
        let c = Catalog::new();
        for (g, _) in &work {
            let mut b = body(&c, g);
            if let Ok(cmd) = Command::decode(&b) {
                prop_assert_eq!(cmd.encode(), b.clone());
            }
            for (at, x) in &flips {
                if !b.is_empty() {
                    let i = at.index(b.len());
                    b[i] ^= x;
                }
            }
            if let Ok(cmd) = Command::decode(&b) {
                prop_assert_eq!(cmd.encode(), b.clone());
            }
            let n = cut.index(b.len() + 1);
            let _ = Command::decode(&b[..n]);
            let _ = Receipt::decode(&b);
        }
    }

    /// Random bytes, and real exports with bytes changed or cut, never make import panic;
    /// whatever imports exports back to exactly the same bytes and is self-consistent.
    #[test]
    fn import_never_panics(
        raw in proptest::collection::vec(any::<u8>(), 0..120),
        work in workload(30),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut with_header = catalog::EXPORT_MAGIC.to_vec();
        with_header.extend_from_slice(&raw);
        for bytes in [&raw, &with_header] {
            if let Ok(c) = Catalog::import(bytes) {
                prop_assert_eq!(&c.export_bytes(), bytes);
            }
        }
        let mut a = Applier::new(Catalog::new(), 0);
        for (i, (g, _)) in work.iter().enumerate() {
            let b = body(a.state(), g);
            outcome(&mut a, i as u64 + 1, &b);
        }
        let good = a.state().export_bytes();
        let mut bad = good.clone();
        for (at, x) in &flips {
            let i = at.index(bad.len());
            bad[i] ^= x;
        }
        if let Ok(c) = Catalog::import(&bad) {
            prop_assert_eq!(&c.export_bytes(), &bad);
            c.verify().map_err(TestCaseError::fail)?;
        }
        let n = cut.index(good.len() + 1);
        prop_assert_eq!(Catalog::import(&good[..n]).is_ok(), n == good.len());
    }
}

/// The generator must keep reaching every rule, or the properties above prove little: over a
/// fixed set of generated workloads, every kind of outcome occurs, and trees grow.
#[test]
fn the_generator_reaches_every_rule() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    let mut largest = 0;
    for _ in 0..20 {
        let work = workload(200).new_tree(&mut runner).unwrap().current();
        let (_, outcomes, a) = first_run(&work);
        largest = largest.max(a.state().len());
        for o in outcomes {
            let class = match o {
                Outcome::Done(b) => {
                    let r = Receipt::decode(&b).unwrap();
                    format!("done {:?}{}", r.op, if r.removed > 1 { " subtree" } else { "" })
                }
                Outcome::Refused(why) => why.split(':').next().unwrap_or_default().to_string(),
            };
            *seen.entry(class).or_default() += 1;
        }
    }
    for class in [
        "done Create",
        "done Rename",
        "done Update",
        "done Drop",
        "done Drop subtree",
        "has children",
        "name exists",
        "no such entity",
        "no such parent",
        "stale version",
        "undecodable catalog command",
        "wrong parent kind",
    ] {
        assert!(seen.get(class).is_some_and(|&n| n >= 5), "{class} too rare: {seen:#?}");
    }
    assert!(largest >= 10, "trees stay small: {largest}");
}
