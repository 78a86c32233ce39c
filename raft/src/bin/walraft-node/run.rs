//! `walraft-node run`: a node started from its arguments, its PID file and log subscriber, and
//! its exit code when it stops (a signal, openraft's core stopping by itself, a fence).
//! Separate from the command line (`main.rs`): the one subcommand that runs a node.

use crate::{esay, say, RunArgs, EXIT_FENCED, EXIT_RAFT_STOPPED, EXIT_USAGE, PID_FILE};
use openraft::async_runtime::WatchReceiver;
use std::collections::BTreeMap;
use std::time::Duration;
use wal_raft::node::{start, NodeConfig, Started};

/// `DATA/node.pid` while `run` runs: written at start, removed when `run` returns.
struct PidFile(std::path::PathBuf);

impl PidFile {
    fn write(id: u64, data: &std::path::Path) -> PidFile {
        let path = data.join(PID_FILE);
        if let Err(e) = std::fs::write(&path, format!("{}\n", std::process::id())) {
            eout!("walraft-node {id}: cannot write {}: {e}", path.display());
        }
        PidFile(path)
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Logs to stderr through `tracing`, at the levels `RUST_LOG` gives (`info` for this crate and
/// `warn` for openraft when it is unset; `RUST_LOG=debug` shows openraft's own events too).
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,wal_raft=info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

/// Raises this process's soft limit on open descriptors to its hard limit (commonly 1,024 to
/// 524,288 or more): a node holds a descriptor per connection and per segment, and the soft
/// default is the first to run out under many clients. Nothing is raised past what the system
/// allows; a failure leaves the limit as it was.
fn raise_descriptor_limit() {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain system calls with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

pub(crate) async fn run(a: RunArgs) -> i32 {
    init_logging();
    if a.allow_faults && !cfg!(feature = "test-faults") {
        eout!(
            "walraft-node: --allow-faults: this build has no fault switches (they exist only in builds made for tests, with the test-faults feature)"
        );
        return i32::from(EXIT_USAGE);
    }
    if cfg!(feature = "test-faults") {
        // Cargo builds the binary with its tests' features when they are built together
        // (`cargo build --all-targets`, `cargo test`): say so, so such a build is not deployed.
        tracing::warn!(
            "this walraft-node was built for tests (the test-faults feature: --allow-faults exists); build a node for use with `cargo build --release -p wal-raft --bin walraft-node`"
        );
    }
    raise_descriptor_limit();
    let security = match a.security.security() {
        Ok(s) => s,
        Err(e) => {
            eout!("walraft-node {}: {e}", a.id);
            return i32::from(EXIT_USAGE);
        }
    };
    let peers: BTreeMap<u64, String> = a.peers.into_iter().collect();
    let mut cfg = NodeConfig::new(a.id, a.listen, peers, a.data);
    cfg.initialize = a.initialize;
    cfg.allow_faults = a.allow_faults;
    cfg.unsafe_leader_restore = a.unsafe_leader_restore;
    cfg.heartbeat_ms = a.heartbeat_ms;
    cfg.election_min_ms = a.election_min_ms;
    cfg.election_max_ms = a.election_max_ms;
    cfg.snapshot_every = a.snapshot_every;
    cfg.keep_logs = a.keep_logs;
    cfg.checkpoint_every = a.checkpoint_every;
    cfg.write_timeout = Duration::from_millis(a.write_timeout_ms);
    cfg.max_frame_bytes = a.max_frame_bytes;
    cfg.metrics_listen = a.metrics_listen;
    cfg.security = security;
    let id = cfg.id;
    let data = cfg.data_dir.clone();
    if cfg.unsafe_leader_restore {
        eout!("walraft-node {id}: UNSAFE test configuration: openraft's leader restore is on (issue 21, finding 1)");
    }
    let node = match start(cfg).await {
        Ok(Started::Running(n)) => n,
        Ok(Started::Refused { why }) => {
            eout!("walraft-node {id}: refusing to start as a voter: {why}");
            return wal_raft::check::EXIT_DIVERGENT;
        }
        Ok(Started::Fenced { why }) => {
            eout!(
                "walraft-node {id}: refusing to start: this node FENCED itself ({}/{}): {why}. {}",
                data.display(),
                wal_raft::fence::FENCE_FILE,
                wal_raft::fence::RECOVERY
            );
            return EXIT_FENCED;
        }
        Err(e) => {
            // A node can fence itself while openraft re-applies its log inside start-up (the
            // open-time check normally sees it first): the fence file says so, and the exit
            // code is the fence's.
            if let Ok(Some(why)) = wal_raft::fence::read(&data) {
                eout!(
                    "walraft-node {id}: {e}; this node FENCED itself: {why}. {}",
                    wal_raft::fence::RECOVERY
                );
                return EXIT_FENCED;
            }
            eout!("walraft-node {id}: {e}");
            return 1;
        }
    };
    out!("walraft-node {id}: listening on {} (state verdict at open: {:?})", node.addr, node.verdict);
    if let Some(at) = node.metrics_addr {
        out!("walraft-node {id}: metrics on http://{at}/metrics");
    }
    // For operators and scripts: `kill $(cat DATA/node.pid)`. Removed whenever `run` returns
    // (a stop, raft stopping by itself); a node killed with SIGKILL leaves it, and the next
    // start replaces it.
    let _pid_file = PidFile::write(id, &data);
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eout!("walraft-node {id}: cannot watch SIGTERM: {e}");
            return 1;
        }
    };
    let raft = node.raft.clone();
    let fence = node.fence.clone();
    let fatal = async move {
        // openraft's core can stop on its own (a storage error, or a panic such as
        // openraft#2116): the process would stay up but out of the cluster. Exit instead, so a
        // supervisor restarts the node from its durable log and snapshot. Not when the node
        // fenced itself (its core stopped on purpose): it stays up, answering metrics with
        // why, until it is stopped; a restart would be refused anyway.
        // A core that panicked drops its metrics channels without saying so in
        // `running_state`: a closed channel is a stop too. The server metrics' channel (it
        // changes rarely) closes with the others, and does not wake this per commit.
        let mut rx = raft.server_metrics();
        let full = raft.metrics();
        loop {
            tokio::select! {
                r = rx.changed() => {
                    if r.is_err() && fence.reason().is_none() {
                        // Stopped on an error (its last metrics say which), or a panic.
                        return match &full.borrow_watched().running_state {
                            Err(e) => e.to_string(),
                            Ok(()) => "openraft's core ended (its metrics channel closed: a panic?)".to_string(),
                        };
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            if fence.reason().is_some() {
                // Fenced on purpose: wait for the stop (and do not spin on a closed channel).
                std::future::pending::<()>().await;
            }
            if let Err(e) = &full.borrow_watched().running_state {
                return e.to_string();
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        why = fatal => {
            eout!("walraft-node {id}: raft stopped: {why}; exiting so that a restart recovers from the log");
            return EXIT_RAFT_STOPPED;
        }
    }
    eout!("walraft-node {id}: stopping");
    let fenced = node.fence.reason().is_some();
    match node.shutdown().await {
        _ if fenced => EXIT_FENCED,
        Ok(()) => 0,
        Err(e) => {
            eout!("walraft-node {id}: {e}");
            1
        }
    }
}
