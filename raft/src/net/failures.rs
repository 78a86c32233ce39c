//! Replication failures are logged, not swallowed. openraft answers every failed RPC by backing
//! off and trying again, forever, without a word; a follower that can never be reached (a
//! message that cannot be sent, a peer down) would otherwise stay behind silently. Each network
//! client logs to stderr the first failure, every change of what fails, a reminder with a count
//! while the same failure repeats, and the recovery.

use std::time::{Duration, Instant};

/// How often a failure that keeps repeating is logged again.
pub const REPEAT_EVERY: Duration = Duration::from_secs(10);

/// What one network client last logged.
#[derive(Debug, Default)]
pub struct FailureLog {
    /// The failure last logged, when, and how many failures since then.
    last: Option<(String, Instant, u64)>,
}

impl FailureLog {
    /// A failure at `now`: the line to log, if any.
    pub fn failed(&mut self, now: Instant, what: &str) -> Option<String> {
        match &mut self.last {
            Some((w, at, n)) if w == what && now.duration_since(*at) < REPEAT_EVERY => {
                *n += 1;
                None
            }
            Some((w, at, n)) if w == what => {
                let line =
                    format!("{what} (failed {} more times since {:?} ago)", *n + 1, now.duration_since(*at));
                *at = now;
                *n = 0;
                Some(line)
            }
            _ => {
                self.last = Some((what.to_string(), now, 0));
                Some(what.to_string())
            }
        }
    }

    /// A success: the line to log when it ends a run of failures.
    pub fn succeeded(&mut self) -> Option<String> {
        self.last.take().map(|(w, _, n)| format!("recovered (after {} failures; the last: {w})", n + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_each_change_a_reminder_and_the_recovery_are_logged() {
        let mut l = FailureLog::default();
        let t0 = Instant::now();
        assert_eq!(l.succeeded(), None, "nothing to recover from");
        assert_eq!(l.failed(t0, "a").as_deref(), Some("a"));
        assert_eq!(l.failed(t0 + Duration::from_secs(1), "a"), None);
        assert_eq!(l.failed(t0 + Duration::from_secs(2), "a"), None);
        let again = l.failed(t0 + REPEAT_EVERY, "a").unwrap();
        assert!(again.starts_with("a (failed 3 more times"), "{again}");
        assert_eq!(l.failed(t0 + REPEAT_EVERY, "b").as_deref(), Some("b"));
        let back = l.succeeded().unwrap();
        assert_eq!(back, "recovered (after 1 failures; the last: b)");
        assert_eq!(l.succeeded(), None);
    }
}
