//! A second openraft log store, on raft-log 0.4.6 (the write-ahead log by openraft's author: the
//! log store of openraft's own examples and of databend-meta), so that the replicated benchmark
//! compares two log stores under the same openraft, state machine, network and clients. Written
//! here from raft-log's documentation; used by this benchmark only.
//!
//! Its configuration is raft-log's default ([`Config::new`]: chunk files closed at 1 Mi records
//! or 1 GiB, a flush worker that batches up to 2,048 requests for at most 1 ms before its fsync,
//! 100,000 entries and 1 GiB of payload cached in memory). As its documentation recommends:
//! - an append is handed to the flush worker with `flush(sync = true)`, and openraft's callback
//!   is called by the worker once the batch it joined is fsynced (the worker batches
//!   concurrent flushes: its group commit);
//! - the committed log id is written with `flush(sync = false)`: durable with the next synced
//!   flush, a restart hint as in this crate's own store;
//! - vote, truncation and purge wait for a synced flush (a purge's `sync = true` is also what
//!   removes purged chunk files).
//!
//! Entries are stored as the same bytes this crate's own store writes (`codec::encode_entry`),
//! under raft-log's log id `((term, leader node), index)`; the vote is `((term, node),
//! committed)`. raft-log's writer API takes `&mut self`, so the store holds it behind a mutex,
//! released before any wait.

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::type_config::RaftTypeConfig;
use openraft::vote::RaftLeaderId;
use openraft::OptionalSend;
use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::{Config, RaftLog};
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use wal_raft::codec;
use wal_raft::{Entry, LogId, TypeConfig, Vote};

/// raft-log's type parameters for openraft entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Types;

/// A callback raft-log's flush worker calls once the flush it was given is done.
pub struct Done(Box<dyn FnOnce(io::Result<()>) + Send>);

impl raft_log::Callback for Done {
    fn send(self, res: io::Result<()>) {
        (self.0)(res)
    }
}

impl raft_log::Types for Types {
    /// `((term, leader node), index)`: ordered as openraft orders log ids.
    type LogId = ((u64, u64), u64);
    /// [`codec::encode_entry`]'s bytes.
    type LogPayload = Vec<u8>;
    /// `((term, node), committed)`.
    type Vote = ((u64, u64), bool);
    type Callback = Done;
    type UserData = String;

    fn log_index(log_id: &Self::LogId) -> u64 {
        log_id.1
    }

    fn payload_size(payload: &Self::LogPayload) -> u64 {
        payload.len() as u64
    }
}

type LeaderId = <TypeConfig as RaftTypeConfig>::LeaderId;

fn to_id(id: &LogId) -> ((u64, u64), u64) {
    ((id.leader_id.term, id.leader_id.node_id), id.index)
}

fn from_id(&((term, node), index): &((u64, u64), u64)) -> LogId {
    LogId::new(LeaderId::new(term, node).to_committed(), index)
}

fn to_vote(v: &Vote) -> ((u64, u64), bool) {
    ((v.leader_id.term, v.leader_id.node_id), v.committed)
}

fn from_vote(&((term, node), committed): &((u64, u64), bool)) -> Vote {
    Vote { leader_id: LeaderId::new(term, node), committed }
}

/// An openraft log store on raft-log.
#[derive(Clone)]
pub struct RaftLogStore {
    log: Arc<Mutex<RaftLog<Types>>>,
}

impl Debug for RaftLogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RaftLogStore")
    }
}

impl RaftLogStore {
    /// Opens (or creates) the raft-log directory `dir`.
    pub fn open(dir: &Path) -> io::Result<RaftLogStore> {
        std::fs::create_dir_all(dir)?;
        let log = RaftLog::<Types>::open(Arc::new(Config::new(dir.display())))?;
        Ok(RaftLogStore { log: Arc::new(Mutex::new(log)) })
    }

    fn lock(&self) -> MutexGuard<'_, RaftLog<Types>> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands what was written to the flush worker with `sync = true`, and gives the lock up: the
/// flush's outcome is waited for on what this returns, outside the lock.
fn sync(mut g: MutexGuard<'_, RaftLog<Types>>) -> io::Result<tokio::sync::oneshot::Receiver<io::Result<()>>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    g.flush(true, Some(Done(Box::new(move |r| drop(tx.send(r))))))?;
    Ok(rx)
}

async fn synced(rx: tokio::sync::oneshot::Receiver<io::Result<()>>) -> io::Result<()> {
    rx.await.map_err(|_| io::Error::other("raft-log's flush worker stopped"))?
}

impl RaftLogReader<TypeConfig> for RaftLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (start, end) = wal_raft::bounds(&range);
        let g = self.lock();
        g.read(start, end).map(|r| r.and_then(|(id, payload)| codec::decode_entry(id.1, &payload))).collect()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.lock().log_state().vote().map(from_vote))
    }
}

impl RaftLogStorage<TypeConfig> for RaftLogStore {
    type LogReader = RaftLogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let g = self.lock();
        let s = g.log_state();
        let purged = s.purged().map(from_id);
        Ok(LogState { last_purged_log_id: purged, last_log_id: s.last().map(from_id).or(purged) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let rx = {
            let mut g = self.lock();
            g.save_vote(to_vote(vote))?;
            sync(g)?
        };
        synced(rx).await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        if let Some(c) = committed {
            let mut g = self.lock();
            g.commit(to_id(&c))?;
            g.flush(false, None)?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.lock().log_state().committed().map(from_id))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let batch = entries
            .into_iter()
            .map(|e| Ok((to_id(&e.log_id), codec::encode_entry(&e)?)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut g = self.lock();
        g.append(batch)?;
        g.flush(true, Some(Done(Box::new(move |r| callback.io_completed(r)))))?;
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let rx = {
            let mut g = self.lock();
            g.truncate(last_log_id.map_or(0, |l| l.index + 1))?;
            sync(g)?
        };
        synced(rx).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let rx = {
            let mut g = self.lock();
            g.purge(to_id(&log_id))?;
            sync(g)?
        };
        synced(rx).await
    }
}
