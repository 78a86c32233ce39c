//! The synchronous handle's other operations on the I/O thread (metadata, truncation, reset,
//! checkpoints, abandon, user batches): behind a failed sync, on disk full, in a written replay.

use super::{reopen, start, start_on_sync_thread, SEG};
use std::sync::Arc;
use wal::{AsyncOptions, Durability, Epoch, Error, Failure, Lsn, Options, Payload, Wal};
use wal_sim::{MemStorage, SectorFate};

#[test]
fn operations_queued_behind_a_failed_sync_fail_and_later_ones_are_refused() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    log.append(Epoch(0), b"kept".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    let meta = log.set_meta(3, b"vote", Durability::Written).unwrap();
    let cut = log.truncate_after(Epoch(0), Lsn(0)).unwrap();
    // Asked for `Written`: its final word is the one a failed sync decides.
    assert!(matches!(meta.wait_durable(), Err(Failure::Indeterminate(_))), "{:?}", meta.wait_durable());
    assert!(matches!(cut.wait(), Err(Failure::Indeterminate(_))), "{:?}", cut.wait());
    st.faults().fail_sync_from = None;
    assert!(matches!(log.reset(Epoch(0), Lsn(9)), Err(Error::Fenced { .. })));
    assert!(matches!(log.advance_epoch(Epoch(1)), Err(Error::Fenced { .. })));
    assert!(log.close().is_err());
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed), vec![(1, b"kept".to_vec())]);
}

#[test]
fn disk_full_rejects_queued_operations_and_gives_their_position_back() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut durable = 0u64;
    let rejected = loop {
        let t =
            log.append_at(Epoch(0), log.next_lsn(), Payload::One(vec![7; 500]), Durability::Durable).unwrap();
        let cut = log.set_meta(1, &durable.to_le_bytes(), Durability::Durable).unwrap();
        match (t.wait(), cut.wait()) {
            (Ok(_), Ok(_)) => durable += 1,
            (Err(f), Err(g)) => {
                assert!(matches!(g, Failure::Rejected(_)), "{g:?}");
                break f;
            }
            other => panic!("an entry and the record queued after it disagree: {other:?}"),
        }
        assert!(durable < 1000, "never ran out of space");
    };
    assert!(matches!(rejected, Failure::Rejected(_)), "{rejected:?}");
    assert_eq!(log.next_lsn(), Lsn(durable + 1), "the rejected entry's LSN is the next one again");
    st.faults().capacity_bytes = None;
    log.truncate_after(Epoch(0), Lsn(durable - 1)).unwrap().wait().unwrap();
    let t =
        log.append_at(Epoch(0), Lsn(durable), Payload::One(b"after".to_vec()), Durability::Durable).unwrap();
    assert_eq!(t.wait(), Ok(Lsn(durable)));
    log.close().unwrap();
    let got = reopen(&st);
    assert_eq!(got.len() as u64, durable);
    assert_eq!(got.last().unwrap(), &(durable, b"after".to_vec()));
}

#[test]
fn a_written_replay_sees_every_operation_queued_before_it() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    for i in 1..=5u8 {
        log.append(Epoch(0), vec![i], Durability::Written).unwrap();
    }
    log.truncate_after(Epoch(0), Lsn(3)).unwrap();
    log.append_at(Epoch(0), Lsn(4), Payload::One(b"four".to_vec()), Durability::Written).unwrap();
    // Nothing waited on yet: the replay itself writes what is staged.
    let got = log.replay_from(Some(Lsn(2)), wal::Durability::Written).unwrap().collect_entries().unwrap();
    assert_eq!(got, vec![(2, vec![2]), (3, vec![3]), (4, b"four".to_vec())]);
    log.close().unwrap();
}

#[test]
fn abandon_leaves_what_a_crash_leaves_and_a_shared_handle_closes_once() {
    let clean = start(&MemStorage::new(), AsyncOptions::default());
    clean.close().unwrap();
    assert!(clean.close().is_ok(), "a second close of a cleanly closed log is Ok again");
    let st = MemStorage::new();
    let log = Arc::new(start(&st, AsyncOptions::default()));
    log.set_meta(2, b"term 5", Durability::Durable).unwrap().wait().unwrap();
    let durable = log.append(Epoch(0), b"durable".to_vec(), Durability::Durable).unwrap();
    durable.wait().unwrap();
    let other = log.clone();
    other.abandon();
    let after = log.append(Epoch(0), b"x".to_vec(), Durability::Durable);
    assert!(matches!(after, Err(Error::Fenced { .. } | Error::ReadOnly)), "{after:?}");
    assert!(matches!(log.close(), Err(Error::Fenced { .. })), "a close after an abandon says so");
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let (w, _) =
        Wal::open_with(Arc::new(crashed), Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    assert_eq!(w.meta(2), Some(&b"term 5"[..]));
    assert_eq!(w.replay().unwrap().collect_entries().unwrap(), vec![(1, b"durable".to_vec())]);
}

#[test]
fn a_checkpoint_is_checked_as_the_synchronous_handle_checks_it() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let lsn = log.append(Epoch(0), b"x".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    let cp =
        wal::Checkpoint { digest: [7; 32], entity_count: 1, digest_version: 1, state_machine_version: 1 };
    assert!(matches!(log.checkpoint(Epoch(1), lsn, &cp), Err(Error::EpochNotAdvanced { .. })));
    assert!(matches!(log.checkpoint(Epoch(0), Lsn(lsn.0 + 1), &cp), Err(Error::InvalidArgument(_))));
    log.advance_epoch(Epoch(2)).unwrap();
    assert!(matches!(log.checkpoint(Epoch(0), lsn, &cp), Err(Error::StaleEpoch { .. })));
    log.checkpoint(Epoch(2), lsn, &cp).unwrap();
    log.close().unwrap();
    let (w, _) =
        Wal::open_with(Arc::new(st), Options { segment_len_bytes: SEG, ..Options::default() }).unwrap();
    let mut r = w.replay().unwrap();
    let mut found = Vec::new();
    while let Some(item) = r.next() {
        if let wal::ItemKind::Checkpoint(c) = item.unwrap().kind {
            found.push(c);
        }
    }
    assert_eq!(found, vec![cp], "the one accepted checkpoint is in the log");
}

#[test]
fn a_log_that_fences_on_disk_full_gives_nothing_up_quietly() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions { fence_on_disk_full: true, ..AsyncOptions::default() });
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut durable = 0u64;
    let failed = loop {
        let t = log.append(Epoch(0), vec![7; 500], Durability::Durable).unwrap();
        match t.wait() {
            Ok(_) => durable += 1,
            Err(f) => break f,
        }
        assert!(durable < 1000, "never ran out of space");
    };
    assert!(matches!(failed, Failure::Indeterminate(_)), "{failed:?}");
    st.faults().capacity_bytes = None;
    // Fenced: nothing is taken after the entry that was given up, even with space again.
    assert!(matches!(
        log.append_at(Epoch(0), Lsn(durable + 2), Payload::One(vec![1]), Durability::Durable),
        Err(Error::Fenced { .. })
    ));
    assert!(matches!(log.reset(Epoch(0), Lsn(100)), Err(Error::Fenced { .. })));
    assert!(log.close().is_err());
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed).len() as u64, durable, "every acknowledged entry, nothing else");
}

#[test]
fn a_user_batch_larger_than_a_segment_is_rejected_and_the_log_carries_on() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    log.append(Epoch(0), b"before".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    // Each entry fits a segment; together they do not (64 KiB segments).
    let group = Payload::Group(vec![vec![5; 40_000], vec![6; 40_000]]);
    let t = log.append_with(Epoch(0), group, Durability::Durable, None).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Rejected(_))), "{:?}", t.wait());
    let at = Payload::Group(vec![vec![5; 40_000], vec![6; 40_000]]);
    let t = log.append_at(Epoch(0), Lsn(2), at, Durability::Durable).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Rejected(_))), "{:?}", t.wait());
    // Not fenced, and the refused entries' LSNs are given again.
    let next = log.append(Epoch(0), b"after".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    assert_eq!(next, Lsn(2));
    log.close().unwrap();
    assert_eq!(reopen(&st), vec![(1, b"before".to_vec()), (2, b"after".to_vec())]);
}

/// The writer's durable LSN follows the log's own: it moves with each sync, and a durable cut
/// lowers it (as `Wal::durable_lsn`); a reopened log starts from what is on disk.
#[test]
fn the_durable_lsn_moves_with_syncs_and_a_cut_lowers_it() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    assert_eq!(log.durable_lsn(), None, "a new log has nothing durable");
    for i in 0..5u8 {
        log.append(Epoch(0), &[i; 10], Durability::Durable).unwrap().wait().unwrap();
        assert_eq!(log.durable_lsn(), Some(Lsn(u64::from(i) + 1)));
    }
    log.truncate_after(Epoch(0), Lsn(2)).unwrap().wait().unwrap();
    assert_eq!(log.durable_lsn(), Some(Lsn(2)), "a durable cut lowers it");
    log.close().unwrap();
    let log = start(&st, AsyncOptions::default());
    assert_eq!(log.durable_lsn(), Some(Lsn(2)), "a reopened writer starts from the disk's");
    log.close().unwrap();
}

/// A writer that never syncs `Written` entries on its own (a delay of an hour, no byte bound):
/// only a durable operation or a sync makes them durable.
fn only_asked_syncs() -> AsyncOptions {
    AsyncOptions {
        written_sync_delay: std::time::Duration::from_secs(3600),
        written_sync_bytes: usize::MAX,
        ..AsyncOptions::default()
    }
}

/// `AsyncWal::sync` makes `Written` entries durable now, not after the writer's delay: with a
/// delay of an hour nothing but the sync can make them durable. Its ticket carries the next
/// LSN; a crash that keeps only synced sectors keeps every entry before it. With nothing left
/// unsynced it resolves without another fdatasync; on a fenced log it is refused.
#[test]
fn sync_makes_written_entries_durable_now_and_costs_nothing_when_all_is_durable() {
    let st = MemStorage::new();
    let log = start(&st, only_asked_syncs());
    let written: Vec<_> =
        (0..3u8).map(|i| log.append(Epoch(0), vec![b'w', i], Durability::Written).unwrap()).collect();
    for w in &written {
        assert_eq!(w.wait(), Ok(w.lsn), "not written");
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(written.iter().all(|w| w.poll_durable().is_none()), "durable without a sync");
    assert_eq!(log.durable_lsn(), None);
    let syncs = st.faults().syncs_seen;
    let t = log.sync().unwrap();
    assert_eq!(t.lsn, Lsn(4), "a sync's ticket carries the next LSN");
    assert_eq!(t.wait(), Ok(Lsn(4)));
    assert!(st.faults().syncs_seen > syncs, "no fdatasync ran for the sync");
    for w in &written {
        assert_eq!(w.poll_durable(), Some(Ok(w.lsn)), "a written entry before the sync is not durable");
    }
    assert_eq!(log.durable_lsn(), Some(Lsn(3)));
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let kept: Vec<u64> = reopen(&crashed).into_iter().map(|(l, _)| l).collect();
    assert_eq!(kept, vec![1, 2, 3], "a crash lost entries a sync had made durable");
    // Nothing unsynced: resolved without another fdatasync.
    let syncs = st.faults().syncs_seen;
    assert_eq!(log.sync().unwrap().wait(), Ok(Lsn(4)));
    assert_eq!(st.faults().syncs_seen, syncs, "a sync with nothing to sync ran an fdatasync");
    // A failed sync fences: the next one is refused.
    log.append(Epoch(0), b"x".to_vec(), Durability::Written).unwrap().wait().unwrap();
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    assert!(matches!(log.sync().unwrap().wait(), Err(Failure::Indeterminate(_))));
    st.faults().fail_sync_from = None;
    assert!(matches!(log.sync(), Err(Error::Fenced { .. })));
    assert!(log.close().is_err());
}

/// A borrowed user batch (`append_batch(&[&[u8]])`, copied into pooled buffers) meets disk full
/// as an owned one does: the whole batch is Rejected, none of it is in the log, its LSNs are the
/// next ones again, and once there is space the same borrowed slices append at those LSNs. Then
/// a failed sync behind a borrowed batch at an LSN: Indeterminate, and the log refuses more.
#[test]
fn a_borrowed_batch_is_rejected_whole_on_disk_full_and_indeterminate_behind_a_failed_sync() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let parts: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 300]).collect();
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let mut kept = 0u64;
    let rejected = loop {
        match log.append_batch(Epoch(0), &refs, Durability::Durable).unwrap().wait() {
            Ok(first) => {
                assert_eq!(first, wal::Lsn(kept + 1));
                kept += 3;
            }
            Err(f) => break f,
        }
        assert!(kept < 3000, "never ran out of space");
    };
    assert!(matches!(rejected, Failure::Rejected(_)), "{rejected:?}");
    assert_eq!(log.next_lsn(), Lsn(kept + 1), "the rejected batch's LSNs are the next ones again");
    st.faults().capacity_bytes = None;
    assert_eq!(log.append_batch(Epoch(0), &refs, Durability::Durable).unwrap().wait(), Ok(Lsn(kept + 1)));
    kept += 3;
    // Behind a failed sync: a borrowed batch at an LSN is Indeterminate, and the log is fenced.
    let n = st.faults().syncs_seen;
    st.faults().fail_sync_from = Some(n);
    let t = log.append_batch_at(Epoch(0), Lsn(kept + 1), &refs, Durability::Durable).unwrap();
    assert!(matches!(t.wait(), Err(Failure::Indeterminate(_))), "{:?}", t.wait());
    st.faults().fail_sync_from = None;
    assert!(matches!(log.append_batch(Epoch(0), &refs, Durability::Durable), Err(Error::Fenced { .. })));
    assert!(log.close().is_err());
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    let got = reopen(&crashed);
    assert_eq!(got.len() as u64, kept, "the log does not hold exactly the acknowledged batches");
    for (i, (lsn, bytes)) in got.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1);
        assert_eq!(bytes, &parts[i % 3], "entry {lsn} is not its slice");
    }
}

/// A sync asked for while another fdatasync is in flight resolves only after one that started
/// once everything before it was written. The first sync is held on the storage's sync thread;
/// a `Written` entry written meanwhile and the sync's ticket stay not durable (however long the
/// test waits) until it is released and a second fdatasync covers them.
#[test]
fn a_sync_asked_during_a_sync_in_flight_waits_for_one_covering_everything_before_it() {
    let st = MemStorage::new();
    // Appends are written during a sync in flight, not held until it completes.
    let log = start_on_sync_thread(&st, AsyncOptions { overlap_write_bytes: 0, ..only_asked_syncs() });
    let release = st.hold_next_sync();
    let first = log.append(Epoch(0), b"first".to_vec(), Durability::Durable).unwrap();
    assert!(st.wait_sync_held(std::time::Duration::from_secs(20)), "the first sync never started");
    let syncs = st.faults().syncs_seen;
    let w = log.append(Epoch(0), b"w".to_vec(), Durability::Written).unwrap();
    assert_eq!(w.wait(), Ok(Lsn(2)), "not written during the held sync");
    let t = log.sync().unwrap();
    assert_eq!(t.lsn, Lsn(3));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(t.poll_outcome().is_none(), "the sync resolved while the fdatasync before it was held");
    assert!(w.poll_durable().is_none() && first.poll_durable().is_none());
    drop(release);
    assert_eq!(t.wait(), Ok(Lsn(3)));
    assert!(st.faults().syncs_seen >= syncs + 2, "the written entry needs a second fdatasync");
    assert_eq!(first.poll_durable(), Some(Ok(Lsn(1))));
    assert_eq!(w.poll_durable(), Some(Ok(Lsn(2))));
    assert_eq!(log.durable_lsn(), Some(Lsn(2)));
    log.close().unwrap();
}

/// Syncs asked by several threads at once, beside their `Written` appends: each thread's sync
/// resolves only when every entry that thread appended before it is durable, and the log holds
/// every entry at its LSN afterwards.
#[test]
fn concurrent_syncs_each_cover_what_their_thread_appended_before_them() {
    let st = MemStorage::new();
    let log = std::sync::Arc::new(start(&st, only_asked_syncs()));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..40u8 {
                    mine.push(log.append(Epoch(0), vec![t, i], Durability::Written).unwrap());
                    if i % 5 == 4 {
                        let s = log.sync().unwrap();
                        assert!(s.wait().is_ok());
                        for w in &mine {
                            let d = w.poll_durable();
                            assert_eq!(
                                d,
                                Some(Ok(w.lsn)),
                                "thread {t}: entry {} not durable after its sync",
                                w.lsn.0
                            );
                        }
                    }
                }
                mine.into_iter().map(|w| w.lsn.0).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut lsns: Vec<u64> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
    lsns.sort_unstable();
    assert_eq!(lsns, (1..=160).collect::<Vec<_>>(), "LSNs not dense and unique");
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed).len(), 160, "a synced entry is missing after a crash");
}

/// Disk full, then a sync: the entry that did not fit is Rejected and its LSN free again; a sync
/// asked after it makes every entry written before it durable (a crash keeping only synced
/// sectors keeps them all), and once space is back the log goes on at the freed LSN.
#[test]
fn a_sync_after_disk_full_makes_everything_written_before_it_durable() {
    let st = MemStorage::new();
    let log = start(&st, only_asked_syncs());
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut written = 0u64;
    let rejected = loop {
        match log.append(Epoch(0), vec![7; 500], Durability::Written).unwrap().wait() {
            Ok(l) => {
                written += 1;
                assert_eq!(l, Lsn(written));
            }
            Err(f) => break f,
        }
        assert!(written < 1000, "never ran out of space");
    };
    assert!(matches!(rejected, Failure::Rejected(_)), "{rejected:?}");
    let t = log.sync().unwrap();
    assert_eq!(t.wait(), Ok(Lsn(written + 1)));
    assert_eq!(log.durable_lsn(), Some(Lsn(written)));
    let crashed = st.state().crash(|_, _| SectorFate::Old);
    assert_eq!(reopen(&crashed).len() as u64, written, "a crash lost entries the sync made durable");
    st.faults().capacity_bytes = None;
    let after = log.append(Epoch(0), b"after".to_vec(), Durability::Durable).unwrap();
    assert_eq!(after.wait(), Ok(Lsn(written + 1)));
    log.close().unwrap();
}
