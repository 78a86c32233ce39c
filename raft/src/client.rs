//! A client of a cluster's nodes: catalog writes routed to the leader, admin requests.
//!
//! [`Client::write`] gives a logical write one request id and keeps it on every retry, so a
//! write retried after an Indeterminate answer applies at most once (the apply seam drops a
//! request id it already applied within its dedupe window, and says where: `Duplicate`). It
//! follows redirects, retries refusals that say so (no leader yet, a lease not established right
//! after an election) and connection failures, all within one deadline; what it returns is the
//! last answer: `Committed` (acknowledged: committed by a majority), a final `Rejected`, or
//! `Indeterminate`. An attempt that could not even connect sent nothing: a write none of whose
//! attempts reached a node is `Rejected` as unavailable (`retry: true`), never `Indeterminate`
//! ("connection refused" is not "maybe appended"). A kept connection that the node closed since
//! the last request (it stopped or restarted) is replaced before anything is written on it
//! ([`crate::net::idle`]), so a long-lived client whose whole cluster went away answers
//! unavailable too, not Indeterminate. A new connection is greeted (`Msg::Greet`) before a
//! request is written on it (`net/stream.rs`): a listener that is not a node, and a node that
//! refuses this client's credentials ([`Client::security`]), are found out with nothing sent; a
//! write every node refused so is `Rejected` at once, without retrying until the deadline.
//! Once one attempt may have been sent, the
//! write can only end `Committed` or `Indeterminate`. A retry that finds its request id already
//! applied is the write's success: it is answered `Committed` at the index where the write
//! first applied (its outcome `Duplicate` of that index), not at the retry's own no-op entry.
//!
//! **Deadlines.** A write is bounded by [`Client::write_deadline`] ([`WRITE_DEADLINE`], 20 s),
//! each attempt at one node by a per-attempt deadline: [`Client::attempt_timeout`]
//! ([`ATTEMPT_TIMEOUT`], 300 ms) at first, doubled at a node each time an attempt of the same
//! write timed out there, up to [`Client::call_timeout`] ([`CALL_TIMEOUT`], 10 s, also the bound
//! of an admin call). Why 300 ms: a live leader answers a write within one fdatasync and one
//! round trip to a follower, a few milliseconds (tens under load); a leader that has not
//! answered in 300 ms is probably stopped or cut off, and the followers cannot have replaced it
//! yet (they wait out its lease, the election timeout's maximum, 800 ms by default, before they
//! elect another). So the client leaves a silent node before a new leader can exist and is
//! retrying at the live nodes when one is elected; its next attempt there is forwarded to the
//! new leader. (The followers help: one that has heard nothing from its leader for three
//! heartbeats refuses to forward to it, Rejected at once, and answers a write it had forwarded
//! as soon as that leader falls silent or another leads: `node::stall`.) Keep the deadline
//! below the cluster's minimum election timeout. A shorter one would retry live but slow
//! leaders for nothing; the doubling keeps a loaded cluster whose writes take longer than
//! 300 ms from being retried forever, and being per node it does not make the first visit to
//! another node cost more. A node that did not answer in time or could not be reached is
//! skipped by the rest of the write's attempts until it answers again or every node has failed
//! so. An attempt that timed out may have been appended: it counts as sent. (Before, an attempt
//! waited for the whole call timeout, 10 s: a stopped leader held every client's write until it
//! resumed.)
//!
//! **Size.** A command travels as raw bytes (the frame's tail). A write too large for frames
//! of [`Client::max_frame`] bytes (the protocol maximum by default; set it to the cluster's
//! `--max-frame-bytes`), as a request or as the log entry it would become, is `Rejected` (no
//! retry) before anything is sent, naming the sizes (`net::limit`). A node whose limit the
//! request exceeds answers so (`Reply::TooLarge`) without reading it: that too is `Rejected`
//! at once, nothing having been appended. (Before, the node closed the connection, and the
//! client, having sent bytes, retried until its deadline and answered `Indeterminate`.)
//!
//! One request at a time per `Client` (it keeps one connection per node); use one per
//! concurrent caller.

use crate::net::frame::{read_frame_max, write_frame_max, MAX_FRAME_LEN};
use crate::net::limit;
use crate::net::stream::{is_refusal, not_a_node, Expect, Security, Stream};
use crate::net::wire::{
    EntityView, MembershipChange, MembershipFailure, MembershipView, Msg, NodeMetrics, Reply, WriteReply,
};
use crate::Response;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The first per-attempt deadline of a write (see the module docs for why 300 ms).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);

/// The bound of an admin call, and the most one write attempt may wait.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound of a whole write, retries included.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(20);

/// The pause before retrying after a quick answer that was not final (a refusal, a redirect
/// loop, no connection): doubled on each, up to [`PAUSE_MAX`]. After an attempt that timed
/// out there is none (it waited already).
const PAUSE_MIN: Duration = Duration::from_millis(20);
const PAUSE_MAX: Duration = Duration::from_millis(100);

/// A failed call: the error, and whether the request may have reached the node (it was being
/// written when the call failed). `sent == false`: the connection was never made.
#[derive(Debug)]
struct CallFailed {
    sent: bool,
    error: io::Error,
}

/// A client of the nodes at `addrs`.
#[derive(Debug)]
pub struct Client {
    addrs: Vec<String>,
    conns: Mutex<HashMap<String, Stream>>,
    /// The node that last committed a write of ours: the next write starts there (a write that
    /// started at the first node every time paid a redirect and its pause whenever another node
    /// led).
    leader: std::sync::Mutex<Option<String>>,
    /// The first per-attempt deadline of a write (connect, send, reply at one node); each
    /// attempt of the same write that times out doubles it, up to `call_timeout`.
    pub attempt_timeout: Duration,
    /// Bound of an admin call and of [`Client::write_once`], and the most one attempt of a
    /// write may wait.
    pub call_timeout: Duration,
    /// Bound of one logical write, retries included.
    pub write_deadline: Duration,
    /// The largest frame this client sends or reads ([`MAX_FRAME_LEN`] unless set): a write
    /// that does not fit is refused before it is sent.
    pub max_frame: usize,
    /// How connections are made ([`Security::Plaintext`], loopback only, unless set): with
    /// TLS, the certificate presented decides what this client may do (`net/access.rs`).
    pub security: Security,
    ids: AtomicU64,
    /// Write attempts made (a request sent, or a connection tried for it), since creation.
    attempts: AtomicU64,
}

/// A request id base that differs between processes and clients: std's per-process random
/// hasher keys, the process id and the time.
fn id_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Where the attempts of one write go: first the node that last committed a write of ours (or
/// the first address), then the others in turn, skipping the nodes that did not answer in time
/// or could not be reached in this write until they answer again or every node has failed so.
struct Route<'a> {
    addrs: &'a [String],
    target: String,
    /// The position in `addrs` the next turn starts after.
    at: usize,
    suspects: HashSet<String>,
    /// How many attempts timed out at each node (never forgiven within the write).
    timeouts: HashMap<String, u32>,
}

impl<'a> Route<'a> {
    fn new(addrs: &'a [String], hint: Option<String>) -> Route<'a> {
        let target = hint.or_else(|| addrs.first().cloned()).unwrap_or_default();
        // A hint not among the addresses (a redirect's address): the first turn goes to the
        // first address.
        let at = addrs.iter().position(|a| *a == target).unwrap_or(addrs.len().saturating_sub(1));
        Route { addrs, target, at, suspects: HashSet::new(), timeouts: HashMap::new() }
    }

    /// The current target failed in a way that says the node itself is gone or silent.
    fn suspect(&mut self) {
        self.suspects.insert(self.target.clone());
    }

    /// An attempt at the current target timed out.
    fn timed_out(&mut self) {
        *self.timeouts.entry(self.target.clone()).or_default() += 1;
    }

    fn timeouts_at_target(&self) -> u32 {
        self.timeouts.get(&self.target).copied().unwrap_or(0)
    }

    /// The current target answered: it is alive, whatever it said.
    fn answered(&mut self) {
        self.suspects.remove(&self.target);
    }

    fn is_suspect(&self, addr: &str) -> bool {
        self.suspects.contains(addr)
    }

    /// The next node that is not suspect (the current one only when no other is); when every
    /// one is, they are all forgiven.
    fn rotate(&mut self) {
        let n = self.addrs.len();
        if n == 0 {
            return;
        }
        for _ in 0..n {
            self.at = (self.at + 1) % n;
            if !self.suspects.contains(&self.addrs[self.at]) {
                self.target = self.addrs[self.at].clone();
                return;
            }
        }
        self.suspects.clear();
        self.at = (self.at + 1) % n;
        self.target = self.addrs[self.at].clone();
    }
}

impl Client {
    pub fn new(addrs: Vec<String>) -> Client {
        Client {
            addrs,
            conns: Mutex::new(HashMap::new()),
            leader: std::sync::Mutex::new(None),
            attempt_timeout: ATTEMPT_TIMEOUT,
            call_timeout: CALL_TIMEOUT,
            write_deadline: WRITE_DEADLINE,
            max_frame: MAX_FRAME_LEN,
            security: Security::Plaintext,
            ids: AtomicU64::new(id_seed()),
            attempts: AtomicU64::new(0),
        }
    }

    /// How many write attempts this client has made: each is a request sent to a node, or a
    /// connection tried for one. A write refused before sending makes none.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// A fresh request id (never 0, which means "none").
    pub fn next_request_id(&self) -> u64 {
        loop {
            let id = self.ids.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    /// One request to one node, one reply; the connection is dropped after any failure.
    pub async fn call(&self, addr: &str, msg: &Msg) -> io::Result<Reply> {
        self.call_sent(addr, msg, &[], self.call_timeout).await.map_err(|f| f.error)
    }

    /// [`Client::call`] with the frame's raw `tail`, within `bound`, saying on failure whether
    /// the request may have reached the node.
    async fn call_sent(
        &self,
        addr: &str,
        msg: &Msg,
        tail: &[u8],
        bound: Duration,
    ) -> Result<Reply, CallFailed> {
        let mut conns = self.conns.lock().await;
        // Set once the request's first byte may have left: from then on the node may have
        // read all of it (a failure before that, connecting, sent nothing).
        let mut sent = false;
        // A kept connection the node has closed since (it stopped or restarted) is replaced
        // before anything is written: a request written into it would be "maybe sent".
        if conns.get_mut(addr).is_some_and(|s| !s.reusable(&self.security)) {
            conns.remove(addr);
        }
        let r = tokio::time::timeout(bound, async {
            if !conns.contains_key(addr) {
                // Connected and greeted: a node that refuses this client's certificate (or
                // its plaintext) says so here, before the request is sent.
                let s = self.security.connect_greeted(addr, Expect::AnyNode, self.max_frame).await?;
                conns.insert(addr.to_string(), s);
            }
            let Some(s) = conns.get_mut(addr) else { return Err(io::Error::other("no connection")) };
            sent = true;
            write_frame_max(s, msg, tail, self.max_frame).await?;
            match read_frame_max::<_, Reply>(s, self.max_frame).await {
                Ok(Some((reply, _))) => Ok(reply),
                Ok(None) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed the connection")),
                // Bytes that are not a reply this client reads (its length field is past the
                // limit): what answered may not be a node at all.
                Err(e) => Err(not_a_node(e)),
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("no reply within {bound:?}")))
        });
        if r.is_err() {
            // A late reply must never be read as the answer to the next request.
            conns.remove(addr);
        }
        // Every failure names the node it happened at.
        r.map_err(|e| CallFailed { sent, error: io::Error::new(e.kind(), format!("{addr}: {e}")) })
    }

    /// One write attempt at one node within the call timeout, no routing or retry.
    pub async fn write_once(
        &self,
        addr: &str,
        command: &catalog::Command,
        request_id: u64,
    ) -> io::Result<WriteReply> {
        self.write_attempt(addr, command, request_id, self.call_timeout).await.map_err(|f| f.error)
    }

    async fn write_attempt(
        &self,
        addr: &str,
        command: &catalog::Command,
        request_id: u64,
        bound: Duration,
    ) -> Result<WriteReply, CallFailed> {
        let command = command.encode();
        if let Some(refused) = limit::check(command.len(), request_id, false, self.max_frame, "this client's")
        {
            return Ok(refused);
        }
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let msg = Msg::Write { request_id, forwarded: false };
        match self.call_sent(addr, &msg, &command, bound).await? {
            Reply::Write(w) => Ok(w),
            // The node did not read it: nothing was appended.
            Reply::TooLarge(t) => Ok(limit::refused(t, &format!("the node's (at {addr})"))),
            other => {
                Err(CallFailed { sent: true, error: io::Error::other(format!("unexpected reply {other:?}")) })
            }
        }
    }

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

    pub async fn metrics(&self, addr: &str) -> io::Result<NodeMetrics> {
        match self.call(addr, &Msg::Metrics).await? {
            Reply::Metrics(m) => Ok(*m),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    pub async fn lookup(
        &self,
        addr: &str,
        parent: Option<u64>,
        name: &str,
    ) -> io::Result<Option<EntityView>> {
        match self.call(addr, &Msg::Lookup { parent, name: name.to_string() }).await? {
            Reply::Lookup(e) => Ok(e),
            Reply::Error(e) => Err(io::Error::other(e)),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// Asks the node at `addr` to change the membership: the membership after it, or why not
    /// (`Ok(Err(..))`). Only the leader changes it ([`Client::membership_at_leader`] finds it).
    /// A call that fails after it was sent may have been carried out: the caller says so.
    pub async fn membership(
        &self,
        addr: &str,
        change: &MembershipChange,
    ) -> io::Result<Result<MembershipView, MembershipFailure>> {
        match self.call(addr, &Msg::Membership(change.clone())).await? {
            Reply::Membership(r) => Ok(r),
            Reply::Error(e) => Ok(Err(MembershipFailure::Refused(e))),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// [`Client::membership`] at the leader among this client's nodes (of the nodes that say
    /// they lead, the one in the highest term). `Err` only when no leader was found (nothing
    /// was sent); a call to the leader that fails or times out is `Indeterminate`.
    pub async fn membership_at_leader(
        &self,
        change: &MembershipChange,
    ) -> io::Result<Result<MembershipView, MembershipFailure>> {
        let mut last = io::Error::other("no node answered");
        let mut leader: Option<(u64, String)> = None;
        for n in self.addrs.clone() {
            match self.metrics(&n).await {
                Ok(m) if m.state == "Leader" && leader.as_ref().is_none_or(|(t, _)| m.term > *t) => {
                    leader = Some((m.term, n))
                }
                Ok(_) => {}
                Err(e) => last = e,
            }
        }
        let Some((_, at)) = leader else {
            return Err(io::Error::other(format!("no leader among the nodes given ({last})")));
        };
        Ok(match self.membership(&at, change).await {
            Ok(r) => r,
            Err(e) => Err(MembershipFailure::Indeterminate(format!("{at}: {e}"))),
        })
    }

    /// The test-only partition switch of the node at `addr`.
    pub async fn partition(&self, addr: &str, on: bool) -> io::Result<()> {
        match self.call(addr, &Msg::Partition { on }).await? {
            Reply::Partition(Ok(_)) => Ok(()),
            Reply::Partition(Err(e)) | Reply::Error(e) => Err(io::Error::other(e)),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
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

    fn addrs() -> Vec<String> {
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_route_starts_at_the_hint_and_skips_silent_nodes_until_all_were() {
        /// The next `n` targets.
        fn turns(r: &mut Route, n: usize) -> Vec<String> {
            (0..n)
                .map(|_| {
                    r.rotate();
                    r.target.clone()
                })
                .collect()
        }
        /// Makes `addr` (the `at`-th address) the target.
        fn at(r: &mut Route, addr: &str, at: usize) {
            r.target = addr.into();
            r.at = at;
        }
        let addrs = addrs();
        let mut r = Route::new(&addrs, Some("b".into()));
        assert_eq!(r.target, "b");
        assert_eq!(turns(&mut r, 2), ["c", "a"]);
        // "b" did not answer: the turns go around it.
        at(&mut r, "b", 1);
        r.suspect();
        assert_eq!(turns(&mut r, 3), ["c", "a", "c"]);
        // "c" does not answer either; "a" answers (say, "no leader yet"): the turns stay with
        // it, the one node known alive.
        r.suspect();
        assert_eq!(turns(&mut r, 1), ["a"]);
        r.answered();
        assert_eq!(turns(&mut r, 1), ["a"]);
        // "b" answers again: it is back in the turns.
        at(&mut r, "b", 1);
        r.answered();
        assert_eq!(turns(&mut r, 2), ["a", "b"]);
        // Every node failed: all are forgiven, and the turns go on.
        r.suspect();
        at(&mut r, "a", 0);
        r.suspect();
        assert_eq!(turns(&mut r, 1), ["b"]);
        assert!(r.suspects.is_empty());
        // A hint that is not one of the addresses (a redirect's): the first turn is the first
        // address; no address at all: nothing to turn to.
        assert_eq!(turns(&mut Route::new(&addrs, Some("elsewhere".into())), 1), ["a"]);
        assert_eq!(turns(&mut Route::new(&[], None), 1), [""]);
    }

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
