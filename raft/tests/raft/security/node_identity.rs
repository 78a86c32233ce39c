//! A node is who its certificate says: forged and replayed Raft frames, a node from another
//! authority, a node speaking for another node, a wildcard certificate.

use super::{all, cli, create, pki};
use crate::support;
use crate::support::{out_text, Cluster, BIN};
use std::process::Command;
use std::time::Duration;
use wal_raft::certs::{issue_all, issue_for};
use wal_raft::net::frame::{read_frame, write_frame};
use wal_raft::net::stream::{Expect, Security};
use wal_raft::net::wire::{Msg, Reply};

/// Reads the next reply on `s`; `None` when the node closed the connection (or broke it).
async fn next_reply<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Reply> {
    match tokio::time::timeout(Duration::from_secs(10), read_frame::<_, Reply>(s)).await {
        Ok(Ok(Some((r, _)))) => Some(r),
        Ok(_) => None,
        Err(_) => panic!("no answer and no close within 10 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_replayed_raft_frames_never_reach_openraft() {
    let c = Cluster::start_tls(&[]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let peer = if leader == 2 { 3 } else { 2 };
    let addr = c.addr(leader);
    let hello = Msg::Hello { from: peer, to: leader };
    // A vote that would move the leader's term if openraft saw it.
    let vote = || Msg::Vote(openraft::raft::VoteRequest::new(openraft::Vote::new(term + 100, peer), None));

    // Plaintext: the hello and the vote as a stranger on the network would replay them.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    write_frame(&mut s, &hello, &[]).await.unwrap();
    write_frame(&mut s, &vote(), &[]).await.unwrap();
    let r = next_reply(&mut s).await;
    assert!(matches!(&r, Some(Reply::Refused(w)) if w.contains("TLS")), "{r:?}");
    assert!(next_reply(&mut s).await.is_none(), "served after the refusal");

    // A writer's certificate (valid, from the cluster's authority) saying hello as a node.
    let writer = c.security("writer");
    let mut s = writer.connect(&addr, Expect::Node(leader)).await.unwrap();
    write_frame(&mut s, &hello, &[]).await.unwrap();
    let r = next_reply(&mut s).await;
    assert!(matches!(&r, Some(Reply::Hello(Err(w))) if w.contains("not authorized")), "{r:?}");
    assert!(next_reply(&mut s).await.is_none(), "the connection stays open after a refused hello");
    // ... or sending the vote without one: the connection is closed unanswered.
    let mut s = writer.connect(&addr, Expect::Node(leader)).await.unwrap();
    write_frame(&mut s, &vote(), &[]).await.unwrap();
    assert!(next_reply(&mut s).await.is_none(), "a writer's vote was answered");

    // Another node's genuine certificate claiming to be `peer`.
    let third = (1..=3).find(|i| *i != leader && *i != peer).unwrap();
    let mut s = c.security(&format!("node-{third}")).connect(&addr, Expect::Node(leader)).await.unwrap();
    write_frame(&mut s, &hello, &[]).await.unwrap();
    let r = next_reply(&mut s).await;
    assert!(
        matches!(&r, Some(Reply::Hello(Err(w))) if w.contains(&format!("node {peer}'s certificate"))),
        "{r:?}"
    );

    // A certificate for `peer` from another authority: no handshake.
    let other = c.dir.path().join("other");
    issue_all(&other, &[peer], &[]).unwrap();
    let forged = Security::tls(&other.join(format!("node-{peer}"))).unwrap();
    match forged.connect(&addr, Expect::Node(leader)).await {
        Err(e) => assert!(e.to_string().contains("TLS"), "{e}"),
        Ok(mut s) => {
            // TLS 1.3: the server's refusal of the client's certificate shows at the first read.
            let _ = write_frame(&mut s, &hello, &[]).await;
            let _ = write_frame(&mut s, &vote(), &[]).await;
            assert!(next_reply(&mut s).await.is_none(), "a forged node certificate was served");
        }
    }

    // None of it reached openraft: the leader leads in the same term.
    for id in 1..=3 {
        let m = c.metrics(id).await.unwrap();
        assert_eq!((m.term, m.leader), (term, Some(leader)), "node {id} moved: {m:?}");
    }
    // The control: `peer`'s own certificate and the same frames (at a stale term, so as not to
    // disturb the cluster) are served by openraft, which answers the vote.
    let mut s = c.security(&format!("node-{peer}")).connect(&addr, Expect::Node(leader)).await.unwrap();
    write_frame(&mut s, &hello, &[]).await.unwrap();
    assert!(matches!(next_reply(&mut s).await, Some(Reply::Hello(Ok(())))));
    let stale = Msg::Vote(openraft::raft::VoteRequest::new(openraft::Vote::new(0, peer), None));
    write_frame(&mut s, &stale, &[]).await.unwrap();
    let r = next_reply(&mut s).await;
    assert!(matches!(&r, Some(Reply::Vote(Ok(_)))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_valid_certificate_cannot_join_or_vote() {
    let c = Cluster::start_tls(&[]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let (nodes, pki) = (all(&c), pki(&c));
    // Node 4 with a certificate from another authority, campaigning hard (short timeouts)
    // towards the cluster's three nodes.
    let other = c.dir.path().join("other");
    issue_all(&other, &[4], &[]).unwrap();
    let port = support::free_ports(1)[0];
    let rogue_addr = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(c.dir.path().join("rogue.out")).unwrap();
    let mut rogue = Command::new(BIN)
        .args(["run", "--id", "4", "--listen", &rogue_addr, "--initialize"])
        .arg("--data")
        .arg(c.dir.path().join("rogue"))
        .arg("--tls")
        .arg(other.join("node-4"))
        .args(["--election-min-ms", "150", "--election-max-ms", "300", "--heartbeat-ms", "50"])
        .args((1..=3).map(|i| format!("--peer={i}={}", c.addr(i))))
        .stderr(log)
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(&mut rogue);
    // An admin asks the cluster to take it as a learner: refused, the leader cannot reach it.
    let o = cli(&nodes, Some(&pki.join("admin")), &["add-learner", "--id", "4", "--addr", &rogue_addr]);
    assert_eq!(o.status.code(), Some(2), "{}", out_text(&o));
    // Give the rogue several of its election timeouts to ask for votes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rogue_log = std::fs::read_to_string(c.dir.path().join("rogue.out")).unwrap();
    assert!(rogue_log.contains("TLS"), "the rogue never tried the cluster:\n{rogue_log}");
    for id in 1..=3 {
        let m = c.metrics(id).await.unwrap();
        assert_eq!((m.term, m.leader), (term, Some(leader)), "node {id} moved: {m:?}");
        assert_eq!((m.voters.clone(), m.learners.clone()), (vec![1, 2, 3], vec![]), "node {id}");
    }
    // The cluster still commits.
    let o = cli(&nodes, Some(&pki.join("writer")), &create("after-rogue"));
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));
    // A node whose certificate is another node's does not start (exit 1, before opening
    // anything).
    let o = Command::new(BIN)
        .args(["run", "--id", "5", "--listen", "127.0.0.1:0", "--data"])
        .arg(c.dir.path().join("n5"))
        .arg("--tls")
        .arg(pki.join("node-4"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", out_text(&o));
    assert!(out_text(&o).contains("does not name 5.node.walraft"), "{}", out_text(&o));
    assert!(!c.dir.path().join("n5").exists(), "a refused start created its data directory");
}

/// A node's genuine certificate (node 5's, never a member) says hello as itself, then sends Raft
/// messages as another node: a vote for a candidate it is not, an append-entries from a leader it
/// is not. Each closes the connection unanswered; no node's term moves. Its own vote is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_cannot_speak_for_another_node() {
    let c = Cluster::start_tls(&[]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let peer = if leader == 2 { 3 } else { 2 };
    let addr = c.addr(leader);
    let five = c.security("node-5");
    let greeted = || async {
        let mut s = five.connect(&addr, Expect::Node(leader)).await.unwrap();
        write_frame(&mut s, &Msg::Hello { from: 5, to: leader }, &[]).await.unwrap();
        assert!(matches!(next_reply(&mut s).await, Some(Reply::Hello(Ok(())))));
        s
    };
    let vote =
        |t: u64, who: u64| Msg::Vote(openraft::raft::VoteRequest::new(openraft::Vote::new(t, who), None));
    let mut s = greeted().await;
    write_frame(&mut s, &vote(term + 100, peer), &[]).await.unwrap();
    assert!(next_reply(&mut s).await.is_none(), "node 5's certificate voted as node {peer}");
    let mut s = greeted().await;
    let pre = Msg::PreVote(openraft::raft::VoteRequest::new(openraft::Vote::new(term + 100, peer), None));
    write_frame(&mut s, &pre, &[]).await.unwrap();
    assert!(next_reply(&mut s).await.is_none(), "node 5's certificate pre-voted as node {peer}");
    let mut s = greeted().await;
    let head = wal_raft::net::append::AppendHead {
        vote: openraft::Vote::new_committed(term + 200, peer),
        prev_log_id: None,
        leader_commit: None,
        lens: vec![],
    };
    write_frame(&mut s, &Msg::AppendEntries(head), &[]).await.unwrap();
    assert!(next_reply(&mut s).await.is_none(), "node 5's certificate led as node {peer}");
    for id in 1..=3 {
        let m = c.metrics(id).await.unwrap();
        assert_eq!((m.term, m.leader), (term, Some(leader)), "node {id} moved: {m:?}");
    }
    assert!(c.output(leader).contains("sent a Raft message as node"), "{}", c.output(leader));
    // The control: node 5 asking for its own vote (at a stale term) is answered by openraft.
    let mut s = greeted().await;
    write_frame(&mut s, &vote(0, 5), &[]).await.unwrap();
    let r = next_reply(&mut s).await;
    assert!(matches!(&r, Some(Reply::Vote(Ok(_)))), "{r:?}");
}

/// A wildcard certificate from the cluster's own authority (`*.node.walraft`) is no node: it
/// cannot say hello as one, and a node connecting to a server that presents it refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_certificate_is_no_node() {
    let c = Cluster::start_tls(&[]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let pki = pki(&c);
    issue_for(&pki, "wild", &["*.node.walraft", "node.walraft"]).unwrap();
    let wild = Security::tls(&pki.join("wild")).unwrap();
    for from in (1..=3u64).filter(|i| *i != leader) {
        let mut s = wild.connect(&c.addr(leader), Expect::Node(leader)).await.unwrap();
        write_frame(&mut s, &Msg::Hello { from, to: leader }, &[]).await.unwrap();
        let r = next_reply(&mut s).await;
        assert!(matches!(&r, Some(Reply::Hello(Err(w))) if w.contains("not authorized")), "{r:?}");
    }
    // As a server: node 1 connecting to "node 2" finds a wildcard certificate and refuses it.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = l.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        let _ = wild.accept(tcp, 1 << 20).await;
    });
    let e = c.security("node-1").connect(&at, Expect::Node(2)).await.unwrap_err();
    assert!(e.to_string().contains("does not name 2.node.walraft"), "{e}");
    assert!(wal_raft::net::stream::is_refusal(&e), "{e:?}");
    server.abort();
    let m = c.metrics(leader).await.unwrap();
    assert_eq!((m.term, m.leader), (term, Some(leader)));
}
