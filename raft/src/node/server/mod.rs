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
//!
//! Here: which answer each request gets
//! (`handle`). The connections themselves are in `connection.rs`, client writes (proposed, or
//! forwarded to the leader) in `write.rs`, the admin reads of this node's state in `state.rs`; what every connection task shares
//! ([`Ctx`]) in `node/ctx.rs`.

mod connection;
mod state;
mod write;

pub use connection::serve;
pub(crate) use state::metrics;

pub use crate::node::ctx::Ctx;

use crate::net::chunks::{self, Chunk, Incoming};
use crate::net::wire::{Msg, Reply};
use state::lookup;
use write::write;

/// Accepts connections until the task is aborted, each given its place among the handshakes
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
