//! The write-ahead log's on-disk format, with no I/O and no threads: what the engine writes and
//! recovers with, and what the verifier and the fuzz targets read. `FORMAT.md` at the repository
//! root describes every byte; this crate is its executable form.
//!
//! - [`format`](mod@format): the layout (segment and record headers, record kinds, fixed payloads).
//! - [`crc`]: a record's two checksums, computed together.
//! - [`batch`]: encoding a batch (sequence numbers, chain links, checksums in one pass).
//! - [`scan`]: the walker, which decodes records from bytes and checks every rule.
//! - [`stale`]: the stale table of a recycled segment (which old contents count as blank).
//! - [`classify`]: the recovery decision table (torn tail, corrupt tail, corrupt), as data.
//! - [`damage`]: the verdict vocabulary those produce (what, where, which verdict).
//!
//! The engine (`wal`) is the crate a controller depends on; it re-exports the verdict types.

pub mod batch;
pub mod classify;
pub mod crc;
pub mod damage;
pub mod format;
#[doc(hidden)]
pub mod mutants;
pub mod scan;
pub mod stale;

pub use damage::{CrcVerdict, Damage, DamageKind};
