//! Mutual TLS and authorization (issue 28) on real `walraft-node` processes: who is let in, what
//! each certificate may do, Raft frames from anything but the node they claim to be, a node
//! from another authority trying to join or vote, certificates replaced while the nodes run,
//! and the plaintext rules (loopback only, never a silent default).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use support::{out_text, Cluster, BIN, WAIT};
use wal_raft::certs::{issue_all, issue_for, Role};
use wal_raft::net::frame::{read_frame, write_frame};
use wal_raft::net::stream::{Expect, Security};
use wal_raft::net::wire::{Msg, Reply};

/// `walraft-node client --tls DIR` (or `--plaintext` for `None`) against `nodes`.
fn cli(nodes: &[String], tls: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("client");
    match tls {
        Some(d) => cmd.arg("--tls").arg(d),
        None => cmd.arg("--plaintext"),
    };
    for n in nodes {
        cmd.args(["--node", n]);
    }
    cmd.args(["--write-deadline-ms", "15000"]).args(args).output().unwrap()
}

fn all(c: &Cluster) -> Vec<String> {
    (1..=3).map(|i| c.addr(i)).collect()
}

fn pki(c: &Cluster) -> PathBuf {
    c.pki.clone().unwrap()
}

fn create(name: &str) -> Vec<&str> {
    vec!["create", "--kind", "metalake", "--name", name]
}

/// A write is refused with exit 2 (REJECTED: never appended) and `why` in what it printed.
fn assert_rejected(o: &Output, why: &str) {
    let text = out_text(o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(text.contains("REJECTED") && text.contains(why), "`{why}` not in: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_let_in_by_their_certificate_and_only_for_their_role() {
    let c = Cluster::start_tls(&[]);
    c.leader(&[1, 2, 3]).await;
    let (nodes, pki) = (all(&c), pki(&c));
    let o = cli(&nodes, Some(&pki.join("writer")), &create("by-writer"));
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));

    // No certificate at all: every node answers that it takes TLS only; REJECTED at once.
    let o = cli(&nodes, None, &create("by-plaintext"));
    assert_rejected(&o, "accepts TLS connections only");
    // A writer's certificate from another authority.
    let other = c.dir.path().join("other");
    issue_all(&other, &[], &[Role::Writer]).unwrap();
    assert_rejected(&cli(&nodes, Some(&other.join("writer")), &create("by-stranger")), "TLS");
    // The cluster's own authority, but a certificate naming no role.
    issue_for(&pki, "nobody", &["nobody.example"]).unwrap();
    assert_rejected(
        &cli(&nodes, Some(&pki.join("nobody")), &create("by-nobody")),
        "names no node and no client role",
    );
    // The admin's certificate does not write; the writer's does not change the membership.
    assert_rejected(&cli(&nodes, Some(&pki.join("admin")), &create("by-admin")), "writer's certificate");
    let o = cli(&nodes, Some(&pki.join("writer")), &["remove", "--id", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", out_text(&o));
    assert!(
        out_text(&o).contains("REFUSED") && out_text(&o).contains("admin's certificate"),
        "{}",
        out_text(&o)
    );
    // Reading needs only a certificate from the authority.
    let o = cli(&nodes, Some(&pki.join("admin")), &["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", out_text(&o));

    // Nothing refused was applied anywhere, and the membership is what it was.
    let (_, _) = c.converged(&[1, 2, 3], 2).await;
    for id in 1..=3 {
        let m = c.metrics(id).await.unwrap();
        assert_eq!(m.entities, 1, "node {id}: only the writer's create: {m:?}");
        assert_eq!(m.voters, vec![1, 2, 3], "node {id}");
    }
    for name in ["by-plaintext", "by-stranger", "by-nobody", "by-admin"] {
        let o = cli(&nodes, Some(&pki.join("writer")), &["lookup", "--name", name]);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", out_text(&o));
    }
    // The nodes logged each refusal.
    let logs: String = (1..=3).map(|i| c.output(i)).collect();
    assert!(logs.contains("refused a connection") && logs.contains("not authorized"), "{logs}");
}

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

/// Plaintext is never a silent default and never leaves loopback; a TLS directory that cannot
/// be used is refused with its file named, without hanging on a FIFO.
#[test]
fn plaintext_only_on_loopback_and_bad_tls_material_is_named() {
    let code = |args: &[&str]| Command::new(BIN).args(args).output().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d").display().to_string();
    // Neither --tls nor --plaintext, or both: usage errors (64).
    let run = ["run", "--id", "1", "--listen", "127.0.0.1:0", "--data", &data];
    assert_eq!(code(&run).status.code(), Some(64));
    let both = [&run[..], &["--plaintext", "--tls", "x"]].concat();
    assert_eq!(code(&both).status.code(), Some(64));
    assert_eq!(code(&["client", "--node", "127.0.0.1:1", "status"]).status.code(), Some(64));
    // Plaintext off loopback: refused before anything is opened.
    for bad in [
        vec!["--listen", "0.0.0.0:0"],
        vec!["--listen", "127.0.0.1:0", "--peer", "2=192.0.2.77:7000"],
        vec!["--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"],
    ] {
        let o = code(&[&["run", "--plaintext", "--id", "1", "--data", &data], &bad[..]].concat());
        assert_eq!(o.status.code(), Some(1), "{bad:?}: {}", out_text(&o));
        assert!(out_text(&o).contains("loopback addresses only"), "{}", out_text(&o));
    }
    assert!(!dir.path().join("d").exists(), "a refused start created its data directory");
    // A plaintext client does not connect off loopback (nothing is sent).
    let o = code(&[
        "client",
        "--plaintext",
        "--node",
        "192.0.2.77:7000",
        "--write-deadline-ms",
        "2000",
        "status",
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", out_text(&o));
    assert!(out_text(&o).contains("loopback addresses only"), "{}", out_text(&o));

    // TLS directories that cannot be used: each refused (64), naming the file.
    let pki = dir.path().join("pki");
    issue_all(&pki, &[1, 2], &[]).unwrap();
    let tls_run = |tls: &Path| {
        let t = std::time::Instant::now();
        let o = Command::new(BIN)
            .args(["run", "--id", "1", "--listen", "127.0.0.1:0", "--data", &data])
            .arg("--tls")
            .arg(tls)
            .output()
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(30), "hung on {}", tls.display());
        o
    };
    let broken = |name: &str, f: &dyn Fn(&Path)| -> PathBuf {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        for f in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::copy(pki.join("node-1").join(f), d.join(f)).unwrap();
        }
        f(&d);
        d
    };
    let cases: Vec<(PathBuf, &str)> = vec![
        (broken("nokey", &|d| std::fs::remove_file(d.join("key.pem")).unwrap()), "key.pem"),
        (
            broken("garbage", &|d| std::fs::write(d.join("cert.pem"), "not a certificate").unwrap()),
            "cert.pem",
        ),
        (
            broken("otherkey", &|d| {
                std::fs::copy(pki.join("node-2/key.pem"), d.join("key.pem")).unwrap();
            }),
            "key.pem",
        ),
        (
            broken("fifo", &|d| {
                std::fs::remove_file(d.join("ca.pem")).unwrap();
                assert!(Command::new("mkfifo").arg(d.join("ca.pem")).status().unwrap().success());
            }),
            "ca.pem: not a regular file",
        ),
    ];
    for (d, want) in cases {
        let o = tls_run(&d);
        assert_eq!(o.status.code(), Some(64), "{}: {}", d.display(), out_text(&o));
        assert!(out_text(&o).contains(want), "{}: `{want}` not in {}", d.display(), out_text(&o));
    }

    // `certs` run twice: the second refuses and leaves the first's key as it was.
    let key = std::fs::read(pki.join("node-1/key.pem")).unwrap();
    let o =
        Command::new(BIN).args(["certs", "--node", "1", "--node", "3", "--dir"]).arg(&pki).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", out_text(&o));
    assert!(out_text(&o).contains("exists"), "{}", out_text(&o));
    assert_eq!(std::fs::read(pki.join("node-1/key.pem")).unwrap(), key);
    assert!(!pki.join("node-3").exists(), "a refused run issued part of what it was asked");
    let o = Command::new(BIN).args(["certs", "--dir"]).arg(&pki).output().unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", out_text(&o));
}

/// The first non-loopback IPv4 address of this machine that a listener can bind, if any.
fn non_loopback() -> Option<String> {
    let out = Command::new("hostname").arg("-I").output().ok()?;
    String::from_utf8(out.stdout)
        .ok()?
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback() && std::net::TcpListener::bind((*a, 0)).is_ok())
        .map(|a| a.to_string())
}

/// A node on a non-loopback address: TLS serves writers there; plaintext is refused there at
/// both ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_on_a_non_loopback_address() {
    let Some(ip) = non_loopback() else {
        eprintln!("no non-loopback IPv4 address here: only the loopback rules were checked");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    issue_all(&pki, &[1], &[Role::Writer]).unwrap();
    let addr = format!("{ip}:{}", {
        let l = std::net::TcpListener::bind((ip.as_str(), 0)).unwrap();
        l.local_addr().unwrap().port()
    });
    let o = Command::new(BIN)
        .args(["run", "--plaintext", "--id", "1", "--initialize", "--listen", &addr, "--data"])
        .arg(dir.path().join("plain"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", out_text(&o));
    assert!(out_text(&o).contains("loopback addresses only"), "{}", out_text(&o));
    let mut node = Command::new(BIN)
        .args(["run", "--id", "1", "--initialize", "--listen", &addr, "--data"])
        .arg(dir.path().join("n1"))
        .arg("--tls")
        .arg(pki.join("node-1"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let mut last = String::new();
    let mut ok = false;
    while t.elapsed() < WAIT {
        let o = cli(std::slice::from_ref(&addr), Some(&pki.join("writer")), &create("remote"));
        last = out_text(&o);
        if o.status.code() == Some(0) {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let plain = cli(std::slice::from_ref(&addr), None, &create("plain"));
    let _ = node.kill();
    let _ = node.wait();
    assert!(ok, "no write over TLS at {addr}: {last}");
    assert_rejected(&plain, "loopback");
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

/// Connections that never complete a handshake (anyone who can reach the port) cannot use up
/// a node's descriptors: with its limit lowered to 200, the leader holds at most its cap of
/// them, keeps leading, commits a write from a new client during the flood, and logs the
/// refusals sparingly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_unauthenticated_connections_do_not_starve_a_node() {
    let c = Cluster::start_tls(&[]);
    let (leader, term) = c.leader(&[1, 2, 3]).await;
    let pid = c.children[&leader].id() as libc::pid_t;
    let limit = libc::rlimit { rlim_cur: 200, rlim_max: 200 };
    // SAFETY: a plain system call with a valid pointer; no memory of this process is lent.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let before = fds();
    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(tokio::net::TcpStream::connect(c.addr(leader)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = fds();
    let cap = wal_raft::net::admission::IN_HANDSHAKE;
    assert!(during <= before + cap + 8, "{during} descriptors open (was {before}, cap {cap})");
    let mut w = wal_raft::client::Client::new(vec![c.addr(leader)]);
    w.security = c.security("writer");
    w.write_deadline = Duration::from_secs(10);
    let r = w.write(&support::create("during-flood")).await;
    assert!(matches!(r, wal_raft::net::wire::WriteReply::Committed { .. }), "{r:?}");
    for id in 1..=3 {
        let m = c.metrics(id).await.unwrap();
        assert_eq!((m.term, m.leader), (term, Some(leader)), "node {id} moved: {m:?}");
    }
    drop(held);
    let refused = c.output(leader).matches("refused a connection").count();
    assert!(refused <= 3, "{refused} lines for one flood:\n{}", c.output(leader));
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
