//! The I/O thread: callers append without touching the disk; one thread turns whatever
//! is queued into batches, writes them, keeps one fdatasync in flight while it writes the next
//! ones, and resolves each caller's [`Ticket`].
//!
//! - `append` checks the writer epoch and the size, assigns the LSN and enqueues in one step
//!   under one lock, so a Rejected append never consumes an LSN and the queue order is the LSN
//!   order. The queue is bounded in entries and bytes; a full queue waits or answers
//!   [`Error::Busy`] at once, as the caller chose.
//! - Every other operation of the synchronous handle runs here too, with the same arguments:
//!   [`AsyncWal::append_at`], [`AsyncWal::truncate_after`], [`AsyncWal::reset`],
//!   [`AsyncWal::set_meta`], [`AsyncWal::advance_epoch`], [`AsyncWal::sync`], [`AsyncWal::checkpoint`],
//!   [`AsyncWal::purge_before`] and [`AsyncWal::replay_from`]. Each is checked and placed at
//!   submission against the submit side's copy of the log's position (`control.rs`; the
//!   position and its checks are the log's own, `log/position.rs`), in queue order with the
//!   appends, and its ticket resolves when it is durable.
//! - An append takes what [`Wal::append`](crate::Wal::append) takes, a borrowed slice, or an
//!   owned buffer ([`IntoPayload`]): a borrowed one is copied once, into a buffer from a pool
//!   the I/O thread refills once the entry is staged, an owned one is moved.
//! - [`AsyncWal::append_untracked`] is the same step for an entry nobody will wait on: the
//!   caller's slice is copied into a buffer from a pool the I/O thread refills, no ticket is
//!   made and nothing is resolved for it, so a steady stream allocates nothing per entry. A
//!   refusal is still an error at once; an untracked entry the log would have to give up later
//!   (disk full) fences the log instead, since nobody could hear a Rejected.
//! - The thread drains the queue, stages every entry and writes the batch; tickets asking for
//!   [`Durability::Written`] get their first resolution here. When no sync is in flight and one
//!   is due, it submits an fdatasync covering every batch written so far and goes on: appends
//!   that arrive meanwhile are written while the sync runs (on io_uring, or on the portable
//!   backend's sync thread) once [`AsyncOptions::overlap_write_bytes`] of them wait, or else as
//!   soon as it completes, and the next sync starts right after. A ticket resolves
//!   durable only after a sync that was submitted after its batch's write had completed in full,
//!   itself completed (docs/invariants.md I3); every Written ticket later gets that second, final
//!   resolution too.
//! - A sync is due at once for a batch holding a [`Durability::Durable`] entry (or a checkpoint),
//!   and for batches of Written entries only after [`AsyncOptions::written_sync_delay`], after
//!   [`AsyncOptions::written_sync_bytes`], when the queue is half full, or at close: the thread
//!   sleeps with that deadline as its timeout, so the sync comes without any further append.
//! - The thread sleeps in [`Completions::wait`](crate::storage::Completions::wait): on io_uring in the
//!   ring, for a completion or a byte on the bell's pipe; elsewhere on the bell, which appends and
//!   completions ring. No spinning, no sleep-polling.
//! - Its state sits under an engine lock it holds while it works and lets go while it sleeps.
//!   A caller of [`AsyncWal::append_wait`] that finds the lock free runs the same round on its
//!   own thread (its entry then pays no wake-up of the I/O thread and no wake-up back), and
//!   rings the bell on leaving if anything is left; a caller that does not find it free falls
//!   back to enqueue-and-wait.
//! - A failed write or sync fences the log (I6): every pending ticket resolves
//!   [`Failure::Indeterminate`] (also those written behind a sync in flight), every later append
//!   is refused, nothing is retried. A panic on the thread does the same: a ticket dropped
//!   unresolved resolves Indeterminate, so nothing waits forever.
//! - Disk full when a new segment is needed, or when a batch write runs out of space (the log
//!   withdraws it on disk), is not a fence: what was written before it stays, the entries never
//!   written and everything queued after them resolve [`Failure::Rejected`], the next LSN is the
//!   log's again, and the log stays usable.
//!
//! One side of it per file; this one holds what a caller configures and passes ([`AsyncOptions`],
//! [`WhenFull`], [`Payload`]):
//!
//! - `submit.rs`: [`AsyncWal`], the submit side: checks, LSNs, the bounded queue, tickets;
//! - `control.rs`: the operations other than a plain append, admitted on the submit side's copy
//!   of the log's position (`log/position.rs`) and run on the log;
//! - `queue.rs`: what the two sides share: the requests, the queue's accounting under the submit
//!   lock, a ticket's slot on the thread's side;
//! - `engine.rs`: the I/O thread's state under the engine lock, its loop, and its rounds:
//!   writing batches, starting and collecting syncs, resolving tickets, sleeping;
//! - `requests.rs`: the requests a round takes from the queue, staged into the log;
//! - `fence.rs`: how the thread stops: fencing, withdrawing entries after disk full, abandoning,
//!   the clean finish.

mod control;
mod engine;
mod fence;
mod queue;
mod requests;
mod submit;

pub use submit::AsyncWal;

use std::time::Duration;

/// What `append` does when the queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// The append waits until the queue has room for it (the default).
    Wait,
    /// The append is refused at once with [`Error::Busy`](crate::Error::Busy) (Rejected: nothing was logged).
    Busy,
}

/// Bounds and behaviour of the queue in front of the I/O thread.
#[derive(Clone, Debug)]
pub struct AsyncOptions {
    /// The queue's bound in entries and in payload bytes: a `Written` entry holds its place
    /// until it is written (handed to the OS), a `Durable` one until it is durable. A full
    /// queue waits or answers Busy ([`WhenFull`]).
    pub queue_entries: usize,
    /// The queue's bound in payload bytes (default 64 MiB): up to this much payload memory
    /// waits in the queue, each entry's bytes counted for as long as it holds its place.
    pub queue_bytes: usize,
    /// What an append does when either bound is reached: wait (the default) or answer
    /// [`Error::Busy`](crate::Error::Busy).
    pub when_full: WhenFull,
    /// The most entries one batch takes from the queue.
    pub max_batch_entries: usize,
    /// An fdatasync at least this slow is counted (`Stats::slow_syncs`) and reported as a
    /// warning through the `log` facade (etcd's "slow fdatasync").
    pub slow_sync: Duration,
    /// How long batches holding only [`Durability::Written`](crate::Durability::Written) entries may wait for their sync.
    pub written_sync_delay: Duration,
    /// How many payload bytes of such batches may wait for their sync.
    pub written_sync_bytes: usize,
    /// While a sync is in flight, appends are written during it (and wake the I/O thread for
    /// that) only once this many payload bytes wait; otherwise they wait in the queue and are
    /// written when the sync completes, just before the next one starts (`Written` entries
    /// too: their written word comes then). Writing a few hundred bytes
    /// costs less than a wake-up and a write call of their own; writing a megabyte during the
    /// sync hides most of its time. 0 writes (and wakes for) every append at once.
    pub overlap_write_bytes: usize,
    /// What disk full does to entries that were never written. `false` (the default): they and
    /// everything queued after them resolve Rejected, the next LSN is the log's again, and the
    /// log stays usable. `true`: the log fences instead (every pending ticket Indeterminate,
    /// every later operation refused), for a caller whose later operations assume the earlier
    /// ones are in the log, such as a Raft log store that submits a batch of entries one by one.
    pub fence_on_disk_full: bool,
}

impl Default for AsyncOptions {
    fn default() -> Self {
        AsyncOptions {
            queue_entries: 4096,
            queue_bytes: 64 << 20,
            when_full: WhenFull::Wait,
            max_batch_entries: 1024,
            slow_sync: Duration::from_secs(1),
            written_sync_delay: Duration::from_millis(5),
            written_sync_bytes: 1 << 20,
            overlap_write_bytes: 64 << 10,
            fence_on_disk_full: false,
        }
    }
}

/// What one append carries: one entry, or a user batch (an atomic group such as a job array)
/// that takes consecutive LSNs and survives a crash whole or not at all.
#[derive(Debug)]
pub enum Payload {
    /// One entry's bytes.
    One(Vec<u8>),
    /// The entries of one user batch, in LSN order: written in one batch frame, linked by
    /// `GROUP_CONT`, so a crash keeps all of them or none.
    Group(Vec<Vec<u8>>),
}

/// What an [`AsyncWal`] append takes, the same shapes as [`Wal::append`](crate::Wal::append)
/// and more: a borrowed `&[u8]` (or `&Vec<u8>`, `&[u8; N]`) is copied once, for
/// [`AsyncWal::append`], [`AsyncWal::append_with`] and [`AsyncWal::append_wait`] into a buffer
/// the I/O thread hands back for reuse once the entry is staged (so a steady stream of borrowed
/// appends allocates no payload buffer), for [`AsyncWal::append_at`] into one of its own; an
/// owned `Vec<u8>` or [`Payload`] is moved, not copied. A user batch takes consecutive LSNs as
/// one atomic group, as [`Payload::Group`] does: borrowed (`&[&[u8]]`, the shape of
/// [`Wal::append_batch`](crate::Wal::append_batch), or `&[&[u8]; N]`, `&Vec<&[u8]>`,
/// `&[Vec<u8>]`, `&Vec<Vec<u8>>`) it is copied the same way, entry by entry; an owned
/// `Vec<Vec<u8>>` is moved. The copy is made only once the append is admitted (its sizes, epoch
/// and the queue's room checked): a refusal copies nothing. Implemented for those types only.
pub trait IntoPayload: sealed::Sealed {
    /// How many entries it carries, their bytes, and the length of the largest: what an append
    /// checks (the log's limits, the queue's room) before anything is copied.
    fn shape(&self) -> (usize, usize, usize);
    /// The payload, taking a buffer for a borrowed slice's copy from `spare` (empty or not: it
    /// is cleared first).
    fn into_payload(self, spare: &mut dyn FnMut() -> Vec<u8>) -> Payload;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Payload {}
    impl Sealed for Vec<u8> {}
    impl Sealed for &[u8] {}
    impl Sealed for &Vec<u8> {}
    impl<const N: usize> Sealed for &[u8; N] {}
    impl Sealed for &[&[u8]] {}
    impl<const N: usize> Sealed for &[&[u8]; N] {}
    impl Sealed for &Vec<&[u8]> {}
    impl Sealed for &[Vec<u8>] {}
    impl Sealed for &Vec<Vec<u8>> {}
    impl Sealed for Vec<Vec<u8>> {}
}

impl IntoPayload for Payload {
    fn shape(&self) -> (usize, usize, usize) {
        (self.entries(), self.bytes(), self.largest())
    }
    fn into_payload(self, _: &mut dyn FnMut() -> Vec<u8>) -> Payload {
        self
    }
}

impl IntoPayload for Vec<u8> {
    fn shape(&self) -> (usize, usize, usize) {
        (1, self.len(), self.len())
    }
    fn into_payload(self, _: &mut dyn FnMut() -> Vec<u8>) -> Payload {
        Payload::One(self)
    }
}

impl IntoPayload for &[u8] {
    fn shape(&self) -> (usize, usize, usize) {
        (1, self.len(), self.len())
    }
    fn into_payload(self, spare: &mut dyn FnMut() -> Vec<u8>) -> Payload {
        Payload::One(copy_into(self, spare))
    }
}

impl IntoPayload for &[&[u8]] {
    fn shape(&self) -> (usize, usize, usize) {
        group_shape(self.iter().map(|p| p.len()))
    }
    fn into_payload(self, spare: &mut dyn FnMut() -> Vec<u8>) -> Payload {
        Payload::of_entries(self.iter().map(|p| copy_into(p, spare)).collect())
    }
}

impl IntoPayload for &[Vec<u8>] {
    fn shape(&self) -> (usize, usize, usize) {
        group_shape(self.iter().map(Vec::len))
    }
    fn into_payload(self, spare: &mut dyn FnMut() -> Vec<u8>) -> Payload {
        Payload::of_entries(self.iter().map(|p| copy_into(p, spare)).collect())
    }
}

/// An owned user batch, moved (not copied).
impl IntoPayload for Vec<Vec<u8>> {
    fn shape(&self) -> (usize, usize, usize) {
        self.as_slice().shape()
    }
    fn into_payload(self, _: &mut dyn FnMut() -> Vec<u8>) -> Payload {
        Payload::of_entries(self)
    }
}

/// The shapes that are one of the above seen through `as_slice`: the same checks, the same copy.
macro_rules! through_slice {
    ($([$($generics:tt)*] $t:ty),* $(,)?) => {$(
        impl<$($generics)*> IntoPayload for $t {
            fn shape(&self) -> (usize, usize, usize) {
                self.as_slice().shape()
            }
            fn into_payload(self, spare: &mut dyn FnMut() -> Vec<u8>) -> Payload {
                self.as_slice().into_payload(spare)
            }
        }
    )*};
}

through_slice!(
    [] &Vec<u8>,
    [const N: usize] &[u8; N],
    [] &Vec<&[u8]>,
    [const N: usize] &[&[u8]; N],
    [] &Vec<Vec<u8>>,
);

/// A borrowed entry copied into a buffer from `spare` (cleared first: it may be a spent one).
fn copy_into(entry: &[u8], spare: &mut dyn FnMut() -> Vec<u8>) -> Vec<u8> {
    let mut buf = spare();
    buf.clear();
    buf.extend_from_slice(entry);
    buf
}

/// A borrowed user batch's entries, bytes and largest entry.
fn group_shape(lens: impl Iterator<Item = usize>) -> (usize, usize, usize) {
    lens.fold((0, 0, 0), |(n, sum, max), len| (n + 1, sum + len, max.max(len)))
}

impl Payload {
    /// A user batch's entries as one payload: a batch of one is one entry (the same on disk).
    fn of_entries(mut entries: Vec<Vec<u8>>) -> Payload {
        match entries.len() {
            1 => Payload::One(entries.pop().unwrap_or_default()),
            _ => Payload::Group(entries),
        }
    }

    pub(crate) fn entries(&self) -> usize {
        match self {
            Payload::One(_) => 1,
            Payload::Group(g) => g.len(),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            Payload::One(p) => p.len(),
            Payload::Group(g) => g.iter().map(Vec::len).sum(),
        }
    }

    pub(crate) fn largest(&self) -> usize {
        match self {
            Payload::One(p) => p.len(),
            Payload::Group(g) => g.iter().map(Vec::len).max().unwrap_or(0),
        }
    }
}
