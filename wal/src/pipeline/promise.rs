//! The pipeline's ticket: resolves once, on the apply thread, with the apply outcome. It can be
//! waited on, polled, awaited as a `std::future::Future` (no runtime needed), or given a
//! callback that runs on the apply thread right after the outcome is known.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A callback for a resolved ticket. It runs on the apply thread: keep it short; a panic in it
/// fences the pipeline like a panic in any hook.
pub type Callback<T> = Box<dyn FnOnce(&T) + Send>;

struct State<T> {
    outcome: Option<T>,
    waker: Option<Waker>,
    callback: Option<Callback<T>>,
}

pub(crate) struct Shared<T> {
    state: Mutex<State<T>>,
    done: Condvar,
}

impl<T: Clone> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the outcome (the first one wins) and returns the callback to run, if any: the
    /// caller runs it outside the lock.
    pub(crate) fn resolve(&self, outcome: T) -> Option<(Callback<T>, T)> {
        let (waker, cb) = {
            let mut st = self.lock();
            if st.outcome.is_some() {
                return None;
            }
            st.outcome = Some(outcome.clone());
            (st.waker.take(), st.callback.take())
        };
        self.done.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
        cb.map(|cb| (cb, outcome))
    }
}

/// The outcome of one submission, once it is known.
pub struct Promise<T> {
    pub(crate) shared: Arc<Shared<T>>,
}

impl<T> Clone for Promise<T> {
    fn clone(&self) -> Self {
        Promise { shared: self.shared.clone() }
    }
}

impl<T> std::fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Promise")
    }
}

impl<T: Clone> Promise<T> {
    pub(crate) fn new() -> Self {
        Promise {
            shared: Arc::new(Shared {
                state: Mutex::new(State { outcome: None, waker: None, callback: None }),
                done: Condvar::new(),
            }),
        }
    }

    /// The outcome if known, without blocking.
    pub fn poll_outcome(&self) -> Option<T> {
        self.shared.lock().outcome.clone()
    }

    /// Blocks until the outcome is known.
    pub fn wait(&self) -> T {
        let mut st = self.shared.lock();
        loop {
            if let Some(o) = &st.outcome {
                return o.clone();
            }
            st = self.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Blocks at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<T> {
        let st = self.shared.lock();
        let (st, _) = self
            .shared
            .done
            .wait_timeout_while(st, timeout, |s| s.outcome.is_none())
            .unwrap_or_else(|e| e.into_inner());
        st.outcome.clone()
    }

    /// Runs `f` with the outcome on the apply thread when it is known (at once, on this
    /// thread, if it already is).
    pub fn on_done(&self, f: impl FnOnce(&T) + Send + 'static) {
        let mut st = self.shared.lock();
        match &st.outcome {
            Some(o) => {
                let o = o.clone();
                drop(st);
                f(&o);
            }
            None => st.callback = Some(Box::new(f)),
        }
    }
}

impl<T: Clone> Future for Promise<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut st = self.shared.lock();
        match &st.outcome {
            Some(o) => Poll::Ready(o.clone()),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
