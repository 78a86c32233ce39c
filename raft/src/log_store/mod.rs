//! [`LogStore`] (openraft's `RaftLogStorage`) and [`LogReader`] (`RaftLogReader`) over the
//! engine's writer thread ([`wal::AsyncWal`]): group commit with one fdatasync in flight while
//! the next batch is written, the same writer every other user of the log gets.
//!
//! | openraft | here |
//! |---|---|
//! | `append(entries, cb)` | contiguity checked, entries queued to the writer at LSN = index (`AsyncWal::append_at`); returns at once; `cb` fires on the acknowledgement thread once the fdatasync covering them completed |
//! | `save_vote` | a metadata record in the same queue; returns once it (and every write queued before it) is durable |
//! | `save_committed` | a metadata record in the same queue, returned at once: a restart hint, durable with the next sync (docs/replication-safety.md) |
//! | `truncate_after(Some(id))` | the log's `Truncate` record (replay drops what it cuts), durable before returning |
//! | `truncate_after(None)` | the log's `Reset` record, durable before returning |
//! | `purge(id)` | a metadata record holding `id` (plus a `Reset` when no entry stays above it), durable before returning; whole sealed segments at or below `id` are removed after that |
//! | `get_log_state` / `read_vote` / `read_committed` | in memory, rebuilt at open from the log's metadata and its last live entry |
//! | `try_get_log_entries` | from the most recent entries kept in memory when the range starts at or above the oldest of them (no wait behind the fdatasync in flight); otherwise a replay of the written log (`Durability::Written`: the writer writes what is queued first); above the purged index either way |
//!
//! A failed write or sync fences the writer (docs/invariants.md I6): every write not yet
//! durable and every later one fails, and reads fail too.
//!
//! Here: the store, its open and its close. The entries kept in memory are in `recent.rs`, the
//! counters in `stats.rs`, openraft's reader and storage traits over the store in `storage.rs`.

mod checkpoints;
mod recent;
mod stats;
mod storage;

pub use checkpoints::Checkpointer;
pub use stats::{IoStats, IoStatsHandle};
pub use storage::bounds;

use crate::codec::{self, COMMITTED_META_KEY, LOG_KIND, LOG_KIND_META_KEY, PURGED_META_KEY, VOTE_META_KEY};
use crate::EPOCH;
use crate::{LogId, TypeConfig, Vote};
use openraft::storage::IOFlushed;
use recent::Recent;
use stats::Counters;
use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use wal::storage::Storage;
use wal::{AsyncOptions, AsyncWal, Lsn, Options, Ticket, Wal};

/// What openraft reads back, kept in memory and rebuilt at open.
#[derive(Debug, Default)]
struct Known {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    /// The last live entry (none: the log holds no entry above the purged id).
    last: Option<LogId>,
    /// The most recent entries, as appended.
    recent: Recent,
}

#[derive(Debug)]
struct Shared {
    known: Mutex<Known>,
    counters: Counters,
    wal: Arc<AsyncWal>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fenced(&self) -> io::Result<()> {
        match self.wal.fenced() {
            Some(why) => Err(io::Error::other(format!("the raft log is fenced: {why}"))),
            None => Ok(()),
        }
    }
}

fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Waits until `ticket` is durable (or failed).
async fn durable(ticket: Ticket) -> io::Result<()> {
    ticket.durable().await.map(|_| ()).map_err(err)
}

/// An append's durability callback, waiting for its last entry's ticket.
type Ack = (Ticket, IOFlushed<TypeConfig>);

/// openraft's log storage over the write-ahead log. See the module docs for the mapping.
pub struct LogStore {
    shared: Arc<Shared>,
    /// To the acknowledgement thread, in append order.
    acks: Option<std::sync::mpsc::Sender<Ack>>,
    ack_thread: Option<std::thread::JoinHandle<()>>,
    log_id: [u8; 16],
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("known", &*self.shared.lock()).finish_non_exhaustive()
    }
}

/// A reader handle: shares the writer's queue, so it sees every entry appended before its read.
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

impl Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogReader")
    }
}

/// The options a Raft log is opened with: `first_lsn` 0 (openraft's first index), created if
/// absent, the writers' default recovery (a torn tail is cut, anything else refused).
pub fn log_options(segment_len_bytes: u32) -> Options {
    Options { segment_len_bytes, first_lsn: 0, create: true, ..Options::default() }
}

/// The writer's options for a Raft log. Disk full fences the log rather than withdrawing what
/// was never written: the store submits an append's entries one by one, and a later entry (or
/// the reset after a purge record) must never be taken once an earlier one was given up, which
/// would leave a hole under a callback that says durable. A fenced log is a storage error to
/// openraft, which stops the node; a restart with space again carries on. (The old writer
/// thread fenced on any failed write too.)
fn writer_options() -> AsyncOptions {
    AsyncOptions { fence_on_disk_full: true, ..AsyncOptions::default() }
}

impl LogStore {
    /// Opens (or creates) the Raft log in `dir` on real files.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> io::Result<LogStore> {
        let (wal, _report) = Wal::open(dir, Options { first_lsn: 0, ..opts }).map_err(io::Error::other)?;
        Self::start_wal(wal)
    }

    /// Opens (or creates) the Raft log over any storage backend (tests: `MemStorage`).
    pub fn open_with(storage: Arc<dyn Storage>, opts: Options) -> io::Result<LogStore> {
        let (wal, _report) =
            Wal::open_with(storage, Options { first_lsn: 0, ..opts }).map_err(io::Error::other)?;
        Self::start_wal(wal)
    }

    pub(crate) fn start_wal(mut wal: Wal) -> io::Result<LogStore> {
        // openraft reads entries lazily, so nothing else walks the records the open took on
        // trust before the first append: check them here, and refuse a damaged log at the open
        // (wal's `Wal::check_records`: nothing to walk when the open walked everything).
        wal.check_records().map_err(io::Error::other)?;
        // A new log says what it is (walcheck reads it). Only a new one: a log that already
        // holds Raft state is recognised by it (`verifier::state::RAFT_META_KEYS`), and an open
        // must not write into a log someone is investigating. Advisory: a full disk skips it.
        let new = wal.written_lsn().is_none() && wal.meta(VOTE_META_KEY).is_none();
        if new && wal.meta(LOG_KIND_META_KEY).is_none() {
            match wal.set_meta(LOG_KIND_META_KEY, LOG_KIND).and_then(|()| wal.sync()) {
                Ok(()) => {}
                Err(wal::Error::DiskFull { context }) => {
                    tracing::warn!("the log-kind record was not written (disk full while {context})")
                }
                Err(e) => return Err(io::Error::other(e)),
            }
        }
        let vote: Option<Vote> = codec::read_meta(VOTE_META_KEY, wal.meta(VOTE_META_KEY))?;
        let committed: Option<Option<LogId>> =
            codec::read_meta(COMMITTED_META_KEY, wal.meta(COMMITTED_META_KEY))?;
        let purged: Option<LogId> = codec::read_meta(PURGED_META_KEY, wal.meta(PURGED_META_KEY))?;
        // The last live entry: the log's last written LSN, unless the purge is at or past it.
        let mut last = None;
        if let Some(Lsn(l)) = wal.written_lsn() {
            if purged.is_none_or(|p| l > p.index) {
                let mut replay =
                    wal.replay_from(Some(Lsn(l)), wal::Durability::Written).map_err(io::Error::other)?;
                let mut found = None;
                let mut n = 0u64;
                while let Some(item) = replay.next() {
                    let item = item.map_err(io::Error::other)?;
                    n += 1;
                    if n > 1 << 32 {
                        return Err(io::Error::other("internal: replay did not end"));
                    }
                    if matches!(item.kind, wal::ItemKind::Entry) && item.lsn.0 == l {
                        found = Some(codec::decode_entry(l, item.payload)?.log_id);
                    }
                }
                last =
                    Some(found.ok_or_else(|| {
                        codec::invalid(format!("the log's last entry {l} is not readable"))
                    })?);
            }
        }
        let log_id = wal.log_id();
        let known = Known { vote, committed: committed.flatten(), purged, last, recent: Recent::default() };
        let wal = Arc::new(AsyncWal::start(wal, writer_options()).map_err(io::Error::other)?);
        let (acks, rx) = std::sync::mpsc::channel::<Ack>();
        // The tickets resolve in queue order: waiting for them in that order delivers every
        // callback as soon as its fdatasync completed, in the order openraft gave the appends.
        let ack_thread = std::thread::Builder::new().name("wal-raft-acks".into()).spawn(move || {
            while let Ok((ticket, cb)) = rx.recv() {
                cb.io_completed(ticket.wait_durable().map(|_| ()).map_err(err));
            }
        })?;
        let shared = Arc::new(Shared { known: Mutex::new(known), counters: Counters::default(), wal });
        Ok(LogStore { shared, acks: Some(acks), ack_thread: Some(ack_thread), log_id })
    }

    /// The writer every write of this log goes through (checkpoints are recorded with it).
    pub(crate) fn writer(&self) -> Arc<AsyncWal> {
        self.shared.wal.clone()
    }

    /// A handle that reads the log's counters (fdatasyncs and what they covered), usable after
    /// the store was handed to openraft.
    pub fn io_stats_handle(&self) -> IoStatsHandle {
        IoStatsHandle(self.shared.clone())
    }

    /// The log's counters so far.
    pub fn io_stats(&self) -> IoStats {
        self.shared.stats()
    }

    /// The log's random identity (`wal.meta`).
    pub fn wal_log_id(&self) -> [u8; 16] {
        self.log_id
    }

    /// Stops the acknowledgement thread once every callback it holds was delivered (the
    /// writer resolved every ticket when it stopped).
    fn stop_acks(&mut self) {
        drop(self.acks.take());
        if let Some(t) = self.ack_thread.take() {
            let _ = t.join();
        }
    }

    /// Syncs, seals the log and stops the writer (a clean close; the directory lock is released).
    pub fn close(mut self) -> io::Result<()> {
        let r = self.shared.wal.close().map_err(err);
        self.stop_acks();
        r
    }

    /// Stops the writer without syncing or sealing anything more: the files are left as a crash
    /// of the process would leave them (for tests; the durable image is what a power loss
    /// leaves).
    pub fn abandon(mut self) {
        self.shared.wal.abandon();
        self.stop_acks();
    }
}

impl Drop for LogStore {
    fn drop(&mut self) {
        if self.ack_thread.is_some() {
            let _ = self.shared.wal.close();
            self.stop_acks();
        }
    }
}
