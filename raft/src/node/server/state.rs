//! The admin reads of this node's state: its metrics (`Msg::Metrics`, and `/metrics`) and a
//! lookup in its applied catalog. Separate from the writes (`write.rs`): these only read.

use super::Ctx;
use crate::net::wire::{EntityView, NodeMetrics, Reply};
use crate::StateMachineStore;
use openraft::async_runtime::WatchReceiver;

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

pub(super) async fn lookup(ctx: &Ctx, parent: Option<u64>, name: String) -> Reply {
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
