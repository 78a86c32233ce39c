//! Tickets: the asynchronous acknowledgement of one append.
//!
//! A ticket's *outcome* resolves once, on the I/O thread, to the entry's LSN (written or
//! durable, as asked) or to a failure. Its *final* outcome says durable or failed: for a
//! [`crate::Durability::Durable`] entry it is the outcome itself; a
//! [`crate::Durability::Written`] entry's outcome comes when its batch is handed to the OS and
//! its final outcome later, when the sync covering it completed (or failed). Each can be waited
//! on, polled, or awaited as a `std::future::Future` without any runtime, and a completion channel
//! ([`Notify`]) receives one [`Completion`] per resolution. The I/O thread only stores outcomes,
//! notifies a condition variable and wakes wakers: it never runs user code.

use crate::Lsn;
use std::future::Future;
use std::pin::Pin;
// Model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test -p wal --lib --release ticket`.
#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
use std::sync::Arc;
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
#[cfg(not(loom))]
use std::time::Duration;

/// Why an append did not become durable. `Indeterminate` entries may or may not be in the log
/// (docs/invariants.md I1): the log decides, and a reopen tells.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Logged or possibly logged: a failed write or sync, a fenced log, a close.
    #[error("indeterminate (the log decides; ask for its fate later): {0}")]
    Indeterminate(String),
    /// Never written and never will be (the disk was full when its segment was needed): the
    /// entry consumed nothing and its LSN is given to a later entry.
    #[error("rejected (never logged): {0}")]
    Rejected(String),
}

#[derive(Debug, Default)]
struct State {
    /// The first word: written (a `Written` entry) or final.
    outcome: Option<Result<Lsn, Failure>>,
    /// The last word: durable, or failed.
    last: Option<Result<Lsn, Failure>>,
    waker: Option<Waker>,
    last_waker: Option<Waker>,
    /// Threads blocked on `done`. A resolution notifies only when there is one: the condition
    /// variable makes a futex call for every notification, waiter or not, and most tickets
    /// (a bulk load's, an event loop's) are never waited on (two calls per `Written` entry).
    waiters: u32,
}

/// Which resolution a [`Completion`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A [`crate::Durability::Written`] entry was handed to the OS (the outcome is its LSN); a
    /// `Final` completion for the same ticket follows.
    Written,
    /// The ticket's last word: durable (`Ok`) or failed. Exactly one per ticket.
    Final,
}

/// One resolution of a ticket, as a completion channel delivers it (see [`Notify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The caller's tag given with the append.
    pub tag: u64,
    /// The LSN the entry was given at submission (the first one of a group).
    pub lsn: Lsn,
    /// `Ok` with the LSN the ticket carries once it is written or durable, as `stage` says;
    /// otherwise the failure.
    pub outcome: Result<Lsn, Failure>,
    /// `Written` for the first of a written entry's two completions, `Final` otherwise.
    pub stage: Stage,
}

/// Where to deliver a ticket's outcome besides the ticket itself: an event loop collects many
/// tickets through one channel. The I/O thread only sends on the (unbounded) channel; it never
/// runs caller code.
#[derive(Clone, Debug)]
pub struct Notify {
    /// The channel each [`Completion`] is sent on.
    pub tx: crossbeam_channel::Sender<Completion>,
    /// A value of the caller's choosing, copied into every completion of this ticket.
    pub tag: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    state: Mutex<State>,
    done: Condvar,
    notify: Option<Notify>,
    lsn: Lsn,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps on `done` once, counted as a waiter (spurious returns allowed).
    fn block<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        st.waiters += 1;
        let mut st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        st.waiters -= 1;
        st
    }

    /// Sleeps on `done`, counted as a waiter, while `blocked` holds, at most `timeout`.
    #[cfg(not(loom))]
    fn block_while(
        &self,
        timeout: Duration,
        blocked: impl FnMut(&mut State) -> bool,
    ) -> MutexGuard<'_, State> {
        let mut st = self.lock();
        st.waiters += 1;
        let (mut st, _) =
            self.done.wait_timeout_while(st, timeout, blocked).unwrap_or_else(|e| e.into_inner());
        st.waiters -= 1;
        st
    }

    /// True when nobody can ever learn the outcome: every [`Ticket`] for it was dropped (only
    /// the I/O thread's `self` is left; nothing can clone it) and no completion channel waits
    /// for it. Its resolutions are then skipped: a bulk load that drops its tickets would
    /// otherwise pay two locks and a condition check per entry on the I/O thread.
    pub(crate) fn unobserved(self: &Arc<Self>) -> bool {
        self.notify.is_none() && Arc::strong_count(self) == 1
    }

    /// The last word was given (a later one is ignored).
    pub(crate) fn has_last_word(&self) -> bool {
        self.lock().last.is_some()
    }

    /// The entry was handed to the OS (a `Written` entry's first word). Ignored once the
    /// ticket has an outcome.
    pub(crate) fn resolve_written(&self, lsn: Lsn) {
        let (waker, blocked) = {
            let mut st = self.lock();
            if st.outcome.is_some() {
                return;
            }
            st.outcome = Some(Ok(lsn));
            (st.waker.take(), st.waiters > 0)
        };
        if blocked {
            self.done.notify_all();
        }
        if let Some(w) = waker {
            w.wake();
        }
        self.send(Ok(lsn), Stage::Written);
    }

    /// The ticket's last word (durable or failed), which is also its outcome if it had none; a
    /// second last word is ignored (the first one is the truth).
    pub(crate) fn resolve(&self, outcome: Result<Lsn, Failure>) {
        let (wakers, blocked) = {
            let mut st = self.lock();
            if st.last.is_some() {
                return;
            }
            st.last = Some(outcome.clone());
            if st.outcome.is_none() {
                st.outcome = Some(outcome.clone());
            }
            ([st.waker.take(), st.last_waker.take()], st.waiters > 0)
        };
        if blocked {
            self.done.notify_all();
        }
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
        self.send(outcome, Stage::Final);
    }

    fn send(&self, outcome: Result<Lsn, Failure>, stage: Stage) {
        if let Some(n) = &self.notify {
            // A receiver that went away no longer wants completions; the ticket still holds it.
            let _ = n.tx.send(Completion { tag: n.tag, lsn: self.lsn, outcome, stage });
        }
    }
}

/// The acknowledgement of one append.
#[derive(Clone, Debug)]
pub struct Ticket {
    pub(crate) inner: Arc<Inner>,
    /// The LSN the entry was given at submission.
    pub lsn: Lsn,
}

impl Ticket {
    pub(crate) fn new(lsn: Lsn, notify: Option<Notify>) -> Ticket {
        Ticket { inner: Arc::new(Inner { notify, lsn, ..Inner::default() }), lsn }
    }

    /// The outcome if it is known, without blocking.
    pub fn poll_outcome(&self) -> Option<Result<Lsn, Failure>> {
        self.inner.lock().outcome.clone()
    }

    /// Blocks until the outcome is known.
    pub fn wait(&self) -> Result<Lsn, Failure> {
        let mut st = self.inner.lock();
        loop {
            if let Some(o) = &st.outcome {
                return o.clone();
            }
            st = self.inner.block(st);
        }
    }

    /// Blocks at most `timeout`; `None` if the outcome is still unknown.
    #[cfg(not(loom))]
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Lsn, Failure>> {
        self.inner.block_while(timeout, |s| s.outcome.is_none()).outcome.clone()
    }

    /// The final outcome (durable, or failed) if it is known, without blocking. For a
    /// `Durable` entry it is the outcome; a `Written` one gets it after its covering sync.
    pub fn poll_durable(&self) -> Option<Result<Lsn, Failure>> {
        self.inner.lock().last.clone()
    }

    /// Blocks until the final outcome (durable, or failed) is known.
    pub fn wait_durable(&self) -> Result<Lsn, Failure> {
        let mut st = self.inner.lock();
        loop {
            if let Some(o) = &st.last {
                return o.clone();
            }
            st = self.inner.block(st);
        }
    }

    /// Blocks at most `timeout` for the final outcome; `None` if it is still unknown.
    #[cfg(not(loom))]
    pub fn wait_durable_timeout(&self, timeout: Duration) -> Option<Result<Lsn, Failure>> {
        self.inner.block_while(timeout, |s| s.last.is_none()).last.clone()
    }

    /// The final outcome as a future (the ticket itself awaits the first outcome).
    pub fn durable(&self) -> DurableFuture {
        DurableFuture { inner: self.inner.clone() }
    }
}

/// Awaits a ticket's final outcome: durable, or failed (see [`Ticket::durable`]).
#[derive(Debug)]
pub struct DurableFuture {
    inner: Arc<Inner>,
}

impl Future for DurableFuture {
    type Output = Result<Lsn, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.inner.lock();
        match &st.last {
            Some(o) => Poll::Ready(o.clone()),
            None => {
                st.last_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Future for Ticket {
    type Output = Result<Lsn, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.inner.lock();
        match &st.outcome {
            Some(o) => Poll::Ready(o.clone()),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// A resolution on the I/O thread is seen by a waiter on another, in every interleaving.
    #[test]
    fn wait_sees_a_resolution_from_another_thread() {
        loom::model(|| {
            let t = Ticket::new(Lsn(7), None);
            let inner = t.inner.clone();
            let h = loom::thread::spawn(move || inner.resolve(Ok(Lsn(7))));
            assert_eq!(t.wait(), Ok(Lsn(7)));
            h.join().unwrap();
        });
    }

    /// Two racing resolutions: the first one wins, and every reader agrees on it.
    #[test]
    fn the_first_resolution_is_the_only_one() {
        loom::model(|| {
            let t = Ticket::new(Lsn(1), None);
            let (a, b) = (t.inner.clone(), t.inner.clone());
            let h1 = loom::thread::spawn(move || a.resolve(Ok(Lsn(1))));
            let h2 = loom::thread::spawn(move || b.resolve(Err(Failure::Indeterminate("fenced".into()))));
            let first = t.wait();
            h1.join().unwrap();
            h2.join().unwrap();
            assert_eq!(t.poll_outcome(), Some(first.clone()));
            assert_eq!(t.wait(), first);
        });
    }

    /// A written entry: the written word, then the last word from another thread. A waiter for
    /// the last word never takes the written one for it, and never misses the last one.
    #[test]
    fn written_then_durable_is_seen_in_order() {
        loom::model(|| {
            let t = Ticket::new(Lsn(5), None);
            let inner = t.inner.clone();
            let h = loom::thread::spawn(move || {
                inner.resolve_written(Lsn(5));
                inner.resolve(Err(Failure::Indeterminate("sync failed".into())));
            });
            let last = t.wait_durable();
            assert_eq!(last, Err(Failure::Indeterminate("sync failed".into())));
            // The first word stays the written one.
            assert_eq!(t.wait(), Ok(Lsn(5)));
            h.join().unwrap();
        });
    }

    /// Two threads blocked on one ticket, one for each word, while they land: a resolution
    /// notifies only when it counts a waiter, and neither waiter is left asleep.
    #[test]
    fn two_waiters_for_both_words_are_both_woken() {
        loom::model(|| {
            let t = Ticket::new(Lsn(4), None);
            let (inner, other) = (t.inner.clone(), t.clone());
            let h = loom::thread::spawn(move || {
                inner.resolve_written(Lsn(4));
                inner.resolve(Ok(Lsn(4)));
            });
            let w = loom::thread::spawn(move || other.wait());
            assert_eq!(t.wait_durable(), Ok(Lsn(4)));
            assert_eq!(w.join().unwrap(), Ok(Lsn(4)));
            h.join().unwrap();
        });
    }

    /// The last word as a future: woken whether it lands before or after the first poll, and a
    /// written word in between does not complete it.
    #[test]
    fn the_durable_future_is_woken() {
        loom::model(|| {
            let t = Ticket::new(Lsn(9), None);
            let inner = t.inner.clone();
            let h = loom::thread::spawn(move || {
                inner.resolve_written(Lsn(9));
                inner.resolve(Ok(Lsn(9)));
            });
            assert_eq!(loom::future::block_on(t.durable()), Ok(Lsn(9)));
            assert_eq!(t.poll_outcome(), Some(Ok(Lsn(9))));
            h.join().unwrap();
        });
    }

    /// Awaited as a future: a waker registered before or after the resolution is never lost.
    #[test]
    fn an_awaiting_future_is_woken() {
        loom::model(|| {
            let t = Ticket::new(Lsn(3), None);
            let inner = t.inner.clone();
            let h = loom::thread::spawn(move || inner.resolve(Ok(Lsn(3))));
            assert_eq!(loom::future::block_on(t), Ok(Lsn(3)));
            h.join().unwrap();
        });
    }
}
