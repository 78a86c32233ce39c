//! `walcheck`: what an operator runs after a restart or in an incident.
//!
//! `verify` gives the CRC verdict and, by replaying the log through the state machine's own
//! apply function (the reference catalog by default), the state verdict. A controller with its
//! own state machine builds its own `walcheck` in a few lines with [`run_with`]:
//!
//! ```no_run
//! # use wal::state::{Committed, Outcome, SetDigest, StateMachine};
//! # struct MyState;
//! # impl StateMachine for MyState {
//! #     const VERSION: u32 = 1;
//! #     fn apply(&mut self, _: &Committed<'_>) -> Outcome { Outcome::Done(vec![]) }
//! #     fn digest(&self) -> SetDigest { SetDigest::EMPTY }
//! #     fn export(&self, _: &mut dyn std::io::Write) -> std::io::Result<()> { Ok(()) }
//! #     fn import(_: &[u8]) -> Result<Self, String> { Ok(MyState) }
//! # }
//! let spec = verifier::state::StateMachineSpec { name: "my-state", fresh: || MyState, diff: |_, _, _| Vec::new() };
//! std::process::exit(walcheck::run_with(std::env::args_os(), &spec));
//! ```
//!
//! Exit codes (DESIGN.md): 0 OK, 1 TORN_TAIL, 2 CORRUPT_TAIL, 3 CORRUPT, 4 DIVERGENT, 5 IO_ERROR,
//! 6 UNSUPPORTED_VERSION, 64 usage error. The most severe verdict wins. A closed output pipe ends
//! quietly with the verdict's code, never with 0 for a bad log.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use verifier::compare::compare_replicas;
use verifier::report::{describe, EXIT_IO_ERROR};
use verifier::state::{verify_with_state, StateMachineSpec, StateOptions};
use verifier::{Progress, VerifyOptions};
use wal::format::Kind;
use wal::state::StateMachine;

/// Exit code for bad arguments.
pub const EXIT_USAGE: i32 = 64;

mod repair;
use repair::repair;

#[derive(Parser, Debug)]
#[command(name = "walcheck", version, about = "Verify, inspect and repair a wal log directory")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Check every record's checksum and the chain, and print the CRC and state verdicts.
    Verify {
        dir: PathBuf,
        /// Only segment continuity from headers and footers (records are not read, nothing is
        /// replayed: the state is NOT_CHECKED).
        #[arg(long)]
        quick: bool,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Start the replay from this snapshot (for a log whose prefix was purged).
        #[arg(long, value_name = "SNAPSHOT")]
        base: Option<PathBuf>,
        /// Also compare the replayed state with this exported state (a snapshot file), at its LSN.
        #[arg(long, value_name = "SNAPSHOT")]
        state: Option<PathBuf>,
        /// How many differing entities to name when a state differs.
        #[arg(long, default_value_t = 10)]
        max_differences: usize,
    },
    /// Check that replicas hold the same entries by LSN and the same state at the highest LSN
    /// they all have.
    Compare {
        #[arg(required = true, num_args = 2..)]
        dirs: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Print every record in log order, as text or JSON lines.
    Dump {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
        /// How to show payloads.
        #[arg(long, value_enum, default_value_t = PayloadMode::Hex)]
        payload: PayloadMode,
        /// Show at most this many payload bytes per record.
        #[arg(long, default_value_t = 64)]
        max_payload_bytes: usize,
    },
    /// Segments, LSN and epoch ranges, sizes, batches, checkpoints.
    Stat {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Cut a torn tail (after a backup); CORRUPT_TAIL or CORRUPT only with --lossy.
    Repair {
        dir: PathBuf,
        /// Also cut damage that may hold acknowledged data (CORRUPT_TAIL, CORRUPT): lossy.
        #[arg(long)]
        lossy: bool,
        /// Say what would be cut and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Where to copy the files the repair changes (default: DIR.walcheck-backup-<secs>).
        #[arg(long)]
        backup: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PayloadMode {
    None,
    Hex,
    Text,
}

/// Standard output that turns a closed pipe into a quiet stop.
pub(crate) struct Out {
    w: std::io::Stdout,
    closed: bool,
}

impl Out {
    fn new() -> Out {
        Out { w: std::io::stdout(), closed: false }
    }

    pub(crate) fn line(&mut self, s: &str) {
        if self.closed {
            return;
        }
        let r = writeln!(self.w.lock(), "{s}");
        if r.is_err() {
            // EPIPE (or any failure to write): stop printing; the exit code still tells.
            self.closed = true;
        }
    }
}

/// The reference catalog, the state machine `walcheck` replays by default.
pub fn catalog_spec() -> StateMachineSpec<catalog::Catalog> {
    StateMachineSpec {
        name: "catalog",
        fresh: catalog::Catalog::new,
        diff: |a, b, limit| {
            let d = catalog::diff(a, b, limit);
            let mut lines: Vec<String> = d.first.iter().map(|e| format!("replay vs state: {e}")).collect();
            if d.total > d.first.len() as u64 {
                lines.push(format!("... {} differences in all", d.total));
            }
            lines
        },
    }
}

/// Runs walcheck with these arguments (the first is the program name) and the reference
/// catalog; returns the exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_with(args, &catalog_spec())
}

/// Runs walcheck replaying through `spec`'s state machine.
pub fn run_with<S, I, T>(args: I, spec: &StateMachineSpec<S>) -> i32
where
    S: StateMachine,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let dirs: Vec<&PathBuf> = match &cli.cmd {
        Cmd::Verify { dir, .. } | Cmd::Dump { dir, .. } | Cmd::Stat { dir, .. } | Cmd::Repair { dir, .. } => {
            vec![dir]
        }
        Cmd::Compare { dirs, .. } => dirs.iter().collect(),
    };
    for dir in dirs {
        if !dir.is_dir() {
            eprintln!("walcheck: {}: not a directory", dir.display());
            return EXIT_USAGE;
        }
    }
    if let Cmd::Verify { base: Some(p), .. } | Cmd::Verify { state: Some(p), .. } = &cli.cmd {
        if !p.is_file() {
            eprintln!("walcheck: {}: not a file", p.display());
            return EXIT_USAGE;
        }
    }
    let mut out = Out::new();
    match &cli.cmd {
        Cmd::Verify { dir, quick, json, base, state, max_differences } => {
            let st = StateOptions { base: base.clone(), state: state.clone(), diff_limit: *max_differences };
            if *quick && (base.is_some() || state.is_some()) {
                eprintln!("walcheck: --quick does not replay; --base and --state need a full verify");
                return EXIT_USAGE;
            }
            verify(&mut out, dir, *quick, *json, &st, spec)
        }
        Cmd::Compare { dirs, json } => compare(&mut out, dirs, *json, spec),
        Cmd::Stat { dir, json } => stat(&mut out, dir, *json),
        Cmd::Dump { dir, json, payload, max_payload_bytes } => {
            dump(&mut out, dir, *json, *payload, *max_payload_bytes)
        }
        Cmd::Repair { dir, lossy, dry_run, backup } => {
            repair(&mut out, dir, *lossy, *dry_run, backup.as_deref(), spec)
        }
    }
}

fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// A one-line progress indicator on stderr, only when stderr is a terminal.
fn progress(enabled: bool) -> impl FnMut(Progress) {
    let on = enabled && std::io::stderr().is_terminal();
    move |p: Progress| {
        if on {
            eprint!("\r\x1b[2Kscanning segment {} ({} records)", p.segment, p.records);
        }
    }
}

fn end_progress(enabled: bool) {
    if enabled && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

fn verify<S: StateMachine>(
    out: &mut Out,
    dir: &Path,
    quick: bool,
    json: bool,
    st: &StateOptions,
    spec: &StateMachineSpec<S>,
) -> i32 {
    let report = verify_with_state(dir, quick, st, spec, &mut progress(!json));
    end_progress(!json);
    if json {
        out.line(&report.to_json().to_string());
    } else {
        for l in report.to_text(color()).lines() {
            out.line(l);
        }
    }
    if let Some(e) = &report.io_error {
        eprintln!("walcheck: {e}");
    }
    report.exit_code()
}

fn compare<S: StateMachine>(out: &mut Out, dirs: &[PathBuf], json: bool, spec: &StateMachineSpec<S>) -> i32 {
    let report = compare_replicas(dirs, spec);
    if json {
        out.line(&report.to_json().to_string());
    } else {
        let why = match &report.verdict {
            verifier::compare::ReplicaVerdict::Agree => String::new(),
            verifier::compare::ReplicaVerdict::Differ(w)
            | verifier::compare::ReplicaVerdict::NotChecked(w)
            | verifier::compare::ReplicaVerdict::Unreadable(w) => {
                format!(": {w}")
            }
        };
        let range = report.common.map_or("-".to_string(), |(a, b)| format!("{a}..{b}"));
        out.line(&format!(
            "replicas {}  common LSN {range}, {} entries compared{why}",
            report.verdict.word(),
            report.entries_compared
        ));
        for r in &report.replicas {
            let o = |v: Option<wal::Lsn>| v.map_or("-".to_string(), |l| l.0.to_string());
            out.line(&format!(
                "  {}  CRC {}  LSN {}..{}  digest {}  entities {}",
                r.dir.display(),
                r.crc,
                o(r.first_lsn),
                o(r.last_lsn),
                r.digest.as_deref().map_or("-", |d| &d[..16.min(d.len())]),
                r.entity_count.map_or("-".to_string(), |c| c.to_string())
            ));
        }
    }
    report.exit_code()
}

fn stat(out: &mut Out, dir: &Path, json: bool) -> i32 {
    let report = verifier::verify(dir, &VerifyOptions { quick: false }, &mut progress(!json));
    end_progress(!json);
    if json {
        out.line(&report.to_json()["stats"].to_string());
        return report.exit_code();
    }
    let s = &report.stats;
    let o = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
    let avg = if s.batches > 0 { (s.records - s.batches) as f64 / s.batches as f64 } else { 0.0 };
    for l in [
        format!("log            {}", dir.display()),
        format!("verdict        CRC {}  STATE {}", report.crc_word(), report.state_word()),
        format!(
            "segments       {} ({} sealed, {} spare, floor {})",
            s.segments,
            s.sealed,
            s.spares,
            o(s.floor_segment)
        ),
        format!("size           {} bytes on disk, {} payload bytes", s.bytes, s.payload_bytes),
        format!("records        {} ({} entries)", s.records, s.entries),
        format!("LSN            {}..{} written, next {}", o(s.min_lsn), o(s.max_lsn), o(s.next_lsn)),
        format!(
            "epoch          {}..{}, now {} ({} changes)",
            o(s.min_epoch),
            o(s.max_epoch),
            o(s.epoch),
            s.epoch_changes
        ),
        format!(
            "batches        {} (records per batch: mean {:.1}, max {})",
            s.batches, avg, s.max_batch_records
        ),
        format!("checkpoints    {} (last at LSN {})", s.checkpoints, o(s.last_checkpoint_lsn)),
        format!("cuts           {} truncations, {} resets", s.truncations, s.resets),
        format!("metadata       {} records", s.metas),
    ] {
        out.line(&l);
    }
    if let Some(d) = &report.damage {
        out.line(&format!("damage         {}", describe(d)));
    }
    report.exit_code()
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Frame => "frame",
        Kind::Entry => "entry",
        Kind::Checkpoint => "checkpoint",
        Kind::Truncate => "truncate",
        Kind::Reset => "reset",
        Kind::Epoch => "epoch",
        Kind::Meta => "meta",
        Kind::State => "state",
        Kind::Footer => "footer",
    }
}

fn show_payload(p: &[u8], mode: PayloadMode, max: usize) -> Option<String> {
    let shown = p.get(..p.len().min(max)).unwrap_or_default();
    let more = if p.len() > max { "…" } else { "" };
    match mode {
        PayloadMode::None => None,
        PayloadMode::Hex => Some(shown.iter().map(|b| format!("{b:02x}")).collect::<String>() + more),
        PayloadMode::Text => Some(String::from_utf8_lossy(shown).into_owned() + more),
    }
}

fn dump(out: &mut Out, dir: &Path, json: bool, mode: PayloadMode, max: usize) -> i32 {
    let storage = verifier::pread::ReadOnlyDir::new(dir);
    let mut visit = |segment: u64, r: &wal::scan::Rec<'_>| {
        let payload = show_payload(r.payload, mode, max);
        let line = if json {
            serde_json::json!({
                "segment": segment, "offset": r.offset, "seq": r.seq, "kind": kind_name(r.kind),
                "lsn": r.lsn, "epoch": r.epoch, "len": r.payload.len(),
                "group_continues": r.flags & wal::format::FLAG_GROUP_CONT != 0,
                "crc": format!("{:08x}", r.crc), "payload": payload,
            })
            .to_string()
        } else {
            let mut l = format!(
                "{segment:>6} {:>10} seq={} {} lsn={} epoch={} len={}",
                r.offset,
                r.seq,
                kind_name(r.kind),
                r.lsn,
                r.epoch,
                r.payload.len()
            );
            if r.flags & wal::format::FLAG_GROUP_CONT != 0 {
                l += " group+";
            }
            if let Some(p) = payload.filter(|_| r.kind == Kind::Entry) {
                l += &format!(" {p}");
            }
            l
        };
        out.line(&line);
    };
    match wal::scan_log_with(&storage, wal::Depth::Full, &mut visit) {
        Ok(scan) => {
            if let Some(d) = &scan.damage {
                eprintln!("walcheck: {}", describe(d));
            }
            scan.verdict.exit_code()
        }
        Err(e) => {
            eprintln!("walcheck: {e}");
            EXIT_IO_ERROR
        }
    }
}
