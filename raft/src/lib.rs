//! openraft log storage and state machine over the write-ahead log and its one apply seam
//! (issue 9, milestone 1).
//!
//! - [`LogStore`] / [`LogReader`] implement openraft's `RaftLogStorage` / `RaftLogReader`
//!   (0.10.0-alpha.37, pinned exactly) over the engine's writer thread, [`wal::AsyncWal`]
//!   (the log is created with `first_lsn` 0, as openraft's first index is 0; an entry's LSN is
//!   its Raft index). Votes, the committed log id and the purged log id are metadata records in
//!   the same log, carried into every new segment's state record, so purging segments never
//!   loses them. Truncation and reset are the log's own crash-safe records (replay drops what
//!   they cut); a purge is a metadata record first, then whole sealed segments are removed.
//!   Every write goes through the writer's one queue, which group-commits with one fdatasync in
//!   flight while the next batch is written: an append returns once queued (a read after it
//!   sees it, written but not durable), and its `IOFlushed` callback fires only after the
//!   fdatasync that covers it completed. `save_vote`, `truncate_after` and `purge` return only
//!   once durable; `save_committed` is a restart hint, durable with the next sync.
//! - [`StateMachineStore`] implements `RaftStateMachine` over [`wal_state::Applier`] with the
//!   reference [`catalog::Catalog`]: the same apply function the log's replay and `walcheck`
//!   use. Snapshots are the seam's snapshot encoding (the catalog's export), installed through
//!   its import, kept with their Raft metadata (last log id and membership) in one durable file.
//!
//! ```
//! use openraft::storage::{RaftLogReader, RaftLogStorage};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let mut log = wal_raft::LogStore::open(dir.path(), wal_raft::log_options(64 << 10)).unwrap();
//! let vote = wal_raft::Vote::new(1, 1);
//! log.save_vote(&vote).await.unwrap(); // durable when it returns
//! log.close().unwrap();
//! let mut log = wal_raft::LogStore::open(dir.path(), wal_raft::log_options(64 << 10)).unwrap();
//! assert_eq!(log.read_vote().await.unwrap(), Some(vote));
//! # });
//! ```
//!
//! - [`LogStore::open_verified`] replays the log after the snapshot through the same apply
//!   function and compares the checkpoints the state machine recorded
//!   ([`StateMachineStore::with_checkpoints`]) and the digests a majority of the voters claimed
//!   ([`claims`]): CLEAN or DIVERGENT; [`start_role`] refuses to start a DIVERGENT node (it
//!   must not vote or lead), saying why.
//! - [`claims`]: the replicas compare their state digests while they run. At every claim index
//!   each voter's digest goes into the replicated log as a claim entry; a node whose digest a
//!   majority of the voters contradicts fences itself ([`fence`]).
//!
//! The node (binary `walraft-node`, [`node`], [`net`], [`client`]) and the offline checks
//! ([`check`]) are described in the README's replication section.

pub mod certs;
pub mod check;
pub mod claims;
pub mod client;
pub mod codec;
mod durable;
pub mod fence;
mod log_store;
pub mod net;
pub mod node;
mod state_machine;
mod verify;

pub use claims::Claim;
pub use codec::{
    decode_entry, encode_entry, COMMITTED_META_KEY, ENTRY_ENCODING_VERSION, PURGED_META_KEY, VOTE_META_KEY,
};
pub use log_store::{bounds, log_options, Checkpointer, IoStats, IoStatsHandle, LogReader, LogStore};
pub use state_machine::{
    ClaimConfig, SnapshotBuilder, SnapshotData, StateMachineStore, DEDUPE_WINDOW, SNAPSHOT_FILE,
};
pub use verify::{start_role, StartRole, StateVerdict};

use serde::{Deserialize, Serialize};

/// The writer epoch of every record a node writes into its log: fencing of stale leaders is
/// Raft's vote, not the log's epoch. One constant for the log store, the checkpoints and the
/// claims' replay.
pub(crate) const EPOCH: wal::Epoch = wal::Epoch(0);

/// Application data of a normal Raft entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// The apply seam's entry bytes (the 16-byte envelope of FORMAT.md 10.1 followed by the
    /// state machine's command).
    Command(Vec<u8>),
    /// A node's digest claim ([`claims`]): compared by every node, applied to no state.
    Claim(Claim),
}

impl Request {
    /// A catalog command as a Raft request (a command entry, with an optional request id).
    pub fn command(cmd: &catalog::Command, request_id: Option<u64>) -> Request {
        Request::Command(wal_state::Envelope::encode(
            wal_state::EntryKind::Command,
            request_id,
            &cmd.encode(),
        ))
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Command(b) => write!(f, "request of {} bytes", b.len()),
            Request::Claim(c) => write!(f, "node {}'s digest claim after index {}", c.node, c.index),
        }
    }
}

/// What applying an entry gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The state machine applied it; its result bytes (a catalog `Receipt`).
    Done(Vec<u8>),
    /// The domain refused it (deterministic; the entry stays in the log).
    Refused(String),
    /// Its request id was applied at `first_index` within the dedupe window: a no-op.
    Duplicate { first_index: u64 },
    /// The apply seam refused the bytes (not a valid envelope): a no-op on every replay.
    Invalid(String),
    /// A blank entry (a new leader's) was applied.
    Blank,
    /// A membership entry was applied.
    Membership,
    /// A digest claim was counted (it changes no state).
    Claim,
}

openraft::declare_raft_types!(
    /// The Raft types of a catalog replicated over this log.
    pub TypeConfig:
        D = Request,
        R = Response,
);

/// Aliases of openraft's types for [`TypeConfig`].
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type Membership = openraft::Membership<u64, openraft::BasicNode>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
