//! Segment preparation and recycling: engine code over the blocking side of the seam
//! ([`Writer`]), the same for every backend. Both run to the end before they return (on the
//! writer's thread or on the background thread that prepares the next segment) and never touch
//! the completion queue, and both leave nothing behind when they fail.

use super::{write_all_at, FileId, Writer};
use std::io;

/// Creates `name` (it must not exist) as `len` zero bytes, syncs it and the directory, all before
/// returning; on failure nothing of it stays. With `reserve` the blocks may be reserved
/// ([`Writer::reserve`]) rather than written: reads give zeros either way, and a crash leaves
/// the same two outcomes per sector, so the format cannot tell them apart. What differs is the
/// cost: a reserved file costs no writeback now, but each fdatasync that covers fresh blocks
/// also commits the file system's journal (measured here: 0.59x the syncs/s of a written file).
/// The log asks for it only when its syncs each flush so much that writing the zeros would cost
/// more than those journal commits.
pub fn prepare_file(w: &dyn Writer, name: &str, len: u64, reserve: bool) -> io::Result<()> {
    let f = w.create(name)?;
    let r = (|| {
        if !(reserve && w.reserve(f, len)?) {
            w.zero_fill(f, len)?;
        }
        w.sync_data(f)
    })();
    w.close(f);
    let r = r.and_then(|()| w.sync_dir());
    if r.is_err() {
        forget(w, &[name]);
    }
    r
}

/// Turns `from`, a file of `len` bytes that a purge set aside, into the new segment file `name`:
/// makes `writes` (offset, bytes: its zeroed header sector, its stale table, its zeroed footer
/// slot, [`crate::stale::recycling_writes`]), syncs it, renames it to `name` and syncs the
/// directory, all before returning (so `name` is never seen as anything but a recycled spare).
/// The rest of the old contents stay: the stale table tells them from what a batch writes
/// (FORMAT.md section 2.2). Overwriting blocks and page-cache pages that exist costs less than
/// allocating new ones (README, "Why the throughput rows fell short"). On failure neither
/// `from` nor `name` stays.
pub fn recycle_file(
    w: &dyn Writer,
    from: &str,
    name: &str,
    len: u64,
    writes: &[(u64, Vec<u8>)],
) -> io::Result<()> {
    recycle_file_with(w, from, name, len, |_| Ok(writes))
}

/// [`recycle_file`] with writes made of the old contents (the stale table is): `writes` is
/// called with `from` open and its length checked, and may read it (through the same storage)
/// before anything is written. So the file is opened, and its length checked, once per
/// recycling. A failure of `writes` is a failed recycling like any other: neither name stays.
pub fn recycle_file_with<W: AsRef<[(u64, Vec<u8>)]>>(
    w: &dyn Writer,
    from: &str,
    name: &str,
    len: u64,
    writes: impl FnOnce(FileId) -> io::Result<W>,
) -> io::Result<()> {
    let r = (|| {
        let f = w.open(from)?;
        let r = (|| {
            let have = w.len(f)?;
            if have != len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{from} holds {have} bytes, a segment {len}"),
                ));
            }
            for (at, bytes) in writes(f)?.as_ref() {
                write_all_at(w, f, *at, bytes)?;
            }
            w.sync_data(f)
        })();
        w.close(f);
        r?;
        w.rename(from, name)?;
        w.sync_dir()
    })();
    if r.is_err() {
        forget(w, &[from, name]);
    }
    r
}

/// Removes what a failed preparation left and syncs the directory, as far as it can: the
/// failure being reported is the one that matters, and a leftover's name says what it is to
/// the next open (FORMAT.md section 1): a `{seq}.wal` after the last segment holding records
/// is a spare, taken as it is or, of another length (a fill the crash lost), removed and made
/// again when the log comes to use it; a `{seq}.recycle` is set aside again or removed. A
/// live writer that never learnt of a `{seq}.wal` left so removes it when it comes to make that
/// segment (`log/segments.rs`, `create_segment`).
fn forget(w: &dyn Writer, names: &[&str]) {
    for n in names {
        let _ = w.remove(n);
    }
    let _ = w.sync_dir();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{FileId, FileStorage, Mapping, Reader};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Files whose next fdatasync fails when `fail_sync` is set, and whose next write is
    /// interrupted by a signal (EINTR, nothing written) when `interrupt` is.
    #[derive(Debug)]
    struct FailingSync {
        inner: FileStorage,
        fail_sync: AtomicBool,
        interrupt: AtomicBool,
    }

    impl Reader for FailingSync {
        crate::storage::forward_storage!(inner: list, open, close, len, read_at, map, written_end, lock_shared);
    }

    impl Writer for FailingSync {
        crate::storage::forward_storage!(inner: create, remove, rename, lock_exclusive, sync_dir, zero_fill, reserve);
        fn write_at(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<usize> {
            if self.interrupt.swap(false, Ordering::Relaxed) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            self.inner.write_at(file, offset, data)
        }
        fn sync_data(&self, file: FileId) -> io::Result<()> {
            if self.fail_sync.swap(false, Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(5));
            }
            self.inner.sync_data(file)
        }
    }

    fn storage() -> (tempfile::TempDir, FailingSync) {
        let d = tempfile::tempdir().unwrap();
        let inner = FileStorage::new(d.path(), false).unwrap();
        (d, FailingSync { inner, fail_sync: AtomicBool::new(false), interrupt: AtomicBool::new(false) })
    }

    fn bytes(w: &dyn Writer, name: &str) -> Vec<u8> {
        let f = w.open(name).unwrap();
        let m: Mapping = w.map(f).unwrap();
        w.close(f);
        m.to_vec()
    }

    #[test]
    fn a_prepared_file_is_its_length_of_zeros_written_or_reserved() {
        let (_d, w) = storage();
        for (name, reserve) in [("a", false), ("b", true)] {
            prepare_file(&w, name, 64 << 10, reserve).unwrap();
            let b = bytes(&w, name);
            assert_eq!(b.len(), 64 << 10, "{name}");
            assert!(b.iter().all(|&x| x == 0), "{name}");
        }
        // An existing name is refused and left as it is.
        let e = prepare_file(&w, "a", 4096, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(bytes(&w, "a").len(), 64 << 10);
    }

    #[test]
    fn a_failed_preparation_leaves_no_file() {
        let (_d, w) = storage();
        w.fail_sync.store(true, Ordering::Relaxed);
        let e = prepare_file(&w, "a", 64 << 10, false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        assert_eq!(w.list().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn recycling_makes_the_writes_keeps_the_rest_and_renames() {
        let (_d, w) = storage();
        let f = w.create("old").unwrap();
        crate::storage::write_all_at(&w, f, 0, &[7u8; 8192]).unwrap();
        w.close(f);
        // A write a signal interrupts is made again.
        w.interrupt.store(true, Ordering::Relaxed);
        recycle_file(&w, "old", "new", 8192, &[(0, vec![0; 512]), (4096, vec![1; 16])]).unwrap();
        assert!(!w.interrupt.load(Ordering::Relaxed));
        assert_eq!(w.list().unwrap(), ["new"]);
        let b = bytes(&w, "new");
        assert!(b[..512].iter().all(|&x| x == 0));
        assert!(b[512..4096].iter().all(|&x| x == 7), "what was not written stays");
        assert!(b[4096..4112].iter().all(|&x| x == 1));
        assert!(b[4112..].iter().all(|&x| x == 7));
    }

    #[test]
    fn a_failed_recycling_leaves_neither_name() {
        let (_d, w) = storage();
        // A file of another length than the segment's.
        let f = w.create("old").unwrap();
        crate::storage::write_all_at(&w, f, 0, &[7u8; 4096]).unwrap();
        w.close(f);
        let e = recycle_file(&w, "old", "new", 8192, &[]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert_eq!(w.list().unwrap(), Vec::<String>::new());
        // A sync that fails.
        let f = w.create("old").unwrap();
        crate::storage::write_all_at(&w, f, 0, &[7u8; 8192]).unwrap();
        w.close(f);
        w.fail_sync.store(true, Ordering::Relaxed);
        recycle_file(&w, "old", "new", 8192, &[(0, vec![0; 512])]).unwrap_err();
        assert_eq!(w.list().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn recycling_makes_its_writes_of_the_old_contents_after_the_length_check() {
        let (_d, w) = storage();
        let old = |w: &FailingSync| {
            let f = w.create("old").unwrap();
            crate::storage::write_all_at(w, f, 0, &[7u8; 8192]).unwrap();
            w.close(f);
        };
        // Of another length: `writes` is never called, and neither name stays.
        old(&w);
        let e = recycle_file_with(&w, "old", "new", 4096, |_| -> io::Result<Vec<(u64, Vec<u8>)>> {
            panic!("called before the length check")
        })
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert_eq!(w.list().unwrap(), Vec::<String>::new());
        // `writes` reads the old contents through the handle it is given.
        old(&w);
        recycle_file_with(&w, "old", "new", 8192, |f| {
            let mut b = [0u8; 4];
            assert_eq!(w.read_at(f, 100, &mut b)?, 4);
            Ok(vec![(0, b.iter().map(|x| x + 1).collect::<Vec<u8>>())])
        })
        .unwrap();
        assert_eq!(bytes(&w, "new")[..5], [8, 8, 8, 8, 7]);
        // A `writes` that fails is a failed recycling: neither name stays.
        old(&w);
        let e = recycle_file_with(&w, "old", "new2", 8192, |_| -> io::Result<Vec<(u64, Vec<u8>)>> {
            Err(io::Error::from_raw_os_error(5))
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        assert_eq!(w.list().unwrap(), ["new"]);
    }
}
