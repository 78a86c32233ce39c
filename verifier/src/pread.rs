//! A read-only [`Storage`] over a log directory that reads with `pread`, never through a map:
//! an I/O error under a map is a SIGBUS, here it is an error the verifier reports as IO_ERROR.
//! It never creates, writes, renames, removes or syncs anything.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use wal::storage::{Completion, FileId, LockGuard, Mapping, Storage, Submission};

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
    spare: Mutex<Option<(String, Arc<[u8]>)>>,
}

fn read_only() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "the verifier never writes")
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

    /// Whether a writer holds the directory lock right now (a live log).
    pub fn writer_holds_lock(&self) -> bool {
        let Ok(f) = File::open(self.dir.join(wal::format::LOCK_FILE_NAME)) else { return false };
        // Patiently: a child process being started holds the lock's descriptor for a moment.
        matches!(wal::storage::lock_patiently(&f, false), Err(std::fs::TryLockError::WouldBlock))
    }
}

impl Storage for ReadOnlyDir {
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

    fn open(&self, name: &str, create_new: bool) -> io::Result<FileId> {
        if create_new {
            return Err(read_only());
        }
        let f = File::open(self.dir.join(name))?;
        let mut files = self.files();
        let id = files.0;
        files.0 += 1;
        files.1.insert(id, (f, name.to_string()));
        Ok(id)
    }

    fn close(&self, file: FileId) {
        self.files().1.remove(&file);
    }

    fn remove(&self, _: &str) -> io::Result<()> {
        Err(read_only())
    }

    fn rename(&self, _: &str, _: &str) -> io::Result<()> {
        Err(read_only())
    }

    fn len(&self, file: FileId) -> io::Result<u64> {
        self.with(file, |f, _| Ok(f.metadata()?.len()))
    }

    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.with(file, |f, _| wal::storage::pread_full(f, offset, buf))
    }

    /// As the writer's storage says it (`SEEK_DATA`/`SEEK_HOLE`): a scan then skips a reserved
    /// segment's unused rest and a reserved spare instead of reading megabytes of zeros.
    fn written_end(&self, file: FileId) -> io::Result<u64> {
        self.with(file, |f, _| wal::storage::written_end(f, f.metadata()?.len()))
    }

    /// Reads the whole file with pread: memory is one segment, never the log. A full scan reads
    /// segments in windows instead ([`Storage::scan_window`]); this serves the rest (a damaged
    /// segment's classification, the whole-file checks of an unusual file).
    fn map(&self, file: FileId) -> io::Result<Mapping> {
        let len = self.len(file)? as usize;
        let name = self.name_of(file)?;
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = match spare.take() {
            Some((n, b)) if n == name && b.len() == len => {
                *spare = Some((n, b.clone()));
                return Ok(Mapping::Bytes(b));
            }
            Some((_, b)) if b.len() == len => b,
            _ => Arc::from(vec![0u8; len]),
        };
        if Arc::get_mut(&mut buf).is_none() {
            // The previous segment is still being read: this one gets its own buffer.
            buf = Arc::from(vec![0u8; len]);
        }
        let Some(bytes) = Arc::get_mut(&mut buf) else { return Err(io::Error::other("buffer is shared")) };
        let n = self.read_at(file, 0, bytes)?;
        if n < len {
            // The file shrank while we read it: hand out exactly what was read.
            return Ok(Mapping::Bytes(Arc::from(bytes.get(..n).unwrap_or_default())));
        }
        *spare = Some((name, buf.clone()));
        Ok(Mapping::Bytes(buf))
    }

    /// A full scan streams each segment through one window-sized buffer: a window is walked
    /// while it is in cache, and memory stays one window (see `wal::scan_log_with`).
    fn scan_window(&self) -> Option<usize> {
        Some(SCAN_WINDOW)
    }

    fn submit(&self, _: Submission) -> io::Result<()> {
        Err(read_only())
    }

    fn reap(&self, _: &mut Vec<Completion>, _: bool) -> io::Result<()> {
        Err(read_only())
    }

    /// A shared lock never blocks the verifier and never creates the lock file: a live writer
    /// is detected separately ([`ReadOnlyDir::writer_holds_lock`]) and reported as live. An
    /// exclusive lock is a writer's, refused.
    fn lock(&self, exclusive: bool) -> io::Result<LockGuard> {
        if exclusive {
            return Err(read_only());
        }
        Ok(LockGuard::new(Box::new(())))
    }

    fn prepare_file(&self, _: &str, _: u64) -> io::Result<()> {
        Err(read_only())
    }
}
