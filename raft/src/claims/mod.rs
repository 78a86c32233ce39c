//! Digest claims: replicas compare their state digests at the same index, online and offline
//! (issue 21, finding 3; docs/replication-safety.md, "Replicas compare digests").
//!
//! A node's own checkpoints are compared only with its own replay, so three replicas that
//! applied different entries each said CLEAN. Here every voter, after applying a *claim index*,
//! states "node N: digest D after index i" as an entry of the replicated log (a claim entry,
//! `codec.rs` kind 3, which changes no state). Every node applying the claim entries of an
//! index counts them, and once claims from a majority of the voters agree on one digest, a node
//! whose own digest at that index differs has diverged, whoever leads.
//!
//! - **Claim indexes** are the Raft indexes `i > 0` with `i % every == 0` (`every` is
//!   `--checkpoint-every`), whatever the entry there is. The rule reads only the index, so every
//!   node picks the same indexes whenever it started and whatever snapshot it installed, and
//!   the digest "after index `i`" is the same function of the committed log on every replica. A
//!   claim entry lands after the index it claims and changes no state, so claims cannot cause
//!   claims indefinitely: each voter claims a claim index once as it applies it, and the node
//!   refuses an `every` that is not larger than the number of voters (`node/mod.rs`), so one
//!   index's claims alone never reach the next claim index. Repeats exist but are bounded: a
//!   restarted node re-applying its log claims those indexes again (within [`CLAIM_MAX_LAG`],
//!   through a queue of 64), and the leader's guard against repeats is in its memory only, so
//!   a new leader may propose one; the tally counts a node's first claim for an index only.
//! - **The majority rule** ([`majority`]): a digest is agreed at an index when, in every
//!   configuration of the current membership (two during a joint change), more than half of
//!   the voters claimed it. A node's first claim for an index is the one counted; claims from
//!   nodes that are not voters are ignored. Not "compare with the leader's claim": a leader
//!   whose state was corrupted would then make every healthy follower fence itself and leave
//!   only the wrong replica.
//! - **Bounds.** A claim for an index more than [`CLAIM_MAX_LAG`] behind is dropped (by the
//!   sender and by the leader that would propose it), so a node replaying or catching up never
//!   floods the log with old claims; a node keeps its own digests and the claims it counted for
//!   indexes within twice that of the newest ([`Comparer`]). Claims are best effort: a lost
//!   claim only delays detection to the next claim index.

//!
//! The claim, its encoding and a node's claim counters are here; the majority rule and the
//! per-index tally in `tally.rs`, a node's online comparison in `compare.rs`, and the replay
//! that checks claims offline and at open in `replay.rs`.

mod compare;
mod replay;
mod tally;

pub use compare::{Comparer, Divergence, Outcome};
pub(crate) use replay::Replayed;
pub use tally::{majority, Tally, Verdict};

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use wal::Checkpoint;

/// A claim for an index further than this behind the log's end is dropped rather than
/// proposed; own digests and counted claims are kept for twice this distance.
pub const CLAIM_MAX_LAG: u64 = 4096;

/// The encoded length of a claim (the body of a kind-3 entry, `codec.rs`).
pub(crate) const CLAIM_LEN: usize = 64;

/// "Node `node`: digest `digest` (over `entity_count` entities) after applying index `index`".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub node: u64,
    pub index: u64,
    pub digest: [u8; 32],
    pub entity_count: u64,
    pub digest_version: u32,
    pub state_machine_version: u32,
}

impl Claim {
    pub fn new(node: u64, index: u64, cp: &Checkpoint) -> Claim {
        Claim {
            node,
            index,
            digest: cp.digest,
            entity_count: cp.entity_count,
            digest_version: cp.digest_version,
            state_machine_version: cp.state_machine_version,
        }
    }

    /// The claimed state, as a checkpoint value.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            digest: self.digest,
            entity_count: self.entity_count,
            digest_version: self.digest_version,
            state_machine_version: self.state_machine_version,
        }
    }

    /// The 64 bytes of a kind-3 entry's body (`codec.rs`), little-endian.
    pub(crate) fn encode(&self) -> [u8; CLAIM_LEN] {
        let mut out = [0u8; CLAIM_LEN];
        out[0..8].copy_from_slice(&self.node.to_le_bytes());
        out[8..16].copy_from_slice(&self.index.to_le_bytes());
        out[16..48].copy_from_slice(&self.digest);
        out[48..56].copy_from_slice(&self.entity_count.to_le_bytes());
        out[56..60].copy_from_slice(&self.digest_version.to_le_bytes());
        out[60..64].copy_from_slice(&self.state_machine_version.to_le_bytes());
        out
    }

    pub(crate) fn decode(body_untrusted: &[u8]) -> Result<Claim, String> {
        let b: &[u8; CLAIM_LEN] = body_untrusted
            .try_into()
            .map_err(|_| format!("a claim is {CLAIM_LEN} bytes, not {}", body_untrusted.len()))?;
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&b[16..48]);
        Ok(Claim {
            node: u64_at(0),
            index: u64_at(8),
            digest,
            entity_count: u64_at(48),
            digest_version: u32_at(56),
            state_machine_version: u32_at(60),
        })
    }
}

/// A node's claim counters, shared by its state machine, the task that sends its claims and
/// its port (read with [`ClaimStats::get`], shown in the metrics).
#[derive(Debug, Default)]
pub struct ClaimStats {
    made: AtomicU64,
    sent: AtomicU64,
    dropped: AtomicU64,
    proposed: AtomicU64,
    /// The highest claim index a majority confirmed this node's digest at, plus one (0: none).
    verified: AtomicU64,
    confirmed: AtomicU64,
    split: AtomicU64,
}

/// A copy of [`ClaimStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimCounters {
    /// Claims this node made (one per claim index it applied).
    pub made: u64,
    /// Of those, sent to the leader (or proposed, when this node led).
    pub sent: u64,
    /// Of those, dropped: too far behind, no leader, the leader unreachable or refusing, or
    /// too many waiting (claims are best effort).
    pub dropped: u64,
    /// Claims this node proposed as leader (its own and its followers').
    pub proposed: u64,
    /// Claim indexes where a majority agreed with this node's digest, and the highest.
    pub confirmed: u64,
    pub verified_through: Option<u64>,
    /// Claim indexes whose voters disagreed with no majority (logged, never fenced on).
    pub split: u64,
}

impl ClaimStats {
    pub fn get(&self) -> ClaimCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClaimCounters {
            made: g(&self.made),
            sent: g(&self.sent),
            dropped: g(&self.dropped),
            proposed: g(&self.proposed),
            confirmed: g(&self.confirmed),
            verified_through: g(&self.verified).checked_sub(1),
            split: g(&self.split),
        }
    }

    pub(crate) fn made(&self) {
        self.made.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn proposed(&self) {
        self.proposed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn confirmed(&self, index: u64) {
        self.confirmed.fetch_add(1, Ordering::Relaxed);
        self.verified.fetch_max(index.saturating_add(1), Ordering::Relaxed);
    }

    pub(crate) fn split(&self) {
        self.split.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether index `i` is a claim index for claims every `every` indexes.
pub fn is_claim_index(i: u64, every: u64) -> bool {
    every > 0 && i > 0 && i.is_multiple_of(every)
}

/// The first 8 bytes of a digest in hex (what messages show).
pub(crate) fn short(d: &[u8; 32]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn show(cp: &Checkpoint) -> String {
    format!("{}.. over {} entities", short(&cp.digest), cp.entity_count)
}

fn nodes(ids: &[u64]) -> String {
    let v: Vec<String> = ids.iter().map(u64::to_string).collect();
    v.join(", ")
}

/// Whether a claimed checkpoint was computed with this build's digest and state-machine
/// versions. Only such claims are counted: a claim of other versions (a node running another
/// build during a rolling upgrade that changed either) describes the state in another
/// encoding, so it is not comparable, and never a reason to fence (the first upgraded node
/// would otherwise be contradicted by the others and fence itself).
pub fn comparable(cp: &Checkpoint) -> bool {
    cp.digest_version == wal_state::DIGEST_VERSION
        && cp.state_machine_version == <catalog::Catalog as wal_state::StateMachine>::VERSION
}

#[cfg(test)]
mod tests {
    //! The claim's encoding; the helpers every test of the claims builds its claims with.

    use super::*;
    use std::collections::BTreeSet;

    pub(super) fn cp(tag: u8) -> Checkpoint {
        Checkpoint {
            digest: [tag; 32],
            entity_count: tag as u64,
            digest_version: 1,
            state_machine_version: 1,
        }
    }

    pub(super) fn claim(node: u64, index: u64, tag: u8) -> Claim {
        Claim::new(node, index, &cp(tag))
    }

    pub(super) fn voters(ids: &[u64]) -> Vec<BTreeSet<u64>> {
        vec![ids.iter().copied().collect()]
    }

    #[test]
    fn claims_encode_and_decode() {
        let c = claim(3, 1 << 40, 0xab);
        assert_eq!(Claim::decode(&c.encode()), Ok(c));
        assert!(Claim::decode(&c.encode()[..63]).is_err());
    }
}
