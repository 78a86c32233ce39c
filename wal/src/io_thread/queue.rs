//! What the submit side and the I/O thread share: the requests on the channel between them
//! ([`Req`]), the queue's accounting and the log's promised position under the submit lock
//! ([`Shared`]), and the I/O thread's side of a ticket ([`Slot`]), which resolves it
//! Indeterminate if it is dropped unresolved.

use super::control::Control;
use super::{AsyncOptions, Payload};
use crate::error::Result;
use crate::log::{Checkpoint, Position, PurgeReport};
use crate::storage::Bell;
use crate::ticket::{Failure, Inner};
use crate::{Durability, Lsn};
use crossbeam_channel::Sender;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

pub(super) struct Submit {
    /// The log's position with every admitted operation applied: the LSNs tickets carry come
    /// from here; the log assigns the same ones on its own copy, by the same code.
    pub(super) log: Position,
    pub(super) queued_entries: usize,
    pub(super) queued_bytes: usize,
    pub(super) closing: bool,
    /// Payload bytes sent to the I/O thread and not taken by it yet.
    pub(super) untaken_bytes: usize,
    /// The I/O thread sleeps until its sync completes: small appends need not wake it.
    pub(super) quiet: bool,
    /// Empty buffers for the copies of borrowed payloads ([`AsyncWal::append_untracked`], and
    /// [`AsyncWal::append`] of a slice; see [`POOL_BUFFERS`]).
    pub(super) pool: Vec<Vec<u8>>,
    /// Appends waiting for queue space ([`WhenFull::Wait`](super::WhenFull::Wait)): a release
    /// wakes them only when there are any (a wake-up with nobody waiting is still a system
    /// call, paid on every batch).
    pub(super) space_waiters: usize,
}

pub(super) struct Shared {
    pub(super) submit: Mutex<Submit>,
    pub(super) metrics: crate::metrics::Metrics,
    pub(super) space: Condvar,
    /// Rung after every request, so the I/O thread wakes for it.
    pub(super) bell: Arc<Bell>,
    pub(super) max_payload: usize,
    pub(super) opts: AsyncOptions,
    /// Why the log is fenced, once it is (for good: the first cause stays). Set under the
    /// submit lock, so an admission, which reads it under that lock, is either before the
    /// fence or refused; the I/O thread reads it for every request without the lock.
    pub(super) fenced: OnceLock<String>,
    /// The log's durable LSN plus one (0: no entry durable), published by the I/O thread each
    /// time it resolves what a sync covered.
    pub(super) durable: AtomicU64,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Submit> {
        self.submit.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives back queue space held by resolved entries.
    pub(super) fn release(&self, entries: usize, bytes: usize) {
        if entries == 0 && bytes == 0 {
            return;
        }
        let mut st = self.lock();
        st.queued_entries = st.queued_entries.saturating_sub(entries);
        st.queued_bytes = st.queued_bytes.saturating_sub(bytes);
        let waiting = st.space_waiters > 0;
        drop(st);
        if waiting {
            self.space.notify_all();
        }
    }

    /// Fences the log (the first cause stays) and wakes every append waiting for space.
    pub(super) fn set_fenced(&self, why: &str) {
        let st = self.lock();
        let _ = self.fenced.set(why.to_string());
        drop(st);
        self.space.notify_all();
    }

    /// Publishes the log's durable LSN.
    pub(super) fn set_durable_lsn(&self, lsn: Option<Lsn>) {
        self.durable.store(durable_word(lsn), Ordering::Release);
    }

    /// The durable LSN the I/O thread published last.
    pub(super) fn durable_lsn(&self) -> Option<Lsn> {
        self.durable.load(Ordering::Acquire).checked_sub(1).map(Lsn)
    }

    /// The cause the log was fenced with, if it is.
    pub(super) fn fence_cause(&self) -> Option<String> {
        self.fenced.get().cloned()
    }
}

/// A durable LSN as [`Shared::durable`] holds it: plus one, 0 for none.
pub(super) fn durable_word(lsn: Option<Lsn>) -> u64 {
    lsn.map_or(0, |l| l.0 + 1)
}

/// The I/O thread's side of a ticket, or of none ([`AsyncWal::append_untracked`]). Dropped
/// without a final resolution (a panic on the thread, a request left in a channel nobody reads)
/// it resolves the ticket Indeterminate, so no waiter waits forever; after a resolution that
/// is ignored.
pub(super) struct Slot(pub(super) Option<Arc<Inner<Lsn>>>);

impl Slot {
    /// The ticket, when there is one somebody can still observe.
    fn observed(&self) -> Option<&Arc<Inner<Lsn>>> {
        self.0.as_ref().filter(|t| !t.unobserved())
    }

    pub(super) fn untracked(&self) -> bool {
        self.0.is_none()
    }

    pub(super) fn resolve_written(&self, lsn: Lsn) {
        if let Some(t) = self.observed() {
            t.resolve_written(lsn);
        }
    }

    pub(super) fn resolve(&self, outcome: Result<Lsn, Failure>) {
        if let Some(t) = self.observed() {
            t.resolve(outcome);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Checked first: the failure's text is an allocation per entry otherwise.
        let Some(t) = self.observed() else { return };
        if t.has_last_word() {
            return;
        }
        t.resolve(Err(Failure::Indeterminate("the I/O thread stopped before resolving this entry".into())));
    }
}

/// Buffers of appended entries go back to a pool once staged, so a steady stream of borrowed
/// (or untracked) appends allocates no payload buffer: at most this many are kept...
pub(super) const POOL_BUFFERS: usize = 1024;
/// ...each at most this large (a rare large entry's buffer is not kept).
pub(super) const POOL_BUFFER_BYTES: usize = 64 << 10;

pub(super) enum Req {
    Append {
        lsn: u64,
        epoch: u64,
        payload: Payload,
        durability: Durability,
        slot: Slot,
    },
    /// Any other operation that moves the log's position or state, checked at submission:
    /// `lsn` is what its ticket carries, `next` the log's next LSN after it.
    Control {
        op: Control,
        epoch: u64,
        lsn: u64,
        next: u64,
        durability: Durability,
        slot: Slot,
    },
    /// A checkpoint record, staged with the next batch (made durable by its sync).
    Checkpoint {
        epoch: u64,
        lsn: u64,
        cp: Checkpoint,
    },
    /// A prefix purge, run between batches; the result goes back on `reply`.
    Purge {
        below: Lsn,
        reply: Sender<Result<PurgeReport>>,
    },
    /// A replay of the log from an LSN (tailing readers: durable; Raft's reads: written).
    Replay {
        from: Option<Lsn>,
        bound: Durability,
        reply: Sender<Result<crate::replay::Replay>>,
    },
    Close,
    /// Stop without writing, syncing or sealing anything more (what a crash leaves; tests).
    Abandon,
}

impl Req {
    /// An append or control operation taken out of the queue without being run (a fence or a
    /// withdrawal): its place in the queue's bounds (entries, payload bytes) and the slot its
    /// ticket resolves through. Any other request comes back as it was.
    pub(super) fn into_slot(self) -> std::result::Result<((usize, usize), Slot), Req> {
        let held = self.queued();
        match self {
            Req::Append { slot, .. } | Req::Control { slot, .. } => Ok((held, slot)),
            other => Err(other),
        }
    }

    /// The entries and payload bytes it holds of the queue's bounds.
    pub(super) fn queued(&self) -> (usize, usize) {
        match self {
            Req::Append { payload, .. } => (payload.entries(), payload.bytes()),
            Req::Control { op, .. } => op.size(),
            _ => (0, 0),
        }
    }
}

/// The fence a clean close leaves: later appends are refused with it.
pub(super) const CLOSED: &str = "the log was closed";
