//! Tickets: the asynchronous acknowledgement of one append.
//!
//! A ticket resolves exactly once, on the I/O thread, to the entry's LSN (written or durable, as
//! asked) or to a failure. It can be waited on, polled, or awaited as a `std::future::Future`
//! without any runtime. The I/O thread only stores the outcome, notifies a condition variable
//! and wakes a waker: it never runs user code.

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
use std::time::Duration;

/// Why an append did not become durable. `Indeterminate` entries may or may not be in the log
/// (DESIGN.md I1): the log decides, and a reopen tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Logged or possibly logged: a failed write or sync, a fenced log, a close.
    Indeterminate(String),
    /// Never written and never will be (the disk was full when its segment was needed): the
    /// entry consumed nothing and its LSN is given to a later entry.
    Rejected(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Indeterminate(w) => {
                write!(f, "indeterminate (the log decides; ask for its fate later): {w}")
            }
            Failure::Rejected(w) => write!(f, "rejected (never logged): {w}"),
        }
    }
}

impl std::error::Error for Failure {}

#[derive(Debug, Default)]
struct State {
    outcome: Option<Result<Lsn, Failure>>,
    waker: Option<Waker>,
}

/// One resolved ticket, as a completion channel delivers it (see [`Notify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The caller's tag given with the append.
    pub tag: u64,
    /// The LSN the entry was given at submission (the first one of a group).
    pub lsn: Lsn,
    pub outcome: Result<Lsn, Failure>,
}

/// Where to deliver a ticket's outcome besides the ticket itself: an event loop collects many
/// tickets through one channel. The I/O thread only sends on the (unbounded) channel; it never
/// runs caller code.
#[derive(Clone, Debug)]
pub struct Notify {
    pub tx: crossbeam_channel::Sender<Completion>,
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

    /// Resolves the ticket; a second resolution is ignored (the first one is the truth).
    pub(crate) fn resolve(&self, outcome: Result<Lsn, Failure>) {
        let waker = {
            let mut st = self.lock();
            if st.outcome.is_some() {
                return;
            }
            st.outcome = Some(outcome.clone());
            st.waker.take()
        };
        self.done.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
        if let Some(n) = &self.notify {
            // A receiver that went away no longer wants completions; the ticket still holds it.
            let _ = n.tx.send(Completion { tag: n.tag, lsn: self.lsn, outcome });
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
            st = self.inner.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Blocks at most `timeout`; `None` if the outcome is still unknown.
    #[cfg(not(loom))]
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Lsn, Failure>> {
        let st = self.inner.lock();
        let (st, _) = self
            .inner
            .done
            .wait_timeout_while(st, timeout, |s| s.outcome.is_none())
            .unwrap_or_else(|e| e.into_inner());
        st.outcome.clone()
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
