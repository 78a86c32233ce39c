//! A footer torn across sectors by a crash during a rotation (found by the pipelined crash
//! test, reproduced here on the synchronous path: it does not depend on the I/O thread).
//!
//! A segment that took more than 26 batches carries an index that makes its footer longer
//! than one sector. Rotation writes the footer and then syncs it; a crash before that sync
//! completes may keep the footer's first sector and lose the second (still all zero). That is a
//! torn write with evidence (an all-zero sector), and nothing after it is acknowledged, so
//! recovery should cut it (TORN_TAIL). Today the scanner looks for that evidence only within
//! the footer's non-zero bytes (`scan.rs`, `check_footer`: "evidence of tearing is looked for in
//! the footer's own bytes, not the zero slot"), finds none, and says CORRUPT_TAIL, so a writer
//! refuses to open. Ignored until the scanner's owners decide; run with `--ignored`.

use std::sync::{Arc, Mutex};
use wal::storage::{MemStorage, SectorFate};
use wal::{CrcVerdict, Epoch, Options, Wal};

#[test]
#[ignore = "scan.rs judges a torn multi-sector footer CORRUPT_TAIL (see the module docs)"]
fn a_footer_torn_across_sectors_is_a_torn_tail() {
    let st = MemStorage::new();
    let opts = Options { segment_len_bytes: 64 * 1024, prepare_in_background: false, ..Options::default() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts.clone()).unwrap();
    // 40 synced batches of ~1 KiB: the first segment's footer indexes more than 26 of them.
    for i in 0..40u32 {
        log.append(Epoch(0), &vec![i as u8 | 1; 1000]).unwrap();
        log.sync().unwrap();
    }
    let points = Arc::new(Mutex::new(Vec::new()));
    let p2 = points.clone();
    st.set_sync_observer(move |cp| p2.lock().unwrap().push(cp));
    log.rotate().unwrap();
    log.close().unwrap();
    // The sync right after the footer write: its dirty sectors are the footer's.
    let points = points.lock().unwrap();
    let cp = points.iter().find(|cp| cp.state.effective_dirty_sectors().len() >= 2).expect("a footer sync");
    let dirty = cp.state.effective_dirty_sectors();
    let first = dirty.iter().map(|d| d.1).min().unwrap();
    // Keep the footer's first sector, lose the rest.
    let img = cp.state.crash(|_, s| if s == first { SectorFate::New } else { SectorFate::Old });
    let scan = wal::scan_log(&img, true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::TornTail, "{:?}", scan.damage);
}
