//! Membership changes an operator asks for (`walraft-node client add-learner | promote |
//! remove | set-address`), run on the leader through openraft's joint consensus, each refused
//! with a reason, changing nothing, when it is unsafe or cannot complete (issue 28):
//!
//! - **Only the leader changes membership**, one change at a time: a node that is not the
//!   leader refuses; changes on one leader are serialized (a lock), and each is proposed only
//!   while the membership is still the one it was checked against (openraft's
//!   `LastMembershipLogId` precondition). A joint configuration a previous leader left behind
//!   (it stopped between the two steps) is finished first, its quorum checked like any change.
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
//! - **An address is asked who it is** before it is used: openraft's `SetNodes` can split the
//!   cluster's brain if the new address belongs to another node (its documentation's
//!   "Update-Node"), and `add-learner` with another member's address would give one process two
//!   votes. The leader connects to the address and requires the node answering there to be the
//!   one named (`add-learner` also refuses an address a member has); a moved node must also hold
//!   the log the leader already gave it (not an empty directory started under its id). Every
//!   Raft connection then says which node it is for (`Msg::Hello`), so a wrong address that
//!   slipped through still reaches no node under an id that is not its own.
//! - **Refused** means nothing was proposed; a failure after proposing is **indeterminate**
//!   (part of the change may have been made: `client status` shows the membership).

use super::ctx::Ctx;
use crate::net::frame::{read_frame_max, write_frame_max};
use crate::net::stream::Expect;
use crate::net::wire::{MembershipChange, MembershipFailure, MembershipView, Msg, Reply};
use crate::TypeConfig;
use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ChangeMembers, Precondition, RaftMetrics, ServerState};
use std::collections::{BTreeMap, BTreeSet};

/// A learner this many entries or more behind the leader is not promoted.
pub const PROMOTE_MAX_LAG: u64 = 64;

type Outcome = Result<MembershipView, MembershipFailure>;

fn refused(why: impl Into<String>) -> MembershipFailure {
    MembershipFailure::Refused(why.into())
}

/// Runs `change` on this node, which must be the leader: the membership after it, or why not.
pub async fn change(ctx: &Ctx, change: MembershipChange) -> Outcome {
    let _one_at_a_time = ctx.membership_lock.lock().await;
    let mut m = ctx.raft.metrics().borrow_watched().clone();
    leading(ctx, &m)?;
    if m.membership_config.membership().get_joint_config().len() > 1 {
        finish_joint(ctx, &m).await?;
        m = ctx.raft.metrics().borrow_watched().clone();
        leading(ctx, &m)?;
    }
    let mem = m.membership_config.membership().clone();
    let voters: BTreeSet<u64> = mem.voter_ids().collect();
    let learners: BTreeSet<u64> = mem.learner_ids().collect();
    let members: BTreeMap<u64, String> = mem.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
    let raft = &ctx.raft;
    let proposed = match change {
        MembershipChange::AddLearner { id, addr } => {
            if members.contains_key(&id) {
                return Err(refused(format!(
                    "node {id} is already a member; a node that lost its data directory rejoins under a new id (its old vote is gone), then the old id is removed"
                )));
            }
            check_address(ctx, &members, id, &addr).await?;
            raft.add_learner(id, BasicNode::new(addr), true).await.map(|_| ()).map_err(|e| e.to_string())
        }
        MembershipChange::Promote { ids } => {
            let ids: BTreeSet<u64> = ids.into_iter().collect();
            if let Some(id) = ids.iter().find(|id| !learners.contains(id)) {
                return Err(refused(format!("node {id} is not a learner: add it with add-learner first")));
            }
            let last = m.last_log_index.unwrap_or(0);
            for id in &ids {
                let behind = last.saturating_sub(matched(&m, *id));
                if behind >= PROMOTE_MAX_LAG {
                    return Err(refused(format!(
                        "learner {id} is {behind} entries behind the leader (at most {PROMOTE_MAX_LAG} to be promoted); wait for it to catch up"
                    )));
                }
            }
            let new: BTreeSet<u64> = voters.union(&ids).copied().collect();
            if new.len() as u64 >= ctx.checkpoint_every {
                return Err(refused(format!(
                    "{} voters need --checkpoint-every above {} (it is {}): every voter claims its digest at each claim index",
                    new.len(),
                    new.len(),
                    ctx.checkpoint_every
                )));
            }
            quorum(ctx, &m, &voters, "current")?;
            quorum(ctx, &m, &new, "new")?;
            propose(ctx, &m, ChangeMembers::AddVoterIds(ids), false).await
        }
        MembershipChange::Remove { ids } => {
            let ids: BTreeSet<u64> = ids.into_iter().collect();
            if let Some(id) = ids.iter().find(|id| !members.contains_key(id)) {
                return Err(refused(format!("node {id} is not a member")));
            }
            let new: BTreeSet<u64> = voters.difference(&ids).copied().collect();
            if new.is_empty() {
                return Err(refused("removing every voter would leave no cluster"));
            }
            let gone_voters: BTreeSet<u64> = ids.intersection(&voters).copied().collect();
            if !gone_voters.is_empty() {
                quorum(ctx, &m, &voters, "current")?;
                quorum(ctx, &m, &new, "new")?;
                if let Err(e) = propose(ctx, &m, ChangeMembers::RemoveVoters(gone_voters), false).await {
                    return Err(MembershipFailure::Indeterminate(format!("removing voters: {e}")));
                }
            }
            // Learners (and voters just removed, had they been kept as learners) go too.
            let now = raft.metrics().borrow_watched().clone();
            let left: BTreeSet<u64> =
                now.membership_config.membership().learner_ids().filter(|l| ids.contains(l)).collect();
            if left.is_empty() {
                return Ok(view(ctx));
            }
            propose(ctx, &now, ChangeMembers::RemoveNodes(left), false).await
        }
        MembershipChange::SetAddress { id, addr } => {
            if !members.contains_key(&id) {
                return Err(refused(format!("node {id} is not a member")));
            }
            let there = check_address(ctx, &members, id, &addr).await?;
            // The checks above took time: decide on the membership as it is now.
            let m = ctx.raft.metrics().borrow_watched().clone();
            leading(ctx, &m)?;
            let given = matched(&m, id);
            if there.last_log_index.unwrap_or(0) < given {
                return Err(refused(format!(
                    "the node at {addr} says it is node {id} but holds the log only to index {} where the leader had given node {id} index {given}: an empty or older data directory under its id (start it with its own data directory, or rejoin it under a new id)",
                    there.last_log_index.map_or("-".into(), |i| i.to_string())
                )));
            }
            let nodes: BTreeMap<u64, BasicNode> = [(id, BasicNode::new(addr))].into();
            propose(ctx, &m, ChangeMembers::SetNodes(nodes), true).await
        }
    };
    match proposed {
        Ok(()) => Ok(view(ctx)),
        Err(e) => Err(MembershipFailure::Indeterminate(e)),
    }
}

/// Refuses unless this node leads.
fn leading(ctx: &Ctx, m: &RaftMetrics<TypeConfig>) -> Result<(), MembershipFailure> {
    if m.state == ServerState::Leader {
        return Ok(());
    }
    let leader = m.current_leader.map_or("unknown".to_string(), |l| format!("node {l}"));
    Err(refused(format!(
        "node {} is not the leader (the leader: {leader}); send the change to the leader",
        ctx.id
    )))
}

/// The index the leader last knew `id` to hold (0 when none).
fn matched(m: &RaftMetrics<TypeConfig>, id: u64) -> u64 {
    m.replication.as_ref().and_then(|r| r.get(&id).cloned().flatten()).map_or(0, |l| l.index)
}

/// Refuses when fewer than a majority of `set` acknowledged this leader within three heartbeat
/// intervals (a node that missed three in a row is not answering).
fn quorum(
    ctx: &Ctx,
    m: &RaftMetrics<TypeConfig>,
    set: &BTreeSet<u64>,
    what: &str,
) -> Result<(), MembershipFailure> {
    let answering: BTreeSet<u64> = m
        .heartbeat
        .iter()
        .flatten()
        .filter(|(_, t)| t.as_ref().is_some_and(|t| openraft::Instant::elapsed(&**t) < ctx.leader_silence))
        .map(|(id, _)| *id)
        .chain([ctx.id])
        .collect();
    let up: BTreeSet<u64> = set.intersection(&answering).copied().collect();
    if up.len() * 2 > set.len() {
        Ok(())
    } else {
        Err(refused(format!(
            "the {what} voters {set:?} would have {} answering ({up:?}), not a majority: the change could not commit; bring nodes back first",
            up.len()
        )))
    }
}

/// Proposes `members` only while the membership is still the one `m` shows.
async fn propose(
    ctx: &Ctx,
    m: &RaftMetrics<TypeConfig>,
    members: ChangeMembers<u64, BasicNode>,
    retain: bool,
) -> Result<(), String> {
    let last = *m.membership_config.log_id();
    let pre = [Precondition::LastMembershipLogId { last_membership_log_id: last }];
    ctx.raft.change_membership_if(members, retain, pre).await.map(|_| ()).map_err(|e| e.to_string())
}

/// Finishes a joint configuration a previous leader left behind (it stopped between the two
/// steps): openraft never finishes one by itself. Every configuration of the joint one must
/// have a majority answering, as for any change.
async fn finish_joint(ctx: &Ctx, m: &RaftMetrics<TypeConfig>) -> Result<(), MembershipFailure> {
    for (i, set) in m.membership_config.membership().get_joint_config().iter().enumerate() {
        quorum(ctx, m, set, if i == 0 { "joint configuration's old" } else { "joint configuration's new" })?;
    }
    tracing::info!(node = ctx.id, "finishing a joint membership a previous change left behind");
    propose(ctx, m, ChangeMembers::AddVoterIds(BTreeSet::new()), false).await.map_err(|e| {
        MembershipFailure::Indeterminate(format!("finishing the joint configuration left behind: {e}"))
    })
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

/// Refuses `addr` for node `id` when another member has it, or when the node answering there
/// is not node `id` (two ids on one process, or two processes under one id, split the
/// cluster's votes); what that node says of itself otherwise.
async fn check_address(
    ctx: &Ctx,
    members: &BTreeMap<u64, String>,
    id: u64,
    addr: &str,
) -> Result<crate::net::wire::NodeMetrics, MembershipFailure> {
    if let Some((other, _)) = members.iter().find(|(o, a)| *a == addr && **o != id) {
        return Err(refused(format!("{addr} is node {other}'s address")));
    }
    let there = who_is_at(ctx, id, addr)
        .await
        .map_err(|e| refused(format!("no node answers at {addr} ({e}): start node {id} there first")))?;
    if there.id != id {
        return Err(refused(format!(
            "the node listening at {addr} is node {}, not node {id}: one process under two ids, or two under one, would split the cluster's votes",
            there.id
        )));
    }
    Ok(there)
}

/// What the node answering at `addr` says of itself (its metrics), within a few seconds. With
/// TLS the server must hold node `id`'s certificate: what a process merely says of itself is
/// not what makes it node `id`.
async fn who_is_at(ctx: &Ctx, id: u64, addr: &str) -> std::io::Result<crate::net::wire::NodeMetrics> {
    let ask = async {
        // Plaintext: the answer below says which node it is, and the caller compares.
        let expect = if ctx.security.is_tls() { Expect::Node(id) } else { Expect::AnyNode };
        let mut s = ctx.security.connect_greeted(addr, expect, ctx.max_frame).await?;
        write_frame_max(&mut s, &Msg::Metrics, &[], ctx.max_frame).await?;
        match read_frame_max::<_, Reply>(&mut s, ctx.max_frame).await? {
            Some((Reply::Metrics(m), _)) => Ok(*m),
            Some((other, _)) => Err(std::io::Error::other(format!("answered metrics with {other:?}"))),
            None => Err(std::io::Error::other("closed the connection")),
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(3), ask)
        .await
        .map_err(|_| std::io::Error::other("no answer within 3 s"))?
}
