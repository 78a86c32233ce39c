//! Untracked appends (no ticket): their LSNs, their refusals, and disk full giving them up.

use super::{reopen, start, SEG};
use std::sync::Arc;
use wal::{AsyncOptions, Durability, Epoch, Error, Lsn};
use wal_sim::MemStorage;

/// Untracked appends (no ticket, a pooled copy of a borrowed slice) from several threads,
/// mixed with ticketed ones: every entry lands at the LSN it was given, in each thread's order,
/// byte for byte, and one ticket's durability covers every untracked entry before it.
#[test]
fn untracked_appends_take_their_lsns_in_order_beside_ticketed_ones() {
    let st = MemStorage::new();
    let log = Arc::new(start(&st, AsyncOptions::default()));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut buf = Vec::new();
                for i in 0..300u32 {
                    buf.clear();
                    buf.extend_from_slice(&[t; 3]);
                    buf.extend_from_slice(&i.to_le_bytes());
                    buf.resize(7 + (i as usize * 13) % 700, t);
                    let lsn = if i % 25 == 24 {
                        log.append(Epoch(0), buf.clone(), Durability::Written).unwrap().lsn
                    } else {
                        log.append_untracked(Epoch(0), &buf, Durability::Written).unwrap()
                    };
                    mine.push((lsn.0, buf.clone()));
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<(u64, Vec<u8>)> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
    // One durable ticket after them all: its sync covers everything written before it.
    let last = log.append(Epoch(0), b"last".to_vec(), Durability::Durable).unwrap().wait().unwrap();
    assert_eq!(last.0, 1201);
    assert!(log.fenced().is_none());
    Arc::try_unwrap(log).unwrap().close().unwrap();
    all.sort();
    all.push((1201, b"last".to_vec()));
    assert_eq!(reopen(&st), all, "every entry at the LSN its append returned, byte for byte");
}

/// An untracked append is refused exactly like a ticketed one, and a refusal takes no LSN.
#[test]
fn untracked_appends_are_refused_without_taking_an_lsn() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    assert_eq!(log.append_untracked(Epoch(0), b"a", Durability::Written).unwrap(), Lsn(1));
    assert!(matches!(
        log.append_untracked(Epoch(1), b"b", Durability::Written),
        Err(Error::EpochNotAdvanced { current: 0, given: 1 })
    ));
    let huge = vec![0u8; SEG as usize];
    assert!(matches!(
        log.append_untracked(Epoch(0), &huge, Durability::Durable),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(log.next_lsn(), Lsn(2));
    assert_eq!(log.append_untracked(Epoch(0), b"c", Durability::Durable).unwrap(), Lsn(2));
    log.close().unwrap();
    assert_eq!(reopen(&st), vec![(1, b"a".to_vec()), (2, b"c".to_vec())]);
}

/// Disk full gives up what was never written. A ticketed entry hears Rejected and the log
/// stays usable (`disk_full_rejects_what_was_never_written_and_the_log_stays_usable`); an
/// untracked one has nobody to hear it, so the log fences: the caller's next append fails
/// instead of the loss passing unnoticed. What the log kept is a prefix of what was appended.
#[test]
fn disk_full_that_gives_up_untracked_entries_fences_the_log() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    // Room for the first segment and wal.meta only: the first rotation cannot get a segment.
    st.faults().capacity_bytes = Some(64 * 1024 + 4096);
    let mut appended = Vec::new();
    let refused = loop {
        assert!(appended.len() < 100_000, "untracked appends were never refused");
        let payload = (appended.len() as u32).to_le_bytes().repeat(100);
        match log.append_untracked(Epoch(0), &payload, Durability::Written) {
            Ok(lsn) => appended.push((lsn.0, payload)),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(refused, Error::Fenced { ref cause } if cause.contains("without a ticket")),
        "{refused:?}"
    );
    assert!(log.fenced().is_some());
    let ticket = log.append(Epoch(0), b"after".to_vec(), Durability::Durable);
    assert!(ticket.is_err(), "a fenced log takes no append");
    drop(log);
    st.faults().capacity_bytes = None;
    let kept = reopen(&st);
    assert!(kept.len() < appended.len(), "some entries were given up");
    assert_eq!(kept[..], appended[..kept.len()], "the log kept a prefix of the appends, byte for byte");
}
