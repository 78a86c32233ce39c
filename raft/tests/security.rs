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
    for bad in [vec!["--listen", "0.0.0.0:0"], vec!["--listen", "127.0.0.1:0", "--peer", "2=192.0.2.77:7000"]]
    {
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
