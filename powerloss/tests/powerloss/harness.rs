//! The harness checked on its own, with a workload whose right answer is known
//! (`tests/data/files-workload.sh`: files written, fsynced, renamed, the directory fsynced, then
//! acknowledged): every image of the honest kind passes, and the liar (acknowledging before any
//! fsync) is caught. If the recorder missed flushes or logged writes out of order, or the images
//! kept what a power loss loses, the first would fail or the second would pass.
//!
//! Skipped, with the reason printed, where the machine cannot run the suite (not root, no FUSE,
//! no loop devices, no mkfs.ext4).

use powerloss::campaign::{self, Plan, Setup};
use powerloss::device::{self, Fs};
use powerloss::image;
use powerloss::recorder::Event;
use std::path::PathBuf;

fn setup(kind: &str, name: &str, direct_marks: bool) -> Option<Setup> {
    if let Some(why) = device::unavailable(Fs::Ext4) {
        println!("SKIPPED: the power-loss harness cannot run here: {why}");
        return None;
    }
    Some(Setup {
        fs: Fs::Ext4,
        kind: kind.into(),
        seed: 1,
        workload: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/files-workload.sh"),
        scratch: PathBuf::from(format!("/dev/shm/walpowerloss-harness-{name}-{}", std::process::id())),
        direct_marks,
        resume: false,
    })
}

#[test]
fn an_honest_workload_passes_every_image() {
    honest(false);
}

#[test]
fn an_honest_workload_writing_its_own_marks_passes_every_image() {
    honest(true);
}

/// Records the liar, checks every flush point, and requires a loss to be found.
fn caught_liar(
    name: &str,
    direct_marks: bool,
) -> Option<(Setup, campaign::Recorded, campaign::Summary, tempfile::TempDir)> {
    let setup = setup("liar", name, direct_marks)?;
    let keep = tempfile::tempdir().unwrap();
    let plan = Plan { flush_points: None, between: 0, seed: 3 };
    let (rec, summary) = campaign::campaign(&setup, &plan, keep.path()).unwrap();
    let _ = std::fs::remove_dir_all(&setup.scratch);
    assert_eq!(rec.acks(), 6, "every line became a mark");
    assert!(
        !summary.failures.is_empty(),
        "acknowledged-before-fsync files were never missing in {} images",
        summary.images
    );
    Some((setup, rec, summary, keep))
}

#[test]
fn a_liar_writing_its_own_marks_is_caught() {
    caught_liar("liar-marks", true);
}

fn honest(direct_marks: bool) {
    let name = if direct_marks { "honest-marks" } else { "honest" };
    let Some(setup) = setup("honest", name, direct_marks) else { return };
    let keep = tempfile::tempdir().unwrap();
    let plan = Plan { flush_points: None, between: 20, seed: 3 };
    let (rec, summary) = campaign::campaign(&setup, &plan, keep.path()).unwrap();
    let _ = std::fs::remove_dir_all(&setup.scratch);
    println!("honest: {} flushes, {} images, {} required", rec.flushes(), summary.images, summary.required);
    assert_eq!(rec.acks(), 6, "every acknowledgement is logged as a mark");
    assert!(
        rec.flushes() >= 12,
        "each ack needs at least the file's and the directory's flush: {}",
        rec.flushes()
    );
    assert!(summary.required > 0);
    assert!(summary.failures.is_empty(), "{:#?}", summary.failures);
    // The marks sit after the flushes that made them true: the last mark is after a flush.
    let last_mark = rec.rec.events.iter().rposition(|e| matches!(e, Event::Mark(_))).unwrap();
    assert!(rec.rec.events[..last_mark].contains(&Event::Flush));
}

#[test]
fn a_workload_that_acknowledges_before_fsync_is_caught() {
    let Some((setup, rec, summary, keep)) = caught_liar("liar", false) else { return };
    let (spec, why) = &summary.failures[0];
    assert!(why.contains("FAIL: f"), "{why}");
    assert!(why.contains("powerloss -- image --recording"), "a failure names its rebuild command: {why}");
    // The kept recording rebuilds the same image and finds the same loss.
    let dir = keep.path().join("ext4-liar-1");
    let (fs, kind, seed, again) = campaign::load(&dir).unwrap();
    assert_eq!((fs, kind.as_str(), seed), (Fs::Ext4, "liar", 1));
    assert_eq!(again.rec.events, rec.rec.events);
    let required = image::required(&again.rec, spec.window);
    let scratch = PathBuf::from(format!("/dev/shm/walpowerloss-harness-again-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let s2 = Setup { scratch: scratch.clone(), ..setup };
    let mut cursor =
        image::Cursor::new(&again.rec, &again.base, &scratch.join("work.img"), fs.torn_sector()).unwrap();
    let r = campaign::check_one(&s2, &mut cursor, *spec, &required);
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(r.is_err(), "the rebuilt image passed: {r:?}");
}

/// A setup that only names a recording to keep (no workload is run).
fn kept_only(fs: Fs, seed: u64) -> Setup {
    Setup {
        fs,
        kind: "sync".into(),
        seed,
        workload: PathBuf::new(),
        scratch: PathBuf::new(),
        direct_marks: false,
        resume: false,
    }
}

#[test]
fn a_kept_recording_reads_back_exactly() {
    let rec = powerloss::recorder::Recording {
        events: vec![
            Event::Write { offset: 4096, len: 3, at: 0 },
            Event::Flush,
            Event::Mark("ack 7 with spaces".into()),
            Event::Zero { offset: 0, len: 512 },
        ],
        data: vec![1, 2, 3],
    };
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("b.img");
    std::fs::write(&base, vec![0u8; 8192]).unwrap();
    let setup = kept_only(Fs::Xfs, 9);
    let recorded =
        campaign::Recorded { base, rec: rec.clone(), prior: vec!["ack 1 before".into()], origin: None };
    campaign::save(&setup, &recorded, &dir.path().join("kept")).unwrap();
    let (fs, kind, seed, back) = campaign::load(&dir.path().join("kept")).unwrap();
    assert_eq!((fs, kind.as_str(), seed), (Fs::Xfs, "sync", 9));
    assert_eq!(back.rec.events, rec.events);
    assert_eq!(back.rec.data, rec.data);
    assert_eq!(back.prior, ["ack 1 before"]);
    // A damaged file is an error naming the line, not a panic.
    std::fs::write(dir.path().join("kept/events.txt"), "fs ext4\nkind sync\nseed 1\nW 1 99 0\n").unwrap();
    let e = campaign::load(&dir.path().join("kept")).unwrap_err();
    assert!(e.contains("event line 4"), "{e}");
}

/// `powerloss image --scratch DIR` works in a directory of its own under DIR and removes only
/// that: a mistyped `--scratch` (a home, a log directory) loses nothing, and two runs at once do
/// not wipe each other's work.
#[test]
fn the_scratch_directory_named_is_never_wiped() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("keep"), b"the operator's file").unwrap();
    let rec = powerloss::recorder::Recording {
        events: vec![Event::Write { offset: 512, len: 3, at: 0 }, Event::Flush],
        data: vec![7, 8, 9],
    };
    let base = t.path().join("b.img");
    std::fs::write(&base, vec![0u8; 4096]).unwrap();
    let setup = kept_only(Fs::Ext4, 1);
    let kept = t.path().join("kept");
    campaign::save(&setup, &campaign::Recorded { base, rec, prior: Vec::new(), origin: None }, &kept)
        .unwrap();
    let out = t.path().join("one.img");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_powerloss"))
        .args(["image", "--window", "1", "--recording"])
        .arg(&kept)
        .arg("--scratch")
        .arg(t.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(std::fs::read(t.path().join("keep")).unwrap(), b"the operator's file");
    assert_eq!(&std::fs::read(&out).unwrap()[512..515], &[7, 8, 9], "the image holds the flushed write");
    let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(
        !left.iter().any(|n| n.to_string_lossy().starts_with("walpowerloss-")),
        "its own directory is gone: {left:?}"
    );
}
