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
//! ("connection refused" is not "maybe appended"); once one attempt may have been sent, the
//! write can only end `Committed` or `Indeterminate`.
//!
//! One request at a time per `Client` (it keeps one connection per node); use one per
//! concurrent caller.

use crate::net::frame::{read_frame, write_frame};
use crate::net::wire::{EntityView, Msg, NodeMetrics, Reply, WriteReply};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

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
    conns: Mutex<HashMap<String, TcpStream>>,
    /// The node that last committed a write of ours: the next write starts there (a write that
    /// started at the first node every time paid a redirect and its pause whenever another node
    /// led).
    leader: std::sync::Mutex<Option<String>>,
    /// Per-call bound (connect, send, reply).
    pub call_timeout: Duration,
    /// Bound of one logical write, retries included.
    pub write_deadline: Duration,
    ids: AtomicU64,
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
            call_timeout: Duration::from_secs(10),
            write_deadline: Duration::from_secs(20),
            ids: AtomicU64::new(id_seed()),
        }
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
        self.call_sent(addr, msg).await.map_err(|f| f.error)
    }

    /// [`Client::call`], saying on failure whether the request may have reached the node.
    async fn call_sent(&self, addr: &str, msg: &Msg) -> Result<Reply, CallFailed> {
        let mut conns = self.conns.lock().await;
        // Set once the request's first byte may have left: from then on the node may have
        // read all of it (a failure before that, connecting, sent nothing).
        let mut sent = false;
        let r = tokio::time::timeout(self.call_timeout, async {
            if !conns.contains_key(addr) {
                let s = TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                conns.insert(addr.to_string(), s);
            }
            let Some(s) = conns.get_mut(addr) else { return Err(io::Error::other("no connection")) };
            sent = true;
            write_frame(s, msg, &[]).await?;
            match read_frame::<_, Reply>(s).await? {
                Some((reply, _)) => Ok(reply),
                None => Err(io::Error::other(format!("{addr} closed the connection"))),
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("{addr}: no reply in time")))
        });
        if r.is_err() {
            conns.remove(addr);
        }
        r.map_err(|error| CallFailed { sent, error })
    }

    /// One write attempt at one node, no routing or retry.
    pub async fn write_once(
        &self,
        addr: &str,
        command: &catalog::Command,
        request_id: u64,
    ) -> io::Result<WriteReply> {
        self.write_attempt(addr, command, request_id).await.map_err(|f| f.error)
    }

    async fn write_attempt(
        &self,
        addr: &str,
        command: &catalog::Command,
        request_id: u64,
    ) -> Result<WriteReply, CallFailed> {
        let msg = Msg::Write { command: command.encode(), request_id, forwarded: false };
        match self.call_sent(addr, &msg).await? {
            Reply::Write(w) => Ok(w),
            other => {
                Err(CallFailed { sent: true, error: io::Error::other(format!("unexpected reply {other:?}")) })
            }
        }
    }

    /// A logical write: routed to the leader, retried with one request id until it is
    /// Committed or finally Rejected, or the deadline passes (then the last answer, or
    /// Indeterminate when no node answered).
    pub async fn write(&self, command: &catalog::Command) -> WriteReply {
        self.write_with_id(command, self.next_request_id()).await
    }

    /// [`Client::write`] with the caller's request id.
    pub async fn write_with_id(&self, command: &catalog::Command, request_id: u64) -> WriteReply {
        let start = Instant::now();
        let known = self.leader.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut target = known.or_else(|| self.addrs.first().cloned()).unwrap_or_default();
        let mut redirects = 0u32;
        let mut next_node = 0usize;
        let mut last = WriteReply::Indeterminate { why: "no node answered".into() };
        // Once an attempt may have been appended somewhere, the answer can never be a plain
        // refusal again (docs/invariants.md I1: never "failed" for an entry that may still apply).
        let mut maybe_appended = false;
        let mut pause = Duration::from_millis(20);
        for _attempt in 0..10_000 {
            if start.elapsed() > self.write_deadline {
                break;
            }
            let rotate;
            match self.write_attempt(&target, command, request_id).await {
                Ok(WriteReply::Redirect { addr, .. }) => {
                    // The first redirect is followed at once; after that a short pause: two
                    // nodes with stale views must not bounce a request between them at full
                    // speed.
                    target = addr;
                    if redirects > 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    redirects += 1;
                    continue;
                }
                Ok(w @ WriteReply::Committed { .. }) => {
                    *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = Some(target);
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
                Ok(w) => {
                    // A lease not yet established, no leader known, or Indeterminate: the
                    // same request id again (after a pause), and perhaps another node.
                    rotate = matches!(w, WriteReply::Rejected { .. });
                    maybe_appended |= matches!(w, WriteReply::Indeterminate { .. });
                    last = w;
                }
                Err(CallFailed { sent: false, error }) => {
                    // Not connected: nothing reached that node, nothing can be appended.
                    rotate = true;
                    last = WriteReply::Rejected {
                        why: format!("unavailable: no node could be reached ({target}: {error})"),
                        retry: true,
                    };
                }
                Err(CallFailed { sent: true, error }) => {
                    // The request may have been sent before the connection failed.
                    rotate = true;
                    maybe_appended = true;
                    last = WriteReply::Indeterminate { why: error.to_string() };
                }
            }
            if rotate && !self.addrs.is_empty() {
                next_node = (next_node + 1) % self.addrs.len();
                target = self.addrs[next_node].clone();
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
        match last {
            WriteReply::Rejected { why, .. } if maybe_appended => WriteReply::Indeterminate {
                why: format!("an earlier attempt may have been appended; then: {why}"),
            },
            other => other,
        }
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

    /// The test-only partition switch of the node at `addr`.
    pub async fn partition(&self, addr: &str, on: bool) -> io::Result<()> {
        match self.call(addr, &Msg::Partition { on }).await? {
            Reply::Partition(Ok(_)) => Ok(()),
            Reply::Partition(Err(e)) | Reply::Error(e) => Err(io::Error::other(e)),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }
}
