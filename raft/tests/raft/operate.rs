//! What an operator runs against a live cluster of real `walraft-node` processes (issue 28):
//! `client status` says who leads and whether that leader can commit (a leader cut off from the
//! majority says NO QUORUM once its lease lapses), `client metrics --json` is one JSON object per
//! node, the exit codes tell every node answered, some did, none did, or no leader holds a lease;
//! a node logs its role changes through `tracing` and keeps a PID file while it runs; and no
//! report panics when its output pipe is closed.

use crate::support;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{client_cmd, out_text, Cluster, BIN, WAIT};

/// Runs `BIN args` with its stdout a pipe whose reading end is already closed: every write to
/// it fails with EPIPE. The exit code, and stderr.
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(BIN).args(args).stdout(writer).stderr(Stdio::piped()).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn pid_in(data: &Path) -> Option<u32> {
    std::fs::read_to_string(data.join("node.pid")).ok()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_metrics_logs_and_pid_files_tell_an_operator_what_the_cluster_does() {
    let mut c = Cluster::start(&[]);
    let all: Vec<String> = (1..=3).map(|i| c.addr(i)).collect();
    let (leader, term) = c.leader(&[1, 2, 3]).await;

    // Every node answered and one leader holds its lease: 0, one line per node.
    let t = Instant::now();
    let o = loop {
        let o = client_cmd(&all, &["status"]);
        if o.status.code() == Some(0) || t.elapsed() > WAIT {
            break o;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    assert_eq!(out.lines().count(), 3, "{out}");
    let leading: Vec<&str> = out.lines().filter(|l| l.contains(" Leader ")).collect();
    assert_eq!(leading.len(), 1, "{out}");
    assert!(leading[0].contains(&format!("node {leader} Leader term {term}")), "{out}");
    assert!(leading[0].contains("held") && leading[0].contains("lag ["), "{out}");

    // --json: one object per node and line, the metrics under "metrics".
    let o = client_cmd(&all, &["metrics", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    for (v, addr) in lines.iter().zip(&all) {
        assert_eq!(v["node"], addr.as_str());
        assert_eq!(v["metrics"]["voters"], serde_json::json!([1, 2, 3]), "{v}");
    }
    let led: Vec<_> = lines.iter().filter(|v| v["metrics"]["state"] == "Leader").collect();
    assert_eq!(led.len(), 1);
    assert!(led[0]["metrics"]["quorum_ack_ms"].as_u64().is_some(), "{}", led[0]);

    // Each node keeps a PID file with its own process id while it runs.
    for id in 1..=3u64 {
        assert_eq!(pid_in(&c.data(id)), Some(c.children[&id].id()), "node {id}'s node.pid");
    }
    // The leader logged its role through tracing (stderr goes to n<id>.out).
    let log = c.output(leader);
    assert!(log.contains("role") && log.contains("role=Leader"), "{log}");

    // The leader cut off from both followers: once its lease lapses it says NO QUORUM, and
    // `status` against it alone exits 7 (it answered, but no leader can commit).
    let la = c.addr(leader);
    let o = client_cmd(std::slice::from_ref(&la), &["partition", "on"]);
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    let t = Instant::now();
    let o = loop {
        let o = client_cmd(std::slice::from_ref(&la), &["status"]);
        if o.status.code() == Some(7) || t.elapsed() > WAIT {
            break o;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let out = out_text(&o);
    assert_eq!(o.status.code(), Some(7), "{out}");
    // It may still call itself Leader (NO QUORUM), or have stepped down already.
    assert!(out.contains("NO QUORUM") || !out.contains(" Leader "), "{out}");
    let o = client_cmd(std::slice::from_ref(&la), &["partition", "off"]);
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    c.leader(&[1, 2, 3]).await;

    // A node down: the others still answer, and the exit code says not all did (6).
    let follower = (1..=3).find(|i| *i != leader).unwrap();
    c.stop(follower);
    assert!(pid_in(&c.data(follower)).is_none(), "a clean stop removes node.pid");
    let o = client_cmd(&all, &["status"]);
    assert_eq!(o.status.code(), Some(6), "{}", out_text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("unreachable"), "{}", out_text(&o));
    let o = client_cmd(&all, &["metrics", "--json"]);
    assert_eq!(o.status.code(), Some(6), "{}", out_text(&o));
    let down: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("error").is_some())
        .collect();
    assert_eq!(down.len(), 1, "{}", out_text(&o));
    assert_eq!(down[0]["node"], c.addr(follower).as_str());

    // No node answers: 5.
    c.stop_all();
    let o = client_cmd(&all, &["status"]);
    assert_eq!(o.status.code(), Some(5), "{}", out_text(&o));

    // Reports into a closed pipe end quietly with the code they would have given.
    let data: Vec<String> = (1..=3).map(|i| c.data(i).display().to_string()).collect();
    for args in [
        vec!["check", data[0].as_str()],
        vec!["compare", data[0].as_str(), data[1].as_str(), data[2].as_str()],
        vec!["client", "--plaintext", "--node", all[0].as_str(), "status"],
        vec!["client", "--plaintext", "--node", all[0].as_str(), "metrics", "--json"],
    ] {
        let normal = Command::new(BIN).args(&args).output().unwrap().status.code();
        let (code, stderr) = into_closed_pipe(&args);
        assert_eq!(code, normal, "{args:?} into a closed pipe: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// docs/running-a-cluster.md's commands, every one of its shell blocks in order (three nodes,
/// writes, status, a fourth node added and promoted and node 3 removed, the offline checks),
/// run by bash on free ports and in a temporary directory (`cargo build` is the test's own). Any
/// command that fails fails the script (`bash -e`); the whole is bounded by `timeout`.
#[test]
fn the_cluster_guide_runs_as_written() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/running-a-cluster.md"))
        .unwrap();
    let mut script = String::new();
    let mut in_sh = false;
    for line in guide.lines() {
        match line.trim_start().strip_prefix("```") {
            Some("sh") => in_sh = true,
            Some(_) => in_sh = false,
            None if in_sh => {
                script.push_str(line);
                script.push('\n');
            }
            None => {}
        }
    }
    assert!(
        script.contains("$C create") && script.contains("$A promote") && script.contains("$N compare"),
        "{script}"
    );
    let dir = tempfile::tempdir().unwrap();
    let ports = support::free_ports(4);
    let mut script = script
        .replace("cargo build -p wal-raft --bin walraft-node\n", "")
        .replace("N=target/debug/walraft-node", &format!("N={BIN}"))
        .replace("/tmp/walraft-n", &format!("{}/log-n", dir.path().display()))
        .replace("/tmp/walraft", &dir.path().display().to_string());
    for (i, p) in ports.iter().enumerate() {
        script = script.replace(&format!("127.0.0.1:{}", 7101 + i), &format!("127.0.0.1:{p}"));
    }
    assert!(
        !script.contains(":710") && !script.contains("/tmp/walraft"),
        "not every address or path replaced:\n{script}"
    );
    let o = Command::new("timeout")
        .args(["120", "bash", "-e", "-c", &script])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let out = out_text(&o);
    let logs: String = (1..=3)
        .map(|i| std::fs::read_to_string(dir.path().join(format!("log-n{i}.log"))).unwrap_or_default())
        .collect();
    assert_eq!(o.status.code(), Some(0), "the guide's commands failed:\n{out}\n--- node logs:\n{logs}");
    for want in ["COMMITTED at index 2", "lake9", "held", "\"metrics\"", "CLEAN", "AGREE"] {
        assert!(out.contains(want), "`{want}` not in the guide's output:\n{out}");
    }
    assert!(logs.contains("role=Leader"), "no role event in the nodes' logs:\n{logs}");
    for i in 1..=3 {
        assert!(
            !dir.path().join(format!("n{i}/node.pid")).exists(),
            "node {i} left node.pid after a clean stop"
        );
    }
}

/// Raft messages reach a node only on a connection that said which node it is for
/// (`Msg::Hello`): a hello for another id is refused and the connection closed, and a Raft
/// message without a hello is refused before openraft sees it (issue 28, after review: a
/// mistyped address once gave one process two votes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_messages_need_a_hello_for_this_node() {
    use wal_raft::net::frame::{read_frame, write_frame};
    use wal_raft::net::wire::{Msg, Reply};
    let c = Cluster::start(&[]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let addr = c.addr(leader);
    let before = c.metrics(leader).await.unwrap();

    // A hello for another node: refused, then the connection is closed.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    write_frame(&mut s, &Msg::Hello { from: 7, to: leader + 10 }, &[]).await.unwrap();
    let (r, _): (Reply, _) = read_frame(&mut s).await.unwrap().expect("an answer");
    assert!(matches!(&r, Reply::Hello(Err(w)) if w.contains(&format!("this is node {leader}"))), "{r:?}");
    assert!(
        read_frame::<_, Reply>(&mut s).await.map(|r| r.is_none()).unwrap_or(true),
        "the connection stays open"
    );

    // A vote request without a hello: refused, never handed to openraft (the term is unmoved).
    let vote = Msg::Vote(openraft::raft::VoteRequest::new(openraft::Vote::new(term + 5, 99), None));
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    write_frame(&mut s, &vote, &[]).await.unwrap();
    let (r, _): (Reply, _) = read_frame(&mut s).await.unwrap().expect("an answer");
    assert!(matches!(&r, Reply::Error(w) if w.contains("Hello first")), "{r:?}");
    let after = c.metrics(leader).await.unwrap();
    assert_eq!(
        (after.term, after.state.as_str()),
        (before.term, "Leader"),
        "a vote without a hello moved the node"
    );
}
