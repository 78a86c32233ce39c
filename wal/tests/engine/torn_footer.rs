//! A footer torn across sectors by a crash during a rotation (found by the pipelined crash
//! test, reproduced here on the synchronous path: it does not depend on the I/O thread).
//!
//! A segment that took more than 26 batches carries an index that makes its footer longer
//! than one sector. Rotation writes the footer and then syncs it; a crash before that sync
//! completes may keep the footer's first sector and lose the second (still all zero). That is a
//! torn write with evidence (an all-zero sector), and nothing after it is acknowledged, so
//! recovery must cut it (TORN_TAIL). The scanner used to look for that evidence only within the
//! footer's non-zero bytes, found none and said CORRUPT_TAIL, so a writer refused to open after
//! a plain crash (docs/invariants.md I4). Now the footer's trusted header declares the extent searched.

use std::sync::{Arc, Mutex};
use wal::{CrcVerdict, Epoch, Options, Wal};
use wal_sim::{MemStorage, SectorFate};

#[test]
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
    // And a writer opens it, cuts the torn footer, and keeps every synced entry.
    let (log, report) = Wal::open_with(Arc::new(img), opts).unwrap();
    assert_eq!(report.verdict, CrcVerdict::TornTail);
    assert_eq!(log.replay().unwrap().collect_entries().unwrap().len(), 40);
}

/// The other side of the same rule: a footer whose bytes changed with no all-zero sector inside
/// its extent (a bit flip after a clean close) is still not a torn write.
#[test]
fn a_flipped_multi_sector_footer_without_a_zero_sector_is_not_torn() {
    let st = MemStorage::new();
    let opts = Options { segment_len_bytes: 64 * 1024, prepare_in_background: false, ..Options::default() };
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts).unwrap();
    for i in 0..40u32 {
        log.append(Epoch(0), &vec![i as u8 | 1; 1000]).unwrap();
        log.sync().unwrap();
    }
    log.close().unwrap();
    let name = wal::format::segment_file_name(1);
    let footer_at = 64 * 1024 - 2048;
    st.with_state(|s| {
        let mut b = s.file_bytes(&name).unwrap().to_vec();
        let len = u32::from_le_bytes(b[footer_at + 12..footer_at + 16].try_into().unwrap()) as usize;
        assert!(48 + len > 512, "the footer must span two sectors ({} bytes)", 48 + len);
        // A byte in the footer's second sector (its index), inside the footer.
        b[footer_at + 48 + len - 4] ^= 0x40;
        s.set_file_bytes(&name, b);
    });
    let scan = wal::scan_log(&st, true).unwrap();
    assert_ne!(scan.verdict, CrcVerdict::TornTail, "{:?}", scan.damage);
    assert_ne!(scan.verdict, CrcVerdict::Ok);
}
