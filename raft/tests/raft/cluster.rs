//! Three real openraft nodes (the whole engine) over the adapter on real files, with an
//! in-process network: writes through the leader reach every state machine through the apply
//! seam, every replica has the same digest, and a follower restarted from its own log and
//! snapshot file catches up. A loopback TCP transport is a swap of `Net` (not built yet).

use openraft::async_runtime::WatchReceiver;
use openraft::error::{RPCError, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::RaftStateMachine;
use openraft::type_config::alias::{SnapshotOf, VoteOf};
use openraft::{BasicNode, Config, Raft, RaftNetworkFactory, RaftNetworkV2};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wal_raft::{log_options, LogStore, Request, Response, SnapshotData, StateMachineStore, TypeConfig};

type Node = Raft<TypeConfig, StateMachineStore>;
type Router = Arc<Mutex<BTreeMap<u64, Node>>>;

const T: Duration = Duration::from_secs(30);

async fn t<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("timed out")
}

struct Net {
    target: u64,
    router: Router,
}

impl Net {
    fn node(&self) -> Result<Node, Unreachable<TypeConfig>> {
        let r = self.router.lock().unwrap();
        r.get(&self.target).cloned().ok_or_else(|| Unreachable::new(&std::io::Error::other("node down")))
    }
}

impl RaftNetworkV2<TypeConfig> for Net {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let n = self.node()?;
        n.append_entries(rpc).await.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let n = self.node()?;
        n.vote(rpc).await.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        _cancel: impl Future<Output = openraft::error::ReplicationClosed> + openraft::OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let n = self.node()?;
        n.install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))
    }
}

#[derive(Clone)]
struct Factory(Router);

impl RaftNetworkFactory<TypeConfig> for Factory {
    type Network = Net;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Net {
        Net { target, router: self.0.clone() }
    }
}

fn config() -> Arc<Config> {
    let c = Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(40),
        max_in_snapshot_log_to_keep: 5,
        purge_batch_size: 1,
        ..Config::default()
    };
    Arc::new(c.validate().unwrap())
}

async fn start(id: u64, dir: &Path, router: &Router) -> Node {
    let mut opts = log_options(64 << 10);
    opts.prepare_in_background = false;
    let log = LogStore::open(dir.join(format!("n{id}/log")), opts).unwrap();
    let sm = StateMachineStore::open(Some(&dir.join(format!("n{id}/sm")))).unwrap();
    let raft = t(Raft::new(id, config(), Factory(router.clone()), log, sm)).await.unwrap();
    router.lock().unwrap().insert(id, raft.clone());
    raft
}

fn create(name: &str) -> Request {
    let cmd = catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: name.into(),
        props: vec![],
    };
    Request::command(&cmd, None)
}

/// Writes through whoever leads, retrying while there is no leader or its lease is not
/// established yet (openraft 0.10 refuses proposals with an expired lease right after an
/// election). Bounded.
async fn write(router: &Router, req: Request) -> Response {
    for _ in 0..100 {
        let nodes: Vec<Node> = router.lock().unwrap().values().cloned().collect();
        for n in nodes {
            if n.metrics().borrow_watched().state != openraft::ServerState::Leader {
                continue;
            }
            if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(5), n.client_write(req.clone())).await
            {
                return r.data;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader accepted the write");
}

async fn digest(n: &Node) -> (usize, [u8; 32]) {
    t(n.with_state_machine(|sm: &mut StateMachineStore| {
        let r = (sm.catalog().len(), sm.applier().checkpoint().digest);
        Box::pin(async move { r })
    }))
    .await
    .unwrap()
}

async fn converge(nodes: &[Node], index: u64) -> Vec<(usize, [u8; 32])> {
    let mut out = Vec::new();
    for n in nodes {
        t(n.wait(Some(T)).applied_index_at_least(Some(index), "converge")).await.unwrap();
        out.push(digest(n).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_through_the_apply_seam_and_a_follower_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let router: Router = Arc::default();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(start(id, dir.path(), &router).await);
    }
    let members: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    t(nodes[0].initialize(members)).await.unwrap();
    t(nodes[0].wait(Some(T)).leader_with_quorum_acked(None, "first leader")).await.unwrap();

    for i in 0..60 {
        let r = write(&router, create(&format!("lake{i}"))).await;
        assert!(matches!(r, Response::Done(_)), "write {i}: {r:?}");
    }
    // The same create again is a deterministic refusal, on every replica.
    let again = write(&router, create("lake0")).await;
    assert!(matches!(&again, Response::Refused(why) if why.starts_with("name exists")), "{again:?}");

    let last = nodes[0].metrics().borrow_watched().last_log_index.unwrap();
    let ds = converge(&nodes, last).await;
    assert_eq!(ds[0].0, 60);
    assert!(ds.iter().all(|d| *d == ds[0]), "replicas differ: {ds:?}");

    // Restart a follower from its own log and snapshot file while the others go on.
    let leader = nodes
        .iter()
        .find(|n| n.metrics().borrow_watched().state == openraft::ServerState::Leader)
        .unwrap()
        .clone();
    let leader_id = leader.metrics().borrow_watched().id;
    let follower = (1..=3).find(|&i| i != leader_id).unwrap();
    let f = router.lock().unwrap().remove(&follower).unwrap();
    t(f.shutdown()).await.unwrap();
    drop(f);
    nodes.retain(|n| n.metrics().borrow_watched().id != follower);
    for i in 60..80 {
        let r = write(&router, create(&format!("lake{i}"))).await;
        assert!(matches!(r, Response::Done(_)), "write {i}: {r:?}");
    }
    nodes.push(start(follower, dir.path(), &router).await);
    let last = leader.metrics().borrow_watched().last_log_index.unwrap();
    let ds = converge(&nodes, last).await;
    assert_eq!(ds[0].0, 80);
    assert!(ds.iter().all(|d| *d == ds[0]), "replicas differ after the restart: {ds:?}");
    for n in &nodes {
        let m = n.metrics().borrow_watched().clone();
        eprintln!(
            "node {}: last log {:?}, snapshot {:?}, purged {:?}",
            m.id, m.last_log_index, m.snapshot, m.purged
        );
        // Snapshots were built and logs purged below them (LogsSinceLast(40), keep 5).
        assert!(m.snapshot.is_some() && m.purged.is_some(), "node {}: no snapshot or purge", m.id);
    }

    for n in &nodes {
        t(n.shutdown()).await.unwrap();
    }
    router.lock().unwrap().clear();
}

#[allow(dead_code)]
fn assert_sm_is_a_state_machine<S: RaftStateMachine<TypeConfig>>() {}
