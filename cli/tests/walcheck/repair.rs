//! `walcheck repair` as an adversary uses it (issue 22, "Repair must never destroy what it was
//! asked to protect"): backup paths that are the log, inside it, containing it or reached through
//! a symlink; backups that already exist; repairs run twice, at once, or beside a live writer;
//! a missing middle segment; a last segment shorter than its header says. Every case checks the
//! log's bytes: a refusal changes nothing, a repair's backup holds the bytes from before it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use wal::format::{segment_file_name, LOCK_FILE_NAME};
use wal::{Epoch, Options, Wal};

const SEG: u32 = 64 * 1024;

/// The walcheck binary with `args`, started in `cwd`, its output piped.
fn start(cwd: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_walcheck"))
        .current_dir(cwd)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn walcheck_in(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let o = start(cwd, args).wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn walcheck(args: &[&str]) -> (i32, String, String) {
    walcheck_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A copy of the committed fixture `name` at `to`.
fn fixture_copy(name: &str, to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs").join(name);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A temporary directory holding a copy of the fixture `name` at `log`.
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    fixture_copy(name, &log);
    (d, log)
}

/// Every file of a directory (recursively) with its bytes; the lock file is not part of a log.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p.clone());
                m.insert(p.strip_prefix(dir).unwrap().to_path_buf(), b"<dir>".to_vec());
            } else if p.file_name().unwrap() != LOCK_FILE_NAME {
                m.insert(p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    m
}

/// The default backups made next to `log`.
fn default_backups(log: &Path) -> Vec<PathBuf> {
    let name = log.file_name().unwrap().to_str().unwrap().to_string();
    let mut v: Vec<PathBuf> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(&format!("{name}.walcheck-backup-")))
        .collect();
    v.sort();
    v
}

/// 200 entries (LSN 1..=200) over several segments, synced ten at a time and closed cleanly,
/// then one bit of segment 2 flipped: CORRUPT, cut only by a lossy repair.
fn corrupt_log(dir: &Path) {
    let (mut log, _) = Wal::open(dir, Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    let body = [b'y'; 300];
    for lsn in 1..=200u64 {
        let mut e = lsn.to_le_bytes().to_vec();
        e.extend_from_slice(&body);
        assert_eq!(log.append(Epoch(0), &e).unwrap().0, lsn);
        if lsn % 10 == 0 {
            log.sync().unwrap();
        }
    }
    log.close().unwrap();
    let path = dir.join(segment_file_name(2));
    let mut b = std::fs::read(&path).unwrap();
    b[5000] ^= 0x20;
    std::fs::write(&path, b).unwrap();
}

fn entries(dir: &Path) -> Vec<u64> {
    let (log, _) = Wal::open(dir, Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    log.replay().unwrap().collect_entries().unwrap().into_iter().map(|(l, _)| l).collect()
}

#[test]
fn backup_dot_from_inside_the_log_is_refused_and_nothing_changes() {
    let (_d, log) = copy_of("torn-tail");
    let before = snapshot(&log);
    let (code, out, err) = walcheck_in(&log, &["repair", "--backup", ".", "."]);
    assert_eq!(code, walcheck::EXIT_USAGE, "{out}{err}");
    assert!(err.contains("is the log directory"), "{err}");
    assert_eq!(snapshot(&log), before, "a refused repair changed the log");
    assert!(default_backups(&log).is_empty());
}

#[test]
fn plain_repair_from_inside_the_log_backs_up_outside_it() {
    let (_d, log) = copy_of("torn-tail");
    let before = snapshot(&log);
    let (code, out, err) = walcheck_in(&log, &["repair", "."]);
    assert_eq!(code, 0, "{out}{err}");
    let names: Vec<_> = before.keys().cloned().collect();
    let after: Vec<_> = snapshot(&log).keys().cloned().collect();
    assert_eq!(after, names, "the repair left something new inside the log: {out}");
    let backups = default_backups(&log);
    assert_eq!(backups.len(), 1, "{out}");
    let seg2 = PathBuf::from(segment_file_name(2));
    assert_eq!(
        std::fs::read(backups[0].join(&seg2)).unwrap(),
        before[&seg2],
        "the backup holds the torn bytes"
    );
}

#[test]
fn backup_inside_the_log_is_refused() {
    let (_d, log) = copy_of("torn-tail");
    let before = snapshot(&log);
    for bk in [log.join("bk"), log.join("a/b/c"), log.join("../log/bk")] {
        let (code, out, err) = walcheck(&["repair", "--backup", s(&bk), s(&log)]);
        assert_eq!(code, walcheck::EXIT_USAGE, "{}: {out}{err}", bk.display());
        assert!(err.contains("inside the log directory"), "{err}");
        assert_eq!(snapshot(&log), before, "{}", bk.display());
    }
}

#[test]
fn backup_that_contains_the_log_is_refused() {
    let (d, log) = copy_of("torn-tail");
    let before = snapshot(&log);
    let parent_before = snapshot(d.path());
    for bk in [d.path().to_path_buf(), log.join("..")] {
        let (code, out, err) = walcheck(&["repair", "--backup", s(&bk), s(&log)]);
        assert_eq!(code, walcheck::EXIT_USAGE, "{}: {out}{err}", bk.display());
        assert!(err.contains("contains the log directory"), "{err}");
    }
    assert_eq!(snapshot(&log), before);
    assert_eq!(snapshot(d.path()), parent_before, "files were copied next to the log");
}

#[test]
fn backup_through_a_symlink_into_the_log_is_refused() {
    let (d, log) = copy_of("torn-tail");
    std::fs::create_dir(log.join("sub")).unwrap();
    let before = snapshot(&log);
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&log, &link).unwrap();
    let sublink = d.path().join("sublink");
    std::os::unix::fs::symlink(log.join("sub"), &sublink).unwrap();
    let dangling = d.path().join("dangling");
    std::os::unix::fs::symlink(log.join("not-yet"), &dangling).unwrap();
    for bk in [link.clone(), link.join("bk"), sublink.join("bk"), dangling.clone(), dangling.join("bk")] {
        let (code, out, err) = walcheck(&["repair", "--backup", s(&bk), s(&log)]);
        assert_eq!(code, walcheck::EXIT_USAGE, "{}: {out}{err}", bk.display());
        assert_eq!(snapshot(&log), before, "{}", bk.display());
    }
    assert!(!log.join("not-yet").exists());
}

#[test]
fn an_existing_backup_is_never_overwritten() {
    let (d, log) = copy_of("torn-tail");
    let before = snapshot(&log);
    let bk = d.path().join("bk");
    std::fs::create_dir(&bk).unwrap();
    std::fs::write(bk.join(segment_file_name(2)), b"an older backup").unwrap();
    let (code, out, err) = walcheck(&["repair", "--backup", s(&bk), s(&log)]);
    assert_eq!(code, walcheck::EXIT_USAGE, "{out}{err}");
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read(bk.join(segment_file_name(2))).unwrap(), b"an older backup");
    assert_eq!(snapshot(&log), before);
}

#[test]
fn default_backups_in_the_same_second_are_two_backups() {
    let (d, log) = copy_of("torn-tail");
    let torn = snapshot(&log);
    // Directories named for this second and the next few, as an earlier repair would have left:
    // they hold an older backup that must stay as it is.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    for t in now..now + 5 {
        let old = d.path().join(format!("log.walcheck-backup-{t}"));
        std::fs::create_dir(&old).unwrap();
        std::fs::write(old.join("wal.meta"), b"older").unwrap();
    }
    let (code, out, err) = walcheck(&["repair", s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    for t in now..now + 5 {
        let old = d.path().join(format!("log.walcheck-backup-{t}"));
        assert_eq!(snapshot(&old).len(), 1, "an existing backup was written into: {out}");
    }
    // A second damaged copy repaired right away gets a backup of its own.
    let made: Vec<_> =
        default_backups(&log).into_iter().filter(|b| b.join(segment_file_name(2)).exists()).collect();
    assert_eq!(made.len(), 1, "{out}");
    for (p, b) in &torn {
        std::fs::write(log.join(p), b).unwrap();
    }
    let (code, out, err) = walcheck(&["repair", s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    let made: Vec<_> =
        default_backups(&log).into_iter().filter(|b| b.join(segment_file_name(2)).exists()).collect();
    assert_eq!(made.len(), 2, "{out}");
    for b in made {
        let seg2 = PathBuf::from(segment_file_name(2));
        assert_eq!(std::fs::read(b.join(&seg2)).unwrap(), torn[&seg2], "{}", b.display());
    }
}

#[test]
fn a_backup_that_cannot_be_created_changes_nothing() {
    let (d, log) = copy_of("torn-tail");
    let before = snapshot(&log);
    let file = d.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let (code, out, err) = walcheck(&["repair", "--backup", s(&file.join("bk")), s(&log)]);
    assert_eq!(code, verifier::report::EXIT_IO_ERROR, "{out}{err}");
    assert!(err.contains("nothing changed"), "{err}");
    assert_eq!(snapshot(&log), before);
    // A backup on a full device: /dev/full cannot hold a directory either.
    let (code, _, err) = walcheck(&["repair", "--backup", "/dev/full/bk", s(&log)]);
    assert_eq!(code, verifier::report::EXIT_IO_ERROR, "{err}");
    assert_eq!(snapshot(&log), before);
}

#[test]
fn a_directory_without_a_log_is_left_as_it_is() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("notes.txt"), b"not a log").unwrap();
    let (code, out, err) = walcheck(&["repair", s(d.path())]);
    assert_eq!(code, walcheck::EXIT_USAGE, "{out}{err}");
    assert!(!d.path().join(LOCK_FILE_NAME).exists(), "repair created a lock file in a directory with no log");
}

#[test]
fn repair_prints_the_full_verify_of_the_result_and_exits_with_it() {
    let (d, log) = copy_of("torn-tail");
    let (code, out, err) = walcheck(&["repair", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    let (vcode, vout, _) = walcheck(&["verify", s(&log)]);
    assert_eq!(vcode, 0);
    // The verify lines as `walcheck verify` prints them, the state verdict among them.
    let first = vout.lines().next().unwrap();
    assert!(first.contains("CRC OK  STATE CLEAN"), "{vout}");
    assert!(out.contains(first), "repair did not print the verify of its result:\n{out}");
}

#[test]
fn repair_twice_changes_nothing_the_second_time() {
    let (_d, log) = copy_of("missing-segment");
    let (code, out, err) = walcheck(&["repair", "--lossy", s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(default_backups(&log).len(), 1);
    let once = snapshot(&log);
    let (code, out, err) = walcheck(&["repair", "--lossy", s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing to repair"), "{out}");
    assert_eq!(snapshot(&log), once, "the second repair changed the log");
    assert_eq!(default_backups(&log).len(), 1, "the second repair made another backup");
}

#[test]
fn a_missing_middle_segment_is_cut_before_the_gap_only_with_lossy() {
    let (d, log) = copy_of("missing-segment");
    let before = snapshot(&log);
    let (code, out, err) = walcheck(&["repair", s(&log)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("segment 2 is missing") && out.contains("restore"), "{out}");
    assert_eq!(snapshot(&log), before);
    // What segment 1 ends with (LSN 1..27) is what a cut before the gap keeps.
    let (_, dump, _) = walcheck(&["dump", "--json", s(&log)]);
    let last_kept = dump
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["segment"] == 1 && v["kind"] == "entry")
        .map(|v| v["lsn"].as_u64().unwrap())
        .max()
        .unwrap();
    let (code, out, err) = walcheck(&["repair", "--lossy", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("CRC OK"), "{out}");
    assert!(out.contains(&format!("LSN {}..", last_kept + 1)), "the repair must name what it drops: {out}");
    assert!(!log.join(segment_file_name(3)).exists());
    assert_eq!(*entries(&log).last().unwrap(), last_kept);
    assert_eq!(walcheck(&["verify", s(&log)]).0, 0);
    // A writer opens the result and goes on from the end of segment 1.
    let (mut w, rep) = Wal::open(&log, Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    assert_eq!(rep.verdict, wal::CrcVerdict::Ok);
    let e = w.epoch();
    assert_eq!(w.append(e, b"after the repair").unwrap().0, last_kept + 1);
    w.sync().unwrap();
    w.close().unwrap();
    // (Its entry is no catalog command, so only the CRC verdict is the point.)
    assert_eq!(walcheck(&["verify", "--quick", s(&log)]).0, 0);
    assert_eq!(entries(&log).len() as u64, last_kept + 1);
    // The backup holds the removed segment as it was.
    let seg3 = PathBuf::from(segment_file_name(3));
    assert_eq!(std::fs::read(d.path().join("bk").join(&seg3)).unwrap(), before[&seg3]);
}

#[test]
fn a_lossy_repair_names_exactly_the_lsns_it_drops() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    corrupt_log(&log);
    let (code, out, err) = walcheck(&["repair", "--lossy", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_eq!(code, 0, "{out}{err}");
    let kept = entries(&log);
    let n = kept.len() as u64;
    assert!(n > 0 && n < 200, "{n}");
    assert_eq!(kept, (1..=n).collect::<Vec<_>>());
    let said = format!("LSN {}..200 ({} entries)", n + 1, 200 - n);
    assert!(out.contains(&said), "expected {said:?} in:\n{out}");
}

#[test]
fn a_last_segment_shorter_than_its_header_is_not_cut_without_lossy() {
    // A crash never shortens a preallocated segment: whatever the scan calls it, a repair
    // without --lossy must not cut it (the entries it holds may be acknowledged).
    let (d, log) = copy_of("torn-tail");
    let f = std::fs::OpenOptions::new().write(true).open(log.join(segment_file_name(2))).unwrap();
    f.set_len(4096).unwrap();
    drop(f);
    let before = snapshot(&log);
    let (code, out, err) = walcheck(&["repair", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(out.contains("refusing"), "{out}{err}");
    assert_eq!(snapshot(&log), before, "a non-lossy repair cut a segment no crash could have shortened");
    assert!(!d.path().join("bk").exists());
}

#[test]
fn a_header_length_that_differs_from_the_file_is_not_cut_without_lossy() {
    let (d, log) = copy_of("torn-tail");
    let path = log.join(segment_file_name(2));
    let mut b = std::fs::read(&path).unwrap();
    let mut h = wal::format::SegmentHeader::self_valid(&b).unwrap();
    h.segment_len = (2 * SEG).into();
    h.header_crc = h.compute_crc().into();
    b[..wal::format::SEGMENT_HEADER_LEN].copy_from_slice(zerocopy::IntoBytes::as_bytes(&h));
    std::fs::write(&path, b).unwrap();
    let before = snapshot(&log);
    let (code, out, err) = walcheck(&["repair", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_ne!(code, 0, "{out}{err}");
    assert_eq!(snapshot(&log), before, "{out}");
}

#[test]
fn a_live_writer_keeps_the_log_from_being_repaired() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    corrupt_log(&log);
    // The writer's lock, as a writer takes it (the open itself refuses a CORRUPT log).
    let st = wal::storage::FileStorage::new(&log, false).unwrap();
    let lock = wal::storage::Writer::lock_exclusive(&st).unwrap();
    let before = snapshot(&log);
    let (code, out, err) = walcheck(&["repair", "--lossy", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_eq!(code, verifier::report::EXIT_IO_ERROR, "{out}{err}");
    assert_eq!(snapshot(&log), before);
    assert!(!d.path().join("bk").exists(), "a refused repair made a backup");
    drop(lock);
}

#[test]
fn a_reader_keeps_the_log_from_being_cut() {
    // A salvage reader (shared lock, segments mapped) of a CORRUPT_TAIL log: a lossy repair
    // would zero bytes under its map. The repair takes the lock as a writer does: refused.
    let (d, log) = copy_of("corrupt-tail");
    let before = snapshot(&log);
    let salvage =
        Options { segment_len_bytes: SEG, recovery: wal::RecoveryMode::Salvage, ..Options::default() };
    let (reader, _) = Wal::open(&log, salvage).unwrap();
    let (code, out, err) = walcheck(&["repair", "--lossy", "--backup", s(&d.path().join("bk")), s(&log)]);
    assert_eq!(code, verifier::report::EXIT_IO_ERROR, "{out}{err}");
    assert!(err.contains("lock is held"), "{err}");
    assert_eq!(snapshot(&log), before);
    assert!(!d.path().join("bk").exists(), "a refused repair made a backup");
    drop(reader);
}

#[test]
fn two_repairs_at_once_cut_once() {
    // Each round: two processes repair the same copy of a lossy-damaged log at the same moment.
    // Exactly one cuts; the other is refused (the lock is held) or finds nothing to do.
    for round in 0..4 {
        let (d, log) = copy_of("corrupt-tail");
        let spawn =
            |bk: &str| start(d.path(), &["repair", "--lossy", "--backup", s(&d.path().join(bk)), s(&log)]);
        let (a, b) = (spawn("bk-a"), spawn("bk-b"));
        let outs: Vec<_> = [a, b].into_iter().map(|c| c.wait_with_output().unwrap()).collect();
        let text = |o: &std::process::Output| {
            format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
        };
        let cuts = outs.iter().filter(|o| text(o).contains("\ncut ")).count();
        assert_eq!(cuts, 1, "round {round}: {}\n----\n{}", text(&outs[0]), text(&outs[1]));
        let backups = ["bk-a", "bk-b"].iter().filter(|b| d.path().join(b).exists()).count();
        assert_eq!(backups, 1, "round {round}: only the repair that cuts makes a backup");
        assert_eq!(walcheck(&["verify", s(&log)]).0, 0, "round {round}");
    }
}

#[test]
fn a_writer_that_opens_during_a_repair_loses_nothing() {
    // A writer races a repair of a torn tail: whichever goes first, every entry the writer
    // acknowledged (appended and synced) is in the log afterwards.
    for round in 0..4 {
        let (d, log) = copy_of("torn-tail");
        let child = start(d.path(), &["repair", "--backup", s(&d.path().join("bk")), s(&log)]);
        let mut acked = Vec::new();
        for _ in 0..200 {
            if let Ok((mut w, _)) = Wal::open(&log, Options { segment_len_bytes: SEG, ..Options::default() })
            {
                let e = w.epoch();
                for i in 0..5u8 {
                    acked.push(w.append(e, &[0xc0 + i; 700]).unwrap().0);
                }
                w.sync().unwrap();
                w.close().unwrap();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        child.wait_with_output().unwrap();
        let live = entries(&log);
        for l in &acked {
            assert!(live.contains(l), "round {round}: acknowledged LSN {l} lost; live {live:?}");
        }
    }
}

/// A log whose entries 1..=60 were acknowledged (synced) over two segments, then a last batch
/// of 8 entries written but never synced (the writer abandoned): returns the acknowledged LSNs.
fn crashed_log(dir: &Path) -> Vec<u64> {
    let (mut log, _) = Wal::open(dir, Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    let mut acked = Vec::new();
    for i in 0..60u32 {
        acked.push(log.append(Epoch(0), &[0x41 + (i % 26) as u8; 1500]).unwrap().0);
        if i % 4 == 3 {
            log.sync().unwrap();
        }
    }
    for i in 0..8u8 {
        log.append(Epoch(0), &[0x61 + i; 700]).unwrap();
    }
    log.flush().unwrap();
    log.abandon();
    acked
}

#[test]
fn a_repair_without_lossy_never_removes_an_acknowledged_entry() {
    // Every sector of the last segment up to past its data, damaged three ways (zeroed, one
    // byte flipped, the file cut there): a repair without --lossy either refuses and changes
    // nothing, or leaves a log that holds every acknowledged entry.
    let d = tempfile::tempdir().unwrap();
    let orig = d.path().join("orig");
    let acked = crashed_log(&orig);
    let last = *wal::scan_log(&wal::storage::FileStorage::new(&orig, false).unwrap(), true)
        .unwrap()
        .segments
        .iter()
        .map(|s| &s.seq)
        .max()
        .unwrap();
    assert!(last > 1, "the log must span segments");
    let name = segment_file_name(last);
    let seg = std::fs::read(orig.join(&name)).unwrap();
    let used = seg.len() - seg.iter().rev().take_while(|&&b| b == 0).count();
    let salvage =
        Options { segment_len_bytes: SEG, recovery: wal::RecoveryMode::Salvage, ..Options::default() };
    let mut cuts = 0;
    for sector in 0..(used / 512 + 2) {
        for how in ["zero", "flip", "truncate"] {
            let log = d.path().join(format!("{how}-{sector}"));
            std::fs::create_dir(&log).unwrap();
            for e in std::fs::read_dir(&orig).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), log.join(e.file_name())).unwrap();
            }
            let mut b = seg.clone();
            let at = sector * 512;
            match how {
                "zero" => b[at..at + 512].fill(0),
                "flip" => b[at + 200] ^= 0x10,
                _ => b.truncate(at.max(512)),
            }
            std::fs::write(log.join(&name), &b).unwrap();
            let before = snapshot(&log);
            let bk = d.path().join(format!("bk-{how}-{sector}"));
            let (code, out, err) = walcheck(&["repair", "--backup", s(&bk), s(&log)]);
            if !bk.exists() {
                assert_eq!(
                    snapshot(&log),
                    before,
                    "{how} at sector {sector}: a repair that made no backup changed the log: {out}{err}"
                );
                continue;
            }
            cuts += 1;
            assert_eq!(code, 0, "{how} at sector {sector}: the repaired log does not verify: {out}{err}");
            let (r, _) = Wal::open(&log, salvage.clone()).unwrap();
            let live: Vec<u64> =
                r.replay().unwrap().collect_entries().unwrap().into_iter().map(|(l, _)| l).collect();
            let lost: Vec<u64> = acked.iter().copied().filter(|l| !live.contains(l)).collect();
            assert!(
                lost.is_empty(),
                "{how} at sector {sector}: acknowledged LSNs {lost:?} cut without --lossy: {out}"
            );
        }
    }
    assert!(cuts > 0, "no variant was a torn tail that repair cut");
}
