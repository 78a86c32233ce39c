//! Tailing cursors: committed entries read from their own positions, their lag, purges they
//! pin, and the error once a purge passes them.

use super::{done, opts, put};
use wal::{Lsn, Options};
use wal_sim::workload::kv::Kv;
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};

/// Tailing cursors read committed entries from their own positions, report their lag, pin the
/// prefix purge within the lag cap, and get a typed error once a purge passes them.
#[test]
fn cursors_tail_committed_entries_pin_purges_and_report_being_purged_past() {
    let dir = tempfile::tempdir().unwrap();
    let o = PipelineOptions {
        log: Options { segment_len_bytes: 64 * 1024, create: true, ..Options::default() },
        cursor_pin_max_lag: 280,
        ..opts()
    };
    let (p, _) = Pipeline::open(dir.path(), o, Hooks::default(), Kv::default).unwrap();
    let mut near = p.cursor(Lsn(1));
    let mut far = p.cursor(Lsn(1));
    let mut seen = Vec::new();
    for i in 1..=400u64 {
        done(&p.submit(&put(&format!("k{i}"), "v"), Some(i)).unwrap());
        if i % 50 == 0 {
            // `near` keeps up; `far` never reads.
            for e in near.next_batch(1000).unwrap() {
                seen.push(e);
            }
        }
        if i % 150 == 0 {
            p.snapshot().unwrap();
        }
    }
    assert_eq!(seen.len(), 400);
    assert!(seen
        .iter()
        .enumerate()
        .all(|(i, e)| e.lsn == Lsn(i as u64 + 1) && e.request_id == Some(i as u64 + 1)));
    assert_eq!(seen[6].body, put("k7", "v"));
    assert_eq!(near.lag().unwrap(), 0);
    assert_eq!(far.lag().unwrap(), 400);
    assert!(near.next_batch(10).unwrap().is_empty(), "caught up");
    // Snapshots at 150 and 300 allow a purge below 151, but `far` (at 1) is past the lag cap,
    // so it does not pin: the first segment went, and `far` is told, not given a gap.
    match far.next_batch(10) {
        Err(wal::Error::PurgedPast { position: 1, first }) => assert!(first > 1 && first <= 151, "{first}"),
        other => panic!("{other:?}"),
    }
    // A cursor within the cap pins: one at 200 survives the next snapshot's purge.
    let mut pinned = p.cursor(Lsn(200));
    for i in 401..=460u64 {
        done(&p.submit(&put(&format!("k{i}"), "v"), None).unwrap());
    }
    p.snapshot().unwrap(); // at 460: the older kept snapshot is 300, but the cursor pins 200
    let got = pinned.next_batch(1000).unwrap();
    assert_eq!(got.first().map(|e| e.lsn), Some(Lsn(200)));
    assert_eq!(got.len(), 261);
    drop((near, far, pinned));
    p.close().unwrap();
}
