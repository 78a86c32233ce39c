//! What every connection task of a node's port shares (`node/server/`), and what a membership
//! change (`node/membership.rs`) and the metrics (`node/prometheus.rs`) read: its own module,
//! so that each of them depends on it and none on another.

use crate::net::stream::{Security, Stream};
use crate::net::transport::Partition;
use crate::node::{stall, RaftNode};
use std::sync::Arc;
use std::time::Duration;

/// What every connection task shares.
#[derive(Debug)]
pub struct Ctx {
    pub raft: RaftNode,
    pub id: u64,
    pub partition: Partition,
    pub allow_faults: bool,
    pub write_timeout: Duration,
    /// The leader lease (openraft's: `election_timeout_max`): a leader no majority acknowledged
    /// for this long answers its waiting writes at once ([`stall`]).
    pub lease: Duration,
    /// When a leader's message last arrived, and how long a silence means a stalled leader
    /// ([`stall::silence`]): a follower does not forward to a silent leader.
    pub contact: stall::Contact,
    pub leader_silence: Duration,
    /// The log writer's counters; `None` on another log store ([`super::start_on`]).
    pub io_stats: Option<crate::IoStatsHandle>,
    /// The largest frame this node reads or writes (`NodeConfig::max_frame_bytes`).
    pub max_frame: usize,
    /// Idle connections to other nodes' ports, for forwarded writes, by the node each was
    /// opened to (and verified as) and its address: a connection to one node is never used
    /// for another that took its address.
    pub forward_pool: tokio::sync::Mutex<std::collections::HashMap<(u64, String), Vec<Stream>>>,
    /// How connections are secured, accepted and opened (`net/stream.rs`).
    pub security: Security,
    /// Digest claims (`node/claims.rs`) and this node's fence.
    pub claims: Arc<crate::node::claims::Claims>,
    /// Claim indexes are its multiples (`NodeConfig::checkpoint_every`): more than the voters.
    pub checkpoint_every: u64,
    /// Held through a membership change: one at a time on this leader (`node/membership.rs`).
    pub membership_lock: tokio::sync::Mutex<()>,
}
