//! walcheck part 2 end to end: logs written by the real pipeline with the reference catalog,
//! then `walcheck verify` (CLEAN, DIVERGENT, UNSUPPORTED_VERSION, --state, --base) and
//! `walcheck compare`.

use catalog::{Catalog, Command, EntityId, EntityKind};
use std::ffi::OsString;
use std::path::Path;
use wal::pipeline::{Hooks, Pipeline, PipelineOptions};
use wal::{Epoch, Lsn, Options, Wal};

fn write_log(dir: &Path, n: u64, snapshot_at: Option<u64>) -> Option<String> {
    let opts =
        PipelineOptions { checkpoint_every_entries: 10, purge_after_snapshot: false, ..Default::default() };
    let (p, _) = Pipeline::open(dir, opts, Hooks::default(), Catalog::new).unwrap();
    let mut snap = None;
    for i in 0..n {
        let cmd = if i == 0 {
            Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] }
        } else {
            Command::Create {
                parent: Some(EntityId(1)),
                kind: EntityKind::Catalog,
                name: format!("c{i}"),
                props: vec![7; 100],
            }
        };
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
    let mut replayer = wal::state::Replayer::new(wal::state::Applier::new(Catalog::new(), 1 << 20));
    replayer.run(&mut log.replay_from(None, wal::Bound::Durable).unwrap()).unwrap();
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
        let cmd = if i == 0 {
            Command::Create { parent: None, kind: EntityKind::Metalake, name: "lake".into(), props: vec![] }
        } else {
            Command::Create {
                parent: Some(EntityId(1)),
                kind: EntityKind::Catalog,
                name,
                props: vec![7; 100],
            }
        };
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
    log.append(Epoch(0), &wal::state::Envelope::encode(wal::state::EntryKind::Command, None, &odd.encode()))
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
