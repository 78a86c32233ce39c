//! Combined faults at the storage seam (`wal/src/storage/`): a failed preparation or recycling
//! whose cleanup fails too (what the next open finds, and what the live log's next rotation
//! does with the name left), a recycling interrupted by a crash twice over, and a read-only
//! handle opened on a log a live writer is appending to.

mod failed_cleanup;
mod leftover;
mod live_reader;
mod recycle_twice;

use std::sync::Arc;
use wal::{CrcVerdict, Epoch, Lsn, Options, Wal};
use wal_sim::MemStorage;

const SEG: u32 = 64 * 1024;

/// Preparation on the writer's thread (so each fault and crash point lands where it is aimed),
/// up to `recycle` purged files set aside.
fn opts(recycle: usize) -> Options {
    Options {
        segment_len_bytes: SEG,
        recycle_segments: recycle,
        prepare_in_background: false,
        ..Options::default()
    }
}

fn payload(i: u64) -> Vec<u8> {
    (0..300).map(|j| (i as usize * 17 + j) as u8).collect()
}

/// Entries `from..to` as a replay gives them.
fn entries(from: u64, to: u64) -> Vec<(u64, Vec<u8>)> {
    (from..to).map(|i| (i, payload(i))).collect()
}

/// Appends `from..to`, each synced (acknowledged) before the next.
fn fill(log: &mut Wal, from: u64, to: u64) {
    for i in from..to {
        assert_eq!(log.append(Epoch(0), &payload(i)).unwrap(), Lsn(i));
        log.sync().unwrap();
    }
}

/// A log in `st` that set purged files aside: `segments` segments of entries (each synced),
/// all but the last purged, up to `recycle` of them set aside. Returns the log, the purged
/// segments, the first entry it still holds and the next LSN.
fn purged_log(st: &MemStorage, recycle: usize, segments: usize) -> (Wal, Vec<u64>, u64, u64) {
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts(recycle)).unwrap();
    let mut next = 1;
    while log.segment_count() < segments {
        fill(&mut log, next, next + 10);
        next += 10;
    }
    let r = log.purge_before(Lsn(next - 1)).unwrap();
    assert_eq!(r.segments_removed.len(), segments - 1, "{r:?}");
    let first = log.replay().unwrap().collect_entries().unwrap()[0].0;
    (log, r.segments_removed, first, next)
}

/// Opens `st` as a writer, checks that it replays exactly `want` (or `want` and then `unacked`,
/// entries written but not acknowledged when the crash came, which it may keep), appends 300
/// entries after it (through at least one rotation), closes, reopens and checks the whole log
/// again, and a full scan. Returns the first open's report and what it replayed.
fn opens_and_carries_on(
    st: &MemStorage,
    opts: Options,
    want: &[(u64, Vec<u8>)],
    unacked: &[(u64, Vec<u8>)],
    ctx: &str,
) -> (wal::OpenReport, Vec<(u64, Vec<u8>)>) {
    let (mut log, rep) = Wal::open_with(Arc::new(st.clone()), opts.clone())
        .unwrap_or_else(|e| panic!("{ctx}: the open failed: {e}"));
    let got = log.replay().unwrap().collect_entries().unwrap();
    let kept = got.get(..want.len()).unwrap_or(&got);
    assert_eq!(kept, want, "{ctx}: the open replays other than the acknowledged entries");
    let extra = &got[want.len()..];
    assert_eq!(extra, &unacked[..extra.len().min(unacked.len())], "{ctx}: replayed what was never written");
    let next = got.last().map_or(1, |e| e.0 + 1);
    fill(&mut log, next, next + 300);
    log.close().unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
    let (log, again) = Wal::open_with(Arc::new(st.clone()), opts).unwrap();
    assert_eq!(again.verdict, CrcVerdict::Ok, "{ctx}: {:?}", again.damage);
    let mut all = got.clone();
    all.extend(entries(next, next + 300));
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), all, "{ctx}");
    let scan = wal::scan_log(&**log.storage(), true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok, "{ctx}: {:?}", scan.damage);
    log.abandon();
    (rep, got)
}
