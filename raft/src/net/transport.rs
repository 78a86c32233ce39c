//! openraft's network over TCP: one connection per (target, openraft client), request and
//! reply in lockstep, reconnected on the next call after any failure.
//!
//! openraft makes a separate network client for replication, heartbeats, votes and snapshots,
//! so a slow append never delays a heartbeat on the same socket. Every failure (no connection,
//! a timeout, a frame that does not parse, a peer that dropped us, the partition switch) is
//! `Unreachable`: openraft then backs off and retries, which is the right answer to all of them.

use crate::net::frame::{read_frame, write_frame};
use crate::net::wire::{Msg, Reply};
use crate::{SnapshotData, TypeConfig, Vote};
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::SnapshotOf;
use openraft::{BasicNode, OptionalSend, RaftNetworkFactory, RaftNetworkV2};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// The test-only fault switch shared by a node's server and its network: while on, every Raft
/// RPC in or out is dropped (the node is partitioned from its peers; clients still reach it).
#[derive(Clone, Debug, Default)]
pub struct Partition(Arc<AtomicBool>);

impl Partition {
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::SeqCst);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Makes a [`TcpNet`] per openraft client; peers' addresses come from the membership
/// (`BasicNode::addr`).
#[derive(Clone, Debug)]
pub struct TcpNetFactory {
    pub partition: Partition,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetFactory {
    type Network = TcpNet;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> TcpNet {
        TcpNet { target, addr: node.addr.clone(), conn: None, partition: self.partition.clone() }
    }
}

/// One openraft client of one peer.
#[derive(Debug)]
pub struct TcpNet {
    target: u64,
    addr: String,
    conn: Option<TcpStream>,
    partition: Partition,
}

fn unreachable(e: impl std::fmt::Display) -> Unreachable<TypeConfig> {
    Unreachable::new(&io::Error::other(e.to_string()))
}

impl TcpNet {
    /// Sends `msg` (and `tail`) and waits for the reply, all within `ttl`. On any failure the
    /// connection is dropped (a late reply must never be read as the answer to the next call).
    async fn call(
        &mut self,
        msg: &Msg,
        tail: &[u8],
        ttl: Duration,
    ) -> Result<Reply, Unreachable<TypeConfig>> {
        if self.partition.is_on() {
            return Err(unreachable("partitioned (test fault switch)"));
        }
        let r = tokio::time::timeout(ttl, self.exchange(msg, tail)).await;
        match r {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                self.conn = None;
                Err(unreachable(format!("node {} at {}: {e}", self.target, self.addr)))
            }
            Err(_) => {
                self.conn = None;
                Err(unreachable(format!("node {} at {}: no reply within {ttl:?}", self.target, self.addr)))
            }
        }
    }

    async fn exchange(&mut self, msg: &Msg, tail: &[u8]) -> io::Result<Reply> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr).await?;
            s.set_nodelay(true)?;
            self.conn = Some(s);
        }
        let Some(s) = self.conn.as_mut() else { return Err(io::Error::other("no connection")) };
        write_frame(s, msg, tail).await?;
        match read_frame::<_, Reply>(s).await? {
            Some((reply, _)) => Ok(reply),
            None => Err(io::Error::other("the peer closed the connection (partitioned or stopping)")),
        }
    }
}

fn wrong(reply: &Reply) -> Unreachable<TypeConfig> {
    unreachable(format!("unexpected reply {reply:?}"))
}

impl RaftNetworkV2<TypeConfig> for TcpNet {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&Msg::AppendEntries(rpc), &[], option.hard_ttl()).await? {
            Reply::AppendEntries(Ok(r)) => Ok(r),
            Reply::AppendEntries(Err(e)) => Err(unreachable(e).into()),
            other => Err(wrong(&other).into()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&Msg::Vote(rpc), &[], option.hard_ttl()).await? {
            Reply::Vote(Ok(r)) => Ok(r),
            Reply::Vote(Err(e)) => Err(unreachable(e).into()),
            other => Err(wrong(&other).into()),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        // An unreachable peer must be an error, never a grant (openraft's pre-vote contract).
        match self.call(&Msg::PreVote(rpc), &[], option.hard_ttl()).await? {
            Reply::Vote(Ok(r)) => Ok(r),
            Reply::Vote(Err(e)) => Err(unreachable(e).into()),
            other => Err(wrong(&other).into()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let msg = Msg::FullSnapshot { vote, meta: snapshot.meta };
        // The snapshot is one frame; its transfer gets the install timeout, not a heartbeat's.
        let ttl = option.hard_ttl().max(Duration::from_secs(10));
        let r = tokio::select! {
            closed = cancel => Err(closed),
            r = self.call(&msg, &snapshot.snapshot, ttl) => Ok(r),
        };
        let reply = match r {
            Ok(r) => r?,
            Err(closed) => {
                // Cancelled mid-exchange: the socket may hold half a frame.
                self.conn = None;
                return Err(StreamingError::Closed(closed));
            }
        };
        match reply {
            Reply::Snapshot(Ok(r)) => Ok(r),
            Reply::Snapshot(Err(e)) => Err(unreachable(e).into()),
            other => Err(wrong(&other).into()),
        }
    }
}
