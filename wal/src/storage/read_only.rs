//! [`ReadOnly`]: a [`Reader`] as the [`Storage`](super::Storage) of a read-only open
//! ([`crate::Wal::open_reader`]), so that a reader implements only the read side.

use super::{Bell, Completion, Completions, FileId, LockGuard, Reader, Submission, Writer};
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// A reader behind the log handle of a read-only open. A read-only open makes no write, so the
/// write side is never called; if a bug ever did, the call is refused here, before any backend
/// sees it.
#[derive(Debug)]
pub(crate) struct ReadOnly {
    reader: Arc<dyn Reader>,
}

impl ReadOnly {
    pub(crate) fn new(reader: Arc<dyn Reader>) -> Self {
        ReadOnly { reader }
    }
}

fn refused() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "the log was opened read-only")
}

impl Reader for ReadOnly {
    crate::storage::forward_storage!(reader: list, not_regular, open, close, len, read_at, map, written_end, scan_window, lock_shared);
}

impl Writer for ReadOnly {
    fn create(&self, _: &str) -> io::Result<FileId> {
        Err(refused())
    }
    fn remove(&self, _: &str) -> io::Result<()> {
        Err(refused())
    }
    fn rename(&self, _: &str, _: &str) -> io::Result<()> {
        Err(refused())
    }
    fn lock_exclusive(&self) -> io::Result<LockGuard> {
        Err(refused())
    }
    fn write_at(&self, _: FileId, _: u64, _: &[u8]) -> io::Result<usize> {
        Err(refused())
    }
    fn sync_data(&self, _: FileId) -> io::Result<()> {
        Err(refused())
    }
    fn sync_dir(&self) -> io::Result<()> {
        Err(refused())
    }
    fn zero_fill(&self, _: FileId, _: u64) -> io::Result<()> {
        Err(refused())
    }
}

impl Completions for ReadOnly {
    fn submit(&self, _: Submission) -> io::Result<()> {
        Err(refused())
    }
    fn reap(&self, _: &mut Vec<Completion>, _: bool) -> io::Result<()> {
        Err(refused())
    }
    fn wait(&self, bell: &Arc<Bell>, timeout: Option<Duration>) -> io::Result<()> {
        bell.wait(timeout);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{complete, FileStorage, Op};

    #[test]
    fn the_write_side_of_a_reader_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"kept").unwrap();
        let ro = ReadOnly::new(Arc::new(FileStorage::new(d.path(), false).unwrap()));
        let f = ro.open("f").unwrap();
        let denied = |r: io::Result<()>| assert_eq!(r.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        denied(ro.create("g").map(drop));
        denied(ro.remove("f"));
        denied(ro.rename("f", "g"));
        denied(ro.lock_exclusive().map(drop));
        denied(ro.write_at(f, 0, b"x").map(drop));
        denied(ro.sync_data(f));
        denied(ro.sync_dir());
        denied(ro.zero_fill(f, 4096));
        denied(complete(&ro, 1, Op::Write { file: f, offset: 0, data: b"x".to_vec() }).map(drop));
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"kept");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
