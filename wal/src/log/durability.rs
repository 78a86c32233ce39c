//! Syncs and the durable watermark: a sync run in place ([`Wal::sync`]) or pipelined by the
//! I/O thread (`start_sync`, `poll_sync`: one in flight, covering the batches written in full
//! when it was submitted); only a completed sync moves the watermark, which only grows. A sync
//! that fails fences the log and is never retried; so does any I/O error but disk full.

use super::Wal;
use crate::error::{Error, Result};
use crate::scan::Logical;
use crate::storage::{self, Op, Submission};
use std::time::{Duration, Instant};

/// An fdatasync submitted by `start_sync` and not yet taken, with what it covers.
#[derive(Debug)]
pub(crate) struct SyncInFlight {
    token: u64,
    /// The written sequence, logical state and end when it was submitted.
    seq: u64,
    logical: Logical,
    end: Option<(u64, u64)>,
    started: Instant,
}

/// The pipelined-sync state of a handle.
#[derive(Debug, Default)]
pub(crate) struct Pipelined {
    pub(crate) sync: Option<SyncInFlight>,
    /// Completions reaped while waiting for another operation's.
    pub(crate) stash: Vec<storage::Completion>,
}

impl Wal {
    pub(super) fn run(&mut self, op: Op) -> std::io::Result<u64> {
        self.token += 1;
        storage::complete_keeping(&*self.storage, self.token, op, &mut self.pipe.stash).map(|(n, _)| n)
    }

    /// The record sequence made durable by the last completed sync.
    pub(crate) fn durable_seq(&self) -> u64 {
        self.marks.durable_seq()
    }

    /// The record sequence written to the OS so far.
    pub(crate) fn written_seq(&self) -> u64 {
        self.marks.written_seq()
    }

    /// Whether a sync submitted by [`Wal::start_sync`] is still in flight.
    pub(crate) fn syncing(&self) -> bool {
        self.pipe.sync.is_some()
    }

    /// Submits an fdatasync over every batch written so far and returns at once; false when
    /// nothing is unsynced or a sync is in flight already (one per file at most). Only its
    /// completion, taken by [`Wal::poll_sync`], moves the durable watermark.
    /// `waited`: whether an acknowledgement waits for this sync (a durable entry), which is
    /// what [`SegmentFill::Adaptive`] counts.
    pub(crate) fn start_sync(&mut self, waited: bool) -> Result<bool> {
        self.check_writable(None)?;
        if self.pipe.sync.is_some() || !self.marks.unsynced() {
            return Ok(false);
        }
        if waited {
            self.count_waited_sync();
        }
        let Some(file) = self.files.active().map(|a| a.file) else {
            return Err(Error::InvalidArgument("unsynced records without an active segment".into()));
        };
        self.token += 1;
        let token = self.token;
        // Taken before the submission: a backend that syncs inside `submit` (pwrite +
        // fdatasync) has finished the sync when it returns.
        let started = Instant::now();
        if let Err(e) = self.storage.submit(Submission { token, op: Op::SyncData { file } }) {
            return Err(self.fail_sync(e));
        }
        self.pipe.sync = Some(SyncInFlight {
            token,
            seq: self.marks.written_seq(),
            logical: self.marks.written_logical().clone(),
            end: self.written_end(),
            started,
        });
        Ok(true)
    }

    /// Takes the completion of the sync in flight if it has come (with `wait`, waits for it).
    /// Returns how long the sync took when it completed now; a failed sync fences the log.
    pub(crate) fn poll_sync(&mut self, wait: bool) -> Result<Option<Duration>> {
        let Some(token) = self.pipe.sync.as_ref().map(|s| s.token) else { return Ok(None) };
        loop {
            if let Some(i) = self.pipe.stash.iter().position(|c| c.token == token) {
                let c = self.pipe.stash.swap_remove(i);
                let Some(s) = self.pipe.sync.take() else { return Ok(None) };
                let took = s.started.elapsed();
                if let Err(e) = c.result {
                    // Mutant (tools/mutants.sh, I6): a failed fdatasync is taken as a success
                    // (what a retry that "succeeds" on Linux amounts to); nothing is fenced.
                    if crate::mutants::on("no-fence-on-sync-error") {
                        let _ = e;
                    } else {
                        return Err(self.fail_sync(e));
                    }
                }
                self.advance_durable(s.seq, s.logical, s.end)?;
                return Ok(Some(took));
            }
            let before = self.pipe.stash.len();
            if let Err(e) = self.storage.reap(&mut self.pipe.stash, wait) {
                return Err(self.fail_sync(e));
            }
            if !wait && self.pipe.stash.len() == before {
                return Ok(None);
            }
        }
    }

    /// Waits for the sync in flight, if any (before anything else syncs or writes out of band).
    pub(super) fn settle(&mut self) -> Result<()> {
        if self.pipe.sync.is_some() {
            self.poll_sync(true)?;
        }
        Ok(())
    }

    /// A sync failed (or could not be submitted or reaped): the log is fenced, whatever the
    /// error, and no sync is ever retried (after a failed fdatasync the kernel may have dropped
    /// the pages).
    fn fail_sync(&mut self, e: std::io::Error) -> Error {
        self.pipe.sync = None;
        let err = self.fail_io("syncing", e);
        self.fence(err.to_string());
        err
    }

    /// Moves the durable watermark to what a completed sync covered. It only grows; anything
    /// else is a bug, and the log stops rather than acknowledge on a watermark it cannot trust.
    fn advance_durable(&mut self, seq: u64, logical: Logical, end: Option<(u64, u64)>) -> Result<()> {
        let was = self.marks.durable_seq();
        if !self.marks.durable(seq, logical, end) {
            let why = format!("internal: the durable watermark would move back from {was} to {seq}");
            self.fence(why.clone());
            return Err(Error::Fenced { cause: why });
        }
        Ok(())
    }

    /// Turns an I/O error into the log's error; anything but disk full fences the handle.
    pub(crate) fn fail_io(&mut self, context: impl Into<String>, e: std::io::Error) -> Error {
        let err = Error::io(context, e);
        if !matches!(err, Error::DiskFull { .. }) {
            self.fence(err.to_string());
        }
        err
    }

    /// Flushes and makes everything written durable with a real fdatasync (skipped only when no
    /// unsynced byte exists).
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        if self.marks.unsynced() {
            self.count_waited_sync();
        }
        self.sync_written()
    }

    /// Counts a sync that an acknowledgement waits for, for [`SegmentFill::Adaptive`].
    fn count_waited_sync(&mut self) {
        self.files.count_waited_sync();
    }

    pub(super) fn sync_written(&mut self) -> Result<()> {
        self.settle()?;
        if !self.marks.unsynced() {
            return Ok(());
        }
        let Some(file) = self.files.active().map(|a| a.file) else {
            return Err(Error::InvalidArgument("unsynced records without an active segment".into()));
        };
        if let Err(e) = self.run(Op::SyncData { file }) {
            // Mutant (tools/mutants.sh, I6): a failed fdatasync is retried, and a retry that
            // "succeeds" (Linux: the failed pages were marked clean) is taken as durability.
            let retried =
                crate::mutants::on("no-fence-on-sync-error") && self.run(Op::SyncData { file }).is_ok();
            if !retried {
                // Never retried: after a failed fdatasync the kernel may have dropped the pages.
                return Err(self.fail_sync(e));
            }
        }
        let (seq, logical, end) =
            (self.marks.written_seq(), self.marks.written_logical().clone(), self.written_end());
        self.advance_durable(seq, logical, end)
    }
}
