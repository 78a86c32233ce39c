//! The state verdict of a Raft node's log at start, and what it means for joining the cluster
//! (docs/invariants.md I8: a DIVERGENT node does not join as a voter, and says why).
//!
//! The state machine records checkpoints (the apply seam's digest after an entry, FORMAT.md
//! 10.3) into the log through a [`Checkpointer`]. At open, [`LogStore::open_verified`]
//! replays the log after the state machine's snapshot through the same apply function and
//! compares every checkpoint with the state at its own index: **CLEAN** when all agree,
//! **DIVERGENT** (with the index and both digests) at the first that does not. [`start_role`]
//! turns the verdict into the role the node may start in: a voter, or refused.
//!
//! The same replay compares the digest claims the log holds (issue 21, `claims.rs`): at every
//! claim index past the snapshot where claims from a majority of the voters agree on a digest,
//! the replayed state must have that digest, else DIVERGENT at that index. A node's own
//! checkpoints only say that its replay reproduces what it applied; the claims say whether that
//! is what the majority applied, so a replica whose log bytes differ from the others' is
//! refused at restart even when its own checkpoints agree with it (finding 1's replicas each
//! said CLEAN). Claims at or below the snapshot are not compared: the snapshot's state is the
//! start of the replay, not something it reaches.

use crate::claims::Replayed;
use crate::codec;
use crate::log_store::LogStore;
use crate::state_machine::StateMachineStore;
use crate::writer::{Req, EPOCH};
use crate::Request;
use catalog::Catalog;
use openraft::EntryPayload;
use std::io;
use std::sync::mpsc::Sender;
use wal::state::{Applier, CHECKPOINT_MAX_LAG};
use wal::{Bound, Checkpoint, ItemKind, Lsn, Wal};

/// Records checkpoints into the Raft log (with the next batch; durable with its sync).
#[derive(Clone, Debug)]
pub struct Checkpointer {
    pub(crate) tx: Sender<Req>,
}

impl Checkpointer {
    /// Records that the state after applying every entry up to `index` has checkpoint `cp`.
    /// `index` must be an entry already in the log (an applied one). Best effort: a stopped
    /// writer drops it (a checkpoint is an extra check, never needed to recover).
    pub fn record(&self, index: u64, cp: Checkpoint) {
        let _ = self.tx.send(Req::Checkpoint { lsn: index, cp });
    }
}

/// The state verdict of a node's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateVerdict {
    /// Every checkpoint after the snapshot matched the replayed state (`through`: the highest),
    /// and so did every digest a majority of the voters claimed (`claims` of them).
    Clean { checkpoints: u64, through: Option<u64>, claims: u64 },
    /// The replayed state differs at `index` from the checkpoint the online path recorded, or
    /// from the digest a majority of the voters claimed there (`recorded`).
    Divergent { index: u64, recorded: [u8; 32], replayed: [u8; 32], why: String },
}

/// The role a node may start Raft in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartRole {
    /// CLEAN: start as configured (a voter if the membership says so).
    Voter,
    /// DIVERGENT: do not start Raft; the state is read-only, and an operator decides (restore
    /// from a healthy replica's snapshot, then rejoin as a learner).
    Refused { why: String },
}

/// What a verdict allows.
pub fn start_role(v: &StateVerdict) -> StartRole {
    match v {
        StateVerdict::Clean { .. } => StartRole::Voter,
        StateVerdict::Divergent { index, why, .. } => StartRole::Refused {
            why: format!("DIVERGENT at index {index}: {why}; this node must not vote or lead until repaired"),
        },
    }
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Replays `wal` after the snapshot (`base`, applied through `from - 1`, with `membership`
/// the voters there) and compares every checkpoint at or after `from`, and every digest a
/// majority of the voters claimed after an index past the snapshot (`claims.rs`).
pub(crate) fn check(
    wal: &Wal,
    mut base: Applier<Catalog>,
    from: u64,
    membership: &crate::Membership,
) -> io::Result<StateVerdict> {
    let base_at = from.checked_sub(1);
    let mut states = Replayed::new(base_at, base.checkpoint(), membership, CHECKPOINT_MAX_LAG as usize);
    let (mut compared, mut through) = (0u64, None);
    let mut replay = wal.replay_from(Some(Lsn(from)), Bound::Written).map_err(io::Error::other)?;
    let mut n = 0u64;
    while let Some(item) = replay.next() {
        let item = item.map_err(io::Error::other)?;
        n += 1;
        if n > 1 << 40 {
            return Err(io::Error::other("internal: replay did not end"));
        }
        let l = item.lsn.0;
        if l < from {
            continue;
        }
        match item.kind {
            ItemKind::Entry => match codec::decode_entry(l, item.payload)?.payload {
                EntryPayload::Normal(Request::Command(bytes)) => {
                    // The one apply function; a refused envelope is a no-op on every path.
                    let _ = base.apply(Lsn(l), EPOCH, &bytes);
                    if let Some(f) = base.fenced() {
                        return Ok(StateVerdict::Divergent {
                            index: l,
                            recorded: [0; 32],
                            replayed: [0; 32],
                            why: format!("apply fenced on replay: {f}"),
                        });
                    }
                    states.history.push(l, base.checkpoint());
                }
                EntryPayload::Normal(Request::Claim(c)) => {
                    if let Err(m) = states.claim(&c, l) {
                        return Ok(StateVerdict::Divergent {
                            index: m.index,
                            recorded: m.majority.digest,
                            replayed: m.replayed.digest,
                            why: m.why,
                        });
                    }
                }
                EntryPayload::Membership(m) => states.membership(&m),
                EntryPayload::Blank => {}
            },
            ItemKind::Checkpoint(cp) => {
                // The state at `l`: after the last command at or below it (none kept: written
                // further behind than a writer ever records one; not compared).
                let Some(replayed) = states.history.at(l) else { continue };
                if replayed != cp {
                    return Ok(StateVerdict::Divergent {
                        index: l,
                        recorded: cp.digest,
                        replayed: replayed.digest,
                        why: format!(
                            "the checkpoint recorded digest {}.. over {} entities, replay gives {}.. over {}",
                            hex(&cp.digest),
                            cp.entity_count,
                            hex(&replayed.digest),
                            replayed.entity_count
                        ),
                    });
                }
                compared += 1;
                through = through.max(Some(l));
            }
        }
    }
    Ok(StateVerdict::Clean { checkpoints: compared, through, claims: states.verified })
}

impl LogStore {
    /// A handle the state machine records checkpoints with.
    pub fn checkpointer(&self) -> Checkpointer {
        Checkpointer { tx: self.sender() }
    }

    /// Opens the Raft log in `dir` and checks it against `sm` (freshly opened: its snapshot is
    /// the replay's start): the log and its state verdict. A torn tail is cut first, as any
    /// write-open does.
    pub fn open_verified(
        dir: impl AsRef<std::path::Path>,
        opts: wal::Options,
        sm: &StateMachineStore,
    ) -> io::Result<(LogStore, StateVerdict)> {
        let (wal, _report) =
            Wal::open(dir, wal::Options { first_lsn: 0, ..opts }).map_err(io::Error::other)?;
        let (base, from, membership) = sm.replay_base()?;
        let verdict = check(&wal, base, from, &membership)?;
        Ok((LogStore::start_wal(wal)?, verdict))
    }
}
