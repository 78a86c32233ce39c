//! The power-loss suite's CI subset (issue 24): each workload of `powerloss-workload` (the
//! synchronous handle, the writer thread with tickets, the pipeline with its state machine, a
//! Raft node) is recorded on a fresh ext4 and a fresh xfs through the FUSE block-write recorder,
//! and a fixed, seeded set of crash images is rebuilt, mounted and checked: on ext4 flush points
//! and between images (unflushed writes kept in part, some torn, in any order), on xfs flush
//! points. Every acknowledgement given before an image's window ended must hold in it.
//!
//! The long mode, every flush point of every workload, is `powerloss run --all` (see
//! `powerloss/README.md`); its committed summary is `reliability/powerloss-summary.json`, and
//! `the_readme_reports_the_committed_long_run` holds the README's table to it.
//!
//! Each test prints how many images it checked (straight to stderr, so `cargo test` shows it
//! without `--nocapture`); a failure names the image, the workload seed and the command that
//! rebuilds and checks that one image from the recording it keeps under
//! `target/powerloss-failures/`. Skipped, with the reason printed, where the machine cannot run
//! the suite (not root, no FUSE, no loop devices, a mkfs missing).

use powerloss::campaign::{self, Plan, Setup};
use powerloss::device::{self, Fs};
use std::io::Write;
use std::path::{Path, PathBuf};

const KINDS: [&str; 4] = ["sync", "async", "pipeline", "raft"];
const SEED: u64 = 1;

/// Written past the test harness's capture, so CI logs show it.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn suite(fs: Fs, plan: Plan) {
    if let Some(why) = device::unavailable(fs) {
        say(&format!("powerloss {fs}: SKIPPED, the suite cannot run here: {why}"));
        return;
    }
    let keep = root().join("target/powerloss-failures");
    let mut failures = Vec::new();
    let mut broken = Vec::new();
    let (mut images, mut required) = (0, 0);
    for kind in KINDS {
        let setup = Setup {
            fs,
            kind: kind.into(),
            seed: SEED,
            workload: PathBuf::from(env!("CARGO_BIN_EXE_powerloss-workload")),
            scratch: PathBuf::from(format!("/dev/shm/walpowerloss-ci-{fs}-{kind}-{}", std::process::id())),
            direct_marks: true,
            resume: false,
        };
        let result = campaign::campaign(&setup, &plan, &keep);
        assert!(!device::is_mounted(&setup.scratch.join("fuse")), "the recorder was left mounted");
        let _ = std::fs::remove_dir_all(&setup.scratch);
        match result {
            Ok((rec, s)) => {
                say(&format!("powerloss {}", campaign::report(&setup, &rec, &s)));
                assert!(
                    rec.acks() > 50 && rec.flushes() > 50,
                    "{kind}: the workload did too little to test anything"
                );
                images += s.images;
                required += s.required;
                failures.extend(s.failures.into_iter().map(|(_, f)| f));
            }
            Err(e) => broken.push(format!("{fs} {kind} seed {SEED}: {e}")),
        }
    }
    say(&format!(
        "powerloss {fs}: {images} images checked, {required} acknowledgements required, {} failed",
        failures.len()
    ));
    verdict(&failures, &broken);
}

/// Fails on any image that lost acknowledged data (the words `tools/mutants.sh` looks for),
/// then on anything that kept the suite from recording or checking.
fn verdict(failures: &[String], broken: &[String]) {
    assert!(
        failures.is_empty(),
        "{} images lost acknowledged data:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(broken.is_empty(), "the suite could not record or check:\n{}", broken.join("\n"));
}

#[test]
fn ext4_images_at_flush_points_and_between_keep_every_acknowledgement() {
    suite(Fs::Ext4, Plan { flush_points: Some(80), between: 40, seed: SEED });
}

#[test]
fn xfs_images_at_flush_points_and_between_keep_every_acknowledgement() {
    suite(Fs::Xfs, Plan { flush_points: Some(60), between: 15, seed: SEED });
}

/// A power loss during recovery: images of the `sync` workload's first run (between images late
/// in the run, where a torn tail, a half-made spare or a recycled file may be left, and a flush
/// point) are where a second run starts with `--resume`. Its open is the recovery and its writes
/// land on what recovery left; a second power loss is then simulated at that run's own flush
/// points and between them, and every image must honour the first run's acknowledgements (those
/// the starting image had to honour) and the second run's.
#[test]
fn ext4_a_second_power_loss_after_recovery_keeps_every_acknowledgement() {
    let fs = Fs::Ext4;
    if let Some(why) = device::unavailable(fs) {
        say(&format!("powerloss {fs} resumed: SKIPPED, the suite cannot run here: {why}"));
        return;
    }
    let keep = root().join("target/powerloss-failures");
    let scratch =
        |what: &str| PathBuf::from(format!("/dev/shm/walpowerloss-ci-resume-{what}-{}", std::process::id()));
    let first = Setup {
        fs,
        kind: "sync".into(),
        seed: SEED,
        workload: PathBuf::from(env!("CARGO_BIN_EXE_powerloss-workload")),
        scratch: scratch("first"),
        direct_marks: true,
        resume: false,
    };
    let recorded = campaign::record(&first).unwrap();
    let origins = campaign::resume_origins(&recorded.rec, 4, SEED);
    assert_eq!(
        origins.iter().filter(|o| o.subset.is_some()).count(),
        3,
        "too few busy windows late in the run"
    );
    let (mut failures, mut broken, mut images) = (Vec::new(), Vec::new(), 0);
    for (i, origin) in origins.into_iter().enumerate() {
        let second =
            Setup { seed: SEED + 100 + i as u64, resume: true, scratch: scratch("second"), ..first.clone() };
        let plan = Plan { flush_points: Some(25), between: 10, seed: SEED + i as u64 };
        match campaign::resumed(&first, &recorded, origin, &second, &plan, &keep) {
            Ok((rec, s)) => {
                say(&format!(
                    "powerloss {fs} sync resumed on the first run's {origin} ({} of its acknowledgements required): {}",
                    rec.prior.len(),
                    campaign::report(&second, &rec, &s)
                ));
                assert!(rec.acks() > 50, "the resumed run did too little: {}", rec.acks());
                images += s.images;
                failures.extend(s.failures.into_iter().map(|(_, f)| f));
            }
            Err(e) => broken.push(e),
        }
        assert!(!device::is_mounted(&second.scratch.join("fuse")), "the recorder was left mounted");
        let _ = std::fs::remove_dir_all(&second.scratch);
    }
    assert!(!device::is_mounted(&first.scratch.join("fuse")), "the recorder was left mounted");
    let _ = std::fs::remove_dir_all(&first.scratch);
    say(&format!("powerloss {fs} resumed: {images} images checked, {} failed", failures.len()));
    verdict(&failures, &broken);
}

#[test]
fn the_readme_reports_the_committed_long_run() {
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("reliability/powerloss-summary.json")).unwrap(),
    )
    .unwrap();
    let readme = std::fs::read_to_string(root().join("powerloss/README.md")).unwrap();
    let start = readme.find("<!-- powerloss-summary -->").expect("the summary's start marker");
    let end = readme[start..].find("<!-- /powerloss-summary -->").expect("its end marker") + start;
    let section = &readme[start..end];
    assert!(json["every_flush_point"].as_bool().unwrap(), "the committed summary is of the long mode");
    let command = json["command"].as_str().unwrap();
    assert!(section.contains(&format!("powerloss -- {command}")), "the README names the command `{command}`");
    let runs = json["runs"].as_array().unwrap();
    assert!(runs.len() >= 8, "every workload on ext4 and xfs");
    for fs in ["ext4", "xfs"] {
        for kind in KINDS {
            assert!(runs.iter().any(|r| r["fs"] == fs && r["kind"] == kind), "no {fs} {kind} run");
        }
    }
    let n =
        |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} is not a count in {r}"));
    for r in runs {
        let line = format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["fs"].as_str().unwrap(),
            r["kind"].as_str().unwrap(),
            n(r, "flushes"),
            n(r, "acknowledgements"),
            n(r, "images"),
            n(r, "between_images"),
            n(r, "repaired_by_fsck"),
            n(r, "acknowledgements_required"),
            n(r, "losses")
        );
        assert!(section.contains(&line), "the README's table lacks `{line}`");
        assert_eq!(n(r, "losses"), 0, "a committed long run with losses: {r}");
        assert_eq!(
            n(r, "images"),
            n(r, "flushes") + 1 + n(r, "between_images"),
            "every flush point checked: {r}"
        );
    }
    // The sentence above the table: its totals, the commit, where each resumed run started.
    assert_eq!(json["uncommitted_changes"], false, "the committed long run was of a committed tree");
    // Counts compared without their thousands separators.
    let text = section.split_whitespace().collect::<Vec<_>>().join(" ").replace(',', "");
    let total = |k: &str, fs: Option<&str>| -> u64 {
        runs.iter().filter(|r| fs.is_none_or(|fs| r["fs"] == fs)).map(|r| n(r, k)).sum()
    };
    let commit = json["commit"].as_str().unwrap();
    let mut want = vec![
        format!("at commit `{commit}`"),
        format!(
            "{} images {} acknowledgements required",
            total("images", None),
            total("acknowledgements_required", None)
        ),
        format!("{} lost", total("losses", None)),
        format!("{} ext4 images had the superblock's block torn", total("repaired_by_fsck", Some("ext4"))),
    ];
    for r in runs.iter().filter(|r| r["kind"] == "sync-resumed") {
        want.push(format!("{} {}", r["fs"].as_str().unwrap(), r["origin"].as_str().unwrap()));
    }
    for w in want {
        assert!(text.contains(&w), "the README's summary lacks `{w}`");
    }
}
