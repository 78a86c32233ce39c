//! Membership changes an operator asks for (`walraft-node client add-learner | promote |
//! remove | set-address`), run on the leader through openraft's joint consensus, each refused
//! with a reason, changing nothing, when it is unsafe or cannot complete (issue 28):
//!
//! - **Only the leader changes membership**, one change at a time: a node that is not the
//!   leader, or a leader whose previous change is still joint, refuses.
//! - **A node id names one disk forever.** A node that lost its data directory has also lost
//!   its vote, and could vote twice in one term under its old id; it rejoins under a new id
//!   (`add-learner` refuses an id that is a member). The old id is then removed.
//! - **A change must keep a quorum.** Under joint consensus both the old and the new set of
//!   voters must each have a majority that answers, or the change (and every write after it)
//!   cannot commit until enough of them come back: a removal proposed while another voter is
//!   down can wedge the cluster in its joint configuration for good if that voter's disk is
//!   lost. The leader counts the voters that acknowledged it within three heartbeat intervals
//!   and refuses a promotion or removal whose old or new voter set would lack a majority of
//!   them. (A voter that dies after this check and before the change commits still stops it:
//!   no check can see the future; bring the voter, or its disk, back.)
//! - **A learner is promoted only once it has caught up** (`add-learner` waits for that; a
//!   promotion of a learner still behind by more than a batch refuses).
//! - **Digest claims need more claim slots than voters**: a promotion to as many voters as
//!   `--checkpoint-every` refuses (`crate::claims`).
//! - **An address change asks the node there who it is** first: openraft's `SetNodes` can split
//!   the cluster's brain if the new address belongs to another node (its documentation's
//!   "Update-Node"), so the leader connects to the new address and requires the node answering
//!   there to be the one being moved.

use super::server::Ctx;
use crate::net::wire::{MembershipChange, MembershipView};
use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ChangeMembers, ServerState};
use std::collections::{BTreeMap, BTreeSet};

/// A learner this many entries or more behind the leader is not promoted.
pub const PROMOTE_MAX_LAG: u64 = 64;

/// Runs `change` on this node, which must be the leader: the membership after it, or why not.
pub async fn change(ctx: &Ctx, change: MembershipChange) -> Result<MembershipView, String> {
    let m = ctx.raft.metrics().borrow_watched().clone();
    if m.state != ServerState::Leader {
        let leader = m.current_leader.map_or("unknown".to_string(), |l| format!("node {l}"));
        return Err(format!(
            "node {} is not the leader (the leader: {leader}); send the change to the leader",
            ctx.id
        ));
    }
    let mem = m.membership_config.membership();
    if mem.get_joint_config().len() > 1 {
        return Err(
            "a membership change is still in progress (joint configuration); retry once it completes".into(),
        );
    }
    let voters: BTreeSet<u64> = mem.voter_ids().collect();
    let learners: BTreeSet<u64> = mem.learner_ids().collect();
    let members: BTreeSet<u64> = voters.union(&learners).copied().collect();
    // Who acknowledged this leader within three heartbeat intervals (a node that missed three
    // in a row is not answering): the voters that can form a quorum now.
    let answering: BTreeSet<u64> = m
        .heartbeat
        .iter()
        .flatten()
        .filter(|(_, t)| t.as_ref().is_some_and(|t| openraft::Instant::elapsed(&**t) < ctx.leader_silence))
        .map(|(id, _)| *id)
        .chain([ctx.id])
        .collect();
    let quorum = |set: &BTreeSet<u64>, what: &str| -> Result<(), String> {
        let up: BTreeSet<u64> = set.intersection(&answering).copied().collect();
        if up.len() * 2 > set.len() {
            Ok(())
        } else {
            Err(format!(
                "the {what} voters {set:?} would have {} answering ({up:?}), not a majority: the change could not commit; bring nodes back first",
                up.len()
            ))
        }
    };
    let raft = &ctx.raft;
    let result = match change {
        MembershipChange::AddLearner { id, addr } => {
            if members.contains(&id) {
                return Err(format!(
                    "node {id} is already a member; a node that lost its data directory rejoins under a new id (its old vote is gone), then the old id is removed"
                ));
            }
            raft.add_learner(id, BasicNode::new(addr), true).await
        }
        MembershipChange::Promote { ids } => {
            let ids: BTreeSet<u64> = ids.into_iter().collect();
            if let Some(id) = ids.iter().find(|id| !learners.contains(id)) {
                return Err(format!("node {id} is not a learner: add it with add-learner first"));
            }
            let last = m.last_log_index.unwrap_or(0);
            for id in &ids {
                let matched =
                    m.replication.as_ref().and_then(|r| r.get(id).cloned().flatten()).map_or(0, |l| l.index);
                if last.saturating_sub(matched) >= PROMOTE_MAX_LAG {
                    return Err(format!(
                        "learner {id} is {} entries behind the leader (at most {PROMOTE_MAX_LAG} to be promoted); wait for it to catch up",
                        last.saturating_sub(matched)
                    ));
                }
            }
            let new: BTreeSet<u64> = voters.union(&ids).copied().collect();
            if new.len() as u64 >= ctx.checkpoint_every {
                return Err(format!(
                    "{} voters need --checkpoint-every above {} (it is {}): every voter claims its digest at each claim index",
                    new.len(),
                    new.len(),
                    ctx.checkpoint_every
                ));
            }
            quorum(&voters, "current")?;
            quorum(&new, "new")?;
            raft.change_membership(ChangeMembers::AddVoterIds(ids), false).await
        }
        MembershipChange::Remove { ids } => {
            let ids: BTreeSet<u64> = ids.into_iter().collect();
            if let Some(id) = ids.iter().find(|id| !members.contains(id)) {
                return Err(format!("node {id} is not a member"));
            }
            let new: BTreeSet<u64> = voters.difference(&ids).copied().collect();
            if new.is_empty() {
                return Err("removing every voter would leave no cluster".into());
            }
            let gone_voters: BTreeSet<u64> = ids.intersection(&voters).copied().collect();
            if !gone_voters.is_empty() {
                quorum(&voters, "current")?;
                quorum(&new, "new")?;
                if let Err(e) = raft.change_membership(ChangeMembers::RemoveVoters(gone_voters), false).await
                {
                    return Err(format!("removing voters: {e}"));
                }
            }
            // Learners (and voters just removed, had they been kept as learners) go too.
            let now = raft.metrics().borrow_watched().membership_config.membership().clone();
            let left: BTreeSet<u64> = now.learner_ids().filter(|l| ids.contains(l)).collect();
            if left.is_empty() {
                return Ok(view(ctx));
            }
            raft.change_membership(ChangeMembers::RemoveNodes(left), false).await
        }
        MembershipChange::SetAddress { id, addr } => {
            if !members.contains(&id) {
                return Err(format!("node {id} is not a member"));
            }
            match who_is_at(ctx, &addr).await {
                Ok(there) if there == id => {}
                Ok(there) => {
                    return Err(format!(
                        "the node listening at {addr} is node {there}, not node {id}: setting that address could give two nodes one identity (a split brain)"
                    ))
                }
                Err(e) => return Err(format!("no node answers at {addr} ({e}): start node {id} there first")),
            }
            let nodes: BTreeMap<u64, BasicNode> = [(id, BasicNode::new(addr))].into();
            raft.change_membership(ChangeMembers::SetNodes(nodes), true).await
        }
    };
    match result {
        Ok(_) => Ok(view(ctx)),
        Err(e) => Err(e.to_string()),
    }
}

/// The membership this node follows now.
fn view(ctx: &Ctx) -> MembershipView {
    let m = ctx.raft.metrics().borrow_watched().clone();
    let mem = m.membership_config.membership();
    MembershipView {
        voters: mem.voter_ids().collect(),
        learners: mem.learner_ids().collect(),
        nodes: mem.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
        index: m.membership_config.log_id().as_ref().map(|l| l.index),
    }
}

/// The id of the node answering at `addr` (its metrics), within a few seconds.
async fn who_is_at(ctx: &Ctx, addr: &str) -> std::io::Result<u64> {
    let mut c = crate::client::Client::new(vec![addr.to_string()]);
    c.max_frame = ctx.max_frame;
    let m = tokio::time::timeout(std::time::Duration::from_secs(3), c.metrics(addr))
        .await
        .map_err(|_| std::io::Error::other("no answer within 3 s"))??;
    Ok(m.id)
}
