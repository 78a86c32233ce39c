//! The majority rule over one index's claims ([`majority`]) and the tally of the claims applied
//! so far ([`Tally`]), which reports each index's decision once. Separate from the claim itself
//! (`mod.rs`): this is the rule every node and the offline replay decide with, and its tests
//! are the rule's cases.

use super::{comparable, show, Claim, CLAIM_MAX_LAG};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use wal::Checkpoint;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::tests::{claim, cp, voters};

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
}
