//! Issue 21, finding 5: what a client's write answers when no node can be reached, or when the
//! request may have reached one. No cluster: closed ports and a listener that never answers.

use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use wal_raft::client::Client;
use wal_raft::net::wire::WriteReply;

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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        for _ in 0..1000 {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
        }
    });
    let mut addrs = vec![addr];
    addrs.extend(closed_ports(2));
    let r = client(addrs).write(&create()).await;
    server.abort();
    assert!(matches!(r, WriteReply::Indeterminate { .. }), "{r:?}");
}
