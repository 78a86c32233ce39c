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
//!   waiting when this node learns that another node leads (or leads itself), or when the
//!   leader falls silent: no append-entries (a heartbeat or entries) has reached this node for
//!   [`silence`] (three heartbeat intervals). Either way the leader is stopped, paused or cut
//!   off, and may never answer. A follower whose leader is silent does not forward a new write
//!   to it at all: it answers Rejected at once (nothing was sent), so that the client tries
//!   another node instead of waiting out its attempt deadline here and wandering to the stalled
//!   leader again. The followers cannot elect another leader before the old one's lease (the
//!   election timeout's maximum) has run out since its last heartbeat, which is longer: the
//!   clients are at live nodes, retrying, when the new leader appears.
//!
//! The answer to a write that was waiting is then Indeterminate (the entry may be in the old
//! leader's log); the client retries with the same request id, and the new leader applies it
//! once (the apply seam's dedupe). A refusal that openraft gives at the same moment (the
//! proposal was never appended) still wins: see [`REFUSAL_GRACE`].

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

/// How long a leader may send this node nothing before a follower takes it for stalled: three
/// heartbeat intervals. openraft sends a follower append-entries at least once per heartbeat
/// interval (a heartbeat when no entries went out), so three missed in a row is no jitter.
pub fn silence(heartbeat: Duration) -> Duration {
    heartbeat.saturating_mul(3)
}

/// When this node last received append-entries or a snapshot chunk, which only a leader sends:
/// a follower's evidence that its leader is running and can reach it.
#[derive(Debug, Default)]
pub struct Contact(std::sync::Mutex<Option<std::time::Instant>>);

impl Contact {
    /// A leader's message arrived.
    pub fn touch(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
    }

    /// How long no leader's message arrived, when that is at least `threshold`; `None` when
    /// one came more recently, or none ever did (no evidence either way).
    pub fn silent_for(&self, threshold: Duration) -> Option<Duration> {
        let last = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        last.map(|t| t.elapsed()).filter(|since| *since >= threshold)
    }
}

/// Resolves, with why, once no leader's message has reached this node for `threshold`.
pub async fn falls_silent(contact: &Contact, threshold: Duration) -> String {
    loop {
        if let Some(since) = contact.silent_for(threshold) {
            return format!("the leader has sent this node nothing for {since:?}");
        }
        let last = *contact.0.lock().unwrap_or_else(|e| e.into_inner());
        match last {
            Some(t) => tokio::time::sleep(threshold.saturating_sub(t.elapsed())).await,
            None => return std::future::pending().await,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_leader_is_silent_only_after_it_was_heard_and_then_not_for_the_threshold() {
        let c = Contact::default();
        assert_eq!(c.silent_for(Duration::ZERO), None, "never heard: no evidence either way");
        c.touch();
        assert_eq!(c.silent_for(Duration::from_secs(3600)), None);
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.silent_for(Duration::from_millis(10)).is_some_and(|s| s >= Duration::from_millis(20)));
        let why = tokio::time::timeout(Duration::from_secs(10), falls_silent(&c, Duration::from_millis(30)))
            .await
            .expect("the silence was not seen");
        assert!(why.starts_with("the leader has sent this node nothing for"), "{why}");
        c.touch();
        assert_eq!(c.silent_for(Duration::from_secs(3600)), None, "heard again");
        assert_eq!(silence(Duration::from_millis(100)), Duration::from_millis(300));
    }
}
