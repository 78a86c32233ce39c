//! The io_uring backend: writes and fdatasyncs go to the kernel through a ring and complete
//! asynchronously; everything else (names, zero-fill, directory sync, reads, maps, the lock) is
//! the file backend's, since none of it is on the append path.
//!
//! Correctness rules (peers.md lessons 1-3, limits.md section 3):
//! - a write's buffer and its file stay owned by the in-flight table until its completion is
//!   reaped, so the kernel never sees freed memory or a closed descriptor;
//! - a completion's short count is reported as is (the caller resubmits the rest: see
//!   [`super::complete`]); -EAGAIN and -EINTR on an operation resubmit it; a full submission queue
//!   is flushed to the kernel; a completion-queue overflow (EBUSY on enter) is drained first, and
//!   completions the kernel kept back after an overflow are flushed by an enter;
//! - at most one fdatasync per file is in flight (a second is refused): an error reported to one
//!   of two concurrent syncs can be lost to the other;
//! - the ring uses no special setup flags: SQPOLL cost one of this machine's two vCPUs for no
//!   gain, IOPOLL does not work on this device, and DEFER_TASKRUN with an IO_DRAIN fsync left the
//!   waiter asleep. Ordering is the caller's: a sync is only submitted after the writes it must
//!   cover have completed, never linked or drained;
//! - [`Completions::wait`] sleeps in the ring: its completions and a poll on the caller's [`Bell`]
//!   (a pipe that the bell writes to when rung during the wait), with an optional timeout, so the
//!   I/O thread wakes for whichever comes first without spinning. The poll holds no buffer, so
//!   nothing the kernel may still touch outlives the ring.

use super::{Bell, Completion, Completions, FileId, Files, Op, Reader, Submission, Writer};
use io_uring::{opcode, types, IoUring};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const RING_ENTRIES: u32 = 256;
/// The user data of the poll on the bell's pipe (operation ids count up from 1).
const BELL_POLL: u64 = u64::MAX;
const POLLIN: u32 = 0x1;

/// What an in-flight operation is, kept until its completion (and to resubmit it).
enum Kind {
    Write { offset: u64, data: Vec<u8> },
    SyncData,
}

struct InFlight {
    token: u64,
    file_id: FileId,
    file: Arc<File>,
    kind: Kind,
}

struct Ring {
    ring: IoUring,
    inflight: HashMap<u64, InFlight>,
    next_id: u64,
    /// Completions not yet reaped (including those of operations run synchronously).
    done: VecDeque<Completion>,
    /// Submitted to the ring but not yet to the kernel.
    unsent: usize,
    /// The bell pipe a poll is armed on (re-armed after each of its completions).
    bell_poll: Option<RawFd>,
    /// Times the kernel had kept completions back for a full completion queue.
    cq_overflows: u64,
    /// Errors to report instead of running the next `io_uring_enter`s and instead of the
    /// next completions' results (tests of the paths a real device rarely takes).
    #[cfg(test)]
    inject: Inject,
}

#[cfg(test)]
#[derive(Default)]
struct Inject {
    /// errno for each of the next enters (0: run it).
    enter: VecDeque<i32>,
    /// errno to put in place of each of the next operation completions' results (0: keep it).
    cqe: VecDeque<i32>,
}

/// Log storage whose fdatasyncs (and, unless written inline, writes) go through io_uring.
pub struct UringStorage {
    files: Files,
    ring: Mutex<Ring>,
    /// Operations that went through the ring (for tests and metrics).
    ring_ops: AtomicU64,
    /// Writes run as `pwrite` on the submitting thread; only syncs go through the ring.
    inline_writes: bool,
}

impl std::fmt::Debug for UringStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringStorage").field("dir", &self.files.dir()).finish()
    }
}

impl UringStorage {
    /// Sets up a ring for the log directory `dir`; fails where io_uring is unavailable.
    pub fn new(dir: impl AsRef<Path>, create: bool) -> io::Result<Self> {
        Self::with_ring_entries(dir, create, RING_ENTRIES)
    }

    /// A ring of `entries` submission slots (twice as many completion slots).
    fn with_ring_entries(dir: impl AsRef<Path>, create: bool, entries: u32) -> io::Result<Self> {
        let ring = IoUring::new(entries)?;
        Ok(UringStorage {
            files: Files::new(dir, create)?,
            ring: Mutex::new(Ring {
                ring,
                inflight: HashMap::new(),
                next_id: 1,
                done: VecDeque::new(),
                unsent: 0,
                bell_poll: None,
                cq_overflows: 0,
                #[cfg(test)]
                inject: Inject::default(),
            }),
            ring_ops: AtomicU64::new(0),
            inline_writes: false,
        })
    }

    /// [`UringStorage::new`] with writes run as `pwrite` on the submitting thread and only the
    /// fdatasyncs submitted through the ring. On this machine's ext4 a buffered write through
    /// the ring is handed to a kernel worker (about 25 us for 512 bytes against 4 us for
    /// `pwrite`), while what pays is the sync running asynchronously: the I/O thread writes the
    /// next batch meanwhile and sleeps in the ring for the sync and its bell together. A write
    /// done this way has completed in full when `submit` returns, so the rule "a sync covers
    /// only writes reaped in full before it" holds as before.
    pub fn with_inline_writes(dir: impl AsRef<Path>, create: bool) -> io::Result<Self> {
        let mut s = Self::new(dir, create)?;
        s.inline_writes = true;
        Ok(s)
    }

    /// Whether writes run as `pwrite` on the submitting thread.
    pub fn inline_writes(&self) -> bool {
        self.inline_writes
    }

    /// Writes and syncs submitted through the ring so far.
    pub fn ring_ops(&self) -> u64 {
        self.ring_ops.load(Ordering::Relaxed)
    }

    /// Times the kernel kept completions back because the completion queue was full (they
    /// were flushed and reaped: see `Ring::drain`).
    pub fn cq_overflows(&self) -> u64 {
        self.ring().cq_overflows
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Ring {
    /// Pushes the operation `id` (already in the in-flight table) onto the submission queue.
    fn push(&mut self, id: u64) -> io::Result<()> {
        let Some(op) = self.inflight.get(&id) else { return Err(io::Error::other("unknown operation")) };
        let fd = types::Fd(op.file.as_raw_fd());
        let entry = match &op.kind {
            Kind::Write { offset, data } => {
                let len =
                    u32::try_from(data.len()).map_err(|_| io::Error::other("write larger than 4 GiB"))?;
                opcode::Write::new(fd, data.as_ptr(), len).offset(*offset).build().user_data(id)
            }
            Kind::SyncData => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build().user_data(id),
        };
        loop {
            // SAFETY: the entry points at `data`, a Vec owned by the in-flight table, and at the
            // descriptor of `file`, an Arc also owned there; both are dropped only after the
            // operation's completion has been reaped (`drain`), so the kernel never reads freed
            // memory or writes to a closed or reused descriptor. Moving the Vec struct does not
            // move its heap buffer.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                self.unsent += 1;
                return Ok(());
            }
            // The submission queue is full: hand it to the kernel and retry.
            self.enter(0)?;
        }
    }

    /// Submits what is queued and waits for `want` completions, riding out EINTR and a full
    /// completion queue.
    fn enter(&mut self, want: usize) -> io::Result<()> {
        loop {
            match self.submit_and_wait(want) {
                Ok(_) => {
                    self.unsent = 0;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc_eintr()) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(code) if code == libc_ebusy() || code == libc_eagain()) =>
                {
                    // Completion queue overflow or kernel back-pressure: reap, then try again.
                    self.drain()?;
                    if !self.done.is_empty() {
                        return Ok(());
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `io_uring_enter` submitting what is queued and waiting for `want` completions.
    fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        #[cfg(test)]
        if let Some(e) = self.inject.enter.pop_front().filter(|&e| e != 0) {
            return Err(io::Error::from_raw_os_error(e));
        }
        self.ring.submit_and_wait(want)
    }

    /// Moves every available completion to `done`, resubmitting operations that asked for it.
    fn drain(&mut self) -> io::Result<()> {
        let mut cqes: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        if self.ring.submission().cq_overflow() {
            self.cq_overflows += 1;
            // The kernel kept completions back when the queue was full (NODROP): an enter
            // with GETEVENTS (which the crate adds when this flag is up) flushes them. Busy or
            // interrupted: what was flushed is read below, the rest at the next drain.
            match self.submit_and_wait(0) {
                Ok(_) => self.unsent = 0,
                Err(e) if matches!(e.raw_os_error(), Some(c) if c == libc_ebusy() || c == libc_eagain() || c == libc_eintr()) =>
                    {}
                Err(e) => return Err(e),
            }
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        }
        for (id, res) in cqes {
            if id == BELL_POLL {
                self.bell_poll = None;
                continue;
            }
            #[cfg(test)]
            let res = match self.inject.cqe.pop_front() {
                Some(e) if e != 0 => -e,
                _ => res,
            };
            if res == -libc_eagain() || res == -libc_eintr() {
                self.push(id)?;
                continue;
            }
            let Some(op) = self.inflight.remove(&id) else { continue };
            let (result, buf) = match op.kind {
                Kind::Write { data, .. } => {
                    let r = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as u64) };
                    (r, Some(data))
                }
                Kind::SyncData => {
                    let r = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(0) };
                    (r, None)
                }
            };
            self.done.push_back(Completion { token: op.token, result, buf });
        }
        Ok(())
    }
}

impl Ring {
    /// Arms (once) a poll on the bell's pipe, so a ring wakes a wait in the kernel.
    fn arm_bell(&mut self, bell: &Bell) -> io::Result<()> {
        let fd = bell.pipe_fd()?;
        if self.bell_poll == Some(fd) {
            return Ok(());
        }
        let entry = opcode::PollAdd::new(types::Fd(fd), POLLIN).build().user_data(BELL_POLL);
        loop {
            // SAFETY: a poll names no buffer; the kernel holds its own reference to the pipe's
            // file while the poll is armed, and cancels it when the ring is closed.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.unsent += 1;
                self.bell_poll = Some(fd);
                return Ok(());
            }
            self.enter(0)?;
        }
    }

    /// One wait in the kernel for at least one completion, at most `timeout`.
    fn wait_once(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let r = match timeout {
            None => self.ring.submit_and_wait(1),
            Some(t) => {
                let ts = types::Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(c) if c == libc_etime() || c == libc_eintr()) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(c) if c == libc_ebusy() || c == libc_eagain()) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for Ring {
    /// Never let the ring (or a buffer) go while the kernel may still use a buffer: wait for
    /// every in-flight operation first (bounded: a wedged device must not hang a drop forever).
    fn drop(&mut self) {
        for _ in 0..10_000 {
            if self.inflight.is_empty() {
                return;
            }
            if self.enter(1).and_then(|()| self.drain()).is_err() {
                return;
            }
        }
    }
}

// The errno values io_uring reports (Linux, every architecture this crate builds for).
const fn libc_eintr() -> i32 {
    4
}
const fn libc_eagain() -> i32 {
    11
}
const fn libc_ebusy() -> i32 {
    16
}
const fn libc_etime() -> i32 {
    62
}

// Everything but writes and syncs is the files'. `close` too: an operation in flight holds its
// own handle to the file.
impl Reader for UringStorage {
    crate::storage::forward_storage!(files: list, not_regular, open, close, len, read_at, map, written_end, scan_window, lock_shared);
}

impl Writer for UringStorage {
    crate::storage::forward_storage!(files: create, remove, rename, lock_exclusive, write_at, sync_data, sync_dir, zero_fill, reserve, drop_cached);
}

impl Completions for UringStorage {
    fn submit(&self, sub: Submission) -> io::Result<()> {
        let kind = match sub.op {
            Op::Write { file, offset, data } if !self.inline_writes => (file, Kind::Write { offset, data }),
            Op::SyncData { file } => (file, Kind::SyncData),
            other => {
                // Zero-fill and directory sync are not on the append path (nor, with inline
                // writes, writes): they run here, on the files, and their completions join the
                // ring's.
                let (result, buf) = super::run_blocking(&self.files, other);
                self.ring().done.push_back(Completion { token: sub.token, result, buf });
                return Ok(());
            }
        };
        let (file_id, kind) = kind;
        let file = self.files.file(file_id)?;
        let mut r = self.ring();
        if matches!(kind, Kind::SyncData)
            && r.inflight.values().any(|o| o.file_id == file_id && matches!(o.kind, Kind::SyncData))
        {
            return Err(io::Error::other("a second fdatasync on one file while the first is in flight"));
        }
        let id = r.next_id;
        r.next_id += 1;
        r.inflight.insert(id, InFlight { token: sub.token, file_id, file, kind });
        self.ring_ops.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = r.push(id) {
            r.inflight.remove(&id);
            return Err(e);
        }
        Ok(())
    }

    fn reap(&self, out: &mut Vec<Completion>, wait: bool) -> io::Result<()> {
        let mut r = self.ring();
        if r.unsent > 0 {
            r.enter(0)?;
        }
        r.drain()?;
        while wait && r.done.is_empty() {
            if r.inflight.is_empty() {
                return Err(io::Error::other("reap would wait forever: nothing is in flight"));
            }
            r.enter(1)?;
            r.drain()?;
        }
        out.extend(r.done.drain(..));
        Ok(())
    }

    /// The wait below holds the ring (and sleeps in it): no other thread submits meanwhile.
    fn concurrent_wait(&self) -> bool {
        false
    }

    fn wait(&self, bell: &Arc<Bell>, timeout: Option<Duration>) -> io::Result<()> {
        let mut r = self.ring();
        r.arm_bell(bell)?;
        // Hand everything queued to the kernel first: the wait below submits nothing, so its
        // outcome (a timeout) never hides how many entries were taken.
        if r.unsent > 0 {
            r.enter(0)?;
        }
        r.drain()?;
        if !r.done.is_empty() {
            return Ok(());
        }
        if !bell.enter_kernel() {
            return Ok(());
        }
        let waited = r.wait_once(timeout);
        bell.leave_kernel();
        waited?;
        r.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::complete;

    fn storage(entries: u32) -> (tempfile::TempDir, UringStorage, FileId) {
        let d = tempfile::tempdir().unwrap();
        let st = UringStorage::with_ring_entries(d.path(), true, entries).unwrap();
        let f = st.create("f").unwrap();
        (d, st, f)
    }

    /// `n` writes of 512 bytes, each its own pattern, submitted before any is reaped; then a
    /// sync. Every completion reaped is checked: full count, the right token, no error.
    fn write_all(st: &UringStorage, f: FileId, n: u64) {
        for i in 0..n {
            let data = vec![i as u8 ^ 0xa5; 512];
            st.submit(Submission { token: i, op: Op::Write { file: f, offset: i * 512, data } }).unwrap();
        }
        let mut got = Vec::new();
        while (got.len() as u64) < n {
            st.reap(&mut got, true).unwrap();
        }
        let mut tokens: Vec<u64> = got.iter().map(|c| c.token).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (0..n).collect::<Vec<_>>());
        for c in &got {
            assert_eq!(c.result.as_ref().unwrap(), &512, "token {}", c.token);
        }
        complete(st, n, Op::SyncData { file: f }).unwrap();
        let mut back = vec![0u8; (n * 512) as usize];
        assert_eq!(st.read_at(f, 0, &mut back).unwrap(), back.len());
        for (i, block) in back.chunks(512).enumerate() {
            assert!(block.iter().all(|&b| b == i as u8 ^ 0xa5), "block {i} holds other bytes");
        }
    }

    #[test]
    fn eagain_and_eintr_completions_are_resubmitted() {
        let (_d, st, f) = storage(RING_ENTRIES);
        st.ring().inject.cqe = [EAGAIN, 0, EINTR, EAGAIN, 0, 0, EINTR].into();
        write_all(&st, f, 6);
        assert!(st.ring().inject.cqe.is_empty(), "every injected result was delivered");
        // A sync that completes with EAGAIN is resubmitted too, not reported as done.
        st.ring().inject.cqe = [EAGAIN].into();
        complete(&st, 99, Op::SyncData { file: f }).unwrap();
        assert!(st.ring().inject.cqe.is_empty());
        assert_eq!(st.ring_ops(), 6 + 1 + 1, "six writes and two syncs through the ring");
    }

    #[test]
    fn a_real_write_error_is_reported_not_resubmitted() {
        let (_d, st, f) = storage(RING_ENTRIES);
        st.ring().inject.cqe = [5].into(); // EIO
        st.submit(Submission { token: 1, op: Op::Write { file: f, offset: 0, data: vec![1; 512] } }).unwrap();
        let mut got = Vec::new();
        st.reap(&mut got, true).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].result.as_ref().unwrap_err().raw_os_error(), Some(5));
        assert!(st.ring().inflight.is_empty());
    }

    #[test]
    fn eintr_ebusy_and_eagain_from_enter_are_ridden_out() {
        let (_d, st, f) = storage(RING_ENTRIES);
        st.ring().inject.enter = [EINTR, EBUSY, EAGAIN, EINTR, 0, EBUSY].into();
        write_all(&st, f, 8);
        assert!(st.ring().inject.enter.is_empty(), "every injected enter error was met");
    }

    /// A ring of 4 submission (8 completion) slots and 200 writes submitted before one is
    /// reaped: the submission queue is flushed when full, and the kernel keeps completions
    /// back past the full completion queue; every one of them is reaped.
    #[test]
    fn a_completion_queue_overflow_loses_nothing() {
        let (_d, st, f) = storage(4);
        write_all(&st, f, 200);
        assert!(st.cq_overflows() > 0, "the completion queue never overflowed");
    }

    const EINTR: i32 = libc_eintr();
    const EAGAIN: i32 = libc_eagain();
    const EBUSY: i32 = libc_ebusy();
}
