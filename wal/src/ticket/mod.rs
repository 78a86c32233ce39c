//! Acknowledgements: [`Ack<T>`], the one asynchronous answer of the engine, resolving once to
//! `Result<T, Failure>`.
//!
//! The writer's acknowledgement of an append is a [`Ticket`] (`Ack<Lsn>`); the commit
//! pipeline's (the `wal-state` crate) of a command is an `Ack<Done>`, made with
//! [`Ack::pending`] and resolved by its apply thread through the [`Resolver`]. An acknowledgement has two
//! words. Its *outcome* resolves once, to the value or a failure. Its *final* outcome (its last
//! word) says durable or failed: for a [`crate::Durability::Durable`] entry, and for the
//! pipeline's commands, it is the outcome itself; a [`crate::Durability::Written`] entry's
//! outcome comes when its batch is handed to the OS and its final outcome later, when the sync
//! covering it completed (or failed). Each can be waited on, polled, or awaited as a
//! `std::future::Future` without any runtime, and a writer's completion channel ([`Notify`])
//! receives one [`Completion`] per resolution.
//!
//! Who resolves an acknowledgement decides what runs there. The writer's I/O thread only stores
//! outcomes, notifies a condition variable and wakes wakers: it never runs user code, so a
//! callback ([`Ack::on_resolved`]) can only be given to an acknowledgement made with
//! [`Ack::pending`], whose [`Resolver`] runs it on the thread that resolves (the pipeline's
//! apply thread, where hooks run anyway).

use crate::Lsn;
use std::fmt;
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

/// Why an append did not become durable (or a command was not applied). `Indeterminate`
/// entries may or may not be in the log (docs/invariants.md I1): the log decides, and a reopen
/// tells. Only an acknowledgement's outcome carries one: what is refused at submission is an
/// [`crate::Error`] instead.
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

/// A callback given to an acknowledgement its resolver may run user code for (the pipeline's
/// apply thread; never the writer's I/O thread).
pub(crate) type Callback<T> = Box<dyn FnOnce(&Result<T, Failure>) + Send>;

/// What [`Inner::settle`] did with a last word.
pub(crate) enum Settlement<T> {
    /// The acknowledgement already had its last word: this one was ignored (the first one is
    /// the truth).
    AlreadySettled,
    /// This was the last word, and no callback was given for it.
    Settled,
    /// This was the last word, and the callback given for it is handed back for the resolver
    /// to run outside the lock.
    SettledWithCallback(Callback<T>),
}

struct State<T> {
    /// The first word: written (a `Written` entry) or final.
    outcome: Option<Result<T, Failure>>,
    /// The last word: durable, or failed.
    last: Option<Result<T, Failure>>,
    waker: Option<Waker>,
    last_waker: Option<Waker>,
    /// Threads blocked on `done`. A resolution notifies only when there is one: the condition
    /// variable makes a futex call for every notification, waiter or not, and most tickets
    /// (a bulk load's, an event loop's) are never waited on (two calls per `Written` entry).
    waiters: u32,
    /// Handed back by the last word for the resolver to run outside the lock (only the
    /// pipeline's acknowledgements can be given one).
    callback: Option<Callback<T>>,
}

impl<T: fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("outcome", &self.outcome)
            .field("last", &self.last)
            .field("waiters", &self.waiters)
            .field("callback", &self.callback.is_some())
            .finish()
    }
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

#[derive(Debug)]
pub(crate) struct Inner<T> {
    state: Mutex<State<T>>,
    done: Condvar,
    /// A writer's completion channel (never set on the pipeline's acknowledgements).
    notify: Option<Notify>,
    lsn: Lsn,
    /// Made by [`Ack::pending`]: a [`Resolver`] settles it, on a thread that may run user code,
    /// so it takes a callback. The writer's tickets never do.
    takes_callbacks: bool,
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps on `done` once, counted as a waiter (spurious returns allowed).
    fn block<'a>(&'a self, mut st: MutexGuard<'a, State<T>>) -> MutexGuard<'a, State<T>> {
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
        blocked: impl FnMut(&mut State<T>) -> bool,
    ) -> MutexGuard<'_, State<T>> {
        let mut st = self.lock();
        st.waiters += 1;
        let (mut st, _) =
            self.done.wait_timeout_while(st, timeout, blocked).unwrap_or_else(|e| e.into_inner());
        st.waiters -= 1;
        st
    }

    /// The last word was given (a later one is ignored).
    pub(crate) fn has_last_word(&self) -> bool {
        self.lock().last.is_some()
    }
}

impl<T: Clone> Inner<T> {
    /// The first word, when the last one comes later (a `Written` entry's). Ignored (false)
    /// once there is an outcome.
    fn settle_first(&self, value: &T) -> bool {
        let (waker, blocked) = {
            let mut st = self.lock();
            if st.outcome.is_some() {
                return false;
            }
            st.outcome = Some(Ok(value.clone()));
            (st.waker.take(), st.waiters > 0)
        };
        if blocked {
            self.done.notify_all();
        }
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// The last word (durable or failed, or applied), which is also the outcome if there was
    /// none; a second last word is ignored ([`Settlement::AlreadySettled`]: the first one is
    /// the truth). Otherwise hands back the callback given for it, if any, for the caller to run
    /// outside the lock: only a resolver that may run user code calls this with one registered.
    pub(crate) fn settle(&self, outcome: &Result<T, Failure>) -> Settlement<T> {
        let (wakers, blocked, callback) = {
            let mut st = self.lock();
            if st.last.is_some() {
                return Settlement::AlreadySettled;
            }
            st.last = Some(outcome.clone());
            if st.outcome.is_none() {
                st.outcome = Some(outcome.clone());
            }
            ([st.waker.take(), st.last_waker.take()], st.waiters > 0, st.callback.take())
        };
        if blocked {
            self.done.notify_all();
        }
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
        match callback {
            Some(cb) => Settlement::SettledWithCallback(cb),
            None => Settlement::Settled,
        }
    }

    /// Runs `f` with the last word once it is given, on the resolving thread (at once, on this
    /// thread, if it already is). Only for acknowledgements whose resolver may run user code.
    pub(crate) fn on_last_word(&self, f: Callback<T>) {
        let mut st = self.lock();
        match &st.last {
            Some(o) => {
                let o = o.clone();
                drop(st);
                f(&o);
            }
            None => st.callback = Some(f),
        }
    }
}

impl Inner<Lsn> {
    /// True when nobody can ever learn the outcome: every [`Ticket`] for it was dropped (only
    /// the I/O thread's `self` is left; nothing can clone it) and no completion channel waits
    /// for it. Its resolutions are then skipped: a bulk load that drops its tickets would
    /// otherwise pay two locks and a condition check per entry on the I/O thread. (A ticket
    /// cannot hold a callback, which would otherwise observe it too.)
    pub(crate) fn unobserved(self: &Arc<Self>) -> bool {
        self.notify.is_none() && Arc::strong_count(self) == 1
    }

    /// The entry was handed to the OS (a `Written` entry's first word). Ignored once the
    /// ticket has an outcome.
    pub(crate) fn resolve_written(&self, lsn: Lsn) {
        if self.settle_first(&lsn) {
            self.send(Ok(lsn), Stage::Written);
        }
    }

    /// The ticket's last word (durable or failed), which is also its outcome if it had none; a
    /// second last word is ignored (the first one is the truth). Runs no callback: a ticket
    /// cannot be given one, and the I/O thread runs no user code.
    pub(crate) fn resolve(&self, outcome: Result<Lsn, Failure>) {
        match self.settle(&outcome) {
            Settlement::AlreadySettled => {}
            settled => {
                debug_assert!(matches!(settled, Settlement::Settled), "a ticket was given a callback");
                self.send(outcome, Stage::Final);
            }
        }
    }

    fn send(&self, outcome: Result<Lsn, Failure>, stage: Stage) {
        if let Some(n) = &self.notify {
            // A receiver that went away no longer wants completions; the ticket still holds it.
            let _ = n.tx.send(Completion { tag: n.tag, lsn: self.lsn, outcome, stage });
        }
    }
}

/// The acknowledgement of one submission, resolving to `Result<T, Failure>`: an append's
/// ([`Ticket`], `T` = its [`Lsn`]) or a pipeline command's (`T` = the state crate's `Done`).
/// Clones share the outcome.
pub struct Ack<T> {
    pub(crate) inner: Arc<Inner<T>>,
    /// The LSN the entry was given at submission.
    pub lsn: Lsn,
}

/// The writer's acknowledgement of one append (or operation): resolves to the entry's LSN.
pub type Ticket = Ack<Lsn>;

/// The resolving side of an acknowledgement made with [`Ack::pending`]: whoever holds it gives
/// the outcome, once.
pub struct Resolver<T> {
    inner: Arc<Inner<T>>,
}

impl<T> fmt::Debug for Resolver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver").field("lsn", &self.inner.lsn).finish()
    }
}

impl<T: Clone> Resolver<T> {
    /// Gives the acknowledgement its outcome: waiters wake, futures are woken, and the callback
    /// given with [`Ack::on_resolved`], if any, runs here, on this thread. A panic in the
    /// callback is caught and handed back (the outcome stands), for the caller to treat as a
    /// panic in its own user code.
    pub fn resolve(self, outcome: Result<T, Failure>) -> std::thread::Result<()> {
        match self.inner.settle(&outcome) {
            Settlement::SettledWithCallback(cb) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(&outcome)))
            }
            Settlement::Settled | Settlement::AlreadySettled => Ok(()),
        }
    }
}

impl<T> Clone for Ack<T> {
    fn clone(&self) -> Self {
        Ack { inner: self.inner.clone(), lsn: self.lsn }
    }
}

impl<T: fmt::Debug> fmt::Debug for Ack<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack").field("inner", &self.inner).field("lsn", &self.lsn).finish()
    }
}

impl<T: Clone> Ack<T> {
    pub(crate) fn new(lsn: Lsn, notify: Option<Notify>) -> Ack<T> {
        Self::make(lsn, notify, false)
    }

    fn make(lsn: Lsn, notify: Option<Notify>, takes_callbacks: bool) -> Ack<T> {
        let state =
            State { outcome: None, last: None, waker: None, last_waker: None, waiters: 0, callback: None };
        let inner = Inner { state: Mutex::new(state), done: Condvar::new(), notify, lsn, takes_callbacks };
        Ack { inner: Arc::new(inner), lsn }
    }

    /// A new, unresolved acknowledgement for an entry at `lsn`, and the one handle that
    /// resolves it. For a layer above the log that decides outcomes itself (the commit pipeline
    /// resolves a command once it is committed and applied): the acknowledgement goes to the
    /// caller, the resolver stays with the layer. Such an acknowledgement takes callbacks
    /// ([`Ack::on_resolved`]), which run on the thread that calls [`Resolver::resolve`].
    pub fn pending(lsn: Lsn) -> (Ack<T>, Resolver<T>) {
        let ack = Self::make(lsn, None, true);
        let resolver = Resolver { inner: ack.inner.clone() };
        (ack, resolver)
    }

    /// Runs `f` with the outcome once it is known, on the thread that resolves it (at once, on
    /// this thread, if it already is). Only an acknowledgement made with [`Ack::pending`] takes
    /// one: its resolver's thread may run user code. A writer's [`Ticket`] is resolved by the
    /// I/O thread, which never does, and is refused with [`crate::Error::InvalidArgument`]
    /// (use a completion channel, [`Notify`], instead).
    pub fn on_resolved(&self, f: impl FnOnce(&Result<T, Failure>) + Send + 'static) -> crate::Result<()> {
        if !self.inner.takes_callbacks {
            return Err(crate::Error::InvalidArgument(
                "a writer's ticket takes no callback (its I/O thread runs no user code); use a completion channel"
                    .into(),
            ));
        }
        self.inner.on_last_word(Box::new(f));
        Ok(())
    }

    /// The outcome if it is known, without blocking.
    pub fn poll_outcome(&self) -> Option<Result<T, Failure>> {
        self.inner.lock().outcome.clone()
    }

    /// Blocks until the outcome is known.
    pub fn wait(&self) -> Result<T, Failure> {
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
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<T, Failure>> {
        self.inner.block_while(timeout, |s| s.outcome.is_none()).outcome.clone()
    }

    /// The final outcome (durable, or failed) if it is known, without blocking. For a
    /// `Durable` entry (and a pipeline command) it is the outcome; a `Written` one gets it
    /// after its covering sync.
    pub fn poll_durable(&self) -> Option<Result<T, Failure>> {
        self.inner.lock().last.clone()
    }

    /// Blocks until the final outcome (durable, or failed) is known.
    pub fn wait_durable(&self) -> Result<T, Failure> {
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
    pub fn wait_durable_timeout(&self, timeout: Duration) -> Option<Result<T, Failure>> {
        self.inner.block_while(timeout, |s| s.last.is_none()).last.clone()
    }

    /// The final outcome as a future (the acknowledgement itself awaits the first outcome).
    pub fn durable(&self) -> DurableFuture<T> {
        DurableFuture { inner: self.inner.clone() }
    }
}

/// Awaits an acknowledgement's final outcome: durable, or failed (see [`Ack::durable`]).
pub struct DurableFuture<T = Lsn> {
    inner: Arc<Inner<T>>,
}

impl<T: fmt::Debug> fmt::Debug for DurableFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableFuture").field("inner", &self.inner).finish()
    }
}

impl<T: Clone> Future for DurableFuture<T> {
    type Output = Result<T, Failure>;

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

impl<T: Clone> Future for Ack<T> {
    type Output = Result<T, Failure>;

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

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
