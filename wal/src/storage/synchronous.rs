//! The completion side for backends whose operations block ([`Synchronous`]), and the two parts
//! it is made of and that the simulator reuses: the queue of completions waiting to be reaped
//! ([`Ready`]) and the thread that runs fdatasyncs while the submitter goes on ([`SyncThread`]).

use super::{Bell, Completion, Completions, FileId, Op, Reader, Submission, Writer};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A backend whose writes and syncs block until done (real files with `pwrite` and
/// `fdatasync`), which [`Synchronous`] turns into a [`Completions`] backend.
pub trait Blocking: Writer {
    /// A job that runs `file`'s fdatasync on another thread. It holds what it needs of the file,
    /// so closing the handle meanwhile does not cancel it.
    fn sync_job(&self, file: FileId) -> io::Result<Box<dyn FnOnce() -> io::Result<()> + Send>>;
}

/// The synchronous driver: runs each submitted operation at once on the submitting thread with
/// the blocking backend `B` and queues its completion for the next reap, which is what the
/// completion-shaped engine expects; with a sync thread
/// ([`Synchronous::drive_with_sync_thread`]) an fdatasync runs there instead, so the submitter
/// can write the next batch while it is in flight, as it can with io_uring.
#[derive(Debug)]
pub struct Synchronous<B> {
    inner: B,
    ready: Arc<Ready>,
    syncer: Option<SyncThread>,
}

impl<B: Blocking> Synchronous<B> {
    /// Drives `inner`, every operation on the submitting thread.
    pub fn drive(inner: B) -> Self {
        Synchronous { inner, ready: Arc::default(), syncer: None }
    }

    /// Drives `inner` with a sync thread: each `SyncData` runs there, and its completion is
    /// reaped (or waited for with [`Completions::wait`]) like an io_uring one.
    pub fn drive_with_sync_thread(inner: B) -> io::Result<Self> {
        Ok(Synchronous { inner, ready: Arc::default(), syncer: Some(SyncThread::start("wal-fdatasync")?) })
    }

    /// The blocking backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Whether fdatasyncs run on a sync thread.
    pub fn has_sync_thread(&self) -> bool {
        self.syncer.is_some()
    }
}

/// Runs one submitted operation with blocking calls: its completion's result (bytes written for
/// a write, possibly short) and a write's buffer. The synchronous driver runs every operation
/// this way, the io_uring backend those it does not put in its ring.
pub fn run_blocking(w: &dyn Writer, op: Op) -> (io::Result<u64>, Option<Vec<u8>>) {
    match op {
        Op::Write { file, offset, data } => (w.write_at(file, offset, &data).map(|n| n as u64), Some(data)),
        Op::SyncData { file } => (w.sync_data(file).map(|()| 0), None),
        Op::SyncDir => (w.sync_dir().map(|()| 0), None),
        Op::ZeroFill { file, len } => (w.zero_fill(file, len).map(|()| 0), None),
    }
}

impl<B: Blocking> Reader for Synchronous<B> {
    crate::storage::forward_storage!(inner: list, not_regular, open, close, len, read_at, map, written_end, scan_window, lock_shared);
}

impl<B: Blocking> Writer for Synchronous<B> {
    crate::storage::forward_storage!(inner: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill, reserve, drop_cached);
}

impl<B: Blocking> Completions for Synchronous<B> {
    fn submit(&self, sub: Submission) -> io::Result<()> {
        if let (Some(syncer), Op::SyncData { file }) = (&self.syncer, &sub.op) {
            let token = sub.token;
            match self.inner.sync_job(*file) {
                Ok(sync) => {
                    let ready = self.ready.clone();
                    ready.start();
                    let job = Box::new(move || {
                        let result = sync().map(|()| 0);
                        ready.finish(Completion { token, result, buf: None });
                    });
                    if syncer.run(job).is_err() {
                        let gone = io::Error::other("the sync thread has stopped");
                        self.ready.finish(Completion { token, result: Err(gone), buf: None });
                    }
                }
                Err(e) => self.ready.push(Completion { token, result: Err(e), buf: None }),
            }
            return Ok(());
        }
        let (result, buf) = run_blocking(&self.inner, sub.op);
        self.ready.push(Completion { token: sub.token, result, buf });
        Ok(())
    }

    fn reap(&self, out: &mut Vec<Completion>, wait: bool) -> io::Result<()> {
        self.ready.reap(out, wait)
    }

    fn wait(&self, bell: &Arc<Bell>, timeout: Option<Duration>) -> io::Result<()> {
        self.ready.wait(bell, timeout);
        Ok(())
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

    /// [`Completions::wait`] for such a backend: returns at once when a completion is queued,
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
