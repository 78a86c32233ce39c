//! `walraft-node`: a catalog replicated over openraft on this log. See docs/running-a-cluster.md.
//! The logic is in the `wal_raft` library; this file parses arguments and prints reports.
//!
//! Exit codes: `run` 0 after a clean stop (SIGINT/SIGTERM), 4 when the state verdict is
//! DIVERGENT (Raft is not started), 9 when the node is fenced (its data directory holds a
//! `FENCED` file: refused at start; or it fenced itself while running and was then stopped),
//! 70 when openraft's core stopped by itself, 1 on an error. `client` write commands: 0 committed and
//! applied, 1 committed but refused by the catalog, 2 rejected (never appended; also a write
//! too large for the client's or a node's frame limit), 3 indeterminate. `lookup`: 0 found, 1
//! not found, 5 no answer. `status`/`metrics`: 0 every node answered, 5 none did, 6 some did not;
//! `status` 7 when no leader holds its lease. Membership changes (`add-learner`, `promote`, `remove`,
//! `set-address`): 0 done, 2 refused (nothing changed), 3 indeterminate (it failed or timed out
//! after it was sent: part of it may have been made), 5 no leader answered (nothing sent).
//! `certs`: 0 issued, 1 on an error (an identity directory that exists: nothing is overwritten or
//! half issued). `run` and `client` need `--tls DIR` or `--plaintext` (loopback only); a `--tls`
//! directory that cannot be used (its file named) is a usage error too.
//! `check`/`compare`: walcheck's codes. A usage
//! error (bad arguments) exits 64, as walcheck's do: clap's default 2 is `client`'s REJECTED.
//! Reports written into a closed pipe stop quietly, with the same exit code.
//!
//! Here: the command line, the exit codes, the report's output and the dispatch; `run` is in
//! `run.rs`, `client` in `client.rs`.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use wal_raft::client::Client;
use wal_raft::net::stream::Security;

/// `run`'s exit code when openraft's core stopped by itself (EX_SOFTWARE).
const EXIT_RAFT_STOPPED: i32 = 70;

/// `run`'s exit code for a fenced node (`wal_raft::fence`): distinct from DIVERGENT (4), which
/// the offline check and the start-up replay give.
const EXIT_FENCED: i32 = 9;

/// Exit code for bad arguments (EX_USAGE, walcheck's too).
const EXIT_USAGE: u8 = 64;

/// The file in the data directory that holds a running node's process id.
const PID_FILE: &str = "node.pid";

/// `client metrics`/`status`: no node given answered.
const EXIT_NO_ANSWER: i32 = 5;

/// `client metrics`/`status`: some nodes answered, some did not.
const EXIT_PARTIAL: i32 = 6;

/// `client status`: every node answered, but none is a leader a majority acknowledged within
/// its lease: the cluster cannot commit.
const EXIT_NO_QUORUM: i32 = 7;

/// Prints a line of the report on stdout. A closed pipe (`walraft-node check DIR | head -2`)
/// ends the report quietly: the exit code is still the verdict's; any other failure to write
/// is said on stderr.
macro_rules! out {
    ($($t:tt)*) => { say(&format!($($t)*)) };
}

/// A line on stderr. A closed stderr loses the line; it never stops the node or changes an
/// exit code (`eprintln!` would panic).
fn esay(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

macro_rules! eout {
    ($($t:tt)*) => { esay(&format!($($t)*)) };
}

fn say(line: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = writeln!(o, "{line}").and_then(|()| o.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            esay(&format!("walraft-node: cannot write the report: {e}"));
        }
    }
}

mod client;
mod run;

use client::client;
use run::run;

#[derive(Parser, Debug)]
#[command(
    name = "walraft-node",
    version,
    about = "A catalog replicated with openraft over the write-ahead log"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a node until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Send a catalog command or an admin request to a cluster.
    Client {
        /// A node's address (repeat: the client finds the leader).
        #[arg(long = "node", required = true)]
        nodes: Vec<String>,
        /// A write attempt's first deadline at one node; doubled at a node after each attempt
        /// of the write that timed out there (see `wal_raft::client`). Keep it below the cluster's
        /// `--election-min-ms`, so that a stopped leader is left before another is elected.
        #[arg(long, default_value_t = wal_raft::client::ATTEMPT_TIMEOUT.as_millis() as u64)]
        attempt_timeout_ms: u64,
        /// The bound of a whole write, retries included.
        #[arg(long, default_value_t = wal_raft::client::WRITE_DEADLINE.as_millis() as u64)]
        write_deadline_ms: u64,
        /// The largest frame the client sends: give it the cluster's --max-frame-bytes to have
        /// a write too large for the cluster REJECTED before it is sent (a node answers one
        /// over its limit REJECTED too, without reading it).
        #[arg(long, default_value_t = wal_raft::net::frame::MAX_FRAME_LEN)]
        max_frame_bytes: usize,
        #[command(flatten)]
        security: SecurityArgs,
        #[command(subcommand)]
        op: Op,
    },
    /// Issue a cluster's certificate authority (if DIR has none) and certificates for nodes
    /// and clients, each in a directory to give to --tls (DIR/node-N, DIR/admin, DIR/writer).
    Certs {
        /// Where the authority is (or is made) and the certificates go.
        #[arg(long)]
        dir: PathBuf,
        /// A node id to issue a certificate for (repeat).
        #[arg(long = "node")]
        nodes: Vec<u64>,
        /// A client role to issue a certificate for (repeat): writer (writes), admin
        /// (membership changes).
        #[arg(long = "client", value_enum)]
        clients: Vec<ClientRole>,
    },
    /// Verify a node's data directory offline: CRC verdict and state verdict (walcheck's codes).
    Check { dir: PathBuf },
    /// Compare several nodes' data directories offline: entries by index, digest at the common end.
    Compare {
        #[arg(required = true, num_args = 2..)]
        dirs: Vec<PathBuf>,
    },
}

/// How connections are secured: exactly one of the two (plaintext is never a silent default).
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
struct SecurityArgs {
    /// Mutual TLS with the directory's ca.pem, cert.pem and key.pem (`walraft-node certs`
    /// writes them); re-read when they change, without a restart.
    #[arg(long, value_name = "DIR")]
    tls: Option<PathBuf>,
    /// No TLS: only between loopback addresses (refused for any other), and every local
    /// process is trusted with everything.
    #[arg(long)]
    plaintext: bool,
}

impl SecurityArgs {
    fn security(&self) -> Result<Security, String> {
        match &self.tls {
            Some(dir) => Security::tls(dir).map_err(|e| format!("--tls: {e}")),
            None => Ok(Security::Plaintext),
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ClientRole {
    Writer,
    Admin,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[arg(long)]
    id: u64,
    /// host:port to listen on (Raft, clients and admin share it).
    #[arg(long)]
    listen: String,
    /// Another voter, as ID=host:port (repeat).
    #[arg(long = "peer", value_parser = parse_peer)]
    peers: Vec<(u64, String)>,
    /// The node's data directory (log/ and sm/ inside).
    #[arg(long)]
    data: PathBuf,
    /// Initialize a fresh cluster of this node and its peers (harmless when initialized).
    #[arg(long)]
    initialize: bool,
    /// Accept the test-only faults: the partition switch, altering the state in memory. Only in
    /// a build made for tests (the `test-faults` feature); any other build refuses to start.
    #[arg(long, hide = !cfg!(feature = "test-faults"))]
    allow_faults: bool,
    /// Test only (needs --allow-faults): openraft's leader restore back on, the unsafe
    /// configuration the double-kill test's negative control runs.
    #[arg(long, hide = true, requires = "allow_faults")]
    unsafe_leader_restore: bool,
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    #[arg(long, default_value_t = 400)]
    election_min_ms: u64,
    #[arg(long, default_value_t = 800)]
    election_max_ms: u64,
    #[arg(long, default_value_t = 100_000)]
    snapshot_every: u64,
    #[arg(long, default_value_t = 1000)]
    keep_logs: u64,
    /// Claim indexes are the multiples of this: after each, every voter claims its state
    /// digest in the replicated log and a node a majority contradicts fences itself. Larger
    /// than the number of voters.
    #[arg(long, default_value_t = 64)]
    checkpoint_every: u64,
    #[arg(long, default_value_t = 5000)]
    write_timeout_ms: u64,
    /// The largest message frame on the port (the same on every node; at least 16384). Larger
    /// snapshots travel in chunks and larger batches of entries are split, so this bounds
    /// memory per message, not what can be replicated; a client write too large for it (its
    /// request, or the log entry it would become) is answered REJECTED.
    #[arg(long, default_value_t = wal_raft::net::frame::MAX_FRAME_LEN)]
    max_frame_bytes: usize,
    /// host:port to serve `GET /metrics` on (the Prometheus text format over plain HTTP: the
    /// log writer's fsync and batch figures, the node's role, indexes, lag, claims). Not
    /// served unless given.
    #[arg(long)]
    metrics_listen: Option<String>,
    #[command(flatten)]
    security: SecurityArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    Metalake,
    Catalog,
    Schema,
    Table,
}

#[derive(Subcommand, Debug)]
enum Op {
    /// Create an entity (a metalake at the root, else under --parent).
    Create {
        #[arg(long, value_enum)]
        kind: Kind,
        #[arg(long)]
        parent: Option<u64>,
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "")]
        props: String,
    },
    /// Rename an entity that is still at --version.
    Rename {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        version: u64,
        #[arg(long)]
        name: String,
    },
    /// Replace an entity's properties if it is still at --version.
    Update {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        version: u64,
        #[arg(long)]
        props: String,
    },
    /// Drop an entity (with --cascade, its subtree).
    Drop {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        version: Option<u64>,
        #[arg(long)]
        cascade: bool,
    },
    /// An entity by parent and name, in the leader's applied state (the first node's when no
    /// leader answers).
    Lookup {
        #[arg(long)]
        parent: Option<u64>,
        #[arg(long)]
        name: String,
    },
    /// Each node's full metrics (role, term, leader, indexes, digest, claims, fsyncs, lag).
    Metrics {
        /// One JSON object per node and line: `{"node": ADDR, "metrics": {...}}`, or
        /// `{"node": ADDR, "error": "..."}`.
        #[arg(long)]
        json: bool,
    },
    /// One line per node: role, term, leader, committed and applied index, whether a leader
    /// holds its lease (a majority acknowledged it within the election timeout), each
    /// follower's lag, and through which index the digests were verified.
    Status {
        /// One JSON object per node and line, with `status` and `lease_held` beside `metrics`.
        #[arg(long)]
        json: bool,
    },
    /// Add a node as a learner (it receives the log but does not vote); answers once it has
    /// caught up. Start the node first (`run` without --initialize). A node that lost its
    /// data directory rejoins under a new id.
    AddLearner {
        #[arg(long)]
        id: u64,
        /// host:port the node listens on.
        #[arg(long)]
        addr: String,
    },
    /// Make learners voters (joint consensus; refused if a quorum would be lost).
    Promote {
        #[arg(long = "id", required = true)]
        ids: Vec<u64>,
    },
    /// Remove voters or learners (refused if a quorum would be lost).
    Remove {
        #[arg(long = "id", required = true)]
        ids: Vec<u64>,
    },
    /// A member was restarted, with its data directory, listening at a new address.
    SetAddress {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        addr: String,
    },
    /// The test-only partition switch of each node given (needs --allow-faults on the node).
    Partition {
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
}

fn parse_peer(s: &str) -> Result<(u64, String), String> {
    let (id, addr) = s.split_once('=').ok_or_else(|| format!("{s:?} is not ID=host:port"))?;
    let id = id.parse::<u64>().map_err(|e| format!("peer id {id:?}: {e}"))?;
    Ok((id, addr.to_string()))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eout!("walraft-node: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match cli.cmd {
        Cmd::Run(a) => rt.block_on(run(a)),
        Cmd::Client { nodes, attempt_timeout_ms, write_deadline_ms, max_frame_bytes, security, op } => {
            let mut c = Client::new(nodes.clone());
            c.security = match security.security() {
                Ok(s) => s,
                Err(e) => {
                    eout!("walraft-node client: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            c.attempt_timeout = Duration::from_millis(attempt_timeout_ms);
            c.write_deadline = Duration::from_millis(write_deadline_ms);
            c.max_frame = max_frame_bytes;
            rt.block_on(client(c, nodes, op))
        }
        Cmd::Certs { dir, nodes, clients } => certs(&dir, &nodes, &clients),
        Cmd::Check { dir } => {
            let c = wal_raft::check::check(&dir);
            out!("{}", c.summary());
            c.exit_code()
        }
        Cmd::Compare { dirs } => {
            let c = wal_raft::check::compare(&dirs);
            out!("{}", c.summary());
            c.exit_code()
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// `certs`: 0 when every certificate was issued, 64 when none was asked for, 1 on an error
/// (nothing is overwritten: an identity directory that exists is an error).
fn certs(dir: &std::path::Path, nodes: &[u64], clients: &[ClientRole]) -> i32 {
    use wal_raft::certs::Role;
    if nodes.is_empty() && clients.is_empty() {
        eout!("walraft-node certs: nothing to issue: give --node ID or --client ROLE");
        return i32::from(EXIT_USAGE);
    }
    let roles: Vec<Role> = clients
        .iter()
        .map(|c| match c {
            ClientRole::Writer => Role::Writer,
            ClientRole::Admin => Role::Admin,
        })
        .collect();
    match wal_raft::certs::issue_all(dir, nodes, &roles) {
        Ok(made) => {
            for d in made {
                out!("{}", d.display());
            }
            0
        }
        Err(e) => {
            eout!("walraft-node certs: {e}");
            1
        }
    }
}
