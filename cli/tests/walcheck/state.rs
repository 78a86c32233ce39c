//! walcheck part 2 end to end: logs written by the real pipeline with the reference catalog,
//! then `walcheck verify` (CLEAN, DIVERGENT, UNSUPPORTED_VERSION, --state, --base) and
//! `walcheck compare`.

use catalog::test_support::lake_command;
use catalog::{Catalog, Command, EntityId, EntityKind};
use std::ffi::OsString;
use std::path::Path;
use wal::{Epoch, Lsn, Options, Wal};
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};

fn write_log(dir: &Path, n: u64, snapshot_at: Option<u64>) -> Option<String> {
    let opts =
        PipelineOptions { checkpoint_every_entries: 10, purge_after_snapshot: false, ..Default::default() };
    let (p, _) = Pipeline::open(dir, opts, Hooks::default(), Catalog::new).unwrap();
    let mut snap = None;
    for i in 0..n {
        let cmd = lake_command(i, format!("c{i}"), vec![7; 100]);
        p.submit(&cmd.encode(), None).unwrap().wait().unwrap();
        if Some(i + 1) == snapshot_at {
            snap = Some(p.snapshot().unwrap());
        }
    }
    p.close().unwrap();
    snap
}

fn walcheck(args: &[&str], dir: &Path) -> i32 {
    let mut v: Vec<OsString> = vec!["walcheck".into(), args[0].into(), dir.as_os_str().to_owned()];
    v.extend(args[1..].iter().map(OsString::from));
    walcheck::run(v)
}

fn json(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let exe = env!("CARGO_BIN_EXE_walcheck");
    let out =
        std::process::Command::new(exe).arg("verify").arg(dir).arg("--json").args(extra).output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn a_pipeline_log_is_clean_and_says_through_which_lsn() {
    let d = tempfile::tempdir().unwrap();
    write_log(d.path(), 35, None);
    assert_eq!(walcheck(&["verify"], d.path()), 0);
    let j = json(d.path(), &[]);
    assert_eq!(j["crc"], "OK");
    assert_eq!(j["state"], "CLEAN");
    let s = &j["state_detail"];
    assert_eq!(s["entries_replayed"], 35);
    assert_eq!(s["verified_through"], 35, "the close checkpoint covers the end: {s}");
    assert_eq!(s["unchecked_entries"], 0);
    // --quick never claims CLEAN.
    assert_eq!(walcheck(&["verify", "--quick"], d.path()), 0);
    let q = json(d.path(), &["--quick"]);
    assert_eq!(q["state"], "NOT_CHECKED");
}

/// Appends a checkpoint record to a closed log (as a controller with a bug would).
fn append_checkpoint(dir: &Path, lsn: u64, f: impl FnOnce(&mut wal::Checkpoint)) {
    let (mut log, _) = Wal::open(dir, Options::default()).unwrap();
    let mut replayer = wal_state::Replayer::new(wal_state::Applier::new(Catalog::new(), 1 << 20));
    replayer.run(&mut log.replay_from(None, wal::Durability::Durable).unwrap()).unwrap();
    let mut cp = replayer.applier().checkpoint();
    f(&mut cp);
    log.checkpoint(Epoch(0), Lsn(lsn), &cp).unwrap();
    log.close().unwrap();
}

#[test]
fn a_checkpoint_that_disagrees_is_divergent_with_its_window() {
    let d = tempfile::tempdir().unwrap();
    write_log(d.path(), 25, None);
    append_checkpoint(d.path(), 25, |cp| cp.digest[0] ^= 1);
    assert_eq!(walcheck(&["verify"], d.path()), 4);
    let j = json(d.path(), &[]);
    assert_eq!(j["state"], "DIVERGENT");
    assert_eq!(j["exit_code"], 4);
    let div = &j["state_detail"]["divergence"];
    assert_eq!(div["lsn"], 25);
    assert_eq!(div["last_good"], 25, "the close checkpoint at 25 agreed before the forged one: {div}");
}

#[test]
fn an_unknown_state_machine_version_is_unsupported() {
    let d = tempfile::tempdir().unwrap();
    write_log(d.path(), 12, None);
    append_checkpoint(d.path(), 12, |cp| cp.state_machine_version = 77);
    assert_eq!(walcheck(&["verify"], d.path()), 6);
    assert_eq!(json(d.path(), &[])["state"], "UNSUPPORTED_VERSION");
}

#[test]
fn state_snapshots_compare_and_name_the_first_differing_entity() {
    let d = tempfile::tempdir().unwrap();
    let snap = write_log(d.path(), 30, Some(20)).unwrap();
    let snap_path = d.path().join(&snap);
    let s = snap_path.to_str().unwrap();
    assert_eq!(walcheck(&["verify", "--state", s], d.path()), 0);
    let j = json(d.path(), &["--state", s]);
    assert_eq!(j["state_detail"]["state"]["matches"], true);
    // A state that differs: the snapshot of another log with one entity renamed.
    let other = tempfile::tempdir().unwrap();
    let opts = PipelineOptions { checkpoint_every_entries: 10, ..Default::default() };
    let (p, _) = Pipeline::open(other.path(), opts, Hooks::default(), Catalog::new).unwrap();
    // Same commands as write_log up to 20, except entity 7 is named differently.
    for i in 0..20u64 {
        let name = if i == 6 { "renamed".to_string() } else { format!("c{i}") };
        let cmd = lake_command(i, name, vec![7; 100]);
        p.submit(&cmd.encode(), None).unwrap().wait().unwrap();
    }
    let (applier_lsn, _) = p.applied();
    assert_eq!(applier_lsn, Some(Lsn(20)));
    let bad = p.snapshot().unwrap();
    p.close().unwrap();
    // It belongs to another log id, but --state compares states, not logs.
    let bad_path = other.path().join(bad);
    let j = json(d.path(), &["--state", bad_path.to_str().unwrap()]);
    assert_eq!(j["state"], "DIVERGENT", "{j}");
    let diffs = j["state_detail"]["state"]["differences"].as_array().unwrap().clone();
    assert!(diffs[0].as_str().unwrap().contains("entity 7"), "{diffs:?}");
}

#[test]
fn replicas_with_the_same_entries_agree_and_a_changed_one_does_not() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_log(a.path(), 15, None);
    write_log(b.path(), 15, None);
    let args: Vec<OsString> = vec!["walcheck".into(), "compare".into(), a.path().into(), b.path().into()];
    let code = walcheck::run(args);
    assert_eq!(code, 0);
    let c = tempfile::tempdir().unwrap();
    write_log(c.path(), 14, None);
    let (mut log, _) = Wal::open(c.path(), Options::default()).unwrap();
    let odd = Command::Create {
        parent: Some(EntityId(1)),
        kind: EntityKind::Catalog,
        name: "odd".into(),
        props: vec![],
    };
    log.append(Epoch(0), &wal_state::Envelope::encode(wal_state::EntryKind::Command, None, &odd.encode()))
        .unwrap();
    log.close().unwrap();
    let args: Vec<OsString> =
        vec!["walcheck".into(), "compare".into(), a.path().into(), c.path().into(), "--json".into()];
    let exe = env!("CARGO_BIN_EXE_walcheck");
    let out = std::process::Command::new(exe).args(&args[1..]).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["reason"].as_str().unwrap().contains("LSN 15"), "{j}");
}

/// `walcheck verify` replays from the CRC scan's own walk when that gives the same report as a
/// separate replay; this compares the two on every committed fixture and on logs that must
/// fall back (a cut, a dedupe window changed under applied entries, a torn tail), and checks
/// which path each took, so a one-pass path that silently never runs would fail here.
#[test]
fn one_pass_and_a_separate_replay_give_the_same_state_report() {
    use verifier::state::{check_state, StateOptions};
    use verifier::verify_with_state;
    let spec = walcheck::catalog_spec();
    let opts = StateOptions::default();
    // Whether the one-pass report was used, and whether the log allows it by its statistics
    // (undamaged, nothing cut or purged, something to replay).
    let compare = |dir: &Path| -> (bool, bool) {
        let one = verify_with_state(dir, false, &opts, &spec, &mut |_| {});
        let two = verifier::verify(dir, &verifier::VerifyOptions::default(), &mut |_| {});
        assert_eq!(one.crc, two.crc, "{}", dir.display());
        let st = &two.stats;
        let allows = two.crc == wal::CrcVerdict::Ok
            && st.truncations + st.resets == 0
            && st.floor_segment.is_none_or(|f| f <= 1)
            && st.entries + st.checkpoints > 0;
        let Some(one) = one.state else {
            assert!(two.io_error.is_some(), "{}: no state report", dir.display());
            return (false, allows);
        };
        let two = check_state(dir, two.crc, &opts, &spec);
        let strip = |mut v: serde_json::Value| {
            v.as_object_mut().unwrap().remove("single_pass");
            v
        };
        assert_eq!(strip(one.to_json()), strip(two.to_json()), "{}", dir.display());
        assert!(!two.single_pass);
        (one.single_pass, allows)
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs");
    let (mut checked, mut one_pass) = (0, 0);
    for e in std::fs::read_dir(&fixtures).unwrap() {
        let dir = e.unwrap().path();
        // Replica fixtures hold one log per node.
        let logs: Vec<_> = if dir.join("wal.meta").exists() {
            vec![dir.clone()]
        } else {
            std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.join("wal.meta").exists())
                .collect()
        };
        for log in logs {
            let (single, allows) = compare(&log);
            assert_eq!(single, allows, "{}: one pass {single}, allowed {allows}", log.display());
            checked += 1;
            one_pass += usize::from(single);
        }
    }
    assert!(checked >= 17 && one_pass >= 3, "{checked} logs, {one_pass} in one pass");

    // A cut: the truncated entries are in the scan's walk but not in the replay.
    let d = tempfile::tempdir().unwrap();
    write_log(d.path(), 20, None);
    let (mut log, _) = Wal::open(d.path(), Options::default()).unwrap();
    log.truncate_after(Epoch(0), Lsn(12)).unwrap();
    log.close().unwrap();
    assert_eq!(compare(d.path()), (false, false), "a log with a cut is replayed separately");

    // The dedupe window changed after entries were applied under the old one.
    let d = tempfile::tempdir().unwrap();
    write_log(d.path(), 12, None);
    let (mut log, _) = Wal::open(d.path(), Options::default()).unwrap();
    log.set_meta(wal_state::DEDUPE_WINDOW_META_KEY, &5u64.to_le_bytes()).unwrap();
    log.close().unwrap();
    assert!(!compare(d.path()).0, "a changed window is replayed separately");

    // A plain pipeline log is one pass.
    let d = tempfile::tempdir().unwrap();
    write_log(d.path(), 30, None);
    assert_eq!(compare(d.path()), (true, true));
}
