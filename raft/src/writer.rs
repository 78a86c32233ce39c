//! The log's writer thread: the one FIFO every write (and every read) of the Raft log goes
//! through, with group commit.
//!
//! It owns the synchronous [`wal::Wal`] handle. Each round it blocks for one request, takes
//! whatever else is queued (up to [`MAX_ROUND`]), stages all of it into the log in queue order
//! (entries at their Raft index with `append_at`, metadata records, truncation and reset
//! records), answers reads in place (after writing what is staged to the OS, so a read sees every
//! entry appended before it, durable or not: `Bound::Written`), then runs one `sync` (a real
//! fdatasync over everything written) and only after it returned `Ok` completes every write of
//! the round, in queue order: an append's `IOFlushed` callback fires here, from this thread,
//! after the fdatasync. A failed stage or sync fences the writer: every write of the round and
//! every later request fails, nothing is retried (the log is poisoned, docs/invariants.md I6).
//!
//! A purge's physical part (removing whole sealed segments below the purged index) runs after
//! the round's sync, when the purge record is durable.

use crate::TypeConfig;
use openraft::storage::IOFlushed;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;
use wal::{Bound, Epoch, ItemKind, Lsn, Wal};

/// The most requests one round stages before it syncs.
pub(crate) const MAX_ROUND: usize = 1024;

/// Raft writes carry writer epoch 0: fencing of stale leaders is Raft's vote, not the log's.
pub(crate) const EPOCH: Epoch = Epoch(0);

/// How a write is acknowledged once its round's sync completed.
pub(crate) enum Done {
    /// An append's durability callback.
    Flushed(IOFlushed<TypeConfig>),
    /// A caller awaiting the result (vote, committed, truncate, purge).
    Reply(tokio::sync::oneshot::Sender<io::Result<()>>),
}

impl Done {
    fn complete(self, r: io::Result<()>) {
        match self {
            Done::Flushed(cb) => cb.io_completed(r),
            Done::Reply(tx) => {
                let _ = tx.send(r);
            }
        }
    }
}

pub(crate) type Entries = Vec<(u64, Vec<u8>)>;

pub(crate) enum Req {
    /// Entries (index, encoded payload), contiguous, checked by the store.
    Append { entries: Entries, done: Done },
    /// A metadata record (vote, committed).
    Meta { key: u32, value: Vec<u8>, done: Done },
    /// Cut every entry after `after`; `None`: cut every entry, the next one is `next`.
    Truncate { after: Option<u64>, next: u64, done: Done },
    /// Record the purged log id; with `reset`, cut every entry (all are at or below it) and
    /// make `upto + 1` the next index. After the sync, remove segments wholly at or below it.
    Purge { upto: u64, value: Vec<u8>, reset: bool, done: Done },
    /// Entries with `start <= index < end` and `index > floor`, as written so far.
    Read {
        start: u64,
        end: u64,
        floor: Option<u64>,
        reply: tokio::sync::oneshot::Sender<io::Result<Entries>>,
        /// When it was queued (the counters add up how long reads wait for the writer).
        queued: Instant,
    },
    /// A checkpoint record for an applied index, staged with the next batch (no answer).
    Checkpoint { lsn: u64, cp: wal::Checkpoint },
    /// Sync, seal and stop (a clean close).
    Close { done: Sender<io::Result<()>> },
    /// Stop without syncing or sealing: what a crash leaves (tests).
    Abandon { done: Sender<()> },
}

/// Counters of the writer thread's work (read with [`crate::LogStore::io_stats`]): how many
/// fdatasyncs the log ran and what they covered, to see how well writes share them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    rounds: AtomicU64,
    syncs: AtomicU64,
    sync_ns: AtomicU64,
    appends: AtomicU64,
    entries: AtomicU64,
    votes: AtomicU64,
    committed: AtomicU64,
    truncates: AtomicU64,
    purges: AtomicU64,
    reads: AtomicU64,
    read_wait_ns: AtomicU64,
    cached_reads: AtomicU64,
    /// Why the writer is fenced, once it is (reads served from memory fail then too).
    fenced: std::sync::OnceLock<String>,
}

/// A copy of the writer's counters since the log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoStats {
    /// Rounds that staged at least one write.
    pub rounds: u64,
    /// fdatasyncs run (one per such round).
    pub syncs: u64,
    /// Total time spent in those syncs, in microseconds.
    pub sync_us: u64,
    /// `append` calls, and the entries they carried.
    pub appends: u64,
    pub entries: u64,
    /// `save_vote` and `save_committed` calls.
    pub votes: u64,
    pub committed: u64,
    pub truncates: u64,
    pub purges: u64,
    /// Reads (replication and apply) served by the writer thread, and the total time they
    /// waited in its queue, in microseconds.
    pub reads: u64,
    pub read_wait_us: u64,
    /// Reads served from the entries kept in memory, without the writer thread.
    #[serde(default)]
    pub cached_reads: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> IoStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStats {
            rounds: g(&self.rounds),
            syncs: g(&self.syncs),
            sync_us: g(&self.sync_ns) / 1000,
            appends: g(&self.appends),
            entries: g(&self.entries),
            votes: g(&self.votes),
            committed: g(&self.committed),
            truncates: g(&self.truncates),
            purges: g(&self.purges),
            reads: g(&self.reads),
            read_wait_us: g(&self.read_wait_ns) / 1000,
            cached_reads: g(&self.cached_reads),
        }
    }

    pub(crate) fn cached_read(&self) {
        bump(&self.cached_reads, 1);
    }

    pub(crate) fn fenced(&self) -> Option<&str> {
        self.fenced.get().map(String::as_str)
    }
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

struct Writer {
    wal: Wal,
    counters: Arc<Counters>,
    fenced: Option<String>,
    /// Writes staged this round, to complete after its sync.
    pending: Vec<Done>,
    /// Purge floor to apply physically after this round's sync.
    purge_below: Option<u64>,
}

impl Writer {
    fn fence(&mut self, why: String) {
        if self.fenced.is_none() {
            eprintln!("wal-raft: the log writer is fenced: {why}");
            let _ = self.counters.fenced.set(why.clone());
            self.fenced = Some(why);
        }
    }

    fn fenced_err(&self) -> io::Error {
        io::Error::other(format!("the raft log is fenced: {}", self.fenced.as_deref().unwrap_or("?")))
    }

    /// Stages one write; on failure the writer is fenced (the caller still gets its answer
    /// when the round completes).
    fn stage(&mut self, f: impl FnOnce(&mut Wal) -> wal::Result<()>, done: Done) {
        if self.fenced.is_none() {
            if let Err(e) = f(&mut self.wal) {
                self.fence(e.to_string());
            }
        }
        self.pending.push(done);
    }

    fn read(&mut self, start: u64, end: u64, floor: Option<u64>) -> io::Result<Entries> {
        if self.fenced.is_some() {
            return Err(self.fenced_err());
        }
        let start = floor.map_or(start, |f| start.max(f.saturating_add(1)));
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        // What is staged goes to the OS first: a reader sees every entry appended before it.
        if let Err(e) = self.wal.flush() {
            self.fence(e.to_string());
            return Err(err(e));
        }
        let mut replay = self.wal.replay_from(Some(Lsn(start)), Bound::Written).map_err(err)?;
        let mut guard = 0u64;
        while let Some(item) = replay.next() {
            let item = item.map_err(err)?;
            guard += 1;
            if guard > u64::from(u32::MAX) {
                return Err(err("internal: replay did not end"));
            }
            if !matches!(item.kind, ItemKind::Entry) || item.lsn.0 < start {
                continue;
            }
            if item.lsn.0 >= end {
                break;
            }
            out.push((item.lsn.0, item.payload.to_vec()));
        }
        Ok(out)
    }

    fn handle(&mut self, req: Req) -> Option<Req> {
        match req {
            Req::Append { entries, done } => {
                bump(&self.counters.appends, 1);
                bump(&self.counters.entries, entries.len() as u64);
                self.stage(
                    |w| {
                        for (index, payload) in &entries {
                            w.append_at(EPOCH, Lsn(*index), payload)?;
                        }
                        Ok(())
                    },
                    done,
                )
            }
            Req::Meta { key, value, done } => {
                match key {
                    crate::codec::VOTE_META_KEY => bump(&self.counters.votes, 1),
                    crate::codec::COMMITTED_META_KEY => bump(&self.counters.committed, 1),
                    _ => {}
                }
                self.stage(|w| w.set_meta(key, &value), done)
            }
            Req::Truncate { after, next, done } => {
                bump(&self.counters.truncates, 1);
                self.stage(
                    |w| match after {
                        Some(a) if a + 1 < w.next_lsn().0 => w.truncate_after(EPOCH, Lsn(a)),
                        Some(_) => Ok(()),
                        None => w.reset(EPOCH, Lsn(next)),
                    },
                    done,
                )
            }
            Req::Purge { upto, value, reset, done } => {
                bump(&self.counters.purges, 1);
                self.stage(
                    |w| {
                        w.set_meta(crate::codec::PURGED_META_KEY, &value)?;
                        if reset {
                            w.reset(EPOCH, Lsn(upto + 1))?;
                        }
                        Ok(())
                    },
                    done,
                );
                self.purge_below = Some(self.purge_below.map_or(upto + 1, |b| b.max(upto + 1)));
            }
            Req::Read { start, end, floor, reply, queued } => {
                bump(&self.counters.reads, 1);
                bump(&self.counters.read_wait_ns, queued.elapsed().as_nanos() as u64);
                let r = self.read(start, end, floor);
                let _ = reply.send(r);
            }
            Req::Checkpoint { lsn, cp } => {
                if self.fenced.is_none() {
                    // Not a fence: a checkpoint is an extra check (e.g. its entry was cut).
                    if let Err(e) = self.wal.checkpoint(EPOCH, Lsn(lsn), &cp) {
                        eprintln!("wal-raft: checkpoint at {lsn} not recorded: {e}");
                    }
                }
            }
            close @ (Req::Close { .. } | Req::Abandon { .. }) => return Some(close),
        }
        None
    }

    /// Makes the round durable, then completes its writes in queue order.
    fn finish_round(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        bump(&self.counters.rounds, 1);
        if self.fenced.is_none() {
            let at = Instant::now();
            let r = self.wal.sync();
            bump(&self.counters.syncs, 1);
            bump(&self.counters.sync_ns, at.elapsed().as_nanos() as u64);
            if let Err(e) = r {
                self.fence(e.to_string());
            }
        }
        let ok = self.fenced.is_none();
        for d in std::mem::take(&mut self.pending) {
            d.complete(if ok { Ok(()) } else { Err(self.fenced_err()) });
        }
        if let (Some(below), true) = (self.purge_below.take(), ok) {
            // Physical reclaim only: the purge record is durable, readers never look below it.
            if let Err(e) = self.wal.purge_before(Lsn(below)) {
                self.fence(format!("removing purged segments: {e}"));
            }
        }
    }
}

pub(crate) fn spawn(
    wal: Wal,
    rx: Receiver<Req>,
    counters: Arc<Counters>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("wal-raft-writer".into()).spawn(move || run(wal, rx, counters))
}

fn run(wal: Wal, rx: Receiver<Req>, counters: Arc<Counters>) {
    let mut w = Writer { wal, counters, fenced: None, pending: Vec::new(), purge_below: None };
    let mut stop = None;
    // Ends when every sender is gone (the store and all readers dropped) or on a close.
    while stop.is_none() {
        let Ok(first) = rx.recv() else { break };
        stop = w.handle(first);
        let mut n = 1;
        while stop.is_none() && n < MAX_ROUND {
            let Ok(r) = rx.try_recv() else { break };
            stop = w.handle(r);
            n += 1;
        }
        w.finish_round();
    }
    // Whatever is still queued is answered: nothing waits forever.
    let why = "the raft log was closed";
    while let Ok(r) = rx.try_recv() {
        match r {
            Req::Append { done, .. }
            | Req::Meta { done, .. }
            | Req::Truncate { done, .. }
            | Req::Purge { done, .. } => done.complete(Err(err(why))),
            Req::Read { reply, .. } => {
                let _ = reply.send(Err(err(why)));
            }
            Req::Checkpoint { .. } => {}
            Req::Close { done } => {
                let _ = done.send(Ok(()));
            }
            Req::Abandon { done } => {
                let _ = done.send(());
            }
        }
    }
    match stop {
        Some(Req::Abandon { done }) => {
            w.wal.abandon();
            let _ = done.send(());
        }
        Some(Req::Close { done }) => {
            let r = if w.fenced.is_some() {
                let e = w.fenced_err();
                w.wal.abandon();
                Err(e)
            } else {
                w.wal.close().map_err(err)
            };
            let _ = done.send(r);
        }
        _ => {
            if w.fenced.is_some() {
                w.wal.abandon();
            } else {
                let _ = w.wal.close();
            }
        }
    }
}
