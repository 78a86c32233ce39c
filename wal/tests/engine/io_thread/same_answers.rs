//! Every operation of the synchronous handle, on the I/O thread: a property test that both
//! handles answer, place and leave the same log.

use super::{open_unprepared, start, SEG};
use proptest::prelude::*;
use std::sync::Arc;
use wal::{AsyncOptions, Durability, Epoch, Error, Lsn, Options, Payload, Wal};
use wal_sim::MemStorage;

/// One operation, as both handles take it.
#[derive(Clone, Debug)]
enum Op {
    Append { epoch: u64, len: usize },
    Group { epoch: u64, n: usize },
    AppendAt { epoch: u64, delta: i64, len: usize },
    GroupAt { epoch: u64, delta: i64, n: usize },
    TruncateAfter { epoch: u64, back: u64 },
    Reset { epoch: u64, next: u64 },
    SetMeta { key: u32, len: usize },
    AdvanceEpoch { by: i64 },
    Sync,
}

/// Mostly the right epoch, sometimes a stale or a future one; mostly small payloads, sometimes
/// one over the limit (with the right epoch only: the handles check those two in different
/// orders, both refusals).
fn op() -> impl Strategy<Value = Op> {
    let epoch = prop_oneof![8 => Just(0u64), 1 => Just(1u64), 1 => Just(2u64)];
    let len = prop_oneof![20 => 0usize..300, 1 => Just(70_000usize)];
    prop_oneof![
        6 => (epoch.clone(), len.clone())
            .prop_map(|(epoch, len)| Op::Append { epoch: if len > 1000 { 0 } else { epoch }, len }),
        1 => (epoch.clone(), 1usize..4).prop_map(|(epoch, n)| Op::Group { epoch, n }),
        4 => (epoch.clone(), -6i64..4, len).prop_map(|(epoch, delta, len)| Op::AppendAt {
            epoch: if len > 1000 { 0 } else { epoch },
            delta,
            len
        }),
        1 => (epoch.clone(), -4i64..3, 1usize..4).prop_map(|(epoch, delta, n)| Op::GroupAt { epoch, delta, n }),
        2 => (epoch.clone(), 0u64..8).prop_map(|(epoch, back)| Op::TruncateAfter { epoch, back }),
        1 => (epoch, 0u64..60).prop_map(|(epoch, next)| Op::Reset { epoch, next }),
        2 => (0u32..20, prop_oneof![9 => 0usize..40, 1 => Just(300usize)])
            .prop_map(|(key, len)| Op::SetMeta { key, len }),
        1 => (-1i64..3).prop_map(|by| Op::AdvanceEpoch { by }),
        1 => Just(Op::Sync),
    ]
}

fn bytes(tag: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (tag * 31 + i) as u8).collect()
}

/// The epoch an op carries: relative to the log's current one (0 = current, 1 = stale, 2 = a
/// future one).
fn epoch_for(current: Epoch, e: u64) -> Epoch {
    match e {
        0 => current,
        1 => Epoch(current.0.wrapping_sub(1)),
        _ => Epoch(current.0 + 1),
    }
}

/// What an operation answered, comparable across the two handles: the LSN it reports (an
/// append's first LSN, otherwise the next LSN after it) or the kind of refusal.
fn outcome<T>(r: Result<T, Error>, lsn: impl FnOnce(T) -> u64) -> Result<u64, std::mem::Discriminant<Error>> {
    r.map(lsn).map_err(|e| std::mem::discriminant(&e))
}

/// Runs `ops` on a synchronous handle and on the I/O thread (each on its own simulated disk)
/// and checks that every answer, every placement and the reopened logs are the same.
fn same_on_both(ops: &[Op]) -> Result<(), TestCaseError> {
    let (a, b) = (MemStorage::new(), MemStorage::new());
    let mut sync = open_unprepared(Arc::new(a.clone()));
    let log = start(&b, AsyncOptions::default());
    let mut tickets = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (cur, next) = (sync.epoch(), sync.next_lsn().0);
        prop_assert_eq!(log.epoch(), cur, "epoch before op {} {:?}", i, op);
        prop_assert_eq!(log.next_lsn().0, next, "next LSN before op {} {:?}", i, op);
        prop_assert_eq!(log.first_lsn(), sync.first_lsn(), "first LSN before op {} {:?}", i, op);
        prop_assert_eq!(log.is_fenced(), sync.is_fenced(), "fenced before op {} {:?}", i, op);
        let (want, got) = match *op {
            Op::Append { epoch, len } => {
                let e = epoch_for(cur, epoch);
                let w = outcome(sync.append(e, &bytes(i, len)), |l| l.0);
                let t = log.append(e, bytes(i, len), Durability::Written);
                (w, outcome(t.map(|t| tickets.push(t.clone())).map(|_| tickets.last().unwrap().lsn), |l| l.0))
            }
            Op::Group { epoch, n } => {
                let e = epoch_for(cur, epoch);
                let g: Vec<Vec<u8>> = (0..n).map(|k| bytes(i + k, 10)).collect();
                let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                let w = outcome(sync.append_batch(e, &refs), |l| l.0);
                // The three shapes of a batch: a `Payload`, borrowed slices, owned buffers.
                let t = match i % 3 {
                    0 => log.append_with(e, Payload::Group(g), Durability::Written, None),
                    1 => log.append_batch(e, &refs, Durability::Written),
                    _ => log.append(e, g.clone(), Durability::Written),
                };
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::AppendAt { epoch, delta, len } => {
                let e = epoch_for(cur, epoch);
                let at = Lsn((next as i64 + delta).max(0) as u64);
                let w = outcome(sync.append_at(e, at, &bytes(i, len)), |l| l.0);
                let t = log.append_at(e, at, Payload::One(bytes(i, len)), Durability::Durable);
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::GroupAt { epoch, delta, n } => {
                let e = epoch_for(cur, epoch);
                let at = Lsn((next as i64 + delta).max(0) as u64);
                let g: Vec<Vec<u8>> = (0..n).map(|k| bytes(i + k, 20)).collect();
                let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                let w = outcome(sync.append_batch_at(e, at, &refs), |l| l.0);
                let t = log.append_batch_at(e, at, &refs, Durability::Durable);
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::TruncateAfter { epoch, back } => {
                let e = epoch_for(cur, epoch);
                let after = Lsn(next.saturating_sub(back).saturating_add(1).saturating_sub(1));
                let w = outcome(sync.truncate_after(e, after), |()| after.0 + 1);
                let t = log.truncate_after(e, after);
                (
                    w,
                    outcome(t, |t| {
                        tickets.push(t.clone());
                        t.lsn.0
                    }),
                )
            }
            Op::Reset { epoch, next } => {
                let e = epoch_for(cur, epoch);
                let w = outcome(sync.reset(e, Lsn(next)), |()| next);
                (w, outcome(log.reset(e, Lsn(next)), |t| t.lsn.0))
            }
            Op::SetMeta { key, len } => {
                let w = outcome(sync.set_meta(key, &bytes(i, len)), |()| next);
                let t = log.set_meta(key, &bytes(i, len), Durability::Durable);
                let (got, want) = (log.meta(key), sync.meta(key).map(<[u8]>::to_vec));
                prop_assert_eq!(got, want, "meta after op {} {:?}", i, op);
                (w, outcome(t, |t| t.lsn.0))
            }
            Op::AdvanceEpoch { by } => {
                let new = Epoch((cur.0 as i64 + by).max(0) as u64);
                let w = outcome(sync.advance_epoch(new), |()| next);
                (w, outcome(log.advance_epoch(new), |t| t.lsn.0))
            }
            Op::Sync => {
                let w = outcome(sync.sync(), |()| next);
                let t = log.sync();
                if let Ok(t) = &t {
                    prop_assert_eq!(t.wait(), Ok(Lsn(next)), "sync at op {}", i);
                    // Everything before it is durable on both, and both say so.
                    prop_assert_eq!(log.durable_lsn(), sync.durable_lsn(), "durable LSN after op {}", i);
                }
                (w, outcome(t, |t| t.lsn.0))
            }
        };
        prop_assert_eq!(want, got, "op {} {:?}", i, op);
        if want.is_ok() {
            // The placement the submit side promised is the log's own.
            let reported = match op {
                Op::Append { .. } | Op::Group { .. } | Op::AppendAt { .. } | Op::GroupAt { .. } => None,
                _ => Some(sync.next_lsn().0),
            };
            if let Some(n) = reported {
                prop_assert_eq!(want, Ok(n), "op {} {:?}", i, op);
            }
        }
    }
    for t in tickets {
        prop_assert!(t.wait_durable().is_ok(), "{:?}", t.wait_durable());
    }
    // One last entry, durable on both: both report it as their durable LSN.
    let last = sync.append(sync.epoch(), b"last").unwrap();
    sync.sync().unwrap();
    let t = log.append(log.epoch(), b"last", Durability::Durable).unwrap();
    prop_assert_eq!(t.wait(), Ok(last));
    prop_assert_eq!(sync.durable_lsn(), Some(last));
    prop_assert_eq!(log.durable_lsn(), Some(last));
    // Both replay the same live entries before they close.
    let live = |r: Result<wal::Replay, Error>| r.and_then(|r| r.collect_entries()).map_err(|e| e.to_string());
    prop_assert_eq!(live(log.replay()), live(sync.replay()));
    sync.close().unwrap();
    log.close().unwrap();
    let reopen_both = |st: &MemStorage| {
        let (w, _) =
            Wal::open_with(Arc::new(st.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
                .unwrap();
        let metas: Vec<Option<Vec<u8>>> = (0..20).map(|k| w.meta(k).map(<[u8]>::to_vec)).collect();
        (w.replay().unwrap().collect_entries().unwrap(), metas, w.epoch(), w.next_lsn())
    };
    prop_assert_eq!(reopen_both(&a), reopen_both(&b));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every operation exists on the I/O thread with the synchronous handle's checks, answers
    /// and placement (the submit side assigns every LSN once, in queue order), and both leave
    /// the same log.
    #[test]
    fn every_operation_answers_and_places_as_the_synchronous_handle_does(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        same_on_both(&ops)?;
    }
}
