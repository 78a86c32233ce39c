//! Bulk writes (`Op::Write { bulk: true }`): the I/O thread marks a batch of `Written` entries
//! only, whose sync nobody waits for, and the file backend writes it in pieces (see
//! `WRITE_PIECE` in `storage/file.rs` for why); the bytes on disk are the same either way.

use std::io;
use std::sync::{Arc, Mutex};
use wal::storage::{complete, FileStorage, MemStorage, Op, Storage, Submission};
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Options, Wal};

#[test]
fn a_bulk_write_lands_whole_and_equal_to_a_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let st = FileStorage::new(dir.path(), true).unwrap();
    // Several pieces and a short last one, at an offset that is not a piece boundary.
    let data: Vec<u8> = (0..300_001u32).map(|i| (i * 7 + i / 511) as u8).collect();
    for (name, bulk) in [("bulk", true), ("plain", false)] {
        let f = st.open(name, true).unwrap();
        let (n, _) =
            complete(&st, 1, Op::Write { file: f, offset: 4096 + 3, data: data.clone(), bulk }).unwrap();
        assert_eq!(n, data.len() as u64, "{name}");
        st.close(f);
    }
    let bulk = std::fs::read(dir.path().join("bulk")).unwrap();
    let plain = std::fs::read(dir.path().join("plain")).unwrap();
    assert_eq!(bulk, plain);
    assert_eq!(&bulk[4099..], &data[..]);
    assert!(bulk[..4099].iter().all(|&b| b == 0));
}

/// Records the `bulk` flag of every write submitted.
#[derive(Debug)]
struct Recording {
    inner: MemStorage,
    writes: Mutex<Vec<bool>>,
}

impl Storage for Recording {
    wal::forward_storage!(inner: list, open, close, remove, rename, len, read_at, map, written_end,
        scan_window, reap, lock, prepare_file, prepare_file_reserved, recycle_file,
        recycle_file_reserved, concurrent_wait, wait);

    fn submit(&self, sub: Submission) -> io::Result<()> {
        if let Op::Write { bulk, .. } = &sub.op {
            self.writes.lock().unwrap().push(*bulk);
        }
        self.inner.submit(sub)
    }
}

#[test]
fn the_io_thread_marks_batches_of_written_entries_only_as_bulk() {
    let st = Arc::new(Recording { inner: MemStorage::new(), writes: Mutex::new(Vec::new()) });
    let (log, _) =
        Wal::open_with(st.clone(), Options { segment_len_bytes: 4 << 20, ..Options::default() }).unwrap();
    let log = AsyncWal::start(log, AsyncOptions::default()).unwrap();
    let take = || std::mem::take(&mut *st.writes.lock().unwrap());
    take();
    let mut last = None;
    for i in 0..2000u32 {
        last = Some(log.append(Epoch(0), i.to_le_bytes().repeat(64), Durability::Written).unwrap());
    }
    last.unwrap().wait_durable().unwrap();
    let written = take();
    assert!(!written.is_empty() && written.iter().all(|&b| b), "Written only: {written:?}");
    for i in 0..50u32 {
        log.append(Epoch(0), i.to_le_bytes().to_vec(), Durability::Durable).unwrap().wait().unwrap();
    }
    let durable = take();
    assert!(!durable.is_empty() && durable.iter().all(|&b| !b), "Durable: {durable:?}");
    log.close().unwrap();
}
