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

use crate::codec::{self, COMMITTED_META_KEY, LOG_KIND, LOG_KIND_META_KEY, PURGED_META_KEY, VOTE_META_KEY};
use crate::{Entry, LogId, TypeConfig, Vote};
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound as RBound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use wal::storage::Storage;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Lsn, Options, Payload, Ticket, Wal};

/// Raft writes carry writer epoch 0: fencing of stale leaders is Raft's vote, not the log's.
pub(crate) const EPOCH: Epoch = Epoch(0);

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

/// The most recent entries appended (queued to the writer, durable or not), contiguous and
/// ending at `Known::last` whenever not empty; evicted oldest first past a budget, cut by
/// `truncate_after`, dropped by `purge`, all under the same lock that orders the FIFO.
///
/// Why: openraft reads an entry right after appending it (a leader's replication streams, every
/// node's state machine worker). Through the writer's FIFO such a read waits behind the
/// fdatasync in flight, which makes the leader's own sync and its followers' syncs serial and
/// delays every apply by one more sync. From here it does not wait; the writer serves only
/// reads that start below the oldest entry kept.
#[derive(Debug, Default)]
struct Recent {
    entries: std::collections::VecDeque<(Entry, usize)>,
    bytes: usize,
}

/// The budget of [`Recent`]: this many bytes of encoded entries, or this many entries.
const RECENT_MAX_BYTES: usize = 16 << 20;
const RECENT_MAX_ENTRIES: usize = 1 << 16;

impl Recent {
    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn push(&mut self, e: Entry, size: usize) {
        if self.entries.back().is_some_and(|(b, _)| b.log_id.index + 1 != e.log_id.index) {
            self.clear();
        }
        self.entries.push_back((e, size));
        self.bytes += size;
        while self.bytes > RECENT_MAX_BYTES || self.entries.len() > RECENT_MAX_ENTRIES {
            let Some((_, n)) = self.entries.pop_front() else { break };
            self.bytes -= n;
        }
    }

    /// Keeps entries at or below `index` (`None`: none).
    fn cut_after(&mut self, index: Option<u64>) {
        while self.entries.back().is_some_and(|(b, _)| index.is_none_or(|i| b.log_id.index > i)) {
            if let Some((_, n)) = self.entries.pop_back() {
                self.bytes -= n;
            }
        }
    }

    /// Drops entries at or below `index`.
    fn drop_upto(&mut self, index: u64) {
        while self.entries.front().is_some_and(|(f, _)| f.log_id.index <= index) {
            if let Some((_, n)) = self.entries.pop_front() {
                self.bytes -= n;
            }
        }
    }

    /// The entries with `start <= index < end`, when every live entry from `start` on is here
    /// (the oldest one kept is at or below `start`); `None`: ask the log.
    fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let (first, _) = self.entries.front()?;
        let first = first.log_id.index;
        if start < first {
            return None;
        }
        if start >= end {
            return Some(Vec::new());
        }
        let skip = usize::try_from(start - first).ok()?;
        let take = usize::try_from(end - start).unwrap_or(usize::MAX);
        Some(self.entries.iter().skip(skip).take(take).map(|(e, _)| e.clone()).collect())
    }
}

/// Counters of the store's own work; the writer's (batches, fdatasyncs) come from the log.
#[derive(Debug, Default)]
struct Counters {
    appends: AtomicU64,
    entries: AtomicU64,
    votes: AtomicU64,
    committed: AtomicU64,
    truncates: AtomicU64,
    purges: AtomicU64,
    reads: AtomicU64,
    read_wait_ns: AtomicU64,
    cached_reads: AtomicU64,
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// A copy of the log's counters since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoStats {
    /// Batches the writer wrote.
    pub rounds: u64,
    /// fdatasyncs run.
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
    /// Reads (replication and apply) served by a replay of the written log, and the total time
    /// they waited for the writer, in microseconds.
    pub reads: u64,
    pub read_wait_us: u64,
    /// Reads served from the entries kept in memory, without the writer.
    #[serde(default)]
    pub cached_reads: u64,
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

    fn stats(&self) -> IoStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        let w = self.wal.stats();
        IoStats {
            rounds: w.batches,
            syncs: w.syncs,
            sync_us: w.sync_latency_us.sum(),
            appends: g(&c.appends),
            entries: g(&c.entries),
            votes: g(&c.votes),
            committed: g(&c.committed),
            truncates: g(&c.truncates),
            purges: g(&c.purges),
            reads: g(&c.reads),
            read_wait_us: g(&c.read_wait_ns) / 1000,
            cached_reads: g(&c.cached_reads),
        }
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

/// Reads a [`LogStore`]'s counters (see [`LogStore::io_stats_handle`]).
#[derive(Clone, Debug)]
pub struct IoStatsHandle(Arc<Shared>);

impl IoStatsHandle {
    pub fn get(&self) -> IoStats {
        self.0.stats()
    }

    /// The log writer's own figures (counters and histograms, [`wal::Stats`]) that [`IoStats`]
    /// summarizes: `syncs` and `sync_us` are its fsync latency histogram's count and sum.
    pub fn wal_stats(&self) -> wal::Stats {
        self.0.wal.stats()
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

/// `[start, end)` of a range of indexes.
/// A range of log indexes as `start..end` (end exclusive, saturating), the shape every reader
/// of entries takes; public for the benchmarks' second log store.
pub fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        RBound::Included(&s) => s,
        RBound::Excluded(&s) => s.saturating_add(1),
        RBound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        RBound::Included(&e) => e.saturating_add(1),
        RBound::Excluded(&e) => e,
        RBound::Unbounded => u64::MAX,
    };
    (start, end)
}

async fn read_entries(shared: &Arc<Shared>, start: u64, end: u64) -> io::Result<Vec<Entry>> {
    let from = {
        let k = shared.lock();
        let floor = k.purged.map(|p| p.index);
        let from = floor.map_or(start, |f| start.max(f.saturating_add(1)));
        if let Some(v) = k.recent.get(from, end) {
            shared.fenced()?;
            bump(&shared.counters.cached_reads, 1);
            return Ok(v);
        }
        from
    };
    if from >= end {
        shared.fenced()?;
        return Ok(Vec::new());
    }
    // A replay of the written log, made by the writer between batches and read on a blocking
    // thread (the maps are read and the entries decoded there, not on openraft's workers).
    let shared = shared.clone();
    let queued = std::time::Instant::now();
    let read = tokio::task::spawn_blocking(move || {
        let mut replay = shared.wal.replay_from(Some(Lsn(from)), wal::Durability::Written).map_err(err)?;
        bump(&shared.counters.reads, 1);
        bump(&shared.counters.read_wait_ns, queued.elapsed().as_nanos() as u64);
        let mut out: Vec<Entry> = Vec::new();
        let mut guard = 0u64;
        while let Some(item) = replay.next() {
            let item = item.map_err(err)?;
            guard += 1;
            if guard > u64::from(u32::MAX) {
                return Err(err("internal: replay did not end"));
            }
            if !matches!(item.kind, wal::ItemKind::Entry) || item.lsn.0 < from {
                continue;
            }
            if item.lsn.0 >= end {
                break;
            }
            // A hole is a bug somewhere below: say so rather than hand openraft a gap.
            if let Some(prev) = out.last().map(|e| e.log_id.index) {
                if item.lsn.0 != prev + 1 {
                    return Err(codec::invalid(format!(
                        "the log has a hole between {prev} and {}",
                        item.lsn.0
                    )));
                }
            }
            out.push(codec::decode_entry(item.lsn.0, item.payload)?);
        }
        Ok(out)
    });
    read.await.map_err(err)?
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (start, end) = bounds(&range);
        read_entries(&self.shared, start, end).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.shared.lock().vote)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (start, end) = bounds(&range);
        read_entries(&self.shared, start, end).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.shared.lock().vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let k = self.shared.lock();
        Ok(LogState { last_purged_log_id: k.purged, last_log_id: k.last.or(k.purged) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader { shared: self.shared.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let value = codec::meta_value(vote)?;
        bump(&self.shared.counters.votes, 1);
        durable(self.shared.wal.set_meta(VOTE_META_KEY, &value, Durability::Durable).map_err(err)?).await?;
        self.shared.lock().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let value = codec::meta_value(&committed)?;
        bump(&self.shared.counters.committed, 1);
        // A restart hint, not part of Raft's safety: queued behind every entry it covers (so a
        // durable committed id never points past the log) and made durable by the next sync
        // (the next entry's, or at most `written_sync_delay` later), not waited for. A restart
        // inside that window re-applies from an older committed id and catches up once it sees
        // the cluster's commit (docs/replication-safety.md).
        let ticket =
            self.shared.wal.set_meta(COMMITTED_META_KEY, &value, Durability::Written).map_err(err)?;
        drop(ticket);
        self.shared.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.shared.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut k = self.shared.lock();
        let mut batch = Vec::new();
        let mut kept = Vec::new();
        let mut last = k.last;
        for e in entries {
            let i = e.log_id.index;
            // No hole: after the last entry, or after the purged id; an empty log that was
            // never purged takes any first index (openraft's own tests start at 2).
            let expected = last.or(k.purged).map(|l| l.index + 1);
            if expected.is_some_and(|x| x != i) {
                return Err(io::Error::other(format!(
                    "append at index {i} would leave a hole or overwrite: the next index is {}",
                    expected.unwrap_or(0)
                )));
            }
            let bytes = codec::encode_entry(&e)?;
            last = Some(e.log_id);
            kept.push((e, bytes.len()));
            batch.push((i, bytes));
        }
        let c = &self.shared.counters;
        bump(&c.appends, 1);
        bump(&c.entries, batch.len() as u64);
        // Queued under the lock: the writer's order is the order of these state changes. Each
        // entry is its own record (a batch may be larger than a segment); the last one's
        // ticket resolves once every one before it is durable too.
        let mut ticket = None;
        for (i, bytes) in batch {
            let t = self.shared.wal.append_at(EPOCH, Lsn(i), Payload::One(bytes), Durability::Durable);
            ticket = Some(t.map_err(err)?);
        }
        k.last = last;
        for (e, n) in kept {
            k.recent.push(e, n);
        }
        drop(k);
        match (ticket, &self.acks) {
            (Some(t), Some(acks)) => {
                if let Err(std::sync::mpsc::SendError((t, cb))) = acks.send((t, callback)) {
                    cb.io_completed(t.wait_durable().map(|_| ()).map_err(err));
                }
            }
            // Nothing to write: durable already.
            (None, _) => callback.io_completed(Ok(())),
            (Some(_), None) => callback.io_completed(Err(err("the raft log was closed"))),
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let ticket = {
            let mut k = self.shared.lock();
            let Some(cur) = k.last else { return Ok(()) };
            match last_log_id {
                Some(id) if id.index >= cur.index => return Ok(()),
                Some(id) => {
                    let keeps = k.purged.is_none_or(|p| id.index > p.index);
                    k.last = if keeps { Some(id) } else { None };
                }
                None => k.last = None,
            }
            let keep = k.last.map(|l| l.index);
            tracing::info!(
                kept_through = keep,
                removed_through = cur.index,
                "log truncated: entries a new leader does not have are removed"
            );
            k.recent.cut_after(keep);
            bump(&self.shared.counters.truncates, 1);
            let wal = &self.shared.wal;
            match last_log_id {
                Some(id) if id.index + 1 < wal.next_lsn().0 => wal.truncate_after(EPOCH, Lsn(id.index)),
                Some(_) => return Ok(()),
                None => wal.reset(EPOCH, Lsn(k.purged.map_or(0, |p| p.index + 1))),
            }
            .map_err(err)?
        };
        durable(ticket).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let value = codec::meta_value(&log_id)?;
        let ticket = {
            let mut k = self.shared.lock();
            if k.purged.is_some_and(|p| p.index >= log_id.index) {
                return Ok(());
            }
            let reset = k.last.is_none_or(|l| l.index <= log_id.index);
            k.purged = Some(log_id);
            if reset {
                k.last = None;
                k.recent.clear();
            } else {
                k.recent.drop_upto(log_id.index);
            }
            bump(&self.shared.counters.purges, 1);
            tracing::debug!(through = log_id.index, "log purged below a snapshot");
            let wal = &self.shared.wal;
            let meta = wal.set_meta(PURGED_META_KEY, &value, Durability::Durable).map_err(err)?;
            if reset {
                wal.reset(EPOCH, Lsn(log_id.index + 1)).map_err(err)?
            } else {
                meta
            }
        };
        durable(ticket).await?;
        // Physical reclaim only, once the purge record is durable: readers never look below it.
        let shared = self.shared.clone();
        let below = Lsn(log_id.index + 1);
        let removed =
            tokio::task::spawn_blocking(move || shared.wal.purge_before(below)).await.map_err(err)?;
        if let Err(e) = removed {
            // Loses nothing: the purge record is durable and the segments go with the next
            // purge. A failure that fenced the log fails every later write instead.
            tracing::warn!("removing purged segments below {}: {e}", below.0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;

    fn entry(index: u64) -> Entry {
        let id = LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(1, 1), index);
        Entry { log_id: id, payload: openraft::EntryPayload::Blank }
    }

    fn indexes(v: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn recent_entries_serve_only_ranges_they_hold_whole() {
        let mut r = Recent::default();
        assert_eq!(indexes(r.get(0, 10)), None, "empty: ask the log");
        for i in 5..10 {
            r.push(entry(i), 10);
        }
        assert_eq!(indexes(r.get(4, 10)), None, "starts below the oldest kept");
        assert_eq!(indexes(r.get(5, 7)), Some(vec![5, 6]));
        assert_eq!(indexes(r.get(8, u64::MAX)), Some(vec![8, 9]));
        assert_eq!(indexes(r.get(12, 20)), Some(vec![]), "past the end: nothing there");
        r.cut_after(Some(7));
        assert_eq!(indexes(r.get(5, 20)), Some(vec![5, 6, 7]));
        r.drop_upto(5);
        assert_eq!(indexes(r.get(5, 20)), None);
        assert_eq!(indexes(r.get(6, 20)), Some(vec![6, 7]));
        assert_eq!(r.bytes, 20);
        // Not contiguous with what is kept (cannot happen through the store): start over.
        r.push(entry(30), 10);
        assert_eq!(indexes(r.get(6, 40)), None);
        assert_eq!(indexes(r.get(30, 40)), Some(vec![30]));
        r.cut_after(None);
        assert_eq!((r.entries.len(), r.bytes), (0, 0));
        // The budget evicts the oldest first.
        for i in 0..3 {
            r.push(entry(i), RECENT_MAX_BYTES / 2);
        }
        assert_eq!(indexes(r.get(0, 3)), None);
        assert_eq!(indexes(r.get(1, 3)), Some(vec![1, 2]));
    }
}
