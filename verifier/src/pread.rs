//! The read side of the storage seam ([`Reader`]) over a log directory, reading with `pread`,
//! never through a map: an I/O error under a map is a SIGBUS, here it is an error the verifier
//! reports as IO_ERROR. It implements nothing of the write side, so it cannot create, write,
//! rename, remove or sync anything; a replay opens the log over it with `Wal::open_reader`.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use wal::storage::{FileId, LockGuard, Mapping, Reader};

/// Bytes a full scan reads at a time: small enough to stay in the CPU's cache while it is
/// walked, large enough that the read calls cost little.
pub const SCAN_WINDOW: usize = 1 << 20;

/// The next file handle, and the open files with the name each was opened by.
type OpenFiles = (FileId, HashMap<FileId, (File, String)>);

#[derive(Debug)]
pub struct ReadOnlyDir {
    dir: PathBuf,
    files: Mutex<OpenFiles>,
    /// The last whole file read, by name. Reading that file again gives these same bytes (an
    /// open walks the last segment and the replay that follows reads it again: once is enough,
    /// and both then see one version of a file a live writer may be appending to). Reading
    /// another file refills the buffer in place once its reader has let go of it: a scan then
    /// allocates (and page-faults) one segment's worth of memory, not one per segment.
    spare: Mutex<Option<(String, Arc<Vec<u8>>)>>,
}

impl ReadOnlyDir {
    pub fn new(dir: impl AsRef<Path>) -> Self {
        ReadOnlyDir {
            dir: dir.as_ref().to_path_buf(),
            files: Mutex::new((1, HashMap::new())),
            spare: Mutex::new(None),
        }
    }

    fn files(&self) -> MutexGuard<'_, OpenFiles> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<R>(&self, id: FileId, f: impl FnOnce(&File, &str) -> io::Result<R>) -> io::Result<R> {
        let files = self.files();
        let (file, name) =
            files.1.get(&id).ok_or_else(|| io::Error::other(format!("file handle {id} is not open")))?;
        f(file, name)
    }

    fn name_of(&self, id: FileId) -> io::Result<String> {
        self.with(id, |_, name| Ok(name.to_string()))
    }

    /// Reads the start of `file` into `out` (zeroed, untouched) a window at a time, copying only
    /// the pages that are not all zero; returns the bytes read (fewer if the file ended).
    fn read_nonzero(&self, file: FileId, out: &mut [u8]) -> io::Result<usize> {
        const PAGE: usize = 4096;
        let mut window = vec![0u8; SCAN_WINDOW.min(out.len())];
        let mut at = 0;
        for chunk in out.chunks_mut(SCAN_WINDOW) {
            let got = window.get_mut(..chunk.len()).unwrap_or_default();
            let n = self.read_at(file, at as u64, got)?;
            for (to, from) in chunk.chunks_mut(PAGE).zip(got.get(..n).unwrap_or_default().chunks(PAGE)) {
                if !wal::format::is_zero(from) {
                    to.get_mut(..from.len()).unwrap_or_default().copy_from_slice(from);
                }
            }
            at += n;
            if n < chunk.len() {
                break;
            }
        }
        Ok(at)
    }

    /// Whether a writer holds the directory lock right now (a live log).
    pub fn writer_holds_lock(&self) -> bool {
        // Never a FIFO's blocking open: a lock file that is not a regular file is no writer's.
        let lock = wal::format::LOCK_FILE_NAME;
        let Ok(f) = wal::storage::open_regular(&self.dir, lock, File::options().read(true), false) else {
            return false;
        };
        // Patiently: a child process being started holds the lock's descriptor for a moment.
        matches!(wal::storage::lock_patiently(&f, false), Err(std::fs::TryLockError::WouldBlock))
    }
}

impl Reader for ReadOnlyDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            if let Some(n) = e?.file_name().to_str() {
                names.push(n.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn open(&self, name: &str) -> io::Result<FileId> {
        // Only a regular file: a FIFO, device, socket, directory or symbolic link named like a
        // log file is refused with what it is, never read (wal::storage::NotRegularFile).
        let f = wal::storage::open_regular(&self.dir, name, File::options().read(true), false)?;
        let mut files = self.files();
        let id = files.0;
        files.0 += 1;
        files.1.insert(id, (f, name.to_string()));
        Ok(id)
    }

    fn close(&self, file: FileId) {
        self.files().1.remove(&file);
    }

    fn len(&self, file: FileId) -> io::Result<u64> {
        self.with(file, |f, _| Ok(f.metadata()?.len()))
    }

    fn not_regular(&self, name: &str) -> io::Result<Option<&'static str>> {
        wal::storage::not_regular_in(&self.dir, name)
    }

    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.with(file, |f, _| wal::storage::pread_full(f, offset, buf))
    }

    /// As the writer's storage says it (`SEEK_DATA`/`SEEK_HOLE`): a scan then skips a reserved
    /// segment's unused rest and a reserved spare instead of reading megabytes of zeros.
    fn written_end(&self, file: FileId) -> io::Result<u64> {
        self.with(file, |f, _| wal::storage::written_end(f, f.metadata()?.len()))
    }

    /// Reads the whole file with pread. A full scan reads segments in windows instead
    /// ([`Reader::scan_window`]), and classifies damage through windows too; this serves the
    /// rest (a replay, a segment that changed length during a scan, the whole-file checks of
    /// an unusual file). Memory is what the file holds, not
    /// its length: a new buffer is a zeroed allocation whose pages stay untouched where the
    /// file reads as zero (read a window at a time and copied page by page, skipping zero
    /// pages; past the written end, [`Reader::written_end`], nothing is read at all). So a
    /// damaged 1 GiB segment holding a few batches costs a few pages, not 1 GiB.
    fn map(&self, file: FileId) -> io::Result<Mapping> {
        let len = self.len(file)? as usize;
        let name = self.name_of(file)?;
        let written = usize::try_from(self.written_end(file)?).unwrap_or(usize::MAX).min(len);
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let reuse = match spare.take() {
            Some((n, b)) if n == name && b.len() == len => {
                *spare = Some((n, b.clone()));
                return Ok(Mapping::Shared(b));
            }
            // The previous file's buffer, if no reader holds it any more: its pages are
            // resident already, so it is read into directly.
            Some((_, b)) if b.len() == len => Arc::into_inner(b),
            _ => None,
        };
        let (buf, n) = match reuse {
            Some(mut b) => {
                let n = self.read_at(file, 0, b.get_mut(..written).unwrap_or_default())?;
                b.get_mut(written..).unwrap_or_default().fill(0);
                (b, n)
            }
            None => {
                let mut b = vec![0u8; len];
                let n = self.read_nonzero(file, b.get_mut(..written).unwrap_or_default())?;
                (b, n)
            }
        };
        if n < written {
            // The file shrank while we read it: hand out exactly what was read.
            let mut b = buf;
            b.truncate(n);
            return Ok(Mapping::Shared(Arc::new(b)));
        }
        let buf = Arc::new(buf);
        *spare = Some((name, buf.clone()));
        Ok(Mapping::Shared(buf))
    }

    /// A full scan streams each segment through one window-sized buffer: a window is walked
    /// while it is in cache, and memory stays one window (see `wal::scan_log_with`).
    fn scan_window(&self) -> Option<usize> {
        Some(SCAN_WINDOW)
    }

    /// A shared lock never blocks the verifier and never creates the lock file: a live writer
    /// is detected separately ([`ReadOnlyDir::writer_holds_lock`]) and reported as live.
    fn lock_shared(&self) -> io::Result<LockGuard> {
        Ok(LockGuard::new(Box::new(())))
    }
}
