//! A client write at this node: decoded and checked, proposed when this node leads (answered
//! once committed, or at once when it can no longer commit: [`stall`]), else forwarded to the
//! leader with the same request id, or redirected. Separate from the connection (`connection.rs`)
//! and the dispatch (`mod.rs`): this is where a write's answer (Committed, Rejected,
//! Indeterminate, Redirect) is decided.

use super::Ctx;
use crate::net::frame::{read_frame_max, write_frame_max};
use crate::net::limit;
use crate::net::stream::Expect;
use crate::net::wire::{Msg, Reply, WriteReply};
use crate::node::stall;
use crate::Request;
use openraft::error::{ClientWriteError, ForwardReason, ForwardToLeader, RaftError};
use std::time::Duration;

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

pub(super) async fn write(
    ctx: &Ctx,
    command_untrusted: &[u8],
    request_id: u64,
    forwarded: bool,
) -> WriteReply {
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
