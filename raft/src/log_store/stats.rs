//! The store's counters ([`IoStats`], read through an [`IoStatsHandle`]): its own work (appends,
//! votes, reads) beside the writer's batches and fdatasyncs. Separate from the store
//! (`mod.rs`): what the metrics read, not how the log is written.

use super::Shared;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counters of the store's own work; the writer's (batches, fdatasyncs) come from the log.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) appends: AtomicU64,
    pub(super) entries: AtomicU64,
    pub(super) votes: AtomicU64,
    pub(super) committed: AtomicU64,
    pub(super) truncates: AtomicU64,
    pub(super) purges: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) read_wait_ns: AtomicU64,
    pub(super) cached_reads: AtomicU64,
}

pub(super) fn bump(a: &AtomicU64, n: u64) {
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

impl Shared {
    pub(super) fn stats(&self) -> IoStats {
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
}

/// Reads a [`LogStore`](super::LogStore)'s counters (see [`LogStore::io_stats_handle`](super::LogStore::io_stats_handle)).
#[derive(Clone, Debug)]
pub struct IoStatsHandle(pub(super) Arc<Shared>);

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
