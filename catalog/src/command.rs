//! Commands (the state machine's entry bodies), receipts (what `Outcome::Done` carries) and
//! refusals (what `Outcome::Refused` says). The byte layouts are in the crate docs.

use crate::entity::{EntityId, EntityKind};
use crate::wire::{put_len_bytes, Reader};
use std::fmt;

/// The command encoding version this build writes and reads.
pub const COMMAND_VERSION: u8 = 1;
/// The receipt encoding version this build writes and reads.
pub const RECEIPT_VERSION: u8 = 1;
/// Bytes in an encoded [`Receipt`].
pub const RECEIPT_LEN: usize = 26;

const OP_CREATE: u8 = 1;
const OP_RENAME: u8 = 2;
const OP_UPDATE: u8 = 3;
const OP_DROP: u8 = 4;

const DROP_CASCADE: u8 = 1;
const DROP_HAS_EXPECTED: u8 = 2;

/// One catalog command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Creates an entity; its id will be the LSN of this entry.
    Create { parent: Option<EntityId>, kind: EntityKind, name: String, props: Vec<u8> },
    /// Renames an entity within its parent, if it is still at `expected_version`.
    Rename { id: EntityId, expected_version: u64, new_name: String },
    /// Replaces an entity's properties, if it is still at `expected_version`.
    Update { id: EntityId, expected_version: u64, props: Vec<u8> },
    /// Removes an entity (at `expected_version`, when given). Without `cascade` an entity that
    /// has children is refused; with it, the whole subtree goes.
    Drop { id: EntityId, expected_version: Option<u64>, cascade: bool },
}

/// The operation a command or receipt is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Rename,
    Update,
    Drop,
}

impl Op {
    fn code(self) -> u8 {
        match self {
            Op::Create => OP_CREATE,
            Op::Rename => OP_RENAME,
            Op::Update => OP_UPDATE,
            Op::Drop => OP_DROP,
        }
    }

    fn from_code(code: u8) -> Option<Op> {
        match code {
            OP_CREATE => Some(Op::Create),
            OP_RENAME => Some(Op::Rename),
            OP_UPDATE => Some(Op::Update),
            OP_DROP => Some(Op::Drop),
            _ => None,
        }
    }
}

impl Command {
    pub fn op(&self) -> Op {
        match self {
            Command::Create { .. } => Op::Create,
            Command::Rename { .. } => Op::Rename,
            Command::Update { .. } => Op::Update,
            Command::Drop { .. } => Op::Drop,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(COMMAND_VERSION);
        out.push(self.op().code());
        match self {
            Command::Create { parent, kind, name, props } => {
                out.extend_from_slice(&parent.map_or(0, |p| p.0).to_le_bytes());
                out.push(kind.code());
                put_len_bytes(out, name.as_bytes());
                put_len_bytes(out, props);
            }
            Command::Rename { id, expected_version, new_name } => {
                out.extend_from_slice(&id.0.to_le_bytes());
                out.extend_from_slice(&expected_version.to_le_bytes());
                put_len_bytes(out, new_name.as_bytes());
            }
            Command::Update { id, expected_version, props } => {
                out.extend_from_slice(&id.0.to_le_bytes());
                out.extend_from_slice(&expected_version.to_le_bytes());
                put_len_bytes(out, props);
            }
            Command::Drop { id, expected_version, cascade } => {
                out.extend_from_slice(&id.0.to_le_bytes());
                let mut flags = 0;
                if *cascade {
                    flags |= DROP_CASCADE;
                }
                if expected_version.is_some() {
                    flags |= DROP_HAS_EXPECTED;
                }
                out.push(flags);
                out.extend_from_slice(&expected_version.unwrap_or(0).to_le_bytes());
            }
        }
    }

    /// The encoding as a new buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode_into(&mut v);
        v
    }

    /// Decodes a command. Every byte must be used; an unknown version, operation, kind or flag,
    /// a bad name or an oversized field is an error naming it. Never panics, and allocates at
    /// most the input's length.
    pub fn decode(bytes_untrusted: &[u8]) -> Result<Command, String> {
        CommandRef::decode(bytes_untrusted).map(|c| c.to_owned())
    }
}

/// A decoded command that borrows its name and properties from the entry: what apply works
/// from, so that a replay allocates only what the state keeps. [`Command::decode`] is this
/// decoder plus copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommandRef<'a> {
    Create { parent: Option<EntityId>, kind: EntityKind, name: &'a str, props: &'a [u8] },
    Rename { id: EntityId, expected_version: u64, new_name: &'a str },
    Update { id: EntityId, expected_version: u64, props: &'a [u8] },
    Drop { id: EntityId, expected_version: Option<u64>, cascade: bool },
}

impl<'a> CommandRef<'a> {
    /// See [`Command::decode`].
    pub(crate) fn decode(bytes_untrusted: &'a [u8]) -> Result<CommandRef<'a>, String> {
        let mut r = Reader::new(bytes_untrusted);
        let version = r.u8("command version")?;
        if version != COMMAND_VERSION {
            return Err(format!("unknown command version {version}"));
        }
        let code = r.u8("operation")?;
        let op = Op::from_code(code).ok_or_else(|| format!("unknown operation {code}"))?;
        let cmd = match op {
            Op::Create => {
                let parent = r.u64("parent id")?;
                let code = r.u8("entity kind")?;
                let kind =
                    EntityKind::from_code(code).ok_or_else(|| format!("unknown entity kind {code}"))?;
                let name = r.name()?;
                let props = r.props()?;
                CommandRef::Create { parent: (parent != 0).then_some(EntityId(parent)), kind, name, props }
            }
            Op::Rename => {
                let id = EntityId(r.u64("entity id")?);
                let expected_version = r.u64("expected version")?;
                let new_name = r.name()?;
                CommandRef::Rename { id, expected_version, new_name }
            }
            Op::Update => {
                let id = EntityId(r.u64("entity id")?);
                let expected_version = r.u64("expected version")?;
                let props = r.props()?;
                CommandRef::Update { id, expected_version, props }
            }
            Op::Drop => {
                let id = EntityId(r.u64("entity id")?);
                let flags = r.u8("drop flags")?;
                if flags & !(DROP_CASCADE | DROP_HAS_EXPECTED) != 0 {
                    return Err(format!("unknown drop flags {flags:#04x}"));
                }
                let expected = r.u64("expected version")?;
                if flags & DROP_HAS_EXPECTED == 0 && expected != 0 {
                    return Err("an expected version without its flag".into());
                }
                let expected_version = (flags & DROP_HAS_EXPECTED != 0).then_some(expected);
                CommandRef::Drop { id, expected_version, cascade: flags & DROP_CASCADE != 0 }
            }
        };
        r.finish("command")?;
        Ok(cmd)
    }

    /// The owned command.
    pub(crate) fn to_owned(self) -> Command {
        match self {
            CommandRef::Create { parent, kind, name, props } => {
                Command::Create { parent, kind, name: name.to_string(), props: props.to_vec() }
            }
            CommandRef::Rename { id, expected_version, new_name } => {
                Command::Rename { id, expected_version, new_name: new_name.to_string() }
            }
            CommandRef::Update { id, expected_version, props } => {
                Command::Update { id, expected_version, props: props.to_vec() }
            }
            CommandRef::Drop { id, expected_version, cascade } => {
                Command::Drop { id, expected_version, cascade }
            }
        }
    }
}

/// What an applied command did: the bytes of `Outcome::Done`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub op: Op,
    /// The entity created, renamed, updated or dropped.
    pub id: EntityId,
    /// Its version now (for a drop, the version it had when it was dropped).
    pub version: u64,
    /// Entities removed (a drop: the entity and its descendants; otherwise 0).
    pub removed: u64,
}

impl Receipt {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(RECEIPT_LEN);
        v.push(RECEIPT_VERSION);
        v.push(self.op.code());
        v.extend_from_slice(&self.id.0.to_le_bytes());
        v.extend_from_slice(&self.version.to_le_bytes());
        v.extend_from_slice(&self.removed.to_le_bytes());
        v
    }

    pub fn decode(bytes_untrusted: &[u8]) -> Result<Receipt, String> {
        let mut r = Reader::new(bytes_untrusted);
        let version = r.u8("receipt version")?;
        if version != RECEIPT_VERSION {
            return Err(format!("unknown receipt version {version}"));
        }
        let code = r.u8("operation")?;
        let op = Op::from_code(code).ok_or_else(|| format!("unknown operation {code}"))?;
        let id = EntityId(r.u64("entity id")?);
        let version = r.u64("version")?;
        let removed = r.u64("removed")?;
        r.finish("receipt")?;
        Ok(Receipt { op, id, version, removed })
    }
}

/// Why the catalog refused a command. `Outcome::Refused` carries its `Display` text; the
/// refusal is deterministic (the same log refuses the same entries with the same words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The body is not a command this version understands.
    Undecodable(String),
    /// A create cannot take its LSN as the new id (LSN 0, or an id already in use: only possible
    /// when entries reach the catalog outside the apply seam's LSN order).
    IdUnavailable { lsn: u64 },
    /// The parent named by a create does not exist (never created, or dropped).
    NoSuchParent { parent: EntityId },
    /// The entity a rename, update or drop names does not exist (never created, or dropped).
    NoSuchEntity { id: EntityId },
    /// The kind cannot live under that parent (`parent_kind` `None`: the root).
    WrongParentKind { kind: EntityKind, parent: Option<EntityId>, parent_kind: Option<EntityKind> },
    /// Another entity under the same parent already has the name.
    NameExists { parent: Option<EntityId>, name: String, existing: EntityId },
    /// Optimistic concurrency: the entity moved on since the caller read it.
    StaleVersion { id: EntityId, expected: u64, current: u64 },
    /// A restricted drop of an entity that still has children.
    HasChildren { id: EntityId, children: u64 },
    /// The entity's version counter cannot advance any more.
    VersionExhausted { id: EntityId },
}

fn under(parent: &Option<EntityId>) -> String {
    match parent {
        Some(p) => format!("entity {p}"),
        None => "the root".into(),
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Undecodable(e) => write!(f, "undecodable catalog command: {e}"),
            Refusal::IdUnavailable { lsn } => write!(f, "LSN {lsn} cannot be a new entity id"),
            Refusal::NoSuchParent { parent } => {
                write!(f, "no such parent: entity {parent} does not exist (never created, or dropped)")
            }
            Refusal::NoSuchEntity { id } => {
                write!(f, "no such entity: {id} does not exist (never created, or dropped)")
            }
            Refusal::WrongParentKind { kind, parent, parent_kind } => {
                let want = kind.parent_kind().map_or("the root".to_string(), |k| format!("a {k}"));
                let got = match parent_kind {
                    Some(k) => format!("{} (a {k})", under(parent)),
                    None => "the root".into(),
                };
                write!(f, "wrong parent kind: a {kind} must be under {want}, not under {got}")
            }
            Refusal::NameExists { parent, name, existing } => {
                write!(f, "name exists: {name:?} under {} is entity {existing}", under(parent))
            }
            Refusal::StaleVersion { id, expected, current } => {
                write!(f, "stale version: entity {id} is at version {current}, expected {expected}")
            }
            Refusal::HasChildren { id, children } => {
                write!(
                    f,
                    "has children: entity {id} has {children} children (drop with cascade to remove them)"
                )
            }
            Refusal::VersionExhausted { id } => write!(f, "entity {id} cannot take another version"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Command> {
        vec![
            Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] },
            Command::Create {
                parent: Some(EntityId(7)),
                kind: EntityKind::Table,
                name: "tåble".into(),
                props: b"k=v".to_vec(),
            },
            Command::Rename { id: EntityId(3), expected_version: 9, new_name: "x".into() },
            Command::Update { id: EntityId(u64::MAX), expected_version: 1, props: vec![0; 300] },
            Command::Drop { id: EntityId(5), expected_version: None, cascade: false },
            Command::Drop { id: EntityId(5), expected_version: Some(0), cascade: true },
        ]
    }

    #[test]
    fn commands_round_trip_and_every_truncation_or_extension_is_refused() {
        for c in samples() {
            let b = c.encode();
            assert_eq!(Command::decode(&b).unwrap(), c);
            for n in 0..b.len() {
                assert!(Command::decode(&b[..n]).is_err(), "{c:?} truncated to {n}");
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Command::decode(&long).unwrap_err().contains("trailing"), "{c:?}");
        }
    }

    /// Pins the layout in the crate docs.
    #[test]
    fn command_layout_is_as_documented() {
        let c = Command::Create {
            parent: Some(EntityId(2)),
            kind: EntityKind::Catalog,
            name: "ab".into(),
            props: vec![9],
        };
        let want =
            [&[1u8, 1][..], &2u64.to_le_bytes(), &[2], &2u32.to_le_bytes(), b"ab", &1u32.to_le_bytes(), &[9]]
                .concat();
        assert_eq!(c.encode(), want);
        let d = Command::Drop { id: EntityId(4), expected_version: Some(3), cascade: true };
        assert_eq!(d.encode(), [&[1u8, 4][..], &4u64.to_le_bytes(), &[3], &3u64.to_le_bytes()].concat());
    }

    #[test]
    fn bad_fields_are_named() {
        let ok = samples()[0].encode();
        let mut b = ok.clone();
        b[0] = 2;
        assert!(Command::decode(&b).unwrap_err().contains("version"));
        let mut b = ok.clone();
        b[1] = 9;
        assert!(Command::decode(&b).unwrap_err().contains("operation"));
        let mut b = ok.clone();
        b[10] = 5;
        assert!(Command::decode(&b).unwrap_err().contains("kind"));
        let empty =
            Command::Create { parent: None, kind: EntityKind::Metalake, name: String::new(), props: vec![] };
        assert!(Command::decode(&empty.encode()).unwrap_err().contains("empty"));
        let ctl = Command::Rename { id: EntityId(1), expected_version: 1, new_name: "a\0b".into() };
        assert!(Command::decode(&ctl.encode()).unwrap_err().contains("control"));
        let long = Command::Rename { id: EntityId(1), expected_version: 1, new_name: "n".repeat(256) };
        assert!(Command::decode(&long.encode()).unwrap_err().contains("exceeds"));
        let mut not_utf8 =
            Command::Rename { id: EntityId(1), expected_version: 1, new_name: "ab".into() }.encode();
        let n = not_utf8.len();
        not_utf8[n - 1] = 0xff;
        assert!(Command::decode(&not_utf8).unwrap_err().contains("UTF-8"));
        // A huge declared length is an error before anything is allocated.
        let mut huge = samples()[3].encode();
        huge[18..22].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Command::decode(&huge).unwrap_err().contains("exceeds"));
        let mut drop = samples()[4].encode();
        drop[10] = 0x80;
        assert!(Command::decode(&drop).unwrap_err().contains("flags"));
        let mut drop = samples()[4].encode();
        drop[11] = 1;
        assert!(Command::decode(&drop).unwrap_err().contains("without its flag"));
    }

    #[test]
    fn receipts_round_trip() {
        let r = Receipt { op: Op::Drop, id: EntityId(12), version: 4, removed: 3 };
        let b = r.encode();
        assert_eq!(b.len(), RECEIPT_LEN);
        assert_eq!(Receipt::decode(&b).unwrap(), r);
        assert!(Receipt::decode(&b[..RECEIPT_LEN - 1]).is_err());
        let mut bad = b;
        bad[1] = 0;
        assert!(Receipt::decode(&bad).is_err());
    }
}
