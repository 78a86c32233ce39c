//! One node's side of the online comparison ([`Comparer`]): its own digests at recent claim
//! indexes against what a majority of the voters claimed, and what that means for it
//! ([`Outcome`]: confirmed, diverged, split). Separate from the tally (`tally.rs`), which it
//! feeds: this is where a node learns it must fence itself.

use super::{nodes, show, Claim, Tally, Verdict, CLAIM_MAX_LAG};
use std::collections::{BTreeMap, BTreeSet};
use wal::Checkpoint;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::comparable;
    use crate::claims::tests::{claim, cp, voters};

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
}
