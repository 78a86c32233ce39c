//! A logical write ([`Client::write`]): one request id on every attempt, a per-attempt deadline
//! doubled at a node where attempts timed out, redirects followed, refusals and unreachable nodes
//! retried until the write deadline, and the answer the attempts allow (Committed, Rejected, or
//! Indeterminate once one may have been appended). Separate from the single call (`mod.rs`) and
//! the routing (`route.rs`): this is the write's retry policy and what it may answer.

use super::route::Route;
use super::{CallFailed, Client};
use crate::net::stream::is_refusal;
use crate::net::wire::WriteReply;
use crate::Response;
use std::collections::HashSet;
use std::io;
use std::time::{Duration, Instant};

/// The pause before retrying after a quick answer that was not final (a refusal, a redirect
/// loop, no connection): doubled on each, up to [`PAUSE_MAX`]. After an attempt that timed
/// out there is none (it waited already).
const PAUSE_MIN: Duration = Duration::from_millis(20);
const PAUSE_MAX: Duration = Duration::from_millis(100);

impl Client {
    /// The deadline of a write's attempt at a node where `timeouts` of its attempts timed out.
    fn attempt_bound(&self, timeouts: u32) -> Duration {
        self.attempt_timeout.saturating_mul(1 << timeouts.min(16)).min(self.call_timeout)
    }

    /// A logical write: routed to the leader, retried with one request id until it is
    /// Committed or finally Rejected, or the deadline passes (then the last answer, or
    /// Indeterminate when no node answered).
    pub async fn write(&self, command: &catalog::Command) -> WriteReply {
        self.write_with_id(command, self.next_request_id()).await
    }

    /// [`Client::write`] with the caller's request id. With 0 (no id) the seam cannot tell a
    /// retry from a new write, so a write that may have been sent is never retried: it ends
    /// Indeterminate at the first such attempt.
    pub async fn write_with_id(&self, command: &catalog::Command, request_id: u64) -> WriteReply {
        let start = Instant::now();
        let hint = self.leader.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut route = Route::new(&self.addrs, hint);
        let mut redirects = 0u32;
        let mut last = WriteReply::Rejected {
            why: "unavailable: no attempt was made within the write deadline".into(),
            retry: true,
        };
        // Once an attempt may have been appended somewhere, the answer can never be a plain
        // refusal again (docs/invariants.md I1: never "failed" for an entry that may still apply).
        let mut maybe_appended = false;
        let mut pause = PAUSE_MIN;
        // Nodes that refused this client's credentials (`net/stream.rs`): when every node has,
        // retrying cannot help; the write is Rejected at once.
        let mut refused_by = HashSet::new();
        for _attempt in 0..10_000 {
            let left = self.write_deadline.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            let bound = self.attempt_bound(route.timeouts_at_target()).min(left);
            let mut wait = true;
            let attempt = self.write_attempt(&route.target, command, request_id, bound).await;
            if attempt.is_ok() {
                route.answered();
            }
            match attempt {
                Ok(WriteReply::Redirect { addr, .. }) if !route.is_suspect(&addr) => {
                    // The first redirect is followed at once; after that a short pause: two
                    // nodes with stale views must not bounce a request between them at full
                    // speed.
                    route.target = addr;
                    if redirects > 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    redirects += 1;
                    continue;
                }
                // To a node this write could not reach or that did not answer: the node that
                // sent it has a stale view; another may know better.
                Ok(WriteReply::Redirect { .. }) => route.rotate(),
                Ok(WriteReply::Committed { outcome: Response::Duplicate { first_index }, .. }) => {
                    // A retry found the write applied by an earlier attempt: that is where it
                    // committed.
                    self.remember_leader(&route.target);
                    let outcome = Response::Duplicate { first_index };
                    return WriteReply::Committed { index: first_index, outcome };
                }
                Ok(w @ WriteReply::Committed { .. }) => {
                    self.remember_leader(&route.target);
                    return w;
                }
                Ok(WriteReply::Rejected { why, retry: false }) if maybe_appended => {
                    return WriteReply::Indeterminate {
                        why: format!(
                            "an earlier attempt may have been appended; the last one was refused: {why}"
                        ),
                    }
                }
                Ok(w @ WriteReply::Rejected { retry: false, .. }) => return w,
                Ok(w @ WriteReply::Rejected { .. }) => {
                    // No leader known there yet, or a lease not established or lapsed: not
                    // appended; another node may know a leader.
                    last = w;
                    route.rotate();
                }
                Ok(w @ WriteReply::Indeterminate { .. }) => {
                    // The node answered (it is alive) but does not know the write's fate (a
                    // leader change or a lapsed lease while it waited, a timeout): the same
                    // request id again at the same node, which now routes it anew.
                    maybe_appended = true;
                    last = w;
                }
                Err(CallFailed { sent: false, error }) if is_refusal(&error) => {
                    refused_by.insert(route.target.clone());
                    let why = format!("not appended: this client was refused ({error})");
                    if self.addrs.iter().all(|a| refused_by.contains(a)) && !maybe_appended {
                        return WriteReply::Rejected { why, retry: false };
                    }
                    last = WriteReply::Rejected { why, retry: false };
                    route.rotate();
                }
                Err(CallFailed { sent: false, error }) => {
                    // Not connected: nothing reached that node, nothing can be appended.
                    last = WriteReply::Rejected {
                        why: format!("unavailable: no node could be reached ({error})"),
                        retry: true,
                    };
                    route.suspect();
                    route.rotate();
                }
                Err(CallFailed { sent: true, error }) => {
                    // Sent, then no reply (in time): it may have been appended there.
                    maybe_appended = true;
                    if error.kind() == io::ErrorKind::TimedOut {
                        route.timed_out();
                        wait = false;
                    }
                    last = WriteReply::Indeterminate { why: error.to_string() };
                    route.suspect();
                    route.rotate();
                }
            }
            if maybe_appended && request_id == 0 {
                return WriteReply::Indeterminate {
                    why: format!(
                        "not retried: the write has no request id, so a retry could apply it twice; {}",
                        why(&last)
                    ),
                };
            }
            if wait {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(PAUSE_MAX);
            }
        }
        match last {
            WriteReply::Rejected { why, .. } if maybe_appended => WriteReply::Indeterminate {
                why: format!("an earlier attempt may have been appended; then: {why}"),
            },
            other => other,
        }
    }

    fn remember_leader(&self, addr: &str) {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = Some(addr.to_string());
    }
}

/// The reason an answer gives, for a message.
fn why(w: &WriteReply) -> String {
    match w {
        WriteReply::Rejected { why, .. } | WriteReply::Indeterminate { why } => why.clone(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::route::tests::addrs;
    use crate::client::{ATTEMPT_TIMEOUT, CALL_TIMEOUT};

    #[test]
    fn an_attempt_deadline_doubles_with_each_timeout_at_a_node_up_to_the_call_timeout() {
        let addrs = addrs();
        let c = Client::new(addrs.clone());
        // Counted per node: a first visit to another node gets the first deadline.
        let mut r = Route::new(&addrs, None);
        r.timed_out();
        r.timed_out();
        assert_eq!(c.attempt_bound(r.timeouts_at_target()), Duration::from_millis(1200));
        r.rotate();
        assert_eq!(c.attempt_bound(r.timeouts_at_target()), ATTEMPT_TIMEOUT);
        let bounds: Vec<u64> = (0..8).map(|t| c.attempt_bound(t).as_millis() as u64).collect();
        assert_eq!(bounds, [300, 600, 1200, 2400, 4800, 9600, 10_000, 10_000]);
        assert_eq!(c.attempt_bound(u32::MAX), CALL_TIMEOUT);
    }
}
