//! Behaviour of the synchronous log on real files and in memory.

use std::sync::Arc;
use wal::{CrcVerdict, Durability, Epoch, Error, ItemKind, Lsn, Options, Wal};
use wal_sim::MemStorage;

const SEG: u32 = 64 * 1024;

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

fn open_mem(st: &MemStorage) -> Wal {
    Wal::open_with(Arc::new(st.clone()), opts()).unwrap().0
}

fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

#[test]
fn append_sync_close_reopen_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, rep) = Wal::open(dir.path(), opts()).unwrap();
    assert!(rep.created);
    let mut want = Vec::new();
    for i in 0..2000u64 {
        let p = payload(i, (i % 300) as usize + 1);
        let lsn = log.append(Epoch(0), &p).unwrap();
        want.push((lsn.0, p));
        if i % 7 == 0 {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
    assert!(log.segment_count() >= 3, "the test needs several segments, got {}", log.segment_count());
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), want);
    log.close().unwrap();
    let (log, rep) = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), want);
    // A replay is `for`-able: the same live entries, as owned pairs.
    let mut looped = Vec::new();
    for entry in log.replay().unwrap() {
        let (lsn, payload) = entry.unwrap();
        looped.push((lsn.0, payload));
    }
    assert_eq!(looped, want);
    // A full scan agrees.
    let st = wal::storage::FileStorage::new(dir.path(), false).unwrap();
    let scan = wal::scan_log(&st, true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok, "{:?}", scan.damage);
}

#[test]
fn abandoned_log_reopens_and_continues_in_its_segment() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    for i in 0..10 {
        log.append(Epoch(0), &payload(i, 10)).unwrap();
    }
    log.sync().unwrap();
    log.abandon();
    let mut log = open_mem(&st);
    assert_eq!(log.next_lsn(), Lsn(11));
    log.append(Epoch(0), b"more").unwrap();
    log.sync().unwrap();
    let e = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(e.len(), 11);
    assert_eq!(e[10], (11, b"more".to_vec()));
}

#[test]
fn truncation_cuts_on_replay_and_after_reopen() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    for i in 1..=400u64 {
        log.append(Epoch(0), &payload(i, 200)).unwrap();
    }
    log.sync().unwrap();
    log.truncate_after(Epoch(0), Lsn(150)).unwrap();
    log.append(Epoch(0), b"new 151").unwrap();
    log.append_at(Epoch(0), Lsn(151), b"newer 151").unwrap();
    log.append(Epoch(0), b"152").unwrap();
    log.sync().unwrap();
    let check = |log: &Wal| {
        let e = log.replay().unwrap().collect_entries().unwrap();
        assert_eq!(e.len(), 152);
        for (i, (lsn, p)) in e.iter().enumerate().take(150) {
            assert_eq!(*lsn, i as u64 + 1);
            assert_eq!(p, &payload(*lsn, 200));
        }
        assert_eq!(e[150], (151, b"newer 151".to_vec()));
        assert_eq!(e[151], (152, b"152".to_vec()));
    };
    check(&log);
    log.close().unwrap();
    let log = open_mem(&st);
    check(&log);
    assert_eq!(log.next_lsn(), Lsn(153));
}

#[test]
fn reset_and_append_at_start_a_log_elsewhere() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    log.append_at(Epoch(0), Lsn(1000), b"a").unwrap();
    log.append(Epoch(0), b"b").unwrap();
    assert!(matches!(log.append_at(Epoch(0), Lsn(5000), b"gap"), Err(Error::InvalidArgument(_))));
    log.reset(Epoch(0), Lsn(7)).unwrap();
    log.append(Epoch(0), b"c").unwrap();
    log.sync().unwrap();
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), vec![(7, b"c".to_vec())]);
    drop(log);
    let log = open_mem(&st);
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), vec![(7, b"c".to_vec())]);
}

#[test]
fn stale_and_future_epochs_are_rejected_and_consume_no_lsn() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    log.advance_epoch(Epoch(3)).unwrap();
    log.append(Epoch(3), b"x").unwrap();
    let e = log.append(Epoch(2), b"stale").unwrap_err();
    assert!(matches!(e, Error::StaleEpoch { current: 3, given: 2 }) && e.is_rejected());
    assert!(matches!(log.append(Epoch(4), b"f"), Err(Error::EpochNotAdvanced { .. })));
    assert!(matches!(log.advance_epoch(Epoch(3)), Err(Error::StaleEpoch { .. })));
    assert_eq!(log.next_lsn(), Lsn(2));
    log.close().unwrap();
    let mut log = open_mem(&st);
    assert_eq!(log.epoch(), Epoch(3));
    assert!(matches!(log.append(Epoch(1), b"stale"), Err(Error::StaleEpoch { .. })));
}

#[test]
fn metadata_survives_rotation_and_reopen() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    log.set_meta(1, b"vote=3").unwrap();
    for i in 0..1000 {
        log.append(Epoch(0), &payload(i, 200)).unwrap();
    }
    log.set_meta(2, b"committed=900").unwrap();
    log.sync().unwrap();
    assert!(log.segment_count() > 2);
    log.abandon();
    let log = open_mem(&st);
    assert_eq!(log.meta(1), Some(&b"vote=3"[..]));
    assert_eq!(log.meta(2), Some(&b"committed=900"[..]));
}

#[test]
fn purge_removes_whole_segments_below_the_floor() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    for i in 1..=2000u64 {
        log.append(Epoch(0), &payload(i, 100)).unwrap();
    }
    log.sync().unwrap();
    let before = log.segment_count();
    let r = log.purge_before(Lsn(1500)).unwrap();
    assert!(!r.segments_removed.is_empty());
    assert_eq!(log.segment_count(), before - r.segments_removed.len());
    let e = log.replay().unwrap().collect_entries().unwrap();
    assert!(e.first().unwrap().0 <= 1500);
    assert_eq!(e.last().unwrap().0, 2000);
    log.close().unwrap();
    let log = open_mem(&st);
    let e2 = log.replay().unwrap().collect_entries().unwrap();
    assert_eq!(e, e2);
}

#[test]
fn checkpoints_and_groups_replay_with_their_fields() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    let first = log.append_batch(Epoch(0), &[b"a", b"b", b"c"]).unwrap();
    let cp =
        wal::Checkpoint { digest: [9; 32], entity_count: 3, digest_version: 1, state_machine_version: 2 };
    log.checkpoint(Epoch(0), Lsn(first.0 + 2), &cp).unwrap();
    log.sync().unwrap();
    let mut r = log.replay_from(None, Durability::Durable).unwrap();
    let mut got = Vec::new();
    while let Some(i) = r.next() {
        let i = i.unwrap();
        got.push((i.kind, i.lsn.0, i.group_continues));
    }
    assert_eq!(
        got,
        vec![
            (ItemKind::Entry, 1, true),
            (ItemKind::Entry, 2, true),
            (ItemKind::Entry, 3, false),
            (ItemKind::Checkpoint(cp), 3, false)
        ]
    );
}

#[test]
fn seek_uses_the_index_and_returns_the_same_entries() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    for i in 1..=3000u64 {
        log.append(Epoch(0), &payload(i, 60)).unwrap();
        if i % 3 == 0 {
            log.flush().unwrap();
        }
    }
    log.sync().unwrap();
    for from in [1u64, 2, 777, 1500, 2999, 3000] {
        let e = log.replay_from(Some(Lsn(from)), Durability::Durable).unwrap().collect_entries().unwrap();
        assert_eq!(e.first().map(|x| x.0), Some(from));
        assert_eq!(e.len() as u64, 3001 - from);
    }
}

#[test]
fn durable_bound_hides_written_but_unsynced_entries() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    log.append(Epoch(0), b"a").unwrap();
    log.sync().unwrap();
    log.append(Epoch(0), b"b").unwrap();
    log.flush().unwrap();
    assert_eq!(log.replay_from(None, Durability::Durable).unwrap().collect_entries().unwrap().len(), 1);
    assert_eq!(log.replay_from(None, Durability::Written).unwrap().collect_entries().unwrap().len(), 2);
    assert_eq!(log.durable_lsn(), Some(Lsn(1)));
    assert_eq!(log.written_lsn(), Some(Lsn(2)));
}

#[test]
fn a_second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, _) = Wal::open(dir.path(), opts()).unwrap();
    assert!(matches!(Wal::open(dir.path(), opts()), Err(Error::Locked(_))));
}

#[test]
fn oversized_payloads_and_bad_options_are_rejected() {
    let st = MemStorage::new();
    let mut log = open_mem(&st);
    let max = log.max_payload_bytes() as usize;
    assert!(matches!(log.append(Epoch(0), &vec![1; max + 1]), Err(Error::TooLarge { .. })));
    log.append(Epoch(0), &vec![1; max]).unwrap();
    log.sync().unwrap();
    let bad = Options { segment_len_bytes: 1000, ..opts() };
    assert!(matches!(Wal::open_with(Arc::new(MemStorage::new()), bad), Err(Error::InvalidArgument(_))));
}

/// Regression: a log reopened with another segment size continues its unsealed segment at that
/// segment's own length (from its header), not the new option's; only new segments get the new size.
#[test]
fn reopening_with_another_segment_size_keeps_each_segments_own_length() {
    let st = MemStorage::new();
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts()).unwrap();
    for i in 0..50 {
        log.append(Epoch(0), &payload(i, 300)).unwrap();
    }
    log.sync().unwrap();
    log.abandon(); // the 64 KiB segment stays unsealed
    let bigger = Options { segment_len_bytes: 4 * SEG, ..opts() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), bigger.clone()).unwrap();
    for i in 50..600 {
        log.append(Epoch(0), &payload(i, 300)).unwrap();
    }
    log.close().unwrap();
    let scan = wal::scan_log(&st, true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok, "{:?}", scan.damage);
    assert_eq!(scan.segments[0].header.segment_len.get(), SEG);
    assert!(scan.segments.len() >= 2);
    assert_eq!(scan.segments[1].header.segment_len.get(), 4 * SEG);
    let (log, _) = Wal::open_with(Arc::new(st), bigger).unwrap();
    assert_eq!(log.replay().unwrap().collect_entries().unwrap().len(), 600);
}

/// Regression: `replay_from` an LSN in the first batch of a sealed segment seeked with the
/// footer's index to that batch and read its State record as damage (found by the fixture
/// generator: a pipeline could not reopen after a snapshot at a segment's end). Every start LSN
/// of a multi-segment log must replay exactly the entries from it on.
#[test]
fn replay_from_every_lsn_of_a_multi_segment_log_starts_there() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options { segment_len_bytes: 64 * 1024, ..Options::default() };
    let (mut log, _) = Wal::open(dir.path(), o.clone()).unwrap();
    for i in 0..400u64 {
        log.append(Epoch(0), &payload(i, 300)).unwrap();
        if i % 3 == 2 {
            log.sync().unwrap();
        }
    }
    log.close().unwrap();
    let (log, _) = Wal::open(dir.path(), Options { read_only: true, ..o }).unwrap();
    assert!(log.segment_count() >= 3, "the test needs sealed segments");
    let all = log.replay().unwrap().collect_entries().unwrap();
    for from in 1..=400u64 {
        let got = log.replay_from(Some(Lsn(from)), Durability::Durable).unwrap().collect_entries();
        let got = got.unwrap_or_else(|e| panic!("replay_from({from}): {e}"));
        assert_eq!(got.first().map(|e| e.0), Some(from));
        assert_eq!(got.len() as u64, 401 - from);
        assert_eq!(got[..], all[from as usize - 1..]);
    }
}

/// The top-level fields of a struct's `{:#?}` output, with their values as Debug prints them.
fn debug_fields(debug: &str) -> Vec<(String, String)> {
    debug
        .lines()
        .filter_map(|l| l.strip_prefix("    ").filter(|l| !l.starts_with(' ')))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.trim_end_matches(',').to_string()))
        .collect()
}

/// docs/configuration.md gives every option of `Options` and `AsyncOptions` with its default as
/// the code has it (a row `| `name` | `Debug of the default` | ...`, so a changed default or a
/// new option fails here until the page says so), and the disk a new one-entry log takes.
#[test]
fn the_configuration_page_gives_every_default_and_what_a_new_log_takes_on_disk() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    let section = |title: &str| {
        let start = page.find(title).unwrap_or_else(|| panic!("no {title} section"));
        let rest = &page[start..];
        rest[..rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3)].to_string()
    };
    for (title, debug) in [
        ("## `Options`", format!("{:#?}", Options::default())),
        ("## `AsyncOptions`", format!("{:#?}", wal::AsyncOptions::default())),
    ] {
        let text = section(title);
        let fields = debug_fields(&debug);
        assert!(fields.len() >= 8, "{debug}");
        for (name, value) in &fields {
            let row = format!("| `{name}` | `{value}` |");
            assert!(text.contains(&row), "{title} lacks the row starting `{row}`");
        }
        let rows = text.lines().filter(|l| l.starts_with("| `")).count();
        assert_eq!(rows, fields.len(), "{title}: a row for an option that does not exist");
    }
    // A new log with the defaults, one entry, closed: the active segment and the spare prepared
    // for the next rotation, each a whole segment of zeros.
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Wal::open(dir.path(), Options::default()).unwrap();
    log.append(Epoch(0), b"one").unwrap();
    log.sync().unwrap();
    log.close().unwrap();
    let bytes: u64 =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let said = format!("<!-- new-log-bytes -->{bytes} bytes");
    assert!(page.contains(&said), "docs/configuration.md should say `{said}`");
}
