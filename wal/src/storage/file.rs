//! Real files ([`Files`]): `pwrite`, `fdatasync`, directory fsync, `fallocate`, `flock`, memory
//! maps. [`FileStorage`], the portable backend, is them under the synchronous driver
//! (operations run at submission and their completions wait in a queue until reaped); the
//! io_uring backend submits their writes and syncs to the kernel instead.

use super::{not_regular_in, Blocking, FileId, LockGuard, Mapping, Reader, Synchronous, Writer};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Zero-fill writes go out in chunks of this size.
const ZERO_CHUNK: usize = 1 << 20;

/// Reads from `offset` until `buf` is full or the file ends (pread, retried on EINTR); returns
/// the bytes read.
pub fn pread_full(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let rest = buf.get_mut(got..).unwrap_or_default();
        match f.read_at(rest, offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The files of one log directory, as the blocking side of the seam.
#[derive(Debug)]
pub struct Files {
    dir: PathBuf,
    files: Mutex<HashMap<FileId, Arc<File>>>,
    next_id: Mutex<FileId>,
}

/// The portable backend: real files under the synchronous driver.
pub type FileStorage = Synchronous<Files>;

impl FileStorage {
    /// Uses `dir` as the log directory, creating it if `create` is set.
    pub fn new(dir: impl AsRef<Path>, create: bool) -> io::Result<Self> {
        Ok(Synchronous::drive(Files::new(dir, create)?))
    }

    /// [`FileStorage::new`] with a sync thread: each `SyncData` runs there, and its completion
    /// is reaped (or waited for) like an io_uring one.
    pub fn with_sync_thread(dir: impl AsRef<Path>, create: bool) -> io::Result<Self> {
        Synchronous::drive_with_sync_thread(Files::new(dir, create)?)
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        self.inner().dir()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned mutex only means another thread panicked while holding it; the data (a map of
    // handles or a queue) stays consistent, so carry on rather than cascade the panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Files {
    /// Uses `dir` as the log directory, creating it if `create` is set.
    pub fn new(dir: impl AsRef<Path>, create: bool) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if create {
            create_dir_durable(&dir)?;
        }
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("log directory {} does not exist", dir.display()),
            ));
        }
        Ok(Files { dir, files: Mutex::new(HashMap::new()), next_id: Mutex::new(1) })
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn file(&self, id: FileId) -> io::Result<Arc<File>> {
        lock(&self.files)
            .get(&id)
            .cloned()
            .ok_or_else(|| io::Error::other(format!("file handle {id} is not open")))
    }

    /// Opens `name` with `o` (regular files only: a FIFO named like a segment would block the
    /// first read) and gives it a handle.
    fn open_with(&self, name: &str, o: &mut OpenOptions, create_new: bool) -> io::Result<FileId> {
        let f = super::open_regular(&self.dir, name, o, create_new)?;
        let mut next = lock(&self.next_id);
        let id = *next;
        *next += 1;
        lock(&self.files).insert(id, Arc::new(f));
        Ok(id)
    }

    fn lock(&self, exclusive: bool) -> io::Result<LockGuard> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true).truncate(false);
        let f = super::open_regular(&self.dir, crate::format::LOCK_FILE_NAME, &mut o, false)?;
        match lock_patiently(&f, exclusive) {
            Ok(()) => Ok(LockGuard::new(Box::new(f))),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by another process", self.dir.display()),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// fsync of the log directory: what makes a created, renamed or removed name durable.
///
/// The test-only `mutant-no-dir-sync` skips it, so that the power-loss suite (`powerloss/`) shows
/// it catches a name that an acknowledgement relied on and a crash took away.
fn sync_dir(dir: &Path) -> io::Result<()> {
    if crate::mutants::on("no-dir-sync") {
        return Ok(());
    }
    File::open(dir)?.sync_all()
}

/// Creates `dir` and any missing parents, each made durable in its parent (the parent fsynced
/// after the `mkdir`), so that a log acknowledged after its first creation cannot lose its
/// directory to a power loss. ext4 and xfs happen to commit a `mkdir` with the next fsync of
/// anything in the file system (one journal), which hides the gap; POSIX promises nothing of the
/// kind, and other file systems do not. A `dir` that exists is left as it is.
pub fn create_dir_durable(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    // Bounded by the path's depth.
    while !at.as_os_str().is_empty() && std::fs::symlink_metadata(at).is_err() {
        missing.push(at);
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {}
            // Another process made it meanwhile: it is its creator's to make durable, and the
            // sync below covers it too.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(parent)?;
    }
    Ok(())
}

/// How long a lock found taken is tried again before it counts as another process's.
pub const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(250);

/// Takes `f`'s lock (exclusive or shared) without blocking, trying again for up to
/// [`LOCK_PATIENCE`] while it is taken. A child process that this one starts holds a copy of
/// every descriptor, the lock's among them, from its fork until its exec: a log closed while
/// a child was being started stays locked for that long (a test's reopen met it under load).
/// A writer in another process holds it for good, and is reported after the wait.
pub fn lock_patiently(f: &File, exclusive: bool) -> Result<(), std::fs::TryLockError> {
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        let r = if exclusive { f.try_lock() } else { f.try_lock_shared() };
        match r {
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

#[derive(Clone, Copy)]
enum Fallocate {
    Reserve,
}

/// `fallocate` over `0..len`; Ok(false) where the file system or the OS has no such call.
#[cfg(target_os = "linux")]
fn fallocate(f: &File, how: Fallocate, len: u64) -> io::Result<bool> {
    use rustix::fs::FallocateFlags;
    let flags = match how {
        Fallocate::Reserve => FallocateFlags::empty(),
    };
    match rustix::fs::fallocate(f, flags, 0, len) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(target_os = "linux"))]
fn fallocate(_f: &File, _how: Fallocate, _len: u64) -> io::Result<bool> {
    Ok(false)
}

/// The most data extents [`written_end`] follows before it gives up (answering the length).
const MAX_EXTENTS: usize = 64;

/// The end of the last extent of `f` (length `len`) that holds written data, by
/// `SEEK_DATA`/`SEEK_HOLE`; `len` where the file system or the OS cannot say, or the file has
/// more than `MAX_EXTENTS` of them. A file system may report data where there are only zeros
/// (ext4 counts an unwritten block whose zero page is cached as data), never the reverse.
#[cfg(target_os = "linux")]
pub fn written_end(f: &File, len: u64) -> io::Result<u64> {
    use rustix::fs::{seek, SeekFrom};
    let mut end = 0;
    for _ in 0..MAX_EXTENTS {
        let data = match seek(f, SeekFrom::Data(end)) {
            Ok(d) => d,
            // No data at or after `end`.
            Err(rustix::io::Errno::NXIO) => return Ok(end),
            Err(_) => return Ok(len),
        };
        match seek(f, SeekFrom::Hole(data)) {
            Ok(hole) if hole > data && hole < len => end = hole,
            _ => return Ok(len),
        }
    }
    Ok(len)
}

#[cfg(not(target_os = "linux"))]
pub fn written_end(_f: &File, len: u64) -> io::Result<u64> {
    Ok(len)
}

impl Reader for Files {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            if let Some(n) = e.file_name().to_str() {
                names.push(n.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn not_regular(&self, name: &str) -> io::Result<Option<&'static str>> {
        not_regular_in(&self.dir, name)
    }

    fn open(&self, name: &str) -> io::Result<FileId> {
        self.open_with(name, OpenOptions::new().read(true).write(true), false)
    }

    fn close(&self, file: FileId) {
        lock(&self.files).remove(&file);
    }

    fn len(&self, file: FileId) -> io::Result<u64> {
        Ok(self.file(file)?.metadata()?.len())
    }

    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        pread_full(&*self.file(file)?, offset, buf)
    }

    fn map(&self, file: FileId) -> io::Result<Mapping> {
        let f = self.file(file)?;
        if f.metadata()?.len() == 0 {
            return Ok(Mapping::Empty);
        }
        // SAFETY: the map is read-only and the log never shrinks a segment file while it exists:
        // truncation is logical (a record), purge unlinks whole files (an unlinked file's pages stay
        // valid for existing maps), and tail repair overwrites bytes with zeros without changing the
        // length. Another process could still shrink the file; the directory lock excludes other
        // writers, and the verifier reads with pread, never through a map.
        let m = unsafe { memmap2::Mmap::map(&*f)? };
        Ok(Mapping::Mmap(m))
    }

    fn written_end(&self, file: FileId) -> io::Result<u64> {
        let f = self.file(file)?;
        written_end(&f, f.metadata()?.len())
    }

    fn lock_shared(&self) -> io::Result<LockGuard> {
        self.lock(false)
    }
}

impl Writer for Files {
    fn create(&self, name: &str) -> io::Result<FileId> {
        self.open_with(name, OpenOptions::new().read(true).write(true).create_new(true), true)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn lock_exclusive(&self) -> io::Result<LockGuard> {
        self.lock(true)
    }

    fn write_at(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<usize> {
        self.file(file)?.write_at(data, offset)
    }

    fn sync_data(&self, file: FileId) -> io::Result<()> {
        self.file(file)?.sync_data()
    }

    fn sync_dir(&self) -> io::Result<()> {
        sync_dir(&self.dir)
    }

    fn zero_fill(&self, file: FileId, len: u64) -> io::Result<()> {
        let f = self.file(file)?;
        let zeros = vec![0u8; ZERO_CHUNK];
        let mut at = f.metadata()?.len();
        while at < len {
            let n = ((len - at) as usize).min(ZERO_CHUNK);
            f.write_all_at(zeros.get(..n).unwrap_or_default(), at)?;
            at += n as u64;
        }
        Ok(())
    }

    fn reserve(&self, file: FileId, len: u64) -> io::Result<bool> {
        fallocate(&*self.file(file)?, Fallocate::Reserve, len)
    }

    #[cfg(target_os = "linux")]
    fn drop_cached(&self, file: FileId, offset: u64, len: u64) -> io::Result<()> {
        use rustix::fs::{fadvise, Advice};
        Ok(fadvise(&*self.file(file)?, offset, std::num::NonZeroU64::new(len), Advice::DontNeed)?)
    }
}

impl Blocking for Files {
    fn sync_job(&self, file: FileId) -> io::Result<Box<dyn FnOnce() -> io::Result<()> + Send>> {
        let f = self.file(file)?;
        Ok(Box::new(move || f.sync_data()))
    }
}

#[cfg(test)]
mod tests {
    use super::create_dir_durable;

    #[test]
    fn a_log_directory_is_created_with_its_missing_parents() {
        let t = tempfile::tempdir().unwrap();
        let deep = t.path().join("a/b/c");
        create_dir_durable(&deep).unwrap();
        assert!(deep.is_dir());
        // Again: an existing directory is left as it is.
        std::fs::write(deep.join("keep"), b"x").unwrap();
        create_dir_durable(&deep).unwrap();
        assert_eq!(std::fs::read(deep.join("keep")).unwrap(), b"x");
    }

    #[test]
    fn a_path_through_a_file_is_an_error_and_creates_nothing() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("file"), b"").unwrap();
        let e = create_dir_durable(&t.path().join("file/log")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        // A name that exists as a file is not made a directory and not reported as one.
        create_dir_durable(&t.path().join("file")).unwrap();
        assert!(t.path().join("file").is_file());
    }
}
