//! An acknowledgement made with `Ack::pending`: its resolver, its callback, and a writer's
//! ticket refusing one.

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
