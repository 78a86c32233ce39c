//! The acknowledgement's models under loom (`RUSTFLAGS="--cfg loom" cargo test -p wal --lib
//! --release ticket`): every interleaving of a resolution with waiters, futures and callbacks.

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
