//! Appends of borrowed slices (`AsyncWal::append(epoch, &[u8], ..)`, the shape of
//! `Wal::append`): each lands byte for byte at its LSN, and a steady stream of them allocates no
//! payload buffer (the copy goes into a buffer the I/O thread hands back, shared by every
//! appending thread; a refused one, over the size limit or under a stale epoch, is not copied
//! at all), where owned `Vec`s allocate one each. Bytes allocated are counted on the
//! test's own thread only.

use super::{reopen, start};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use wal::{AsyncOptions, Durability, Epoch, Payload};
use wal_sim::MemStorage;

thread_local! {
    /// Bytes allocated on this thread while counting; `None` when not counting.
    static COUNTED: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The system allocator, counting what the threads that asked for it allocate.
struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; the count is a thread-local
// `Cell` with a const initializer, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = COUNTED.try_with(|c| c.set(c.get().map(|n| n + layout.size())));
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `System` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = COUNTED.try_with(|c| c.set(c.get().map(|n| n + new)));
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes `f` allocated on this thread.
fn allocated(f: impl FnOnce()) -> usize {
    COUNTED.with(|c| c.set(Some(0)));
    f();
    COUNTED.with(|c| c.replace(None)).unwrap_or(0)
}

const ENTRY: usize = 8 << 10;
const N: usize = 200;

#[test]
fn borrowed_appends_land_byte_for_byte_and_allocate_no_payload_buffer() {
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let entry = |i: usize| -> Vec<u8> { (0..ENTRY).map(|j| (i * 31 + j) as u8).collect() };
    let mut want = Vec::new();
    // Warm up: the I/O thread hands the buffers of these back to the pool.
    for i in 0..N {
        let p = entry(i);
        log.append(Epoch(0), &p, Durability::Durable).unwrap().wait().unwrap();
        want.push(((i + 1) as u64, p));
    }
    // Each append waits for its entry, so the buffer of the one before is back in the pool.
    let bodies: Vec<Vec<u8>> = (N..2 * N).map(entry).collect();
    let borrowed = allocated(|| {
        for p in &bodies {
            log.append(Epoch(0), p.as_slice(), Durability::Durable).unwrap().wait().unwrap();
        }
    });
    for (i, p) in bodies.into_iter().enumerate() {
        want.push(((N + i + 1) as u64, p));
    }
    // The same through `append_with` and `append_wait`.
    let bodies: Vec<Vec<u8>> = (N..2 * N).map(|i| entry(i + 7)).collect();
    let borrowed_with = allocated(|| {
        for (k, p) in bodies.iter().enumerate() {
            if k % 2 == 0 {
                log.append_with(Epoch(0), p.as_slice(), Durability::Durable, None).unwrap().wait().unwrap();
            } else {
                log.append_wait(Epoch(0), p.as_slice()).unwrap().wait().unwrap();
            }
        }
    });
    let base = want.len();
    for (i, p) in bodies.into_iter().enumerate() {
        want.push(((base + i + 1) as u64, p));
    }
    // Refusals (a stale epoch) copy nothing: they do not drain the pool.
    log.advance_epoch(Epoch(1)).unwrap().wait().unwrap();
    let p = entry(0);
    let refused = allocated(|| {
        for _ in 0..N {
            assert!(log.append(Epoch(0), p.as_slice(), Durability::Durable).is_err());
        }
    });
    let bodies: Vec<Vec<u8>> = (2 * N..3 * N).map(entry).collect();
    let owned = allocated(|| {
        for p in &bodies {
            log.append(Epoch(1), p.clone(), Durability::Durable).unwrap().wait().unwrap();
        }
    });
    let base = want.len();
    for (i, p) in bodies.into_iter().enumerate() {
        want.push(((base + i + 1) as u64, p));
    }
    // The other shapes: an array reference, a `&Vec`, a `Payload`.
    log.append(Epoch(1), b"array", Durability::Written).unwrap();
    let vec = b"vec".to_vec();
    log.append(Epoch(1), &vec, Durability::Written).unwrap();
    let last = log.append(Epoch(1), Payload::One(b"payload".to_vec()), Durability::Durable).unwrap();
    last.wait().unwrap();
    let base = want.len();
    for (k, p) in [&b"array"[..], b"vec", b"payload"].into_iter().enumerate() {
        want.push(((base + k + 1) as u64, p.to_vec()));
    }
    log.close().unwrap();
    assert_eq!(reopen(&st), want, "every entry at its LSN, byte for byte");
    // Owned: one payload buffer each (the clone), at least. Borrowed: tickets and channel
    // slots only, far less than one payload per entry.
    assert!(owned >= N * ENTRY, "owned appends allocated {owned} bytes: the counter counts nothing");
    for (how, bytes) in
        [("append", borrowed), ("append_with/append_wait", borrowed_with), ("refused", refused)]
    {
        assert!(
            bytes < N * ENTRY / 8,
            "{N} borrowed {how} of {ENTRY} bytes allocated {bytes} bytes (owned: {owned})"
        );
    }
}

#[test]
fn a_borrowed_slice_over_the_limit_is_refused_before_any_copy() {
    let st = MemStorage::new();
    let (wal, _) = wal::Wal::open_with(
        std::sync::Arc::new(st.clone()),
        wal::Options { segment_len_bytes: super::SEG, ..wal::Options::default() },
    )
    .unwrap();
    let max = wal.max_payload_bytes() as usize;
    let log = wal::AsyncWal::start(wal, AsyncOptions::default()).unwrap();
    let big = vec![7u8; max + 1];
    log.append(Epoch(0), b"kept", Durability::Durable).unwrap().wait().unwrap();
    let bytes = allocated(|| {
        for _ in 0..20 {
            let e = log.append(Epoch(0), big.as_slice(), Durability::Durable).unwrap_err();
            assert!(matches!(e, wal::Error::TooLarge { .. }), "append: {e}");
            let e = log.append_with(Epoch(0), &big, Durability::Written, None).unwrap_err();
            assert!(matches!(e, wal::Error::TooLarge { .. }), "append_with: {e}");
            let e = log.append_wait(Epoch(0), big.as_slice()).unwrap_err();
            assert!(matches!(e, wal::Error::TooLarge { .. }), "append_wait: {e}");
            let e = log.append_at(Epoch(0), wal::Lsn(2), big.as_slice(), Durability::Durable).unwrap_err();
            assert!(matches!(e, wal::Error::TooLarge { .. }), "append_at: {e}");
        }
    });
    // 80 refusals of a slice one byte over the limit: a single copy would allocate more than
    // all of them together may.
    assert!(bytes < max, "80 refusals allocated {bytes} bytes (a copy is {} bytes)", max + 1);
    // Nothing was consumed: the next append takes LSN 2, and the limit itself is accepted.
    let at_limit = vec![9u8; max];
    let t = log.append(Epoch(0), at_limit.as_slice(), Durability::Durable).unwrap();
    assert_eq!(t.lsn, wal::Lsn(2));
    t.wait().unwrap();
    log.close().unwrap();
    assert_eq!(reopen(&st), vec![(1, b"kept".to_vec()), (2, at_limit)]);
}

#[test]
fn borrowed_appends_from_many_threads_share_the_pool_and_land_byte_for_byte() {
    const THREADS: usize = 4;
    const EACH: usize = 150;
    let st = MemStorage::new();
    let log = std::sync::Arc::new(start(&st, AsyncOptions::default()));
    // Each entry names its thread and its index, so one landing in another's buffer shows.
    let entry = |t: usize, i: usize| -> Vec<u8> {
        let mut p = vec![(t * 64 + i % 64) as u8; ENTRY - 16];
        p.extend_from_slice(&(t as u64).to_le_bytes());
        p.extend_from_slice(&(i as u64).to_le_bytes());
        p
    };
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (log, barrier) = (log.clone(), barrier.clone());
            std::thread::spawn(move || {
                let bodies: Vec<Vec<u8>> = (0..2 * EACH).map(|i| entry(t, i)).collect();
                let mut landed = Vec::new();
                barrier.wait();
                // Warm up: the buffers these take come back to the shared pool.
                for p in &bodies[..EACH] {
                    let ticket = log.append(Epoch(0), p.as_slice(), Durability::Durable).unwrap();
                    landed.push((ticket.wait().unwrap().0, p.clone()));
                }
                let mut tickets = Vec::new();
                let bytes = allocated(|| {
                    for (i, p) in bodies[EACH..].iter().enumerate() {
                        // Every third without waiting: more than one buffer of this thread in
                        // flight at once.
                        let ticket = log.append(Epoch(0), p.as_slice(), Durability::Durable).unwrap();
                        if i % 3 == 0 {
                            tickets.push((ticket, i));
                        } else {
                            landed.push((ticket.wait().unwrap().0, p.clone()));
                        }
                    }
                });
                for (ticket, i) in tickets {
                    landed.push((ticket.wait().unwrap().0, bodies[EACH + i].clone()));
                }
                (landed, bytes)
            })
        })
        .collect();
    let mut want = Vec::new();
    for h in handles {
        let (landed, bytes) = h.join().unwrap();
        // Tickets, channel slots and the clones kept for the check above (one per entry,
        // counted: 2/3 of EACH entries), and no payload buffer per entry beyond those.
        let clones = (EACH - EACH / 3) * ENTRY;
        assert!(
            bytes < clones + EACH * ENTRY / 4,
            "{EACH} borrowed appends allocated {bytes} bytes beside {clones} of the test's own clones"
        );
        want.extend(landed);
    }
    log.close().unwrap();
    want.sort();
    let got = reopen(&st);
    assert_eq!(got.len(), THREADS * 2 * EACH);
    assert_eq!(got, want, "every entry at the LSN its ticket gave, byte for byte");
}

#[test]
fn a_borrowed_user_batch_is_one_group_copied_into_pooled_buffers() {
    const GROUP: usize = 8;
    let st = MemStorage::new();
    let log = start(&st, AsyncOptions::default());
    let entry = |i: usize| -> Vec<u8> { (0..ENTRY / 4).map(|j| (i * 13 + j) as u8).collect() };
    let mut want = Vec::new();
    let mut next = 1u64;
    let mut append_group = |bodies: &[Vec<u8>], want: &mut Vec<(u64, Vec<u8>)>| {
        let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        let t = log.append(Epoch(0), refs.as_slice(), Durability::Durable).unwrap();
        assert_eq!(t.lsn.0, next, "a group takes consecutive LSNs from the next one");
        t.wait().unwrap();
        for b in bodies {
            want.push((next, b.clone()));
            next += 1;
        }
    };
    // Warm up the pool with groups of the same shape.
    let batches: Vec<Vec<Vec<u8>>> =
        (0..N / GROUP).map(|g| (0..GROUP).map(|i| entry(g * GROUP + i)).collect()).collect();
    for b in &batches {
        append_group(b, &mut want);
    }
    let bytes = allocated(|| {
        for b in &batches {
            append_group(b, &mut want);
        }
    });
    // The test's own clones for `want` are counted too: one per entry.
    let clones = N / GROUP * GROUP * ENTRY / 4;
    assert!(
        bytes < clones + N * ENTRY / 4 / 8,
        "{N} entries in borrowed groups allocated {bytes} bytes beside {clones} of the test's clones"
    );
    // `&[Vec<u8>]` is the same shape; one entry too large refuses the whole group, uncopied.
    let owned: Vec<Vec<u8>> = vec![b"x".to_vec(), b"y".to_vec()];
    let t = log.append(Epoch(0), owned.as_slice(), Durability::Durable).unwrap();
    assert_eq!(t.lsn.0, next);
    t.wait().unwrap();
    want.extend([(next, b"x".to_vec()), (next + 1, b"y".to_vec())]);
    let big = vec![0u8; 1 << 20];
    let refused: &[&[u8]] = &[b"small", &big];
    assert!(matches!(log.append(Epoch(0), refused, Durability::Durable), Err(wal::Error::TooLarge { .. })));
    let empty: &[&[u8]] = &[];
    assert!(matches!(log.append(Epoch(0), empty, Durability::Durable), Err(wal::Error::InvalidArgument(_))));
    log.close().unwrap();
    assert_eq!(reopen(&st), want, "every entry of every group at its LSN, byte for byte");
    // On disk each group is one atomic group: every entry but its last says the group goes on.
    let (wal, _) = wal::Wal::open_with(
        std::sync::Arc::new(st.clone()),
        wal::Options { segment_len_bytes: super::SEG, ..wal::Options::default() },
    )
    .unwrap();
    let mut r = wal.replay().unwrap();
    let mut continues = Vec::new();
    while let Some(item) = r.next() {
        let item = item.unwrap();
        if item.kind == wal::ItemKind::Entry {
            continues.push(item.group_continues);
        }
    }
    let groups = 2 * (N / GROUP);
    let mut expect: Vec<bool> = (0..groups).flat_map(|_| (0..GROUP).map(|i| i + 1 < GROUP)).collect();
    expect.extend([true, false]);
    assert_eq!(continues, expect, "each borrowed batch is one group on disk");
}
