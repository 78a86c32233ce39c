//! What an operator sees happen on a node: one `tracing` event per change that matters, from
//! openraft's metrics (issue 28). A role, term or leader change; a membership change; a leader
//! that no majority acknowledged within its lease (it cannot commit: a lone restarted node, or
//! one cut off), and the lease held again; openraft's core stopping. Snapshots, truncations,
//! purges, fences and failed RPCs are logged where they happen (`state_machine.rs`,
//! `log_store/`, `fence.rs`, `net/transport.rs`). The binary installs a subscriber whose
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
    // Woken by the server metrics (role, term, leader, membership: they change rarely) and a
    // tick, not by the full metrics, which change with every index: a wake-up per commit on
    // a busy node cost a futex wake and a task switch each. The values are read from the full
    // metrics when woken.
    let mut rx = raft.server_metrics();
    let full = raft.metrics();
    let mut role = None;
    // The membership entry's log id last seen: the metrics change with every index, the
    // membership rarely, so it is formatted and the address book rebuilt only when it moved.
    let mut members = None;
    let mut lease_held = None;
    loop {
        let (now, membership, held, stopped) = {
            rx.borrow_and_update();
            let m = full.borrow_watched();
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
                // The core dropped its metrics: it ended, with a `running_state` error if it
                // stopped on one, without (a panic) otherwise.
                match full.borrow_watched().running_state.as_ref().err() {
                    Some(e) => error!(node = id, why = %e, "raft core stopped"),
                    None => error!(node = id, "raft core ended (its metrics channel closed)"),
                }
                return;
            },
            // A lease lost or held again shows in the full metrics only: looked at four times
            // a lease.
            _ = tokio::time::sleep(lease / 4) => {}
        }
    }
}
