//! `wal.close` (FORMAT.md section 6.1): after a clean close an open takes the logical state from
//! it instead of walking the last segment; anything that does not match the close `wal.meta`
//! records is ignored by an open (it walks) and reported by a full scan.

use std::sync::Arc;
use wal::format::{CLOSE_FILE_NAME, META_FILE_NAME};
use wal::{CrcVerdict, DamageKind, Epoch, Lsn, Options, Wal};
use wal_sim::MemStorage;

fn opts() -> Options {
    Options { segment_len_bytes: 64 * 1024, prepare_in_background: false, ..Options::default() }
}

fn files(st: &MemStorage) -> Vec<(String, Vec<u8>)> {
    let s = st.state();
    let mut v: Vec<_> = s
        .file_names()
        .into_iter()
        .filter(|n| n != "LOCK")
        .map(|n| {
            let b = s.file_bytes(&n).unwrap_or_default().to_vec();
            (n, b)
        })
        .collect();
    v.sort();
    v
}

/// A closed log with metadata, an epoch change, a cut and several segments.
fn closed_log() -> MemStorage {
    let st = MemStorage::new();
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts()).unwrap();
    let mut e = 0;
    for i in 0..300u64 {
        log.append(Epoch(e), &vec![i as u8; 600]).unwrap();
        if i % 100 == 99 {
            log.set_meta((i / 100) as u32, format!("value {i}").as_bytes()).unwrap();
            e += 1;
            log.advance_epoch(Epoch(e)).unwrap();
        }
    }
    log.truncate_after(Epoch(e), Lsn(290)).unwrap();
    log.close().unwrap();
    st
}

fn state(st: &MemStorage) -> String {
    let (log, rep) =
        Wal::open_with(Arc::new(st.clone()), Options { read_only: true, create: false, ..opts() }).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    let metas: Vec<_> = (0..8).map(|k| log.meta(k).map(<[u8]>::to_vec)).collect();
    format!("{:?} {:?} {:?} {:?}", log.next_lsn(), log.first_lsn(), log.epoch(), metas)
}

#[test]
fn an_open_after_a_clean_close_walks_nothing_and_finds_the_walked_state() {
    let st = closed_log();
    let fast = wal::scan_log(&st, false).unwrap();
    let full = wal::scan_log(&st, true).unwrap();
    assert_eq!(full.verdict, CrcVerdict::Ok);
    assert!(full.segments.len() >= 3, "{}", full.segments.len());
    assert_eq!(fast.records_walked, 0, "the close state was not used");
    assert_eq!(fast.logical, full.logical);
    // Without the file an open walks the last segment and finds the same state.
    let without: Vec<_> = files(&st).into_iter().filter(|(n, _)| n != CLOSE_FILE_NAME).collect();
    let walked = MemStorage::from_files(without);
    assert!(wal::scan_log(&walked, false).unwrap().records_walked > 0);
    assert_eq!(state(&walked), state(&st));
}

#[test]
fn a_damaged_close_file_is_ignored_by_an_open_and_reported_by_a_full_scan() {
    let st = closed_log();
    let want = state(&st);
    let all = files(&st);
    let close = all.iter().find(|(n, _)| n == CLOSE_FILE_NAME).unwrap().1.clone();
    let with = |bytes: Vec<u8>| {
        MemStorage::from_files(
            all.iter()
                .map(|(n, b)| (n.clone(), if n == CLOSE_FILE_NAME { bytes.clone() } else { b.clone() }))
                .collect(),
        )
    };
    let mut cases: Vec<Vec<u8>> = (0..close.len() * 8)
        .map(|bit| {
            let mut b = close.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            b
        })
        .collect();
    cases.extend((0..close.len()).map(|n| close[..n].to_vec()));
    for bad in cases {
        let st = with(bad);
        let fast = wal::scan_log(&st, false).unwrap();
        assert!(fast.records_walked > 0, "a damaged wal.close was trusted");
        assert_eq!(state(&st), want);
        let full = wal::scan_log(&st, true).unwrap();
        assert_eq!(full.verdict, CrcVerdict::Corrupt);
        assert!(matches!(full.damage.unwrap().kind, DamageKind::BadCloseFile(_)));
    }
}

/// After a reopen that appended and crashed, or a close interrupted before `wal.meta` named it,
/// the file names a close that is not the log's last: an open walks, and nothing is damage.
#[test]
fn a_close_file_from_another_close_is_ignored() {
    let st = closed_log();
    let (mut log, _) = Wal::open_with(Arc::new(st.clone()), opts()).unwrap();
    log.append(Epoch(3), b"after the close").unwrap();
    log.sync().unwrap();
    log.abandon();
    let fast = wal::scan_log(&st, false).unwrap();
    assert!(fast.records_walked > 0);
    assert_eq!(wal::scan_log(&st, true).unwrap().verdict, CrcVerdict::Ok);
    assert!(state(&st).starts_with("Lsn(292)"), "{}", state(&st));

    // A second close whose wal.meta replacement did not happen: the old meta names the first.
    let before = files(&st);
    let (log, _) = Wal::open_with(Arc::new(st.clone()), opts()).unwrap();
    log.close().unwrap();
    let mut after = files(&st);
    let old_meta = before.iter().find(|(n, _)| n == META_FILE_NAME).unwrap().1.clone();
    after.iter_mut().filter(|(n, _)| n == META_FILE_NAME).for_each(|f| f.1 = old_meta.clone());
    let st = MemStorage::from_files(after);
    assert!(wal::scan_log(&st, false).unwrap().records_walked > 0);
    assert_eq!(wal::scan_log(&st, true).unwrap().verdict, CrcVerdict::Ok);
}
