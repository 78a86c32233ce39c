//! Mutual TLS and authorization (issue 28) on real `walraft-node` processes: who is let in, what
//! each certificate may do, Raft frames from anything but the node they claim to be, a node
//! from another authority trying to join or vote, certificates replaced while the nodes run,
//! and the plaintext rules (loopback only, never a silent default).

mod access;
mod node_identity;
mod rotation;

use crate::support::{out_text, Cluster, BIN};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
