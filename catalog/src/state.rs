//! The catalog state, its apply function and its export/import.

use crate::command::{Command, Op, Receipt, Refusal};
use crate::entity::{Entity, EntityId};
use crate::wire::Reader;
use std::collections::{BTreeMap, HashMap};
use wal::state::{Committed, Outcome, SetDigest, StateMachine};

/// The first bytes of an export.
pub const EXPORT_MAGIC: [u8; 8] = *b"\x89CWCAT\r\n";
/// The export layout version this build writes and reads.
pub const EXPORT_VERSION: u32 = 1;
/// Bytes before the first entity of an export.
pub const EXPORT_HEADER_LEN: usize = 24;

/// The parent key of the root in the name index.
const ROOT: u64 = 0;

/// The hierarchical entity catalog.
///
/// The entities are ordered (`BTreeMap` by id), and so is everything that reaches the state,
/// the digest or the export. The name index is derived from the entities and holds a map only
/// for parents that have children, so two catalogs with the same entities are equal field by
/// field. Its per-parent maps are hash maps (randomly seeded, so names cannot be chosen to
/// collide): they are only looked up, never iterated where order could matter, and
/// [`Catalog::children`] sorts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    entities: BTreeMap<u64, Entity>,
    /// parent id (0 = the root) → child name → child id.
    names: BTreeMap<u64, HashMap<Box<str>, u64>>,
    digest: SetDigest,
}

fn parent_key(parent: Option<EntityId>) -> u64 {
    parent.map_or(ROOT, |p| p.0)
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Catalog::default()
    }

    /// The entity with this id.
    pub fn get(&self, id: EntityId) -> Option<&Entity> {
        self.entities.get(&id.0)
    }

    /// The child of `parent` (`None`: the root) called `name`.
    pub fn lookup(&self, parent: Option<EntityId>, name: &str) -> Option<&Entity> {
        let id = self.names.get(&parent_key(parent))?.get(name)?;
        self.entities.get(id)
    }

    /// The children of `parent` (`None`: the metalakes), in name order.
    pub fn children(&self, parent: Option<EntityId>) -> impl Iterator<Item = &Entity> + '_ {
        let mut v: Vec<(&str, u64)> = self
            .names
            .get(&parent_key(parent))
            .into_iter()
            .flat_map(|m| m.iter().map(|(n, &id)| (&**n, id)))
            .collect();
        v.sort_unstable();
        v.into_iter().filter_map(|(_, id)| self.entities.get(&id))
    }

    /// How many children `parent` has (O(1)).
    pub fn child_count(&self, parent: Option<EntityId>) -> usize {
        self.names.get(&parent_key(parent)).map_or(0, |m| m.len())
    }

    /// Every entity, in id order.
    pub fn iter(&self) -> impl Iterator<Item = &Entity> + '_ {
        self.entities.values()
    }

    /// The number of entities.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// The digest computed from scratch over the entity set (O(n); the running one is
    /// [`StateMachine::digest`]). The two differ only if the running digest was kept wrong.
    pub fn recompute_digest(&self) -> SetDigest {
        let mut d = SetDigest::EMPTY;
        let mut buf = Vec::new();
        for e in self.entities.values() {
            buf.clear();
            e.write_canonical(&mut buf);
            d.insert(&buf);
        }
        d
    }

    fn digest_insert(&mut self, e: &Entity) {
        e.with_canonical_parts(|p| self.digest.insert_parts(p));
    }

    fn digest_remove(&mut self, e: &Entity) {
        e.with_canonical_parts(|p| self.digest.remove_parts(p));
    }

    /// The export as a new buffer.
    pub fn export_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_export(&mut out);
        out
    }

    fn write_export(&self, out: &mut Vec<u8>) {
        self.write_header(out);
        for e in self.entities.values() {
            e.write_canonical(out);
        }
    }

    fn write_header(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&EXPORT_MAGIC);
        out.extend_from_slice(&EXPORT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(self.entities.len() as u64).to_le_bytes());
    }

    /// Checks the catalog's own consistency: a round trip through export and import (which
    /// checks every rule) gives the same catalog, and the running digest equals one computed
    /// from scratch. For tests and `walcheck`; O(n log n).
    pub fn verify(&self) -> Result<(), String> {
        let again = Catalog::import_bytes(&self.export_bytes())?;
        if again.digest != self.digest {
            return Err("the running digest differs from one computed from the entities".into());
        }
        if again != *self {
            return Err("the name index does not match the entities".into());
        }
        Ok(())
    }

    /// The one place state changes: checks everything first, then mutates, so a refusal
    /// leaves the catalog as it was.
    fn execute(&mut self, lsn: u64, cmd: Command) -> Result<Receipt, Refusal> {
        match cmd {
            Command::Create { parent, kind, name, props } => {
                if lsn == 0 || self.entities.contains_key(&lsn) {
                    return Err(Refusal::IdUnavailable { lsn });
                }
                let parent_kind = match parent {
                    None => None,
                    Some(p) => Some(self.entities.get(&p.0).ok_or(Refusal::NoSuchParent { parent: p })?.kind),
                };
                if parent_kind != kind.parent_kind() {
                    return Err(Refusal::WrongParentKind { kind, parent, parent_kind });
                }
                let key = parent_key(parent);
                if let Some(&existing) = self.names.get(&key).and_then(|m| m.get(name.as_str())) {
                    return Err(Refusal::NameExists { parent, name, existing: EntityId(existing) });
                }
                let e = Entity { id: EntityId(lsn), parent, kind, version: 1, name, props };
                self.digest_insert(&e);
                self.names.entry(key).or_default().insert(e.name.as_str().into(), lsn);
                self.entities.insert(lsn, e);
                Ok(Receipt { op: Op::Create, id: EntityId(lsn), version: 1, removed: 0 })
            }
            Command::Rename { id, expected_version, new_name } => {
                let e = self.entities.get_mut(&id.0).ok_or(Refusal::NoSuchEntity { id })?;
                let next = next_version(e, expected_version)?;
                let key = parent_key(e.parent);
                let siblings = self.names.entry(key).or_default();
                match siblings.get(new_name.as_str()) {
                    Some(&other) if other != id.0 => {
                        return Err(Refusal::NameExists {
                            parent: e.parent,
                            name: new_name,
                            existing: EntityId(other),
                        });
                    }
                    _ => {}
                }
                e.with_canonical_parts(|p| self.digest.remove_parts(p));
                siblings.remove(e.name.as_str());
                siblings.insert(new_name.as_str().into(), id.0);
                e.name = new_name;
                e.version = next;
                e.with_canonical_parts(|p| self.digest.insert_parts(p));
                Ok(Receipt { op: Op::Rename, id, version: next, removed: 0 })
            }
            Command::Update { id, expected_version, props } => {
                let e = self.entities.get_mut(&id.0).ok_or(Refusal::NoSuchEntity { id })?;
                let next = next_version(e, expected_version)?;
                e.with_canonical_parts(|p| self.digest.remove_parts(p));
                e.props = props;
                e.version = next;
                e.with_canonical_parts(|p| self.digest.insert_parts(p));
                Ok(Receipt { op: Op::Update, id, version: next, removed: 0 })
            }
            Command::Drop { id, expected_version, cascade } => {
                let e = self.entities.get(&id.0).ok_or(Refusal::NoSuchEntity { id })?;
                if let Some(expected) = expected_version {
                    if expected != e.version {
                        return Err(Refusal::StaleVersion { id, expected, current: e.version });
                    }
                }
                let children = self.child_count(Some(id));
                if children > 0 && !cascade {
                    return Err(Refusal::HasChildren { id, children: children as u64 });
                }
                let (version, parent, name) = (e.version, e.parent, e.name.clone());
                // The subtree, breadth first: each entity's own name map lists its children.
                let mut doomed = vec![id.0];
                let mut i = 0;
                while let Some(&d) = doomed.get(i) {
                    if let Some(m) = self.names.get(&d) {
                        doomed.extend(m.values().copied());
                    }
                    i += 1;
                }
                for d in &doomed {
                    self.names.remove(d);
                    if let Some(gone) = self.entities.remove(d) {
                        self.digest_remove(&gone);
                    }
                }
                let key = parent_key(parent);
                if let Some(m) = self.names.get_mut(&key) {
                    m.remove(name.as_str());
                    if m.is_empty() {
                        self.names.remove(&key);
                    }
                }
                Ok(Receipt { op: Op::Drop, id, version, removed: doomed.len() as u64 })
            }
        }
    }

    /// Parses and checks an export (see the crate docs), rebuilding the digest.
    pub fn import_bytes(input_untrusted: &[u8]) -> Result<Catalog, String> {
        let mut r = Reader::new(input_untrusted);
        let magic = r.bytes(EXPORT_MAGIC.len(), "export magic")?;
        if magic != EXPORT_MAGIC {
            return Err("bad magic (not a catalog export)".into());
        }
        let version = r.u32("export version")?;
        if version != EXPORT_VERSION {
            return Err(format!("unknown catalog export version {version}"));
        }
        if r.u32("reserved")? != 0 {
            return Err("non-zero reserved export bytes".into());
        }
        let count = r.u64("entity count")?;
        let mut c = Catalog::new();
        // Each entity takes at least CANONICAL_FIXED_LEN bytes, so a huge count runs out of
        // input (an error) long before it costs anything.
        for _ in 0..count {
            let e = Entity::read_canonical(&mut r)?;
            if c.entities.last_key_value().is_some_and(|(&last, _)| last >= e.id.0) {
                return Err(format!("entity {} is out of id order", e.id));
            }
            let parent_kind = match e.parent {
                None => None,
                Some(p) => Some(
                    c.entities
                        .get(&p.0)
                        .ok_or_else(|| {
                            format!("entity {} names parent {p}, which does not precede it", e.id)
                        })?
                        .kind,
                ),
            };
            if parent_kind != e.kind.parent_kind() {
                return Err(format!(
                    "entity {}: {}",
                    e.id,
                    Refusal::WrongParentKind { kind: e.kind, parent: e.parent, parent_kind }
                ));
            }
            let siblings = c.names.entry(parent_key(e.parent)).or_default();
            if let Some(&other) = siblings.get(e.name.as_str()) {
                return Err(format!(
                    "entities {other} and {} have the same name {:?} under one parent",
                    e.id, e.name
                ));
            }
            siblings.insert(e.name.as_str().into(), e.id.0);
            c.digest_insert(&e);
            c.entities.insert(e.id.0, e);
        }
        r.finish("last entity")?;
        Ok(c)
    }
}

/// The version after a checked mutation of `e` at `expected`.
fn next_version(e: &Entity, expected: u64) -> Result<u64, Refusal> {
    if expected != e.version {
        return Err(Refusal::StaleVersion { id: e.id, expected, current: e.version });
    }
    e.version.checked_add(1).ok_or(Refusal::VersionExhausted { id: e.id })
}

impl StateMachine for Catalog {
    const VERSION: u32 = 1;

    fn apply(&mut self, entry: &Committed<'_>) -> Outcome {
        let cmd = match Command::decode(entry.body) {
            Ok(c) => c,
            Err(e) => return Outcome::Refused(Refusal::Undecodable(e).to_string()),
        };
        match self.execute(entry.lsn.0, cmd) {
            Ok(receipt) => Outcome::Done(receipt.encode()),
            Err(refusal) => Outcome::Refused(refusal.to_string()),
        }
    }

    fn digest(&self) -> SetDigest {
        self.digest
    }

    fn export(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(EXPORT_HEADER_LEN);
        self.write_header(&mut buf);
        out.write_all(&buf)?;
        for e in self.entities.values() {
            buf.clear();
            e.write_canonical(&mut buf);
            out.write_all(&buf)?;
        }
        Ok(())
    }

    fn import(input: &[u8]) -> Result<Self, String> {
        Catalog::import_bytes(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::EntityKind;

    fn entity(id: u64, parent: u64, kind: EntityKind, version: u64, name: &str, props: &[u8]) -> Entity {
        Entity {
            id: EntityId(id),
            parent: (parent != 0).then_some(EntityId(parent)),
            kind,
            version,
            name: name.into(),
            props: props.to_vec(),
        }
    }

    /// Pins the canonical form and the export layout documented in the crate root, written
    /// out byte by byte rather than through the encoder.
    #[test]
    fn canonical_form_and_export_are_as_documented() {
        let e = entity(7, 3, EntityKind::Schema, 2, "sé", b"\x00\x01\x02");
        let mut want = Vec::new();
        want.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        want.push(3);
        want.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[3, 0, 0, 0, b's', 0xc3, 0xa9]);
        want.extend_from_slice(&[3, 0, 0, 0, 0, 1, 2]);
        assert_eq!(e.canonical(), want);
        assert_eq!(want.len(), crate::CANONICAL_FIXED_LEN + 3 + 3);
        let root = entity(1, 0, EntityKind::Metalake, 1, "m", b"");
        assert_eq!(&root.canonical()[8..16], &[0; 8], "the root parent is 0");

        let mut c = Catalog::new();
        c.execute(
            1,
            Command::Create { parent: None, kind: EntityKind::Metalake, name: "m".into(), props: vec![] },
        )
        .unwrap();
        let x = c.export_bytes();
        assert_eq!(&x[..8], b"\x89CWCAT\r\n");
        assert_eq!(&x[8..24], &[1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&x[24..], &root.canonical()[..]);
        let mut d = SetDigest::EMPTY;
        d.insert(&root.canonical());
        assert_eq!(c.digest, d);
        let mut streamed = Vec::new();
        c.export(&mut streamed).unwrap();
        assert_eq!(streamed, x);
    }

    fn export_of(entities: &[Entity]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&EXPORT_MAGIC);
        out.extend_from_slice(&EXPORT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(entities.len() as u64).to_le_bytes());
        for e in entities {
            e.write_canonical(&mut out);
        }
        out
    }

    #[test]
    fn import_checks_every_rule_and_names_what_is_wrong() {
        use EntityKind::{Metalake, Schema, Table};
        let good = [
            entity(1, 0, Metalake, 1, "m", b""),
            entity(2, 1, EntityKind::Catalog, 3, "c", b"p"),
            entity(5, 2, Schema, 1, "s", b""),
            entity(9, 5, Table, 1, "t", b""),
            entity(10, 5, Table, 1, "u", b""),
        ];
        let c = Catalog::import_bytes(&export_of(&good)).unwrap();
        assert_eq!(c.export_bytes(), export_of(&good));
        assert_eq!(c.digest, c.recompute_digest());
        c.verify().unwrap();

        let refused = |entities: &[Entity], what: &str| {
            let err = Catalog::import_bytes(&export_of(entities)).unwrap_err();
            assert!(err.contains(what), "{what:?} not in {err:?}");
        };
        let mut v = good.to_vec();
        v.swap(3, 4);
        refused(&v, "out of id order");
        let mut v = good.to_vec();
        v[4].id = EntityId(9);
        refused(&v, "out of id order");
        let mut v = good.to_vec();
        v[3].parent = Some(EntityId(4));
        refused(&v, "does not precede it");
        let mut v = good.to_vec();
        v[1].parent = Some(EntityId(2));
        refused(&v, "does not precede it");
        let mut v = good.to_vec();
        v[3].parent = Some(EntityId(2));
        refused(&v, "wrong parent kind");
        let mut v = good.to_vec();
        v[0].parent = None;
        v[1].parent = None;
        refused(&v, "wrong parent kind");
        let mut v = good.to_vec();
        v[4].name = "t".into();
        refused(&v, "the same name");
        let mut v = good.to_vec();
        v[2].version = 0;
        refused(&v, "version 0");
        let mut v = good.to_vec();
        v[0].id = EntityId(0);
        refused(&v, "id 0");
        let mut v = good.to_vec();
        v[1].name = String::new();
        refused(&v, "empty name");

        let x = export_of(&good);
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = x.clone();
            f(&mut b);
            Catalog::import_bytes(&b).unwrap_err()
        };
        assert!(with(&|b| b[0] = b'X').contains("magic"));
        assert!(with(&|b| b[8] = 2).contains("export version"));
        assert!(with(&|b| b[13] = 1).contains("reserved"));
        assert!(with(&|b| b[16] = 6).contains("needed"));
        assert!(with(&|b| b[16] = 4).contains("trailing"));
        assert!(with(&|b| b.push(0)).contains("trailing"));
        assert!(with(&|b| b[24 + 16] = 9).contains("unknown kind"));
        assert!(with(&|b| b[16..24].copy_from_slice(&u64::MAX.to_le_bytes())).contains("needed"));
        for n in 0..x.len() {
            assert!(Catalog::import_bytes(&x[..n]).is_err(), "truncated to {n}");
        }
    }

    /// Refusals never touch the state (checked against a clone of it).
    #[test]
    fn a_refused_command_changes_nothing() {
        let mut c = Catalog::new();
        let create =
            |parent, kind, name: &str| Command::Create { parent, kind, name: name.into(), props: vec![] };
        c.execute(1, create(None, EntityKind::Metalake, "m")).unwrap();
        c.execute(2, create(Some(EntityId(1)), EntityKind::Catalog, "c")).unwrap();
        c.execute(3, create(Some(EntityId(1)), EntityKind::Catalog, "d")).unwrap();
        let before = c.clone();
        let bad = [
            (1, create(None, EntityKind::Metalake, "x")),
            (0, create(None, EntityKind::Metalake, "x")),
            (4, create(None, EntityKind::Metalake, "m")),
            (4, create(Some(EntityId(1)), EntityKind::Table, "x")),
            (4, Command::Rename { id: EntityId(2), expected_version: 1, new_name: "d".into() }),
            (4, Command::Rename { id: EntityId(2), expected_version: 2, new_name: "e".into() }),
            (4, Command::Update { id: EntityId(8), expected_version: 1, props: vec![1] }),
            (4, Command::Drop { id: EntityId(1), expected_version: None, cascade: false }),
            (4, Command::Drop { id: EntityId(1), expected_version: Some(2), cascade: true }),
        ];
        for (lsn, cmd) in bad {
            let why = c.execute(lsn, cmd.clone()).unwrap_err();
            assert_eq!(c, before, "{cmd:?} refused with {why} but changed the state");
        }
        assert_eq!(
            c.execute(1, create(None, EntityKind::Metalake, "x")).unwrap_err(),
            Refusal::IdUnavailable { lsn: 1 }
        );
    }
}
