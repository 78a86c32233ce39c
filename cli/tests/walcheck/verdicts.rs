//! Verdicts that say what was checked (issue 22): CLEAN only after a checkpoint was compared,
//! the checkpoints that could not be compared and the entries no checkpoint covers named in the
//! text, files named on the command line that cannot be used, replicas with nothing to compare,
//! and directories that hold no log or only an interrupted creation.

use crate::common::{fixture, walcheck};
use catalog::{Catalog, Command, EntityKind};
use std::path::Path;
use wal::{Epoch, Lsn, Options, Wal};
use wal_state::{Applier, EntryKind, Envelope};

/// A create of a metalake through the apply seam, with this request id.
fn create_with(name: &str, request: Option<u64>) -> Vec<u8> {
    let cmd = Command::Create { parent: None, kind: EntityKind::Metalake, name: name.into(), props: vec![] };
    Envelope::encode(EntryKind::Command, request, &cmd.encode())
}

fn create(name: &str) -> Vec<u8> {
    create_with(name, None)
}

/// `n` entries of the apply seam written with the engine alone (no checkpoint), closed.
fn seam_log(dir: &Path, n: u64) {
    let (mut log, _) = Wal::open(dir, Options { segment_len_bytes: 1 << 20, ..Options::default() }).unwrap();
    for i in 0..n {
        log.append(Epoch(0), &create(&format!("lake{i}"))).unwrap();
    }
    log.close().unwrap();
}

#[test]
fn a_replay_without_a_checkpoint_is_not_checked_and_says_so() {
    let d = tempfile::tempdir().unwrap();
    seam_log(d.path(), 5);
    let (code, out, _) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("STATE NOT_CHECKED"), "no checkpoint compared is not CLEAN: {out}");
    assert!(!out.contains("CLEAN"), "{out}");
    assert!(out.contains("no checkpoint"), "{out}");
    // The entries that nothing cross-checked are named.
    assert!(out.contains("LSN 1..=5"), "{out}");
    // The empty fixture: nothing replayed, nothing compared.
    let (code, out, _) = walcheck(&["verify", &fixture("empty")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("STATE NOT_CHECKED"), "{out}");
}

#[test]
fn entries_after_the_last_checkpoint_are_named_in_the_text() {
    let d = tempfile::tempdir().unwrap();
    seam_log(d.path(), 3);
    // A checkpoint for LSN 2, then entries 4..=6 after it.
    let (mut log, _) = Wal::open(d.path(), Options::default()).unwrap();
    let mut a = Applier::new(Catalog::new(), 1 << 20);
    a.apply(Lsn(1), Epoch(0), &create("lake0")).unwrap();
    a.apply(Lsn(2), Epoch(0), &create("lake1")).unwrap();
    log.checkpoint(Epoch(0), Lsn(2), &a.checkpoint()).unwrap();
    for i in 3..6 {
        log.append(Epoch(0), &create(&format!("lake{i}"))).unwrap();
    }
    log.close().unwrap();
    let (code, out, _) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("STATE CLEAN"), "{out}");
    assert!(out.contains("LSN 3..=6"), "entries 3..=6 are not cross-checked: {out}");
}

#[test]
fn a_checkpoint_too_far_behind_is_named_with_its_lsn() {
    let d = tempfile::tempdir().unwrap();
    let n = wal_state::CHECKPOINT_MAX_LAG + 10;
    let opts = Options { segment_len_bytes: 16 << 20, ..Options::default() };
    let (mut log, _) = Wal::open(d.path(), opts).unwrap();
    // One create, then retries of it (duplicates: cheap to apply, each one an entry).
    let entry = create_with("lake", Some(1));
    let mut a = Applier::new(Catalog::new(), 1 << 20);
    a.apply(Lsn(1), Epoch(0), &entry).unwrap();
    let at_one = a.checkpoint();
    for _ in 0..n {
        log.append(Epoch(0), &entry).unwrap();
    }
    log.checkpoint(Epoch(0), Lsn(1), &at_one).unwrap();
    log.close().unwrap();
    let (code, out, _) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("STATE NOT_CHECKED"), "the only checkpoint was not compared: {out}");
    assert!(out.contains("checkpoint for LSN 1 not compared"), "{out}");
}

#[test]
fn an_unusable_base_or_state_file_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let log = fixture("purged-prefix");
    let junk = d.path().join("junk.snap");
    std::fs::write(&junk, b"not a snapshot").unwrap();
    let junk = junk.to_str().unwrap();
    let (code, out, err) = walcheck(&["verify", &log, "--base", junk]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(err.contains("junk.snap"), "{err}");
    let (code, out, err) = walcheck(&["verify", &fixture("clean"), "--state", junk]);
    assert_eq!(code, 64, "{out}{err}");
    // Another log's snapshot as the base of the replay.
    let other = format!("{}/snapshot-00000000000000000058.snap", fixture("divergent-snapshot"));
    let (code, out, err) = walcheck(&["verify", &log, "--base", &other]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(err.contains("another log"), "{err}");
}

#[test]
fn compare_with_a_replica_holding_no_entries_says_so() {
    let (code, out, err) = walcheck(&["compare", &fixture("clean"), &fixture("empty")]);
    assert_eq!(code, 8, "{out}{err}");
    assert!(out.contains("NOT_COMPARED") && out.contains("holds no entries"), "{out}");
    assert!(out.contains(&fixture("empty")), "the empty replica is named: {out}");
}

#[test]
fn an_interrupted_creation_and_a_directory_without_a_log() {
    let d = tempfile::tempdir().unwrap();
    let (code, out, err) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert_eq!(code, 64, "an empty directory holds no log: {out}{err}");
    assert!(err.contains("no log"), "{err}");
    // Creation writes a blank first segment before wal.meta: a crash in between.
    std::fs::write(d.path().join(wal::format::segment_file_name(1)), vec![0u8; 64 * 1024]).unwrap();
    for cmd in ["verify", "stat", "dump"] {
        let (code, out, err) = walcheck(&[cmd, d.path().to_str().unwrap()]);
        assert_eq!(code, 7, "{cmd}: {out}{err}");
        assert!(!out.contains("IO_ERROR") && !err.contains("IO_ERROR"), "{cmd}: {out}{err}");
    }
    let (_, out, _) = walcheck(&["verify", d.path().to_str().unwrap()]);
    assert!(out.contains("CRC INCOMPLETE_CREATE"), "{out}");
    assert!(out.contains("nothing was acknowledged"), "{out}");
    let (_, out, _) = walcheck(&["verify", "--json", d.path().to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["crc"], "INCOMPLETE_CREATE");
    assert_eq!(j["exit_code"], 7);
}

/// FORMAT.md section 3.1: a checkpoint record's LSN is below the next LSN where it stands (a
/// writer refuses anything else: `Wal::checkpoint`). One for the next LSN itself, which no
/// writer can produce, checks out but breaks that rule: CORRUPT, never a replay verdict.
#[test]
fn a_checkpoint_for_the_next_lsn_is_corrupt_not_divergent() {
    let d = tempfile::tempdir().unwrap();
    let opts = Options { segment_len_bytes: 64 * 1024, ..Options::default() };
    let (mut log, _) = Wal::open(d.path(), opts.clone()).unwrap();
    let mut a = Applier::new(Catalog::new(), 1 << 20);
    for i in 1..=3u64 {
        let e = create(&format!("lake{i}"));
        log.append(Epoch(0), &e).unwrap();
        a.apply(Lsn(i), Epoch(0), &e).unwrap();
    }
    log.sync().unwrap();
    log.checkpoint(Epoch(0), Lsn(3), &a.checkpoint()).unwrap();
    log.sync().unwrap();
    log.abandon();
    // Forge the checkpoint (the last record: nothing chains to it) to say LSN 4, both checksums
    // recomputed.
    let st = wal::storage::FileStorage::new(d.path(), false).unwrap();
    let mut at = None;
    wal::scan_log_with(&st, wal::Depth::Full, &mut |seg, r| {
        if r.kind == wal::format::Kind::Checkpoint {
            at = Some((seg, r.offset as usize, r.payload.len()));
        }
    })
    .unwrap();
    let (seg, off, len) = at.unwrap();
    let path = d.path().join(wal::format::segment_file_name(seg));
    let mut b = std::fs::read(&path).unwrap();
    b[off + 24..off + 32].copy_from_slice(&4u64.to_le_bytes());
    let header_crc = crc32c(&b[off + 8..off + 48]);
    b[off + 4..off + 8].copy_from_slice(&header_crc.to_le_bytes());
    let crc = crc32c(&b[off + 4..off + 48 + len]);
    b[off..off + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, b).unwrap();

    let (code, out, _) = walcheck(&["verify", "--json", d.path().to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["crc"], "CORRUPT", "{j}");
    assert_eq!(code, 3, "{j}");
    assert_eq!(j["damage"]["offset"], off as u64, "{j}");
    assert!(Wal::open(d.path(), opts).is_err(), "a writer refuses a CORRUPT log");
}

/// CRC-32C (Castagnoli, reflected, init and final xor 0xFFFFFFFF), bit by bit: the parameters
/// FORMAT.md gives, independently of the engine's implementation.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    !c
}

#[test]
fn crc32c_parameters_as_format_md_gives_them() {
    // The standard check value of CRC-32C, and a record checksum of a committed fixture.
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    let b = std::fs::read(format!("{}/{}", fixture("clean"), wal::format::segment_file_name(1))).unwrap();
    let stored = u32::from_le_bytes(b[60..64].try_into().unwrap());
    assert_eq!(crc32c(&b[..60]), stored, "the segment header's header_crc");
}

/// FORMAT.md section 10.3: a checkpoint below the next LSN that no live entry reaches (a Reset
/// moved the next LSN past it) passes the scan, and replay meets it before any entry it covers:
/// DIVERGENT, not CORRUPT.
#[test]
fn a_checkpoint_no_live_entry_reaches_is_divergent() {
    let d = tempfile::tempdir().unwrap();
    seam_log(d.path(), 3);
    let (mut log, _) = Wal::open(d.path(), Options::default()).unwrap();
    log.reset(Epoch(0), Lsn(10)).unwrap();
    let a = Applier::new(Catalog::new(), 1 << 20);
    log.checkpoint(Epoch(0), Lsn(5), &a.checkpoint()).unwrap();
    log.close().unwrap();
    let (code, out, _) = walcheck(&["verify", "--json", d.path().to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((j["crc"].as_str(), j["state"].as_str(), code), (Some("OK"), Some("DIVERGENT"), 4), "{j}");
    assert_eq!(j["state_detail"]["divergence"]["lsn"], 5, "{j}");
}
