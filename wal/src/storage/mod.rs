//! The storage seam: every byte the log reads or writes goes through [`Storage`].
//!
//! It is completion-shaped: writes, syncs and zero-fills are *submitted* with a token and their
//! results *reaped* later, possibly out of order and possibly short, which is what io_uring does.
//! The synchronous path ([`complete`]) submits one operation and reaps until its token comes
//! back, resubmitting the rest of a short write; [`complete_keeping`] does the same while other
//! operations (the I/O thread's fdatasync) are in flight, keeping their completions aside. A
//! thread that waits for work and completions together sleeps in [`Storage::wait`] on a [`Bell`]
//! that whoever hands it work rings. Backends:
//!
//! - [`FileStorage`]: real files in a directory, `pwrite` + `fdatasync`, directory fsync, `flock`
//!   (the portable backend); optionally with a sync thread that runs each fdatasync so the
//!   submitter can write the next batch meanwhile;
//! - `UringStorage` (Linux): the same files, with writes and fdatasyncs submitted through io_uring
//!   and reaped as they complete;
//! - `wal_sim::MemStorage` (the test-only crate `wal/sim`): in memory, with a durable image beside
//!   the live one, crash images at sector granularity, and injected faults (failed syncs, short
//!   writes, reordered and deferred completions, disk full). It exists for tests, not as a
//!   product backend.

mod bell;
mod file;
mod file_kind;
mod forward;
#[cfg(target_os = "linux")]
mod uring;

pub use bell::Bell;
pub use file::{create_dir_durable, lock_patiently, pread_full, written_end, FileStorage, LOCK_PATIENCE};
pub use file_kind::{not_regular, not_regular_in, open_regular, NotRegularFile};
#[cfg(target_os = "linux")]
pub use uring::UringStorage;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
    Mmap(memmap2::Mmap),
    Bytes(Arc<[u8]>),
    /// A copy read into a zeroed allocation: the pages nothing was copied into (zeros the
    /// reader skipped, a file's unwritten rest) are never touched, so they cost no memory.
    /// (An `Arc<[u8]>` made from such a `Vec` would copy, touching every page.)
    Shared(Arc<Vec<u8>>),
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
    pub fn new(inner: Box<dyn Send + Sync>) -> Self {
        LockGuard(inner)
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockGuard")
    }
}

/// The one file-I/O seam of the log.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Names of the files in the log directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens `name`; with `create_new` the file must not exist yet.
    fn open(&self, name: &str, create_new: bool) -> io::Result<FileId>;
    fn close(&self, file: FileId);
    /// Removes a name (durable only after [`Op::SyncDir`]).
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Atomically replaces `to` with `from` (durable only after [`Op::SyncDir`]).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    fn len(&self, file: FileId) -> io::Result<u64>;
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
    /// streams it through one reused buffer with [`Storage::read_at`], about `n` bytes a read,
    /// walking each window while it is in the CPU's cache (a backend whose `map` copies).
    fn scan_window(&self) -> Option<usize> {
        None
    }
    fn submit(&self, sub: Submission) -> io::Result<()>;
    /// Appends available completions to `out`; with `wait`, blocks until at least one is there.
    fn reap(&self, out: &mut Vec<Completion>, wait: bool) -> io::Result<()>;
    /// Takes the directory lock: exclusive for a writer, shared for readers; fails at once
    /// with `WouldBlock` if held incompatibly.
    fn lock(&self, exclusive: bool) -> io::Result<LockGuard>;
    /// Creates `name` (it must not exist) as `len` zero bytes written for real, syncs it and the
    /// directory, all before returning; on failure nothing of it stays. Synchronous and safe to
    /// call from another thread than the writer's: it never touches the completion queue, which
    /// is how the next segment is prepared in the background.
    fn prepare_file(&self, name: &str, len: u64) -> io::Result<()>;
    /// [`Storage::prepare_file`] whose blocks may be reserved (`fallocate`) rather than
    /// written: reads give zeros either way, and a crash leaves the same two outcomes per
    /// sector, so the format cannot tell them apart. What differs is the cost: a reserved file
    /// costs no writeback now, but each fdatasync that covers fresh blocks also commits the
    /// file system's journal (measured here: 0.59x the syncs/s of a written file). The log
    /// asks for it only when its syncs each flush so much that writing the zeros would cost
    /// more than those journal commits. The default writes the zeros.
    fn prepare_file_reserved(&self, name: &str, len: u64) -> io::Result<()> {
        self.prepare_file(name, len)
    }
    /// Turns `from`, a file of `len` bytes that a purge set aside, into the new segment file
    /// `name`: makes `writes` (offset, bytes: its zeroed header sector, its stale table, its
    /// zeroed footer slot, [`crate::stale::recycling_writes`]), syncs it, renames it to `name`
    /// and syncs the directory, all before returning (so `name` is never seen as anything but
    /// a recycled spare). The rest of the old contents stay: the stale table tells them from
    /// what a batch writes (FORMAT.md section 2.2). Synchronous and callable from another
    /// thread, like [`Storage::prepare_file`]. Overwriting blocks and page-cache pages that
    /// exist costs less than allocating new ones (README, "Why the throughput rows fell
    /// short"). On failure neither `from` nor `name` stays. The default says `Unsupported`: the
    /// log then removes the file and creates one.
    fn recycle_file(&self, from: &str, name: &str, len: u64, writes: &[(u64, Vec<u8>)]) -> io::Result<()> {
        let _ = (from, name, len, writes);
        Err(io::Error::new(io::ErrorKind::Unsupported, "this storage does not recycle files"))
    }
    /// Whether another thread may submit and reap while one sleeps in [`Storage::wait`]: true
    /// for the default `wait`, which sleeps on the bell alone; a backend whose `wait` holds what
    /// `submit` and `reap` need (io_uring's ring) says false. The I/O thread lets a caller
    /// waiting for its own entry drive a round while it sleeps only when this holds.
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

/// Runs one operation to completion on the synchronous path: submits it, reaps until its token
/// returns, and resubmits the rest of a short write until it is written in full. Returns the
/// bytes written and a write's buffer. Completions of other tokens are not expected here.
pub fn complete(storage: &dyn Storage, token: u64, op: Op) -> io::Result<(u64, Option<Vec<u8>>)> {
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
    storage: &dyn Storage,
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

fn wait_for(storage: &dyn Storage, token: u64, others: &mut Vec<Completion>) -> io::Result<Completion> {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it; the state here (a
    // few flags, a queue) stays consistent, so carry on rather than cascade the panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Completions of a backend that runs operations itself (on the submitting thread, or on its
/// sync thread), waiting to be reaped: the completion side of the file backend and of the
/// simulator (`wal_sim`).
#[derive(Debug, Default)]
pub struct Ready {
    st: Mutex<ReadyState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct ReadyState {
    done: VecDeque<Completion>,
    /// Operations handed to a sync thread whose completions are not queued yet.
    running: usize,
    /// Rung whenever a completion is queued (set by the first [`Ready::wait`]).
    bell: Option<Arc<Bell>>,
}

impl Ready {
    /// Counts an operation handed to another thread; its [`Ready::finish`] follows.
    pub fn start(&self) {
        lock(&self.st).running += 1;
    }

    /// Queues the completion of an operation run on the submitting thread.
    pub fn push(&self, c: Completion) {
        lock(&self.st).done.push_back(c);
    }

    /// Queues the completion of an operation counted by [`Ready::start`] and wakes whoever waits.
    pub fn finish(&self, c: Completion) {
        let bell = {
            let mut s = lock(&self.st);
            s.running = s.running.saturating_sub(1);
            s.done.push_back(c);
            s.bell.clone()
        };
        self.cv.notify_all();
        if let Some(b) = bell {
            b.ring();
        }
    }

    /// Whether no completion waits to be reaped.
    pub fn is_empty(&self) -> bool {
        lock(&self.st).done.is_empty()
    }

    /// Moves the queued completions to `out`; with `wait`, first waits for one (an error if
    /// none can come: nothing is queued or running).
    pub fn reap(&self, out: &mut Vec<Completion>, wait: bool) -> io::Result<()> {
        let mut s = lock(&self.st);
        if wait {
            while s.done.is_empty() {
                if s.running == 0 {
                    return Err(io::Error::other("reap would wait forever: nothing is in flight"));
                }
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
        out.extend(s.done.drain(..));
        Ok(())
    }

    /// [`Storage::wait`] for such a backend: returns at once when a completion is queued,
    /// otherwise sleeps on the bell, which [`Ready::finish`] rings.
    pub fn wait(&self, bell: &Arc<Bell>, timeout: Option<Duration>) {
        {
            let mut s = lock(&self.st);
            if s.bell.as_ref().is_none_or(|b| !Arc::ptr_eq(b, bell)) {
                s.bell = Some(bell.clone());
            }
            if !s.done.is_empty() {
                return;
            }
        }
        bell.wait(timeout);
    }
}

/// A blocking job for a [`SyncThread`].
pub type Job = Box<dyn FnOnce() + Send>;

/// A helper thread that runs blocking jobs (fdatasyncs) in order, so that the thread submitting
/// them can go on (write the next batch) meanwhile. It ends when its owner drops it.
#[derive(Debug)]
pub struct SyncThread {
    tx: Mutex<std::sync::mpsc::Sender<Job>>,
}

impl SyncThread {
    /// Starts the thread, named `name`.
    pub fn start(name: &str) -> io::Result<SyncThread> {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new().name(name.into()).spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
        Ok(SyncThread { tx: Mutex::new(tx) })
    }

    /// Hands `job` to the thread; gives it back if the thread is gone.
    pub fn run(&self, job: Job) -> Result<(), Job> {
        lock(&self.tx).send(job).map_err(|e| e.0)
    }
}
