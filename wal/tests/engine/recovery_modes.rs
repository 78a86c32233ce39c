//! Open modes against damaged logs, I/O faults, and the format-stability hash.

use std::sync::Arc;
use wal::{CrcVerdict, Durability, Epoch, Error, Lsn, Options, RecoveryMode, Wal};
use wal_sim::{MemStorage, Rng, SectorFate};

const SEG: u32 = 64 * 1024;

fn opts(recovery: RecoveryMode) -> Options {
    Options { segment_len_bytes: SEG, recovery, ..Options::default() }
}

fn open(st: &MemStorage, recovery: RecoveryMode) -> wal::Result<(Wal, wal::OpenReport)> {
    Wal::open_with(Arc::new(st.clone()), opts(recovery))
}

fn entries(log: &Wal) -> Vec<(u64, Vec<u8>)> {
    log.replay_from(None, Durability::Written).unwrap().collect_entries().unwrap()
}

/// A log with 20 durable entries and then one more batch of 5 written but not synced.
fn log_with_unsynced_tail() -> (MemStorage, wal_sim::MemState) {
    let st = MemStorage::new();
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    for i in 0..20u8 {
        log.append(Epoch(0), &[i; 100]).unwrap();
    }
    log.sync().unwrap();
    for i in 0..5u8 {
        log.append(Epoch(0), &[0xa0 + i; 300]).unwrap();
    }
    log.flush().unwrap();
    let state = st.state();
    log.abandon();
    (st, state)
}

/// A salvage read ends where its replay ends: the records of a torn batch before the tear are
/// not part of the log (a writer cuts the batch), so neither its entries nor the next LSN they
/// would imply count. (Found by the long fault sweep: a salvage read after a purge said the log
/// went on to LSN 112 while its replay, like the snapshot, stopped at 110.)
#[test]
fn a_salvage_read_ends_where_its_replay_ends() {
    let st = MemStorage::new();
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    for i in 0..20u8 {
        log.append(Epoch(0), &[i; 100]).unwrap();
    }
    log.sync().unwrap();
    // One batch of ten small entries over two sectors; the crash keeps only the first sector.
    for i in 0..10u8 {
        log.append(Epoch(0), &[0xa0 + i; 60]).unwrap();
    }
    log.flush().unwrap();
    let state = st.state();
    log.abandon();
    let dirty = state.effective_dirty_sectors();
    assert!(dirty.len() >= 2, "{dirty:?}");
    let torn = state.crash(|n, s| if (n, s) == dirty[0] { SectorFate::New } else { SectorFate::Old });
    let scan = wal::scan_log(&torn, true).unwrap();
    let d = scan.damage.expect("a torn batch");
    assert!(d.lsn > 21, "the tear should follow whole records of the batch: {d}");
    let (log, _) = open(&torn, RecoveryMode::Salvage).unwrap();
    assert_eq!(entries(&log).len(), 20);
    assert_eq!(log.next_lsn(), Lsn(21), "the next LSN counts records of the torn batch");
    assert_eq!(log.written_lsn(), Some(Lsn(20)));
}

#[test]
fn torn_tail_is_refused_by_strict_cut_by_default_and_read_by_salvage() {
    let (_, state) = log_with_unsynced_tail();
    let dirty = state.effective_dirty_sectors();
    assert!(dirty.len() >= 3, "{dirty:?}");
    // Keep the first sector of the last batch, drop the second: a torn write.
    let torn = state.crash(|n, s| if (n, s) == dirty[0] { SectorFate::New } else { SectorFate::Old });
    assert_eq!(wal::scan_log(&torn, true).unwrap().verdict, CrcVerdict::TornTail);

    let before = torn.state();
    let Err(Error::Damaged(d)) = open(&torn, RecoveryMode::Strict) else {
        panic!("strict opened a torn log")
    };
    assert_eq!((d.verdict, d.segment), (CrcVerdict::TornTail, 1), "{d}");
    assert!((21..=25).contains(&d.lsn), "{d}");

    let (log, rep) = open(&torn, RecoveryMode::Salvage).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::TornTail);
    assert_eq!(entries(&log).len(), 20);
    drop(log);
    let after = torn.state();
    for name in before.file_names() {
        assert_eq!(before.file_bytes(&name), after.file_bytes(&name), "{name} changed by a read-only open");
    }

    let (mut log, rep) = open(&torn, RecoveryMode::TruncateTornTail).unwrap();
    let (seg, off, len) = rep.cut.expect("the torn tail was not cut");
    assert_eq!(seg, 1);
    assert!(off > 0 && len > 0);
    assert_eq!(entries(&log).len(), 20);
    assert_eq!(log.append(Epoch(0), b"next").unwrap(), Lsn(21));
    log.close().unwrap();
    assert_eq!(wal::scan_log(&torn, true).unwrap().verdict, CrcVerdict::Ok);
}

#[test]
fn damage_without_evidence_in_the_last_batch_is_corrupt_tail_and_refused() {
    let (_, state) = log_with_unsynced_tail();
    let all = state.crash(|_, _| SectorFate::New);
    let scan = wal::scan_log(&all, true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok);
    // Flip one payload bit of the last (unattested) batch.
    let seg = wal::format::segment_file_name(1);
    let mut bytes = all.state().file_bytes(&seg).unwrap().to_vec();
    let last = scan.segments[0].data_end as usize - 20;
    bytes[last] ^= 0x10;
    all.with_state(|s| s.set_file_bytes(&seg, bytes));
    let Err(Error::Damaged(d)) = open(&all, RecoveryMode::TruncateTornTail) else { panic!("opened") };
    assert_eq!(d.verdict, CrcVerdict::CorruptTail, "{d}");
    assert_eq!((d.segment, d.lsn), (1, 25), "{d}");
    // Salvage reads whole batches only (a user batch is never split), so it stops before the
    // damaged batch.
    let (log, _) = open(&all, RecoveryMode::Salvage).unwrap();
    assert_eq!(entries(&log).len(), 20);
}

#[test]
fn damage_in_an_attested_batch_is_corrupt_with_its_location() {
    let (_, state) = log_with_unsynced_tail();
    let all = state.crash(|_, _| SectorFate::New);
    let seg = wal::format::segment_file_name(1);
    let mut bytes = all.state().file_bytes(&seg).unwrap().to_vec();
    bytes[200] ^= 1; // inside the first batch, attested by every later frame
    all.with_state(|s| s.set_file_bytes(&seg, bytes));
    let Err(Error::Damaged(d)) = open(&all, RecoveryMode::TruncateTornTail) else { panic!("opened") };
    assert_eq!((d.verdict, d.segment), (CrcVerdict::Corrupt, 1), "{d}");
    assert!(d.offset <= 200, "{d}");
    assert!(d.to_string().contains("segment 1"), "{d}");
}

#[test]
fn a_failed_sync_poisons_the_log_until_reopen() {
    let st = MemStorage::new();
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    log.append(Epoch(0), b"durable").unwrap();
    log.sync().unwrap();
    let syncs = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(syncs);
    log.append(Epoch(0), b"maybe").unwrap();
    let e = log.sync().unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && !e.is_rejected(), "{e}");
    assert!(log.is_fenced());
    assert!(matches!(log.append(Epoch(0), b"x"), Err(Error::Fenced { .. })));
    // No retried sync can turn the failure into a success.
    st.faults().fail_sync_from = None;
    assert!(matches!(log.sync(), Err(Error::Fenced { .. })));
    assert_eq!(log.durable_lsn(), Some(Lsn(1)));
    drop(log);
    // The failed sync's pages were dropped by the "kernel": a crash keeps only the durable entry.
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let (log, _) = open(&crashed, RecoveryMode::TruncateTornTail).unwrap();
    assert_eq!(entries(&log), vec![(1, b"durable".to_vec())]);
}

/// docs/invariants.md I6 with a transient EIO: only one fdatasync fails, so a retry would "succeed" (the
/// kernel marked the failed pages clean). The sync still fails, the log stays fenced, and a
/// crash keeps only what was durable before. (Caught `mutant-no-fence-on-sync-error`, which
/// retries, where a sync that keeps failing did not.)
#[test]
fn a_transient_sync_failure_is_never_retried_into_a_success() {
    let st = MemStorage::new();
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    log.append(Epoch(0), b"durable").unwrap();
    log.sync().unwrap();
    let syncs = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(syncs);
    st.faults().fail_sync_until = Some(syncs + 1);
    log.append(Epoch(0), b"lost with the failed sync").unwrap();
    let e = log.sync().expect_err("a failed fdatasync was reported as a success");
    assert!(matches!(e, Error::Io { .. }) && !e.is_rejected(), "{e}");
    assert!(log.is_fenced());
    assert!(matches!(log.sync(), Err(Error::Fenced { .. })));
    assert_eq!(st.faults().syncs_seen, syncs + 1, "the failed sync was retried");
    assert_eq!(log.durable_lsn(), Some(Lsn(1)));
    drop(log);
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let (log, _) = open(&crashed, RecoveryMode::TruncateTornTail).unwrap();
    assert_eq!(entries(&log), vec![(1, b"durable".to_vec())]);
}

#[test]
fn disk_full_at_rotation_is_its_own_error_and_the_log_stays_usable() {
    let st = MemStorage::new();
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    // Room for the first segment and wal.meta only.
    st.faults().capacity_bytes = Some(u64::from(SEG) + 4096);
    let mut n = 0u64;
    let err = loop {
        match log.append(Epoch(0), &[7; 500]) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 1000, "never ran out of space");
    };
    assert!(matches!(err, Error::DiskFull { .. }), "{err}");
    assert!(!log.is_fenced());
    assert_eq!(log.next_lsn(), Lsn(n + 1), "the refused append consumed an LSN");
    st.faults().capacity_bytes = None;
    log.append(Epoch(0), &[8; 500]).unwrap();
    log.sync().unwrap();
    log.close().unwrap();
    let (log, rep) = open(&st, RecoveryMode::Strict).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    assert_eq!(entries(&log).len() as u64, n + 1);
}

#[test]
fn short_writes_and_reordered_completions_are_resubmitted() {
    let st = MemStorage::new();
    st.faults().short_write_max = Some(100);
    st.faults().reorder = true;
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    for i in 0..300u32 {
        log.append(Epoch(0), &i.to_le_bytes().repeat(50)).unwrap();
        if i % 10 == 0 {
            log.sync().unwrap();
        }
    }
    log.close().unwrap();
    assert!(st.faults().short_writes_done > 100, "the backend did not split writes");
    let (log, rep) = open(&st, RecoveryMode::Strict).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    let e = entries(&log);
    assert_eq!(e.len(), 300);
    assert_eq!(e[299].1, 299u32.to_le_bytes().repeat(50));
}

#[test]
fn read_only_opens_need_an_existing_log_and_refuse_writes() {
    let st = MemStorage::new();
    let ro = Options { read_only: true, ..opts(RecoveryMode::TruncateTornTail) };
    assert!(matches!(Wal::open_with(Arc::new(st.clone()), ro.clone()), Err(Error::NotFound(_))));
    let (mut log, _) = open(&st, RecoveryMode::TruncateTornTail).unwrap();
    log.append(Epoch(0), b"a").unwrap();
    log.close().unwrap();
    let (mut r, _) = Wal::open_with(Arc::new(st.clone()), ro.clone()).unwrap();
    assert!(matches!(r.append(Epoch(0), b"b"), Err(Error::ReadOnly)));
    // Readers share the lock; a writer is excluded while they hold it.
    let (_r2, _) = Wal::open_with(Arc::new(st.clone()), ro).unwrap();
    assert!(matches!(open(&st, RecoveryMode::TruncateTornTail), Err(Error::Locked(_))));
}

/// A fixed, seeded record stream hashed to a constant: an accidental change to the on-disk
/// format (layout, checksums, alignment, what a batch or footer holds) fails here.
#[test]
fn format_stability_hash() {
    let st = MemStorage::new();
    // No spare prepared ahead: the hash covers exactly the files the format defines.
    let o = Options {
        log_id: Some(*b"format-stability"),
        prepare_in_background: false,
        ..opts(RecoveryMode::Strict)
    };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), o).unwrap();
    // xorshift64: the record stream the constant below was computed from.
    let mut rng = Rng::xorshift64(0x2545_f491_4f6c_dd1d);
    for i in 0..1500u64 {
        let r = rng.next_u64();
        let p: Vec<u8> = (0..(r % 500)).map(|j| (j ^ r) as u8).collect();
        match r % 23 {
            0 => log.sync().unwrap(),
            1 => log.append_batch(Epoch(0), &[&p, b"second"]).map(|_| ()).unwrap(),
            2 if i > 10 => log.truncate_after(Epoch(0), Lsn(log.next_lsn().0 - 2)).unwrap(),
            3 => log.set_meta((r % 3) as u32, &p[..p.len().min(200)]).unwrap(),
            4 => {
                let cp = wal::Checkpoint {
                    digest: [r as u8; 32],
                    entity_count: i,
                    digest_version: 1,
                    state_machine_version: 7,
                };
                log.checkpoint(Epoch(0), Lsn(log.next_lsn().0 - 1), &cp).unwrap();
            }
            5 => log.flush().unwrap(),
            _ => log.append(Epoch(0), &p).map(|_| ()).unwrap(),
        }
    }
    log.close().unwrap();
    let state = st.state();
    let mut h = blake3::Hasher::new();
    let mut names = state.file_names();
    names.sort();
    for n in &names {
        let b = state.file_bytes(n).unwrap();
        h.update(n.as_bytes());
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    }
    let got = h.finalize().to_hex().to_string();
    assert!(names.len() >= 4, "{names:?}");
    assert_eq!(
        // wal.close joined the hash (FORMAT.md 6.1; the other files' bytes did not change).
        got,
        "465849e4e3640813629b63da643c0e55c2c2b70015b3fa2e4586a2dd07f3ac6c",
        "the on-disk format changed; if intended, bump FORMAT_VERSION and FORMAT.md's history"
    );
}
