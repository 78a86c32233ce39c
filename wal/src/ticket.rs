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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A resolver's outcome reaches every clone, and the callback runs once, on the resolving
    /// thread, with that outcome.
    #[test]
    fn a_pending_acknowledgement_is_resolved_by_its_resolver_and_runs_its_callback_there() {
        let (ack, resolver) = Ack::<u32>::pending(Lsn(3));
        let clone = ack.clone();
        let ran = Arc::new(AtomicUsize::new(0));
        let r2 = ran.clone();
        let here = std::thread::current().id();
        ack.on_resolved(move |o| {
            assert_eq!(o, &Ok(9));
            assert_ne!(std::thread::current().id(), here, "the callback ran on the registering thread");
            r2.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        assert_eq!(ack.poll_outcome(), None);
        std::thread::spawn(move || resolver.resolve(Ok(9)).unwrap()).join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(clone.wait(), Ok(9));
        assert_eq!(clone.wait_durable(), Ok(9));
        assert_eq!(ack.lsn, Lsn(3));
    }

    /// A callback given after the outcome runs at once, on the caller's thread.
    #[test]
    fn a_callback_given_after_the_outcome_runs_at_once() {
        let (ack, resolver) = Ack::<u32>::pending(Lsn(1));
        resolver.resolve(Err(Failure::Rejected("no".into()))).unwrap();
        let seen = Arc::new(Mutex::new(None));
        let s2 = seen.clone();
        ack.on_resolved(move |o| *s2.lock().unwrap() = Some(o.clone())).unwrap();
        assert_eq!(*seen.lock().unwrap(), Some(Err(Failure::Rejected("no".into()))));
    }

    /// A panic in the callback is handed back to the resolver; the outcome stands.
    #[test]
    fn a_panicking_callback_is_handed_back_and_the_outcome_stands() {
        let (ack, resolver) = Ack::<u32>::pending(Lsn(1));
        ack.on_resolved(|_| panic!("callback boom")).unwrap();
        let panic = resolver.resolve(Ok(5)).expect_err("the panic is handed back");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"callback boom"));
        assert_eq!(ack.wait(), Ok(5));
    }

    /// The writer's tickets are resolved by the I/O thread, which runs no user code: they
    /// refuse a callback, and nothing is registered.
    #[test]
    fn a_writer_ticket_refuses_a_callback() {
        let t = Ticket::new(Lsn(1), None);
        let e = t.on_resolved(|_| unreachable!("a ticket ran a callback")).unwrap_err();
        assert!(matches!(e, crate::Error::InvalidArgument(_)), "{e}");
        t.inner.resolve(Ok(Lsn(1)));
        assert_eq!(t.wait(), Ok(Lsn(1)));
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

    /// A callback given while the last word lands runs exactly once: on the resolver's thread
    /// (handed back by `settle`) when it was registered first, at once on the registering
    /// thread otherwise.
    #[test]
    fn a_callback_runs_once_whoever_comes_first() {
        use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        loom::model(|| {
            let a: Ack<u32> = Ack::new(Lsn(2), None);
            let runs = Arc::new(AtomicUsize::new(0));
            let inner = a.inner.clone();
            let h = loom::thread::spawn(move || {
                let outcome = Ok(2);
                if let Settlement::SettledWithCallback(cb) = inner.settle(&outcome) {
                    cb(&outcome);
                }
            });
            let r = runs.clone();
            a.inner.on_last_word(Box::new(move |o| {
                assert_eq!(o, &Ok(2));
                r.fetch_add(1, SeqCst);
            }));
            h.join().unwrap();
            assert_eq!(runs.load(SeqCst), 1);
            assert_eq!(a.wait(), Ok(2));
        });
    }
}
