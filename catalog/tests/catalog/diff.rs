//! The entity diff names the entities in which two states differ, and how.

use crate::common::Harness;
use catalog::{diff, diff_exports, Difference, EntityId, EntityKind};
use wal_state::StateMachine;

#[test]
fn the_diff_lists_the_first_n_differences_in_id_order_with_what_differs() {
    let mut a = Harness::default();
    let mut b = Harness::default();
    for h in [&mut a, &mut b] {
        let m = h.create(None, EntityKind::Metalake, "m").unwrap(); // 1
        let c = h.create(Some(m), EntityKind::Catalog, "c").unwrap(); // 2
        h.create(Some(c), EntityKind::Schema, "s").unwrap(); // 3
        h.create(Some(c), EntityKind::Schema, "same").unwrap(); // 4
    }
    assert!(diff(a.state(), b.state(), 10).is_empty());
    assert_eq!(diff_exports(&a.state().export_bytes(), &b.state().export_bytes(), 10).unwrap().total, 0);

    a.rename(EntityId(3), 1, "s2").unwrap(); // 5 on a
    b.update(EntityId(3), 1, b"pp").unwrap(); // 5 on b
    a.update(EntityId(2), 1, b"x").unwrap(); // 6 on a
    b.drop_entity(EntityId(4), None, false).unwrap(); // 6 on b
    b.create(None, EntityKind::Metalake, "extra").unwrap(); // 7 on b

    let r = diff(a.state(), b.state(), 10);
    assert_eq!(r.total, 4);
    let ids: Vec<u64> = r.first.iter().map(|d| d.id.0).collect();
    assert_eq!(ids, vec![2, 3, 4, 7]);
    let lines: Vec<String> = r.first.iter().map(|d| d.to_string()).collect();
    assert_eq!(lines[0], "entity 2: version 2 vs 1, props differ (1 vs 0 bytes)");
    assert_eq!(lines[1], "entity 3: name \"s2\" vs \"s\", props differ (0 vs 2 bytes)");
    assert_eq!(lines[2], "entity 4: only on the left (schema \"same\" v1 under 2)");
    assert_eq!(lines[3], "entity 7: only on the right (metalake \"extra\" v1 under the root)");
    assert!(
        matches!(&r.first[1].difference, Difference::Changed { left, right } if left.version == 2 && right.version == 2)
    );

    // The limit caps the list, not the count; the diff is antisymmetric.
    let r2 = diff(a.state(), b.state(), 2);
    assert_eq!((r2.total, r2.first.len()), (4, 2));
    assert_eq!(r2.first[..], r.first[..2]);
    let back = diff(b.state(), a.state(), 10);
    assert!(matches!(back.first[2].difference, Difference::OnlyRight(_)));
    assert_eq!(diff_exports(&a.state().export_bytes(), &b.state().export_bytes(), 10).unwrap(), r);
    // Same digest iff no difference.
    assert_ne!(a.state().digest(), b.state().digest());
}

#[test]
fn a_bad_export_is_named_by_side() {
    let good = Harness::default().state().export_bytes();
    assert!(diff_exports(&good, b"nope", 1).unwrap_err().starts_with("the right export"));
    assert!(diff_exports(b"", &good, 1).unwrap_err().starts_with("the left export"));
}
