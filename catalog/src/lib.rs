//! The reference state machine: a hierarchical entity catalog (the metadata a catalog server
//! keeps), applied through `wal`'s one apply seam ([`wal_state::Applier`]).
//!
//! ```
//! use catalog::{Catalog, Command, EntityKind, Receipt};
//! use wal_state::{Applied, Applier, EntryKind, Envelope, Outcome};
//! use wal::{Epoch, Lsn};
//!
//! let mut seam = Applier::new(Catalog::new(), 0);
//! let create = Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] };
//! let entry = Envelope::encode(EntryKind::Command, None, &create.encode());
//! // After the entry at LSN 7 is committed:
//! let Applied::Outcome(Outcome::Done(bytes)) = seam.apply(Lsn(7), Epoch(0), &entry).unwrap() else {
//!     unreachable!()
//! };
//! let receipt = Receipt::decode(&bytes).unwrap();
//! assert_eq!((receipt.id.0, receipt.version), (7, 1)); // the id is the LSN
//! assert_eq!(seam.state().lookup(None, "lake").unwrap().id, receipt.id);
//! // The same create again: refused, deterministically, state unchanged.
//! let again = seam.apply(Lsn(8), Epoch(0), &entry).unwrap();
//! assert!(matches!(again, Applied::Outcome(Outcome::Refused(why)) if why.starts_with("name exists")));
//! ```
//!
//! # Model
//!
//! Entities form a fixed hierarchy: a **metalake** at the root, a **catalog** under a metalake,
//! a **schema** under a catalog, a **table** under a schema. Each entity has a stable
//! [`EntityId`], its parent's id, a kind, a version, a name and opaque properties.
//!
//! * **Ids come from the log.** A created entity's id is the LSN of the entry that created it,
//!   so replay gives the same ids, and ids are never reused: the seam applies LSNs in strictly
//!   increasing order, and a dropped entity's LSN is behind every later one. A parent is always
//!   older than its children, so a parent's id is smaller than each child's. LSN 0 cannot
//!   create (0 stands for the root in encodings): a log that starts at LSN 0 gets that one
//!   create refused.
//! * **Versions never repeat.** A create gives version 1; every rename and update adds one. The
//!   counter lives in the entity and the entity's id is never reused, so an `(id, version)` pair
//!   names one state forever: an update against a stale version is refused even when the
//!   properties have since gone back to what the caller saw (no ABA).
//!
//! # Rules, checked at apply time in log order (docs/invariants.md I9)
//!
//! | command | refused when |
//! |---|---|
//! | `Create` | the parent does not exist (never created, or dropped: a create naming the id of a dropped parent stays refused after a new parent is created under the same name, because the new one has a new id); the kind does not belong under the parent's kind; a sibling has the name |
//! | `Rename` | no such entity; stale expected version; a sibling has the new name (of two renames to one name, the first in the log wins). A rename to the entity's own name is accepted and, like every accepted rename and update, advances the version |
//! | `Update` | no such entity; stale expected version |
//! | `Drop` | no such entity; stale expected version (when one is given); without `cascade`, the entity has children |
//!
//! A refusal is `Outcome::Refused` with the text of a [`Refusal`] and leaves the state
//! untouched; bytes that do not decode as a command are refused the same way. Commands and facts
//! (the envelope's entry kind) are applied alike. The catalog keeps no tombstones (they would
//! grow without bound and belong in the digest), so "never created" and "dropped" are one
//! refusal; what makes a dropped parent unusable is that its id is never given out again.
//!
//! # Encodings (all integers little-endian)
//!
//! A **name** is a u32 length and that many bytes of UTF-8: 1 to [`MAX_NAME_LEN`] bytes, no
//! control characters. **Properties** are a u32 length (at most [`MAX_PROPS_LEN`]) and that many
//! opaque bytes. A decoder uses every byte; anything left over is an error.
//!
//! **Command** (an entry body, [`Command`]), command version [`COMMAND_VERSION`] = 1:
//!
//! ```text
//! 0  u8   command version = 1
//! 1  u8   operation: 1 create, 2 rename, 3 update, 4 drop
//! create: parent id u64 (0 = the root) ‖ kind u8 ‖ name ‖ properties
//! rename: entity id u64 ‖ expected version u64 ‖ new name
//! update: entity id u64 ‖ expected version u64 ‖ properties
//! drop:   entity id u64 ‖ flags u8 (bit 0 cascade, bit 1 an expected version is given,
//!         other bits zero) ‖ expected version u64 (0 when bit 1 is clear)
//! ```
//!
//! Entity kinds: 1 metalake, 2 catalog, 3 schema, 4 table.
//!
//! **Receipt** (the bytes of `Outcome::Done`, [`Receipt`]), [`RECEIPT_LEN`] = 26 bytes:
//! receipt version u8 = 1 ‖ operation u8 ‖ entity id u64 ‖ version u64 (the new one; for a
//! drop, the one it had) ‖ removed u64 (a drop: the entity and its descendants; otherwise 0).
//!
//! ## Canonical entity form
//!
//! The bytes the state digest hashes (FORMAT.md section 10.2: `h(e)` is taken over exactly
//! these bytes) and the export stores, [`Entity::canonical`]:
//!
//! ```text
//! 0   u64  id (≥ 1)
//! 8   u64  parent id (0 = the root: a metalake)
//! 16  u8   kind: 1 metalake, 2 catalog, 3 schema, 4 table
//! 17  u64  version (≥ 1)
//! 25  u32  name length n, then n bytes of UTF-8
//! …   u32  properties length p, then p bytes
//! ```
//!
//! That is `33 + n + p` bytes ([`CANONICAL_FIXED_LEN`] + n + p). The state is exactly the
//! entity set (there are no tombstones or counters outside the entities), so equal digests mean
//! equal states up to the strength of the set hash. A create inserts one form into the
//! [`SetDigest`], a rename or an update replaces one, a drop removes one per removed entity.
//!
//! ## Export (the snapshot body)
//!
//! ```text
//! 0   [8]  magic 89 43 57 43 41 54 0D 0A ("\x89CWCAT\r\n")
//! 8   u32  export version = 1
//! 12  u32  reserved, zero
//! 16  u64  entity count
//! 24  each entity's canonical form, in increasing id order
//! ```
//!
//! `Catalog::import` ([`Catalog::import_bytes`]) checks everything and rebuilds the
//! digest from the forms it reads: magic, version, zero bytes, ids strictly increasing, every
//! field as above, every parent already read (so parents precede children, as ids guarantee),
//! the kind hierarchy, names unique under each parent, the count, and no trailing bytes.
//!
//! # Queries and diff
//!
//! [`Catalog::get`], [`Catalog::lookup`] (by parent and name), [`Catalog::children`],
//! [`Catalog::len`], [`Catalog::iter`] (id order), [`Catalog::verify`] (self-consistency), and
//! [`diff`] / [`diff_exports`]: the first N entities in which two states differ and how, for
//! saying where a digest disagrees.
//!
//! [`SetDigest`]: wal_state::SetDigest

mod command;
mod diff;
mod entity;
mod state;
pub mod test_support;
mod wire;

pub use command::{Command, Op, Receipt, Refusal, COMMAND_VERSION, RECEIPT_LEN, RECEIPT_VERSION};
pub use diff::{changed_fields, diff, diff_exports, DiffReport, Difference, EntityDiff};
pub use entity::{Entity, EntityId, EntityKind, CANONICAL_FIXED_LEN};
pub use state::{Catalog, EXPORT_HEADER_LEN, EXPORT_MAGIC, EXPORT_VERSION};
pub use wire::check_name;

/// The longest name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// The largest properties value, in bytes.
pub const MAX_PROPS_LEN: usize = 1 << 20;
