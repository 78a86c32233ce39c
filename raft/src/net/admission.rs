//! How many connections a node holds before it knows who is at the other end.
//!
//! Every accepted connection costs a descriptor, and before its handshake ends (TLS, or the
//! plaintext loopback check) it is nobody's: anyone who can reach the port can open them and
//! send nothing. Unbounded, such connections would use up the process's descriptors, and a
//! log that cannot open its next segment, or a node that cannot accept its peers, is down. So:
//!
//! - at most [`IN_HANDSHAKE`] connections are in their handshake at once. A connection
//!   accepted beyond that does not wait for a place: the one that has waited longest is
//!   dropped instead ([`Handshakes::admit`]). A genuine peer completes its handshake within a
//!   round trip or two, so to keep it out a flood must open [`IN_HANDSHAKE`] connections
//!   within that time, not merely hold a few open; a flood that holds connections gets each
//!   dropped as newer ones arrive, and none lives past `HANDSHAKE_TIMEOUT` (`net/stream.rs`);
//! - refusals are logged at most once per [`QUIET_FOR`] with a count ([`RefusalLog`]), so a
//!   flood does not become a flood of log lines.
//!
//! Connections that completed their handshake are certificate holders' (or loopback's) and are
//! not limited here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The most connections a node holds in their handshake at once.
pub const IN_HANDSHAKE: usize = 64;

/// How long refusals after a logged one are only counted.
pub const QUIET_FOR: Duration = Duration::from_secs(10);

/// The connections in their handshake, oldest first.
#[derive(Debug)]
pub struct Handshakes {
    cap: usize,
    waiting: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next: AtomicU64,
}

/// One connection's place among [`Handshakes`]; given up when dropped.
#[derive(Debug)]
pub struct Place {
    of: Arc<Handshakes>,
    seq: u64,
    dropped: Arc<Notify>,
}

impl Handshakes {
    /// Room for `cap` connections in their handshake (at least one).
    pub fn new(cap: usize) -> Arc<Handshakes> {
        Arc::new(Handshakes { cap: cap.max(1), waiting: Mutex::default(), next: AtomicU64::new(0) })
    }

    /// A place for a connection just accepted; when all are taken, the oldest is told to give
    /// up its connection ([`Place::dropped`]) and this one takes its room.
    pub fn admit(self: &Arc<Self>) -> Place {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let dropped = Arc::new(Notify::new());
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        while w.len() >= self.cap {
            let Some((_, oldest)) = w.pop_front() else { break };
            // A permit is stored if the oldest is not waiting yet: it sees it when it does.
            oldest.notify_one();
        }
        w.push_back((seq, dropped.clone()));
        Place { of: self.clone(), seq, dropped }
    }

    /// How many connections hold a place now.
    pub fn len(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Place {
    /// Completes when a newer connection took this one's room.
    pub async fn dropped(&self) {
        self.dropped.notified().await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut w = self.of.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = w.iter().position(|(s, _)| *s == self.seq) {
            w.remove(i);
        }
    }
}

/// Refused connections, logged sparingly.
#[derive(Debug, Default)]
pub struct RefusalLog {
    /// When the last line was logged, and how many refusals were only counted since.
    last: Mutex<Option<(Instant, u64)>>,
}

impl RefusalLog {
    /// A refusal at `now` for `why`: the line to log, if one is due.
    pub fn refused(&self, now: Instant, why: &str) -> Option<String> {
        let mut l = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *l {
            Some((at, n)) if now.duration_since(*at) < QUIET_FOR => {
                *n += 1;
                None
            }
            Some((at, n)) => {
                let line = match *n {
                    0 => why.to_string(),
                    n => format!("{why} (and {n} more refused connections in the {QUIET_FOR:?} before)"),
                };
                *at = now;
                *n = 0;
                Some(line)
            }
            None => {
                *l = Some((now, 0));
                Some(why.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_handshake_gives_way_and_a_place_is_freed_when_dropped() {
        let h = Handshakes::new(2);
        let a = h.admit();
        let b = h.admit();
        assert_eq!(h.len(), 2);
        let c = h.admit();
        assert_eq!(h.len(), 2, "the cap holds");
        // `a` was told, even though it was not waiting yet; `b` and `c` were not.
        tokio::time::timeout(Duration::from_secs(1), a.dropped()).await.expect("the oldest is dropped");
        let told = |p: &Place| {
            let f = p.dropped();
            futures_ready(f)
        };
        assert!(!told(&b) && !told(&c));
        drop(b);
        assert_eq!(h.len(), 1, "a dropped place frees its room");
        let _d = h.admit();
        assert!(!told(&c), "room was free: nobody is dropped");
        drop(a);
        assert_eq!(h.len(), 2, "dropping an evicted place changes nothing");
    }

    /// Whether `f` is ready at its first poll.
    fn futures_ready<F: std::future::Future>(f: F) -> bool {
        let mut f = std::pin::pin!(f);
        let waker = std::task::Waker::noop();
        f.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_ready()
    }

    #[test]
    fn refusals_are_logged_once_per_quiet_period_with_a_count() {
        let l = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(l.refused(t0, "a").as_deref(), Some("a"));
        for i in 1..=5 {
            assert_eq!(l.refused(t0 + Duration::from_millis(i), "b"), None);
        }
        let line = l.refused(t0 + QUIET_FOR, "c").unwrap();
        assert!(line.starts_with("c (and 5 more"), "{line}");
        assert_eq!(l.refused(t0 + QUIET_FOR * 2, "d").as_deref(), Some("d"));
    }
}
