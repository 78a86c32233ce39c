//! How the I/O thread stops: a fence (a failed write or sync, a panic, a broken promise: every
//! pending ticket Indeterminate, every later operation refused), the withdrawal of entries
//! disk full kept from the log (Rejected, the log usable), an abandon, and the clean finish.

use super::engine::{Io, Pending};
use super::queue::{Req, CLOSED};
use crate::error::{Error, Result};
use crate::ticket::Failure;
use crate::{Epoch, Lsn};
use std::time::Instant;

impl Io {
    /// Fences the log: records why, fails every staged, written and queued ticket as
    /// Indeterminate, answers queued requests. A queued close request is kept (its caller waits).
    pub(super) fn fence(&mut self, why: String) {
        self.shared.set_fenced(&why);
        let mut entries = 0;
        let mut bytes = 0;
        let mut flights = Vec::new();
        for f in self.flights.drain(..) {
            entries += f.held.0;
            bytes += f.held.1;
            flights.extend(f.pending);
        }
        for p in self.staged.drain(..) {
            entries += p.entries;
            bytes += p.bytes;
            p.slot.resolve(Err(Failure::Indeterminate(why.clone())));
        }
        for p in flights {
            p.slot.resolve(Err(Failure::Indeterminate(why.clone())));
        }
        self.staged_checkpoint = false;
        let mut untaken = 0;
        while let Ok(r) = self.rx.try_recv() {
            let r = match r.into_slot() {
                Ok(((n, b), slot)) => {
                    (entries, bytes, untaken) = (entries + n, bytes + b, untaken + b);
                    slot.resolve(Err(Failure::Indeterminate(why.clone())));
                    continue;
                }
                Err(r) => r,
            };
            match r {
                Req::Append { .. } | Req::Control { .. } => {} // resolved above
                Req::Checkpoint { .. } => {}
                Req::Purge { reply, .. } => {
                    let _ = reply.send(Err(Error::Fenced { cause: why.clone() }));
                }
                Req::Replay { reply, .. } => {
                    let _ = reply.send(Err(Error::Fenced { cause: why.clone() }));
                }
                Req::Close => self.closing = true,
                Req::Abandon => (self.closing, self.abandoning) = (true, true),
            }
        }
        if untaken > 0 {
            let mut st = self.shared.lock();
            st.untaken_bytes = st.untaken_bytes.saturating_sub(untaken);
        }
        self.shared.release(entries, bytes);
    }

    /// Disk full: `failed` (entries that never reached the log) and every queued append were
    /// never written. Under the submit lock (no new LSN can be handed out meanwhile) they
    /// resolve Rejected, the queue counters drop them, and the next LSN becomes the log's
    /// again. The log stays usable.
    pub(super) fn withdraw(&mut self, failed: Vec<Pending>, why: &str) {
        if self.shared.opts.fence_on_disk_full {
            let (entries, bytes) = failed.iter().fold((0, 0), |(e, b), p| (e + p.entries, b + p.bytes));
            let why = format!("{why} (this log fences on disk full)");
            self.shared.set_fenced(&why);
            for p in failed {
                p.slot.resolve(Err(Failure::Indeterminate(why.clone())));
            }
            self.shared.release(entries, bytes);
            self.fence(why);
            return;
        }
        let mut st = self.shared.lock();
        let mut entries = 0;
        let mut bytes = 0;
        let mut rejected = Vec::new();
        for p in failed {
            entries += p.entries;
            bytes += p.bytes;
            rejected.push(p.slot);
        }
        let mut untaken = 0;
        while let Ok(r) = self.rx.try_recv() {
            let r = match r.into_slot() {
                Ok(((n, b), slot)) => {
                    (entries, bytes, untaken) = (entries + n, bytes + b, untaken + b);
                    rejected.push(slot);
                    continue;
                }
                Err(r) => r,
            };
            match r {
                Req::Append { .. } | Req::Control { .. } => {} // withdrawn above
                // Its LSN was taken before; it still belongs with the next batch.
                Req::Checkpoint { epoch, lsn, cp } => {
                    if self.wal.checkpoint(Epoch(epoch), Lsn(lsn), &cp).is_ok() {
                        self.staged_checkpoint = true;
                    }
                }
                Req::Purge { below, reply } => {
                    let _ = reply.send(self.wal.purge_before(below));
                }
                Req::Replay { from, bound, reply } => {
                    let _ = reply.send(self.wal.replay_from(from, bound));
                }
                Req::Close => self.closing = true,
                Req::Abandon => (self.closing, self.abandoning) = (true, true),
            }
        }
        st.queued_entries = st.queued_entries.saturating_sub(entries);
        st.queued_bytes = st.queued_bytes.saturating_sub(bytes);
        st.untaken_bytes = st.untaken_bytes.saturating_sub(untaken);
        st.log = self.wal.position().clone();
        drop(st);
        self.shared.space.notify_all();
        // Resolved after the reset: a caller woken by its ticket finds the queue and the next
        // LSN as they now are.
        let untracked = rejected.iter().filter(|s| s.untracked()).count();
        let reason = format!("withdrawn after: {why}");
        for s in rejected {
            s.resolve(Err(Failure::Rejected(reason.clone())));
        }
        if untracked > 0 {
            // Nobody could hear that these were given up: the loss must not be quiet.
            self.fence(format!(
                "{untracked} entries appended without a ticket were never written ({why}); the log \
                 is fenced so that their loss cannot go unnoticed"
            ));
        }
    }

    /// At an abandon: what is not durable stays as a crash would leave it, every ticket not
    /// resolved yet resolves Indeterminate.
    pub(super) fn abandon(mut self) -> Result<()> {
        self.fence("the log was abandoned".into());
        self.wal.abandon();
        Ok(())
    }

    /// At close: writes what is staged, syncs everything written, resolves, seals the log.
    pub(super) fn finish(mut self) -> Result<()> {
        if self.fenced().is_none() {
            self.write_now();
        }
        if self.fenced().is_none() {
            let started = Instant::now();
            let had_unsynced = self.wal.written_seq() > self.wal.durable_seq() || self.wal.syncing();
            match self.wal.sync() {
                Ok(()) => {
                    if had_unsynced {
                        self.record_sync(started.elapsed());
                    }
                }
                Err(e) => self.fence(e.to_string()),
            }
            self.resolve_durable();
        }
        let fenced = self.fenced();
        self.fence(CLOSED.into());
        match fenced {
            Some(cause) => Err(Error::Fenced { cause }),
            None => self.wal.close(),
        }
    }
}
