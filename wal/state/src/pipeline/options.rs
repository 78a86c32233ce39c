//! How a pipeline runs ([`PipelineOptions`]): who decides that an entry is committed
//! ([`CommitPolicy`]), what a fenced pipeline does with facts ([`FactsWhenFenced`]), the log's
//! and the I/O thread's options, checkpoints and snapshots.

use std::time::Duration;
use wal::AsyncOptions;
use wal::Options;

/// Who decides that a durable entry is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitPolicy {
    /// One node: durable means committed.
    Durable,
    /// Committed only up to what [`Pipeline::commit_through`](super::Pipeline::commit_through) was told (a consensus library's
    /// commit index), and durable.
    External,
}

/// How [`Pipeline::report_fact`](super::Pipeline::report_fact) refuses a fact when the pipeline
/// or the log is fenced (a command is always [`Error::Rejected`](wal::Error::Rejected) then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FactsWhenFenced {
    /// [`Error::Fenced`](wal::Error::Fenced), which is not a rejection
    /// ([`Error::is_rejected`](wal::Error::is_rejected) is false): the controller keeps the
    /// fact and resubmits it after a reopen.
    Indeterminate,
    /// [`Error::Rejected`](wal::Error::Rejected): the fact is dropped.
    Reject,
}

/// Pipeline settings. The defaults suit a controller with a few thousand entries per second.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// How the log is opened (docs/configuration.md); by default it is created if missing.
    pub log: Options,
    /// The queue and I/O thread in front of the log (docs/configuration.md).
    pub io: AsyncOptions,
    /// Who decides that a durable entry is committed (default [`CommitPolicy::Durable`]).
    pub commit: CommitPolicy,
    /// Request ids are remembered for this many LSNs (FORMAT.md 10.1); keep it fixed per log.
    pub dedupe_window: u64,
    /// A checkpoint after this many applied entries...
    pub checkpoint_every_entries: u64,
    /// ...or this long after the last one, if entries were applied since.
    pub checkpoint_every: Duration,
    /// A snapshot after this many applied entries since the last (None: only when asked).
    pub snapshot_every_entries: Option<u64>,
    /// After a snapshot is durable, keep it and the one before it (the fallback if the newest
    /// is ever unreadable), delete older ones, and purge whole segments below the older kept
    /// one: the log always reaches back to both.
    pub purge_after_snapshot: bool,
    /// A tailing cursor at most this many entries behind the applied end pins the prefix
    /// purge at its position; one further behind does not (and may be purged past).
    pub cursor_pin_max_lag: u64,
    /// How a fact submitted while the pipeline or the log is fenced is refused (default
    /// [`FactsWhenFenced::Indeterminate`]: kept for after a reopen).
    pub facts_when_fenced: FactsWhenFenced,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            log: Options { create: true, ..Options::default() },
            io: AsyncOptions::default(),
            commit: CommitPolicy::Durable,
            dedupe_window: 1 << 20,
            checkpoint_every_entries: 1024,
            checkpoint_every: Duration::from_secs(1),
            snapshot_every_entries: None,
            purge_after_snapshot: true,
            cursor_pin_max_lag: 1 << 20,
            facts_when_fenced: FactsWhenFenced::Indeterminate,
        }
    }
}
