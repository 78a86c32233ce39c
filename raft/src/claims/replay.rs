//! The replay of a Raft log that checks the digest claims it holds ([`Replayed`]), at start
//! (`verify.rs`) and offline (`check.rs`). Separate from the online comparison (`compare.rs`):
//! it compares claims with replayed states, not with digests a running node recorded.

use super::{nodes, show, Claim, Tally, Verdict};
use crate::Request;
use crate::EPOCH;
use catalog::Catalog;
use openraft::EntryPayload;
use std::collections::BTreeSet;
use wal::{Checkpoint, Lsn};
use wal_state::{Applier, CompareReport, Replayer};

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
