//! Found by the fault campaign (docs/fault-campaign.md, "What the campaign found"): a client
//! write larger than the nodes' frame limit was answered Indeterminate after the client's
//! whole deadline, though it could never be appended: the node closed the connection on the
//! frame without a reply, and the client, having sent bytes, had to take that for "maybe
//! appended". A command also travelled as a JSON array of numbers, up to four bytes a byte.
//!
//! Now (`wal_raft::net::limit`): the command is the frame's raw tail; a node answers a frame
//! over its limit with `TooLarge` without reading it, and the client makes that `Rejected`
//! (no retry) at once; a node refuses a command whose log entry no append-entries frame could
//! carry; a client refuses what its own limit cannot carry before sending anything. Every
//! client here has a 10-minute deadline and every test is bounded by 60 s, so an answer that
//! waited for the deadline fails the test; attempts are counted, not timed.

use crate::support;
use crate::support::{Cluster, BIN};
use std::net::TcpListener;
use std::time::Duration;
use wal_raft::client::Client;
use wal_raft::net::limit::{max_command_len, request_len};
use wal_raft::net::wire::WriteReply;

const LIMIT: usize = 16 << 10;
const PATIENCE: Duration = Duration::from_secs(600);
const BOUND: Duration = Duration::from_secs(60);

/// A create named `name` whose encoding is exactly `len` bytes.
fn create_of(name: &str, len: usize) -> catalog::Command {
    let mut cmd = support::create(name);
    let base = cmd.encode().len();
    let catalog::Command::Create { props, .. } = &mut cmd else { unreachable!() };
    *props = vec![b'p'; len - base];
    assert_eq!(cmd.encode().len(), len);
    cmd
}

fn rejected(w: &WriteReply) -> &str {
    eprintln!("answer: {w:?}");
    match w {
        WriteReply::Rejected { why, retry: false } => why,
        other => panic!("not a final Rejected: {other:?}"),
    }
}

fn patient(c: &Cluster, ids: &[u64]) -> Client {
    let mut client = c.client(ids);
    client.write_deadline = PATIENCE;
    client
}

/// Neither name is applied on any of `ids`, and `present` is on each.
async fn applied_only(c: &Cluster, ids: &[u64], absent: &[&str], present: &str) {
    let (at, _) = c.converged(ids, 1).await;
    let client = c.client(ids);
    for id in ids {
        for name in absent {
            let found = client.lookup(&c.addr(*id), None, name).await.unwrap();
            assert_eq!(found, None, "{name} applied on node {id} (applied index {at})");
        }
        assert!(client.lookup(&c.addr(*id), None, present).await.unwrap().is_some(), "{present} on {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_larger_than_a_frame_is_rejected_at_once() {
    let mut c = Cluster::start(&["--max-frame-bytes", &LIMIT.to_string()]);
    tokio::time::timeout(BOUND, async {
        c.leader(&[1, 2, 3]).await;
        let client = patient(&c, &[1, 2, 3]);
        // Raw bytes: a command of almost the whole frame fits, where JSON numbers fitted a
        // quarter of it.
        let most = max_command_len(LIMIT);
        assert!(most > LIMIT - 600, "{most}");
        let warm = client.write(&support::create("warm")).await;
        assert!(matches!(warm, WriteReply::Committed { .. }), "{warm:?}");

        // Over the frame: the node answers without reading it; one attempt, Rejected.
        let big = create_of("big", 20 << 10);
        let len = request_len(u64::MAX, false, big.encode().len());
        let before = client.attempts();
        let r = client.write(&big).await;
        let why = rejected(&r);
        assert_eq!(client.attempts() - before, 1, "{r:?}");
        assert!(why.starts_with("nothing was appended: the request is "), "{why}");
        assert!(why.ends_with(&format!("frame limit is {LIMIT} bytes")), "{why}");
        assert!(len > LIMIT);

        // Fits the request frame, but as a log entry it would fit no append-entries frame:
        // proposed, it could never reach a follower and would hold back every later entry.
        // Refused by the node before it is proposed, one attempt; and so is anything past the
        // bound, which is sized for the widest log ids.
        for (name, len) in [("unsendable", LIMIT - 100), ("past", most + 1)] {
            assert!(request_len(u64::MAX, false, len) <= LIMIT);
            let before = client.attempts();
            let r = client.write(&create_of(name, len)).await;
            let why = rejected(&r);
            assert_eq!(client.attempts() - before, 1, "{r:?}");
            assert!(why.contains(&format!("a log entry holds at most {most}")), "{why}");
        }

        // The largest command a node takes is Committed and reaches every replica.
        let largest = create_of("largest", most);
        let r = client.write(&largest).await;
        assert!(matches!(r, WriteReply::Committed { .. }), "{r:?}");

        // Each node, leader or follower, answers the oversized frame itself, and the
        // connection it came on stays in step: the next request on it is served.
        for id in [1, 2, 3] {
            let r = client.write_once(&c.addr(id), &big, client.next_request_id()).await.unwrap();
            assert!(rejected(&r).contains(&c.addr(id)), "{r:?}");
            let m = client.metrics(&c.addr(id)).await.unwrap();
            assert_eq!(m.id, id);
        }
        let after = client.write(&support::create("after")).await;
        assert!(matches!(after, WriteReply::Committed { .. }), "{after:?}");
        applied_only(&c, &[1, 2, 3], &["big", "unsendable", "past"], "largest").await;
    })
    .await
    .unwrap_or_else(|_| panic!("not answered within {BOUND:?}\n{}", c.outputs(&[1, 2, 3])));
    c.stop_all();
}

/// A follower with a larger limit than its leader's (a misconfigured cluster) takes a write
/// and forwards it; the leader answers TooLarge; the follower answers Rejected, and nothing
/// is applied anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_forwarded_to_a_leader_with_a_smaller_limit_is_rejected() {
    let ports = support::free_ports(3);
    let mut c = Cluster {
        bin: BIN.into(),
        dir: tempfile::tempdir().unwrap(),
        addrs: (1..=3u64).zip(ports).map(|(i, p)| (i, format!("127.0.0.1:{p}"))).collect(),
        children: Default::default(),
        extra: vec!["--max-frame-bytes".into(), LIMIT.to_string()],
        pki: None,
    };
    c.spawn(1);
    c.spawn(2);
    tokio::time::timeout(BOUND, async {
        let (leader, _) = c.leader(&[1, 2]).await;
        c.extra = vec!["--max-frame-bytes".into(), (4 * LIMIT).to_string()];
        c.spawn(3);
        let client = patient(&c, &[3]);
        // Node 3 follows (the write is forwarded, and committed).
        let warm = client.write(&support::create("warm")).await;
        assert!(matches!(warm, WriteReply::Committed { .. }), "{warm:?}");
        assert_eq!(c.metrics(3).await.unwrap().leader, Some(leader));

        let big = create_of("big", 2 * LIMIT);
        let before = client.attempts();
        let r = client.write(&big).await;
        let why = rejected(&r);
        assert!(why.contains(&format!("the leader's (node {leader} at {})", c.addr(leader))), "{why}");
        assert!(why.contains(&format!("frame limit is {LIMIT} bytes")), "{why}");
        // One attempt; one more for each time node 3 found the leader silent for three
        // heartbeats and said to retry (Rejected, retry), which a loaded machine can cause.
        let attempts = client.attempts() - before;
        assert!((1..=3).contains(&attempts), "{attempts} attempts: {r:?}");

        // The pooled connection to the leader stayed in step: the next forwarded write commits.
        let after = client.write(&support::create("after")).await;
        assert!(matches!(after, WriteReply::Committed { .. }), "{after:?}");
        applied_only(&c, &[1, 2, 3], &["big"], "after").await;
    })
    .await
    .unwrap_or_else(|_| panic!("not answered within {BOUND:?}\n{}", c.outputs(&[1, 2, 3])));
    c.stop_all();
}

/// A listener that accepts nothing: a client that sent would at least connect.
fn silent_node() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

fn connected(l: &TcpListener) -> bool {
    match l.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_client_refuses_what_its_own_limit_cannot_carry_without_sending_it() {
    let (l, addr) = silent_node();
    let mut client = Client::new(vec![addr]);
    client.max_frame = LIMIT;
    client.write_deadline = PATIENCE;
    let r = tokio::time::timeout(BOUND, client.write(&create_of("big", 20 << 10))).await.unwrap();
    let why = rejected(&r);
    assert!(why.ends_with(&format!("this client's frame limit is {LIMIT} bytes")), "{why}");
    let most = max_command_len(LIMIT);
    let r = tokio::time::timeout(BOUND, client.write(&create_of("past", most + 1))).await.unwrap();
    assert!(rejected(&r).contains(&format!("a log entry holds at most {most}")), "{r:?}");
    assert_eq!(client.attempts(), 0);
    assert!(!connected(&l), "the client connected");
}

/// `walraft-node client` exits with REJECTED's code (2) for a write too large for its
/// `--max-frame-bytes`, without connecting.
#[test]
fn the_command_line_client_exits_rejected_for_an_oversized_write() {
    let (l, addr) = silent_node();
    let props = "p".repeat(20 << 10);
    let out = std::process::Command::new(BIN)
        .args(["client", "--plaintext", "--node", &addr, "--max-frame-bytes", &LIMIT.to_string()])
        .args(["--write-deadline-ms", "600000", "create", "--kind", "metalake", "--name", "big"])
        .args(["--props", &props])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.starts_with("REJECTED (never appended): nothing was appended: the request is "),
        "{stdout}"
    );
    assert!(!connected(&l), "the client connected");
}
