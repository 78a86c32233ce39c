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
//!
//! Here: the client, its deadlines and one call to one node. Where a write's attempts go is in
//! `route.rs`, the retry loop of a logical write in `write.rs`, the admin requests in
//! `admin.rs`.

mod admin;
mod route;
mod write;

use crate::net::frame::{read_frame_max, write_frame_max, MAX_FRAME_LEN};
use crate::net::limit;
use crate::net::stream::{not_a_node, Expect, Security, Stream};
use crate::net::wire::{Msg, Reply, WriteReply};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Mutex;

/// The first per-attempt deadline of a write (see the module docs for why 300 ms).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);

/// The bound of an admin call, and the most one write attempt may wait.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound of a whole write, retries included.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(20);

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
}
