//! The handle the state machine records checkpoints into the Raft log with (the apply seam's
//! digest after an entry, FORMAT.md 10.3), which `verify.rs` compares at the next start.

use super::LogStore;
use crate::EPOCH;
use std::sync::Arc;
use wal::{AsyncWal, Checkpoint, Lsn};

/// Records checkpoints into the Raft log (with the next batch; durable with its sync).
#[derive(Clone, Debug)]
pub struct Checkpointer {
    wal: Arc<AsyncWal>,
}

impl Checkpointer {
    /// Records that the state after applying every entry up to `index` has checkpoint `cp`.
    /// `index` must be an entry already in the log (an applied one). Best effort: a stopped
    /// writer drops it (a checkpoint is an extra check, never needed to recover).
    pub fn record(&self, index: u64, cp: Checkpoint) {
        let _ = self.wal.checkpoint(EPOCH, Lsn(index), &cp);
    }
}

impl LogStore {
    /// A handle the state machine records checkpoints with.
    pub fn checkpointer(&self) -> Checkpointer {
        Checkpointer { wal: self.writer() }
    }
}
