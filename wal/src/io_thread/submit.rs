//! The submit side: [`AsyncWal`]. An append is checked (epoch, size), given its LSN and queued
//! in one step under the submit lock, so a refusal consumes nothing and the queue order is the
//! LSN order; the queue is bounded in entries and bytes. Every other operation is checked and
//! placed the same way (`control.rs`), all by the log's own admission code (`log/position.rs`)
//! on the submit side's copy of its position. A caller of `append_wait` that finds the engine
//! lock free runs the I/O thread's round on its own thread.

use super::control::Control;
use super::engine::{io_loop, lock_engine, Engine, Io};
use super::queue::{durable_word, Req, Shared, Slot, Submit, CLOSED};
use super::{AsyncOptions, IntoPayload, WhenFull};
use crate::error::{Error, Result};
use crate::log::{Checkpoint, Position, PurgeReport, Wal};
use crate::storage::Bell;
use crate::ticket::{Notify, Ticket};
use crate::{Durability, Epoch, Lsn};
use crossbeam_channel::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

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
                log: wal.position().clone(),
                queued_entries: 0,
                queued_bytes: 0,
                closing: false,
                untaken_bytes: 0,
                quiet: false,
                pool: Vec::new(),
                space_waiters: 0,
            }),
            space: Condvar::new(),
            bell: Arc::new(Bell::new()),
            metrics: Default::default(),
            max_payload: wal.max_payload_bytes() as usize,
            opts,
            fenced: match wal.is_fenced() {
                true => OnceLock::from("the log was already fenced".to_string()),
                false => OnceLock::new(),
            },
            durable: std::sync::atomic::AtomicU64::new(durable_word(wal.durable_lsn())),
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

    /// Enqueues one entry (a borrowed slice, copied once; or an owned buffer or [`Payload`](super::Payload),
    /// moved: [`IntoPayload`]) and returns its ticket at once (or waits for queue space, if
    /// chosen). Errors are Rejected: nothing was enqueued and no LSN was consumed.
    pub fn append(&self, epoch: Epoch, payload: impl IntoPayload, durability: Durability) -> Result<Ticket> {
        self.append_with(epoch, payload, durability, None)
    }

    /// [`Wal::append_batch`] on the I/O thread: a user batch, borrowed, as the synchronous
    /// handle takes it (the entries take consecutive LSNs and survive a crash together). The
    /// same as [`AsyncWal::append`] with the slice; the ticket carries the first LSN.
    pub fn append_batch(&self, epoch: Epoch, payloads: &[&[u8]], durability: Durability) -> Result<Ticket> {
        self.append_with(epoch, payloads, durability, None)
    }

    /// [`Wal::append_batch_at`] on the I/O thread: [`AsyncWal::append_at`] with a borrowed
    /// user batch.
    pub fn append_batch_at(
        &self,
        epoch: Epoch,
        lsn: Lsn,
        payloads: &[&[u8]],
        durability: Durability,
    ) -> Result<Ticket> {
        self.append_at(epoch, lsn, payloads, durability)
    }

    /// [`AsyncWal::append`] for one entry or a user batch, optionally also delivering the
    /// outcome to a completion channel (a `Written` entry delivers two: written, then final).
    /// A group's ticket carries its first LSN and resolves when the whole group does.
    pub fn append_with(
        &self,
        epoch: Epoch,
        payload: impl IntoPayload,
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
    /// the fdatasync. When the thread is busy, or the backend
    /// sleeps holding its ring (io_uring), it is `append_with` and a wait. Either way the
    /// ticket resolves exactly as it would on the I/O thread (the same code runs the round).
    pub fn append_wait(&self, epoch: Epoch, payload: impl IntoPayload) -> Result<Ticket> {
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
    /// error and the payload when it was not consumed. A borrowed payload is copied only once
    /// admitted, under the same lock, into a buffer from the pool.
    fn enqueue<P: IntoPayload>(
        &self,
        epoch: Epoch,
        payload: P,
        durability: Durability,
        notify: Option<Notify>,
        ring: bool,
        when_full: WhenFull,
    ) -> std::result::Result<Ticket, (Error, Option<P>)> {
        let (count, len, largest) = payload.shape();
        // The largest payload stands for all: if any is too large, it is.
        if let Err(e) = Position::check_entries(count, [largest], self.shared.max_payload) {
            return Err((e, Some(payload)));
        }
        let mut st = match self.admit(self.shared.lock(), Some(epoch), len, when_full) {
            Ok(st) => st,
            Err(e) => return Err((e, Some(payload))),
        };
        let payload = payload.into_payload(&mut || st.pool.pop().unwrap_or_default());
        let lsn = st.log.append(count as u64);
        let ticket = Ticket::new(Lsn(lsn), notify);
        let slot = Slot(Some(ticket.inner.clone()));
        let req = Req::Append { lsn, epoch: epoch.0, payload, durability, slot };
        self.send_locked(st, req, count, len, ring).map_err(|e| (e, None))?;
        // Mutant (tools/mutants.sh, I5): the caller blocks until its entry is durable.
        if crate::mutants::on("append-blocks-on-sync") {
            let _ = ticket.wait_durable();
        }
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
        Position::check_entries(1, [len], self.shared.max_payload)?;
        let mut st = self.admit(self.shared.lock(), Some(epoch), len, self.shared.opts.when_full)?;
        let payload = payload.into_payload(&mut || st.pool.pop().unwrap_or_default());
        let lsn = st.log.append(1);
        let req = Req::Append { lsn, epoch: epoch.0, payload, durability, slot: Slot(None) };
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
            if let Some(cause) = self.shared.fenced.get() {
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
            st.space_waiters += 1;
            st = self.shared.space.wait(st).unwrap_or_else(|e| e.into_inner());
            st.space_waiters -= 1;
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
        payload: impl IntoPayload,
        durability: Durability,
    ) -> Result<Ticket> {
        // A buffer of its own (an operation's payload does not go back to the pool), made
        // only for a payload within the limit.
        let (entries, _, largest) = payload.shape();
        Position::check_entries(entries, [largest], self.shared.max_payload)?;
        let payload = payload.into_payload(&mut Vec::new);
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

    /// [`Wal::sync`] on the I/O thread: everything queued before it is written and made
    /// durable by an fdatasync started now, not after [`AsyncOptions::written_sync_delay`]
    /// (`Written` entries a caller now needs durable). The ticket carries the next LSN and
    /// resolves once everything queued before it is durable: at once, without a sync, when
    /// nothing was left unsynced. Like every operation it is admitted only when the queue has
    /// room (it waits, or answers [`Error::Busy`], as [`AsyncOptions::when_full`] says), and a
    /// fenced log refuses it, as it refuses an append.
    pub fn sync(&self) -> Result<Ticket> {
        self.control(None, Control::Sync, Durability::Durable)
    }

    /// Checks `op` and enqueues it under the submit lock (the one place that moves the log's
    /// position): a refusal consumes nothing.
    fn control(&self, epoch: Option<Epoch>, op: Control, durability: Durability) -> Result<Ticket> {
        let (count, len) = op.size();
        let when_full = self.shared.opts.when_full;
        let mut st = self.admit(self.shared.lock(), epoch.filter(|_| op.carries_epoch()), len, when_full)?;
        let lsn = op.admit(&mut st.log, self.shared.max_payload)?;
        let (next, current) = (st.log.next_lsn(), st.log.epoch());
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
        if let Some(cause) = self.shared.fenced.get() {
            return Err(Error::Fenced { cause: cause.clone() });
        }
        st.log.check_epoch(epoch)?;
        st.log.check_checkpoint(lsn.0)?;
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

    /// [`Wal::replay`] on the I/O thread: every live entry and checkpoint of every operation
    /// queued before it, written or durable ([`AsyncWal::replay_from`] from the start, up to
    /// [`Durability::Written`]).
    pub fn replay(&self) -> Result<crate::replay::Replay> {
        self.replay_from(None, Durability::Written)
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
        Lsn(self.shared.lock().log.next_lsn())
    }

    /// The writer epoch appends must carry.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.shared.lock().log.epoch())
    }

    /// The lowest live LSN once every operation admitted so far is in the log (as
    /// [`AsyncWal::next_lsn`]), if it will hold live entries.
    pub fn first_lsn(&self) -> Option<Lsn> {
        self.shared.lock().log.first_lsn().map(Lsn)
    }

    /// The last value recorded for a metadata key once every operation admitted so far is in
    /// the log (a [`AsyncWal::set_meta`] counts from the moment it returns), or `None` if the
    /// key was never set.
    pub fn meta(&self, key: u32) -> Option<Vec<u8>> {
        self.shared.lock().log.meta(key).map(<[u8]>::to_vec)
    }

    /// The last LSN a completed sync covered, if any, as the I/O thread last saw it (it
    /// publishes this just before resolving the tickets that sync covers), as
    /// [`Wal::durable_lsn`]: after a truncation or a reset is durable it is the cut log's last
    /// LSN, which may be lower than before.
    pub fn durable_lsn(&self) -> Option<Lsn> {
        self.shared.durable_lsn()
    }

    /// Why the log is fenced, if it is.
    pub fn fenced(&self) -> Option<String> {
        self.shared.fence_cause()
    }

    /// Whether the log is fenced: every later operation is refused, as [`Wal::is_fenced`].
    pub fn is_fenced(&self) -> bool {
        self.shared.fenced.get().is_some()
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
