//! A node's TCP port: one task per connection, one reply frame per request frame.
//!
//! - A connection is served only once `net/stream.rs` accepted it (mutual TLS and a certificate
//!   naming a role, or plaintext between loopback addresses), and each request only if that
//!   identity may ask it (`net/access.rs`): a write needs a writer's or a node's certificate, a
//!   membership change or a fault switch an admin's, a Raft message or a claim the sending
//!   node's own. A refused write is answered Rejected (nothing appended), a refused membership
//!   change Refused; a refused Raft message closes the connection unanswered, as a stranger's
//!   would be, and never reaches openraft. A Raft message must also come from the node that
//!   said hello on its connection (the leader or candidate it names, `Msg::raft_sender`): one
//!   node's certificate cannot vote or lead as another.
//! - A request frame longer than this node's limit is answered `Reply::TooLarge` (its length
//!   and the limit), its body skipped, and the connection kept (`next_request`; why skip
//!   and not close: `net/frame.rs`); a length past any frame a conforming peer sends is
//!   answered and the connection closed, its body unread. This holds while the partition switch is on too: the
//!   frame was not read, so it may be a client's as well as a peer's, and the answer (nothing
//!   was read, nothing done) is true of either.
//! - Raft RPCs go straight to openraft. While the partition switch is on they are dropped:
//!   the connection is closed without a reply, as a cut network would (the sender sees
//!   `Unreachable`). A reply computed while the switch went on is dropped too.
//! - A client write (its command is the frame's raw tail) is decoded first (bytes that are not a
//!   catalog command, or a command whose log entry no append-entries frame could carry,
//!   `net/limit.rs`, are Rejected and never logged), wrapped in the apply seam's envelope with
//!   the client's request id, and proposed. Only a commit by a majority is acknowledged
//!   (`Committed`, with its index); a proposal refused before it was appended is `Rejected`; a
//!   proposal that may be in some log but is not known committed is `Indeterminate`. A leader
//!   does not wait for a commit it can no longer make: when it stops leading or its lease lapses
//!   while a write waits, the write is answered at once ([`super::stall`]), not after the write
//!   timeout.
//! - A follower that knows the leader forwards a client's write to it (same request id, marked
//!   forwarded so it is never forwarded again) and answers with the leader's reply (a leader with
//!   a smaller frame limit, a misconfiguration, answers `TooLarge`: the follower answers
//!   `Rejected`, since the leader read nothing): the client needs no second round trip. When the
//!   leader cannot be reached (nothing was sent; a pooled connection the leader has closed
//!   since is dropped unused, `net/idle.rs`), or the write was itself forwarded, the answer
//!   is a `Redirect` to the leader, as before; when the connection fails after the write was
//!   sent, or another node leads or the leader falls silent before it answered (it may be stopped
//!   and never answer), `Indeterminate` (it may have been appended). A follower whose leader has
//!   been silent for three heartbeats does not forward: `Rejected`, retry ([`super::stall`]).
//! - Admin requests read this node's metrics and applied state.
//! - A follower's digest claim is proposed if this node leads (`node/claims.rs`). A node that
//!   fenced itself answers only metrics and the partition switch: a write is Rejected (nothing
//!   was appended here), everything else an error naming the fence.

use crate::net::access::Identity;
use crate::net::admission::{Handshakes, RefusalLog, IN_HANDSHAKE};
use crate::net::chunks::{self, Chunk, Incoming};
use crate::net::frame::{read_frame_max, read_next, skip_body, write_frame_max, Next};
use crate::net::limit;
use crate::net::stream::{Expect, Security, Stream};
use crate::net::transport::Partition;
use crate::net::wire::{EntityView, MembershipFailure, Msg, NodeMetrics, Reply, WriteReply};
use crate::node::{stall, RaftNode};
use crate::{Request, StateMachineStore};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, ForwardReason, ForwardToLeader, RaftError};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// What every connection task shares.
#[derive(Debug)]
pub struct Ctx {
    pub raft: RaftNode,
    pub id: u64,
    pub partition: Partition,
    pub allow_faults: bool,
    pub write_timeout: Duration,
    /// The leader lease (openraft's: `election_timeout_max`): a leader no majority acknowledged
    /// for this long answers its waiting writes at once ([`stall`]).
    pub lease: Duration,
    /// When a leader's message last arrived, and how long a silence means a stalled leader
    /// ([`stall::silence`]): a follower does not forward to a silent leader.
    pub contact: stall::Contact,
    pub leader_silence: Duration,
    /// The log writer's counters; `None` on another log store ([`super::start_on`]).
    pub io_stats: Option<crate::IoStatsHandle>,
    /// The largest frame this node reads or writes (`NodeConfig::max_frame_bytes`).
    pub max_frame: usize,
    /// Idle connections to other nodes' ports, for forwarded writes, by the node each was
    /// opened to (and verified as) and its address: a connection to one node is never used
    /// for another that took its address.
    pub forward_pool: tokio::sync::Mutex<std::collections::HashMap<(u64, String), Vec<Stream>>>,
    /// How connections are secured, accepted and opened (`net/stream.rs`).
    pub security: Security,
    /// Digest claims (`node/claims.rs`) and this node's fence.
    pub claims: Arc<crate::node::claims::Claims>,
    /// Claim indexes are its multiples (`NodeConfig::checkpoint_every`): more than the voters.
    pub checkpoint_every: u64,
    /// Held through a membership change: one at a time on this leader (`node/membership.rs`).
    pub membership_lock: tokio::sync::Mutex<()>,
}

/// Accepts connections until the task is aborted, each given its place among the handshakes
/// in progress (`net/admission.rs`); and looks at the TLS files once a second, so a changed
/// certificate or authority takes effect without waiting for a new connection (`net/tls.rs`).
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    let handshakes = Handshakes::new(IN_HANDSHAKE);
    let refusals = Arc::new(RefusalLog::default());
    let mut look = tokio::time::interval(Duration::from_secs(1));
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = look.tick() => {
                if let Security::Tls(files) = &ctx.security {
                    files.look();
                }
                continue;
            }
        };
        match accepted {
            Ok((s, _)) => {
                let place = handshakes.admit();
                let (ctx, refusals) = (ctx.clone(), refusals.clone());
                tokio::spawn(async move {
                    let accepted = tokio::select! {
                        a = ctx.security.accept(s, ctx.max_frame) => a,
                        _ = place.dropped() => Err(format!(
                            "dropped a connection still in its handshake: more than {IN_HANDSHAKE} at once"
                        )),
                    };
                    drop(place);
                    let (s, who) = match accepted {
                        Ok(a) => a,
                        Err(why) => {
                            if let Some(line) = refusals.refused(std::time::Instant::now(), &why) {
                                tracing::warn!(node = ctx.id, "refused a connection: {line}");
                            }
                            return;
                        }
                    };
                    // A connection's failure ends that connection only.
                    let _ = connection(s, &who, &ctx).await;
                });
            }
            // Out of descriptors or similar: wait a little rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The next request on `s`, or `None` to close the connection: the peer closed it, or the TLS
/// material changed and the peer's certificate no longer verifies (a revoked certificate ends
/// its kept connections too). The read in progress is kept, not cancelled, while the
/// certificate is checked again, so no request is cut.
async fn next_checked(
    s: &mut Stream,
    who: &Identity,
    changes: &mut Option<(tokio::sync::watch::Receiver<u64>, Arc<crate::net::tls::TlsFiles>)>,
    ctx: &Ctx,
) -> io::Result<Option<(Msg, Vec<u8>)>> {
    let Some((rx, files)) = changes else { return next_request(s, ctx.max_frame).await };
    let read = next_request(s, ctx.max_frame);
    tokio::pin!(read);
    loop {
        tokio::select! {
            r = &mut read => return r,
            Ok(()) = rx.changed() => {
                rx.borrow_and_update();
                if !who.chain().is_some_and(|c| files.trusts_client(c)) {
                    tracing::warn!(
                        node = ctx.id,
                        "closed a connection from {}: its certificate no longer verifies against the reloaded authority",
                        who.describe()
                    );
                    return Ok(None);
                }
            }
        }
    }
}

async fn connection(mut s: Stream, who: &Identity, ctx: &Ctx) -> io::Result<()> {
    let mut served = 0u64;
    // A snapshot being received in chunks on this connection.
    let mut incoming = None;
    // The node that said hello to this node on this connection (`Msg::Hello`): Raft messages
    // need one, and must come from it.
    let mut greeted: Option<u64> = None;
    let mut changes = match (&ctx.security, who.chain()) {
        (Security::Tls(files), Some(_)) => Some((files.changes(), files.clone())),
        _ => None,
    };
    while let Some((msg, tail)) = next_checked(&mut s, who, &mut changes, ctx).await? {
        served += 1;
        let raft = msg.is_raft();
        if raft && ctx.partition.is_on() {
            return Ok(());
        }
        if let Err(why) = who.permits(&msg) {
            let denied = match &msg {
                Msg::Write { .. } => {
                    Reply::Write(WriteReply::Rejected { why: format!("not appended: {why}"), retry: false })
                }
                Msg::Membership(_) => Reply::Membership(Err(MembershipFailure::Refused(why.clone()))),
                Msg::Hello { .. } => Reply::Hello(Err(why.clone())),
                m if m.is_raft() => {
                    tracing::warn!(node = ctx.id, "closed a connection that sent a Raft message: {why}");
                    return Ok(());
                }
                _ => Reply::Error(why.clone()),
            };
            tracing::warn!(node = ctx.id, "refused a request: {why}");
            write_frame_max(&mut s, &denied, &[], ctx.max_frame).await?;
            if matches!(msg, Msg::Hello { .. }) {
                return Ok(());
            }
            continue;
        }
        if let Msg::Hello { from, to } = msg {
            if to != ctx.id {
                let why = format!(
                    "this is node {}, not node {to} (node {from} has a wrong address for it)",
                    ctx.id
                );
                tracing::warn!(node = ctx.id, "refused a peer connection: {why}");
                write_frame_max(&mut s, &Reply::Hello(Err(why)), &[], ctx.max_frame).await?;
                return Ok(());
            }
            greeted = Some(from);
            write_frame_max(&mut s, &Reply::Hello(Ok(())), &[], ctx.max_frame).await?;
            continue;
        }
        if msg.needs_hello() && greeted.is_none() {
            let why = "a Raft message on a connection that did not say which node it is for (Hello first)";
            write_frame_max(&mut s, &Reply::Error(why.into()), &[], ctx.max_frame).await?;
            return Ok(());
        }
        if let (Some(from), Some(sender)) = (greeted, msg.raft_sender()) {
            if from != sender {
                // Node `from`'s certificate speaking for another node: closed unanswered, like
                // any Raft message this connection may not send; openraft never sees it.
                tracing::warn!(
                    node = ctx.id,
                    "closed a connection from node {from} that sent a Raft message as node {sender}"
                );
                return Ok(());
            }
        }
        let reply = handle(ctx, msg, tail, &mut incoming).await;
        if raft && ctx.partition.is_on() {
            return Ok(());
        }
        write_frame_max(&mut s, &reply, &[], ctx.max_frame).await?;
        debug_assert!(served < u64::MAX);
    }
    Ok(())
}

/// The next request on `s` of at most `max` bytes; `None` when the peer closed the connection.
/// A longer frame is answered here, `Reply::TooLarge`, and its body skipped; then the next.
async fn next_request<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    max: usize,
) -> io::Result<Option<(Msg, Vec<u8>)>> {
    loop {
        match read_next::<_, Msg>(s, max).await? {
            Next::Frame(msg, tail) => return Ok(Some((msg, tail))),
            Next::Closed => return Ok(None),
            Next::TooLarge(t) => {
                // The answer first: a peer that reads while it sends learns at once, and one
                // that reads after sending finds it waiting.
                write_frame_max(s, &Reply::TooLarge(t), &[], max).await?;
                skip_body(s, t).await?;
            }
        }
    }
}

async fn handle(ctx: &Ctx, msg: Msg, tail: Vec<u8>, incoming: &mut Option<Incoming>) -> Reply {
    let raft = &ctx.raft;
    if let Some(why) = ctx.claims.fence.reason() {
        if let Some(r) = crate::node::claims::fenced_reply(&msg, ctx.id, why) {
            return r;
        }
    }
    match msg {
        Msg::AppendEntries(head) => Reply::AppendEntries(match crate::net::append::decode(head, &tail) {
            Ok(rpc) => {
                // Only a leader sends these: evidence that it runs and reaches this node.
                ctx.contact.touch();
                raft.append_entries(rpc).await.map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }),
        Msg::Vote(rpc) => Reply::Vote(raft.vote(rpc).await.map_err(|e| e.to_string())),
        Msg::PreVote(rpc) => Reply::Vote(raft.pre_vote(rpc).await.map_err(|e| e.to_string())),
        Msg::SnapshotChunk { vote, meta, offset, total } => {
            ctx.contact.touch();
            let got = offset + tail.len() as u64;
            match chunks::accept(incoming, Chunk { vote, meta, offset, total, data: tail }) {
                Ok(None) => Reply::Chunk(Ok(got)),
                Ok(Some((vote, snap))) => {
                    Reply::Snapshot(raft.install_full_snapshot(vote, snap).await.map_err(|e| e.to_string()))
                }
                Err(why) => Reply::Chunk(Err(why)),
            }
        }
        Msg::Write { request_id, forwarded } => Reply::Write(write(ctx, &tail, request_id, forwarded).await),
        Msg::Metrics => Reply::Metrics(Box::new(metrics(ctx).await)),
        Msg::Lookup { parent, name } => lookup(ctx, parent, name).await,
        Msg::Partition { on } => Reply::Partition(if ctx.allow_faults {
            ctx.partition.set(on);
            tracing::warn!(node = ctx.id, "partition switch {}", if on { "ON" } else { "off" });
            Ok(on)
        } else {
            Err("the partition switch is for tests: start the node with --allow-faults".into())
        }),
        Msg::Claim(c) => Reply::Claim(crate::node::claims::propose(raft, &ctx.claims, c).await),
        Msg::Membership(change) => Reply::Membership(crate::node::membership::change(ctx, change).await),
        Msg::Greet => Reply::Greet { node: ctx.id },
        // Answered by the connection loop, before any message that needs it.
        Msg::Hello { .. } => Reply::Error("hello is answered once, first on a connection".into()),
        Msg::AlterState { command } => {
            Reply::Altered(crate::node::claims::alter(raft, ctx.id, ctx.allow_faults, &command).await)
        }
    }
}

fn forward(ctx: &Ctx, f: &ForwardToLeader<crate::TypeConfig>) -> WriteReply {
    match (f.leader_id, &f.leader_node) {
        (Some(l), Some(n)) if l != ctx.id => WriteReply::Redirect { leader: l, addr: n.addr.clone() },
        _ => {
            let why = match f.reason {
                ForwardReason::LeaseExpired => {
                    "this leader's lease is not established or has expired (right after an election, or cut off from a majority)"
                }
                ForwardReason::LeadershipTransfer => "leadership is being transferred",
                ForwardReason::NotLeader => "no leader is known yet",
            };
            WriteReply::Rejected { why: format!("not appended: {why}; retry"), retry: true }
        }
    }
}

/// Sends a write (`msg` and its command, `tail`) to the leader `leader` at `addr` on a pooled
/// connection and returns its reply. `Err` with `sent == false`: nothing reached the leader
/// (no connection, the partition switch).
async fn forward_to(
    ctx: &Ctx,
    leader: u64,
    addr: &str,
    msg: &Msg,
    tail: &[u8],
) -> Result<WriteReply, (bool, String)> {
    if ctx.partition.is_on() {
        return Err((false, "partitioned (test fault switch)".into()));
    }
    // A pooled connection the leader closed since (it stopped or restarted) is dropped
    // unused: a write sent into it would be answered Indeterminate though nothing read it.
    let kept = ctx.forward_pool.lock().await.get_mut(&(leader, addr.to_string())).and_then(|conns| {
        std::iter::from_fn(|| conns.pop()).find_map(|mut s| s.reusable(&ctx.security).then_some(s))
    });
    let mut s = match kept {
        Some(s) => s,
        None => {
            // Connected and greeted (the leader accepted this node's certificate) before the
            // write is sent: a refusal here sent nothing.
            let connect = ctx.security.connect_greeted(addr, Expect::Node(leader), ctx.max_frame);
            match tokio::time::timeout(Duration::from_secs(1), connect).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err((false, format!("connecting to {addr}: {e}"))),
                Err(_) => return Err((false, format!("connecting to {addr}: timed out"))),
            }
        }
    };
    // The leader answers within its own write timeout; a little more for the hop.
    let r = tokio::time::timeout(ctx.write_timeout + Duration::from_secs(1), async {
        write_frame_max(&mut s, msg, tail, ctx.max_frame).await?;
        read_frame_max::<_, Reply>(&mut s, ctx.max_frame).await
    })
    .await;
    // A reply read whole leaves the connection in step (after TooLarge too: the leader skipped
    // the body), so it goes back to the pool.
    let reply = match r {
        Ok(Ok(Some((Reply::Write(w), _)))) => w,
        Ok(Ok(Some((Reply::TooLarge(t), _)))) => WriteReply::Rejected {
            why: format!(
                "{}; every node of a cluster must use the same --max-frame-bytes",
                limit::refused_why(t, &format!("the leader's (node {leader} at {addr})"))
            ),
            retry: false,
        },
        Ok(Ok(Some((other, _)))) => return Err((true, format!("unexpected reply {other:?}"))),
        Ok(Ok(None)) => return Err((true, format!("{addr} closed the connection"))),
        Ok(Err(e)) => return Err((true, e.to_string())),
        Err(_) => return Err((true, format!("{addr}: no reply in time"))),
    };
    ctx.forward_pool.lock().await.entry((leader, addr.to_string())).or_default().push(s);
    Ok(reply)
}

async fn write(ctx: &Ctx, command_untrusted: &[u8], request_id: u64, forwarded: bool) -> WriteReply {
    let cmd = match catalog::Command::decode(command_untrusted) {
        Ok(c) => c,
        Err(e) => return WriteReply::Rejected { why: format!("not a catalog command: {e}"), retry: false },
    };
    // An entry no append-entries frame could carry must never be proposed (`net/limit.rs`).
    if let Some(refused) =
        limit::check(command_untrusted.len(), request_id, forwarded, ctx.max_frame, "this node's")
    {
        return refused;
    }
    let req = Request::command(&cmd, (request_id != 0).then_some(request_id));
    let leading = stall::Leading::now(&ctx.raft);
    let proposal = ctx.raft.client_write(req);
    tokio::pin!(proposal);
    let result = tokio::select! {
        biased;
        r = &mut proposal => r,
        _ = tokio::time::sleep(ctx.write_timeout) => return WriteReply::Indeterminate {
            why: format!(
                "not known committed within {:?}: the log decides its fate; retry with the same request id",
                ctx.write_timeout
            ),
        },
        why = stall::cannot_commit(&ctx.raft, leading, ctx.lease) => {
            match tokio::time::timeout(stall::REFUSAL_GRACE, &mut proposal).await {
                Ok(r) => r,
                Err(_) => return WriteReply::Indeterminate {
                    why: format!(
                        "not known committed: {why}; it may be in this node's log, and a later leader decides its fate; retry at another node with the same request id"
                    ),
                },
            }
        }
    };
    match result {
        Ok(r) => WriteReply::Committed { index: r.log_id.index, outcome: r.data },
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            let reply = forward(ctx, &f);
            let WriteReply::Redirect { leader, addr } = &reply else { return reply };
            if forwarded {
                return reply;
            }
            if let Some(silent) = ctx.contact.silent_for(ctx.leader_silence) {
                return WriteReply::Rejected {
                    why: format!(
                        "not forwarded: the leader (node {leader}) has sent this node nothing for {silent:?}, it may be stopped or cut off; retry"
                    ),
                    retry: true,
                };
            }
            let msg = Msg::Write { request_id, forwarded: true };
            tokio::select! {
                biased;
                r = forward_to(ctx, *leader, addr, &msg, command_untrusted) => match r {
                    Ok(w) => w,
                    // Nothing reached the leader: the client may try it itself.
                    Err((false, _)) => reply,
                    Err((true, e)) => WriteReply::Indeterminate {
                        why: format!(
                            "forwarded to the leader at {addr}, then {e}: it may have been appended; retry with the same request id"
                        ),
                    },
                },
                // A stopped or cut-off leader may never answer: once another leads or it falls
                // silent, the write is retried elsewhere (by the client, with the same request
                // id).
                why = stall::leader_moved(&ctx.raft, *leader) => forwarded_then(*leader, addr, &why),
                why = stall::falls_silent(&ctx.contact, ctx.leader_silence) => forwarded_then(*leader, addr, &why),
            }
        }
        Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(f))) => WriteReply::Indeterminate {
            why: format!("appended here, then this node adopted another leader's log ({f}); retry with the same request id"),
        },
        // A membership change or a conditional write (never sent from here): refused before
        // anything was appended.
        Err(RaftError::APIError(
            e @ (ClientWriteError::ChangeMembershipError(_) | ClientWriteError::PreconditionFailed(_)),
        )) => WriteReply::Rejected { why: e.to_string(), retry: false },
        Err(RaftError::Fatal(f)) => {
            WriteReply::Indeterminate { why: format!("this node's raft stopped ({f}); retry elsewhere with the same request id") }
        }
    }
}

/// The answer to a write forwarded to `leader`, which did not answer, because of `why`.
fn forwarded_then(leader: u64, addr: &str, why: &str) -> WriteReply {
    WriteReply::Indeterminate {
        why: format!(
            "forwarded to node {leader} at {addr}, then {why}: it may have been appended there; retry with the same request id"
        ),
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// This node's view, as `Msg::Metrics` answers it (and `/metrics` exports it, `node/prometheus.rs`).
pub(crate) async fn metrics(ctx: &Ctx) -> NodeMetrics {
    let m = ctx.raft.metrics().borrow_watched().clone();
    let applied = ctx
        .raft
        .with_state_machine(|sm: &mut StateMachineStore| {
            let cp = sm.applier().checkpoint();
            let r = (sm.last_applied().map(|l| l.index), hex(&cp.digest), cp.entity_count);
            Box::pin(async move { r })
        })
        .await;
    let fatal = m.running_state.as_ref().err().map(|e| e.to_string());
    let (last_applied, digest, entities) = match applied {
        Ok(a) => a,
        Err(e) => (m.last_applied.map(|l| l.index), format!("unavailable: {e}"), 0),
    };
    NodeMetrics {
        id: ctx.id,
        state: format!("{:?}", m.state),
        term: m.current_term,
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        committed: m.local_committed.map(|l| l.index),
        last_applied,
        digest,
        entities,
        snapshot: m.snapshot.map(|l| l.index),
        purged: m.purged.map(|l| l.index),
        partitioned: ctx.partition.is_on(),
        fatal,
        fenced: ctx.claims.fence.reason().map(str::to_string),
        claims: ctx.claims.stats.get(),
        io: ctx.io_stats.as_ref().map(|h| h.get()).unwrap_or_default(),
        voters: m.membership_config.membership().voter_ids().collect(),
        learners: m.membership_config.membership().learner_ids().collect(),
        quorum_ack_ms: m
            .last_quorum_acked
            .as_ref()
            .map(|t| openraft::Instant::elapsed(&**t).as_millis() as u64),
        lease_ms: ctx.lease.as_millis() as u64,
        lag: m
            .replication
            .iter()
            .flatten()
            .filter(|(id, _)| **id != ctx.id)
            .map(|(id, matched)| {
                let behind = |last: u64| last.saturating_sub(matched.as_ref().map_or(0, |l| l.index));
                (*id, matched.as_ref().and(m.last_log_index).map(behind))
            })
            .collect(),
    }
}

async fn lookup(ctx: &Ctx, parent: Option<u64>, name: String) -> Reply {
    let r = ctx
        .raft
        .with_state_machine(move |sm: &mut StateMachineStore| {
            let e = sm.catalog().lookup(parent.map(catalog::EntityId), &name).map(|e| EntityView {
                id: e.id.0,
                parent: e.parent.map(|p| p.0),
                kind: e.kind.as_str().to_string(),
                name: e.name().to_string(),
                version: e.version,
            });
            Box::pin(async move { e })
        })
        .await;
    match r {
        Ok(e) => Reply::Lookup(e),
        Err(e) => Reply::Error(format!("the state machine is unavailable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::frame::{read_frame, write_frame, TooLarge};

    /// A request over the limit is answered `TooLarge` while its sender is still sending (the
    /// pipe holds far less than the body), its body is skipped, and the request after it on
    /// the same connection is served.
    #[tokio::test]
    async fn an_oversized_request_is_answered_then_skipped_and_the_next_one_served() {
        let (mut node, peer) = tokio::io::duplex(4096);
        let (mut from_node, mut to_node) = tokio::io::split(peer);
        let sender = tokio::spawn(async move {
            write_frame(&mut to_node, &Msg::Write { request_id: 7, forwarded: false }, &[1u8; 100_000])
                .await?;
            write_frame(&mut to_node, &Msg::Metrics, &[]).await
        });
        let max = 16 << 10;
        let (msg, tail) = next_request(&mut node, max).await.unwrap().unwrap();
        assert!(matches!(msg, Msg::Metrics) && tail.is_empty(), "{msg:?}");
        sender.await.unwrap().unwrap();
        let (reply, _) = read_frame::<_, Reply>(&mut from_node).await.unwrap().unwrap();
        let Reply::TooLarge(t) = reply else { panic!("{reply:?}") };
        let json = serde_json::to_vec(&Msg::Write { request_id: 7, forwarded: false }).unwrap().len();
        assert_eq!(t, TooLarge { len: (4 + json + 100_000) as u64, max: max as u64 });
        // The peer closes: the end, not an error.
        drop(from_node);
        assert!(next_request(&mut node, max).await.unwrap().is_none());
    }

    /// A length field past the protocol maximum (4 GiB, from a peer that is not a conforming
    /// node or client) is answered, and the connection closed rather than its body read: the
    /// peer holds the connection open and sends nothing more, and the node does not wait for
    /// 4 GiB that will never come (nor read them at line speed if they did).
    #[tokio::test]
    async fn a_length_past_the_protocol_maximum_is_answered_and_the_connection_closed() {
        let (mut node, peer) = tokio::io::duplex(4096);
        let (mut from_node, mut to_node) = tokio::io::split(peer);
        tokio::io::AsyncWriteExt::write_all(&mut to_node, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(10), next_request(&mut node, 16 << 10))
            .await
            .expect("the node waited for the body of a 4 GiB frame");
        let err = r.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let (reply, _) = read_frame::<_, Reply>(&mut from_node).await.unwrap().unwrap();
        assert!(matches!(reply, Reply::TooLarge(TooLarge { len: 0xffff_ffff, .. })), "{reply:?}");
        drop(to_node);
    }
}
