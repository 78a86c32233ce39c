//! `walraft-node client`: one operation against a cluster (a catalog write, a lookup, metrics
//! or status, a membership change, the partition switch), its report and its exit code.
//! Separate from the command line (`main.rs`): what each client operation prints and exits with.

use crate::{esay, say, Kind, Op, EXIT_NO_ANSWER, EXIT_NO_QUORUM, EXIT_PARTIAL};
use wal_raft::client::Client;
use wal_raft::net::wire::{MembershipChange, MembershipFailure, NodeMetrics, WriteReply};
use wal_raft::Response;

/// Which client operation runs (the report's shape depends on it).
enum OpKind {
    Status,
    Other,
}

fn kind(k: Kind) -> catalog::EntityKind {
    match k {
        Kind::Metalake => catalog::EntityKind::Metalake,
        Kind::Catalog => catalog::EntityKind::Catalog,
        Kind::Schema => catalog::EntityKind::Schema,
        Kind::Table => catalog::EntityKind::Table,
    }
}

/// One node's line of `client metrics --json` and `client status --json`: its metrics (with
/// `status` and `lease_held` for `status`), or why it did not answer. A key without a value is
/// left out.
#[derive(Default, serde::Serialize)]
struct NodeJson<'a> {
    node: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<&'a NodeMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_held: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl NodeJson<'_> {
    /// The line, through a `serde_json::Value`: its keys, and the metrics', sorted (serde_json
    /// without `preserve_order`), the order these lines have always had.
    fn to_line(&self) -> String {
        serde_json::to_value(self).expect("a node's line serializes").to_string()
    }
}

pub(crate) async fn client(c: Client, nodes: Vec<String>, op: Op) -> i32 {
    let first = nodes.first().cloned().unwrap_or_default();
    let op_kind = if matches!(op, Op::Status { .. }) { OpKind::Status } else { OpKind::Other };
    let cmd = match op {
        Op::Create { kind: k, parent, name, props } => catalog::Command::Create {
            parent: parent.map(catalog::EntityId),
            kind: kind(k),
            name,
            props: props.into_bytes(),
        },
        Op::Rename { id, version, name } => {
            catalog::Command::Rename { id: catalog::EntityId(id), expected_version: version, new_name: name }
        }
        Op::Update { id, version, props } => catalog::Command::Update {
            id: catalog::EntityId(id),
            expected_version: version,
            props: props.into_bytes(),
        },
        Op::Drop { id, version, cascade } => {
            catalog::Command::Drop { id: catalog::EntityId(id), expected_version: version, cascade }
        }
        Op::Lookup { parent, name } => {
            // The leader's applied state holds every write it acknowledged; a follower's may
            // lag by a heartbeat. Without a leader, the first node's.
            let mut at = first.clone();
            for n in &nodes {
                if c.metrics(n).await.is_ok_and(|m| m.state == "Leader") {
                    at = n.clone();
                    break;
                }
            }
            let first = at;
            return match c.lookup(&first, parent, &name).await {
                Ok(Some(e)) => {
                    out!("{e:?}");
                    0
                }
                Ok(None) => {
                    out!("not found");
                    1
                }
                Err(e) => {
                    eout!("{first}: {e}");
                    5
                }
            };
        }
        Op::Metrics { json } | Op::Status { json } => {
            let status = matches!(op_kind, OpKind::Status);
            let (mut answered, mut leaders) = (0, 0);
            for n in &nodes {
                match c.metrics(n).await {
                    Ok(m) => {
                        answered += 1;
                        leaders += usize::from(m.lease_held());
                        if json {
                            let line = NodeJson {
                                node: n,
                                metrics: Some(&m),
                                status: status.then(|| m.status()),
                                lease_held: status.then(|| m.lease_held()),
                                error: None,
                            };
                            out!("{}", line.to_line());
                        } else if status {
                            out!("{n}: {}", m.status());
                        } else {
                            out!("{n}: {m:?}");
                        }
                    }
                    Err(e) if json => {
                        let line = NodeJson { node: n, error: Some(e.to_string()), ..NodeJson::default() };
                        out!("{}", line.to_line());
                    }
                    Err(e) => out!("{n}: unreachable: {e}"),
                }
            }
            return if answered == 0 {
                EXIT_NO_ANSWER
            } else if answered < nodes.len() {
                EXIT_PARTIAL
            } else if status && leaders == 0 {
                EXIT_NO_QUORUM
            } else {
                0
            };
        }
        Op::AddLearner { .. } | Op::Promote { .. } | Op::Remove { .. } | Op::SetAddress { .. } => {
            let change = match op {
                Op::AddLearner { id, addr } => MembershipChange::AddLearner { id, addr },
                Op::Promote { ids } => MembershipChange::Promote { ids },
                Op::Remove { ids } => MembershipChange::Remove { ids },
                Op::SetAddress { id, addr } => MembershipChange::SetAddress { id, addr },
                _ => unreachable!("matched above"),
            };
            // A membership change waits for openraft (add-learner: until the learner caught up).
            let mut c = c;
            c.call_timeout = c.call_timeout.max(c.write_deadline);
            return match c.membership_at_leader(&change).await {
                Ok(Ok(v)) => {
                    let nodes: Vec<String> = v.nodes.iter().map(|(id, a)| format!("{id}={a}")).collect();
                    out!(
                        "DONE: voters {:?} learners {:?} nodes {} (membership at index {})",
                        v.voters,
                        v.learners,
                        nodes.join(" "),
                        v.index.map_or("-".to_string(), |i| i.to_string())
                    );
                    0
                }
                Ok(Err(f @ MembershipFailure::Refused(_))) => {
                    out!("{f}");
                    2
                }
                Ok(Err(f @ MembershipFailure::Indeterminate(_))) => {
                    out!("{f}");
                    3
                }
                Err(e) => {
                    esay(&e.to_string());
                    EXIT_NO_ANSWER
                }
            };
        }
        Op::Partition { state } => {
            let mut code = 0;
            for n in &nodes {
                if let Err(e) = c.partition(n, state == "on").await {
                    eout!("{n}: {e}");
                    code = 1;
                }
            }
            return code;
        }
    };
    let reply = c.write(&cmd).await;
    match &reply {
        WriteReply::Committed { index, outcome: Response::Done(receipt) } => {
            match catalog::Receipt::decode(receipt) {
                Ok(r) => out!(
                    "COMMITTED at index {index}: {:?} entity {} now at version {}",
                    r.op,
                    r.id.0,
                    r.version
                ),
                Err(e) => out!("COMMITTED at index {index}: receipt unreadable: {e}"),
            }
            0
        }
        WriteReply::Committed { index, outcome: Response::Duplicate { .. } } => {
            // The client reports a retry that found its request id applied at the index where
            // the write first applied; what applying it gave then is not carried.
            out!(
                "COMMITTED at index {index} (applied by an earlier attempt of this write; a retry found it there, so whether the catalog refused it is not known here: look it up)"
            );
            0
        }
        WriteReply::Committed { index, outcome } => {
            out!("COMMITTED at index {index}, refused by the catalog: {outcome:?}");
            1
        }
        WriteReply::Rejected { why, .. } => {
            out!("REJECTED (never appended): {why}");
            2
        }
        WriteReply::Indeterminate { why } => {
            out!("INDETERMINATE: {why}");
            3
        }
        WriteReply::Redirect { addr, .. } => {
            out!("REDIRECT to {addr} (not followed)");
            2
        }
    }
}
