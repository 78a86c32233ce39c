//! The `stale-epoch` class on the I/O thread (the synchronous API's stale appends are counted
//! by the crash workload).

use super::workload::opts;
use super::{Cases, Class, Only, Summary};
use crate::MemStorage;
use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Wal};

/// I7 on the I/O thread: an append from an older writer epoch is Rejected and takes no LSN.
pub fn stale_epoch_class(seed: u64, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::StaleEpoch, only);
    let Some(n) = cases.take() else { return };
    let ctx = cases.ctx(n, "I/O thread, stale epoch");
    let st = MemStorage::new();
    let (mut wal, _) = Wal::open_with(Arc::new(st.clone()), opts(seed)).unwrap();
    let e = 1 + seed % 5;
    wal.advance_epoch(Epoch(e)).unwrap();
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap();
    let a = log.append(Epoch(e), b"current".to_vec(), Durability::Durable).unwrap();
    assert!(a.wait().is_ok(), "{ctx}");
    let next = log.next_lsn();
    match log.append(Epoch(e - 1), b"REJECTED stale".to_vec(), Durability::Durable) {
        Err(err) if err.is_rejected() => {}
        other => panic!("{ctx}: a stale append gave {:?}", other.map(|t| t.lsn)),
    }
    assert_eq!(log.next_lsn(), next, "{ctx}: a rejected append consumed an LSN");
    log.close().unwrap();
    let got = {
        let (w, _) = Wal::open_with(Arc::new(st), opts(seed)).unwrap();
        w.replay().unwrap().collect_entries().unwrap()
    };
    assert_eq!(got, vec![(a.lsn.0, b"current".to_vec())], "{ctx}");
    *sum.cases.entry(Class::StaleEpoch.name()).or_default() += 1;
    sum.fault("stale-epoch appends rejected", 1);
}
