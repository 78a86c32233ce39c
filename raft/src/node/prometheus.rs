//! `GET /metrics` over plain HTTP/1.1 (`--metrics-listen`, [`super::NodeConfig::metrics_listen`]):
//! the Prometheus text format (version 0.0.4), encoded by `prometheus-client`.
//!
//! What a scrape gets, read at that moment:
//! - the Raft log writer's figures through the engine's own hook, [`wal::prometheus`]
//!   (`wal_fsyncs_total`, `wal_fsync_latency_microseconds` with the writer's buckets, sum and
//!   count, `wal_batch_entries`, `wal_batch_payload_bytes`, ...: its module docs list them);
//! - the node's view, the figures `client metrics` shows ([`super::server`]'s `metrics`):
//!   `walraft_*`, listed in [`NodeCollector`].
//!
//! The responder is minimal on purpose: one request per connection. It reads the request line
//! and headers (at most [`MAX_HEAD`] bytes, within [`DEADLINE`] for the whole exchange), answers
//! `GET /metrics` (or `HEAD`; a query string is ignored) 200, any other path 404, another method
//! 405, anything that is not an HTTP/1 request line 400, a head over the bound 431, always with
//! `Connection: close`, then closes. At most [`MAX_CONNECTIONS`] are served at once; more wait
//! to be accepted. Nothing a client sends can panic it: every byte is read as data.

use crate::net::wire::NodeMetrics;
use crate::node::ctx::Ctx;
use crate::node::server;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// The most bytes of request line and headers read; a longer head is answered 431.
pub const MAX_HEAD: usize = 8 << 10;

/// The bound of one exchange, from the connection's accept to its close.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// Accepts scrapes until the task is aborted.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        match listener.accept().await {
            Ok((mut s, _)) => {
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    // A client's failure, or its silence past the deadline, ends its connection.
                    let _ = tokio::time::timeout(DEADLINE, exchange(&mut s, || scrape(&ctx))).await;
                    drop(slot);
                });
            }
            // Out of descriptors or similar: wait a little rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The text of one scrape: the log writer's figures, then the node's.
async fn scrape(ctx: &Ctx) -> String {
    let node = server::metrics(ctx).await;
    match &ctx.io_stats {
        Some(h) => render(node, h.wal_stats()),
        None => render_node(node, None),
    }
}

/// `node` and `wal` as the Prometheus text format.
pub fn render(node: NodeMetrics, wal: wal::Stats) -> String {
    render_node(node, Some(wal))
}

/// `node`, and `wal` when the node runs on this crate's log store, as the Prometheus text
/// format.
fn render_node(node: NodeMetrics, wal: Option<wal::Stats>) -> String {
    let mut registry = Registry::default();
    if let Some(wal) = wal {
        registry.register_collector(Box::new(wal::prometheus::WalCollector::snapshot(wal)));
    }
    registry.register_collector(Box::new(NodeCollector(node)));
    let mut text = String::new();
    // Writing into a String fails only if an encoder does, and these do not.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
    text
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics` (`head_only`: `HEAD /metrics`).
    Metrics { head_only: bool },
    /// Another path: 404.
    NotFound,
    /// Another method on `/metrics`: 405.
    MethodNotAllowed,
    /// Not an HTTP/1 request line: 400.
    BadRequest,
}

/// Routes a request by its first line (the bytes up to the first `\n`, or all of `head`).
pub fn route(head: &[u8]) -> Route {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else { return Route::BadRequest };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') || method.is_empty() {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or(target);
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics { head_only: false },
        ("HEAD", "/metrics") => Route::Metrics { head_only: true },
        (_, "/metrics") => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

/// Where a request's head ends (past its blank line), if it does within `buf`.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How reading a request's head ended.
enum Head {
    /// The blank line after the headers came, or the client closed its side after sending
    /// something (routed by what it sent).
    Read(Vec<u8>),
    /// More than [`MAX_HEAD`] bytes without the blank line.
    TooLarge,
    /// The client closed without sending anything.
    Nothing,
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(if buf.is_empty() { Head::Nothing } else { Head::Read(buf) });
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if head_end(&buf[from..]).is_some() {
            return Ok(Head::Read(buf));
        }
        if buf.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
    }
}

/// One request on `s` and its answer; `body` gives the metrics' text when they are asked for.
/// Then the connection is closed.
pub async fn exchange<S, F, Fut>(s: &mut S, body: F) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce() -> Fut,
    Fut: Future<Output = String>,
{
    let (status, content_type, text, head_only) = match read_head(s).await? {
        Head::Nothing => return Ok(()),
        Head::TooLarge => (
            "431 Request Header Fields Too Large",
            "text/plain",
            "request head too large\n".to_string(),
            false,
        ),
        Head::Read(head) => match route(&head) {
            Route::Metrics { head_only } => {
                ("200 OK", wal::prometheus::CONTENT_TYPE, body().await, head_only)
            }
            Route::NotFound => ("404 Not Found", "text/plain", "not found: try /metrics\n".into(), false),
            Route::MethodNotAllowed => {
                ("405 Method Not Allowed", "text/plain", "only GET and HEAD\n".into(), false)
            }
            Route::BadRequest => ("400 Bad Request", "text/plain", "bad request\n".into(), false),
        },
    };
    let allow = if status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        text.len()
    )
    .into_bytes();
    if !head_only {
        reply.extend_from_slice(text.as_bytes());
    }
    s.write_all(&reply).await?;
    s.shutdown().await?;
    // Read (and drop) what the client still sends, briefly, so that closing with unread bytes
    // does not reset the connection before the client read the answer.
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        let mut left = 64usize << 10;
        while left > 0 {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    Ok(())
}

/// The node's figures, from one [`NodeMetrics`] (what `client metrics` shows). A figure the
/// node does not know (no snapshot yet, no leader, nothing applied) is left out rather than
/// given as 0. Gauges unless they end in `_total`:
///
/// | metric | from |
/// |---|---|
/// | `walraft_node_id` | `id` |
/// | `walraft_term` | `term` |
/// | `walraft_is_leader` | 1 when `state` is Leader |
/// | `walraft_lease_held` | 1 when a leader a majority acknowledged within its lease ([`NodeMetrics::lease_held`]) |
/// | `walraft_leader_id` | `leader` |
/// | `walraft_last_log_index`, `walraft_committed_index`, `walraft_applied_index` | `last_log_index`, `committed`, `last_applied` |
/// | `walraft_snapshot_index`, `walraft_purged_index` | `snapshot`, `purged` |
/// | `walraft_entities` | `entities` (in the applied state) |
/// | `walraft_replication_lag_entries{follower="ID"}` | a leader's `lag`, per follower or learner with a matched index |
/// | `walraft_quorum_ack_age_milliseconds` | `quorum_ack_ms` |
/// | `walraft_lease_milliseconds` | `lease_ms` |
/// | `walraft_voters`, `walraft_learners` | how many `voters`, `learners` |
/// | `walraft_claims_{made,sent,dropped,proposed,confirmed,split}_total` | `claims` |
/// | `walraft_digest_verified_through_index` | `claims.verified_through` |
/// | `walraft_fenced` | 1 when `fenced` |
/// | `walraft_raft_stopped` | 1 when openraft's core stopped (`fatal`) |
/// | `walraft_log_{appends,appended_entries,reads,cached_reads,truncates,purges}_total`, `walraft_log_read_wait_microseconds_total` | `io`: the Raft log store's calls |
#[derive(Debug)]
pub struct NodeCollector(pub NodeMetrics);

fn gauge(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn counter(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstCounter::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

impl Collector for NodeCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let m = &self.0;
        let e = &mut e;
        gauge(e, "walraft_node_id", "This node's id", m.id)?;
        gauge(e, "walraft_term", "The current Raft term", m.term)?;
        gauge(e, "walraft_is_leader", "1 when this node is the leader", u64::from(m.state == "Leader"))?;
        gauge(
            e,
            "walraft_lease_held",
            "1 when this node leads and a majority acknowledged it within its lease (it can commit)",
            u64::from(m.lease_held()),
        )?;
        let known = [
            ("walraft_leader_id", "The leader this node knows of", m.leader),
            ("walraft_last_log_index", "The last index in this node's log", m.last_log_index),
            ("walraft_committed_index", "The highest index this node knows committed", m.committed),
            ("walraft_applied_index", "The state machine's last applied index", m.last_applied),
            ("walraft_snapshot_index", "The last index the current snapshot holds", m.snapshot),
            ("walraft_purged_index", "The last index purged from the log", m.purged),
            (
                "walraft_digest_verified_through_index",
                "The highest claim index where a majority's digests agreed with this node's",
                m.claims.verified_through,
            ),
            (
                "walraft_quorum_ack_age_milliseconds",
                "A leader: how long ago a majority last acknowledged it",
                m.quorum_ack_ms,
            ),
        ];
        for (name, help, v) in known {
            if let Some(v) = v {
                gauge(e, name, help, v)?;
            }
        }
        gauge(e, "walraft_entities", "Entities in the applied state", m.entities)?;
        let lag: Vec<(u64, u64)> = m.lag.iter().filter_map(|(id, l)| Some((*id, (*l)?))).collect();
        if !lag.is_empty() {
            let mut me = e.encode_descriptor(
                "walraft_replication_lag_entries",
                "A leader: entries of its log each follower or learner has yet to take",
                None,
                MetricType::Gauge,
            )?;
            for (id, l) in lag {
                ConstGauge::new(l).encode(me.encode_family(&[("follower", id)])?)?;
            }
        }
        gauge(
            e,
            "walraft_lease_milliseconds",
            "The leader lease (the maximum election timeout)",
            m.lease_ms,
        )?;
        gauge(e, "walraft_voters", "Voters in the membership this node follows", m.voters.len() as u64)?;
        gauge(
            e,
            "walraft_learners",
            "Learners in the membership this node follows",
            m.learners.len() as u64,
        )?;
        let c = &m.claims;
        for (name, help, v) in [
            ("walraft_claims_made", "Digest claims this node made (one per claim index it applied)", c.made),
            ("walraft_claims_sent", "Of those, sent to the leader or proposed", c.sent),
            ("walraft_claims_dropped", "Of those, dropped (claims are best effort)", c.dropped),
            (
                "walraft_claims_proposed",
                "Claims this node proposed as leader (its own and its followers')",
                c.proposed,
            ),
            (
                "walraft_claims_confirmed",
                "Claim indexes where a majority agreed with this node's digest",
                c.confirmed,
            ),
            ("walraft_claims_split", "Claim indexes whose voters disagreed with no majority", c.split),
        ] {
            counter(e, name, help, v)?;
        }
        gauge(
            e,
            "walraft_fenced",
            "1 when this node fenced itself (a majority's digest differs from its own)",
            u64::from(m.fenced.is_some()),
        )?;
        gauge(
            e,
            "walraft_raft_stopped",
            "1 when openraft's core stopped (a fatal error)",
            u64::from(m.fatal.is_some()),
        )?;
        let io = &m.io;
        for (name, help, v) in [
            ("walraft_log_appends", "append calls to the Raft log store", io.appends),
            ("walraft_log_appended_entries", "Entries those appends carried", io.entries),
            ("walraft_log_reads", "Reads served by a replay of the written log", io.reads),
            ("walraft_log_cached_reads", "Reads served from the entries kept in memory", io.cached_reads),
            (
                "walraft_log_read_wait_microseconds",
                "Time those replays waited for the writer",
                io.read_wait_us,
            ),
            ("walraft_log_truncates", "Truncations of the Raft log", io.truncates),
            ("walraft_log_purges", "Purges of the Raft log", io.purges),
        ] {
            counter(e, name, help, v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_by_their_first_line() {
        let cases: [(&[u8], Route); 14] = [
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Route::Metrics { head_only: false }),
            (b"GET /metrics HTTP/1.0\n\n", Route::Metrics { head_only: false }),
            (b"GET /metrics?name[]=wal HTTP/1.1\r\n\r\n", Route::Metrics { head_only: false }),
            (b"HEAD /metrics HTTP/1.1\r\n\r\n", Route::Metrics { head_only: true }),
            (b"POST /metrics HTTP/1.1\r\n\r\n", Route::MethodNotAllowed),
            (b"GET / HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"GET /metrics/ HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"GET /metrics HTTP/2\r\n\r\n", Route::BadRequest),
            (b"GET /metrics\r\n\r\n", Route::BadRequest),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", Route::BadRequest),
            (b"GET metrics HTTP/1.1\r\n\r\n", Route::BadRequest),
            (b"\xff\xfe\x00garbage\r\n\r\n", Route::BadRequest),
            (b"", Route::BadRequest),
        ];
        for (head, want) in cases {
            assert_eq!(route(head), want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    /// Sends `request` (then closes its side when `close`) and reads the whole answer.
    async fn ask(request: &[u8], close: bool) -> String {
        let (mut client, mut node) = tokio::io::duplex(1 << 20);
        let served = tokio::spawn(async move {
            exchange(&mut node, || async { "wal_fsyncs_total 3\n".to_string() }).await
        });
        client.write_all(request).await.unwrap();
        if close {
            client.shutdown().await.unwrap();
        }
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        drop(client);
        served.await.unwrap().unwrap();
        String::from_utf8(answer).unwrap()
    }

    #[tokio::test]
    async fn each_request_gets_one_answer_and_the_connection_closes() {
        let ok = ask(b"GET /metrics HTTP/1.1\r\nHost: node\r\nAccept: */*\r\n\r\n", false).await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), "{ok}");
        assert!(ok.contains("\r\nConnection: close\r\n"), "{ok}");
        assert!(ok.contains("\r\nContent-Length: 19\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nwal_fsyncs_total 3\n"), "{ok}");

        let head = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n", false).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(ask(b"GET /other HTTP/1.1\r\n\r\n", false).await.starts_with("HTTP/1.1 404 "));
        let post = ask(b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", false).await;
        assert!(post.starts_with("HTTP/1.1 405 ") && post.contains("\r\nAllow: GET, HEAD\r\n"), "{post}");
        // Garbage, answered at the client's close or at its blank line.
        assert!(ask(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", true)
            .await
            .starts_with("HTTP/1.1 400 "));
        assert!(ask(b"hello\n\n", false).await.starts_with("HTTP/1.1 400 "));
        // A request line alone, then the client's close: still answered.
        assert!(ask(b"GET /metrics HTTP/1.0\r\n", true).await.starts_with("HTTP/1.1 200 "));
        // Nothing at all: no answer.
        assert_eq!(ask(b"", true).await, "");
    }

    #[tokio::test]
    async fn a_head_past_the_bound_is_answered_431_without_reading_on() {
        let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
        while request.len() <= MAX_HEAD {
            request.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        let answer = ask(&request, false).await;
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        // Just under the bound: answered.
        let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
        request.resize(MAX_HEAD - 4, b'a');
        request.extend_from_slice(b"\r\n\r\n");
        assert!(ask(&request, false).await.starts_with("HTTP/1.1 200 "));
    }

    #[test]
    fn a_leaders_figures_and_its_followers_lag_are_rendered() {
        let json = serde_json::json!({
            "id": 1, "state": "Leader", "term": 4, "leader": 1, "last_log_index": 90,
            "committed": 90, "last_applied": 88, "digest": "00", "entities": 7, "snapshot": null,
            "purged": null, "partitioned": false, "fatal": null, "fenced": null,
            "claims": {"made": 5, "sent": 5, "dropped": 0, "proposed": 12, "confirmed": 4,
                       "verified_through": 64, "split": 0},
            "voters": [1, 2, 3], "learners": [], "quorum_ack_ms": 20, "lease_ms": 600,
            "lag": {"2": 0, "3": 5}
        });
        let m: NodeMetrics = serde_json::from_value(json).unwrap();
        let wal = wal::Stats { syncs: 2, ..wal::Stats::default() };
        let text = render(m, wal);
        for line in [
            "walraft_is_leader 1",
            "walraft_lease_held 1",
            "walraft_term 4",
            "walraft_applied_index 88",
            "walraft_committed_index 90",
            "walraft_replication_lag_entries{follower=\"2\"} 0",
            "walraft_replication_lag_entries{follower=\"3\"} 5",
            "walraft_claims_confirmed_total 4",
            "walraft_digest_verified_through_index 64",
            "walraft_fenced 0",
            "walraft_voters 3",
            "wal_fsyncs_total 2",
            "wal_fsync_latency_microseconds_count 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        // Not known, not exported.
        assert!(!text.contains("walraft_snapshot_index"), "{text}");
    }
}
