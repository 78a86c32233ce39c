//! A node: one data directory (the Raft log and the snapshot file), opened through the state
//! verdict, openraft over [`crate::net`], and the server on one TCP port.
//!
//! Start-up order, and why:
//! 1. A `FENCED` file in the data directory ([`crate::fence`]) refuses at once
//!    ([`Started::Fenced`]): this node found its state different from a majority's while it
//!    ran, and an operator decides (restore it from a healthy replica, then delete the file).
//! 2. Open the snapshot and the log with [`LogStore::open_verified`]: the log after the
//!    snapshot is replayed through the apply function and compared with the checkpoints the
//!    online path recorded and with the digests a majority of the voters claimed. DIVERGENT →
//!    [`start_role`] refuses: this node must not vote or lead (docs/invariants.md I8), so Raft
//!    is never started and [`Started::Refused`] says why.
//! 3. Bind the port before Raft starts, so the address peers were given is ours.
//! 4. Start openraft with the TCP network, the state machine claiming its digest at every
//!    claim index and comparing the claims it applies (`crate::claims`; [`claims`] sends them);
//!    `--initialize` makes the membership of every node named (this one and its peers) on a
//!    fresh cluster (a no-op when already initialized).
//! 5. Serve the port (see [`server`]), and `/metrics` on its own port when configured
//!    ([`prometheus`], [`NodeConfig::metrics_listen`]; bound with the main port, before Raft
//!    starts).

pub mod claims;
mod ctx;
mod events;
pub mod membership;
pub mod prometheus;
pub mod server;
pub mod stall;

use crate::fence::Fence;
use crate::net::stream::Security;
use crate::net::transport::{Partition, TcpNetFactory};
use crate::{
    log_options, start_role, ClaimConfig, LogStore, StartRole, StateMachineStore, StateVerdict, TypeConfig,
};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A running node's openraft handle.
pub type RaftNode = Raft<TypeConfig, StateMachineStore>;

/// How to run a node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: u64,
    /// Where this node listens (Raft, clients and admin on one port).
    pub listen: String,
    /// The other voters: id → address.
    pub peers: BTreeMap<u64, String>,
    /// Holds `log/` (the Raft log) and `sm/` (the snapshot file).
    pub data_dir: PathBuf,
    /// Initialize a fresh cluster whose voters are this node and its peers.
    pub initialize: bool,
    /// Accept the test-only fault switches: the partition switch, altering the state in memory.
    /// Honoured only in a build with the `test-faults` feature ([`NodeConfig::faults_allowed`]).
    pub allow_faults: bool,
    /// Test only, and only with `allow_faults`: turn openraft's leader restore back on (the
    /// unsafe configuration of issue 21, finding 1), so the double-kill test can show that it
    /// still catches the loss it was written for. Never set it on a real node.
    pub unsafe_leader_restore: bool,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Build a snapshot after this many entries since the last one (100,000 by default: a
    /// snapshot writes the whole state, so it is taken rarely enough that its cost, which grows
    /// with the state, stays a small share of the entries it replaces; docs/running-a-cluster.md).
    pub snapshot_every: u64,
    /// Entries kept below a snapshot when purging (a lagging follower catches up from the log
    /// instead of needing a snapshot install).
    pub keep_logs: u64,
    /// Claim indexes are the multiples of this (`crate::claims`): after each, the node claims
    /// its state digest in the replicated log (and records it as a local checkpoint once a
    /// majority confirmed it). Must be larger than the number of voters.
    pub checkpoint_every: u64,
    /// How long a client write may wait for its commit before it is answered Indeterminate.
    pub write_timeout: Duration,
    pub segment_len_bytes: u32,
    /// The largest frame this node reads or writes on its port (every node of a cluster must
    /// use the same). A snapshot travels in chunks and an append-entries batch is cut to fit,
    /// so this bounds a message, not what can be replicated; a client's write that does not
    /// fit (its request, or the log entry it would become) is Rejected (`crate::net::limit`).
    pub max_frame_bytes: usize,
    /// Where to serve `GET /metrics` (the Prometheus text format, [`prometheus`]) over plain
    /// HTTP; `None` (the default): not served.
    pub metrics_listen: Option<String>,
    /// How the node's port and its connections to peers are secured: mutual TLS, or plaintext
    /// between loopback addresses only (`net/stream.rs`; `start` refuses a plaintext node a
    /// non-loopback address). [`NodeConfig::new`] gives plaintext, for loopback tests.
    pub security: Security,
}

impl NodeConfig {
    /// Whether the test-only fault switches are on: asked for, and compiled in (the
    /// `test-faults` feature, which only the workspace's tests and examples enable).
    pub fn faults_allowed(&self) -> bool {
        cfg!(feature = "test-faults") && self.allow_faults
    }

    /// Defaults for everything but identity, address, peers and data.
    pub fn new(id: u64, listen: String, peers: BTreeMap<u64, String>, data_dir: PathBuf) -> NodeConfig {
        NodeConfig {
            id,
            listen,
            peers,
            data_dir,
            initialize: false,
            allow_faults: false,
            unsafe_leader_restore: false,
            heartbeat_ms: 100,
            election_min_ms: 400,
            election_max_ms: 800,
            snapshot_every: 100_000,
            keep_logs: 1000,
            checkpoint_every: 64,
            write_timeout: Duration::from_secs(5),
            segment_len_bytes: 4 << 20,
            max_frame_bytes: crate::net::frame::MAX_FRAME_LEN,
            metrics_listen: None,
            security: Security::Plaintext,
        }
    }

    fn raft_config(&self) -> io::Result<Arc<Config>> {
        let c = Config {
            cluster_name: "walraft".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_logs,
            // Pre-vote: a node back from a partition does not disrupt the leader with a
            // higher term it could never win.
            enable_pre_vote: Some(true),
            // No leader restore (openraft's default restores it): a node that was leader when
            // it stopped comes back a follower, and leads again only after winning an election,
            // in a new term. Its log may have lost entries it had already shipped (they are
            // served to followers before they are durable here); leading the same term again
            // would give their log ids to other entries. docs/replication-safety.md.
            enable_leader_restore: Some(self.faults_allowed() && self.unsafe_leader_restore),
            ..Config::default()
        };
        c.validate().map(Arc::new).map_err(|e| io::Error::other(format!("raft config: {e}")))
    }
}

/// What starting a node gave.
#[derive(Debug)]
pub enum Started {
    Running(RunningNode),
    /// DIVERGENT at open: Raft was not started.
    Refused {
        why: String,
    },
    /// The data directory holds a `FENCED` file (its first line in `why`): nothing was opened.
    Fenced {
        why: String,
    },
}

/// A node serving its port.
#[derive(Debug)]
pub struct RunningNode {
    pub raft: RaftNode,
    pub addr: SocketAddr,
    pub verdict: StateVerdict,
    /// Set once this node fenced itself (`crate::fence`).
    pub fence: Fence,
    /// Where `/metrics` is served, when it is ([`NodeConfig::metrics_listen`]).
    pub metrics_addr: Option<SocketAddr>,
    server: tokio::task::JoinHandle<()>,
    metrics: Option<tokio::task::JoinHandle<()>>,
    claimer: tokio::task::JoinHandle<()>,
    events: tokio::task::JoinHandle<()>,
}

impl RunningNode {
    /// Stops serving and shuts openraft down (the log is closed when its store is dropped).
    pub async fn shutdown(self) -> io::Result<()> {
        self.server.abort();
        if let Some(m) = &self.metrics {
            m.abort();
        }
        self.claimer.abort();
        self.events.abort();
        self.raft.shutdown().await.map_err(|e| io::Error::other(format!("shutdown: {e}")))
    }
}

/// What every start checks before it opens anything: a node whose certificate, peers or
/// settings cannot work does not start.
fn check_config(cfg: &NodeConfig) -> io::Result<()> {
    cfg.security.check_node(cfg.id)?;
    for peer in cfg.peers.values().chain([&cfg.listen]).chain(cfg.metrics_listen.as_ref()) {
        cfg.security.check_peer(peer)?;
    }
    let voters = cfg.peers.len() as u64 + 1;
    if cfg.checkpoint_every <= voters {
        // Each claim index adds up to one claim entry per voter after it: with an interval that
        // short, claims alone would reach the next claim index and never stop.
        return Err(io::Error::other(format!(
            "checkpoint_every {} must be larger than the number of voters ({voters})",
            cfg.checkpoint_every
        )));
    }
    if cfg.max_frame_bytes < crate::net::frame::MIN_FRAME_LEN {
        return Err(io::Error::other(format!(
            "max_frame_bytes {} is below {}",
            cfg.max_frame_bytes,
            crate::net::frame::MIN_FRAME_LEN
        )));
    }
    Ok(())
}

/// Opens the data directory and, unless the state verdict refuses, starts the node.
pub async fn start(cfg: NodeConfig) -> io::Result<Started> {
    if let Some(why) = crate::fence::read(&cfg.data_dir)? {
        return Ok(Started::Fenced { why });
    }
    check_config(&cfg)?;
    let log_dir = cfg.data_dir.join("log");
    let sm_dir = cfg.data_dir.join("sm");
    let opts = log_options(cfg.segment_len_bytes);
    let (log, verdict) = {
        let base = StateMachineStore::open(Some(&sm_dir))?;
        LogStore::open_verified(&log_dir, opts, &base)?
    };
    if let StartRole::Refused { why } = start_role(&verdict) {
        log.close()?;
        return Ok(Started::Refused { why });
    }
    let fence = Fence::new(&cfg.data_dir);
    let claims = Arc::new(claims::Claims::new(cfg.id, fence.clone()));
    let (claim_tx, claim_rx) = tokio::sync::mpsc::channel(claims::CLAIM_QUEUE);
    let sm = StateMachineStore::open(Some(&sm_dir))?
        .with_checkpoints(log.checkpointer(), cfg.checkpoint_every)
        .with_claims(ClaimConfig {
            node: cfg.id,
            sink: claim_tx,
            fence: fence.clone(),
            stats: claims.stats.clone(),
        });
    let io_stats = log.io_stats_handle();
    serve(cfg, log, sm, Some(io_stats), verdict, fence, claims, claim_rx).await
}

/// Starts a node on another openraft log store, `log`, for comparisons only: the benchmarks
/// run the same node (network, state machine, server, clients) on raft-log's store
/// (`raft/benches/raft_log_store.rs`). Nothing of the product's open applies: no state
/// verdict (such a log records no checkpoints; the verdict is CLEAN with none), no checkpoints
/// and no digest claims, so such a node does less per commit than one on [`LogStore`].
pub async fn start_on<L>(cfg: NodeConfig, log: L) -> io::Result<Started>
where
    L: openraft::storage::RaftLogStorage<TypeConfig>,
{
    check_config(&cfg)?;
    let sm = StateMachineStore::open(Some(&cfg.data_dir.join("sm")))?;
    let fence = Fence::new(&cfg.data_dir);
    let claims = Arc::new(claims::Claims::new(cfg.id, fence.clone()));
    let (_, claim_rx) = tokio::sync::mpsc::channel(claims::CLAIM_QUEUE);
    let verdict = StateVerdict::Clean { checkpoints: 0, through: None, claims: 0 };
    serve(cfg, log, sm, None, verdict, fence, claims, claim_rx).await
}

/// Binds the ports and starts openraft on `log` and `sm`, then the server.
#[allow(clippy::too_many_arguments)]
async fn serve<L>(
    cfg: NodeConfig,
    log: L,
    sm: StateMachineStore,
    io_stats: Option<crate::IoStatsHandle>,
    verdict: StateVerdict,
    fence: Fence,
    claims: Arc<claims::Claims>,
    claim_rx: tokio::sync::mpsc::Receiver<crate::Claim>,
) -> io::Result<Started>
where
    L: openraft::storage::RaftLogStorage<TypeConfig>,
{
    let listener = tokio::net::TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    cfg.security.check_listen(addr)?;
    let metrics_listener = match &cfg.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("--metrics-listen {at}: {e}")))?,
        ),
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    if let (Security::Plaintext, Some(at)) = (&cfg.security, metrics_addr) {
        // A plaintext node keeps to loopback, its metrics too; with TLS the endpoint (plain
        // HTTP, read-only) may be bound wherever the scraper is.
        cfg.security
            .check_listen(at)
            .map_err(|e| io::Error::new(e.kind(), format!("--metrics-listen: {e}")))?;
    }
    let partition = Partition::default();
    let max_frame = cfg.max_frame_bytes;
    let addresses = crate::net::transport::Addresses::default();
    let net = TcpNetFactory {
        partition: partition.clone(),
        id: cfg.id,
        max_frame,
        addresses: addresses.clone(),
        security: cfg.security.clone(),
    };
    let raft = Raft::new(cfg.id, cfg.raft_config()?, net, log, sm)
        .await
        .map_err(|e| io::Error::other(format!("starting raft: {e}")))?;
    if cfg.initialize && !raft.is_initialized().await.map_err(io::Error::other)? {
        let mut members: BTreeMap<u64, BasicNode> =
            cfg.peers.iter().map(|(id, a)| (*id, BasicNode::new(a.clone()))).collect();
        members.insert(cfg.id, BasicNode::new(addr.to_string()));
        // Another node may have initialized first: that is not an error.
        if let Err(e) = raft.initialize(members).await {
            tracing::info!(node = cfg.id, "initialize: {e}");
        }
    }
    let ctx = ctx::Ctx {
        raft: raft.clone(),
        id: cfg.id,
        partition: partition.clone(),
        allow_faults: cfg.faults_allowed(),
        write_timeout: cfg.write_timeout,
        lease: Duration::from_millis(cfg.election_max_ms),
        contact: Default::default(),
        leader_silence: stall::silence(Duration::from_millis(cfg.heartbeat_ms)),
        io_stats,
        max_frame,
        forward_pool: Default::default(),
        claims: claims.clone(),
        checkpoint_every: cfg.checkpoint_every,
        membership_lock: tokio::sync::Mutex::new(()),
        security: cfg.security.clone(),
    };
    let claimer =
        tokio::spawn(claims::run(raft.clone(), claims, claim_rx, partition, max_frame, cfg.security.clone()));
    let ctx = Arc::new(ctx);
    let metrics = metrics_listener.map(|l| tokio::spawn(prometheus::serve(l, ctx.clone())));
    let server = tokio::spawn(server::serve(listener, ctx));
    let events = tokio::spawn(events::watch(
        raft.clone(),
        cfg.id,
        Duration::from_millis(cfg.election_max_ms),
        addresses,
    ));
    Ok(Started::Running(RunningNode {
        raft,
        addr,
        verdict,
        fence,
        metrics_addr,
        server,
        metrics,
        claimer,
        events,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config every node runs with never restores a leader on restart (see
    /// `enable_leader_restore` above); the process test of it is `tests/raft/double_kill.rs`.
    #[test]
    fn a_restarted_leader_is_never_restored_without_an_election() {
        let cfg = NodeConfig::new(1, "127.0.0.1:0".into(), BTreeMap::new(), PathBuf::from("unused"));
        let raft = cfg.raft_config().unwrap();
        assert_eq!(raft.enable_leader_restore, Some(false));
        assert_eq!(raft.enable_pre_vote, Some(true));
    }

    /// The negative control's switch works only together with the fault switches: a node
    /// configured with it alone still never restores a leader.
    #[test]
    fn the_unsafe_leader_restore_needs_the_fault_switches() {
        let mut cfg = NodeConfig::new(1, "127.0.0.1:0".into(), BTreeMap::new(), PathBuf::from("unused"));
        cfg.unsafe_leader_restore = true;
        assert_eq!(cfg.raft_config().unwrap().enable_leader_restore, Some(false));
        cfg.allow_faults = true;
        assert_eq!(cfg.raft_config().unwrap().enable_leader_restore, Some(true));
    }
}
