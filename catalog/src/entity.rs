//! Entities, their kinds and their canonical byte form (documented in the crate root).

use crate::wire::{put_len_bytes, Reader};
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entity {
    pub id: EntityId,
    /// The parent's id; `None` for a metalake (the root).
    pub parent: Option<EntityId>,
    pub kind: EntityKind,
    /// 1 at creation; every rename and update adds one.
    pub version: u64,
    pub name: String,
    /// Opaque properties (the catalog never interprets them).
    pub props: Vec<u8>,
}

impl Entity {
    /// Appends the canonical form (crate docs): the bytes the digest hashes and the export
    /// stores.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.0.to_le_bytes());
        out.extend_from_slice(&self.parent.map_or(0, |p| p.0).to_le_bytes());
        out.push(self.kind.code());
        out.extend_from_slice(&self.version.to_le_bytes());
        put_len_bytes(out, self.name.as_bytes());
        put_len_bytes(out, &self.props);
    }

    /// Runs `f` with the canonical form as consecutive parts (no allocation): the digest
    /// hashes them as one byte string.
    pub fn with_canonical_parts<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let mut head = [0u8; 33];
        head[0..8].copy_from_slice(&self.id.0.to_le_bytes());
        head[8..16].copy_from_slice(&self.parent.map_or(0, |p| p.0).to_le_bytes());
        head[16] = self.kind.code();
        head[17..25].copy_from_slice(&self.version.to_le_bytes());
        head[25..29].copy_from_slice(&(self.name.len() as u32).to_le_bytes());
        head[29..33].copy_from_slice(&(self.props.len() as u32).to_le_bytes());
        f(&[&head[..29], self.name.as_bytes(), &head[29..33], &self.props])
    }

    /// The canonical form as a new buffer.
    pub fn canonical(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(CANONICAL_FIXED_LEN + self.name.len() + self.props.len());
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
        Ok(Entity { id: EntityId(id), parent, kind, version, name, props })
    }
}

/// Bytes of the canonical form besides the name and the properties.
pub const CANONICAL_FIXED_LEN: usize = 8 + 8 + 1 + 8 + 4 + 4;
