//! Getting a node's digest claims into the replicated log, and what a fenced node answers
//! (`crate::claims` says what a claim is and how claims are compared).
//!
//! The state machine cannot propose anything itself (it runs inside openraft's apply, which a
//! proposal would wait on), so after each claim index it hands its claim to a bounded channel
//! ([`CLAIM_QUEUE`]; full: dropped). [`run`] takes them one at a time: the leader proposes its
//! own ([`propose`]); a follower sends its claim to the leader on the node port
//! (`Msg::Claim`), and the leader proposes it. Everything here is best effort, and nothing
//! waits for a claim to commit: a claim that is lost only delays detection to the next claim
//! index. Bounds, so that a lagging or restarting node cannot flood the log: a node drops its
//! own claim when the index is more than [`CLAIM_MAX_LAG`] behind its log's end (it is
//! replaying or catching up), and the leader refuses a claim that far behind its own log, one
//! for an index it does not hold, one from a node that is not a voter, and one for an index at
//! or below the last it proposed for that node (a repeat).

use crate::claims::{Claim, ClaimStats, CLAIM_MAX_LAG};
use crate::fence::Fence;
use crate::net::frame::{read_frame_max, write_frame_max};
use crate::net::stream::{Expect, Security, Stream};
use crate::net::transport::Partition;
use crate::net::wire::{Msg, Reply, WriteReply};
use crate::node::RaftNode;
use crate::{Request, StateMachineStore};
use openraft::async_runtime::WatchReceiver;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many claims may wait to be sent; more are dropped.
pub const CLAIM_QUEUE: usize = 64;

/// How long sending one claim to the leader may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// A node's claim state, shared by its state machine, the task that sends its claims and its
/// port.
#[derive(Debug)]
pub struct Claims {
    pub id: u64,
    pub fence: Fence,
    pub stats: Arc<ClaimStats>,
    /// As leader: the last index proposed for each node.
    last: Mutex<HashMap<u64, u64>>,
}

impl Claims {
    pub fn new(id: u64, fence: Fence) -> Claims {
        Claims { id, fence, stats: Arc::default(), last: Mutex::default() }
    }
}

/// The leader's side: proposes claim `c` (its own or a follower's) unless it is out of bounds
/// or a repeat. Does not wait for the commit.
pub async fn propose(raft: &RaftNode, claims: &Claims, c: Claim) -> Result<(), String> {
    if let Some(why) = claims.fence.reason() {
        return Err(format!("node {} is fenced: {why}", claims.id));
    }
    {
        let m = raft.metrics().borrow_watched().clone();
        if m.current_leader != Some(claims.id) {
            return Err(format!("node {} is not the leader", claims.id));
        }
        let end = m.last_log_index.unwrap_or(0);
        if c.index > end {
            return Err(format!("a claim for index {} past this log's end {end}", c.index));
        }
        if c.index.saturating_add(CLAIM_MAX_LAG) < end {
            return Err(format!(
                "a claim for index {} is more than {CLAIM_MAX_LAG} behind the log's end {end}",
                c.index
            ));
        }
        if !m.membership_config.membership().voter_ids().any(|v| v == c.node) {
            return Err(format!("node {} is not a voter", c.node));
        }
        let mut last = claims.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.get(&c.node).is_some_and(|l| *l >= c.index) {
            return Err(format!("node {} already claimed index {} or later", c.node, c.index));
        }
        last.insert(c.node, c.index);
    }
    raft.client_write_ff(Request::Claim(c), None).await.map_err(|e| e.to_string())?;
    claims.stats.proposed();
    Ok(())
}

/// Sends this node's claims until the state machine drops its end of the channel.
pub async fn run(
    raft: RaftNode,
    claims: Arc<Claims>,
    mut rx: tokio::sync::mpsc::Receiver<Claim>,
    partition: Partition,
    max_frame: usize,
    security: Security,
) {
    let mut conn: Option<(String, Stream)> = None;
    while let Some(c) = rx.recv().await {
        let (leader, end, addr) = {
            let m = raft.metrics().borrow_watched().clone();
            let addr = m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l).map(|n| n.addr.clone()));
            (m.current_leader, m.last_log_index.unwrap_or(0), addr)
        };
        let r = if claims.fence.reason().is_some() {
            Err("fenced".to_string())
        } else if c.index.saturating_add(CLAIM_MAX_LAG) < end {
            Err("too far behind".to_string())
        } else {
            match (leader, addr) {
                (Some(l), _) if l == claims.id => propose(&raft, &claims, c).await,
                (Some(l), Some(addr)) if !partition.is_on() => {
                    send(&mut conn, (l, &addr), c, max_frame, &security).await
                }
                _ => Err("no leader reachable".to_string()),
            }
        };
        match r {
            Ok(()) => claims.stats.sent(),
            Err(_) => claims.stats.dropped(),
        }
    }
}

/// Sends `c` to the leader (its id and address) on the kept connection (made anew after any
/// failure).
async fn send(
    conn: &mut Option<(String, Stream)>,
    (leader, addr): (u64, &str),
    c: Claim,
    max_frame: usize,
    security: &Security,
) -> Result<(), String> {
    let r = tokio::time::timeout(SEND_TIMEOUT, async {
        if conn.as_ref().is_none_or(|(a, _)| a != addr) {
            let s = security
                .connect_greeted(addr, Expect::Node(leader), max_frame)
                .await
                .map_err(|e| e.to_string())?;
            *conn = Some((addr.to_string(), s));
        }
        let Some((_, s)) = conn.as_mut() else { return Err("no connection".to_string()) };
        write_frame_max(s, &Msg::Claim(c), &[], max_frame).await.map_err(|e| e.to_string())?;
        match read_frame_max::<_, Reply>(s, max_frame).await.map_err(|e| e.to_string())? {
            Some((Reply::Claim(r), _)) => Ok(r),
            Some((other, _)) => Err(format!("unexpected reply {other:?}")),
            None => Err(format!("{addr} closed the connection")),
        }
    })
    .await
    .unwrap_or_else(|_| Err(format!("{addr}: no reply in time")));
    match r {
        Ok(answer) => answer,
        Err(e) => {
            *conn = None;
            Err(e)
        }
    }
}

/// The test-only state alteration (`Msg::AlterState`, `--allow-faults`): the divergence the
/// claims exist to catch, made on purpose.
pub async fn alter(
    raft: &RaftNode,
    id: u64,
    allow_faults: bool,
    command_untrusted: &[u8],
) -> Result<Option<u64>, String> {
    if !allow_faults {
        return Err("altering the state is for tests: start the node with --allow-faults".into());
    }
    let cmd =
        catalog::Command::decode(command_untrusted).map_err(|e| format!("not a catalog command: {e}"))?;
    let r = raft
        .with_state_machine(move |sm: &mut StateMachineStore| {
            let r = sm.alter_for_test(&cmd);
            Box::pin(async move { r })
        })
        .await
        .map_err(|e| format!("the state machine is unavailable: {e}"))??;
    tracing::warn!(node = id, "state ALTERED in memory (test fault) after index {r:?}");
    Ok(r)
}

/// What a fenced node answers instead of serving `msg` (`None`: serve it: metrics, and the
/// partition switch).
pub fn fenced_reply(msg: &Msg, node: u64, why: &str) -> Option<Reply> {
    let fenced = format!("node {node} is fenced (its state diverged from a majority's): {why}");
    match msg {
        Msg::Metrics | Msg::Partition { .. } | Msg::Greet => None,
        // Nothing was appended here: the client may write elsewhere.
        Msg::Write { .. } => {
            Some(Reply::Write(WriteReply::Rejected { why: format!("not appended: {fenced}"), retry: true }))
        }
        _ => Some(Reply::Error(fenced)),
    }
}
