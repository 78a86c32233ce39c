//! Three real `walraft-node` processes on loopback, shared by the process tests
//! (`raft/processes.rs`, `raft/double_kill.rs`, `raft/campaign/`, ...), which run the binary cargo built
//! ([`BIN`], [`Cluster::start`]), and by `examples/failover.rs`, which names its binary
//! ([`Cluster::start_with`]; cargo tells only tests and benches where the binary is, so [`BIN`]
//! exists only under `cfg(test)`). Every wait is bounded; every child is killed when its cluster
//! is dropped (also when an assertion fails).

// The test binary (tests/raft) and the failover example each use a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::stream::Security;
use wal_raft::net::wire::{NodeMetrics, WriteReply};
use wal_raft::Response;

#[cfg(test)]
pub const BIN: &str = env!("CARGO_BIN_EXE_walraft-node");
pub const WAIT: Duration = Duration::from_secs(20);

/// The tests' timing flags (fast heartbeats and elections, frequent checkpoints), for every
/// node unless its cluster sets the flag itself.
const DEFAULT_FLAGS: [(&str, &str); 5] = [
    ("--heartbeat-ms", "50"),
    ("--election-min-ms", "300"),
    ("--election-max-ms", "600"),
    ("--write-timeout-ms", "2000"),
    ("--checkpoint-every", "8"),
];

#[derive(Debug)]
pub struct Cluster {
    /// The `walraft-node` binary the nodes run.
    pub bin: PathBuf,
    pub dir: tempfile::TempDir,
    pub addrs: BTreeMap<u64, String>,
    pub children: BTreeMap<u64, Child>,
    pub extra: Vec<String>,
    /// With TLS: the directory `walraft-node certs` wrote (node-N, writer, admin inside), and
    /// node N runs with `--tls PKI/node-N`; `None`: every node runs `--plaintext`.
    pub pki: Option<PathBuf>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.children) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits up to `bound` for `child` to exit: its status, or `None` once it had to be killed.
fn reap(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < bound {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

impl Cluster {
    /// Three nodes of the binary cargo built, node 1 initializing; `extra` flags for every node.
    #[cfg(test)]
    pub fn start(extra: &[&str]) -> Cluster {
        Cluster::start_with(BIN.into(), extra.iter().map(|s| s.to_string()).collect())
    }

    /// [`Cluster::start`] with mutual TLS: an authority and certificates for nodes 1-5 and
    /// both client roles, issued as `walraft-node certs` does, in the cluster's directory.
    #[cfg(test)]
    pub fn start_tls(extra: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let roles = [wal_raft::certs::Role::Writer, wal_raft::certs::Role::Admin];
        wal_raft::certs::issue_all(&pki, &[1, 2, 3, 4, 5], &roles).unwrap();
        Cluster::start_in(BIN.into(), extra.iter().map(|s| s.to_string()).collect(), dir, Some(pki))
    }

    /// [`Cluster::start`] with the binary `bin`.
    pub fn start_with(bin: PathBuf, extra: Vec<String>) -> Cluster {
        Cluster::start_in(bin, extra, tempfile::tempdir().unwrap(), None)
    }

    fn start_in(bin: PathBuf, extra: Vec<String>, dir: tempfile::TempDir, pki: Option<PathBuf>) -> Cluster {
        let ports = free_ports(3);
        let addrs = (1..=3u64).zip(ports).map(|(i, p)| (i, format!("127.0.0.1:{p}"))).collect();
        let mut c = Cluster { bin, dir, addrs, children: BTreeMap::new(), extra, pki };
        for id in 1..=3 {
            c.spawn(id);
        }
        c
    }

    pub fn data(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    /// The last lines each node printed (its stdout and stderr go to `n<id>.out`), for a failure.
    pub fn outputs(&self, ids: &[u64]) -> String {
        let mut out = String::new();
        for id in ids {
            let text =
                std::fs::read_to_string(self.dir.path().join(format!("n{id}.out"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- node {id}, last lines of its output:\n"));
            for l in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    pub fn addr(&self, id: u64) -> String {
        self.addrs[&id].clone()
    }

    pub fn spawn(&mut self, id: u64) {
        assert!(!self.children.contains_key(&id), "node {id} already runs");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("n{id}.out")))
            .unwrap();
        let mut cmd = Command::new(&self.bin);
        cmd.args(["run", "--id", &id.to_string(), "--listen", &self.addr(id), "--data"])
            .arg(self.data(id))
            .arg("--allow-faults")
            .args(match &self.pki {
                Some(pki) => vec!["--tls".into(), pki.join(format!("node-{id}"))],
                None => vec![PathBuf::from("--plaintext")],
            })
            .args(self.defaults_not_overridden())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        for (p, a) in &self.addrs {
            if *p != id {
                cmd.arg("--peer").arg(format!("{p}={a}"));
            }
        }
        if id == 1 {
            cmd.arg("--initialize");
        }
        self.children.insert(id, cmd.spawn().unwrap());
    }

    /// SIGKILL: the process dies between any two instructions.
    pub fn kill9(&mut self, id: u64) {
        self.kill9_together(&[id]);
    }

    /// SIGKILL to each of `ids` before waiting for any: they die at the same moment, as when
    /// two machines lose power together.
    pub fn kill9_together(&mut self, ids: &[u64]) {
        let mut cs: Vec<Child> = ids.iter().map(|id| self.children.remove(id).unwrap()).collect();
        for c in &mut cs {
            c.kill().unwrap();
        }
        for c in &mut cs {
            c.wait().unwrap();
        }
    }

    /// The tests' timing flags ([`DEFAULT_FLAGS`]), except those the cluster's `extra` flags
    /// set (a flag given twice is a usage error).
    fn defaults_not_overridden(&self) -> Vec<&'static str> {
        DEFAULT_FLAGS
            .iter()
            .filter(|(f, _)| !self.extra.iter().any(|e| e == f))
            .flat_map(|(f, v)| [*f, *v])
            .collect()
    }

    /// The value the nodes run with for `flag`: the cluster's own, else the default.
    fn flag(&self, flag: &str) -> Option<&str> {
        match self.extra.iter().position(|e| e == flag) {
            Some(at) => self.extra.get(at + 1).map(String::as_str),
            None => DEFAULT_FLAGS.iter().find(|(f, _)| *f == flag).map(|(_, v)| *v),
        }
    }

    /// Sends `signal` (a name `kill` knows: STOP, CONT) to the node's process.
    pub fn signal(&self, id: u64, signal: &str) {
        let pid = self.children[&id].id().to_string();
        let s = Command::new("kill").arg(format!("-{signal}")).arg(pid).status().unwrap();
        assert!(s.success(), "kill -{signal} node {id}: {s}");
    }

    /// SIGTERM and wait (bounded; SIGKILL after 10 s). The exit status of a stop that ended
    /// by itself; `None` when it had to be killed.
    pub fn stop(&mut self, id: u64) -> Option<ExitStatus> {
        let mut c = self.children.remove(&id).unwrap();
        let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        reap(&mut c, Duration::from_secs(10))
    }

    /// SIGTERM and wait (bounded): the exit status.
    pub fn stop_status(&mut self, id: u64) -> ExitStatus {
        let _ = Command::new("kill").arg("-TERM").arg(self.children[&id].id().to_string()).status();
        self.wait_exit(id)
    }

    /// Waits (bounded) for the node's process to exit by itself: its exit status.
    pub fn wait_exit(&mut self, id: u64) -> ExitStatus {
        let mut c = self.children.remove(&id).unwrap();
        reap(&mut c, WAIT)
            .unwrap_or_else(|| panic!("node {id} did not exit within {WAIT:?}\n{}", self.outputs(&[id])))
    }

    /// Stops every running node; what each stop ended with ([`Cluster::stop`]).
    pub fn stop_all(&mut self) -> Vec<(u64, Option<ExitStatus>)> {
        let ids: Vec<u64> = self.children.keys().copied().collect();
        ids.into_iter().map(|id| (id, self.stop(id))).collect()
    }

    /// Whether the node's process was started and not yet killed or stopped by the test.
    pub fn running(&self, id: u64) -> bool {
        self.children.contains_key(&id)
    }

    /// The nodes whose process ended on its own (not killed or stopped by the test), with
    /// their status; they are no longer counted as running.
    pub fn exited(&mut self) -> Vec<(u64, ExitStatus)> {
        let mut out = Vec::new();
        for (id, c) in &mut self.children {
            if let Ok(Some(s)) = c.try_wait() {
                out.push((*id, s));
            }
        }
        for (id, _) in &out {
            self.children.remove(id);
        }
        out
    }

    /// The security of a client holding `who`'s certificate (`writer`, `admin`, `node-N`), or
    /// plaintext for a plaintext cluster.
    pub fn security(&self, who: &str) -> Security {
        match &self.pki {
            Some(pki) => Security::tls(&pki.join(who)).unwrap(),
            None => Security::Plaintext,
        }
    }

    /// A client of nodes `ids` (with TLS, holding the writer's certificate).
    pub fn client(&self, ids: &[u64]) -> Client {
        let mut c = Client::new(ids.iter().map(|i| self.addr(*i)).collect());
        c.security = self.security("writer");
        c.call_timeout = Duration::from_secs(5);
        c.write_deadline = Duration::from_secs(15);
        c
    }

    /// The node's stdout and stderr so far (for failure messages).
    pub fn output(&self, id: u64) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("n{id}.out"))).unwrap_or_default()
    }

    pub async fn metrics(&self, id: u64) -> Option<NodeMetrics> {
        metrics_with(&self.security("writer"), &self.addr(id), Duration::from_secs(2)).await
    }

    /// A leader among `among` that a majority of `among` agrees on (bounded).
    pub async fn leader(&self, among: &[u64]) -> (u64, u64) {
        let t = Instant::now();
        while t.elapsed() < WAIT {
            let mut ms = Vec::new();
            for id in among {
                if let Some(m) = self.metrics(*id).await {
                    ms.push(m);
                }
            }
            if let Some(l) = ms.iter().find(|m| m.state == "Leader") {
                let agree = ms.iter().filter(|m| m.leader == Some(l.id) && m.term == l.term).count();
                if agree * 2 > among.len() {
                    return (l.id, l.term);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no leader among {among:?} within {WAIT:?}");
    }

    /// Waits until every node in `ids` has applied the same index, at least `at_least`, with the
    /// same digest; returns (index, digest).
    pub async fn converged(&self, ids: &[u64], at_least: u64) -> (u64, String) {
        let addrs: Vec<String> = ids.iter().map(|i| self.addr(*i)).collect();
        match agreement_with(&self.security("writer"), &addrs, at_least, WAIT).await {
            Ok(m) => (m.last_applied.unwrap_or(0), m.digest),
            Err(e) => panic!("nodes {ids:?}: {e}\n{}", self.outputs(ids)),
        }
    }
}

/// The metrics of the node at `addr`, or `None` when it does not answer within `within`.
pub async fn metrics_at(addr: &str, within: Duration) -> Option<NodeMetrics> {
    metrics_with(&Security::Plaintext, addr, within).await
}

/// [`metrics_at`] over `security`.
pub async fn metrics_with(security: &Security, addr: &str, within: Duration) -> Option<NodeMetrics> {
    let mut c = Client::new(vec![addr.to_string()]);
    c.security = security.clone();
    c.call_timeout = within;
    tokio::time::timeout(within, c.metrics(addr)).await.ok()?.ok()
}

/// Waits (up to `bound`) until the nodes at `addrs` have applied one index, at least
/// `at_least`, with one digest there: the first node's metrics then. Nodes seen at one such
/// index with different digests end the wait at once (at one applied index a digest never
/// changes: they would never agree). The error says where each node was.
pub async fn agreement(addrs: &[String], at_least: u64, bound: Duration) -> Result<NodeMetrics, String> {
    agreement_with(&Security::Plaintext, addrs, at_least, bound).await
}

/// [`agreement`] over `security`.
pub async fn agreement_with(
    security: &Security,
    addrs: &[String],
    at_least: u64,
    bound: Duration,
) -> Result<NodeMetrics, String> {
    let t = Instant::now();
    let mut seen = Vec::new();
    while t.elapsed() < bound {
        seen.clear();
        for a in addrs {
            seen.push(metrics_with(security, a, Duration::from_secs(5)).await);
        }
        if let Some(Some(first)) = seen.first() {
            let reached = first.last_applied.is_some_and(|a| a >= at_least);
            let one_index =
                seen.iter().all(|m| m.as_ref().is_some_and(|m| m.last_applied == first.last_applied));
            if reached && one_index {
                if seen.iter().all(|m| m.as_ref().is_some_and(|m| m.digest == first.digest)) {
                    return Ok(first.clone());
                }
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let views: Vec<String> = seen
        .iter()
        .map(|m| match m {
            Some(m) => format!(
                "node {}: {} term {} applied {:?} digest {} log to {:?}",
                m.id, m.state, m.term, m.last_applied, m.digest, m.last_log_index
            ),
            None => "no answer".into(),
        })
        .collect();
    Err(format!(
        "no common applied index at or past {at_least} with one digest (bound {bound:?}): {views:#?}"
    ))
}

impl Cluster {
    /// Stops `leader` (SIGSTOP) at a moment when it has shipped entries it has not written, so
    /// that a SIGKILL now loses them on it alone (docs/replication-safety.md: its log writer
    /// group-commits, and entries queued behind the fdatasync in flight are already served to
    /// followers from memory). Each try stops it, reads its log as written so far (offline,
    /// read-only) and compares that with the last log index of `others`; when one of them is
    /// ahead, the leader is left stopped: `Ok`. Otherwise it continues and is tried again a few
    /// milliseconds later, `tries` times at most: `Err`, the leader running. Either says what
    /// it saw. The aimed kill of `double_kill.rs` and of the campaign's leader kills.
    pub async fn stop_with_unwritten_tail(
        &self,
        leader: u64,
        others: &[u64],
        tries: u64,
    ) -> Result<String, String> {
        let mut seen = String::new();
        for attempt in 0..tries {
            self.signal(leader, "STOP");
            let mut shipped = None;
            for id in others {
                shipped = shipped.max(self.metrics(*id).await.and_then(|m| m.last_log_index));
            }
            let written =
                wal_raft::check::log_ids(&self.data(leader)).map(|ids| ids.last().map_or(0, |l| l.index));
            match (written, shipped) {
                (Ok(w), Some(s)) if w < s => {
                    return Ok(format!(
                        "its log ends at {w}, another's at {s}: entries it shipped are unwritten"
                    ));
                }
                (w, s) => seen = format!("its log ends at {w:?}, the others' at {s:?}"),
            }
            self.signal(leader, "CONT");
            tokio::time::sleep(Duration::from_millis(1 + attempt % 7)).await;
        }
        Err(format!("{seen}: no unwritten shipped tail in {tries} tries"))
    }
}

impl Cluster {
    /// No node among `ids` has seen digest claims disagree since it started (replays of the
    /// log included): what a run without any fault in the state must show.
    pub async fn no_claims_disagreed(&self, ids: &[u64]) {
        for id in ids {
            let m = self.metrics(*id).await.unwrap_or_else(|| panic!("node {id} did not answer metrics"));
            assert_eq!(
                m.claims.split,
                0,
                "node {id} saw claims disagree: {:?}\n{}",
                m.claims,
                self.outputs(ids)
            );
            assert!(!self.output(*id).contains("DIGEST CLAIMS DISAGREE"), "node {id}\n{}", self.outputs(ids));
        }
    }

    /// Every acknowledged create, (name, the index it was acknowledged at), is on every node
    /// of `ids` as the entity the entry at that index made (a create's entity id is its index):
    /// `Err` names the first that is not, where, and what is there instead.
    pub async fn creates_everywhere(&self, ids: &[u64], acked: &[(String, u64)]) -> Result<(), String> {
        for id in ids {
            let cl = self.client(&[*id]);
            for (name, index) in acked {
                let e =
                    cl.lookup(&self.addr(*id), None, name).await.map_err(|e| format!("node {id}: {e}"))?;
                if e.as_ref().map(|e| e.id) != Some(*index) {
                    return Err(format!("node {id}: {name}, acknowledged at index {index}, is {e:?} there"));
                }
            }
        }
        Ok(())
    }

    /// The claim interval the nodes run with (`--checkpoint-every`).
    pub fn claim_every(&self) -> u64 {
        self.flag("--checkpoint-every").and_then(|v| v.parse().ok()).expect("--checkpoint-every N")
    }

    /// Every node in `ids` (all running) compares digests and none is fenced: after twice the
    /// claim interval of writes, each one had its digest confirmed by a majority's claims at a
    /// claim index it had not reached before (so the comparison ran after whatever the test did
    /// to it, and found nothing), none saw claims disagree meanwhile, none fenced itself.
    pub async fn none_fenced(&self, ids: &[u64]) {
        let mut before = Vec::new();
        for id in ids {
            let m = self.metrics(*id).await.unwrap_or_else(|| panic!("node {id} did not answer metrics"));
            before.push((m.claims.confirmed, m.claims.split));
        }
        let c = self.client(ids);
        let tag = self.metrics(ids[0]).await.and_then(|m| m.last_applied).unwrap_or(0);
        for i in 0..2 * self.claim_every() {
            let r = c.write(&create(&format!("probe-{tag}-{i}"))).await;
            assert!(created_id(&r).is_some(), "{r:?}");
        }
        let t = Instant::now();
        for (id, (confirmed, split)) in ids.iter().zip(before) {
            let m = loop {
                let m = self.metrics(*id).await;
                if m.as_ref().is_some_and(|m| m.claims.confirmed > confirmed || m.fenced.is_some())
                    || t.elapsed() > WAIT
                {
                    break m;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let m = m.unwrap_or_else(|| panic!("node {id} did not answer metrics"));
            assert_eq!(m.fenced, None, "node {id} fenced itself in a healthy run\n{}", self.outputs(ids));
            assert!(
                m.claims.confirmed > confirmed,
                "node {id} had no claim confirmed after {} writes: {:?}\n{}",
                2 * self.claim_every(),
                m.claims,
                self.outputs(ids)
            );
            assert_eq!(m.claims.split, split, "node {id} saw claims disagree: {:?}", m.claims);
            assert!(!self.data(*id).join(wal_raft::fence::FENCE_FILE).exists());
        }
    }
}

pub fn create(name: &str) -> catalog::Command {
    catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: name.into(),
        props: vec![],
    }
}

/// The entity a committed create made (its id is its index; a duplicate's is the first index).
pub fn created_id(w: &WriteReply) -> Option<u64> {
    match w {
        WriteReply::Committed { outcome: Response::Done(r), .. } => {
            catalog::Receipt::decode(r).ok().map(|r| r.id.0)
        }
        WriteReply::Committed { outcome: Response::Duplicate { first_index }, .. } => Some(*first_index),
        _ => None,
    }
}

/// Runs `walraft-node client --node N... ARGS` (the binary cargo built) and waits for it.
#[cfg(test)]
pub fn client_cmd(nodes: &[String], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["client", "--plaintext"]);
    for n in nodes {
        cmd.args(["--node", n]);
    }
    cmd.args(args).output().unwrap()
}

/// A command's stdout then stderr, for assertions and failure messages.
pub fn out_text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}
