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
use crate::ticket::{Failure, Inner, Ticket};
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

enum Req {
    Append { lsn: u64, epoch: u64, payload: Vec<u8>, durability: Durability, ticket: Arc<Inner> },
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
        let len = payload.len();
        if len > self.shared.max_payload {
            return Err(Error::TooLarge { len: len as u64, max: self.shared.max_payload as u64 });
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
        let ticket = Ticket::new(Lsn(lsn));
        let req = Req::Append { lsn, epoch: epoch.0, payload, durability, ticket: ticket.inner.clone() };
        // Sent under the lock: the queue order is the LSN order.
        if self.tx.send(req).is_err() {
            return Err(Error::Poisoned { cause: "the I/O thread has stopped".into() });
        }
        st.next_lsn += 1;
        st.queued_entries += 1;
        st.queued_bytes += len;
        Ok(ticket)
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
            Req::Close => close = true,
        }
    }
    close
}

/// Disk full at a rotation: the failed entry (`failed_bytes`) and every queued one were never
/// written. Under the submit lock (no new LSN can be handed out meanwhile), every queued ticket
/// resolves Rejected, the queue counters drop them, and the next LSN becomes the log's again.
/// The log stays usable. Returns whether a close request was queued.
fn withdraw_queue(wal: &Wal, shared: &Shared, rx: &Receiver<Req>, failed_bytes: usize, why: &str) -> bool {
    let mut st = shared.lock();
    let (mut entries, mut bytes, mut close) = (1usize, failed_bytes, false);
    while let Ok(r) = rx.try_recv() {
        match r {
            Req::Append { payload, ticket, .. } => {
                entries += 1;
                bytes += payload.len();
                ticket.resolve(Err(Failure::Rejected(format!("withdrawn after: {why}"))));
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
    while !closing {
        let Ok(first) = rx.recv() else { break };
        let mut next = Some(first);
        while let Some(req) = next.take() {
            match req {
                Req::Close => {
                    closing = true;
                    break;
                }
                Req::Append { lsn, epoch, payload, durability, ticket } => {
                    let fenced = shared.lock().fenced.clone();
                    if let Some(why) = fenced {
                        ticket.resolve(Err(Failure::Indeterminate(why)));
                    } else {
                        match wal.append(Epoch(epoch), &payload) {
                            Ok(got) if got.0 == lsn => {
                                batch.push(Pending { lsn, bytes: payload.len(), durability, ticket });
                            }
                            Ok(got) => {
                                batch.push(Pending { lsn, bytes: payload.len(), durability, ticket });
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
                                closing |= withdraw_queue(&wal, shared, rx, payload.len(), &e.to_string());
                                ticket.resolve(Err(Failure::Rejected(e.to_string())));
                            }
                            Err(e) => {
                                batch.push(Pending { lsn, bytes: payload.len(), durability, ticket });
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
        if !batch.is_empty() {
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
    let (entries, bytes) = (batch.len(), batch.iter().map(|p| p.bytes).sum::<usize>());
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
