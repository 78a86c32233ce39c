//! `walcheck`: what an operator runs after a restart or in an incident.
//!
//! `verify` gives the CRC verdict and, by replaying the log through the state machine's own
//! apply function (the reference catalog by default), the state verdict. A controller with its
//! own state machine builds its own `walcheck` in a few lines with [`run_with`]:
//!
//! ```no_run
//! # use wal_state::{Committed, Outcome, SetDigest, StateMachine};
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
//! Exit codes: see [`EXIT_CODES`] (also in `--help` and `cli/README.md`). The highest code wins.
//! A closed output pipe ends quietly with the verdict's code, never with 0 for a bad log; any
//! other failure to write the report (a full disk, an I/O error) is said on stderr and exits 5.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use verifier::compare::compare_replicas;
use verifier::report::{describe, no_log_text, NoLog, EXIT_IO_ERROR};
use verifier::state::{StateMachineSpec, StateOptions};
use verifier::verify_with_state;
use verifier::{Progress, VerifyOptions};
use wal::format::Kind;
use wal_state::StateMachine;

/// Exit code for bad arguments, a missing path, a directory holding no log, or a `--base` or
/// `--state` file that cannot be used.
pub use verifier::report::EXIT_USAGE;

/// The exit codes, as `--help` lists them. With several verdicts (CRC, state, a failed write
/// of the report) the highest code wins.
pub const EXIT_CODES: &str = "\
Exit codes (the highest applicable one wins):
  0   OK: CRC OK and STATE CLEAN or NOT_CHECKED (compare: AGREE)
  1   TORN_TAIL: a crash cut the unacknowledged last batch; `repair` cuts it
  2   CORRUPT_TAIL: damage in the unattested last batch without evidence of a torn write
  3   CORRUPT: damage in attested data, or a record that checks out but breaks a rule
      (segment, offset and LSN are printed)
  4   DIVERGENT: the replayed state disagrees with a checkpoint, a --state file or a replica
  5   IO_ERROR: the log could not be read, or the report could not be written to stdout
  6   UNSUPPORTED_VERSION: a format or state-machine version this build does not know
  7   INCOMPLETE_CREATE: blank segments and no wal.meta: a creation was interrupted before
      anything was acknowledged
  8   NOT_COMPARED: compare had nothing to compare (a replica holds no entries, or the
      replicas share no LSN)
  64  usage: bad arguments, a path that does not exist, a directory holding no log, a
      --base or --state file that is not a usable snapshot";

mod escape;
mod repair;
use escape::escape_bytes;
use repair::repair;

#[derive(Parser, Debug)]
#[command(
    name = "walcheck",
    version,
    about = "Verify, inspect and repair a wal log directory",
    after_help = EXIT_CODES
)]
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
        /// Where to copy the files the repair changes (default: a new DIR.walcheck-backup-<secs>[-N] beside the log; never inside it, never an existing directory).
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

/// Standard output that turns a closed pipe into a quiet stop, and remembers any other failure
/// to write (a full disk, an I/O error) so that the run can say so and not exit 0.
pub(crate) struct Out {
    w: std::io::Stdout,
    closed: bool,
    failed: Option<std::io::Error>,
}

impl Out {
    fn new() -> Out {
        Out { w: std::io::stdout(), closed: false, failed: None }
    }

    pub(crate) fn line(&mut self, s: &str) {
        if self.closed {
            return;
        }
        if let Err(e) = writeln!(self.w.lock(), "{s}") {
            self.stop(e);
        }
    }

    fn stop(&mut self, e: std::io::Error) {
        // A closed pipe (`walcheck dump | head`) is the reader's choice: stop printing, the
        // exit code still tells the verdict. Anything else lost the report.
        self.closed = true;
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            self.failed = Some(e);
        }
    }

    /// Flushes, and turns a lost report into a message and exit code 5 (never lower than `code`).
    fn finish(mut self, code: i32) -> i32 {
        if !self.closed {
            if let Err(e) = self.w.lock().flush() {
                self.stop(e);
            }
        }
        match self.failed {
            Some(e) => {
                eprintln!("walcheck: writing to standard output failed: {e}");
                code.max(EXIT_IO_ERROR)
            }
            None => code,
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
        if let Err(why) = usable_path(dir, true) {
            eprintln!("walcheck: {}: {why}", dir.display());
            return EXIT_USAGE;
        }
    }
    if let Cmd::Verify { base, state, .. } = &cli.cmd {
        for p in [base, state].into_iter().flatten() {
            if let Err(why) = usable_path(p, false) {
                eprintln!("walcheck: {}: {why}", p.display());
                return EXIT_USAGE;
            }
        }
    }
    let mut out = Out::new();
    let code = match &cli.cmd {
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
    };
    out.finish(code)
}

/// Whether `p` can be what the command names: a directory (`dir`) or a file. Says what it is
/// otherwise: missing, or the other kind.
fn usable_path(p: &Path, dir: bool) -> Result<(), &'static str> {
    match std::fs::metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("does not exist"),
        Err(_) => Err("cannot be examined (permissions?)"),
        Ok(m) if dir && !m.is_dir() => Err("not a directory"),
        Ok(m) if !dir && !m.is_file() => Err("not a regular file"),
        Ok(_) => Ok(()),
    }
}

/// A directory holding no log: said on stderr (an absent log is a usage error), with where
/// the log is when `dir` is a `walraft-node` data directory (`log/` and `sm/` inside).
fn say_no_log(dir: &Path, n: NoLog) {
    eprintln!("walcheck: {}: {}", dir.display(), no_log_text(n));
    if matches!(n, NoLog::Absent) && dir.join("log").join("wal.meta").is_file() && dir.join("sm").is_dir() {
        eprintln!(
            "walcheck: {0} looks like a walraft-node data directory: its log is {0}/log; `walraft-node check {0}` checks it with the Raft state machine",
            dir.display()
        );
    }
}

/// Whether the text report's verdicts are coloured: anstream's decision for standard output,
/// the one clap makes for `--help` (a terminal, unless NO_COLOR or CLICOLOR=0 say no, TERM is
/// unset or `dumb`; CLICOLOR_FORCE says yes).
fn color() -> bool {
    anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
}

/// A one-line progress indicator on stderr, only when stderr is a terminal.
fn progress(enabled: bool) -> impl FnMut(Progress) {
    let on = enabled && std::io::stderr().is_terminal();
    move |p: Progress| {
        if on {
            progress_line(&format!("scanning segment {} ({} records)", p.segment, p.records));
        }
    }
}

fn end_progress(enabled: bool) {
    if enabled && std::io::stderr().is_terminal() {
        progress_line("");
    }
}

/// Replaces the progress line on stderr with `text`: back to the line's start and erase it
/// (ECMA-48 "erase in line", whole line), then the text, no newline. A cursor control, not a
/// style, so it is written here rather than through anstyle; only ever to a terminal.
fn progress_line(text: &str) {
    eprint!("\r\x1b[2K{text}");
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
    if let Some(n) = report.no_log {
        say_no_log(dir, n);
    }
    if let Some(verifier::state::StateVerdict::BadInput(why)) = report.state.as_ref().map(|s| &s.verdict) {
        eprintln!("walcheck: {why}");
    }
    report.exit_code()
}

fn compare<S: StateMachine>(out: &mut Out, dirs: &[PathBuf], json: bool, spec: &StateMachineSpec<S>) -> i32 {
    let report = compare_replicas(dirs, spec);
    if json {
        out.line(&report.to_json().to_string());
    } else {
        let why = report.verdict.reason().map_or(String::new(), |w| format!(": {w}"));
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
    if let Some(n) = report.no_log {
        say_no_log(dir, n);
    }
    if json {
        let v = report.json_view();
        let view = StatJson {
            stats: v.stats,
            crc: v.crc,
            state: v.state,
            exit_code: v.exit_code,
            live: v.live,
            damage: v.damage,
            live_tail: v.live_tail,
            io_error: v.io_error,
            no_log: v.no_log,
        };
        out.line(&json_line(&view));
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

/// One JSON line: the view's value, its objects' keys sorted (serde_json's map without
/// `preserve_order`), the order `walcheck`'s JSON has always had.
fn json_line(view: &impl Serialize) -> String {
    serde_json::to_value(view).map(|v| v.to_string()).expect("a JSON view serializes")
}

/// `walcheck stat --json`: the statistics at the top level, with the verdicts and the damage
/// beside them (the keys of `verify --json` they share mean the same).
#[derive(Serialize)]
struct StatJson<'a> {
    #[serde(flatten)]
    stats: &'a verifier::Stats,
    crc: &'static str,
    state: &'static str,
    exit_code: i32,
    live: bool,
    damage: Option<&'a wal::Damage>,
    live_tail: Option<&'a wal::Damage>,
    io_error: Option<&'a str>,
    no_log: Option<&'static str>,
}

/// One record of `walcheck dump --json`.
#[derive(Serialize)]
struct DumpJson {
    segment: u64,
    offset: u64,
    seq: u64,
    kind: &'static str,
    lsn: u64,
    epoch: u64,
    len: usize,
    group_continues: bool,
    /// The record's CRC, 8 hex digits.
    crc: String,
    /// As `--payload` shows it; `null` with `--payload none`.
    payload: Option<String>,
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
        PayloadMode::Text => Some(escape_bytes(shown) + more),
    }
}

fn dump(out: &mut Out, dir: &Path, json: bool, mode: PayloadMode, max: usize) -> i32 {
    let storage = verifier::pread::ReadOnlyDir::new(dir);
    let mut visit = |segment: u64, r: &wal::scan::Rec<'_>| {
        let payload = show_payload(r.payload, mode, max);
        let line = if json {
            json_line(&DumpJson {
                segment,
                offset: r.offset,
                seq: r.seq,
                kind: kind_name(r.kind),
                lsn: r.lsn,
                epoch: r.epoch,
                len: r.payload.len(),
                group_continues: r.flags & wal::format::FLAG_GROUP_CONT != 0,
                crc: format!("{:08x}", r.crc),
                payload,
            })
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
        Err(wal::Error::NotFound(_)) => {
            let report = verifier::verify(dir, &VerifyOptions { quick: true }, &mut |_| {});
            if let Some(n) = report.no_log {
                say_no_log(dir, n);
            }
            report.exit_code()
        }
        Err(e) => {
            eprintln!("walcheck: {e}");
            EXIT_IO_ERROR
        }
    }
}

/// The Rust blocks of `docs/durability.md`, compiled and run as doctests so that the document
/// cannot drift from the API (`cli/tests/walcheck/markdown.rs` checks that every Rust block of the
/// repository's Markdown is one of these or the README's quick start).
#[cfg(doctest)]
#[doc = include_str!("../../docs/durability.md")]
pub struct DurabilityDoc;

/// The Rust blocks of `docs/pipeline.md`, as above.
#[cfg(doctest)]
#[doc = include_str!("../../docs/pipeline.md")]
pub struct PipelineDoc;
