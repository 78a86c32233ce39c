//! The I/O thread (first step of issue 3): callers append without touching the disk; one thread
//! turns whatever is queued into one batch, one write and one fdatasync, and resolves each
//! caller's [`Ticket`].
//!
//! - `append` checks the writer epoch and the size, assigns the LSN and enqueues in one step
//!   under one lock, so a Rejected append never consumes an LSN and the queue order is the LSN
//!   order. The queue is bounded in entries and bytes; a full queue waits or answers
//!   [`Error::Busy`] at once, as the caller chose.
//! - The I/O thread drains the queue, stages every entry, writes the batch (tickets asking for
//!   [`Durability::Written`] resolve here), runs fdatasync, and only then resolves the durable
//!   tickets (DESIGN.md I3).
//! - A failed write or sync fences the log (I6): every pending ticket resolves
//!   [`Failure::Indeterminate`], every later append is refused, nothing is retried.
//! - Disk full when a new segment is needed is not a fence: what was staged before it is
//!   committed, the failing entry and everything queued after it (never written) resolve
//!   [`Failure::Rejected`], the next LSN is the log's again, and the log stays usable.
//!
//! The thread drives the synchronous path ([`Wal::flush`], [`Wal::sync`]) over either backend;
//! overlapping the next batch's writes with a sync and the written-then-durable second
//! resolution are the rest of issue 3.

use crate::error::{Error, Result};
use crate::log::Wal;
use crate::log::{Checkpoint, PurgeReport};
use crate::ticket::{Failure, Inner, Notify, Ticket};
use crate::{Epoch, Lsn};
use crossbeam_channel::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// When a ticket resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After the fdatasync that covers the entry completed.
    Durable,
    /// When the entry's batch has been handed to the OS (it is still synced with its batch).
    Written,
}

/// What `append` does when the queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    Wait,
    Busy,
}

/// Bounds and behaviour of the queue in front of the I/O thread.
#[derive(Clone, Debug)]
pub struct AsyncOptions {
    pub queue_entries: usize,
    pub queue_bytes: usize,
    pub when_full: WhenFull,
    /// The most entries one batch takes from the queue.
    pub max_batch_entries: usize,
    /// An fdatasync at least this slow is counted and reported on stderr (etcd's "slow fdatasync").
    pub slow_sync: std::time::Duration,
}

impl Default for AsyncOptions {
    fn default() -> Self {
        AsyncOptions {
            queue_entries: 4096,
            queue_bytes: 64 << 20,
            when_full: WhenFull::Wait,
            max_batch_entries: 1024,
            slow_sync: std::time::Duration::from_secs(1),
        }
    }
}

struct Submit {
    next_lsn: u64,
    epoch: u64,
    queued_entries: usize,
    queued_bytes: usize,
    fenced: Option<String>,
    closing: bool,
}

struct Shared {
    submit: Mutex<Submit>,
    metrics: crate::metrics::Metrics,
    space: Condvar,
    max_payload: usize,
    opts: AsyncOptions,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Submit> {
        self.submit.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one append carries: one entry, or a user batch (an atomic group such as a job array)
/// that takes consecutive LSNs and survives a crash whole or not at all.
#[derive(Debug)]
pub enum Payload {
    One(Vec<u8>),
    Group(Vec<Vec<u8>>),
}

impl Payload {
    fn entries(&self) -> usize {
        match self {
            Payload::One(_) => 1,
            Payload::Group(g) => g.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Payload::One(p) => p.len(),
            Payload::Group(g) => g.iter().map(Vec::len).sum(),
        }
    }
}

enum Req {
    Append {
        lsn: u64,
        epoch: u64,
        payload: Payload,
        durability: Durability,
        ticket: Arc<Inner>,
    },
    /// A checkpoint record, staged with the next batch (made durable by its sync).
    Checkpoint {
        lsn: u64,
        cp: Checkpoint,
    },
    /// A prefix purge, run between batches; the result goes back on `reply`.
    Purge {
        below: Lsn,
        reply: Sender<Result<PurgeReport>>,
    },
    /// A replay of the durable log from an LSN (for tailing readers).
    Replay {
        from: Lsn,
        reply: Sender<Result<crate::replay::Replay>>,
    },
    Close,
}

/// A log driven by its own I/O thread.
pub struct AsyncWal {
    shared: Arc<Shared>,
    tx: Sender<Req>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl std::fmt::Debug for AsyncWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AsyncWal")
    }
}

impl AsyncWal {
    /// Hands `wal` to a new I/O thread.
    pub fn start(wal: Wal, opts: AsyncOptions) -> Result<AsyncWal> {
        if opts.queue_entries == 0 || opts.max_batch_entries == 0 {
            return Err(Error::InvalidArgument(
                "queue_entries and max_batch_entries must be at least 1".into(),
            ));
        }
        let shared = Arc::new(Shared {
            submit: Mutex::new(Submit {
                next_lsn: wal.next_lsn().0,
                epoch: wal.epoch().0,
                queued_entries: 0,
                queued_bytes: 0,
                fenced: wal.is_poisoned().then(|| "the log was already fenced".to_string()),
                closing: false,
            }),
            space: Condvar::new(),
            metrics: Default::default(),
            max_payload: wal.max_payload_bytes() as usize,
            opts,
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("wal-io".into())
            .spawn(move || io_loop(wal, &sh, &rx))
            .map_err(|e| Error::io("starting the I/O thread", e))?;
        Ok(AsyncWal { shared, tx, thread: Some(thread) })
    }

    /// Enqueues one entry and returns its ticket at once (or waits for queue space, if chosen).
    /// Errors are Rejected: nothing was enqueued and no LSN was consumed.
    pub fn append(&self, epoch: Epoch, payload: Vec<u8>, durability: Durability) -> Result<Ticket> {
        self.append_with(epoch, Payload::One(payload), durability, None)
    }

    /// [`AsyncWal::append`] for one entry or a user batch, optionally also delivering the
    /// outcome to a completion channel. A group's ticket carries its first LSN and resolves when
    /// the whole group does.
    pub fn append_with(
        &self,
        epoch: Epoch,
        payload: Payload,
        durability: Durability,
        notify: Option<Notify>,
    ) -> Result<Ticket> {
        let (count, len) = (payload.entries(), payload.bytes());
        if count == 0 {
            return Err(Error::InvalidArgument("empty batch".into()));
        }
        let max = self.shared.max_payload;
        let largest = match &payload {
            Payload::One(p) => p.len(),
            Payload::Group(g) => g.iter().map(Vec::len).max().unwrap_or(0),
        };
        if largest > max {
            return Err(Error::TooLarge { len: largest as u64, max: max as u64 });
        }
        let opts = &self.shared.opts;
        let mut st = self.shared.lock();
        loop {
            if let Some(cause) = &st.fenced {
                return Err(Error::Poisoned { cause: cause.clone() });
            }
            if st.closing {
                return Err(Error::ReadOnly);
            }
            if epoch.0 < st.epoch {
                return Err(Error::StaleEpoch { current: st.epoch, given: epoch.0 });
            }
            if epoch.0 > st.epoch {
                return Err(Error::EpochNotAdvanced { current: st.epoch, given: epoch.0 });
            }
            let fits = st.queued_entries < opts.queue_entries
                && (st.queued_entries == 0 || st.queued_bytes + len <= opts.queue_bytes);
            if fits {
                break;
            }
            if opts.when_full == WhenFull::Busy {
                return Err(Error::Busy);
            }
            st = self.shared.space.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let lsn = st.next_lsn;
        let ticket = Ticket::new(Lsn(lsn), notify);
        let req = Req::Append { lsn, epoch: epoch.0, payload, durability, ticket: ticket.inner.clone() };
        // Sent under the lock: the queue order is the LSN order.
        if self.tx.send(req).is_err() {
            return Err(Error::Poisoned { cause: "the I/O thread has stopped".into() });
        }
        st.next_lsn += count as u64;
        st.queued_entries += count;
        st.queued_bytes += len;
        Ok(ticket)
    }

    /// Records a checkpoint for `lsn` (an LSN already handed out) with the next batch. It is
    /// durable with that batch's sync; a fenced or closed log drops it (a checkpoint is an
    /// extra check, never needed to recover).
    pub fn checkpoint(&self, lsn: Lsn, cp: Checkpoint) -> Result<()> {
        let st = self.shared.lock();
        if let Some(cause) = &st.fenced {
            return Err(Error::Poisoned { cause: cause.clone() });
        }
        if lsn.0 >= st.next_lsn {
            return Err(Error::InvalidArgument(format!(
                "checkpoint at {lsn} covers an entry the log has not taken (next LSN {})",
                st.next_lsn
            )));
        }
        self.tx
            .send(Req::Checkpoint { lsn: lsn.0, cp })
            .map_err(|_| Error::Poisoned { cause: "the I/O thread has stopped".into() })
    }

    /// Purges whole segments below `below` on the I/O thread (between batches) and waits for
    /// the result. See [`Wal::purge_before`].
    pub fn purge_before(&self, below: Lsn) -> Result<PurgeReport> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.tx
            .send(Req::Purge { below, reply })
            .map_err(|_| Error::Poisoned { cause: "the I/O thread has stopped".into() })?;
        rx.recv().map_err(|_| Error::Poisoned { cause: "the I/O thread has stopped".into() })?
    }

    /// A replay of the durable log from `from`, as of now (it sees later batches only if it
    /// is asked for again). Served by the I/O thread between batches.
    pub fn replay_from(&self, from: Lsn) -> Result<crate::replay::Replay> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.tx
            .send(Req::Replay { from, reply })
            .map_err(|_| Error::Poisoned { cause: "the I/O thread has stopped".into() })?;
        rx.recv().map_err(|_| Error::Poisoned { cause: "the I/O thread has stopped".into() })?
    }

    /// The next LSN an append will take.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.shared.lock().next_lsn)
    }

    /// The writer epoch appends must carry.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.shared.lock().epoch)
    }

    /// Why the log is fenced, if it is.
    pub fn fenced(&self) -> Option<String> {
        self.shared.lock().fenced.clone()
    }

    /// Counters and histograms of the I/O thread (appends, bytes, batches, entries per batch,
    /// sync latency, slow syncs, queue depth).
    pub fn stats(&self) -> crate::metrics::Stats {
        let depth = self.shared.lock().queued_entries;
        self.shared.metrics.snapshot(depth)
    }

    /// Drains the queue, syncs, seals and stops the I/O thread; every ticket is resolved.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else { return Ok(()) };
        self.shared.lock().closing = true;
        let _ = self.tx.send(Req::Close);
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err(Error::Poisoned { cause: "the I/O thread panicked".into() }),
        }
    }
}

impl Drop for AsyncWal {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

struct Pending {
    lsn: u64,
    entries: usize,
    bytes: usize,
    durability: Durability,
    ticket: Arc<Inner>,
}

/// Fences the log: records why, fails every given and queued ticket as Indeterminate. Returns
/// whether a close request was among the queued ones (it must not be lost: the caller waits).
#[must_use]
fn fence(shared: &Shared, rx: &Receiver<Req>, batch: &mut Vec<Pending>, why: String) -> bool {
    shared.lock().fenced.get_or_insert_with(|| why.clone());
    for p in batch.drain(..) {
        p.ticket.resolve(Err(Failure::Indeterminate(why.clone())));
    }
    let mut close = false;
    while let Ok(r) = rx.try_recv() {
        match r {
            Req::Append { ticket, .. } => ticket.resolve(Err(Failure::Indeterminate(why.clone()))),
            Req::Checkpoint { .. } => {}
            Req::Purge { reply, .. } => {
                let _ = reply.send(Err(Error::Poisoned { cause: why.clone() }));
            }
            Req::Replay { reply, .. } => {
                let _ = reply.send(Err(Error::Poisoned { cause: why.clone() }));
            }
            Req::Close => close = true,
        }
    }
    close
}

/// Disk full at a rotation: the failed entry (`failed_bytes`) and every queued one were never
/// written. Under the submit lock (no new LSN can be handed out meanwhile), every queued ticket
/// resolves Rejected, the queue counters drop them, and the next LSN becomes the log's again.
/// The log stays usable. Returns whether a close request was queued.
fn withdraw_queue(wal: &mut Wal, shared: &Shared, rx: &Receiver<Req>, failed: &Payload, why: &str) -> bool {
    let mut st = shared.lock();
    let (mut entries, mut bytes, mut close) = (failed.entries(), failed.bytes(), false);
    while let Ok(r) = rx.try_recv() {
        match r {
            Req::Append { payload, ticket, .. } => {
                entries += payload.entries();
                bytes += payload.bytes();
                ticket.resolve(Err(Failure::Rejected(format!("withdrawn after: {why}"))));
            }
            // Its LSN was applied before; it still belongs with the next batch.
            Req::Checkpoint { lsn, cp } => {
                let _ = wal.checkpoint(wal.epoch(), Lsn(lsn), &cp);
            }
            Req::Purge { below, reply } => {
                let _ = reply.send(wal.purge_before(below));
            }
            Req::Replay { from, reply } => {
                let _ = reply.send(wal.replay_from(Some(from), crate::replay::Bound::Durable));
            }
            Req::Close => close = true,
        }
    }
    st.queued_entries = st.queued_entries.saturating_sub(entries);
    st.queued_bytes = st.queued_bytes.saturating_sub(bytes);
    st.next_lsn = wal.next_lsn().0;
    drop(st);
    shared.space.notify_all();
    close
}

fn io_loop(mut wal: Wal, shared: &Shared, rx: &Receiver<Req>) -> Result<()> {
    let max = shared.opts.max_batch_entries;
    let mut batch: Vec<Pending> = Vec::with_capacity(max);
    let mut closing = false;
    // A checkpoint was staged without entries: it still gets its write and sync.
    let mut staged_alone = false;
    while !closing {
        let Ok(first) = rx.recv() else { break };
        let mut next = Some(first);
        while let Some(req) = next.take() {
            match req {
                Req::Close => {
                    closing = true;
                    break;
                }
                Req::Checkpoint { lsn, cp } => {
                    if shared.lock().fenced.is_none() {
                        match wal.checkpoint(wal.epoch(), Lsn(lsn), &cp) {
                            Ok(()) => staged_alone = true,
                            Err(e) => closing |= fence(shared, rx, &mut batch, e.to_string()),
                        }
                    }
                }
                Req::Purge { below, reply } => {
                    // Between batches: what is staged goes out first.
                    if !batch.is_empty() {
                        closing |= commit(&mut wal, shared, rx, &mut batch);
                    }
                    let _ = reply.send(wal.purge_before(below));
                }
                Req::Replay { from, reply } => {
                    let _ = reply.send(wal.replay_from(Some(from), crate::replay::Bound::Durable));
                }
                Req::Append { lsn, epoch, payload, durability, ticket } => {
                    let fenced = shared.lock().fenced.clone();
                    if let Some(why) = fenced {
                        ticket.resolve(Err(Failure::Indeterminate(why)));
                    } else {
                        let (entries, bytes) = (payload.entries(), payload.bytes());
                        let appended = match &payload {
                            Payload::One(p) => wal.append(Epoch(epoch), p),
                            Payload::Group(g) => {
                                let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                                wal.append_batch(Epoch(epoch), &refs)
                            }
                        };
                        match appended {
                            Ok(got) if got.0 == lsn => {
                                batch.push(Pending { lsn, entries, bytes, durability, ticket });
                            }
                            Ok(got) => {
                                batch.push(Pending { lsn, entries, bytes, durability, ticket });
                                let why =
                                    format!("internal: the log gave LSN {} where {lsn} was promised", got.0);
                                closing |= fence(shared, rx, &mut batch, why);
                            }
                            Err(e @ Error::DiskFull { .. }) => {
                                // Nothing of this entry was written: commit what the batch
                                // holds, then withdraw this entry and everything queued after it.
                                if !batch.is_empty() {
                                    closing |= commit(&mut wal, shared, rx, &mut batch);
                                }
                                // Withdraw first: a caller woken by this ticket must find the
                                // queue and the next LSN already reset.
                                closing |= withdraw_queue(&mut wal, shared, rx, &payload, &e.to_string());
                                ticket.resolve(Err(Failure::Rejected(e.to_string())));
                            }
                            Err(e) => {
                                batch.push(Pending { lsn, entries, bytes, durability, ticket });
                                closing |= fence(shared, rx, &mut batch, e.to_string());
                            }
                        }
                    }
                }
            }
            if batch.len() < max {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() || std::mem::take(&mut staged_alone) {
            closing |= commit(&mut wal, shared, rx, &mut batch);
        }
    }
    let fenced = shared.lock().fenced.clone();
    let _ = fence(shared, rx, &mut batch, "the log was closed".into());
    match fenced {
        Some(cause) => Err(Error::Poisoned { cause }),
        None => wal.close(),
    }
}

/// One write and one fdatasync for the whole batch; tickets resolve in that order. Returns
/// whether a fence met a close request.
fn commit(wal: &mut Wal, shared: &Shared, rx: &Receiver<Req>, batch: &mut Vec<Pending>) -> bool {
    let entries = batch.iter().map(|p| p.entries).sum::<usize>();
    let bytes = batch.iter().map(|p| p.bytes).sum::<usize>();
    let release = |shared: &Shared| {
        let mut st = shared.lock();
        st.queued_entries -= entries;
        st.queued_bytes -= bytes;
        drop(st);
        shared.space.notify_all();
    };
    if let Err(e) = wal.flush() {
        let close = fence(shared, rx, batch, e.to_string());
        release(shared);
        return close;
    }
    for p in batch.iter().filter(|p| p.durability == Durability::Written) {
        p.ticket.resolve(Ok(Lsn(p.lsn)));
    }
    shared.metrics.batch(entries, bytes);
    let started = std::time::Instant::now();
    let synced = wal.sync();
    let took = started.elapsed();
    if shared.metrics.sync(took, shared.opts.slow_sync) {
        eprintln!("wal: slow fdatasync: {} ms for {entries} entries", took.as_millis());
    }
    if let Err(e) = synced {
        let close = fence(shared, rx, batch, e.to_string());
        release(shared);
        return close;
    }
    // Space first: a caller woken by its ticket sees the queue as it now is.
    release(shared);
    for p in batch.drain(..) {
        p.ticket.resolve(Ok(Lsn(p.lsn)));
    }
    false
}
