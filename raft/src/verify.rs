//! The state verdict of a Raft node's log at start, and what it means for joining the cluster
//! (docs/invariants.md I8: a DIVERGENT node does not join as a voter, and says why).
//!
//! The state machine records checkpoints (the apply seam's digest after an entry, FORMAT.md
//! 10.3) into the log through a [`Checkpointer`](crate::Checkpointer). At open, [`LogStore::open_verified`]
//! replays the log after the state machine's snapshot through the same apply function and
//! compares every checkpoint with the state at its own index: **CLEAN** when all agree,
//! **DIVERGENT** (with the index and both digests) at the first that does not, at an entry the
//! seam cannot apply, or at a checkpoint of versions this build does not know (it cannot say
//! the state agrees). [`start_role`] turns the verdict into the role the node may start in: a
//! voter, or refused. The replay is `claims::Replayed`, the one `walraft-node check` runs
//! (`check.rs`), over `wal_state::Replayer`, the core the pipeline and walcheck use.
//!
//! The same replay compares the digest claims the log holds (issue 21, `claims/`): at every
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
use catalog::Catalog;
use std::io;
use wal::{Checkpoint, Durability, ItemKind, Lsn, Wal};
use wal_state::Applier;

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
/// majority of the voters claimed after an index past the snapshot (`claims/`).
pub(crate) fn check(
    wal: &Wal,
    base: Applier<Catalog>,
    from: u64,
    membership: &crate::Membership,
) -> io::Result<StateVerdict> {
    let mut replayed = Replayed::new(base, from.checked_sub(1), membership);
    let mut replay = wal.replay_from(Some(Lsn(from)), Durability::Written).map_err(io::Error::other)?;
    let (mut n, mut stopped_at) = (0u64, from);
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
            ItemKind::Entry => replayed.entry(&codec::decode_entry(l, item.payload)?),
            ItemKind::Checkpoint(cp) => replayed.checkpoint(l, &cp),
        }
        if replayed.stopped() {
            stopped_at = l;
            break;
        }
    }
    let claims = replayed.verified;
    let (_, report, mismatch) = replayed.finish();
    Ok(if let Some(m) = mismatch {
        StateVerdict::Divergent {
            index: m.index,
            recorded: m.majority.digest,
            replayed: m.replayed.digest,
            why: m.why,
        }
    } else if let Some(d) = report.divergence {
        let why = match (d.recorded, d.replayed) {
            (Some(r), Some(p)) => format!(
                "the checkpoint recorded digest {}.. over {} entities, replay gives {}.. over {}",
                hex(&r.digest),
                r.entity_count,
                hex(&p.digest),
                p.entity_count
            ),
            _ => d.reason,
        };
        let digest = |c: Option<Checkpoint>| c.map_or([0; 32], |c| c.digest);
        StateVerdict::Divergent {
            index: d.lsn.0,
            recorded: digest(d.recorded),
            replayed: digest(d.replayed),
            why,
        }
    } else if let Some(u) = report.unsupported {
        // A checkpoint this build cannot compare: not known to agree, so not a voter.
        StateVerdict::Divergent { index: stopped_at, recorded: [0; 32], replayed: [0; 32], why: u }
    } else {
        StateVerdict::Clean {
            checkpoints: report.checkpoints_checked,
            through: report.verified_through.map(|l| l.0).filter(|_| report.checkpoints_checked > 0),
            claims,
        }
    })
}

impl LogStore {
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
