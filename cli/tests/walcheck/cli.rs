//! The walcheck binary on real logs: verdicts and exit codes, JSON, repair, a live log, a closed
//! pipe and usage errors.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use wal::format::segment_file_name;
use wal::{Epoch, Options, Wal};

const SEG: u32 = 64 * 1024;

fn walcheck(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_walcheck")).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

/// 200 durable entries over several segments, closed cleanly.
fn clean_log(dir: &Path) {
    let (mut log, _) = Wal::open(dir, opts()).unwrap();
    for i in 0..200u32 {
        log.append(Epoch(0), format!("entry {i} {}", "x".repeat(300)).as_bytes()).unwrap();
        if i % 5 == 4 {
            log.sync().unwrap();
        }
    }
    log.close().unwrap();
}

/// A log whose last, unsynced batch lost a sector; returns where that batch starts.
fn torn_log(dir: &Path) -> u64 {
    let (mut log, _) = Wal::open(dir, opts()).unwrap();
    for i in 0..20u32 {
        log.append(Epoch(0), &[i as u8; 100]).unwrap();
    }
    log.sync().unwrap();
    let st = wal::storage::FileStorage::new(dir, false).unwrap();
    let start = wal::scan_log(&st, true).unwrap().segments[0].data_end.next_multiple_of(512);
    for i in 0..10u32 {
        log.append(Epoch(0), &[0xa0 + i as u8; 300]).unwrap();
    }
    log.flush().unwrap();
    log.abandon();
    let path = dir.join(segment_file_name(1));
    let mut b = std::fs::read(&path).unwrap();
    b[start as usize + 512..start as usize + 1024].fill(0);
    std::fs::write(&path, b).unwrap();
    start
}

fn flip(dir: &Path, seg: u64, at: usize) {
    let path = dir.join(segment_file_name(seg));
    let mut b = std::fs::read(&path).unwrap();
    b[at] ^= 0x20;
    std::fs::write(&path, b).unwrap();
}

#[test]
fn clean_log_is_ok_and_state_not_checked() {
    let d = tempfile::tempdir().unwrap();
    clean_log(d.path());
    let (code, out, _) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("CRC OK") && out.contains("STATE NOT_CHECKED"), "{out}");
    assert!(!out.contains("CLEAN"), "CLEAN must never be printed for a check that did not replay: {out}");
    let (code, out, _) = walcheck(&["verify", "--quick", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("quick"), "{out}");
    let (code, out, _) = walcheck(&["stat", d.path().to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("200 entries"), "{out}");
}

#[test]
fn json_report_names_verdicts_and_location() {
    let d = tempfile::tempdir().unwrap();
    clean_log(d.path());
    flip(d.path(), 1, 700);
    let (code, out, _) = walcheck(&["verify", "--json", d.path().to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["crc"], "CORRUPT");
    assert_eq!(v["state"], "NOT_CHECKED");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["damage"]["segment"], 1);
    assert!(v["damage"]["offset"].as_u64().unwrap() <= 700);
}

#[test]
fn torn_tail_exits_1_and_repair_cuts_it_after_a_backup() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("log");
    let start = torn_log(&dir);
    let p = dir.to_str().unwrap();
    let (code, out, _) = walcheck(&["verify", p]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("TORN_TAIL"), "{out}");
    let (code, out, _) = walcheck(&["repair", "--dry-run", p]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("offset {start}")) && out.contains("nothing changed"), "{out}");
    let backup = d.path().join("bk");
    let (code, out, err) = walcheck(&["repair", "--backup", backup.to_str().unwrap(), p]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("after repair: CRC OK"), "{out}");
    assert!(backup.join(segment_file_name(1)).exists());
    // The backup holds the torn bytes, the log the cut ones.
    assert_eq!(walcheck(&["verify", backup.to_str().unwrap()]).0, 1, "the backup keeps the torn bytes");
    let (log, rep) = Wal::open(&dir, opts()).unwrap();
    assert_eq!(rep.verdict, wal::CrcVerdict::Ok);
    assert_eq!(log.replay().unwrap().collect_entries().unwrap().len(), 20);
}

#[test]
fn corrupt_data_needs_lossy_to_be_cut() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("log");
    clean_log(&dir);
    flip(&dir, 2, 5000);
    let p = dir.to_str().unwrap();
    let (code, out, _) = walcheck(&["repair", p]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("refusing"), "{out}");
    let (code, out, err) =
        walcheck(&["repair", "--lossy", "--backup", d.path().join("bk").to_str().unwrap(), p]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("LOST"), "{out}");
    let (log, _) = Wal::open(&dir, opts()).unwrap();
    let n = log.replay().unwrap().collect_entries().unwrap().len();
    assert!(n > 0 && n < 200, "{n}");
}

#[test]
fn a_live_log_is_reported_live_not_torn() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(d.path(), opts()).unwrap();
    log.append(Epoch(0), b"a").unwrap();
    log.sync().unwrap();
    log.append(Epoch(0), b"being written").unwrap();
    log.flush().unwrap();
    let (code, out, _) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("live"), "{out}");
    let (code, _, err) = walcheck(&["repair", d.path().to_str().unwrap()]);
    assert_eq!(code, 5, "repair must refuse a live log: {err}");
    drop(log);
}

#[test]
fn a_closed_pipe_keeps_the_verdict_exit_code() {
    let d = tempfile::tempdir().unwrap();
    clean_log(d.path());
    flip(d.path(), 2, 3000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_walcheck"))
        .args(["dump", d.path().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    drop(child.stdout.take()); // the reader goes away
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "a closed pipe must not turn CORRUPT into {status}");
}

#[test]
fn usage_errors_exit_64() {
    assert_eq!(walcheck(&["verify"]).0, 64);
    assert_eq!(walcheck(&["frobnicate"]).0, 64);
    assert_eq!(walcheck(&["verify", "/definitely/not/here"]).0, 64);
    assert_eq!(walcheck(&["--help"]).0, 0);
}

#[test]
fn a_directory_without_a_log_is_a_usage_error() {
    // Not a disk error: monitoring reads 5 as one (issue 22).
    let d = tempfile::tempdir().unwrap();
    let (code, out, err) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(!out.contains("IO_ERROR") && out.contains("NO_LOG"), "{out}");
}
