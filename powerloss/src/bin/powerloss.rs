//! `powerloss`: record a workload under the block-write recorder and check its crash images
//! (`run`), or rebuild and check one image of a kept recording (`image`). The test suite
//! (`powerloss/tests/powerloss/powerloss.rs`) runs a seeded subset; this binary runs the long mode and
//! reproduces a failure. Exit codes: 0 every image passed, 1 an image failed, 2 the suite could
//! not run (not root, no FUSE, a tool missing), 64 bad arguments.

use clap::{Parser, Subcommand};
use powerloss::campaign::{self, Plan, Setup};
use powerloss::device::{self, Fs};
use powerloss::image::{self, Cursor, ImageSpec};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "powerloss", about = "Power-loss images of a real file system, checked")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Record workloads and check their images.
    Run {
        /// ext4 or xfs (repeatable; default ext4).
        #[arg(long = "fs", value_parser = parse_fs)]
        fs: Vec<Fs>,
        /// sync, async, pipeline, raft (repeatable; default all four).
        #[arg(long = "kind")]
        kinds: Vec<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Check every flush point (the long mode) instead of a seeded sample.
        #[arg(long)]
        all: bool,
        /// Flush-point images per workload when not --all.
        #[arg(long, default_value_t = 12)]
        flush_points: usize,
        /// Between images (seeded subsets of unflushed writes, some torn) per workload.
        #[arg(long, default_value_t = 8)]
        between: usize,
        /// Scratch directory (tmpfs is best).
        /// Where this run makes (and at the end removes) its own working directory,
        /// `walpowerloss-<pid>`: nothing else there is touched (tmpfs is best).
        #[arg(long, default_value = "/dev/shm")]
        scratch: PathBuf,
        /// Where a failing recording is kept.
        #[arg(long, default_value = "target/powerloss-failures")]
        keep: PathBuf,
        /// Runs of the `sync` workload resumed on images of its first run, on each file system
        /// (a second power loss after recovery).
        #[arg(long, default_value_t = 0)]
        resumed: usize,
        /// Also write the summary as JSON (the committed one is
        /// `reliability/powerloss-summary.json`).
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Rebuild one image of a kept recording, mount it and run the checker.
    Image {
        #[arg(long)]
        recording: PathBuf,
        #[arg(long)]
        window: usize,
        #[arg(long)]
        subset: Option<u64>,
        /// Where this run makes (and removes) its own working directory, as for `run`.
        #[arg(long, default_value = "/dev/shm")]
        scratch: PathBuf,
        /// Write the image to this file and stop (to look at it with e2fsck, xfs_repair or a
        /// mount of your own) instead of checking it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn parse_fs(s: &str) -> Result<Fs, String> {
    Fs::parse(s).ok_or_else(|| format!("{s}: ext4 or xfs"))
}

/// This process's own working directory under `parent`: a run removes its working directory
/// whole, so it must never be a directory the operator named (a wrong `--scratch` would be
/// wiped), nor one another run is using at the same time.
fn private(parent: &Path, what: &str) -> PathBuf {
    parent.join(format!("walpowerloss-{what}-{}", std::process::id()))
}

fn workload_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("powerloss-workload");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("{} is missing: cargo build -p wal-powerloss", bin.display()))
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 64 } else { 0 });
        }
    };
    let workload = match workload_binary() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("powerloss: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.cmd {
        Cmd::Run { fs, kinds, seed, all, flush_points, between, scratch, keep, resumed, json } => {
            let fs = if fs.is_empty() { vec![Fs::Ext4] } else { fs };
            let kinds = if kinds.is_empty() {
                ["sync", "async", "pipeline", "raft"].map(String::from).to_vec()
            } else {
                kinds
            };
            let plan = Plan { flush_points: (!all).then_some(flush_points), between, seed };
            run(
                &fs,
                &kinds,
                seed,
                &plan,
                &workload,
                &private(&scratch, "run"),
                &keep,
                resumed,
                json.as_deref(),
            )
        }
        Cmd::Image { recording, window, subset, scratch, out } => image_one(
            &recording,
            ImageSpec { window, subset },
            &workload,
            &private(&scratch, "image"),
            out.as_deref(),
        ),
    }
}

/// The `--json` report of `powerloss run`.
#[derive(Serialize)]
struct ReportJson {
    /// The arguments it ran with.
    command: String,
    /// The commit the tree was at, and whether it had changes.
    commit: String,
    uncommitted_changes: bool,
    every_flush_point: bool,
    between_images_per_workload: usize,
    runs: Vec<RunJson>,
}

/// One workload's recording and what its images showed.
#[derive(Serialize)]
struct RunJson {
    fs: &'static str,
    kind: String,
    seed: u64,
    /// A resumed run only: the first run's image it started from.
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<String>,
    flushes: usize,
    acknowledgements: usize,
    /// A resumed run only: the first run's acknowledgements its images had to honour.
    #[serde(skip_serializing_if = "Option::is_none")]
    prior_acknowledgements: Option<usize>,
    images: usize,
    between_images: usize,
    repaired_by_fsck: usize,
    acknowledgements_required: usize,
    losses: usize,
}

impl RunJson {
    fn new(fs: Fs, kind: &str, seed: u64, rec: &campaign::Recorded, s: &campaign::Summary) -> RunJson {
        RunJson {
            fs: fs.name(),
            kind: kind.to_string(),
            seed,
            origin: None,
            flushes: rec.flushes(),
            acknowledgements: rec.acks(),
            prior_acknowledgements: None,
            images: s.images,
            between_images: s.between,
            repaired_by_fsck: s.repaired,
            acknowledgements_required: s.required,
            losses: s.failures.len(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    fss: &[Fs],
    kinds: &[String],
    seed: u64,
    plan: &Plan,
    workload: &Path,
    scratch: &Path,
    keep: &Path,
    resumed: usize,
    json: Option<&Path>,
) -> ExitCode {
    let mut failed = false;
    let mut rows = Vec::new();
    for &fs in fss {
        if let Some(why) = device::unavailable(fs) {
            eprintln!("powerloss: cannot run on {fs}: {why}");
            return ExitCode::from(2);
        }
        for kind in kinds {
            let setup = Setup {
                fs,
                kind: kind.clone(),
                seed,
                workload: workload.to_path_buf(),
                scratch: scratch.to_path_buf(),
                direct_marks: true,
                resume: false,
            };
            match campaign::campaign(&setup, plan, keep) {
                Ok((rec, s)) => {
                    println!("{}", campaign::report(&setup, &rec, &s));
                    for (_, f) in &s.failures {
                        println!("FAIL {f}");
                    }
                    rows.push(RunJson::new(fs, kind, seed, &rec, &s));
                    failed |= !s.failures.is_empty();
                    if kind == "sync" {
                        failed |= run_resumed(&setup, &rec, resumed, plan, keep, &mut rows);
                    }
                }
                Err(e) => {
                    println!("FAIL {fs} {kind} seed {seed}: {e}");
                    failed = true;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(scratch);
    if let Some(path) = json {
        // The engine the run checked: the commit the tree was at (and whether it had changes).
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let doc = ReportJson {
            command: std::env::args().skip(1).collect::<Vec<_>>().join(" "),
            commit,
            uncommitted_changes: dirty,
            every_flush_point: plan.flush_points.is_none(),
            between_images_per_workload: plan.between,
            runs: rows,
        };
        // Through a value: its objects' keys sorted (serde_json's map without `preserve_order`),
        // as the reports already written have them.
        let text =
            serde_json::to_value(&doc).and_then(|v| serde_json::to_string_pretty(&v)).unwrap_or_default()
                + "\n";
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("powerloss: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The `sync` run resumed `n` times on images of `first`'s recording; whether any failed.
fn run_resumed(
    first: &Setup,
    rec: &campaign::Recorded,
    n: usize,
    plan: &Plan,
    keep: &Path,
    rows: &mut Vec<RunJson>,
) -> bool {
    let mut failed = false;
    for (i, origin) in campaign::resume_origins(&rec.rec, n, first.seed).into_iter().enumerate() {
        let seed = first.seed + 100 + i as u64;
        let second =
            Setup { seed, resume: true, scratch: first.scratch.with_extension("resumed"), ..first.clone() };
        match campaign::resumed(first, rec, origin, &second, plan, keep) {
            Ok((again, s)) => {
                println!(
                    "resumed on {origin} ({} acknowledgements of the first run): {}",
                    again.prior.len(),
                    campaign::report(&second, &again, &s)
                );
                for (_, f) in &s.failures {
                    println!("FAIL {f}");
                }
                rows.push(RunJson {
                    origin: Some(origin.to_string()),
                    prior_acknowledgements: Some(again.prior.len()),
                    ..RunJson::new(first.fs, "sync-resumed", seed, &again, &s)
                });
                failed |= !s.failures.is_empty();
            }
            Err(e) => {
                println!("FAIL {} sync resumed on {origin}: {e}", first.fs);
                failed = true;
            }
        }
        let _ = std::fs::remove_dir_all(&second.scratch);
    }
    failed
}

fn image_one(
    recording: &Path,
    spec: ImageSpec,
    workload: &Path,
    scratch: &Path,
    out: Option<&Path>,
) -> ExitCode {
    let (fs, kind, seed, recorded) = match campaign::load(recording) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("powerloss: {e}");
            return ExitCode::from(2);
        }
    };
    let windows = image::windows(&recorded.rec).len();
    if spec.window >= windows {
        eprintln!("powerloss: the recording has windows 0..{windows}");
        return ExitCode::from(64);
    }
    let _ = std::fs::remove_dir_all(scratch);
    if let Err(e) = std::fs::create_dir_all(scratch) {
        eprintln!("powerloss: {}: {e}", scratch.display());
        return ExitCode::from(2);
    }
    let setup = Setup {
        fs,
        kind,
        seed,
        workload: workload.to_path_buf(),
        scratch: scratch.to_path_buf(),
        direct_marks: true,
        resume: false,
    };
    let mut required = recorded.prior.clone();
    required.extend(image::required(&recorded.rec, spec.window));
    if let Some(out) = out {
        let built = Cursor::new(&recorded.rec, &recorded.base, &scratch.join("work.img"), fs.torn_sector())
            .and_then(|mut c| c.build(spec, out));
        let _ = std::fs::remove_dir_all(scratch);
        return match built {
            Ok(()) => {
                println!(
                    "{fs} {} seed {seed} {spec}: written to {} ({} acknowledgements required)",
                    setup.kind,
                    out.display(),
                    required.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("powerloss: building the image: {e}");
                ExitCode::from(2)
            }
        };
    }
    let result = Cursor::new(&recorded.rec, &recorded.base, &scratch.join("work.img"), fs.torn_sector())
        .map_err(|e| e.to_string())
        .and_then(|mut c| campaign::check_one(&setup, &mut c, spec, &required));
    let _ = std::fs::remove_dir_all(scratch);
    match result {
        Ok(line) => {
            println!(
                "{fs} {} seed {seed} {spec}: {} acknowledgements required: {line}",
                setup.kind,
                required.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL {e}");
            ExitCode::from(1)
        }
    }
}
