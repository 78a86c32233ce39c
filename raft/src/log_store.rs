//! [`LogStore`] (openraft's `RaftLogStorage`) and [`LogReader`] (`RaftLogReader`) over the log.
//!
//! | openraft | here |
//! |---|---|
//! | `append(entries, cb)` | contiguity checked, entries queued to the writer at LSN = index; returns at once (readers see them: reads queue behind the append); `cb` fires on the writer thread after the fdatasync covering them |
//! | `save_vote` / `save_committed` | a metadata record in the same FIFO; returns after the fdatasync covering it (and every write queued before it) |
//! | `truncate_after(Some(id))` | the log's `Truncate` record (replay drops what it cuts), durable before returning |
//! | `truncate_after(None)` | the log's `Reset` record, durable before returning |
//! | `purge(id)` | a metadata record holding `id` (plus a `Reset` when no entry stays above it), durable before returning; whole sealed segments at or below `id` are removed after that |
//! | `get_log_state` / `read_vote` / `read_committed` | in memory, rebuilt at open from the log's metadata and its last live entry |
//! | `try_get_log_entries` | from the most recent entries kept in memory when the range starts at or above the oldest of them (no wait behind the fdatasync in flight); otherwise a replay of the written log (`Bound::Written`) on the writer thread; above the purged index either way |

use crate::codec::{self, COMMITTED_META_KEY, PURGED_META_KEY, VOTE_META_KEY};
pub use crate::writer::IoStats;
use crate::writer::{self, Done, Req};
use crate::{Entry, LogId, TypeConfig, Vote};
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound as RBound, RangeBounds};
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use wal::storage::Storage;
use wal::{Lsn, Options, Wal};

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

#[derive(Debug)]
struct Shared {
    known: Mutex<Known>,
    counters: Arc<writer::Counters>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn stopped() -> io::Error {
    io::Error::other("the raft log writer has stopped")
}

/// openraft's log storage over the write-ahead log. See the module docs for the mapping.
pub struct LogStore {
    shared: Arc<Shared>,
    tx: Sender<Req>,
    thread: Option<std::thread::JoinHandle<()>>,
    log_id: [u8; 16],
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("known", &*self.shared.lock()).finish_non_exhaustive()
    }
}

/// Reads a [`LogStore`]'s writer counters (see [`LogStore::io_stats_handle`]).
#[derive(Clone, Debug)]
pub struct IoStatsHandle(Arc<Shared>);

impl IoStatsHandle {
    pub fn get(&self) -> IoStats {
        self.0.counters.snapshot()
    }
}

/// A reader handle: shares the writer's FIFO, so it sees every entry appended before its read.
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
    tx: Sender<Req>,
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

    pub(crate) fn sender(&self) -> Sender<Req> {
        self.tx.clone()
    }

    pub(crate) fn start_wal(mut wal: Wal) -> io::Result<LogStore> {
        // openraft reads entries lazily, so nothing else walks the records the open took on
        // trust before the first append: check them here, and refuse a damaged log at the open
        // (wal's `Wal::check_records`: nothing to walk when the open walked everything).
        wal.check_records().map_err(io::Error::other)?;
        let vote: Option<Vote> = codec::read_meta(VOTE_META_KEY, wal.meta(VOTE_META_KEY))?;
        let committed: Option<Option<LogId>> =
            codec::read_meta(COMMITTED_META_KEY, wal.meta(COMMITTED_META_KEY))?;
        let purged: Option<LogId> = codec::read_meta(PURGED_META_KEY, wal.meta(PURGED_META_KEY))?;
        // The last live entry: the log's last written LSN, unless the purge is at or past it.
        let mut last = None;
        if let Some(Lsn(l)) = wal.written_lsn() {
            if purged.is_none_or(|p| l > p.index) {
                let mut replay =
                    wal.replay_from(Some(Lsn(l)), wal::Bound::Written).map_err(io::Error::other)?;
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
        let (tx, rx) = std::sync::mpsc::channel();
        let counters = Arc::new(writer::Counters::default());
        let thread = writer::spawn(wal, rx, counters.clone())?;
        Ok(LogStore {
            shared: Arc::new(Shared { known: Mutex::new(known), counters }),
            tx,
            thread: Some(thread),
            log_id,
        })
    }

    /// A handle that reads the writer thread's counters (fdatasyncs and what they covered),
    /// usable after the store was handed to openraft.
    pub fn io_stats_handle(&self) -> IoStatsHandle {
        IoStatsHandle(self.shared.clone())
    }

    /// The writer thread's counters so far.
    pub fn io_stats(&self) -> IoStats {
        self.shared.counters.snapshot()
    }

    /// The log's random identity (`wal.meta`).
    pub fn wal_log_id(&self) -> [u8; 16] {
        self.log_id
    }

    fn send(&self, req: Req) -> io::Result<()> {
        self.tx.send(req).map_err(|_| stopped())
    }

    async fn request(&self, make: impl FnOnce(Done) -> Req) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(make(Done::Reply(tx)))?;
        rx.await.map_err(|_| stopped())?
    }

    /// Syncs, seals the log and stops the writer (a clean close; the directory lock is released).
    pub fn close(mut self) -> io::Result<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(Req::Close { done: tx })?;
        let r = rx.recv().map_err(|_| stopped())?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        r
    }

    /// Stops the writer without syncing or sealing anything more: the files are left as a crash
    /// of the process would leave them (for tests; the durable image is what a power loss
    /// leaves).
    pub fn abandon(mut self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.send(Req::Abandon { done: tx }).is_ok() {
            let _ = rx.recv();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for LogStore {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let (tx, rx) = std::sync::mpsc::channel();
            if self.tx.send(Req::Close { done: tx }).is_ok() {
                let _ = rx.recv();
            }
            let _ = t.join();
        }
    }
}

/// `[start, end)` of a range of indexes.
fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
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

async fn read_entries(shared: &Shared, tx: &Sender<Req>, start: u64, end: u64) -> io::Result<Vec<Entry>> {
    let floor = {
        let k = shared.lock();
        let floor = k.purged.map(|p| p.index);
        let from = floor.map_or(start, |f| start.max(f.saturating_add(1)));
        if let Some(v) = k.recent.get(from, end) {
            if let Some(why) = shared.counters.fenced() {
                return Err(io::Error::other(format!("the raft log is fenced: {why}")));
            }
            shared.counters.cached_read();
            return Ok(v);
        }
        floor
    };
    let (rtx, rrx) = tokio::sync::oneshot::channel();
    tx.send(Req::Read { start, end, floor, reply: rtx, queued: std::time::Instant::now() })
        .map_err(|_| stopped())?;
    let raw = rrx.await.map_err(|_| stopped())??;
    let mut out = Vec::with_capacity(raw.len());
    for (lsn, payload) in raw {
        // A hole is a bug somewhere below: say so rather than hand openraft a gap.
        if let Some(prev) = out.last().map(|e: &Entry| e.log_id.index) {
            if lsn != prev + 1 {
                return Err(codec::invalid(format!("the log has a hole between {prev} and {lsn}")));
            }
        }
        out.push(codec::decode_entry(lsn, &payload)?);
    }
    Ok(out)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (start, end) = bounds(&range);
        read_entries(&self.shared, &self.tx, start, end).await
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
        read_entries(&self.shared, &self.tx, start, end).await
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
        LogReader { shared: self.shared.clone(), tx: self.tx.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let value = codec::meta_value(vote)?;
        self.request(|done| Req::Meta { key: VOTE_META_KEY, value, done }).await?;
        self.shared.lock().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let value = codec::meta_value(&committed)?;
        self.request(|done| Req::Meta { key: COMMITTED_META_KEY, value, done }).await?;
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
        // Queued under the lock: the FIFO order is the order of these state changes.
        self.tx.send(Req::Append { entries: batch, done: Done::Flushed(callback) }).map_err(|_| stopped())?;
        k.last = last;
        for (e, n) in kept {
            k.recent.push(e, n);
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
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
            k.recent.cut_after(keep);
            let next = k.purged.map_or(0, |p| p.index + 1);
            let after = last_log_id.map(|id| id.index);
            self.tx.send(Req::Truncate { after, next, done: Done::Reply(tx) }).map_err(|_| stopped())?;
        }
        rx.await.map_err(|_| stopped())?
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let value = codec::meta_value(&log_id)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
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
            self.tx
                .send(Req::Purge { upto: log_id.index, value, reset, done: Done::Reply(tx) })
                .map_err(|_| stopped())?;
        }
        rx.await.map_err(|_| stopped())?
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
