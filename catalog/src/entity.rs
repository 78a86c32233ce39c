//! Entities, their kinds and their canonical byte form (documented in the crate root).

use crate::wire::Reader;
use std::fmt;

/// A stable entity id: the LSN of the entry that created the entity. Ids are never reused
/// (LSNs of applied entries only grow) and are never 0 (0 stands for the root in encodings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityId(pub u64);

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The fixed hierarchy: a metalake at the root, a catalog under a metalake, a schema under a
/// catalog, a table under a schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum EntityKind {
    Metalake = 1,
    Catalog = 2,
    Schema = 3,
    Table = 4,
}

impl EntityKind {
    pub const ALL: [EntityKind; 4] =
        [EntityKind::Metalake, EntityKind::Catalog, EntityKind::Schema, EntityKind::Table];

    /// The kind an entity of this kind must live under (`None`: the root).
    pub fn parent_kind(self) -> Option<EntityKind> {
        match self {
            EntityKind::Metalake => None,
            EntityKind::Catalog => Some(EntityKind::Metalake),
            EntityKind::Schema => Some(EntityKind::Catalog),
            EntityKind::Table => Some(EntityKind::Schema),
        }
    }

    /// The kind that lives under this one (`None` for a table, which has no children).
    pub fn child_kind(self) -> Option<EntityKind> {
        match self {
            EntityKind::Metalake => Some(EntityKind::Catalog),
            EntityKind::Catalog => Some(EntityKind::Schema),
            EntityKind::Schema => Some(EntityKind::Table),
            EntityKind::Table => None,
        }
    }

    /// The kind's byte in encodings.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<EntityKind> {
        match code {
            1 => Some(EntityKind::Metalake),
            2 => Some(EntityKind::Catalog),
            3 => Some(EntityKind::Schema),
            4 => Some(EntityKind::Table),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Metalake => "metalake",
            EntityKind::Catalog => "catalog",
            EntityKind::Schema => "schema",
            EntityKind::Table => "table",
        }
    }
}

impl fmt::Display for EntityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entity of the catalog.
///
/// The name and the properties share one heap allocation (the name's bytes, then the
/// properties'): a replay builds millions of entities, and each allocation is paid again when
/// the state is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Entity {
    pub id: EntityId,
    /// The parent's id; `None` for a metalake (the root).
    pub parent: Option<EntityId>,
    pub kind: EntityKind,
    /// 1 at creation; every rename and update adds one.
    pub version: u64,
    /// Bytes of `text` that are the name.
    name_len: u32,
    /// The name (UTF-8), then the opaque properties (the catalog never interprets them).
    text: Box<[u8]>,
}

impl fmt::Debug for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entity")
            .field("id", &self.id)
            .field("parent", &self.parent)
            .field("kind", &self.kind)
            .field("version", &self.version)
            .field("name", &self.name())
            .field("props", &self.props())
            .finish()
    }
}

impl Entity {
    /// An entity with these fields. The caller checks the name (see [`crate::check_name`]);
    /// a name or properties longer than `u32::MAX` bytes cannot be represented and panics.
    pub fn new(
        id: EntityId,
        parent: Option<EntityId>,
        kind: EntityKind,
        version: u64,
        name: &str,
        props: &[u8],
    ) -> Entity {
        let name_len = u32::try_from(name.len()).expect("a name shorter than 4 GiB");
        let mut text = Vec::with_capacity(name.len() + props.len());
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(props);
        Entity { id, parent, kind, version, name_len, text: text.into_boxed_slice() }
    }

    /// The name.
    pub fn name(&self) -> &str {
        // Only `new` and `set_name` write the name, both from a `&str`.
        std::str::from_utf8(self.name_bytes()).unwrap_or_default()
    }

    /// The name's bytes.
    pub(crate) fn name_bytes(&self) -> &[u8] {
        &self.text[..self.name_len as usize]
    }

    /// The properties.
    pub fn props(&self) -> &[u8] {
        &self.text[self.name_len as usize..]
    }

    /// Replaces the name, keeping the properties.
    pub fn set_name(&mut self, name: &str) {
        *self = Entity::new(self.id, self.parent, self.kind, self.version, name, self.props());
    }

    /// Replaces the properties, keeping the name.
    pub fn set_props(&mut self, props: &[u8]) {
        *self = Entity::new(self.id, self.parent, self.kind, self.version, self.name(), props);
    }

    /// Appends the canonical form (crate docs): the bytes the digest hashes and the export
    /// stores.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        self.with_canonical_parts(|parts| parts.iter().for_each(|p| out.extend_from_slice(p)));
    }

    /// Runs `f` with the canonical form as consecutive parts (no allocation): the digest
    /// hashes them as one byte string.
    pub fn with_canonical_parts<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let mut head = [0u8; 33];
        head[0..8].copy_from_slice(&self.id.0.to_le_bytes());
        head[8..16].copy_from_slice(&self.parent.map_or(0, |p| p.0).to_le_bytes());
        head[16] = self.kind.code();
        head[17..25].copy_from_slice(&self.version.to_le_bytes());
        head[25..29].copy_from_slice(&self.name_len.to_le_bytes());
        let props = self.props();
        head[29..33].copy_from_slice(&(props.len() as u32).to_le_bytes());
        f(&[&head[..29], self.name_bytes(), &head[29..33], props])
    }

    /// The canonical form as a new buffer.
    pub fn canonical(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(CANONICAL_FIXED_LEN + self.text.len());
        self.write_canonical(&mut v);
        v
    }

    /// Reads one canonical form, checking each field on its own (id and version non-zero, a
    /// known kind, a valid name, bounded properties); relations to other entities are the
    /// caller's to check.
    pub(crate) fn read_canonical(r: &mut Reader<'_>) -> Result<Entity, String> {
        let at = r.at();
        let id = r.u64("entity id")?;
        let parent = r.u64("parent id")?;
        let code = r.u8("entity kind")?;
        let version = r.u64("entity version")?;
        let name = r.name()?;
        let props = r.props()?;
        if id == 0 {
            return Err(format!("entity at offset {at} has id 0"));
        }
        let kind =
            EntityKind::from_code(code).ok_or_else(|| format!("entity {id} has unknown kind {code}"))?;
        if version == 0 {
            return Err(format!("entity {id} has version 0"));
        }
        let parent = (parent != 0).then_some(EntityId(parent));
        Ok(Entity::new(EntityId(id), parent, kind, version, name, props))
    }
}

/// Bytes of the canonical form besides the name and the properties.
pub const CANONICAL_FIXED_LEN: usize = 8 + 8 + 1 + 8 + 4 + 4;
