//! The I/O thread (issue 3): callers append without touching the disk; one thread turns whatever
//! is queued into batches, writes them, keeps one fdatasync in flight while it writes the next
//! ones, and resolves each caller's [`Ticket`].
//!
//! - `append` checks the writer epoch and the size, assigns the LSN and enqueues in one step
//!   under one lock, so a Rejected append never consumes an LSN and the queue order is the LSN
//!   order. The queue is bounded in entries and bytes; a full queue waits or answers
//!   [`Error::Busy`] at once, as the caller chose.
//! - Every other operation of the synchronous handle runs here too, with the same arguments:
//!   [`AsyncWal::append_at`], [`AsyncWal::truncate_after`], [`AsyncWal::reset`],
//!   [`AsyncWal::set_meta`], [`AsyncWal::advance_epoch`], [`AsyncWal::checkpoint`],
//!   [`AsyncWal::purge_before`] and [`AsyncWal::replay_from`]. Each is checked and placed at
//!   submission against the submit side's copy of the log's position (`control.rs`), in queue
//!   order with the appends, and its ticket resolves when it is durable.
//! - [`AsyncWal::append_untracked`] is the same step for an entry nobody will wait on: the
//!   caller's slice is copied into a buffer from a pool the I/O thread refills, no ticket is
//!   made and nothing is resolved for it, so a steady stream allocates nothing per entry. A
//!   refusal is still an error at once; an untracked entry the log would have to give up later
//!   (disk full) fences the log instead, since nobody could hear a Rejected.
//! - The thread drains the queue, stages every entry and writes the batch; tickets asking for
//!   [`Durability::Written`] get their first resolution here. When no sync is in flight and one
//!   is due, it submits an fdatasync covering every batch written so far and goes on: appends
//!   that arrive meanwhile are written while the sync runs (on io_uring, or on the portable
//!   backend's sync thread) once [`AsyncOptions::overlap_write_bytes`] of them wait, or else as
//!   soon as it completes, and the next sync starts right after. A ticket resolves
//!   durable only after a sync that was submitted after its batch's write had completed in full,
//!   itself completed (docs/invariants.md I3); every Written ticket later gets that second, final
//!   resolution too.
//! - A sync is due at once for a batch holding a [`Durability::Durable`] entry (or a checkpoint),
//!   and for batches of Written entries only after [`AsyncOptions::written_sync_delay`], after
//!   [`AsyncOptions::written_sync_bytes`], when the queue is half full, or at close: the thread
//!   sleeps with that deadline as its timeout, so the sync comes without any further append.
//! - The thread sleeps in [`Storage::wait`](crate::storage::Storage::wait): on io_uring in the
//!   ring, for a completion or a byte on the bell's pipe; elsewhere on the bell, which appends and
//!   completions ring. No spinning, no sleep-polling.
//! - Its state sits under an engine lock it holds while it works and lets go while it sleeps.
//!   A caller of [`AsyncWal::append_wait`] that finds the lock free runs the same round on its
//!   own thread (its entry then pays no wake-up of the I/O thread and no wake-up back), and
//!   rings the bell on leaving if anything is left; a caller that does not find it free falls
//!   back to enqueue-and-wait.
//! - A failed write or sync fences the log (I6): every pending ticket resolves
//!   [`Failure::Indeterminate`] (also those written behind a sync in flight), every later append
//!   is refused, nothing is retried. A panic on the thread does the same: a ticket dropped
//!   unresolved resolves Indeterminate, so nothing waits forever.
//! - Disk full when a new segment is needed, or when a batch write runs out of space (the log
//!   withdraws it on disk), is not a fence: what was written before it stays, the entries never
//!   written and everything queued after them resolve [`Failure::Rejected`], the next LSN is the
//!   log's again, and the log stays usable.

use crate::control::{Control, Position};
use crate::error::{Error, Result};
use crate::log::Wal;
use crate::log::{Checkpoint, PurgeReport};
use crate::storage::Bell;
use crate::ticket::{Failure, Inner, Notify, Ticket};
use crate::{Durability, Epoch, Lsn};
use crossbeam_channel::{Receiver, Sender};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What `append` does when the queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// The append waits until the queue has room for it (the default).
    Wait,
    /// The append is refused at once with [`Error::Busy`] (Rejected: nothing was logged).
    Busy,
}

/// Bounds and behaviour of the queue in front of the I/O thread.
#[derive(Clone, Debug)]
pub struct AsyncOptions {
    /// The queue's bound in entries and in payload bytes: a `Written` entry holds its place
    /// until it is written (handed to the OS), a `Durable` one until it is durable. A full
    /// queue waits or answers Busy ([`WhenFull`]).
    pub queue_entries: usize,
    /// The queue's bound in payload bytes (default 64 MiB): up to this much payload memory
    /// waits in the queue, each entry's bytes counted for as long as it holds its place.
    pub queue_bytes: usize,
    /// What an append does when either bound is reached: wait (the default) or answer
    /// [`Error::Busy`].
    pub when_full: WhenFull,
    /// The most entries one batch takes from the queue.
    pub max_batch_entries: usize,
    /// An fdatasync at least this slow is counted and reported on stderr (etcd's "slow fdatasync").
    pub slow_sync: Duration,
    /// How long batches holding only [`Durability::Written`] entries may wait for their sync.
    pub written_sync_delay: Duration,
    /// How many payload bytes of such batches may wait for their sync.
    pub written_sync_bytes: usize,
    /// While a sync is in flight, appends are written during it (and wake the I/O thread for
    /// that) only once this many payload bytes wait; otherwise they wait in the queue and are
    /// written when the sync completes, just before the next one starts (`Written` entries
    /// too: their written word comes then). Writing a few hundred bytes
    /// costs less than a wake-up and a write call of their own; writing a megabyte during the
    /// sync hides most of its time. 0 writes (and wakes for) every append at once.
    pub overlap_write_bytes: usize,
    /// What disk full does to entries that were never written. `false` (the default): they and
    /// everything queued after them resolve Rejected, the next LSN is the log's again, and the
    /// log stays usable. `true`: the log fences instead (every pending ticket Indeterminate,
    /// every later operation refused), for a caller whose later operations assume the earlier
    /// ones are in the log, such as a Raft log store that submits a batch of entries one by one.
    pub fence_on_disk_full: bool,
}

impl Default for AsyncOptions {
    fn default() -> Self {
        AsyncOptions {
            queue_entries: 4096,
            queue_bytes: 64 << 20,
            when_full: WhenFull::Wait,
            max_batch_entries: 1024,
            slow_sync: Duration::from_secs(1),
            written_sync_delay: Duration::from_millis(5),
            written_sync_bytes: 1 << 20,
            overlap_write_bytes: 64 << 10,
            fence_on_disk_full: false,
        }
    }
}

struct Submit {
    /// The log's position with every admitted operation applied (LSNs are assigned here only).
    log: Position,
    queued_entries: usize,
    queued_bytes: usize,
    fenced: Option<String>,
    closing: bool,
    /// Payload bytes sent to the I/O thread and not taken by it yet.
    untaken_bytes: usize,
    /// The I/O thread sleeps until its sync completes: small appends need not wake it.
    quiet: bool,
    /// Empty buffers for [`AsyncWal::append_untracked`] (see [`POOL_BUFFERS`]).
    pool: Vec<Vec<u8>>,
}

struct Shared {
    submit: Mutex<Submit>,
    metrics: crate::metrics::Metrics,
    space: Condvar,
    /// Rung after every request, so the I/O thread wakes for it.
    bell: Arc<Bell>,
    max_payload: usize,
    opts: AsyncOptions,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Submit> {
        self.submit.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives back queue space held by resolved entries.
    fn release(&self, entries: usize, bytes: usize) {
        if entries == 0 && bytes == 0 {
            return;
        }
        let mut st = self.lock();
        st.queued_entries = st.queued_entries.saturating_sub(entries);
        st.queued_bytes = st.queued_bytes.saturating_sub(bytes);
        drop(st);
        self.space.notify_all();
    }

    /// Fences the log (the first cause stays) and wakes every append waiting for space.
    fn set_fenced(&self, why: &str) {
        self.lock().fenced.get_or_insert_with(|| why.to_string());
        self.space.notify_all();
    }
}

/// What one append carries: one entry, or a user batch (an atomic group such as a job array)
/// that takes consecutive LSNs and survives a crash whole or not at all.
#[derive(Debug)]
pub enum Payload {
    /// One entry's bytes.
    One(Vec<u8>),
    /// The entries of one user batch, in LSN order: written in one batch frame, linked by
    /// `GROUP_CONT`, so a crash keeps all of them or none.
    Group(Vec<Vec<u8>>),
}

impl Payload {
    pub(crate) fn entries(&self) -> usize {
        match self {
            Payload::One(_) => 1,
            Payload::Group(g) => g.len(),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            Payload::One(p) => p.len(),
            Payload::Group(g) => g.iter().map(Vec::len).sum(),
        }
    }

    pub(crate) fn largest(&self) -> usize {
        match self {
            Payload::One(p) => p.len(),
            Payload::Group(g) => g.iter().map(Vec::len).max().unwrap_or(0),
        }
    }
}

/// The I/O thread's side of a ticket, or of none ([`AsyncWal::append_untracked`]). Dropped
/// without a final resolution (a panic on the thread, a request left in a channel nobody reads)
/// it resolves the ticket Indeterminate, so no waiter waits forever; after a resolution that
/// is ignored.
struct Slot(Option<Arc<Inner>>);

impl Slot {
    /// The ticket, when there is one somebody can still observe.
    fn observed(&self) -> Option<&Arc<Inner>> {
        self.0.as_ref().filter(|t| !t.unobserved())
    }

    fn untracked(&self) -> bool {
        self.0.is_none()
    }

    fn resolve_written(&self, lsn: Lsn) {
        if let Some(t) = self.observed() {
            t.resolve_written(lsn);
        }
    }

    fn resolve(&self, outcome: Result<Lsn, Failure>) {
        if let Some(t) = self.observed() {
            t.resolve(outcome);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Checked first: the failure's text is an allocation per entry otherwise.
        let Some(t) = self.observed() else { return };
        if t.has_last_word() {
            return;
        }
        t.resolve(Err(Failure::Indeterminate("the I/O thread stopped before resolving this entry".into())));
    }
}

/// Buffers of untracked appends go back to a pool once staged, so a steady stream of them
/// allocates nothing: at most this many are kept...
const POOL_BUFFERS: usize = 1024;
/// ...each at most this large (a rare large entry's buffer is not kept).
const POOL_BUFFER_BYTES: usize = 64 << 10;

enum Req {
    Append {
        lsn: u64,
        epoch: u64,
        payload: Payload,
        durability: Durability,
        slot: Slot,
    },
    /// Any other operation that moves the log's position or state, checked at submission:
    /// `lsn` is what its ticket carries, `next` the log's next LSN after it.
    Control {
        op: Control,
        epoch: u64,
        lsn: u64,
        next: u64,
        durability: Durability,
        slot: Slot,
    },
    /// A checkpoint record, staged with the next batch (made durable by its sync).
    Checkpoint {
        epoch: u64,
        lsn: u64,
        cp: Checkpoint,
    },
    /// A prefix purge, run between batches; the result goes back on `reply`.
    Purge {
        below: Lsn,
        reply: Sender<Result<PurgeReport>>,
    },
    /// A replay of the log from an LSN (tailing readers: durable; Raft's reads: written).
    Replay {
        from: Option<Lsn>,
        bound: Durability,
        reply: Sender<Result<crate::replay::Replay>>,
    },
    Close,
    /// Stop without writing, syncing or sealing anything more (what a crash leaves; tests).
    Abandon,
}

impl Req {
    /// The entries and payload bytes it holds of the queue's bounds.
    fn queued(&self) -> (usize, usize) {
        match self {
            Req::Append { payload, .. } => (payload.entries(), payload.bytes()),
            Req::Control { op, .. } => op.size(),
            _ => (0, 0),
        }
    }
}

/// The fence a clean close leaves: later appends are refused with it.
const CLOSED: &str = "the log was closed";

/// A log driven by its own I/O thread.
pub struct AsyncWal {
    shared: Arc<Shared>,
    tx: Sender<Req>,
    engine: Arc<Engine>,
    /// Whether a caller may drive a round while the I/O thread sleeps (the backend's `wait`
    /// holds nothing a round needs: see `Storage::concurrent_wait`).
    drivable: bool,
    thread: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl std::fmt::Debug for AsyncWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AsyncWal")
    }
}

impl AsyncWal {
    /// Hands `wal` to a new I/O thread, after checking the records its open took on trust
    /// ([`Wal::check_records`]: nothing when a whole replay already did): a damaged log is
    /// refused here with `Error::Damaged`, not at the first append on the thread.
    pub fn start(mut wal: Wal, opts: AsyncOptions) -> Result<AsyncWal> {
        if opts.queue_entries == 0 || opts.max_batch_entries == 0 {
            return Err(Error::InvalidArgument(
                "queue_entries and max_batch_entries must be at least 1".into(),
            ));
        }
        wal.check_records()?;
        let shared = Arc::new(Shared {
            submit: Mutex::new(Submit {
                log: Position::of(&wal),
                queued_entries: 0,
                queued_bytes: 0,
                fenced: wal.is_fenced().then(|| "the log was already fenced".to_string()),
                closing: false,
                untaken_bytes: 0,
                quiet: false,
                pool: Vec::new(),
            }),
            space: Condvar::new(),
            bell: Arc::new(Bell::new()),
            metrics: Default::default(),
            max_payload: wal.max_payload_bytes() as usize,
            opts,
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let drivable = wal.storage().concurrent_wait();
        let engine = Arc::new(Mutex::new(Some(Io::new(wal, shared.clone(), rx.clone()))));
        let (sh, en) = (shared.clone(), engine.clone());
        let thread = std::thread::Builder::new()
            .name("wal-io".into())
            .spawn(move || {
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| io_loop(&en)));
                run.unwrap_or_else(|_| {
                    // Every ticket the thread held was resolved as its slot dropped (the state
                    // goes with the thread); those still queued are resolved here, and later
                    // appends are refused.
                    let why = "the I/O thread panicked";
                    sh.set_fenced(why);
                    drop(lock_engine(&en).take());
                    while let Ok(r) = rx.try_recv() {
                        drop(r);
                    }
                    Err(Error::Fenced { cause: why.into() })
                })
            })
            .map_err(|e| Error::io("starting the I/O thread", e))?;
        Ok(AsyncWal { shared, tx, engine, drivable, thread: Mutex::new(Some(thread)) })
    }

    /// Opens (or creates, as `opts` says) the log in `dir` on real files and starts its I/O
    /// thread: [`Wal::open`] then [`AsyncWal::start`].
    pub fn open(
        dir: impl AsRef<std::path::Path>,
        opts: crate::Options,
        async_opts: AsyncOptions,
    ) -> Result<(AsyncWal, crate::OpenReport)> {
        let (wal, report) = Wal::open(dir, opts)?;
        Ok((AsyncWal::start(wal, async_opts)?, report))
    }

    /// Sends a request to the I/O thread and wakes it.
    fn send(&self, req: Req) -> Result<()> {
        self.tx.send(req).map_err(|_| Error::Fenced { cause: "the I/O thread has stopped".into() })?;
        self.shared.bell.ring();
        Ok(())
    }

    /// Enqueues one entry and returns its ticket at once (or waits for queue space, if chosen).
    /// Errors are Rejected: nothing was enqueued and no LSN was consumed.
    pub fn append(&self, epoch: Epoch, payload: Vec<u8>, durability: Durability) -> Result<Ticket> {
        self.append_with(epoch, Payload::One(payload), durability, None)
    }

    /// [`AsyncWal::append`] for one entry or a user batch, optionally also delivering the
    /// outcome to a completion channel (a `Written` entry delivers two: written, then final).
    /// A group's ticket carries its first LSN and resolves when the whole group does.
    pub fn append_with(
        &self,
        epoch: Epoch,
        payload: Payload,
        durability: Durability,
        notify: Option<Notify>,
    ) -> Result<Ticket> {
        self.enqueue(epoch, payload, durability, notify, true, self.shared.opts.when_full).map_err(|(e, _)| e)
    }

    /// Appends one entry or a user batch as [`Durability::Durable`] and returns its ticket once
    /// resolved: a blocking convenience (docs/invariants.md I5) for a caller that would wait at once
    /// anyway. When the I/O thread is idle, the caller's own thread writes and syncs the batch
    /// (with whatever else is queued) under the engine lock, instead of waking the I/O thread
    /// and being woken by it: the two wake-ups are what one waiting submitter pays on top of
    /// the fdatasync (`benches/compare`, `durable-1`). When the thread is busy, or the backend
    /// sleeps holding its ring (io_uring), it is `append_with` and a wait. Either way the
    /// ticket resolves exactly as it would on the I/O thread (the same code runs the round).
    pub fn append_wait(&self, epoch: Epoch, payload: Payload) -> Result<Ticket> {
        let engine = if self.drivable { self.engine.try_lock().ok() } else { None };
        let Some(mut guard) = engine.filter(|g| g.as_ref().is_some_and(|io| !io.closing)) else {
            let ticket = self.append_with(epoch, payload, Durability::Durable, None)?;
            let _ = ticket.wait();
            return Ok(ticket);
        };
        // Without ringing: this thread does the round. A full queue is not waited for under
        // this lock (the I/O thread needs it to make room): the normal path does that.
        let ticket = match self.enqueue(epoch, payload, Durability::Durable, None, false, WhenFull::Busy) {
            Ok(t) => t,
            Err((Error::Busy, Some(payload))) if self.shared.opts.when_full == WhenFull::Wait => {
                drop(guard);
                let ticket = self.append_with(epoch, payload, Durability::Durable, None)?;
                let _ = ticket.wait();
                return Ok(ticket);
            }
            Err((e, _)) => return Err(e),
        };
        let Some(io) = guard.as_mut() else {
            return Err(Error::Fenced { cause: "the I/O thread's state is gone".into() });
        };
        // Appends from here on ring, so a sleeping I/O thread wakes for them.
        self.shared.lock().quiet = false;
        io.driving = true;
        while ticket.poll_outcome().is_none() && !io.closing && io.drive() {}
        io.driving = false;
        let busy = io.busy();
        drop(guard);
        if busy {
            self.shared.bell.ring();
        }
        let _ = ticket.wait();
        Ok(ticket)
    }

    /// Checks and enqueues an append (the one step that assigns its LSN); on a refusal, the
    /// error and the payload when it was not consumed.
    fn enqueue(
        &self,
        epoch: Epoch,
        payload: Payload,
        durability: Durability,
        notify: Option<Notify>,
        ring: bool,
        when_full: WhenFull,
    ) -> std::result::Result<Ticket, (Error, Option<Payload>)> {
        let (count, len) = (payload.entries(), payload.bytes());
        if count == 0 {
            return Err((Error::InvalidArgument("empty batch".into()), Some(payload)));
        }
        let max = self.shared.max_payload;
        let largest = payload.largest();
        if largest > max {
            return Err((Error::TooLarge { len: largest as u64, max: max as u64 }, Some(payload)));
        }
        let mut st = match self.admit(self.shared.lock(), Some(epoch), len, when_full) {
            Ok(st) => st,
            Err(e) => return Err((e, Some(payload))),
        };
        let lsn = st.log.append(count);
        let ticket = Ticket::new(Lsn(lsn), notify);
        let slot = Slot(Some(ticket.inner.clone()));
        let req = Req::Append { lsn, epoch: epoch.0, payload, durability, slot };
        self.send_locked(st, req, count, len, ring).map_err(|e| (e, None))?;
        // Mutant (tools/mutants.sh, I5): the caller blocks until its entry is durable.
        #[cfg(feature = "mutant-append-blocks-on-sync")]
        let _ = ticket.wait_durable();
        Ok(ticket)
    }

    /// Appends a copy of `payload` with no ticket: the cheapest append, for a caller that learns
    /// the outcome another way (a later ticket's, which covers every earlier entry: a sync
    /// makes durable everything written before it). Nothing is allocated per entry in a steady
    /// stream (the copy goes into a pooled buffer) and the I/O thread resolves nothing for it.
    /// Errors are refusals, as for [`AsyncWal::append`]: nothing was enqueued.
    ///
    /// Since nobody could hear it, such an entry is never given up quietly: where a ticketed
    /// entry would be Rejected and the log stay usable (disk full), a log that has to give up
    /// untracked entries fences instead, so every later append and ticket fails.
    pub fn append_untracked(&self, epoch: Epoch, payload: &[u8], durability: Durability) -> Result<Lsn> {
        let len = payload.len();
        if len > self.shared.max_payload {
            return Err(Error::TooLarge { len: len as u64, max: self.shared.max_payload as u64 });
        }
        let mut st = self.admit(self.shared.lock(), Some(epoch), len, self.shared.opts.when_full)?;
        let mut buf = st.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        let lsn = st.log.append(1);
        let req =
            Req::Append { lsn, epoch: epoch.0, payload: Payload::One(buf), durability, slot: Slot(None) };
        self.send_locked(st, req, 1, len, true)?;
        Ok(Lsn(lsn))
    }

    /// Checks an append of `len` payload bytes against the fence, the close, the writer epoch
    /// (when it carries one) and the queue's bounds (waiting for room, if chosen), all under
    /// the submit lock.
    fn admit<'a>(
        &'a self,
        mut st: MutexGuard<'a, Submit>,
        epoch: Option<Epoch>,
        len: usize,
        when_full: WhenFull,
    ) -> Result<MutexGuard<'a, Submit>> {
        let opts = &self.shared.opts;
        loop {
            if let Some(cause) = &st.fenced {
                return Err(Error::Fenced { cause: cause.clone() });
            }
            if st.closing {
                return Err(Error::ReadOnly);
            }
            if let Some(epoch) = epoch {
                st.log.check_epoch(epoch)?;
            }
            let fits = st.queued_entries < opts.queue_entries
                && (st.queued_entries == 0 || st.queued_bytes + len <= opts.queue_bytes);
            if fits {
                return Ok(st);
            }
            if when_full == WhenFull::Busy {
                return Err(Error::Busy);
            }
            st = self.shared.space.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Sends an admitted append (its LSN already taken from `st.log`) and counts it, under the
    /// submit lock: the queue order is the LSN order. A send that fails leaves the log fenced
    /// for good (the thread is gone), so the position it moved is never used again.
    fn send_locked(
        &self,
        mut st: MutexGuard<'_, Submit>,
        req: Req,
        count: usize,
        len: usize,
        ring: bool,
    ) -> Result<()> {
        if let Err(e) = self.tx.send(req) {
            // Never queued: the slot in the returned request must not resolve its ticket.
            if let Req::Append { slot, .. } | Req::Control { slot, .. } = e.0 {
                std::mem::forget(slot);
            }
            return Err(Error::Fenced { cause: "the I/O thread has stopped".into() });
        }
        st.queued_entries += count;
        st.queued_bytes += len;
        st.untaken_bytes += len;
        // Rung under the lock, as the channel's own wake-up was before the bell: a woken I/O
        // thread that preempts this one meets the lock (it checks the fence under it) and lets
        // the submitter finish first, so back-to-back appends still share a batch.
        if ring && (!st.quiet || st.untaken_bytes >= self.shared.opts.overlap_write_bytes) {
            self.shared.bell.ring();
        }
        Ok(())
    }

    /// [`Wal::append_at`] (one entry) or [`Wal::append_batch_at`] (a user batch) on the I/O
    /// thread: at the next LSN a plain append; below it, the entries from `lsn` on are cut
    /// first; above it, only into a log with no live entry. Checked and placed now, in queue
    /// order with every other append and operation; the ticket carries `lsn`.
    pub fn append_at(
        &self,
        epoch: Epoch,
        lsn: Lsn,
        payload: Payload,
        durability: Durability,
    ) -> Result<Ticket> {
        self.control(Some(epoch), Control::AppendAt { lsn: lsn.0, payload }, durability)
    }

    /// [`Wal::truncate_after`] on the I/O thread: every entry after `after` is cut, and the next
    /// append takes `after + 1` from now on. The ticket (carrying `after + 1`) resolves when the
    /// cut is durable, with everything queued before it.
    pub fn truncate_after(&self, epoch: Epoch, after: Lsn) -> Result<Ticket> {
        self.control(Some(epoch), Control::TruncateAfter(after.0), Durability::Durable)
    }

    /// [`Wal::reset`] on the I/O thread: every entry is cut and the next append takes `next`.
    pub fn reset(&self, epoch: Epoch, next: Lsn) -> Result<Ticket> {
        self.control(Some(epoch), Control::Reset(next.0), Durability::Durable)
    }

    /// [`Wal::set_meta`] on the I/O thread (a Raft vote, a committed index). The ticket carries
    /// the next LSN and resolves at `durability`, as an append's does: a value that may lag
    /// behind (a restart hint) is asked for `Written`, and its sync comes with the next one.
    pub fn set_meta(&self, key: u32, value: &[u8], durability: Durability) -> Result<Ticket> {
        let op = Control::SetMeta { key, value: value.to_vec() };
        self.control(None, op, durability)
    }

    /// [`Wal::advance_epoch`] on the I/O thread: appends under an older epoch are refused from
    /// the moment this returns.
    pub fn advance_epoch(&self, new: Epoch) -> Result<Ticket> {
        self.control(None, Control::AdvanceEpoch(new.0), Durability::Durable)
    }

    /// Checks `op` and enqueues it under the submit lock (the one place that moves the log's
    /// position): a refusal consumes nothing.
    fn control(&self, epoch: Option<Epoch>, op: Control, durability: Durability) -> Result<Ticket> {
        let (count, len) = op.size();
        let when_full = self.shared.opts.when_full;
        let mut st = self.admit(self.shared.lock(), epoch.filter(|_| op.carries_epoch()), len, when_full)?;
        let lsn = st.log.admit(&op, self.shared.max_payload)?;
        let (next, current) = (st.log.next_lsn, st.log.epoch);
        let ticket = Ticket::new(Lsn(lsn), None);
        let slot = Slot(Some(ticket.inner.clone()));
        let epoch = epoch.map_or(current, |e| e.0);
        self.send_locked(st, Req::Control { op, epoch, lsn, next, durability, slot }, count, len, true)?;
        Ok(ticket)
    }

    /// [`Wal::checkpoint`] on the I/O thread: records a checkpoint for `lsn` (an LSN already
    /// handed out) with the next batch, under writer epoch `epoch`. It is durable with that
    /// batch's sync; a fenced or closed log drops it (a checkpoint is an extra check, never
    /// needed to recover).
    pub fn checkpoint(&self, epoch: Epoch, lsn: Lsn, cp: &Checkpoint) -> Result<()> {
        let st = self.shared.lock();
        if let Some(cause) = &st.fenced {
            return Err(Error::Fenced { cause: cause.clone() });
        }
        st.log.check_epoch(epoch)?;
        if lsn.0 >= st.log.next_lsn {
            return Err(Error::InvalidArgument(format!(
                "checkpoint at {lsn} covers an entry the log has not taken (next LSN {})",
                st.log.next_lsn
            )));
        }
        // Sent under the lock, like an append: it follows the entry it covers in the queue.
        let sent = self.tx.send(Req::Checkpoint { epoch: epoch.0, lsn: lsn.0, cp: *cp });
        drop(st);
        sent.map_err(|_| Error::Fenced { cause: "the I/O thread has stopped".into() })?;
        self.shared.bell.ring();
        Ok(())
    }

    /// Purges whole segments below `below` on the I/O thread (between batches) and waits for
    /// the result. See [`Wal::purge_before`].
    pub fn purge_before(&self, below: Lsn) -> Result<PurgeReport> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.send(Req::Purge { below, reply })?;
        rx.recv().map_err(|_| Error::Fenced { cause: "the I/O thread has stopped".into() })?
    }

    /// A replay from `from` (`None`: the first live entry) up to `bound`, as of now (it sees
    /// later batches only if it is asked for again), as [`Wal::replay_from`]. Served by the I/O
    /// thread between batches; [`Durability::Written`] first writes what is
    /// staged, so it sees every operation queued before it, and is refused on a fenced log.
    pub fn replay_from(&self, from: Option<Lsn>, bound: Durability) -> Result<crate::replay::Replay> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.send(Req::Replay { from, bound, reply })?;
        rx.recv().map_err(|_| Error::Fenced { cause: "the I/O thread has stopped".into() })?
    }

    /// The next LSN an append will take.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.shared.lock().log.next_lsn)
    }

    /// The writer epoch appends must carry.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.shared.lock().log.epoch)
    }

    /// Why the log is fenced, if it is.
    pub fn fenced(&self) -> Option<String> {
        self.shared.lock().fenced.clone()
    }

    /// Counters and histograms of the I/O thread (appends, bytes, batches, entries per batch,
    /// sync latency, slow syncs, batches written during a sync, queue depth).
    pub fn stats(&self) -> crate::metrics::Stats {
        let depth = self.shared.lock().queued_entries;
        self.shared.metrics.snapshot(depth)
    }

    /// Drains the queue, syncs, seals and stops the I/O thread; every ticket is resolved. A
    /// handle shared between threads can be closed through any of them; every later append
    /// is refused, and a later close answers as the first one did (Ok after a clean close,
    /// the cause after a fence or an abandon).
    pub fn close(&self) -> Result<()> {
        self.stop(Req::Close)
    }

    /// Stops the I/O thread without writing, syncing or sealing anything more: the files are
    /// left as a crash of the process would leave them (tests of recovery). Every ticket not
    /// resolved yet resolves Indeterminate.
    pub fn abandon(&self) {
        let _ = self.stop(Req::Abandon);
    }

    fn stop(&self, how: Req) -> Result<()> {
        let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            // Stopped already (or being stopped by another thread): a log that was closed
            // cleanly says Ok again, one that was fenced or abandoned says why.
            return match self.fenced() {
                Some(cause) if cause != CLOSED => Err(Error::Fenced { cause }),
                _ => Ok(()),
            };
        };
        self.shared.lock().closing = true;
        let _ = self.send(how);
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err(Error::Fenced { cause: "the I/O thread panicked".into() }),
        }
    }
}

impl Drop for AsyncWal {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// One append taken from the queue.
struct Pending {
    lsn: u64,
    entries: usize,
    bytes: usize,
    durability: Durability,
    slot: Slot,
}

/// A written batch waiting for the sync that covers it.
struct Flight {
    /// The log's written record sequence after this batch: a completed sync that covered it
    /// makes every entry here durable.
    end_seq: u64,
    pending: Vec<Pending>,
    bytes: usize,
    /// The entries and bytes of `pending` that still hold their place in the queue (the
    /// `Durable` ones: a `Written` entry gives its place back once written).
    held: (usize, usize),
    /// Holds a Durable entry or a checkpoint: its sync is due at once.
    urgent: bool,
    written_at: Instant,
}

/// The I/O thread's state. It lives under [`AsyncWal`]'s engine lock: the I/O thread holds it
/// while it works and lets go while it sleeps, so a caller waiting for its own entry
/// ([`AsyncWal::append_wait`]) can do a round of the same work on its own thread.
struct Io {
    wal: Wal,
    shared: Arc<Shared>,
    rx: Receiver<Req>,
    /// Appends staged in the log's batch buffer, not written yet.
    staged: Vec<Pending>,
    /// A checkpoint was staged: the batch is written and synced even without entries.
    staged_checkpoint: bool,
    /// Written batches waiting for their sync, oldest first.
    flights: VecDeque<Flight>,
    closing: bool,
    /// The close is an abandon: nothing more is written, synced or sealed.
    abandoning: bool,
    /// A caller of `append_wait` runs this round (counted in the stats).
    driving: bool,
    /// Staged payload buffers on their way back to the submit pool.
    spent: Vec<Vec<u8>>,
}

/// The engine lock: the I/O thread's state, `None` once the thread has finished with it.
type Engine = Mutex<Option<Io>>;

fn lock_engine(engine: &Engine) -> MutexGuard<'_, Option<Io>> {
    engine.lock().unwrap_or_else(|e| e.into_inner())
}

fn io_loop(engine: &Engine) -> Result<()> {
    loop {
        let mut guard = lock_engine(engine);
        let Some(io) = guard.as_mut() else {
            return Err(Error::Fenced { cause: "the I/O thread's state is gone".into() });
        };
        let progress = io.round();
        if io.closing {
            let Some(io) = guard.take() else { return Ok(()) };
            drop(guard);
            return if io.abandoning { io.abandon() } else { io.finish() };
        }
        if progress {
            continue;
        }
        let nap = io.before_sleep();
        drop(guard);
        let waited = nap.storage.wait(&nap.bell, nap.timeout);
        if let Some(io) = lock_engine(engine).as_mut() {
            io.after_sleep(nap.quiet, waited);
        }
    }
}

/// What the I/O thread sleeps on, decided under the engine lock and used without it.
struct Nap {
    storage: Arc<dyn crate::storage::Storage>,
    bell: Arc<crate::storage::Bell>,
    timeout: Option<Duration>,
    quiet: bool,
}

impl Io {
    fn new(wal: Wal, shared: Arc<Shared>, rx: Receiver<Req>) -> Io {
        let staged = Vec::with_capacity(shared.opts.max_batch_entries.min(4096));
        Io {
            wal,
            shared,
            rx,
            staged,
            staged_checkpoint: false,
            flights: VecDeque::new(),
            closing: false,
            abandoning: false,
            driving: false,
            spent: Vec::new(),
        }
    }

    /// One round of the I/O thread's work: take requests, write, collect the sync, start the
    /// next one when due. Returns whether anything happened.
    fn round(&mut self) -> bool {
        let mut progress = self.take_requests();
        progress |= self.write_staged();
        progress |= self.collect();
        if self.start_sync_if_due() {
            // A backend that runs the sync at submission has its completion ready already.
            self.collect();
            progress = true;
        }
        progress
    }

    /// A caller's round for its own entry (see [`AsyncWal::append_wait`]): like the I/O
    /// thread's, but it writes at once and waits for the sync in flight instead of sleeping.
    /// Returns whether anything happened.
    fn drive(&mut self) -> bool {
        let mut progress = self.take_requests();
        progress |= self.write_now();
        progress |= self.collect();
        if self.wal.syncing() {
            match self.wal.poll_sync(true) {
                Ok(Some(took)) => self.record_sync(took),
                Ok(None) => {}
                Err(e) => self.fence(e.to_string()),
            }
            self.resolve_durable();
            progress = true;
        }
        if self.start_sync_if_due() {
            progress = true;
        }
        progress | self.collect()
    }

    /// Whether anything is left for the I/O thread to do (or to wait for).
    fn busy(&self) -> bool {
        self.closing
            || !self.rx.is_empty()
            || !self.staged.is_empty()
            || self.staged_checkpoint
            || !self.flights.is_empty()
            || self.wal.syncing()
            || self.wal.written_seq() > self.wal.durable_seq()
    }

    fn fenced(&self) -> Option<String> {
        self.shared.lock().fenced.clone()
    }

    /// Takes queued requests without blocking, up to a batch. Returns whether it took any.
    fn take_requests(&mut self) -> bool {
        let max = self.shared.opts.max_batch_entries;
        let (mut took, mut bytes) = (false, 0);
        while self.staged.len() < max && !self.closing {
            let Ok(req) = self.rx.try_recv() else { break };
            took = true;
            bytes += req.queued().1;
            self.handle(req);
        }
        if bytes > 0 {
            let mut st = self.shared.lock();
            st.untaken_bytes = st.untaken_bytes.saturating_sub(bytes);
            let room = POOL_BUFFERS.saturating_sub(st.pool.len());
            let back = self.spent.len().min(room);
            st.pool.extend(self.spent.drain(..back));
        }
        self.spent.clear();
        took
    }

    fn handle(&mut self, req: Req) {
        match req {
            Req::Close => self.closing = true,
            Req::Abandon => (self.closing, self.abandoning) = (true, true),
            Req::Checkpoint { epoch, lsn, cp } => {
                if self.fenced().is_none() {
                    let seq_before = self.wal.written_seq();
                    match self.wal.checkpoint(Epoch(epoch), Lsn(lsn), &cp) {
                        Ok(()) => self.staged_checkpoint = true,
                        // Not recorded, which loses nothing (a checkpoint is an extra check);
                        // what was staged before it is kept or withdrawn as for an append.
                        Err(e @ Error::DiskFull { .. }) => self.after_disk_full(None, seq_before, &e),
                        Err(e) => self.fence(e.to_string()),
                    }
                    self.after_log_call();
                }
            }
            Req::Purge { below, reply } => {
                // Between batches: what is staged goes out first. The purge waits for the sync
                // in flight (it rewrites wal.meta and syncs the directory).
                self.write_now();
                let r = self.wal.purge_before(below);
                let _ = reply.send(r);
                self.after_log_call();
            }
            Req::Replay { from, bound, reply } => {
                let _ = reply.send(self.replay(from, bound));
            }
            Req::Append { lsn, epoch, payload, durability, slot } => {
                if let Some(why) = self.fenced() {
                    let entries = payload.entries();
                    self.shared.release(entries, payload.bytes());
                    slot.resolve(Err(Failure::Indeterminate(why)));
                    return;
                }
                let (entries, bytes) = (payload.entries(), payload.bytes());
                let seq_before = self.wal.written_seq();
                let appended = match &payload {
                    Payload::One(p) => self.wal.append(Epoch(epoch), p),
                    Payload::Group(g) => {
                        let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                        self.wal.append_batch(Epoch(epoch), &refs)
                    }
                };
                if let Payload::One(buf) = payload {
                    if buf.capacity() <= POOL_BUFFER_BYTES {
                        self.spent.push(buf);
                    }
                }
                let p = Pending { lsn, entries, bytes, durability, slot };
                self.keep_staged(p, appended.map(|l| l.0), lsn, seq_before);
            }
            Req::Control { op, epoch, lsn, next, durability, slot } => {
                let (entries, bytes) = op.size();
                if let Some(why) = self.fenced() {
                    self.shared.release(entries, bytes);
                    slot.resolve(Err(Failure::Indeterminate(why)));
                    return;
                }
                let seq_before = self.wal.written_seq();
                let placed = op.run(&mut self.wal, Epoch(epoch));
                let p = Pending { lsn, entries, bytes, durability, slot };
                self.keep_staged(p, placed, next, seq_before);
            }
        }
    }

    /// Disk full (or a batch no segment can hold) while the log ran an operation (`failed`, if
    /// it has a ticket): nothing of it was written. What was staged before it is either written
    /// (the seal wrote it, then no new segment could be made) or withdrawn with the seal's
    /// batch that ran out of space: the log's written sequence tells which. Then `failed` and
    /// everything queued after it are withdrawn.
    fn after_disk_full(&mut self, failed: Option<Pending>, seq_before: u64, e: &Error) {
        let written = self.wal.written_seq() > seq_before;
        let staged = std::mem::take(&mut self.staged);
        let mut lost = if written {
            self.staged = staged;
            Vec::new()
        } else {
            self.staged_checkpoint = false;
            staged
        };
        self.write_now();
        lost.extend(failed);
        self.withdraw(lost, &e.to_string());
    }

    /// A replay from `from`: of the durable log, or of everything written (what is staged is
    /// written first, so it sees every append queued before the request).
    fn replay(&mut self, from: Option<Lsn>, bound: Durability) -> Result<crate::replay::Replay> {
        if bound == Durability::Written {
            if let Some(cause) = self.fenced() {
                return Err(Error::Fenced { cause });
            }
            self.write_now();
            if let Some(cause) = self.fenced() {
                return Err(Error::Fenced { cause });
            }
        }
        self.wal.replay_from(from, bound)
    }

    /// Keeps a staged append or operation after the log ran it. `placed` is the position the
    /// log reports (an append's first LSN, an operation's next LSN after it), `promised` the
    /// one the submit side gave, `seq_before` the log's written sequence before it ran.
    fn keep_staged(&mut self, p: Pending, placed: Result<u64>, promised: u64, seq_before: u64) {
        match placed {
            Ok(got) if got == promised => {
                // Mutant (tools/mutants.sh, I3): acknowledge a Durable entry as soon as
                // it is staged, before its batch is even written (the kill -9 test sees it).
                #[cfg(feature = "mutant-ack-before-write")]
                if p.durability == Durability::Durable {
                    p.slot.resolve(Ok(Lsn(p.lsn)));
                }
                self.staged.push(p)
            }
            Ok(got) => {
                self.staged.push(p);
                self.fence(format!("internal: the log is at LSN {got} where {promised} was promised"));
            }
            // Refused by the log as it ran: no space for a new segment, or a user batch larger
            // than a whole segment (the submit side checks each payload, not their sum).
            Err(e @ (Error::DiskFull { .. } | Error::TooLarge { .. })) => {
                self.after_disk_full(Some(p), seq_before, &e)
            }
            Err(e) => {
                self.staged.push(p);
                self.fence(e.to_string());
            }
        }
        self.after_log_call();
    }

    /// Whether the staged appends wait for the sync in flight to complete before their write
    /// (see [`AsyncOptions::overlap_write_bytes`]).
    fn hold_for_sync(&self) -> bool {
        let o = &self.shared.opts;
        self.wal.syncing()
            && !self.closing
            && self.staged.len() < o.max_batch_entries
            && self.staged.iter().map(|p| p.bytes).sum::<usize>() < o.overlap_write_bytes
            && !self.staged.iter().any(|p| p.durability == Durability::Written)
    }

    /// Writes the staged batch (handed to the OS) and keeps it in flight for its sync; Written
    /// tickets get their first resolution. Small batches wait while a sync is in flight.
    /// Returns whether a batch was written.
    fn write_staged(&mut self) -> bool {
        if (self.staged.is_empty() && !self.staged_checkpoint) || self.hold_for_sync() {
            return false;
        }
        self.write_now()
    }

    fn write_now(&mut self) -> bool {
        if self.staged.is_empty() && !self.staged_checkpoint {
            return false;
        }
        let during_sync = self.wal.syncing();
        if let Err(e) = self.wal.flush() {
            if matches!(e, Error::DiskFull { .. }) && !self.wal.is_fenced() {
                // The log withdrew the batch on disk (zeroed and synced): its entries are not
                // in the log, and their LSNs are free again.
                let staged = std::mem::take(&mut self.staged);
                self.staged_checkpoint = false;
                self.withdraw(staged, &e.to_string());
            } else {
                self.fence(e.to_string());
            }
            return true;
        }
        let pending = std::mem::take(&mut self.staged);
        let checkpoint = std::mem::take(&mut self.staged_checkpoint);
        let entries = pending.iter().map(|p| p.entries).sum::<usize>();
        let bytes = pending.iter().map(|p| p.bytes).sum::<usize>();
        let urgent = checkpoint || pending.iter().any(|p| p.durability == Durability::Durable);
        // Counted first: a caller woken by its ticket finds the batch in the stats.
        self.shared.metrics.batch(entries, bytes, during_sync, self.driving);
        // A written entry's payload is in the OS now: its place in the queue, which bounds
        // what waits to be written, goes back before its ticket says written. Its final word
        // still waits for the sync, which the next round makes (`written_sync_bytes`/`delay`).
        let written = pending.iter().filter(|p| p.durability == Durability::Written);
        let freed = written.fold((0, 0), |(e, b), p| (e + p.entries, b + p.bytes));
        self.shared.release(freed.0, freed.1);
        for p in pending.iter().filter(|p| p.durability == Durability::Written) {
            p.slot.resolve_written(Lsn(p.lsn));
        }
        let end_seq = self.wal.written_seq();
        // Flights resolve oldest first: each one ends past the one before it.
        debug_assert!(
            self.flights.back().is_none_or(|f| f.end_seq <= end_seq),
            "a flight ends before the last"
        );
        self.flights.push_back(Flight {
            end_seq,
            pending,
            bytes,
            held: (entries - freed.0, bytes - freed.1),
            urgent,
            written_at: Instant::now(),
        });
        true
    }

    /// Takes the sync's completion if it came and resolves what is durable now. Returns whether
    /// anything happened.
    fn collect(&mut self) -> bool {
        let mut progress = false;
        if self.wal.syncing() {
            match self.wal.poll_sync(false) {
                Ok(Some(took)) => {
                    self.record_sync(took);
                    progress = true;
                }
                Ok(None) => {}
                Err(e) => {
                    self.fence(e.to_string());
                    return true;
                }
            }
        }
        self.resolve_durable() || progress
    }

    fn record_sync(&self, took: Duration) {
        if self.shared.metrics.sync(took, self.shared.opts.slow_sync) {
            eprintln!("wal: slow fdatasync: {} ms", took.as_millis());
        }
    }

    /// Resolves, oldest first, every written batch the durable watermark covers.
    fn resolve_durable(&mut self) -> bool {
        // Mutant (tools/mutants.sh, I3): acknowledge every written batch as durable before the
        // fdatasync that covers it completed.
        let durable = if cfg!(feature = "mutant-ack-before-sync") {
            self.wal.written_seq()
        } else {
            self.wal.durable_seq()
        };
        let mut done = Vec::new();
        while self.flights.front().is_some_and(|f| f.end_seq <= durable) {
            if let Some(f) = self.flights.pop_front() {
                done.push(f);
            }
        }
        if done.is_empty() {
            return false;
        }
        // Space first: a caller woken by its ticket sees the queue as it now is.
        let entries = done.iter().map(|f| f.held.0).sum();
        let bytes = done.iter().map(|f| f.held.1).sum();
        self.shared.release(entries, bytes);
        for p in done.into_iter().flat_map(|f| f.pending) {
            p.slot.resolve(Ok(Lsn(p.lsn)));
        }
        true
    }

    /// After a call into the log that may have synced (a rotation, a purge) or failed.
    fn after_log_call(&mut self) {
        if let Some(why) = self.wal.fenced.clone() {
            if self.fenced().is_none() {
                self.fence(why);
            }
        }
        self.resolve_durable();
    }

    /// Whether the written batches need their sync now.
    fn sync_due(&self, now: Instant) -> bool {
        let Some(oldest) = self.flights.front() else {
            // Unsynced bytes without a waiting ticket (a rotation's leftovers): sync them.
            return true;
        };
        if self.closing || self.flights.iter().any(|f| f.urgent) {
            return true;
        }
        let o = &self.shared.opts;
        if self.flights.iter().map(|f| f.bytes).sum::<usize>() >= o.written_sync_bytes {
            return true;
        }
        let st = self.shared.lock();
        if st.queued_entries * 2 >= o.queue_entries || st.queued_bytes * 2 >= o.queue_bytes {
            return true;
        }
        drop(st);
        now >= oldest.written_at + o.written_sync_delay
    }

    /// Submits a sync over everything written when none is in flight and one is due.
    fn start_sync_if_due(&mut self) -> bool {
        if self.wal.syncing() || self.wal.written_seq() <= self.wal.durable_seq() || self.wal.is_fenced() {
            return false;
        }
        if !self.sync_due(Instant::now()) {
            return false;
        }
        // A flight is `urgent` when a durable entry (or a checkpoint) waits on it: kept already.
        let waited = self.flights.iter().any(|f| f.urgent);
        match self.wal.start_sync(waited) {
            Ok(started) => started,
            Err(e) => {
                self.fence(e.to_string());
                true
            }
        }
    }

    /// Prepares to sleep until a request, a completion, or the deadline of a deferred sync.
    fn before_sleep(&mut self) -> Nap {
        let deadline = if self.wal.syncing() || self.wal.written_seq() <= self.wal.durable_seq() {
            None
        } else {
            self.flights.front().map(|f| f.written_at + self.shared.opts.written_sync_delay)
        };
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // Waiting for a sync: appends below the overlap threshold let it sleep (they are
        // written when it completes). Set under the submit lock, so an append either sees it
        // or came before and rang.
        let quiet = self.wal.syncing() && self.shared.opts.overlap_write_bytes > 0;
        if quiet {
            self.shared.lock().quiet = true;
        }
        Nap { storage: self.wal.storage().clone(), bell: self.shared.bell.clone(), timeout, quiet }
    }

    fn after_sleep(&mut self, quiet: bool, waited: std::io::Result<()>) {
        if quiet {
            self.shared.lock().quiet = false;
        }
        if let Err(e) = waited {
            self.fence(format!("waiting for completions: {e}"));
        }
    }

    /// Fences the log: records why, fails every staged, written and queued ticket as
    /// Indeterminate, answers queued requests. A queued close request is kept (its caller waits).
    fn fence(&mut self, why: String) {
        self.shared.set_fenced(&why);
        let mut entries = 0;
        let mut bytes = 0;
        let mut flights = Vec::new();
        for f in self.flights.drain(..) {
            entries += f.held.0;
            bytes += f.held.1;
            flights.extend(f.pending);
        }
        for p in self.staged.drain(..) {
            entries += p.entries;
            bytes += p.bytes;
            p.slot.resolve(Err(Failure::Indeterminate(why.clone())));
        }
        for p in flights {
            p.slot.resolve(Err(Failure::Indeterminate(why.clone())));
        }
        self.staged_checkpoint = false;
        let mut untaken = 0;
        while let Ok(r) = self.rx.try_recv() {
            match r {
                r @ (Req::Append { .. } | Req::Control { .. }) => {
                    let (n, b) = r.queued();
                    entries += n;
                    bytes += b;
                    untaken += b;
                    if let Req::Append { slot, .. } | Req::Control { slot, .. } = r {
                        slot.resolve(Err(Failure::Indeterminate(why.clone())));
                    }
                }
                Req::Checkpoint { .. } => {}
                Req::Purge { reply, .. } => {
                    let _ = reply.send(Err(Error::Fenced { cause: why.clone() }));
                }
                Req::Replay { reply, .. } => {
                    let _ = reply.send(Err(Error::Fenced { cause: why.clone() }));
                }
                Req::Close => self.closing = true,
                Req::Abandon => (self.closing, self.abandoning) = (true, true),
            }
        }
        if untaken > 0 {
            let mut st = self.shared.lock();
            st.untaken_bytes = st.untaken_bytes.saturating_sub(untaken);
        }
        self.shared.release(entries, bytes);
    }

    /// Disk full: `failed` (entries that never reached the log) and every queued append were
    /// never written. Under the submit lock (no new LSN can be handed out meanwhile) they
    /// resolve Rejected, the queue counters drop them, and the next LSN becomes the log's
    /// again. The log stays usable.
    fn withdraw(&mut self, failed: Vec<Pending>, why: &str) {
        if self.shared.opts.fence_on_disk_full {
            let (entries, bytes) = failed.iter().fold((0, 0), |(e, b), p| (e + p.entries, b + p.bytes));
            let why = format!("{why} (this log fences on disk full)");
            self.shared.set_fenced(&why);
            for p in failed {
                p.slot.resolve(Err(Failure::Indeterminate(why.clone())));
            }
            self.shared.release(entries, bytes);
            self.fence(why);
            return;
        }
        let mut st = self.shared.lock();
        let mut entries = 0;
        let mut bytes = 0;
        let mut rejected = Vec::new();
        for p in failed {
            entries += p.entries;
            bytes += p.bytes;
            rejected.push(p.slot);
        }
        let mut untaken = 0;
        while let Ok(r) = self.rx.try_recv() {
            match r {
                r @ (Req::Append { .. } | Req::Control { .. }) => {
                    let (n, b) = r.queued();
                    entries += n;
                    bytes += b;
                    untaken += b;
                    if let Req::Append { slot, .. } | Req::Control { slot, .. } = r {
                        rejected.push(slot);
                    }
                }
                // Its LSN was taken before; it still belongs with the next batch.
                Req::Checkpoint { epoch, lsn, cp } => {
                    if self.wal.checkpoint(Epoch(epoch), Lsn(lsn), &cp).is_ok() {
                        self.staged_checkpoint = true;
                    }
                }
                Req::Purge { below, reply } => {
                    let _ = reply.send(self.wal.purge_before(below));
                }
                Req::Replay { from, bound, reply } => {
                    let _ = reply.send(self.wal.replay_from(from, bound));
                }
                Req::Close => self.closing = true,
                Req::Abandon => (self.closing, self.abandoning) = (true, true),
            }
        }
        st.queued_entries = st.queued_entries.saturating_sub(entries);
        st.queued_bytes = st.queued_bytes.saturating_sub(bytes);
        st.untaken_bytes = st.untaken_bytes.saturating_sub(untaken);
        st.log = Position::of(&self.wal);
        drop(st);
        self.shared.space.notify_all();
        // Resolved after the reset: a caller woken by its ticket finds the queue and the next
        // LSN as they now are.
        let untracked = rejected.iter().filter(|s| s.untracked()).count();
        let reason = format!("withdrawn after: {why}");
        for s in rejected {
            s.resolve(Err(Failure::Rejected(reason.clone())));
        }
        if untracked > 0 {
            // Nobody could hear that these were given up: the loss must not be quiet.
            self.fence(format!(
                "{untracked} entries appended without a ticket were never written ({why}); the log \
                 is fenced so that their loss cannot go unnoticed"
            ));
        }
    }

    /// At an abandon: what is not durable stays as a crash would leave it, every ticket not
    /// resolved yet resolves Indeterminate.
    fn abandon(mut self) -> Result<()> {
        self.fence("the log was abandoned".into());
        self.wal.abandon();
        Ok(())
    }

    /// At close: writes what is staged, syncs everything written, resolves, seals the log.
    fn finish(mut self) -> Result<()> {
        if self.fenced().is_none() {
            self.write_now();
        }
        if self.fenced().is_none() {
            let started = Instant::now();
            let had_unsynced = self.wal.written_seq() > self.wal.durable_seq() || self.wal.syncing();
            match self.wal.sync() {
                Ok(()) => {
                    if had_unsynced {
                        self.record_sync(started.elapsed());
                    }
                }
                Err(e) => self.fence(e.to_string()),
            }
            self.resolve_durable();
        }
        let fenced = self.fenced();
        self.fence(CLOSED.into());
        match fenced {
            Some(cause) => Err(Error::Fenced { cause }),
            None => self.wal.close(),
        }
    }
}
