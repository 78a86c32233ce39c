//! The workloads run on the recorded file system, and their checkers (issue 24; see
//! `powerloss/README.md`).
//!
//! ```text
//! powerloss-workload run <sync|async|pipeline|raft> --dir DIR --seed N [--handshake] [--marks FILE] [--resume]
//! powerloss-workload check <sync|async|pipeline|raft> --dir DIR --acks FILE
//! ```
//!
//! `run` creates the log in DIR (which must not exist yet; its parent must), runs a small
//! seeded workload and prints one `ack ...` line per acknowledgement the engine gave, after it
//! gave it, then `done` (exit 0); any error is said on stderr (exit 1). With `--handshake` each
//! line waits for one line on stdin before the workload goes on (`acks.rs`). The lines and what
//! each promises are in `acks.rs`.
//!
//! `check` decides whether the log in DIR (a crash image, mounted; writable) honours the ack
//! lines in FILE, in order: exit 0 and one `ok <kind> required=<n> verdict=<OK|TORN_TAIL> ...`
//! line (`verdict=OK log=none` for an image without a log when nothing is required); exit 1
//! and `FAIL: ...` lines when an acknowledged promise is broken (a Raft node that does not come
//! back on the image included); exit 2 on a usage or setup error (bad arguments, an unreadable
//! or malformed ack file, acks of another kind). The oracles are in `check.rs` (plain logs),
//! `pipeline.rs` and `raft.rs`.
//!
//! Every workload is bounded by a fixed count of operations, and every wait on a thread, a
//! promise or a node by a timeout, so neither command can hang.

mod acks;
mod asynchronous;
mod check;
mod pipeline;
mod raft;
mod sync;

use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

/// Every workload's segment size: the minimum the log allows, so that a run of a few hundred
/// KiB rotates many times.
pub const SEGMENT_LEN: u32 = 64 * 1024;

#[derive(Parser, Debug)]
#[command(name = "powerloss-workload", about = "Power-loss workloads and their checkers (issue 24)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Sync,
    Async,
    Pipeline,
    Raft,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sync => "sync",
            Kind::Async => "async",
            Kind::Pipeline => "pipeline",
            Kind::Raft => "raft",
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a workload, printing an `ack` line per acknowledgement and `done` at the end.
    Run {
        kind: Kind,
        /// Where the log goes: must not exist yet (its parent must).
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        seed: u64,
        /// After each ack line, wait for one line on stdin.
        #[arg(long)]
        handshake: bool,
        /// Also write each ack line to this file (the recorder's `marks`), one write per line,
        /// from the acknowledging thread before it prints.
        #[arg(long)]
        marks: Option<PathBuf>,
        /// Carry on the log a power loss left in DIR (which must hold one) instead of creating
        /// it: the open is the recovery. `sync` only.
        #[arg(long)]
        resume: bool,
    },
    /// Check a (crash image's) log against ack lines.
    Check {
        kind: Kind,
        #[arg(long)]
        dir: PathBuf,
        /// The ack lines the image must honour, as `run` printed them, in order.
        #[arg(long)]
        acks: PathBuf,
    },
}

fn run(
    kind: Kind,
    dir: &std::path::Path,
    seed: u64,
    handshake: bool,
    marks: Option<&std::path::Path>,
    resume: bool,
) -> Result<(), String> {
    if resume && kind != Kind::Sync {
        return Err("--resume is for the sync workload".into());
    }
    if resume && !dir.is_dir() {
        return Err(format!("{} holds no log to resume", dir.display()));
    }
    if dir.exists() && !resume {
        return Err(format!("{} exists: the workload creates the log", dir.display()));
    }
    if !dir.parent().is_some_and(|p| p.as_os_str().is_empty() || p.is_dir()) {
        return Err(format!("the parent of {} is not a directory", dir.display()));
    }
    let marks = match marks {
        Some(m) => Some(
            std::fs::OpenOptions::new()
                .append(true)
                .open(m)
                .map_err(|e| format!("opening the marks file {}: {e}", m.display()))?,
        ),
        None => None,
    };
    let acker = acks::Acker::new(handshake, marks);
    match kind {
        Kind::Sync if resume => sync::resume(dir, seed, &acker),
        Kind::Sync => sync::run(dir, seed, &acker),
        Kind::Async => asynchronous::run(dir, seed, &acker),
        Kind::Pipeline => pipeline::run(dir, seed, &acker),
        Kind::Raft => raft::run(dir, seed, &acker),
    }?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "done").and_then(|_| out.flush()).map_err(|e| format!("printing done: {e}"))
}

fn check(kind: Kind, dir: &std::path::Path, acks_file: &std::path::Path) -> check::Checked {
    let lines = acks::read_file(acks_file)?;
    match kind {
        Kind::Sync | Kind::Async => check::check(dir, &lines, kind.name()),
        Kind::Pipeline => pipeline::check(dir, &lines),
        Kind::Raft => raft::check(dir, &lines),
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let code = match cli.cmd {
        Cmd::Run { kind, dir, seed, handshake, marks, resume } => {
            match run(kind, &dir, seed, handshake, marks.as_deref(), resume) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("powerloss-workload run {}: {e}", kind.name());
                    1
                }
            }
        }
        Cmd::Check { kind, dir, acks } => match check(kind, &dir, &acks) {
            Ok(line) => {
                println!("{line}");
                0
            }
            Err(check::Failed::Violations(lines)) => {
                for l in lines {
                    println!("{l}");
                }
                1
            }
            Err(check::Failed::Setup(e)) => {
                eprintln!("powerloss-workload check {}: {e}", kind.name());
                2
            }
        },
    };
    std::process::exit(code);
}
