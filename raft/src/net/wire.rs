//! The messages a node's TCP port understands, and their replies. One port serves three
//! audiences: peers (Raft RPCs, digest claims), clients (catalog writes) and operators/tests
//! (metrics, lookups, the test-only partition switch and state alteration). Each request gets
//! exactly one reply frame: its answer, or [`Reply::TooLarge`] when the request's frame was
//! longer than the node's limit (the node did not read it: [`crate::net::frame`]).
//!
//! There is no protocol version: every node and client must run builds that agree on these
//! messages (a write's command moved from the JSON to the frame's tail with the frame-limit
//! answers, so older and newer builds do not understand each other's writes).

use crate::net::append::AppendHead;
use crate::{Response, SnapshotMeta, TypeConfig, Vote};
use openraft::raft::{AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use serde::{Deserialize, Serialize};

/// A request on a node's port.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Raft: replicate entries (or a heartbeat); the entries are the frame's raw tail
    /// ([`crate::net::append`]).
    AppendEntries(AppendHead),
    /// Raft: a vote request.
    Vote(VoteRequest<TypeConfig>),
    /// Raft: a pre-vote (no term change on the receiver).
    PreVote(VoteRequest<TypeConfig>),
    /// Raft: bytes `offset..` of a snapshot of `total` bytes, as the frame's raw tail
    /// ([`crate::net::chunks`]); answered `Chunk` until the last, then `Snapshot`.
    SnapshotChunk { vote: Vote, meta: SnapshotMeta, offset: u64, total: u64 },
    /// Client: a catalog command, as the frame's raw tail in the catalog's own encoding (not
    /// in the JSON, where bytes would be an array of numbers), with the client's request id
    /// (the same id on every retry of one logical write: the apply seam applies it once).
    /// `forwarded`: sent by a follower on its client's behalf; never forwarded again (a node
    /// that is not the leader answers it with a redirect), and dropped by the partition switch
    /// like Raft traffic, since it travels between nodes. How large a command may be:
    /// [`crate::net::limit`].
    Write {
        request_id: u64,
        #[serde(default)]
        forwarded: bool,
    },
    /// Admin: this node's view (role, term, leader, applied index and the digest there).
    Metrics,
    /// Admin: an entity by parent and name in this node's applied state.
    Lookup { parent: Option<u64>, name: String },
    /// Admin, tests only (`--allow-faults`): drop all Raft traffic in and out while on.
    Partition { on: bool },
    /// Between nodes: a follower's digest claim (`crate::claims`), for the leader to propose.
    Claim(crate::Claim),
    /// Admin, tests only (`--allow-faults`): apply a catalog command (its encoding) to this
    /// node's state in memory only, bypassing the log: the divergence the digest claims must
    /// catch.
    AlterState { command: Vec<u8> },
    /// Admin: change the cluster's membership (`crate::node::membership`). Only the leader
    /// does it; another node answers where the leader is.
    Membership(MembershipChange),
    /// Raft, first on every connection a node opens to a peer: which node is calling and which
    /// node it means to reach. A node answers `Hello(Err)` and closes the connection when it is
    /// not `to`, and serves Raft messages only on a connection that said hello to it: a wrong
    /// address (a typo in `add-learner`, a stale address book, a port another node took over)
    /// reaches no node under an id that is not its own.
    Hello { from: u64, to: u64 },
    /// First on every connection a client (or a node forwarding a write or a claim) opens,
    /// before any request: answered with the node's id. A refused certificate shows here, not
    /// as the failure of a write that was already sent (`net/stream.rs`).
    Greet,
}

/// A change of the cluster's membership an operator asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    /// Start replicating to a new node as a learner (it does not vote); answered once it has
    /// caught up with the leader's log (by snapshot if the leader purged what it needs).
    AddLearner { id: u64, addr: String },
    /// Make learners voters (a joint-consensus change).
    Promote { ids: Vec<u64> },
    /// Remove voters or learners from the cluster.
    Remove { ids: Vec<u64> },
    /// A member now listens at `addr` (it was restarted there with its data directory).
    SetAddress { id: u64, addr: String },
}

/// Why a membership change did not complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipFailure {
    /// Refused before anything was proposed: nothing changed.
    Refused(String),
    /// Proposed, then it failed or was not seen to complete: part of it may have been made
    /// (`client status` shows the membership now).
    Indeterminate(String),
}

impl std::fmt::Display for MembershipFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MembershipFailure::Refused(w) => write!(f, "REFUSED (nothing changed): {w}"),
            MembershipFailure::Indeterminate(w) => {
                write!(f, "INDETERMINATE (part of the change may have been made; see `client status`): {w}")
            }
        }
    }
}

/// The membership after a change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipView {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Every member's address.
    pub nodes: std::collections::BTreeMap<u64, String>,
    /// The log index of the membership entry that made it.
    pub index: Option<u64>,
}

impl Msg {
    /// The Raft messages a node serves only on a connection that said [`Msg::Hello`] to it.
    pub fn needs_hello(&self) -> bool {
        matches!(self, Msg::AppendEntries(_) | Msg::Vote(_) | Msg::PreVote(_) | Msg::SnapshotChunk { .. })
    }

    /// The node a Raft message says sent it: the leader of an append-entries or a snapshot
    /// chunk, the candidate of a vote or pre-vote (whose vote is its own). A node serves such a
    /// message only on a connection whose hello came from that same node (`node/server/connection.rs`):
    /// a certificate proves who said hello, and this binds what it sends afterwards to it.
    pub fn raft_sender(&self) -> Option<u64> {
        use openraft::vote::RaftLeaderId;
        match self {
            Msg::AppendEntries(h) => Some(*h.vote.leader_id().node_id()),
            Msg::Vote(v) | Msg::PreVote(v) => Some(*v.vote.leader_id().node_id()),
            Msg::SnapshotChunk { vote, .. } => Some(*vote.leader_id().node_id()),
            _ => None,
        }
    }

    /// Traffic between nodes (Raft, and writes forwarded to the leader), which the partition
    /// switch drops.
    pub fn is_raft(&self) -> bool {
        matches!(
            self,
            Msg::AppendEntries(_)
                | Msg::Hello { .. }
                | Msg::Vote(_)
                | Msg::PreVote(_)
                | Msg::SnapshotChunk { .. }
                | Msg::Write { forwarded: true, .. }
                | Msg::Claim(_)
        )
    }
}

/// The reply to a [`Msg`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    AppendEntries(Result<AppendEntriesResponse<TypeConfig>, String>),
    Vote(Result<VoteResponse<TypeConfig>, String>),
    Snapshot(Result<SnapshotResponse<TypeConfig>, String>),
    /// A snapshot chunk was received: the bytes received so far.
    Chunk(Result<u64, String>),
    Write(WriteReply),
    /// Boxed: by far the largest reply, and a rare one.
    Metrics(Box<NodeMetrics>),
    Lookup(Option<EntityView>),
    Partition(Result<bool, String>),
    /// A claim was proposed (not yet committed), or why not.
    Claim(Result<(), String>),
    /// The state was altered; the last index applied then.
    Altered(Result<Option<u64>, String>),
    /// The membership after the change, or why not.
    Membership(Result<MembershipView, MembershipFailure>),
    /// The answer to [`Msg::Hello`]: this node is the one meant, or who it is instead.
    Hello(Result<(), String>),
    /// The answer to [`Msg::Greet`]: which node this is.
    Greet {
        node: u64,
    },
    /// The connection was refused before any of it was read (a plaintext peer at a TLS node, a
    /// non-loopback peer at a plaintext node, a certificate naming no role): nothing was done.
    /// The node closes the connection after it.
    Refused(String),
    /// The request could not be served at all (with why).
    Error(String),
    /// The request's frame was longer than this node's limit: it was not read (its body was
    /// skipped), so nothing it asked for was done. For a write: never appended.
    TooLarge(crate::net::frame::TooLarge),
}

/// What became of a client's write (docs/invariants.md I1's two failure kinds, plus routing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteReply {
    /// Committed by a majority and applied at `index`: acknowledged. `outcome` is the apply
    /// seam's answer (a receipt, a domain refusal, or a duplicate of an earlier index).
    Committed { index: u64, outcome: Response },
    /// This node is not the leader; the leader it knows of.
    Redirect { leader: u64, addr: String },
    /// Never appended to any log, so it can never apply (not a valid command, no leader known,
    /// or the leader's lease is not established or has expired). `retry`: worth retrying.
    Rejected { why: String, retry: bool },
    /// Appended, or possibly appended, but not known to be committed (a timeout, the entry
    /// discarded by a leader change, the node stopping): its fate is decided by the log.
    /// Retrying with the same request id is safe.
    Indeterminate { why: String },
}

/// A node's view, for tests and operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetrics {
    pub id: u64,
    /// Leader, Follower, Candidate, Learner or Shutdown.
    pub state: String,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
    pub committed: Option<u64>,
    /// The state machine's last applied index, and the digest and entity count there (read
    /// together, under the state machine).
    pub last_applied: Option<u64>,
    pub digest: String,
    pub entities: u64,
    pub snapshot: Option<u64>,
    pub purged: Option<u64>,
    /// The partition switch.
    pub partitioned: bool,
    /// openraft's core stopped (a fatal error); the node is no longer part of the cluster.
    pub fatal: Option<String>,
    /// This node fenced itself: its digest at a claim index differs from the one a majority of
    /// the voters claimed (why, with the index and the digests). It no longer votes or serves.
    #[serde(default)]
    pub fenced: Option<String>,
    /// The digest claims this node made, sent, proposed and saw confirmed (`crate::claims`).
    #[serde(default)]
    pub claims: crate::claims::ClaimCounters,
    /// The Raft log's writer counters since this process opened it (fdatasyncs and what they
    /// covered).
    #[serde(default)]
    pub io: crate::IoStats,
    /// The voters and learners of the membership this node follows.
    #[serde(default)]
    pub voters: Vec<u64>,
    #[serde(default)]
    pub learners: Vec<u64>,
    /// A leader: how long ago a majority last acknowledged it (`None`: not a leader, or never
    /// acknowledged since it was elected: a lone node that cannot reach a quorum).
    #[serde(default)]
    pub quorum_ack_ms: Option<u64>,
    /// The leader lease: a leader acknowledged within it may serve (`quorum_ack_ms` below it).
    #[serde(default)]
    pub lease_ms: u64,
    /// A leader: per follower or learner, how many entries of this leader's log it has yet to
    /// take (`None`: nothing matched yet).
    #[serde(default)]
    pub lag: std::collections::BTreeMap<u64, Option<u64>>,
}

impl NodeMetrics {
    /// Whether this node is a leader that a majority acknowledged within its lease: one that
    /// can commit. A node that says Leader but holds no lease (a lone restarted node, or one
    /// cut off from the others) cannot.
    pub fn lease_held(&self) -> bool {
        self.state == "Leader" && self.quorum_ack_ms.is_some_and(|ms| ms < self.lease_ms)
    }

    /// One line for an operator: role, term, leader, lease and quorum, indexes, lag, and what
    /// the digest claims last verified.
    pub fn status(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let mut s = format!(
            "node {} {} term {} leader {} committed {} applied {}",
            self.id,
            self.state,
            self.term,
            opt(self.leader),
            opt(self.committed),
            opt(self.last_applied)
        );
        if self.state == "Leader" {
            match self.quorum_ack_ms {
                Some(ms) if self.lease_held() => {
                    s += &format!(" quorum acked {ms} ms ago (lease {} ms held)", self.lease_ms)
                }
                Some(ms) => {
                    s += &format!(
                        " NO QUORUM: last acknowledged {ms} ms ago (lease {} ms lapsed; cannot commit)",
                        self.lease_ms
                    )
                }
                None => s += " NO QUORUM: no majority has acknowledged this leader (cannot commit)",
            }
            let lag: Vec<String> = self.lag.iter().map(|(id, l)| format!("{id}:{}", opt(*l))).collect();
            s += &format!(" lag [{}]", lag.join(" "));
        }
        s += &format!(" digest verified through {}", opt(self.claims.verified_through));
        if let Some(why) = &self.fenced {
            s += &format!(" FENCED: {why}");
        }
        if let Some(why) = &self.fatal {
            s += &format!(" STOPPED: {why}");
        }
        s
    }
}

/// An entity as a lookup shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityView {
    pub id: u64,
    pub parent: Option<u64>,
    pub kind: String,
    pub name: String,
    pub version: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::append::{encode, max_entry_data, WRAP};
    use crate::net::frame::frame_len;
    use crate::{Entry, LogId, Request};
    use openraft::entry::RaftEntry;
    use openraft::raft::AppendEntriesRequest;
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;

    /// The bound a node holds a client's write to is exact for the widest log ids and vote:
    /// an entry of `max_entry_data` bytes of data goes alone in one frame, one byte more does
    /// not; with smaller ids it fits with room to spare.
    #[test]
    fn an_entry_of_the_largest_data_fits_a_frame_alone_and_one_byte_more_does_not() {
        let widest =
            LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(u64::MAX, u64::MAX), u64::MAX);
        let alone = |data: usize, vote| AppendEntriesRequest::<TypeConfig> {
            vote,
            prev_log_id: Some(widest),
            entries: vec![Entry::new_normal(widest, Request::Command(vec![1; data]))],
            leader_commit: Some(widest),
        };
        for max in [16 << 10, 1 << 20] {
            let most = max_entry_data(max);
            assert!(max - most < 600, "{} bytes of overhead in a frame of {max}", max - most);
            for vote in [Vote::new_committed(u64::MAX, u64::MAX), Vote::new(u64::MAX, u64::MAX)] {
                let out = encode(&alone(most, vote), max, WRAP).unwrap();
                let json = serde_json::to_vec(&Msg::AppendEntries(out.head)).unwrap().len();
                assert!(frame_len(json, out.tail.len()) <= max);
            }
            // The widest vote is a candidate's (`"committed":false`).
            match encode(&alone(most + 1, Vote::new(u64::MAX, u64::MAX)), max, WRAP) {
                Err(e) => assert!(e.to_string().contains("does not fit"), "{e}"),
                Ok(out) => panic!("{} bytes of entries went in a frame of {max}", out.tail.len()),
            }
            // Ordinary ids: the same data fits.
            let lid =
                |index| LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(2, 1), index);
            let r = AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new_committed(2, 1),
                prev_log_id: Some(lid(9)),
                entries: vec![Entry::new_normal(lid(10), Request::Command(vec![1; most]))],
                leader_commit: Some(lid(9)),
            };
            encode(&r, max, WRAP).unwrap();
        }
        assert_eq!(max_entry_data(100), 0);
    }
}
