//! openraft's network over TCP (mutual TLS, or plaintext on loopback: `net/stream.rs`): one connection per (target, openraft client), request and
//! reply in lockstep, reconnected on the next call after any failure or when the peer closed it
//! since the last call (`net/idle.rs`).
//!
//! openraft makes a separate network client for replication, heartbeats, votes and snapshots,
//! so a slow append never delays a heartbeat on the same socket. Every failure (no connection,
//! a timeout, a frame that does not parse, a peer that dropped us, the partition switch) is
//! `Unreachable`: openraft then backs off and retries, which is the right answer to all of them
//! but one that would repeat forever; so every failure is also logged ([`FailureLog`]).
//!
//! Nothing is larger than a frame (`max_frame`): an append-entries batch carries the prefix of
//! its entries that fits ([`crate::net::append`]), a snapshot travels in chunks
//! ([`crate::net::chunks`]). A peer with a smaller limit answers a frame over it with
//! `Reply::TooLarge`: a failure like the others, logged with its sizes.

use crate::net::append;
use crate::net::chunks::{chunk_len, pieces};
use crate::net::failures::FailureLog;
use crate::net::frame::{read_frame_max, write_frame_max};
use crate::net::stream::{Expect, Security, Stream};
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
use std::time::{Duration, Instant};

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

/// The peers' addresses as the newest membership this node knows gives them. openraft keeps a
/// replication stream (and its network client) for a peer whose address a membership change
/// moved (`ChangeMembers::SetNodes`), so each client looks its peer up here before it connects:
/// a moved node is reached at its new address from the next connection on.
#[derive(Clone, Debug, Default)]
pub struct Addresses(Arc<std::sync::RwLock<std::collections::BTreeMap<u64, String>>>);

impl Addresses {
    /// Takes the addresses of a membership's nodes, and only those: a node the membership no
    /// longer holds has no address here (its id may come back elsewhere).
    pub fn update(&self, nodes: impl IntoIterator<Item = (u64, String)>) {
        let fresh = nodes.into_iter().collect();
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// The address node `id` has now, when it is not `known` (a read and a comparison per
    /// call; an allocation only when the node moved).
    pub fn moved(&self, id: u64, known: &str) -> Option<String> {
        let book = self.0.read().unwrap_or_else(|e| e.into_inner());
        book.get(&id).filter(|a| *a != known).cloned()
    }
}

/// Makes a [`TcpNet`] per openraft client; peers' addresses come from the membership
/// (`BasicNode::addr`, then [`Addresses`] as it changes).
#[derive(Clone, Debug)]
pub struct TcpNetFactory {
    pub partition: Partition,
    /// This node's id (in what it logs) and the largest frame it sends.
    pub id: u64,
    pub max_frame: usize,
    pub addresses: Addresses,
    /// Each connection is to node `target` and no other: with TLS its certificate must name
    /// it (`net/stream.rs`).
    pub security: Security,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetFactory {
    type Network = TcpNet;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> TcpNet {
        TcpNet {
            id: self.id,
            target,
            addr: node.addr.clone(),
            conn: None,
            partition: self.partition.clone(),
            max_frame: self.max_frame,
            failures: FailureLog::default(),
            addresses: self.addresses.clone(),
            security: self.security.clone(),
        }
    }
}

/// One openraft client of one peer.
#[derive(Debug)]
pub struct TcpNet {
    id: u64,
    target: u64,
    addr: String,
    conn: Option<Stream>,
    partition: Partition,
    max_frame: usize,
    failures: FailureLog,
    addresses: Addresses,
    security: Security,
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
        let why = match r {
            Ok(Ok(reply)) => return Ok(reply),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no reply within {ttl:?}"),
        };
        self.conn = None;
        Err(self.failed(kind(msg), &why))
    }

    /// Logs a failed RPC (see [`FailureLog`]) and makes it openraft's `Unreachable`.
    fn failed(&mut self, what: &str, why: &str) -> Unreachable<TypeConfig> {
        let line = format!("{what} to node {} at {}: {why}", self.target, self.addr);
        if let Some(l) = self.failures.failed(Instant::now(), &line) {
            tracing::warn!(node = self.id, "{l}");
        }
        unreachable(line)
    }

    /// Logs the end of a run of failures.
    fn succeeded(&mut self) {
        if let Some(l) = self.failures.succeeded() {
            tracing::info!(node = self.id, "to node {} at {}: {l}", self.target, self.addr);
        }
    }

    async fn exchange(&mut self, msg: &Msg, tail: &[u8]) -> io::Result<Reply> {
        // A connection the peer closed since the last call (it restarted): a new one, rather
        // than a failed call and openraft's backoff.
        if self.conn.as_mut().is_some_and(|s| !s.reusable(&self.security)) {
            self.conn = None;
        }
        // The peer moved (a membership change set its new address): connect there.
        if let Some(addr) = self.addresses.moved(self.target, &self.addr) {
            tracing::info!(node = self.id, "node {} moved from {} to {addr}", self.target, self.addr);
            self.addr = addr;
            self.conn = None;
        }
        if self.conn.is_none() {
            let mut s = self.security.connect(&self.addr, Expect::Node(self.target)).await?;
            // Say which node this connection is for: a wrong address reaches no node under an
            // id that is not its own (`Msg::Hello`).
            let hello = Msg::Hello { from: self.id, to: self.target };
            write_frame_max(&mut s, &hello, &[], self.max_frame).await?;
            match read_frame_max::<_, Reply>(&mut s, self.max_frame).await? {
                Some((Reply::Hello(Ok(())), _)) => {}
                Some((Reply::Hello(Err(why)), _)) => return Err(io::Error::other(why)),
                other => return Err(io::Error::other(format!("no hello from {}: {other:?}", self.addr))),
            }
            self.conn = Some(s);
        }
        let Some(s) = self.conn.as_mut() else { return Err(io::Error::other("no connection")) };
        write_frame_max(s, msg, tail, self.max_frame).await?;
        match read_frame_max::<_, Reply>(s, self.max_frame).await? {
            // The peer's limit is smaller than this node's: a misconfigured cluster.
            Some((Reply::TooLarge(t), _)) => Err(io::Error::other(format!(
                "the peer refused {t} (every node of a cluster must use the same --max-frame-bytes)"
            ))),
            Some((reply, _)) => Ok(reply),
            None => Err(io::Error::other("the peer closed the connection (partitioned or stopping)")),
        }
    }
}

fn wrong(reply: &Reply) -> String {
    format!("unexpected reply {reply:?}")
}

/// What an RPC is, in what is logged.
fn kind(msg: &Msg) -> &'static str {
    match msg {
        Msg::AppendEntries(_) => "append-entries",
        Msg::Vote(_) => "vote",
        Msg::PreVote(_) => "pre-vote",
        Msg::SnapshotChunk { .. } => "snapshot",
        _ => "request",
    }
}

impl RaftNetworkV2<TypeConfig> for TcpNet {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let out = match append::encode(&rpc, self.max_frame, append::WRAP) {
            Ok(out) => out,
            Err(e) => return Err(self.failed("append-entries", &e.to_string()).into()),
        };
        let r = match self.call(&Msg::AppendEntries(out.head), &out.tail, option.hard_ttl()).await? {
            Reply::AppendEntries(Ok(AppendEntriesResponse::Success)) if out.partial.is_some() => {
                Ok(AppendEntriesResponse::PartialSuccess(out.partial))
            }
            Reply::AppendEntries(Ok(r)) => Ok(r),
            Reply::AppendEntries(Err(e)) => Err(self.failed("append-entries", &e).into()),
            other => Err(self.failed("append-entries", &wrong(&other)).into()),
        };
        if r.is_ok() {
            self.succeeded();
        }
        r
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self.call(&Msg::Vote(rpc), &[], option.hard_ttl()).await? {
            Reply::Vote(Ok(r)) => Ok(r),
            Reply::Vote(Err(e)) => Err(self.failed("vote", &e).into()),
            other => Err(self.failed("vote", &wrong(&other)).into()),
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
            Reply::Vote(Err(e)) => Err(self.failed("pre-vote", &e).into()),
            other => Err(self.failed("pre-vote", &wrong(&other)).into()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        // One chunk per frame; each gets the install timeout, not a heartbeat's.
        let ttl = option.hard_ttl().max(Duration::from_secs(10));
        let r = tokio::select! {
            closed = cancel => Err(closed),
            r = self.send_snapshot(vote, &snapshot, ttl) => Ok(r),
        };
        match r {
            Ok(r) => {
                if r.is_ok() {
                    self.succeeded();
                }
                r
            }
            Err(closed) => {
                // Cancelled mid-exchange: the socket may hold half a frame.
                self.conn = None;
                Err(StreamingError::Closed(closed))
            }
        }
    }
}

impl TcpNet {
    /// Sends `snapshot` in chunks that each fit a frame, waiting for each reply.
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: &SnapshotOf<TypeConfig, SnapshotData>,
        ttl: Duration,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let data = &snapshot.snapshot;
        let total = data.len() as u64;
        let chunk = |offset| Msg::SnapshotChunk { vote, meta: snapshot.meta.clone(), offset, total };
        let widest = serde_json::to_vec(&Msg::SnapshotChunk {
            vote,
            meta: snapshot.meta.clone(),
            offset: u64::MAX,
            total: u64::MAX,
        })
        .map_err(|e| self.failed("snapshot", &e.to_string()))?;
        let len =
            chunk_len(self.max_frame, widest.len()).map_err(|e| self.failed("snapshot", &e.to_string()))?;
        let pieces = pieces(data, len);
        let last = pieces.len() - 1;
        for (i, (offset, piece)) in pieces.into_iter().enumerate() {
            let got = offset + piece.len() as u64;
            match self.call(&chunk(offset), piece, ttl).await? {
                Reply::Chunk(Ok(n)) if i < last && n == got => {}
                Reply::Snapshot(Ok(r)) if i == last => return Ok(r),
                Reply::Snapshot(Err(e)) | Reply::Chunk(Err(e)) => {
                    return Err(self.failed("snapshot", &e).into())
                }
                other => return Err(self.failed("snapshot", &wrong(&other)).into()),
            }
        }
        Err(self.failed("snapshot", "internal: no chunk was sent").into())
    }
}
