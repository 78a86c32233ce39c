//! What an operator sees happen on a node: one `tracing` event per change that matters, from
//! openraft's metrics (issue 28). A role, term or leader change; a membership change; a leader
//! that no majority acknowledged within its lease (it cannot commit: a lone restarted node, or
//! one cut off), and the lease held again; openraft's core stopping. Snapshots, truncations,
//! purges, fences and failed RPCs are logged where they happen (`state_machine.rs`,
//! `log_store.rs`, `fence.rs`, `net/transport.rs`). The binary installs a subscriber whose
//! levels come from `RUST_LOG`; a controller embedding the library installs its own. The same
//! watch keeps the network's address book ([`Addresses`]) on the newest membership.

use super::RaftNode;
use crate::net::transport::Addresses;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use std::time::Duration;
use tracing::{error, info, warn};

/// Watches `raft`'s metrics until its core stops, logging each change. Also wakes every
/// `lease` without a change: a leader cut off from the others changes nothing in its metrics.
/// Each membership's addresses go to `addresses`, which the network reads before it connects.
pub async fn watch(raft: RaftNode, id: u64, lease: Duration, addresses: Addresses) {
    let mut rx = raft.metrics();
    let mut role = None;
    // The membership entry's log id last seen: the metrics change with every index, the
    // membership rarely, so it is formatted and the address book rebuilt only when it moved.
    let mut members = None;
    let mut lease_held = None;
    loop {
        let (now, membership, held, stopped) = {
            let m = rx.borrow_and_update();
            let membership_id = *m.membership_config.log_id();
            let membership = (members != Some(membership_id)).then(|| {
                let mem = m.membership_config.membership();
                addresses.update(mem.nodes().map(|(id, n)| (*id, n.addr.clone())));
                (membership_id, m.membership_config.to_string())
            });
            let held = (m.state == ServerState::Leader).then(|| {
                m.last_quorum_acked.as_ref().is_some_and(|t| openraft::Instant::elapsed(&**t) < lease)
            });
            let stopped = m.running_state.as_ref().err().map(|e| e.to_string());
            ((m.state, m.current_term, m.current_leader), membership, held, stopped)
        };
        if role != Some(now) {
            let (state, term, leader) = now;
            info!(node = id, role = ?state, term, leader = ?leader, "role");
            role = Some(now);
        }
        if let Some((membership_id, text)) = membership {
            info!(node = id, membership = %text, "membership");
            members = Some(membership_id);
        }
        if held != lease_held {
            match held {
                Some(true) => info!(
                    node = id,
                    lease_ms = lease.as_millis() as u64,
                    "leader: a majority acknowledged it; lease held"
                ),
                Some(false) => warn!(
                    node = id,
                    lease_ms = lease.as_millis() as u64,
                    "leader: NO QUORUM: no majority acknowledged it within its lease; it cannot commit"
                ),
                None => {}
            }
            lease_held = held;
        }
        if let Some(why) = stopped {
            error!(node = id, why = %why, "raft core stopped");
            return;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() {
                // The core dropped its metrics: it ended without a `running_state` error (a panic).
                error!(node = id, "raft core ended (its metrics channel closed)");
                return;
            },
            _ = tokio::time::sleep(lease) => {}
        }
    }
}
