//! When a client's write waiting on this node can no longer be answered by waiting, so that it
//! is answered at once instead of after the node's write timeout (issue 21, finding 4: a
//! partitioned leader held every write for its write timeout, 5 s; a follower that had
//! forwarded a write to a stopped leader held it as long).
//!
//! - **On the leader**, a proposed write waits for its commit. It stops waiting when this node
//!   stops leading (its role or term changes) or when its lease lapses: no majority has
//!   acknowledged it for the lease (openraft's `leader_lease`, which is `election_timeout_max`;
//!   the time of the last quorum acknowledgement is in openraft's metrics). Either way a
//!   majority may elect another leader, or already has, and nothing this node does can commit
//!   the write: only a later leader decides whether it is in the log. openraft itself refuses
//!   new proposals once the lease lapses (`ForwardToLeader` with `LeaseExpired`), but leaves
//!   those already appended waiting: it never fails a write it appended until its entry is
//!   truncated or purged.
//! - **On a follower**, a write forwarded to the leader waits for the leader's answer. It stops
//!   waiting when this node learns that another node leads (or leads itself): the one it
//!   forwarded to is stopped or cut off, and may never answer.
//!
//! The answer is then Indeterminate (the entry may be in the old leader's log); the client
//! retries with the same request id, and the new leader applies it once (the apply seam's
//! dedupe). A refusal that openraft gives at the same moment (the proposal was never appended)
//! still wins: see [`REFUSAL_GRACE`].

use crate::node::RaftNode;
use crate::TypeConfig;
use openraft::async_runtime::WatchReceiver;
use openraft::type_config::alias::InstantOf;
use openraft::{Instant, ServerState};
use std::time::Duration;

/// After a lapse or a change of leadership is seen, how long the proposal's own answer is still
/// awaited: openraft refuses a proposal it cannot append (lease lapsed, not leader) at once,
/// but its answer may trail the metrics by a moment, and a refusal (never appended) is a more
/// precise answer than Indeterminate.
pub const REFUSAL_GRACE: Duration = Duration::from_millis(50);

/// This node's leadership when a write was proposed: its term if it was leading.
#[derive(Clone, Copy, Debug)]
pub struct Leading {
    term: Option<u64>,
}

impl Leading {
    /// Read before proposing.
    pub fn now(raft: &RaftNode) -> Leading {
        let m = raft.metrics();
        let m = m.borrow_watched();
        Leading { term: (m.state == ServerState::Leader).then_some(m.current_term) }
    }
}

/// Resolves, with why, once this node can no longer commit a write it was leading for when
/// `at_start` was read: it stopped leading that term, or no majority acknowledged it for
/// `lease`. Never resolves when it was not leading (the proposal is refused at once then).
pub async fn cannot_commit(raft: &RaftNode, at_start: Leading, lease: Duration) -> String {
    let Some(term) = at_start.term else { return std::future::pending().await };
    let mut changes = raft.server_metrics();
    loop {
        let (state, now_term) = {
            let m = raft.metrics();
            let m = m.borrow_watched();
            (m.state, m.current_term)
        };
        if state != ServerState::Leader || now_term != term {
            return format!("this node stopped leading term {term} (now {state:?} in term {now_term})");
        }
        let acked = raft.data_metrics().borrow_watched().last_quorum_acked;
        let until_lapse = match acked {
            Some(acked) => {
                let (acked, now) = (*acked, InstantOf::<TypeConfig>::now());
                let lapse = acked + lease;
                if now >= lapse {
                    return format!(
                        "this leader's lease lapsed: no majority acknowledged it for {:?} (the lease is {lease:?}): it is cut off or was paused",
                        now - acked
                    );
                }
                Some(lapse - now)
            }
            // No quorum acknowledgement yet (a single voter needs none): only a change of
            // leadership ends the wait.
            None => None,
        };
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return "this node's raft stopped".into();
                }
            }
            _ = tokio::time::sleep(until_lapse.unwrap_or(Duration::ZERO)), if until_lapse.is_some() => {}
        }
    }
}

/// Resolves, with why, once this node knows a leader other than `from` (itself included).
/// While no leader is known (an election), it keeps waiting.
pub async fn leader_moved(raft: &RaftNode, from: u64) -> String {
    let mut changes = raft.server_metrics();
    loop {
        let now = changes.borrow_watched().current_leader;
        if let Some(l) = now.filter(|l| *l != from) {
            return format!("node {l} leads now");
        }
        if changes.changed().await.is_err() {
            return "this node's raft stopped".into();
        }
    }
}
