//! What an open promises (issue 22): a writer never appends after an acknowledged record that
//! fails its checksum without reporting CORRUPT first, on every restart path, whether the open
//! took the damaged segment on its footer (sealed by a rotation, chained to by the next
//! segment) or on `wal.close` (a clean close). Each path is checked by the directory's bytes:
//! the same before the open and after the refused write and the handle's drop.

use crate::common::dir_bytes::dir_bytes;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use wal::{AsyncOptions, AsyncWal, CrcVerdict, Damage, Durability, Epoch, Error, OpenCheck, Options, Wal};
use wal_sim::workload::kv::Kv;
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};

const SEG: u32 = 64 * 1024;

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

/// A payload findable in the segment files by its number.
fn entry(i: u32) -> Vec<u8> {
    format!("entry {i:05} {}", "x".repeat(200)).into_bytes()
}

/// `n` entries, each batch of ten synced (acknowledged), then a clean close or a crash.
fn write_log(dir: &Path, n: u32, clean: bool) {
    let (mut log, _) = Wal::open(dir, opts()).unwrap();
    for i in 0..n {
        log.append(Epoch(0), &entry(i)).unwrap();
        if i % 10 == 9 {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
    if clean {
        log.close().unwrap();
    } else {
        log.abandon();
    }
}

fn segments(dir: &Path) -> Vec<u64> {
    let mut s: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| wal::format::parse_segment_file_name(e.unwrap().file_name().to_str()?))
        .collect();
    s.sort_unstable();
    s
}

/// Flips one bit in the payload of entry `i`; returns the segment that holds it.
fn flip_entry(dir: &Path, i: u32) -> u64 {
    let needle = format!("entry {i:05} ").into_bytes();
    for seq in segments(dir) {
        let path = dir.join(wal::format::segment_file_name(seq));
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + needle.len() + 50] ^= 0x10;
            std::fs::write(&path, &bytes).unwrap();
            return seq;
        }
    }
    panic!("entry {i} not found");
}

/// The damage is CORRUPT in segment `seq`, at an offset inside it and with an LSN.
fn assert_corrupt_in(d: &Damage, seq: u64) {
    assert_eq!(d.verdict, CrcVerdict::Corrupt, "{d}");
    assert_eq!(d.segment, seq, "{d}");
    assert!(d.offset > 0 && d.lsn > 0, "{d}");
}

fn damaged(r: wal::Result<impl std::fmt::Debug>, seq: u64) {
    match r {
        Err(Error::Damaged(d)) => assert_corrupt_in(&d, seq),
        other => panic!("expected CORRUPT in segment {seq}, got {other:?}"),
    }
}

/// The two ways an open takes a sealed segment without walking it.
#[derive(Clone, Copy, Debug)]
enum Trusted {
    /// Sealed by a rotation, the next segment's header chaining to its footer (then a crash).
    Footer,
    /// The last segment, sealed by a clean close and covered by `wal.close`.
    CloseFile,
}

/// A log whose trusted segment holds a flipped bit in an acknowledged entry: (its segment,
/// the directory's bytes).
fn damaged_log(dir: &Path, how: Trusted) -> (u64, BTreeMap<String, Vec<u8>>) {
    let seq = match how {
        Trusted::Footer => {
            write_log(dir, 700, false);
            assert!(segments(dir).len() >= 3, "{:?}", segments(dir));
            flip_entry(dir, 10)
        }
        Trusted::CloseFile => {
            write_log(dir, 100, true);
            assert!(dir.join(wal::format::CLOSE_FILE_NAME).exists());
            flip_entry(dir, 50)
        }
    };
    // The open does take the damaged segment on trust: a full scan finds the damage.
    let scan = wal::scan_log(&wal::storage::FileStorage::new(dir, false).unwrap(), true).unwrap();
    assert_corrupt_in(scan.damage.as_ref().expect("a full scan sees the flipped bit"), seq);
    (seq, dir_bytes(dir))
}

/// Runs `path` on a damaged log of each kind (with the damaged segment's number), then checks
/// that the directory is byte for byte what it was before.
fn on_each_damaged_log(path: impl Fn(&Path, u64, Trusted)) {
    for how in [Trusted::Footer, Trusted::CloseFile] {
        let dir = tempfile::tempdir().unwrap();
        let (seq, before) = damaged_log(dir.path(), how);
        path(dir.path(), seq, how);
        assert!(dir_bytes(dir.path()) == before, "{how:?}: the directory changed");
    }
}

#[test]
fn open_then_append_reports_corrupt_and_writes_nothing() {
    on_each_damaged_log(|dir, seq, how| {
        let (mut log, report) = Wal::open(dir, opts()).unwrap();
        assert_eq!(report.verdict, CrcVerdict::Ok, "{how:?}: the open itself is fast");
        damaged(log.append(Epoch(0), b"after the damage"), seq);
        // Every later write says the same, without walking again, and so does the close.
        damaged(log.append(Epoch(0), b"again"), seq);
        damaged(log.sync(), seq);
        damaged(log.close(), seq);
    });
}

#[test]
fn open_then_replay_then_append_reports_corrupt_and_writes_nothing() {
    on_each_damaged_log(|dir, seq, _| {
        let (mut log, _) = Wal::open(dir, opts()).unwrap();
        damaged(log.replay().unwrap().collect_entries(), seq);
        damaged(log.append(Epoch(0), b"after the damage"), seq);
        drop(log);
    });
}

/// A replay from a later LSN skips records: it does not stand for the check.
#[test]
fn a_replay_from_a_later_lsn_does_not_count_as_the_check() {
    on_each_damaged_log(|dir, seq, _| {
        let (mut log, _) = Wal::open(dir, opts()).unwrap();
        let last = log.written_lsn().unwrap();
        let tail = log.replay_from(Some(last), wal::Durability::Written).unwrap().collect_entries().unwrap();
        assert_eq!(tail.len(), 1);
        damaged(log.append(Epoch(0), b"after the damage"), seq);
        drop(log);
    });
}

/// A replay of the whole log re-checks every record: a write after it walks nothing again
/// (damage made after that replay is not looked for, which is what shows it).
#[test]
fn a_whole_replay_counts_as_the_check() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 700, false);
    let (mut log, _) = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!(log.replay().unwrap().collect_entries().unwrap().len(), 700);
    flip_entry(dir.path(), 10);
    let lsn = log.append(Epoch(0), b"checked by the replay").unwrap();
    log.sync().unwrap();
    assert_eq!(log.durable_lsn(), Some(lsn));
}

/// `OpenCheck::AtOpen` walks everything at the open and refuses there.
#[test]
fn open_check_at_open_refuses_at_the_open() {
    on_each_damaged_log(|dir, seq, _| {
        damaged(Wal::open(dir, Options { open_check: OpenCheck::AtOpen, ..opts() }), seq);
    });
}

/// `OpenCheck::TrustSealed` is the documented exception: it skips the check, and an append
/// lands after the damage.
#[test]
fn open_check_trust_sealed_skips_the_check() {
    let dir = tempfile::tempdir().unwrap();
    damaged_log(dir.path(), Trusted::CloseFile);
    let (mut log, _) =
        Wal::open(dir.path(), Options { open_check: OpenCheck::TrustSealed, ..opts() }).unwrap();
    log.append(Epoch(0), b"on trust").unwrap();
    log.close().unwrap();
}

#[test]
fn async_wal_reports_corrupt_before_any_write() {
    on_each_damaged_log(|dir, seq, how| {
        let (log, _) = Wal::open(dir, opts()).unwrap();
        match AsyncWal::start(log, AsyncOptions::default()) {
            Err(e) => damaged(Err::<(), _>(e), seq),
            Ok(a) => {
                let t = a.append(Epoch(0), b"after the damage".to_vec(), Durability::Durable).unwrap();
                let outcome = t.wait();
                let _ = a.close();
                panic!("{how:?}: the I/O thread took an append after the damage: {outcome:?}");
            }
        }
    });
}

/// A pipeline restarting from a snapshot replays only the entries after it: damage before the
/// snapshot, in a segment sealed by a rotation (entry 320) or in the one the clean close sealed
/// (entry 420; the newest snapshot is at 450, the last entry), is still found before the first
/// write.
#[test]
fn pipeline_open_from_a_snapshot_reports_corrupt_before_any_write() {
    for (victim, in_last) in [(320u32, false), (420, true)] {
        let dir = tempfile::tempdir().unwrap();
        let o = PipelineOptions {
            log: opts(),
            checkpoint_every_entries: 16,
            dedupe_window: 1000,
            snapshot_every_entries: Some(150),
            ..PipelineOptions::default()
        };
        let (p, _) = Pipeline::open(dir.path(), o.clone(), Hooks::default(), Kv::default).unwrap();
        for i in 0..450u32 {
            let body = format!("put k{} {}", i % 13, String::from_utf8(entry(i)).unwrap().replace(' ', "_"));
            let d = p.submit(body.as_bytes(), Some(u64::from(i) + 1)).unwrap();
            d.wait_timeout(Duration::from_secs(20)).expect("resolved").expect("committed");
        }
        p.close().unwrap();
        let needle = format!("entry_{victim:05}_").into_bytes();
        let mut seq = None;
        for s in segments(dir.path()) {
            let path = dir.path().join(wal::format::segment_file_name(s));
            let mut bytes = std::fs::read(&path).unwrap();
            if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
                bytes[at + needle.len() + 50] ^= 0x10;
                std::fs::write(&path, &bytes).unwrap();
                seq = Some(s);
                break;
            }
        }
        let seq = seq.expect("the entry is in the log");
        let last = wal::scan_log(&wal::storage::FileStorage::new(dir.path(), false).unwrap(), false)
            .unwrap()
            .segments
            .last()
            .map(|s| s.seq);
        assert_eq!(last == Some(seq), in_last, "entry {victim} in segment {seq}, the last is {last:?}");
        let before = dir_bytes(dir.path());
        match Pipeline::open(dir.path(), o, Hooks::default(), Kv::default) {
            Err(e) => damaged(Err::<(), _>(e), seq),
            Ok((p, report)) => {
                let from = report.snapshot.as_ref().and_then(|s| s.applied);
                let r = p
                    .submit(b"put after damage", Some(10_000))
                    .map(|d| d.wait_timeout(Duration::from_secs(20)));
                let _ = p.close();
                panic!("entry {victim}: the pipeline opened from {from:?} over the damage and took a command: {r:?}");
            }
        }
        assert!(dir_bytes(dir.path()) == before, "entry {victim}: the directory changed");
    }
}
