//! The storage seam: every byte the log reads or writes goes through it. It has three sides, so
//! that each user implements or holds only what it needs:
//!
//! - [`Reader`]: listing, opening and reading files, and the shared lock. A scan, a replay and
//!   a read-only open need nothing else; the verifier's read-only directory implements only
//!   this.
//! - [`Writer`] (a `Reader` too): creating, removing and renaming names, the exclusive lock, and
//!   blocking writes and syncs. Segment preparation and recycling ([`prepare`]), the metadata
//!   files and repairs are engine code over it.
//! - [`Completions`]: writes, syncs and zero-fills *submitted* with a token and their results
//!   *reaped* later, possibly out of order and possibly short, which is what io_uring does; the
//!   I/O thread keeps an fdatasync in flight this way while it writes the next batch. A backend
//!   that completes asynchronously implements it; one whose operations block gets it from the
//!   synchronous driver, [`Synchronous`]. The synchronous path ([`complete`]) submits one
//!   operation and reaps until its token comes back, resubmitting the rest of a short write;
//!   [`complete_keeping`] does the same while other operations are in flight, keeping their
//!   completions aside. A thread that waits for work and completions together sleeps in
//!   [`Completions::wait`] on a [`Bell`] that whoever hands it work rings.
//!
//! A writable log runs on a [`Storage`]: a `Writer` with `Completions`. Backends:
//!
//! - [`FileStorage`]: real files in a directory (`Files`: `pwrite`, `fdatasync`, directory
//!   fsync, `fallocate`, `flock`) under the synchronous driver, optionally with a sync thread
//!   that runs each fdatasync so the submitter can write the next batch meanwhile (the portable
//!   backend);
//! - `UringStorage` (Linux): the same files, with writes and fdatasyncs submitted through
//!   io_uring and reaped as they complete;
//! - `wal_sim::MemStorage` (the test-only crate `wal/sim`): in memory, with a durable image
//!   beside the live one, crash images at sector granularity, and injected faults (failed
//!   syncs, short writes, reordered and deferred completions, disk full). It exists for tests,
//!   not as a product backend.

mod bell;
mod file;
mod file_kind;
mod forward;
#[cfg(feature = "internal")]
pub use crate::forward_storage;
#[cfg(not(feature = "internal"))]
pub(crate) use forward::forward_storage;
pub mod prepare;
mod read_only;
mod synchronous;
#[cfg(target_os = "linux")]
mod uring;

pub use bell::Bell;
pub use file::{
    create_dir_durable, lock_patiently, pread_full, written_end, FileStorage, Files, LOCK_PATIENCE,
};
pub use file_kind::{not_regular, not_regular_in, open_regular, NotRegularFile};
pub(crate) use read_only::ReadOnly;
pub use synchronous::{run_blocking, Blocking, Job, Ready, SyncThread, Synchronous};
#[cfg(target_os = "linux")]
pub use uring::UringStorage;

use std::fmt;
use std::io;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// An open file of a backend. Handles are never reused within one backend.
pub type FileId = u64;

/// An operation submitted to a backend.
#[derive(Debug)]
pub enum Op {
    /// Write `data` at `offset`. The completion carries the bytes written, which may be fewer.
    Write { file: FileId, offset: u64, data: Vec<u8> },
    /// `fdatasync`: durable are exactly the writes whose completions were reaped before submission.
    SyncData { file: FileId },
    /// fsync of the log directory: makes created, renamed and removed names durable.
    SyncDir,
    /// Extend the file to `len` bytes by writing zeros (real blocks, not holes: see limits.md).
    ZeroFill { file: FileId, len: u64 },
}

/// One submitted operation and the token its completion will carry.
#[derive(Debug)]
pub struct Submission {
    pub token: u64,
    pub op: Op,
}

/// The result of one submitted operation.
#[derive(Debug)]
pub struct Completion {
    pub token: u64,
    /// Bytes written for `Write` (possibly short); 0 for the others.
    pub result: io::Result<u64>,
    /// A `Write`'s buffer, handed back for reuse or for resubmitting the rest of a short write.
    pub buf: Option<Vec<u8>>,
}

/// Read-only bytes of a whole file: a memory map for real files, a shared copy in memory.
pub enum Mapping {
    /// A read-only memory map of a real file.
    Mmap(memmap2::Mmap),
    /// A copy shared with the backend (the simulator's file contents).
    Bytes(Arc<[u8]>),
    /// A copy read into a zeroed allocation: the pages nothing was copied into (zeros the
    /// reader skipped, a file's unwritten rest) are never touched, so they cost no memory.
    /// (An `Arc<[u8]>` made from such a `Vec` would copy, touching every page.)
    Shared(Arc<Vec<u8>>),
    /// An empty file (a zero-length map is an error on Linux).
    Empty,
}

impl Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapping::Mmap(m) => m,
            Mapping::Bytes(b) => b,
            Mapping::Shared(v) => v,
            Mapping::Empty => &[],
        }
    }
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mapping({} bytes)", self.len())
    }
}

/// Held while a process uses the log directory; dropping it releases the lock.
pub struct LockGuard(#[allow(dead_code)] Box<dyn Send + Sync>);

impl LockGuard {
    /// A guard that holds whatever `inner` is (a locked file, a simulator's lock entry) until
    /// it is dropped.
    pub fn new(inner: Box<dyn Send + Sync>) -> Self {
        LockGuard(inner)
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockGuard")
    }
}

/// The read side of the seam: naming, opening and reading the files of a log directory. It is
/// all a reader needs (the verifier implements only this, `verifier::pread::ReadOnlyDir`), and
/// all a scan, a replay or a read-only open (`Wal::open_reader`, for the workspace) calls.
pub trait Reader: Send + Sync + fmt::Debug {
    /// Names of the files in the log directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// What `name` is when it is not a regular file in the log directory (its entry, not what a
    /// symbolic link points to: "a FIFO", "a symbolic link to a regular file", ...), looked at
    /// without opening it; `None` for a regular file or no file at all. The default, for a
    /// storage that holds only regular files, is `None`. A scan refuses such a file before
    /// anything reads it (`log_files`); `open` refuses it too (with
    /// [`NotRegularFile`]), whatever this says.
    fn not_regular(&self, name: &str) -> io::Result<Option<&'static str>> {
        let _ = name;
        Ok(None)
    }
    /// Opens the existing file `name` (for writing too, on a backend that also implements
    /// [`Writer`]).
    fn open(&self, name: &str) -> io::Result<FileId>;
    /// Closes a file opened or created here; its id is not used again.
    fn close(&self, file: FileId);
    /// The file's length in bytes.
    fn len(&self, file: FileId) -> io::Result<u64>;
    /// Positional read; returns the bytes read (0 at end of file).
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Maps the whole file read-only. The log never shrinks a file, so a map stays valid.
    fn map(&self, file: FileId) -> io::Result<Mapping>;
    /// Where what was ever written to the file ends: every byte from the returned offset to
    /// the end reads as zero because nothing was written there (a hole, or blocks reserved
    /// with `fallocate` and never written, as the file system reports them). The file's
    /// length when the storage cannot tell, the default. An open uses it to skip checking
    /// zeros that reading would make the kernel allocate and clear page by page (a reserved
    /// segment's unused rest, a spare), which cost more than the walk of the data itself.
    fn written_end(&self, file: FileId) -> io::Result<u64> {
        self.len(file)
    }
    /// How a full scan should read a segment: `None` (the default) maps it whole; `Some(n)`
    /// streams it through one reused buffer with [`Reader::read_at`], about `n` bytes a read,
    /// walking each window while it is in the CPU's cache (a backend whose `map` copies).
    fn scan_window(&self) -> Option<usize> {
        None
    }
    /// Takes the directory's lock shared (readers), failing at once with `WouldBlock` while a
    /// writer holds it. A reader that must read a live log without waiting may hand out a guard
    /// that locks nothing, provided it finds a live writer another way and says so (the
    /// verifier's pread directory does: it reports the log as live).
    fn lock_shared(&self) -> io::Result<LockGuard>;
}

/// The directory and blocking write side: creating, removing and renaming names, and the
/// synchronous writes and syncs that segment preparation and recycling (`storage::prepare`), the
/// metadata files and repairs make. Each call has run (or failed) when it returns.
pub trait Writer: Reader {
    /// Creates `name`, which must not exist yet, for reading and writing.
    fn create(&self, name: &str) -> io::Result<FileId>;
    /// Removes a name (durable only after [`Writer::sync_dir`]).
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Atomically replaces `to` with `from` (durable only after [`Writer::sync_dir`]).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Takes the directory's lock exclusive (the one writer), failing at once with
    /// `WouldBlock` while anyone holds it.
    fn lock_exclusive(&self) -> io::Result<LockGuard>;
    /// Positional write; returns the bytes written, which may be fewer (the caller writes the
    /// rest: [`write_all_at`]).
    fn write_at(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<usize>;
    /// `fdatasync`: makes the file's written bytes durable.
    fn sync_data(&self, file: FileId) -> io::Result<()>;
    /// fsync of the log directory: makes created, renamed and removed names durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Extends the file to `len` bytes by writing zeros (real blocks, not holes).
    fn zero_fill(&self, file: FileId, len: u64) -> io::Result<()>;
    /// Makes the file `len` bytes of reserved blocks that read as zeros (`fallocate`) and says
    /// `true`, or says `false` where the storage cannot (the default) and the caller writes
    /// the zeros. A real error, such as no space, is returned as it is.
    fn reserve(&self, file: FileId, len: u64) -> io::Result<bool> {
        let _ = (file, len);
        Ok(false)
    }
    /// Lets the OS drop the cached pages of `len` bytes of the file from `offset` (0: to its
    /// end) (`posix_fadvise(POSIX_FADV_DONTNEED)`), called once everything in the file is
    /// durable. A hint: pages still dirty or mapped stay, reads
    /// still see every byte (from the disk), and the caller ignores a failure. The default
    /// does nothing.
    fn drop_cached(&self, file: FileId, offset: u64, len: u64) -> io::Result<()> {
        let _ = (file, offset, len);
        Ok(())
    }
}

/// The asynchronous write side: writes, syncs and zero-fills *submitted* with a token, their
/// completions *reaped* later, possibly out of order and possibly short. A backend that
/// completes asynchronously implements it (io_uring, the simulator); one whose operations
/// block gets it from [`Synchronous`].
pub trait Completions: Send + Sync + fmt::Debug {
    fn submit(&self, sub: Submission) -> io::Result<()>;
    /// Appends available completions to `out`; with `wait`, blocks until at least one is there.
    fn reap(&self, out: &mut Vec<Completion>, wait: bool) -> io::Result<()>;
    /// Whether another thread may submit and reap while one sleeps in [`Completions::wait`]:
    /// true for the default `wait`, which sleeps on the bell alone; a backend whose `wait`
    /// holds what `submit` and `reap` need (io_uring's ring) says false. The I/O thread lets a
    /// caller waiting for its own entry drive a round while it sleeps only when this holds.
    fn concurrent_wait(&self) -> bool {
        true
    }
    /// Sleeps until `bell` rings, a submitted operation's completion is ready to reap, or
    /// `timeout` passes, whichever comes first (spurious returns are allowed). The default suits
    /// a backend whose completions are ready when `submit` returns: it waits for the bell only.
    fn wait(&self, bell: &Arc<Bell>, timeout: Option<Duration>) -> io::Result<()> {
        bell.wait(timeout);
        Ok(())
    }
}

/// What a writable log runs on: the directory and blocking writes, and the submitted ones.
pub trait Storage: Writer + Completions {}

impl<T: Writer + Completions + ?Sized> Storage for T {}

/// Writes all of `data` at `offset`, writing the rest of a short write again (and a write a
/// signal interrupted).
pub fn write_all_at(w: &dyn Writer, file: FileId, offset: u64, data: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let rest = data.get(done..).unwrap_or_default();
        let n = match w.write_at(file, offset + done as u64, rest) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        match n {
            0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "write made no progress")),
            n if n > rest.len() => {
                return Err(io::Error::other("backend reported more bytes written than asked"))
            }
            n => done += n,
        }
    }
    Ok(())
}

/// Runs one operation to completion on the synchronous path: submits it, reaps until its token
/// returns, and resubmits the rest of a short write until it is written in full. Returns the
/// bytes written and a write's buffer. Completions of other tokens are not expected here.
pub fn complete(storage: &dyn Completions, token: u64, op: Op) -> io::Result<(u64, Option<Vec<u8>>)> {
    let mut others = Vec::new();
    let r = complete_keeping(storage, token, op, &mut others);
    if let Some(c) = others.first() {
        return Err(io::Error::other(format!(
            "unexpected completion for token {} while waiting for {token}",
            c.token
        )));
    }
    r
}

/// [`complete`] for a caller that has other operations in flight (the I/O thread's fdatasync
/// while it writes the next batch): completions of other tokens reaped meanwhile are appended
/// to `others`, for the caller to take.
pub fn complete_keeping(
    storage: &dyn Completions,
    token: u64,
    op: Op,
    others: &mut Vec<Completion>,
) -> io::Result<(u64, Option<Vec<u8>>)> {
    let mut target = match &op {
        Op::Write { file, offset, .. } => Some((*file, *offset)),
        _ => None,
    };
    let mut op = op;
    let mut written = 0u64;
    loop {
        storage.submit(Submission { token, op })?;
        let c = wait_for(storage, token, others)?;
        let n = c.result?;
        let (Some((file, offset)), Some(mut buf)) = (target, c.buf) else {
            return Ok((n, None));
        };
        let len = buf.len() as u64;
        if n > len {
            return Err(io::Error::other("backend reported more bytes written than submitted"));
        }
        written += n;
        if n == len {
            return Ok((written, Some(buf)));
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "write made no progress"));
        }
        // Short write: resubmit exactly the bytes that were not written.
        buf.drain(..n as usize);
        target = Some((file, offset + n));
        op = Op::Write { file, offset: offset + n, data: buf };
    }
}

fn wait_for(storage: &dyn Completions, token: u64, others: &mut Vec<Completion>) -> io::Result<Completion> {
    let mut done = Vec::new();
    loop {
        storage.reap(&mut done, true)?;
        let mut found = None;
        for c in done.drain(..) {
            if c.token == token && found.is_none() {
                found = Some(c);
            } else {
                others.push(c);
            }
        }
        if let Some(c) = found {
            return Ok(c);
        }
    }
}
