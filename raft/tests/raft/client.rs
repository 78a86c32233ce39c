//! Issue 21, finding 5: what a client's write answers when no node can be reached, or when the
//! request may have reached one. No cluster: closed ports, a listener that never answers, and
//! stand-in nodes that speak the frame protocol (or something else) from a task.

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wal_raft::client::Client;
use wal_raft::net::frame::{read_frame, write_frame};
use wal_raft::net::wire::{Msg, Reply, WriteReply};
use wal_raft::Response;

fn create() -> catalog::Command {
    catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: "lake".into(),
        props: vec![],
    }
}

fn client(addrs: Vec<String>) -> Client {
    let mut c = Client::new(addrs);
    c.call_timeout = Duration::from_millis(500);
    c.write_deadline = Duration::from_secs(1);
    c
}

/// Ports that were free a moment ago, now closed: every connection is refused.
fn closed_ports(n: usize) -> Vec<String> {
    let ls: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap().to_string()).collect()
}

/// Answers a client's greeting (`Msg::Greet`, first on every connection it opens) as node 1.
async fn greet<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S) {
    let (msg, _): (Msg, Vec<u8>) = read_frame(s).await.unwrap().unwrap();
    assert!(matches!(msg, Msg::Greet), "{msg:?}");
    write_frame(s, &Reply::Greet { node: 1 }, &[]).await.unwrap();
}

/// A stand-in node that greets each connection, then reads the request and closes without a
/// reply (it may have appended it); to be aborted.
async fn greets_reads_then_closes() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        for _ in 0..1000 {
            let Ok((mut s, _)) = listener.accept().await else { return };
            greet(&mut s).await;
            let _ = read_frame::<_, Msg>(&mut s).await;
        }
    });
    (addr, server)
}

/// A listener that, on each connection, reads once (up to 4 KiB), writes `answer` and closes
/// it; to be aborted.
async fn reads_then_answers(answer: &'static [u8]) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        for _ in 0..1000 {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(answer).await;
        }
    });
    (addr, server)
}

#[tokio::test]
async fn a_write_that_reached_no_node_is_rejected_as_unavailable() {
    let c = client(closed_ports(3));
    let t = Instant::now();
    let r = c.write(&create()).await;
    assert!(
        matches!(&r, WriteReply::Rejected { retry: true, why } if why.starts_with("unavailable")),
        "nothing was sent, so nothing can be appended: {r:?}"
    );
    // Retried within the write deadline (a cluster mid-restart may come back), then answered.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[tokio::test]
async fn a_write_that_may_have_reached_a_node_stays_indeterminate() {
    // One node reads the request and closes without a reply (it may have appended it); the
    // others refuse connections. The write may be in a log: never Rejected.
    let (addr, server) = greets_reads_then_closes().await;
    let mut addrs = vec![addr];
    addrs.extend(closed_ports(2));
    let r = client(addrs).write(&create()).await;
    server.abort();
    assert!(matches!(r, WriteReply::Indeterminate { .. }), "{r:?}");
}

/// A stand-in node that answers `writes` write requests Committed on one connection, then
/// closes it and stops listening: it has gone away, as a whole cluster that was stopped.
async fn answers_then_goes_away(writes: usize) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let node = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        greet(&mut s).await;
        for i in 0..writes {
            let (msg, _): (Msg, Vec<u8>) = read_frame(&mut s).await.unwrap().unwrap();
            assert!(matches!(msg, Msg::Write { .. }), "{msg:?}");
            let index = i as u64 + 1;
            let reply = Reply::Write(WriteReply::Committed { index, outcome: Response::Blank });
            write_frame(&mut s, &reply, &[]).await.unwrap();
        }
    });
    (addr, node)
}

/// A long-lived client keeps its connections between writes. When every node it knows has
/// since gone away (a cluster stopped, or restarted and not yet listening), its next write
/// reaches no node: Rejected as unavailable, as for a client that never connected. Before,
/// the client took the cached connection for a sent request: it wrote into a socket the node
/// had closed, read the close, and could only answer Indeterminate ("maybe appended").
#[tokio::test]
async fn a_write_to_a_cluster_gone_since_the_last_write_is_rejected_not_indeterminate() {
    let (addr, node) = answers_then_goes_away(1).await;
    let c = client(vec![addr]);
    let first = c.write(&create()).await;
    assert!(matches!(first, WriteReply::Committed { index: 1, .. }), "{first:?}");
    // The node closed the connection and its port: the close is in this client's socket.
    node.await.unwrap();
    let r = c.write(&create()).await;
    assert!(
        matches!(&r, WriteReply::Rejected { retry: true, why } if why.starts_with("unavailable")),
        "the node had closed the connection before this write: nothing reached it: {r:?}"
    );
}

/// Something else listens at a node's address (a web server, say): it reads what the client
/// sends and answers with bytes that are not a frame. The client neither panics nor waits for
/// its deadline on one attempt: the answer names the address and what came back. What it read
/// was the client's greeting, never the write (which is sent only once a node answered the
/// greeting): Rejected, not appended. (Before the greeting the write itself was sent, and the
/// answer had to be Indeterminate: the client could not prove the listener was not a node.)
#[tokio::test]
async fn a_write_to_an_address_that_speaks_something_else_names_it() {
    let (addr, server) = reads_then_answers(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
    let c = client(vec![addr.clone()]);
    let r = c.write(&create()).await;
    server.abort();
    let WriteReply::Rejected { why, .. } = &r else { panic!("{r:?}") };
    assert!(why.contains(&addr), "{why}");
    assert!(why.contains("is a walraft node listening there?"), "{why}");
}
