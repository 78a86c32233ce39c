//! The I/O thread: its state under the engine lock ([`Io`]), its loop, and the rounds it (or a
//! caller of `append_wait`) runs: write the staged batch, collect the sync in flight, resolve
//! what it made durable, start the next sync when one is due, and sleep with that deadline.

use super::queue::{Req, Shared, Slot};
use crate::error::{Error, Result};
use crate::log::Wal;
use crate::{Durability, Lsn};
use crossbeam_channel::Receiver;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One append taken from the queue.
pub(super) struct Pending {
    pub(super) lsn: u64,
    pub(super) entries: usize,
    pub(super) bytes: usize,
    pub(super) durability: Durability,
    pub(super) slot: Slot,
}

/// A written batch waiting for the sync that covers it.
pub(super) struct Flight {
    /// The log's written record sequence after this batch: a completed sync that covered it
    /// makes every entry here durable.
    pub(super) end_seq: u64,
    pub(super) pending: Vec<Pending>,
    pub(super) bytes: usize,
    /// The entries and bytes of `pending` that still hold their place in the queue (the
    /// `Durable` ones: a `Written` entry gives its place back once written).
    pub(super) held: (usize, usize),
    /// Holds a Durable entry or a checkpoint: its sync is due at once.
    pub(super) urgent: bool,
    pub(super) written_at: Instant,
}

/// The I/O thread's state. It lives under [`AsyncWal`]'s engine lock: the I/O thread holds it
/// while it works and lets go while it sleeps, so a caller waiting for its own entry
/// ([`AsyncWal::append_wait`]) can do a round of the same work on its own thread.
pub(super) struct Io {
    pub(super) wal: Wal,
    pub(super) shared: Arc<Shared>,
    pub(super) rx: Receiver<Req>,
    /// Appends staged in the log's batch buffer, not written yet.
    pub(super) staged: Vec<Pending>,
    /// A checkpoint was staged: the batch is written and synced even without entries.
    pub(super) staged_checkpoint: bool,
    /// Written batches waiting for their sync, oldest first.
    pub(super) flights: VecDeque<Flight>,
    pub(super) closing: bool,
    /// The close is an abandon: nothing more is written, synced or sealed.
    pub(super) abandoning: bool,
    /// A caller of `append_wait` runs this round (counted in the stats).
    pub(super) driving: bool,
    /// Staged payload buffers on their way back to the submit pool.
    pub(super) spent: Vec<Vec<u8>>,
}

/// The engine lock: the I/O thread's state, `None` once the thread has finished with it.
pub(super) type Engine = Mutex<Option<Io>>;

pub(super) fn lock_engine(engine: &Engine) -> MutexGuard<'_, Option<Io>> {
    engine.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn io_loop(engine: &Engine) -> Result<()> {
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
pub(super) struct Nap {
    pub(super) storage: Arc<dyn crate::storage::Storage>,
    pub(super) bell: Arc<crate::storage::Bell>,
    pub(super) timeout: Option<Duration>,
    pub(super) quiet: bool,
}

impl Io {
    pub(super) fn new(wal: Wal, shared: Arc<Shared>, rx: Receiver<Req>) -> Io {
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
    pub(super) fn drive(&mut self) -> bool {
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
    pub(super) fn busy(&self) -> bool {
        self.closing
            || !self.rx.is_empty()
            || !self.staged.is_empty()
            || self.staged_checkpoint
            || !self.flights.is_empty()
            || self.wal.syncing()
            || self.wal.written_seq() > self.wal.durable_seq()
    }

    pub(super) fn fenced(&self) -> Option<String> {
        self.shared.fence_cause()
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

    pub(super) fn write_now(&mut self) -> bool {
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

    pub(super) fn record_sync(&self, took: Duration) {
        if self.shared.metrics.sync(took, self.shared.opts.slow_sync) {
            // Through the `log` facade, to whatever logger the application installed (none: the
            // message goes nowhere). The count is in `Stats::slow_syncs` either way.
            log::warn!(target: "wal", "slow fdatasync: {} ms", took.as_millis());
        }
    }

    /// Resolves, oldest first, every written batch the durable watermark covers.
    pub(super) fn resolve_durable(&mut self) -> bool {
        // Mutant (tools/mutants.sh, I3): acknowledge every written batch as durable before the
        // fdatasync that covers it completed.
        let durable = if crate::mutants::on("ack-before-sync") {
            self.wal.written_seq()
        } else {
            self.wal.durable_seq()
        };
        self.shared.set_durable_lsn(self.wal.durable_lsn());
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
    pub(super) fn after_log_call(&mut self) {
        if let Some(why) = self.wal.fence_cause().map(str::to_owned) {
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
}
