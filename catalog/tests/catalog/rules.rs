//! docs/invariants.md I9: the catalog closes the classic races, checked at apply time in log order
//! through the one apply seam.

use crate::common::Harness;
use catalog::{Catalog, EntityId, EntityKind, Op, Receipt, Refusal};
use wal_state::{Outcome, SetDigest, StateMachine};

use EntityKind::{Catalog as Cat, Metalake, Schema, Table};

/// metalake "lake" > catalog "cat" > schema "sch"; returns their ids.
fn tree(h: &mut Harness) -> (EntityId, EntityId, EntityId) {
    let m = h.create(None, Metalake, "lake").unwrap();
    let c = h.create(Some(m), Cat, "cat").unwrap();
    let s = h.create(Some(c), Schema, "sch").unwrap();
    (m, c, s)
}

#[test]
fn ids_are_the_create_lsns_and_queries_see_the_tree() {
    let mut h = Harness::default();
    h.skip_to(10);
    let (m, c, s) = tree(&mut h);
    assert_eq!((m, c, s), (EntityId(10), EntityId(11), EntityId(12)));
    let t = h.create_with(Some(s), Table, "t", b"cols").unwrap();
    let st = h.state();
    assert_eq!(st.len(), 4);
    assert_eq!(st.lookup(None, "lake").unwrap().id, m);
    assert_eq!(st.lookup(Some(s), "t").unwrap().props(), b"cols");
    assert!(st.lookup(Some(c), "t").is_none(), "names are per parent");
    assert_eq!(st.children(Some(s)).map(|e| e.id).collect::<Vec<_>>(), vec![t]);
    assert_eq!(st.get(t).unwrap().parent, Some(s));
    assert_eq!(st.child_count(None), 1);
    st.verify().unwrap();
}

#[test]
fn two_renames_to_one_name_exactly_the_first_in_log_order_wins() {
    let mut h = Harness::default();
    let (_, _, s) = tree(&mut h);
    let a = h.create(Some(s), Table, "a").unwrap();
    let b = h.create(Some(s), Table, "b").unwrap();
    // Both clients read version 1 and race to the name "z"; the log orders them.
    let first = h.rename(a, 1, "z");
    let second = h.rename(b, 1, "z");
    assert_eq!(first, Ok(Receipt { op: Op::Rename, id: a, version: 2, removed: 0 }));
    assert_eq!(
        second,
        Err(Refusal::NameExists { parent: Some(s), name: "z".into(), existing: a }.to_string())
    );
    let st = h.state();
    assert_eq!(st.lookup(Some(s), "z").unwrap().id, a);
    assert_eq!(st.lookup(Some(s), "b").unwrap().id, b, "the loser is unchanged");
    assert!(st.lookup(Some(s), "a").is_none(), "the winner's old name is free");
    assert_eq!(st.get(b).unwrap().version, 1);
    // The freed name can be taken, and the same name under another parent is no conflict.
    h.rename(b, 1, "a").unwrap();
    let (_, _, s2) = {
        let m = h.create(None, Metalake, "lake2").unwrap();
        let c = h.create(Some(m), Cat, "cat").unwrap();
        (m, c, h.create(Some(c), Schema, "sch").unwrap())
    };
    h.create(Some(s2), Table, "z").unwrap();
    // Two creates of one name: the second is refused too.
    let err = h.create(Some(s2), Table, "z").unwrap_err();
    assert!(err.starts_with("name exists"), "{err}");
    h.state().verify().unwrap();
}

#[test]
fn no_child_under_a_missing_or_dropped_parent_even_after_a_re_create_under_the_same_name() {
    let mut h = Harness::default();
    // Never created.
    assert_eq!(
        h.create(Some(EntityId(99)), Cat, "c"),
        Err(Refusal::NoSuchParent { parent: EntityId(99) }.to_string())
    );
    let old = h.create(None, Metalake, "lake").unwrap();
    let c = h.create(Some(old), Cat, "cat").unwrap();
    // A client reads `old`, then someone drops it and creates a new "lake".
    h.drop_entity(old, Some(1), true).unwrap();
    let new = h.create(None, Metalake, "lake").unwrap();
    assert_ne!(new, old);
    // The client's late create still names the old parent by id: refused, no orphan.
    assert_eq!(h.create(Some(old), Cat, "late"), Err(Refusal::NoSuchParent { parent: old }.to_string()));
    // Its late update and rename of the dropped child are refused too.
    assert_eq!(h.update(c, 1, b"x"), Err(Refusal::NoSuchEntity { id: c }.to_string()));
    assert_eq!(h.rename(c, 1, "y").unwrap_err(), Refusal::NoSuchEntity { id: c }.to_string());
    let st = h.state();
    assert_eq!(st.len(), 1);
    assert_eq!(st.child_count(Some(new)), 0);
    assert!(st.iter().all(|e| e.parent.is_none_or(|p| st.get(p).is_some())), "an orphan");
    h.state().verify().unwrap();
}

#[test]
fn a_stale_version_is_refused_even_when_the_content_went_back_no_aba() {
    let mut h = Harness::default();
    let (_, _, s) = tree(&mut h);
    let t = h.create_with(Some(s), Table, "t", b"A").unwrap();
    // A client reads (t, version 1, props "A").
    assert_eq!(h.update(t, 1, b"B").unwrap().version, 2);
    assert_eq!(h.update(t, 2, b"A").unwrap().version, 3);
    // The content is "A" again, as the client saw it, but the version moved on.
    assert_eq!(h.state().get(t).unwrap().props(), b"A");
    assert_eq!(
        h.update(t, 1, b"C"),
        Err(Refusal::StaleVersion { id: t, expected: 1, current: 3 }.to_string())
    );
    // The same for a rename back and forth, and for a drop with an expected version.
    assert_eq!(h.rename(t, 3, "u").unwrap().version, 4);
    assert_eq!(h.rename(t, 4, "t").unwrap().version, 5);
    let err = h.rename(t, 3, "v").unwrap_err();
    assert!(err.contains("stale version") && err.contains("version 5, expected 3"), "{err}");
    assert_eq!(
        h.drop_entity(t, Some(1), false),
        Err(Refusal::StaleVersion { id: t, expected: 1, current: 5 }.to_string())
    );
    // A future version is as wrong as a past one.
    assert!(h.update(t, 6, b"D").is_err());
    let e = h.state().get(t).unwrap();
    assert_eq!((e.version, e.name(), e.props()), (5, "t", &b"A"[..]));
    // Every accepted mutation advanced the version, and the current one is accepted.
    assert_eq!(h.drop_entity(t, Some(5), false).unwrap().version, 5);
}

#[test]
fn a_restricted_drop_with_children_is_refused_and_leaves_the_state_alone() {
    let mut h = Harness::default();
    let (m, c, s) = tree(&mut h);
    h.create(Some(s), Table, "t1").unwrap();
    h.create(Some(s), Table, "t2").unwrap();
    let before = h.digest();
    let export = h.state().export_bytes();
    assert_eq!(h.drop_entity(s, None, false), Err(Refusal::HasChildren { id: s, children: 2 }.to_string()));
    assert_eq!(
        h.drop_entity(m, Some(1), false),
        Err(Refusal::HasChildren { id: m, children: 1 }.to_string())
    );
    assert_eq!(h.digest(), before);
    assert_eq!(h.state().export_bytes(), export);
    assert!(h.state().get(c).is_some());
}

#[test]
fn a_cascade_drop_removes_the_subtree_and_the_digest_equals_one_that_never_had_it() {
    let mut h = Harness::default();
    let m = h.create(None, Metalake, "lake").unwrap(); // 1
    let keep = h.create(Some(m), Cat, "keep").unwrap(); // 2
    let gone = h.create(Some(m), Cat, "gone").unwrap(); // 3
    let s = h.create(Some(gone), Schema, "s").unwrap(); // 4
    h.create(Some(s), Table, "t1").unwrap(); // 5
    h.create_with(Some(s), Table, "t2", b"p").unwrap(); // 6
    h.create(Some(gone), Schema, "s2").unwrap(); // 7
    let ks = h.create(Some(keep), Schema, "s").unwrap(); // 8
    h.update(ks, 1, b"q").unwrap(); // 9
    let r = h.drop_entity(gone, Some(1), true).unwrap(); // 10
    assert_eq!(r, Receipt { op: Op::Drop, id: gone, version: 1, removed: 5 });
    assert_eq!(h.state().len(), 3);
    assert!(h.state().lookup(Some(m), "gone").is_none());
    assert!((4..=7).all(|i| h.state().get(EntityId(i)).is_none()));

    // The same survivors at the same LSNs, never having had the subtree.
    let mut never = Harness::default();
    assert_eq!(never.create(None, Metalake, "lake").unwrap(), m);
    assert_eq!(never.create(Some(m), Cat, "keep").unwrap(), keep);
    never.skip_to(8);
    assert_eq!(never.create(Some(keep), Schema, "s").unwrap(), ks);
    never.update(ks, 1, b"q").unwrap();
    assert_eq!(h.digest(), never.digest());
    assert_eq!(h.a.checkpoint(), never.a.checkpoint());
    assert_eq!(h.state().export_bytes(), never.state().export_bytes());
    assert_eq!(h.state(), never.state(), "the name index holds nothing of the dropped subtree");
    // Dropping the last child: the parent is then droppable without cascade.
    h.drop_entity(ks, None, false).unwrap();
    h.drop_entity(keep, None, false).unwrap();
    h.drop_entity(m, None, false).unwrap();
    assert_eq!(h.digest(), SetDigest::EMPTY);
    assert_eq!(h.state(), &Catalog::new());
}

#[test]
fn a_kind_under_the_wrong_parent_kind_is_refused() {
    let mut h = Harness::default();
    let (m, c, s) = tree(&mut h);
    let t = h.create(Some(s), Table, "t").unwrap();
    let wrong = |h: &mut Harness, parent: Option<EntityId>, kind, parent_kind| {
        assert_eq!(
            h.create(parent, kind, "x"),
            Err(Refusal::WrongParentKind { kind, parent, parent_kind }.to_string()),
            "{kind} under {parent_kind:?}"
        );
    };
    wrong(&mut h, Some(m), Table, Some(Metalake));
    wrong(&mut h, Some(m), Schema, Some(Metalake));
    wrong(&mut h, Some(m), Metalake, Some(Metalake));
    wrong(&mut h, Some(c), Table, Some(Cat));
    wrong(&mut h, Some(s), Cat, Some(Schema));
    wrong(&mut h, Some(t), Table, Some(Table));
    wrong(&mut h, None, Cat, None);
    wrong(&mut h, None, Table, None);
    assert_eq!(h.state().len(), 4);
}

#[test]
fn undecodable_bodies_are_refused_deterministically() {
    let mut h = Harness::default();
    let before = h.state().clone();
    for body in
        [&b""[..], b"\x01", b"\x02\x01", b"\x01\x09", &[1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 255, 255, 255, 255]]
    {
        match h.apply_body(body) {
            Outcome::Refused(why) => assert!(why.starts_with("undecodable catalog command"), "{why}"),
            other => panic!("{body:?}: {other:?}"),
        }
    }
    assert_eq!(h.state(), &before);
}

#[test]
fn an_exhausted_version_counter_is_refused_not_wrapped() {
    // Only reachable through an import (no log holds 2^64 mutations of one entity).
    let e = catalog::Entity::new(EntityId(1), None, Metalake, u64::MAX, "m", &[]);
    let mut bytes = Catalog::new().export_bytes();
    bytes[16..24].copy_from_slice(&1u64.to_le_bytes());
    e.write_canonical(&mut bytes);
    let c = Catalog::import(&bytes).unwrap();
    let mut h = Harness { a: wal_state::Applier::new(c, 0), next: 2 };
    assert_eq!(
        h.update(EntityId(1), u64::MAX, b"x"),
        Err(Refusal::VersionExhausted { id: EntityId(1) }.to_string())
    );
    assert_eq!(h.state().get(EntityId(1)).unwrap().version, u64::MAX);
}
