//! openraft's `RaftLogReader` and `RaftLogStorage` over the store: every write queued to the log
//! writer in the order of the state changes it records, reads served from the recent entries
//! or a replay of the written log (the mapping is in `mod.rs`'s docs). Separate from the store's
//! open and close (`mod.rs`): this is what openraft calls.

use super::stats::bump;
use super::{durable, err, LogReader, LogStore, Shared, EPOCH};
use crate::codec::{self, COMMITTED_META_KEY, PURGED_META_KEY, VOTE_META_KEY};
use crate::{Entry, LogId, TypeConfig, Vote};
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound as RBound, RangeBounds};
use std::sync::Arc;
use wal::{Durability, Lsn, Payload};

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
