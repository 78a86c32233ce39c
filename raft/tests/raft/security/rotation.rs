//! Certificates replaced while the nodes run: read again without a restart, a revoked one
//! stops working on kept connections, a reload must still name the node, kept connections
//! follow a rotation of the authority.

use super::{all, assert_rejected, cli, create, pki};
use crate::support;
use crate::support::{out_text, Cluster, WAIT};
use std::path::Path;
use std::time::Duration;
use wal_raft::certs::{issue_all, Role};
use wal_raft::net::frame::read_frame;
use wal_raft::net::stream::{Expect, Security};
use wal_raft::net::wire::Msg;

/// Replaces `dir`'s three files with `from`'s, each written beside and renamed into place.
fn replace_tls(from: &Path, dir: &Path) {
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        let tmp = dir.join(format!(".{f}.new"));
        std::fs::copy(from.join(f), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(f)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_read_again_without_a_restart() {
    let c = Cluster::start_tls(&[]);
    c.leader(&[1, 2, 3]).await;
    let (nodes, pki) = (all(&c), pki(&c));
    let o = cli(&nodes, Some(&pki.join("writer")), &create("before"));
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    // A new authority, and the nodes' and a writer's certificates from it.
    let new = c.dir.path().join("new");
    issue_all(&new, &[1, 2, 3], &[Role::Writer]).unwrap();
    assert_rejected(&cli(&nodes, Some(&new.join("writer")), &create("too-early")), "TLS");
    // A half-written change (a key that is not the certificate's) does not replace what works.
    std::fs::copy(new.join("node-1/key.pem"), pki.join("node-1/.key.new")).unwrap();
    std::fs::rename(pki.join("node-1/.key.new"), pki.join("node-1/key.pem")).unwrap();
    let o = cli(&nodes[..1], Some(&pki.join("writer")), &["status"]);
    assert!(matches!(o.status.code(), Some(0 | 7)), "node 1 stopped answering: {}", out_text(&o));
    assert!(c.output(1).contains("does not load"), "{}", c.output(1));
    // Every node's files replaced while it runs; no restart.
    for id in 1..=3 {
        replace_tls(&new.join(format!("node-{id}")), &pki.join(format!("node-{id}")));
    }
    let o = cli(&nodes, Some(&new.join("writer")), &create("after"));
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    assert_rejected(&cli(&nodes, Some(&pki.join("writer")), &create("old-writer")), "TLS");
    // The nodes reach each other with the new certificates too: all three converge.
    let t = std::time::Instant::now();
    loop {
        let o = cli(&nodes, Some(&new.join("writer")), &["status"]);
        let text = out_text(&o);
        let applied: Vec<&str> =
            text.lines().filter_map(|l| l.split(" applied ").nth(1)?.split_whitespace().next()).collect();
        if o.status.code() == Some(0) && applied.len() == 3 && applied.iter().all(|a| a == &applied[0]) {
            break;
        }
        assert!(t.elapsed() < WAIT, "the nodes did not converge on the new certificates: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in 1..=3 {
        assert!(c.output(id).contains("reloaded"), "node {id}: {}", c.output(id));
    }
}

/// A writer whose authority was replaced loses its kept connection too, within a second or
/// so: its next write on the same client is Rejected (never appended), not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_stops_working_on_kept_connections() {
    let c = Cluster::start_tls(&[]);
    let (leader, _) = c.leader(&[1, 2, 3]).await;
    let pki = pki(&c);
    let mut old = wal_raft::client::Client::new(vec![c.addr(leader)]);
    old.security = c.security("writer");
    old.write_deadline = Duration::from_secs(3);
    let r = old.write(&support::create("before")).await;
    assert!(matches!(r, wal_raft::net::wire::WriteReply::Committed { .. }), "{r:?}");
    let new = c.dir.path().join("new");
    issue_all(&new, &[1, 2, 3], &[Role::Writer]).unwrap();
    for id in 1..=3 {
        replace_tls(&new.join(format!("node-{id}")), &pki.join(format!("node-{id}")));
    }
    // The nodes look at their files once a second; then every kept connection whose
    // certificate the new authority did not issue is closed.
    let t = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let r = old.write(&support::create(&format!("after-{}", t.elapsed().as_millis()))).await;
        match r {
            wal_raft::net::wire::WriteReply::Rejected { why, .. } => {
                assert!(why.contains("TLS"), "{why}");
                break;
            }
            other => assert!(t.elapsed() < Duration::from_secs(5), "still served after 5 s: {other:?}"),
        }
    }
    assert!(c.output(leader).contains("no longer verifies"), "{}", c.output(leader));
    // The nodes' own connections to each other moved to the new authority: still one cluster.
    let mut w = wal_raft::client::Client::new(all(&c));
    w.security = Security::tls(&new.join("writer")).unwrap();
    let r = w.write(&support::create("new-writer")).await;
    assert!(matches!(r, wal_raft::net::wire::WriteReply::Committed { .. }), "{r:?}");
}

/// A reload that parses but is not this node's (another process's certificate and key put in
/// its directory) is refused like a broken one: the node keeps serving as itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_must_still_name_the_node() {
    let c = Cluster::start_tls(&[]);
    c.leader(&[1, 2, 3]).await;
    let pki = pki(&c);
    let dir = pki.join("node-1");
    for f in ["cert.pem", "key.pem"] {
        let tmp = dir.join(format!(".{f}.new"));
        std::fs::copy(pki.join("writer").join(f), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(f)).unwrap();
    }
    let t = std::time::Instant::now();
    while !c.output(1).contains("does not load") {
        assert!(t.elapsed() < Duration::from_secs(10), "no reload attempt: {}", c.output(1));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(c.output(1).contains("does not name 1.node.walraft"), "{}", c.output(1));
    // A new client connection still finds node 1 as a node (its old certificate in use).
    let m = c.metrics(1).await.expect("node 1 stopped serving as a node");
    assert_eq!(m.id, 1);
    assert!(!c.output(1).contains("reloaded"), "{}", c.output(1));
}

/// A connection this process opened and kept is checked again when its own TLS files change:
/// a rotation that puts the new authority beside the old in `ca.pem` keeps it; files from the
/// new authority alone, which no longer trust the server's certificate, retire it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_follow_a_rotation_of_the_authority() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new, mine) = (dir.path().join("old"), dir.path().join("new"), dir.path().join("mine"));
    issue_all(&old, &[1, 2], &[]).unwrap();
    issue_all(&new, &[1], &[]).unwrap();
    std::fs::create_dir(&mine).unwrap();
    replace_tls(&old.join("node-1"), &mine);
    // Node 2's side: accepts, then holds each connection open until the peer closes it.
    let server = Security::tls(&old.join("node-2")).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = l.local_addr().unwrap().to_string();
    let serving = tokio::spawn(async move {
        loop {
            let (tcp, _) = l.accept().await.unwrap();
            let server = server.clone();
            tokio::spawn(async move {
                if let Ok((mut s, _)) = server.accept(tcp, 1 << 20).await {
                    let _ = read_frame::<_, Msg>(&mut s).await;
                }
            });
        }
    });
    let client = Security::tls(&mine).unwrap();
    let Security::Tls(files) = &client else { unreachable!() };
    let mut s = client.connect(&at, Expect::Node(2)).await.unwrap();
    assert!(s.reusable(&client));
    let settle = wal_raft::net::tls::LOOK_EVERY + Duration::from_millis(200);
    // Both authorities trusted: the kept connection stays.
    let both = [
        std::fs::read_to_string(old.join("ca.pem")).unwrap(),
        std::fs::read_to_string(new.join("ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(mine.join(".ca.new"), both).unwrap();
    std::fs::rename(mine.join(".ca.new"), mine.join("ca.pem")).unwrap();
    tokio::time::sleep(settle).await;
    assert!(s.reusable(&client), "a connection both authorities trust was retired");
    assert_eq!(files.generation(), 1, "the two-authority ca.pem was not loaded");
    // The new authority alone: node 2's certificate (old) is no longer trusted.
    replace_tls(&new.join("node-1"), &mine);
    tokio::time::sleep(settle).await;
    assert!(!s.reusable(&client), "a connection to a server the authority no longer vouches for was kept");
    assert_eq!(files.generation(), 2);
    let e = client.connect(&at, Expect::Node(2)).await.unwrap_err();
    assert!(wal_raft::net::stream::is_refusal(&e), "{e:?}");
    serving.abort();
}
