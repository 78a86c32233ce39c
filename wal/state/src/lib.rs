//! The state layer over the log: the state-machine contract and the one apply seam
//! (docs/invariants.md I1, I2, I8), the state digest, replay-and-compare, snapshots, and the
//! commit pipeline ([`pipeline`]). It is built on the engine's public API alone (`wal` without
//! its workspace-only `internal` feature).
//!
//! A controller's authoritative state is a deterministic [`StateMachine`]. Entries reach it
//! through exactly one function, [`Applier::apply`], online (after commit) and on restart replay
//! alike, so the two paths cannot drift. The state machine keeps an order-independent digest of
//! its materialized entity set ([`SetDigest`], defined byte for byte in FORMAT.md section 10.2),
//! updated in O(1) per mutation; checkpoints record it in the log and [`Replayer`] compares a
//! replay against every checkpoint it meets. Snapshots ([`snapshot`]) are the state machine's
//! export at an LSN, with their own checksum and digest.

#![deny(missing_docs)]

mod apply;
mod compare;
mod digest;
mod envelope;
pub mod pipeline;
pub mod snapshot;

pub(crate) use apply::panic_message;
pub use apply::{Applied, Applier, DedupeRecord, Fate};
pub use compare::{CompareReport, Divergence, Replayer, CHECKPOINT_MAX_LAG};
pub use digest::{SetDigest, DIGEST_VERSION};
pub use envelope::{EntryKind, Envelope, ENVELOPE_LEN, ENVELOPE_VERSION};

use wal::{Epoch, Lsn};

/// The log metadata key under which the pipeline records its dedupe window (u64 LE), so every
/// replay of the log (a restart, `walcheck`) drops duplicates exactly as the online path did.
pub const DEDUPE_WINDOW_META_KEY: u32 = 0xC7A1_0001;

/// The dedupe window recorded in a log's metadata, if any (see [`DEDUPE_WINDOW_META_KEY`]).
pub fn recorded_dedupe_window(meta_value: Option<&[u8]>) -> Option<u64> {
    let v: [u8; 8] = meta_value?.try_into().ok()?;
    Some(u64::from_le_bytes(v))
}

/// One committed entry as the state machine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed<'a> {
    /// The entry's LSN (the Raft index in replicated mode).
    pub lsn: Lsn,
    /// The writer epoch it was logged under.
    pub epoch: Epoch,
    /// A command (someone waits for the outcome) or a fact (a reported event).
    pub kind: EntryKind,
    /// The caller's request id, if it gave one (0 on disk means none).
    pub request_id: Option<u64>,
    /// The state machine's own bytes.
    pub body: &'a [u8],
}

/// What applying one committed entry did. A refusal is a normal, deterministic outcome of the
/// domain ("name already exists"), not an error: the entry stays in the log and replays to the
/// same refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The entry was applied; the bytes are the state machine's result for the caller.
    Done(Vec<u8>),
    /// The domain said no; the state is unchanged.
    Refused(String),
}

impl Outcome {
    /// Whether this is [`Outcome::Refused`].
    pub fn is_refused(&self) -> bool {
        matches!(self, Outcome::Refused(_))
    }
}

/// A deterministic state machine (docs/invariants.md I2).
///
/// `apply` must depend only on the state and the entry: no clock, no randomness, no environment,
/// no iteration over unordered containers whose order can differ between runs. Anything
/// time-like travels inside the entry. A violation is what `walcheck` reports as DIVERGENT.
pub trait StateMachine: Send + 'static {
    /// The version of the apply semantics; recorded in every checkpoint and snapshot, so a
    /// verifier knows which apply function a log needs. Change it whenever `apply` changes
    /// what it does to any entry.
    const VERSION: u32;

    /// Applies one committed entry. Called only through [`Applier::apply`].
    fn apply(&mut self, entry: &Committed<'_>) -> Outcome;

    /// The running digest of the materialized entity set (O(1): kept up to date by `apply`).
    fn digest(&self) -> SetDigest;

    /// Writes the whole materialized state in a canonical form (the snapshot body).
    fn export(&self, out: &mut dyn std::io::Write) -> std::io::Result<()>;

    /// Rebuilds a state from `export`'s bytes. Bad bytes are an error naming what is wrong,
    /// never a panic; the snapshot reader compares the imported digest with the recorded one.
    fn import(input: &[u8]) -> Result<Self, String>
    where
        Self: Sized;
}
