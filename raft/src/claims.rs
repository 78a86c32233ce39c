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

use crate::log_store::EPOCH;
use crate::Request;
use catalog::Catalog;
use openraft::EntryPayload;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use wal::{Checkpoint, Lsn};
use wal_state::{Applier, CompareReport, Replayer};

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

/// What the claims for one index decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No digest has a majority, and the voters' claims so far do not disagree.
    Pending,
    /// In every configuration, more than half of the voters claimed `digest` (`by`: who).
    Agreed { digest: Checkpoint, by: Vec<u64> },
    /// Voters claimed different digests and none has a majority.
    Split,
}

/// The majority rule over one index's claims (`claims`: node → its first claim) and the
/// membership's configurations (`configs`: one set of voters, or two during a joint change).
/// Claims from nodes that are in no configuration are ignored. No voters: `Pending`.
pub fn majority(claims: &BTreeMap<u64, Checkpoint>, configs: &[BTreeSet<u64>]) -> Verdict {
    let is_voter = |n: &u64| configs.iter().any(|c| c.contains(n));
    let mut distinct: Vec<Checkpoint> = Vec::new();
    for (_, cp) in claims.iter().filter(|(n, _)| is_voter(n)) {
        if !distinct.contains(cp) {
            distinct.push(*cp);
        }
    }
    if configs.is_empty() || configs.iter().any(BTreeSet::is_empty) {
        return Verdict::Pending;
    }
    for d in &distinct {
        let agrees = |c: &BTreeSet<u64>| c.iter().filter(|n| claims.get(n) == Some(d)).count() * 2 > c.len();
        if configs.iter().all(agrees) {
            let by = claims.iter().filter(|(n, cp)| is_voter(n) && *cp == d).map(|(n, _)| *n).collect();
            return Verdict::Agreed { digest: *d, by };
        }
    }
    if distinct.len() > 1 {
        Verdict::Split
    } else {
        Verdict::Pending
    }
}

/// The claims counted for one index.
#[derive(Debug, Default)]
struct Counted {
    by_node: BTreeMap<u64, Checkpoint>,
    agreed: bool,
    split: bool,
}

/// The claims applied so far, per index, and what each index's claims decided: each decision
/// is reported once.
#[derive(Debug, Default)]
pub struct Tally {
    by_index: BTreeMap<u64, Counted>,
}

impl Tally {
    /// Counts claim `c`, applied at index `at` (where its entry is), under the membership's
    /// `configs`; returns what is newly decided for `c.index`: `Agreed` the first time a
    /// majority forms, `Split` the first time voters disagree with no majority, else
    /// `Pending`. A second claim from one node for one index is not counted. A claim for an
    /// index at or after its own entry, or more than twice [`CLAIM_MAX_LAG`] behind it, is
    /// ignored (no replica wrote it: claims follow the index they claim), and so is a claim of
    /// other digest or state-machine versions ([`comparable`]).
    pub fn add(&mut self, c: &Claim, at: u64, configs: &[BTreeSet<u64>]) -> Verdict {
        if !comparable(&c.checkpoint()) || c.index >= at || c.index.saturating_add(2 * CLAIM_MAX_LAG) < at {
            return Verdict::Pending;
        }
        self.forget_below(at.saturating_sub(2 * CLAIM_MAX_LAG));
        let counted = self.by_index.entry(c.index).or_default();
        if counted.by_node.contains_key(&c.node) {
            return Verdict::Pending;
        }
        counted.by_node.insert(c.node, c.checkpoint());
        match majority(&counted.by_node, configs) {
            Verdict::Agreed { .. } if counted.agreed => Verdict::Pending,
            v @ Verdict::Agreed { .. } => {
                counted.agreed = true;
                v
            }
            Verdict::Split if counted.split || counted.agreed => Verdict::Pending,
            Verdict::Split => {
                counted.split = true;
                Verdict::Split
            }
            Verdict::Pending => Verdict::Pending,
        }
    }

    /// Who claimed what for `index`, for messages: "node 1 ab12.. over 3 entities; node 2 ..".
    pub fn describe(&self, index: u64) -> String {
        let mut s = String::new();
        for (n, cp) in self.by_index.get(&index).map(|c| &c.by_node).into_iter().flatten() {
            if !s.is_empty() {
                s.push_str("; ");
            }
            let _ = write!(s, "node {n} {}", show(cp));
        }
        s
    }

    /// Forgets the claims for indexes below `index`.
    pub fn forget_below(&mut self, index: u64) {
        if self.by_index.first_key_value().is_some_and(|(i, _)| *i < index) {
            self.by_index = self.by_index.split_off(&index);
        }
    }
}

/// A node whose own digest at an index differs from the one a majority of the voters claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    pub node: u64,
    pub index: u64,
    pub own: Checkpoint,
    pub majority: Checkpoint,
    pub agreed_by: Vec<u64>,
    /// Who claimed what for `index`.
    pub claims: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} diverged at index {}: its digest there is {}, a majority of the voters (nodes {}) claimed {} (claims: {})",
            self.node,
            self.index,
            show(&self.own),
            nodes(&self.agreed_by),
            show(&self.majority),
            self.claims
        )
    }
}

/// What applying a claim entry means for this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Nothing,
    /// A majority agreed with this node's own digest at `index` (`own`, and `lsn`: the last
    /// command index at or below `index`, where a local checkpoint of it belongs).
    Confirmed {
        index: u64,
        own: Checkpoint,
        lsn: Option<u64>,
    },
    /// A majority agreed on another digest: this node diverged.
    Diverged(Divergence),
    /// The voters' claims for `index` disagree and no digest has a majority (logged, never a
    /// reason to fence).
    Split {
        index: u64,
        claims: String,
    },
}

/// One node's side of the online comparison: its own digests at recent claim indexes and the
/// claims applied so far.
#[derive(Debug)]
pub struct Comparer {
    node: u64,
    /// Claim index → (own digest after it, last command index at or below it).
    own: BTreeMap<u64, (Checkpoint, Option<u64>)>,
    tally: Tally,
}

impl Comparer {
    pub fn new(node: u64) -> Comparer {
        Comparer { node, own: BTreeMap::new(), tally: Tally::default() }
    }

    /// Records this node's digest after applying claim index `index` (`lsn`: the last command
    /// applied at or below it); forgets own digests too far behind to be claimed against.
    pub fn own(&mut self, index: u64, cp: Checkpoint, lsn: Option<u64>) {
        let keep = index.saturating_sub(2 * CLAIM_MAX_LAG);
        if self.own.first_key_value().is_some_and(|(i, _)| *i < keep) {
            self.own = self.own.split_off(&keep);
        }
        self.own.insert(index, (cp, lsn));
    }

    /// This node's digest at `index`, if it still knows it.
    pub fn own_at(&self, index: u64) -> Option<Checkpoint> {
        self.own.get(&index).map(|o| o.0)
    }

    /// Counts a claim applied at index `at` under `configs`, and says what it means here.
    pub fn claim(&mut self, c: &Claim, at: u64, configs: &[BTreeSet<u64>]) -> Outcome {
        match self.tally.add(c, at, configs) {
            Verdict::Pending => Outcome::Nothing,
            Verdict::Split => Outcome::Split { index: c.index, claims: self.tally.describe(c.index) },
            Verdict::Agreed { digest, by } => match self.own.get(&c.index) {
                // Not applied here (a snapshot was installed over it): nothing to compare.
                None => Outcome::Nothing,
                Some(&(own, lsn)) if own == digest => Outcome::Confirmed { index: c.index, own, lsn },
                Some(&(own, _)) => Outcome::Diverged(Divergence {
                    node: self.node,
                    index: c.index,
                    own,
                    majority: digest,
                    agreed_by: by,
                    claims: self.tally.describe(c.index),
                }),
            },
        }
    }

    /// A snapshot through `index` was installed: what this node applied before is gone, and
    /// claims at or below it are not compared.
    pub fn forget_through(&mut self, index: u64) {
        self.own = self.own.split_off(&index.saturating_add(1));
        self.tally.forget_below(index.saturating_add(1));
    }
}

/// A Raft log replayed at start (`verify.rs`) or offline (`check.rs`): the one loop both use.
/// Commands go through `wal_state::Replayer` (the replay-and-compare core the pipeline and
/// walcheck use), which compares the node's own checkpoints and keeps the states after the
/// recent commands; each claim entry is counted, and a digest a majority of the voters agreed
/// on is compared with the replayer's state at the claimed index (the state after the last
/// command at or below it).
#[derive(Debug)]
pub(crate) struct Replayed {
    rp: Replayer<Catalog>,
    tally: Tally,
    configs: Vec<BTreeSet<u64>>,
    /// The replay's base (a snapshot's last index): claims at or below it are not compared.
    base: Option<u64>,
    /// Majority-agreed claims the replay matched, and the highest of their indexes.
    pub(crate) verified: u64,
    pub(crate) through: Option<u64>,
    /// The first majority-agreed claim the replay did not reproduce.
    mismatch: Option<Box<Mismatch>>,
}

/// A majority-agreed claim the replay does not reproduce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub(crate) index: u64,
    pub(crate) majority: Checkpoint,
    pub(crate) replayed: Checkpoint,
    pub(crate) why: String,
}

impl Replayed {
    /// Starting from `applier`, the state after the snapshot's last index `base` (`None`: the
    /// empty state), whose voters are `membership`'s.
    pub(crate) fn new(
        applier: Applier<Catalog>,
        base: Option<u64>,
        membership: &crate::Membership,
    ) -> Replayed {
        Replayed {
            rp: Replayer::new(applier),
            tally: Tally::default(),
            configs: membership.get_joint_config().clone(),
            base,
            verified: 0,
            through: None,
            mismatch: None,
        }
    }

    /// Replay stopped: at a checkpoint or a claim it does not reproduce, an entry it could not
    /// apply, or a checkpoint of an unknown version. What follows is not replayed.
    pub(crate) fn stopped(&self) -> bool {
        self.rp.report().stopped() || self.mismatch.is_some()
    }

    /// The next entry: a command is applied (the base already holds those at or below its
    /// index), a claim counted and compared, a membership's voters count the claims after it.
    pub(crate) fn entry(&mut self, e: &crate::Entry) {
        if self.stopped() {
            return;
        }
        let at = e.log_id.index;
        match &e.payload {
            EntryPayload::Normal(Request::Command(bytes)) => self.rp.entry(Lsn(at), EPOCH, bytes),
            EntryPayload::Normal(Request::Claim(c)) => self.mismatch = self.claim(c, at).err(),
            EntryPayload::Membership(m) => self.configs = m.get_joint_config().clone(),
            EntryPayload::Blank => {}
        }
    }

    /// A checkpoint record for index `at` (the node's own digest there), for the replayer.
    pub(crate) fn checkpoint(&mut self, at: u64, cp: &Checkpoint) {
        self.rp.checkpoint(Lsn(at), cp);
    }

    /// A claim entry at index `at`: a mismatch when it completes a majority for a digest the
    /// replay does not reach at the claimed index.
    fn claim(&mut self, c: &Claim, at: u64) -> Result<(), Box<Mismatch>> {
        let Verdict::Agreed { digest, by } = self.tally.add(c, at, &self.configs) else { return Ok(()) };
        if self.base.is_some_and(|b| c.index <= b) {
            return Ok(());
        }
        let Some(replayed) = self.rp.state_at(Lsn(c.index)) else { return Ok(()) };
        if replayed != digest {
            return Err(Box::new(Mismatch {
                index: c.index,
                majority: digest,
                replayed,
                why: format!(
                    "a majority of the voters (nodes {}) claimed {} after index {}, replay gives {} (claims: {})",
                    nodes(&by),
                    show(&digest),
                    c.index,
                    show(&replayed),
                    self.tally.describe(c.index)
                ),
            }));
        }
        self.verified += 1;
        self.through = self.through.max(Some(c.index));
        Ok(())
    }

    /// The replayed state (to go on from, or to show) and what the replay found: the
    /// replayer's report, and the first claim it did not reproduce.
    pub(crate) fn finish(self) -> (Applier<Catalog>, CompareReport, Option<Box<Mismatch>>) {
        let (applier, report) = self.rp.finish();
        (applier, report, self.mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(tag: u8) -> Checkpoint {
        Checkpoint {
            digest: [tag; 32],
            entity_count: tag as u64,
            digest_version: 1,
            state_machine_version: 1,
        }
    }

    fn claim(node: u64, index: u64, tag: u8) -> Claim {
        Claim::new(node, index, &cp(tag))
    }

    fn voters(ids: &[u64]) -> Vec<BTreeSet<u64>> {
        vec![ids.iter().copied().collect()]
    }

    fn claims(v: &[(u64, u8)]) -> BTreeMap<u64, Checkpoint> {
        v.iter().map(|(n, t)| (*n, cp(*t))).collect()
    }

    #[test]
    fn two_of_three_agree() {
        let v = voters(&[1, 2, 3]);
        assert_eq!(majority(&claims(&[(1, 7)]), &v), Verdict::Pending);
        assert_eq!(
            majority(&claims(&[(1, 7), (2, 7)]), &v),
            Verdict::Agreed { digest: cp(7), by: vec![1, 2] }
        );
        // The third, different, does not undo it; a majority is two of three whatever the third.
        assert_eq!(
            majority(&claims(&[(1, 7), (2, 9), (3, 7)]), &v),
            Verdict::Agreed { digest: cp(7), by: vec![1, 3] }
        );
    }

    #[test]
    fn three_distinct_digests_have_no_majority() {
        let v = voters(&[1, 2, 3]);
        assert_eq!(majority(&claims(&[(1, 7), (2, 8)]), &v), Verdict::Split);
        assert_eq!(majority(&claims(&[(1, 7), (2, 8), (3, 9)]), &v), Verdict::Split);
    }

    #[test]
    fn claims_from_non_voters_are_ignored() {
        let v = voters(&[1, 2, 3]);
        // Nodes 4 and 5 agree, but they are not voters: no majority, no disagreement.
        assert_eq!(majority(&claims(&[(1, 7), (4, 9), (5, 9)]), &v), Verdict::Pending);
        // A learner's claim does not complete a majority either.
        assert_eq!(majority(&claims(&[(1, 7), (4, 7)]), &v), Verdict::Pending);
        assert_eq!(majority(&claims(&[(1, 7), (2, 7)]), &[]), Verdict::Pending, "no voters");
    }

    #[test]
    fn a_joint_membership_needs_a_majority_of_each_configuration() {
        let joint = vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([3, 4, 5])];
        assert_eq!(majority(&claims(&[(1, 7), (2, 7)]), &joint), Verdict::Pending);
        assert_eq!(
            majority(&claims(&[(1, 7), (2, 7), (4, 7), (5, 7)]), &joint),
            Verdict::Agreed { digest: cp(7), by: vec![1, 2, 4, 5] }
        );
    }

    #[test]
    fn duplicate_claims_from_one_node_count_once_and_each_decision_is_reported_once() {
        let v = voters(&[1, 2, 3]);
        let mut t = Tally::default();
        assert_eq!(t.add(&claim(1, 8, 7), 9, &v), Verdict::Pending);
        // Node 1 again (a retry, a restart re-claiming), even with another digest: still one.
        assert_eq!(t.add(&claim(1, 8, 7), 10, &v), Verdict::Pending);
        assert_eq!(t.add(&claim(1, 8, 9), 11, &v), Verdict::Pending);
        assert_eq!(t.add(&claim(2, 8, 9), 12, &v), Verdict::Split, "1 says 7, 2 says 9");
        assert_eq!(t.add(&claim(2, 8, 9), 13, &v), Verdict::Pending, "already reported");
        assert_eq!(t.add(&claim(3, 8, 9), 14, &v), Verdict::Agreed { digest: cp(9), by: vec![2, 3] });
        assert!(
            t.describe(8).starts_with("node 1 0707070707070707.. over 7 entities; node 2"),
            "{}",
            t.describe(8)
        );
    }

    #[test]
    fn claims_out_of_place_are_ignored() {
        let v = voters(&[1]);
        let mut t = Tally::default();
        assert_eq!(t.add(&claim(1, 8, 7), 8, &v), Verdict::Pending, "a claim at its own index");
        assert_eq!(t.add(&claim(1, 8, 7), 8 + 2 * CLAIM_MAX_LAG + 1, &v), Verdict::Pending, "too old");
        assert_eq!(t.add(&claim(1, 8, 7), 9, &v), Verdict::Agreed { digest: cp(7), by: vec![1] });
    }

    #[test]
    fn a_node_fences_only_on_a_majority_against_it() {
        let v = voters(&[1, 2, 3]);
        // Node 2's own digest at 16 is 5; nodes 1 and 3 claim 7.
        let mut c = Comparer::new(2);
        c.own(16, cp(5), Some(15));
        assert_eq!(c.claim(&claim(2, 16, 5), 17, &v), Outcome::Nothing);
        assert!(matches!(c.claim(&claim(1, 16, 7), 18, &v), Outcome::Split { index: 16, .. }));
        let Outcome::Diverged(d) = c.claim(&claim(3, 16, 7), 19, &v) else { panic!() };
        assert_eq!((d.index, d.own, d.majority, d.agreed_by.clone()), (16, cp(5), cp(7), vec![1, 3]));
        assert!(d.to_string().starts_with("node 2 diverged at index 16: its digest there is 0505"), "{d}");

        // Node 1 at the same claims: confirmed once the majority forms.
        let mut c = Comparer::new(1);
        c.own(16, cp(7), Some(15));
        assert_eq!(c.claim(&claim(2, 16, 5), 17, &v), Outcome::Nothing);
        assert!(matches!(c.claim(&claim(1, 16, 7), 18, &v), Outcome::Split { .. }));
        assert_eq!(
            c.claim(&claim(3, 16, 7), 19, &v),
            Outcome::Confirmed { index: 16, own: cp(7), lsn: Some(15) }
        );

        // A leader whose state is wrong is the one that fences, not the two healthy followers.
        let mut leader = Comparer::new(1);
        leader.own(16, cp(5), None);
        leader.claim(&claim(1, 16, 5), 17, &v);
        leader.claim(&claim(2, 16, 7), 18, &v);
        assert!(matches!(leader.claim(&claim(3, 16, 7), 19, &v), Outcome::Diverged(_)));

        // Three different digests: nobody fences.
        let mut c = Comparer::new(1);
        c.own(16, cp(5), None);
        for (n, t) in [(1, 5), (2, 6), (3, 7)] {
            assert!(!matches!(c.claim(&claim(n, 16, t), 20 + n, &v), Outcome::Diverged(_)));
        }

        // Own digests are kept for twice the claims' lag, no longer.
        let mut c = Comparer::new(2);
        c.own(8, cp(5), None);
        c.own(8 + 2 * CLAIM_MAX_LAG, cp(6), None);
        assert_eq!(c.own_at(8), Some(cp(5)));
        c.own(16 + 2 * CLAIM_MAX_LAG, cp(7), None);
        assert_eq!((c.own_at(8), c.own_at(8 + 2 * CLAIM_MAX_LAG)), (None, Some(cp(6))));

        // Installed a snapshot past it: nothing to compare.
        let mut c = Comparer::new(2);
        c.own(16, cp(5), None);
        c.forget_through(20);
        c.claim(&claim(1, 16, 7), 21, &v);
        assert_eq!(c.claim(&claim(3, 16, 7), 22, &v), Outcome::Nothing);
    }

    /// A rolling upgrade that changes the digest or state-machine version: the first upgraded
    /// node is contradicted by two old ones, yet must not fence (their digests are not
    /// comparable with its own), and the old ones do not count its claim either.
    #[test]
    fn claims_of_other_versions_are_not_counted() {
        let v = voters(&[1, 2, 3]);
        let old = |node, tag| {
            let mut cp = cp(tag);
            cp.state_machine_version += 1;
            Claim::new(node, 16, &cp)
        };
        assert!(comparable(&cp(1)) && !comparable(&old(1, 7).checkpoint()));
        let mut c = Comparer::new(2);
        c.own(16, cp(5), None);
        assert_eq!(c.claim(&claim(2, 16, 5), 17, &v), Outcome::Nothing);
        assert_eq!(c.claim(&old(1, 7), 18, &v), Outcome::Nothing);
        assert_eq!(c.claim(&old(3, 7), 19, &v), Outcome::Nothing, "two claims of other versions");
        let mut digest_version = cp(7);
        digest_version.digest_version += 1;
        assert_eq!(
            Tally::default().add(&Claim::new(1, 16, &digest_version), 17, &voters(&[1])),
            Verdict::Pending
        );
    }

    #[test]
    fn claims_encode_and_decode() {
        let c = claim(3, 1 << 40, 0xab);
        assert_eq!(Claim::decode(&c.encode()), Ok(c));
        assert!(Claim::decode(&c.encode()[..63]).is_err());
    }
}
