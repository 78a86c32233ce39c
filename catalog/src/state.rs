//! The catalog state, its apply function and its export/import.

use crate::command::{CommandRef, Op, Receipt, Refusal};
use crate::entity::{Entity, EntityId};
use crate::wire::Reader;
use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use wal_state::{Committed, Outcome, SetDigest, StateMachine};

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
/// the digest or the export. The name index is derived from the entities and holds a table only
/// for parents that have children; it stores each child's id and name hash, never a second copy
/// of the name (a replay builds millions of entities: each copy would be one more allocation
/// to make and to free). Names are hashed with a randomly seeded hasher, so they cannot be
/// chosen to collide, and the tables are only looked up, never iterated where order could
/// matter: [`Catalog::children`] sorts. Two catalogs with the same entities are equal
/// (`PartialEq` compares the index by content, not by hash values).
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    entities: BTreeMap<u64, Entity>,
    /// parent id (0 = the root) → its children.
    names: HashMap<u64, Children>,
    digest: SetDigest,
    hasher: DefaultHashBuilder,
}

/// One parent's children as `(name hash, id)`; a lookup compares the entity's own name.
#[derive(Clone, Debug, Default)]
struct Children(HashTable<(u64, u64)>);

impl Children {
    fn find(&self, entities: &BTreeMap<u64, Entity>, hash: u64, name: &str) -> Option<u64> {
        let hit = |&(h, id): &(u64, u64)| h == hash && entities.get(&id).is_some_and(|e| e.name() == name);
        self.0.find(hash, hit).map(|&(_, id)| id)
    }

    fn insert(&mut self, hash: u64, id: u64) {
        self.0.insert_unique(hash, (hash, id), |&(h, _)| h);
    }

    fn remove(&mut self, hash: u64, id: u64) {
        if let Ok(entry) = self.0.find_entry(hash, |&(h, i)| h == hash && i == id) {
            entry.remove();
        }
    }

    fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|&(_, id)| id)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl PartialEq for Catalog {
    fn eq(&self, other: &Catalog) -> bool {
        self.entities == other.entities
            && self.digest == other.digest
            && self.index_is_within(other)
            && other.index_is_within(self)
    }
}

impl Eq for Catalog {}

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
        let id = self.child_named(parent_key(parent), name)?;
        self.entities.get(&id)
    }

    fn child_named(&self, parent: u64, name: &str) -> Option<u64> {
        self.names.get(&parent)?.find(&self.entities, self.name_hash(name.as_bytes()), name)
    }

    /// The children of `parent` (`None`: the metalakes), in name order.
    pub fn children(&self, parent: Option<EntityId>) -> impl Iterator<Item = &Entity> + '_ {
        let mut v: Vec<&Entity> = self
            .names
            .get(&parent_key(parent))
            .into_iter()
            .flat_map(|c| c.ids())
            .filter_map(|id| self.entities.get(&id))
            .collect();
        v.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        v.into_iter()
    }

    /// Every entry of this catalog's name index names an entity of this catalog under that
    /// parent, with the hash of its name, and `other`'s index holds the same entry.
    fn index_is_within(&self, other: &Catalog) -> bool {
        self.names.len() == other.names.len()
            && self.names.iter().all(|(&parent, children)| {
                let Some(theirs) = other.names.get(&parent) else { return false };
                theirs.len() == children.len()
                    && children.0.iter().all(|&(hash, id)| {
                        self.entities.get(&id).is_some_and(|e| {
                            parent_key(e.parent) == parent
                                && self.name_hash(e.name_bytes()) == hash
                                && theirs.find(&other.entities, other.name_hash(e.name_bytes()), e.name())
                                    == Some(id)
                        })
                    })
            })
    }

    /// The index hash of a name (of its bytes: the entity's name needs no UTF-8 check to be
    /// hashed).
    fn name_hash(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// Adds `e` to its parent's name index.
    fn index_insert(&mut self, e: &Entity) {
        let hash = self.name_hash(e.name_bytes());
        self.names.entry(parent_key(e.parent)).or_default().insert(hash, e.id.0);
    }

    /// Removes `id` (its name hashing to `hash`) from the name index of `key`, and that
    /// parent's table when it empties.
    fn index_remove(&mut self, key: u64, hash: u64, id: u64) {
        if let Some(children) = self.names.get_mut(&key) {
            children.remove(hash, id);
            if children.len() == 0 {
                self.names.remove(&key);
            }
        }
    }

    /// How many children `parent` has (O(1)).
    pub fn child_count(&self, parent: Option<EntityId>) -> usize {
        self.names.get(&parent_key(parent)).map_or(0, Children::len)
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
    fn execute(&mut self, lsn: u64, cmd: CommandRef<'_>) -> Result<Receipt, Refusal> {
        match cmd {
            CommandRef::Create { parent, kind, name, props } => {
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
                if let Some(existing) = self.child_named(parent_key(parent), name) {
                    return Err(Refusal::NameExists {
                        parent,
                        name: name.into(),
                        existing: EntityId(existing),
                    });
                }
                let e = Entity::new(EntityId(lsn), parent, kind, 1, name, props);
                self.digest_insert(&e);
                self.index_insert(&e);
                self.entities.insert(lsn, e);
                Ok(Receipt { op: Op::Create, id: EntityId(lsn), version: 1, removed: 0 })
            }
            CommandRef::Rename { id, expected_version, new_name } => {
                let e = self.entities.get(&id.0).ok_or(Refusal::NoSuchEntity { id })?;
                let next = next_version(e, expected_version)?;
                match self.child_named(parent_key(e.parent), new_name) {
                    // Mutant (tools/mutants.sh, I9): a rename may take a sibling's name.
                    Some(other) if other != id.0 && !wal::mutants::on("rename-skips-name-check") => {
                        return Err(Refusal::NameExists {
                            parent: e.parent,
                            name: new_name.into(),
                            existing: EntityId(other),
                        });
                    }
                    _ => {}
                }
                let key = parent_key(e.parent);
                let (old_hash, new_hash) =
                    (self.name_hash(e.name_bytes()), self.name_hash(new_name.as_bytes()));
                let e = self.entities.get_mut(&id.0).ok_or(Refusal::NoSuchEntity { id })?;
                e.with_canonical_parts(|p| self.digest.remove_parts(p));
                e.set_name(new_name);
                e.version = next;
                e.with_canonical_parts(|p| self.digest.insert_parts(p));
                let siblings = self.names.entry(key).or_default();
                siblings.remove(old_hash, id.0);
                siblings.insert(new_hash, id.0);
                Ok(Receipt { op: Op::Rename, id, version: next, removed: 0 })
            }
            CommandRef::Update { id, expected_version, props } => {
                let e = self.entities.get_mut(&id.0).ok_or(Refusal::NoSuchEntity { id })?;
                let next = next_version(e, expected_version)?;
                e.with_canonical_parts(|p| self.digest.remove_parts(p));
                e.set_props(props);
                e.version = next;
                e.with_canonical_parts(|p| self.digest.insert_parts(p));
                Ok(Receipt { op: Op::Update, id, version: next, removed: 0 })
            }
            CommandRef::Drop { id, expected_version, cascade } => {
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
                let (version, key, hash) = (e.version, parent_key(e.parent), self.name_hash(e.name_bytes()));
                // The subtree, breadth first: each entity's own table lists its children.
                let mut doomed = vec![id.0];
                let mut i = 0;
                while let Some(&d) = doomed.get(i) {
                    if let Some(c) = self.names.get(&d) {
                        doomed.extend(c.ids());
                    }
                    i += 1;
                }
                self.index_remove(key, hash, id.0);
                for d in &doomed {
                    self.names.remove(d);
                    if let Some(gone) = self.entities.remove(d) {
                        self.digest_remove(&gone);
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
            if let Some(other) = c.child_named(parent_key(e.parent), e.name()) {
                return Err(format!(
                    "entities {other} and {} have the same name {:?} under one parent",
                    e.id,
                    e.name()
                ));
            }
            c.index_insert(&e);
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
    // Mutant (tools/mutants.sh, I9): a mutation keeps the entity's version (ABA).
    if wal::mutants::on("version-not-advanced") {
        return Ok(e.version);
    }
    e.version.checked_add(1).ok_or(Refusal::VersionExhausted { id: e.id })
}

impl StateMachine for Catalog {
    const VERSION: u32 = 1;

    fn apply(&mut self, entry: &Committed<'_>) -> Outcome {
        let cmd = match CommandRef::decode(entry.body) {
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
    use crate::command::Command;
    use crate::entity::EntityKind;

    impl Catalog {
        fn run(&mut self, lsn: u64, cmd: Command) -> Result<Receipt, Refusal> {
            let bytes = cmd.encode();
            self.execute(lsn, CommandRef::decode(&bytes).unwrap())
        }
    }

    fn entity(id: u64, parent: u64, kind: EntityKind, version: u64, name: &str, props: &[u8]) -> Entity {
        Entity::new(EntityId(id), (parent != 0).then_some(EntityId(parent)), kind, version, name, props)
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
        c.run(
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
        v[4].set_name("t");
        refused(&v, "the same name");
        let mut v = good.to_vec();
        v[2].version = 0;
        refused(&v, "version 0");
        let mut v = good.to_vec();
        v[0].id = EntityId(0);
        refused(&v, "id 0");
        let mut v = good.to_vec();
        v[1].set_name("");
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
        c.run(1, create(None, EntityKind::Metalake, "m")).unwrap();
        c.run(2, create(Some(EntityId(1)), EntityKind::Catalog, "c")).unwrap();
        c.run(3, create(Some(EntityId(1)), EntityKind::Catalog, "d")).unwrap();
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
            let why = c.run(lsn, cmd.clone()).unwrap_err();
            assert_eq!(c, before, "{cmd:?} refused with {why} but changed the state");
        }
        assert_eq!(
            c.run(1, create(None, EntityKind::Metalake, "x")).unwrap_err(),
            Refusal::IdUnavailable { lsn: 1 }
        );
    }
}
