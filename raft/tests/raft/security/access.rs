//! Who is let in: clients by their certificate and only for their role, plaintext only on
//! loopback and never by default, TLS on a non-loopback address, and connections that never
//! finish a handshake kept from starving a node.

use super::{all, assert_rejected, cli, create, pki};
use crate::support;
use crate::support::{out_text, Cluster, BIN, WAIT};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use wal_raft::certs::{issue_all, issue_for, Role};

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
