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
//! every later request fails, nothing is retried (the log is poisoned, DESIGN.md I6).
//!
//! A purge's physical part (removing whole sealed segments below the purged index) runs after
//! the round's sync, when the purge record is durable.

use crate::TypeConfig;
use openraft::storage::IOFlushed;
use std::io;
use std::sync::mpsc::{Receiver, Sender};
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
    },
    /// A checkpoint record for an applied index, staged with the next batch (no answer).
    Checkpoint { lsn: u64, cp: wal::Checkpoint },
    /// Sync, seal and stop (a clean close).
    Close { done: Sender<io::Result<()>> },
    /// Stop without syncing or sealing: what a crash leaves (tests).
    Abandon { done: Sender<()> },
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

struct Writer {
    wal: Wal,
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
            Req::Append { entries, done } => self.stage(
                |w| {
                    for (index, payload) in &entries {
                        w.append_at(EPOCH, Lsn(*index), payload)?;
                    }
                    Ok(())
                },
                done,
            ),
            Req::Meta { key, value, done } => self.stage(|w| w.set_meta(key, &value), done),
            Req::Truncate { after, next, done } => self.stage(
                |w| match after {
                    Some(a) if a + 1 < w.next_lsn().0 => w.truncate_after(EPOCH, Lsn(a)),
                    Some(_) => Ok(()),
                    None => w.reset(EPOCH, Lsn(next)),
                },
                done,
            ),
            Req::Purge { upto, value, reset, done } => {
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
            Req::Read { start, end, floor, reply } => {
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
        if self.fenced.is_none() {
            if let Err(e) = self.wal.sync() {
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

pub(crate) fn spawn(wal: Wal, rx: Receiver<Req>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("wal-raft-writer".into()).spawn(move || run(wal, rx))
}

fn run(wal: Wal, rx: Receiver<Req>) {
    let mut w = Writer { wal, fenced: None, pending: Vec::new(), purge_below: None };
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
