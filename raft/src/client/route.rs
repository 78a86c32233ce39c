//! Where the attempts of one write go ([`Route`]): the last leader first, then the others in
//! turn, skipping nodes that were silent or unreachable in this write, and how many attempts
//! timed out at each. Separate from the retry loop (`write.rs`), which asks it for the next
//! node: the routing policy alone, with its own test.

use std::collections::{HashMap, HashSet};

/// Where the attempts of one write go: first the node that last committed a write of ours (or
/// the first address), then the others in turn, skipping the nodes that did not answer in time
/// or could not be reached in this write until they answer again or every node has failed so.
pub(super) struct Route<'a> {
    addrs: &'a [String],
    pub(super) target: String,
    /// The position in `addrs` the next turn starts after.
    at: usize,
    suspects: HashSet<String>,
    /// How many attempts timed out at each node (never forgiven within the write).
    timeouts: HashMap<String, u32>,
}

impl<'a> Route<'a> {
    pub(super) fn new(addrs: &'a [String], hint: Option<String>) -> Route<'a> {
        let target = hint.or_else(|| addrs.first().cloned()).unwrap_or_default();
        // A hint not among the addresses (a redirect's address): the first turn goes to the
        // first address.
        let at = addrs.iter().position(|a| *a == target).unwrap_or(addrs.len().saturating_sub(1));
        Route { addrs, target, at, suspects: HashSet::new(), timeouts: HashMap::new() }
    }

    /// The current target failed in a way that says the node itself is gone or silent.
    pub(super) fn suspect(&mut self) {
        self.suspects.insert(self.target.clone());
    }

    /// An attempt at the current target timed out.
    pub(super) fn timed_out(&mut self) {
        *self.timeouts.entry(self.target.clone()).or_default() += 1;
    }

    pub(super) fn timeouts_at_target(&self) -> u32 {
        self.timeouts.get(&self.target).copied().unwrap_or(0)
    }

    /// The current target answered: it is alive, whatever it said.
    pub(super) fn answered(&mut self) {
        self.suspects.remove(&self.target);
    }

    pub(super) fn is_suspect(&self, addr: &str) -> bool {
        self.suspects.contains(addr)
    }

    /// The next node that is not suspect (the current one only when no other is); when every
    /// one is, they are all forgiven.
    pub(super) fn rotate(&mut self) {
        let n = self.addrs.len();
        if n == 0 {
            return;
        }
        for _ in 0..n {
            self.at = (self.at + 1) % n;
            if !self.suspects.contains(&self.addrs[self.at]) {
                self.target = self.addrs[self.at].clone();
                return;
            }
        }
        self.suspects.clear();
        self.at = (self.at + 1) % n;
        self.target = self.addrs[self.at].clone();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::client) fn addrs() -> Vec<String> {
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_route_starts_at_the_hint_and_skips_silent_nodes_until_all_were() {
        /// The next `n` targets.
        fn turns(r: &mut Route, n: usize) -> Vec<String> {
            (0..n)
                .map(|_| {
                    r.rotate();
                    r.target.clone()
                })
                .collect()
        }
        /// Makes `addr` (the `at`-th address) the target.
        fn at(r: &mut Route, addr: &str, at: usize) {
            r.target = addr.into();
            r.at = at;
        }
        let addrs = addrs();
        let mut r = Route::new(&addrs, Some("b".into()));
        assert_eq!(r.target, "b");
        assert_eq!(turns(&mut r, 2), ["c", "a"]);
        // "b" did not answer: the turns go around it.
        at(&mut r, "b", 1);
        r.suspect();
        assert_eq!(turns(&mut r, 3), ["c", "a", "c"]);
        // "c" does not answer either; "a" answers (say, "no leader yet"): the turns stay with
        // it, the one node known alive.
        r.suspect();
        assert_eq!(turns(&mut r, 1), ["a"]);
        r.answered();
        assert_eq!(turns(&mut r, 1), ["a"]);
        // "b" answers again: it is back in the turns.
        at(&mut r, "b", 1);
        r.answered();
        assert_eq!(turns(&mut r, 2), ["a", "b"]);
        // Every node failed: all are forgiven, and the turns go on.
        r.suspect();
        at(&mut r, "a", 0);
        r.suspect();
        assert_eq!(turns(&mut r, 1), ["b"]);
        assert!(r.suspects.is_empty());
        // A hint that is not one of the addresses (a redirect's): the first turn is the first
        // address; no address at all: nothing to turn to.
        assert_eq!(turns(&mut Route::new(&addrs, Some("elsewhere".into())), 1), ["a"]);
        assert_eq!(turns(&mut Route::new(&[], None), 1), [""]);
    }
}
