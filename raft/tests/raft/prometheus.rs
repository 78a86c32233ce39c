//! `walraft-node run --metrics-listen` (issue 28): three real nodes, each serving `GET /metrics`
//! on its own port, scraped with a plain `TcpStream`. The log writer's fsync latency histogram
//! is the node's own (its `_count` and `_sum` are the `io.syncs` and `io.sync_us` that
//! `client metrics --json` reports, read between two scrapes since both only grow), the applied
//! index is the node's, the leader exports each follower's lag and `walraft_is_leader 1`, a
//! follower `0`; another path is 404, and garbage, an oversized head or a silent client leave
//! the node answering.

use crate::support;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::support::{create, created_id, Cluster, BIN};

/// Sends `request` to `addr` and reads the answer until the node closes: (status code, body).
fn http(addr: &str, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap_or_else(|e| panic!("{addr}: {e}"));
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head end: {answer:?}"));
    assert!(head.contains("\r\nConnection: close"), "{head}");
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    (code, body.to_string())
}

/// A scrape of `addr`: each sample's series (name and labels, as written) and value.
fn scrape(addr: &str) -> BTreeMap<String, f64> {
    let (code, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: node\r\nAccept: text/plain\r\n\r\n");
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}"));
            (series.to_string(), v.parse::<f64>().unwrap_or_else(|e| panic!("{l:?}: {e}")))
        })
        .collect()
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

/// `client metrics --json` of the node at `addr`: its `metrics` object.
fn json_metrics(addr: &str) -> serde_json::Value {
    let o = Command::new(BIN)
        .args(["client", "--plaintext", "--node", addr, "metrics", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let line: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    line["metrics"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_exports_the_writers_histogram_and_the_nodes_view() {
    // Each node its own metrics port: the cluster's extra flags change before each spawn.
    let ports = support::free_ports(6);
    let at = |p: u16| format!("127.0.0.1:{p}");
    let mut c = Cluster {
        bin: BIN.into(),
        dir: tempfile::tempdir().unwrap(),
        addrs: (1..=3u64).zip(&ports[..3]).map(|(i, p)| (i, at(*p))).collect(),
        children: Default::default(),
        extra: vec![],
        pki: None,
    };
    let scrape_at: BTreeMap<u64, String> = (1..=3u64).zip(&ports[3..]).map(|(i, p)| (i, at(*p))).collect();
    for id in 1..=3 {
        c.extra = vec!["--metrics-listen".into(), scrape_at[&id].clone()];
        c.spawn(id);
    }
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let client = c.client(&[1, 2, 3]);
    let mut last = 0;
    for i in 0..20 {
        let r = client.write(&create(&format!("scraped-{i}"))).await;
        last = created_id(&r).unwrap_or_else(|| panic!("{r:?}"));
    }
    c.converged(&[1, 2, 3], last).await;
    let on_leader = &scrape_at[&leader];
    assert!(
        c.output(leader).contains(&format!("metrics on http://{on_leader}/metrics")),
        "{}",
        c.output(leader)
    );

    // The writer's fsync histogram is the node's own: scrape, metrics --json, scrape.
    let before = scrape(on_leader);
    let m = json_metrics(&c.addr(leader));
    let after = scrape(on_leader);
    let h = "wal_fsync_latency_microseconds";
    let syncs = m["io"]["syncs"].as_u64().unwrap() as f64;
    let sync_us = m["io"]["sync_us"].as_u64().unwrap() as f64;
    assert!(syncs > 0.0, "{m}");
    for (what, json, series) in [("count", syncs, format!("{h}_count")), ("sum", sync_us, format!("{h}_sum"))]
    {
        let (lo, hi) = (value(&before, &series), value(&after, &series));
        assert!(lo <= json && json <= hi, "{what}: metrics --json says {json}, the scrapes {lo} then {hi}");
    }
    // Its buckets: the writer's power-of-two bounds, cumulative, ending at +Inf = _count.
    let buckets: Vec<(f64, f64)> = after
        .iter()
        .filter_map(|(series, v)| {
            let le = series.strip_prefix(&format!("{h}_bucket{{le=\""))?.strip_suffix("\"}")?;
            Some((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, *v))
        })
        .collect();
    let mut sorted = buckets.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bounds: Vec<f64> = sorted.iter().map(|b| b.0).collect();
    let want: Vec<f64> = (1..40).map(|i| ((1u64 << i) - 1) as f64).chain([f64::INFINITY]).collect();
    assert_eq!(bounds, want);
    assert!(sorted.windows(2).all(|w| w[0].1 <= w[1].1), "{sorted:?}");
    assert_eq!(sorted.last().unwrap().1, value(&after, &format!("{h}_count")));
    assert_eq!(value(&after, "wal_fsyncs_total"), value(&after, &format!("{h}_count")));
    assert!(value(&after, "wal_appended_entries_total") > last as f64 / 2.0, "{after:#?}");

    // The node's view: applied index (between the scrapes too), term, leadership, lag.
    let applied = m["last_applied"].as_u64().unwrap() as f64;
    let (lo, hi) = (value(&before, "walraft_applied_index"), value(&after, "walraft_applied_index"));
    assert!(lo <= applied && applied <= hi && lo >= last as f64, "{lo} {applied} {hi} (last write {last})");
    assert!(value(&after, "walraft_committed_index") >= last as f64);
    assert!(value(&after, "walraft_term") >= term as f64);
    assert_eq!(value(&after, "walraft_is_leader"), 1.0);
    // Held unless a majority's acknowledgement is late (a loaded machine): never without leading.
    assert!([0.0, 1.0].contains(&value(&after, "walraft_lease_held")), "{after:#?}");
    assert_eq!(value(&after, "walraft_fenced"), 0.0);
    assert_eq!(value(&after, "walraft_node_id"), leader as f64);
    assert_eq!(value(&after, "walraft_voters"), 3.0);
    let lagging: Vec<String> = after
        .keys()
        .filter_map(|k| k.strip_prefix("walraft_replication_lag_entries{follower=\"")?.strip_suffix("\"}"))
        .map(str::to_string)
        .collect();
    let others: Vec<String> = (1..=3u64).filter(|id| *id != leader).map(|id| id.to_string()).collect();
    assert_eq!(lagging, others, "{after:#?}");
    for f in &others {
        let lag = value(&after, &format!("walraft_replication_lag_entries{{follower=\"{f}\"}}"));
        assert!(lag <= value(&after, "walraft_last_log_index"), "{lag}");
    }
    // Claims: counted, and once confirmed, the index they verified through.
    let confirmed = value(&after, "walraft_claims_confirmed_total");
    assert_eq!(after.contains_key("walraft_digest_verified_through_index"), confirmed > 0.0, "{after:#?}");

    // A follower: not the leader, no lag of its own to export, its own applied index.
    let f = scrape(&scrape_at[&follower]);
    assert_eq!(value(&f, "walraft_is_leader"), 0.0);
    assert_eq!(value(&f, "walraft_lease_held"), 0.0);
    assert_eq!(value(&f, "walraft_leader_id"), leader as f64);
    assert!(value(&f, "walraft_applied_index") >= last as f64);
    assert!(!f.keys().any(|k| k.starts_with("walraft_replication_lag_entries")), "{f:#?}");
    assert!(value(&f, "wal_fsync_latency_microseconds_count") > 0.0);

    // Another path: 404; another method: 405; garbage: 400; a head past the bound: 431; a
    // client that sends nothing, or half a request and goes away: nothing. The node answers
    // after each, on both ports.
    assert_eq!(http(on_leader, b"GET /nope HTTP/1.1\r\nHost: node\r\n\r\n").0, 404);
    assert_eq!(http(on_leader, b"DELETE /metrics HTTP/1.1\r\n\r\n").0, 405);
    assert_eq!(http(on_leader, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n").0, 400);
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 64 << 10));
    assert_eq!(http(on_leader, &huge).0, 431);
    drop(TcpStream::connect(on_leader).unwrap());
    TcpStream::connect(on_leader).unwrap().write_all(b"GET /met").unwrap();
    let again = scrape(on_leader);
    assert!(value(&again, &format!("{h}_count")) >= value(&after, &format!("{h}_count")));
    assert!(c.metrics(leader).await.is_some(), "the node's own port stopped answering");
    assert!(c.exited().is_empty(), "{}", c.outputs(&[1, 2, 3]));
    for (id, status) in c.stop_all() {
        assert_eq!(status.and_then(|s| s.code()), Some(0), "node {id}\n{}", c.outputs(&[id]));
    }
}
