//! Counters and histograms of the I/O thread, readable from the handle at any time.
//!
//! Histograms have power-of-two buckets (bucket i holds values in [2^i, 2^(i+1)), bucket 0 also
//! holds 0); a percentile is reported as the upper bound of its bucket, so it is never
//! understated. One lock, taken once per batch by the I/O thread: nothing per entry.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const BUCKETS: usize = 40;

/// A log2 histogram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    total: u64,
    sum: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; BUCKETS], total: 0, sum: 0, max: 0 }
    }
}

impl Histogram {
    /// Adds one value.
    pub fn record(&mut self, v: u64) {
        let i = (64 - v.leading_zeros() as usize).saturating_sub(1).min(BUCKETS - 1);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.total += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The sum of every value recorded (exact, not bucketed).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The largest value recorded (exact), 0 if none.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Every bucket in order, each as (its inclusive upper bound, how many values it holds):
    /// bucket `i` holds the values up to `2^(i+1) - 1` that no earlier bucket holds (the first
    /// also holds 0); the last one's bound is `None`, it holds everything larger (no upper
    /// bound). The counts add up to [`Histogram::count`]. For an exporter (`wal::prometheus`
    /// with the `prometheus` feature): these are the histogram's real bounds.
    pub fn buckets(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        self.counts.iter().enumerate().map(|(i, c)| {
            let bound = if i + 1 < BUCKETS { Some((1u64 << (i + 1)) - 1) } else { None };
            (bound, *c)
        })
    }

    /// The upper bound of the bucket holding the `q` quantile (0 < q <= 1), capped at the max.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return ((1u64 << (i + 1)) - 1).min(self.max);
            }
        }
        self.max
    }
}

/// A snapshot of the I/O thread's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Entries written, each entry of a group counted.
    pub appends: u64,
    /// Payload bytes of those entries (record headers and framing not included).
    pub payload_bytes: u64,
    /// Batches written (one write of a batch frame and its records each).
    pub batches: u64,
    /// Batches written while an fdatasync was in flight (pipelined).
    pub batches_during_sync: u64,
    /// Batches written (and synced) on the thread of a caller of `AsyncWal::append_wait`,
    /// which found the I/O thread idle.
    pub batches_by_waiters: u64,
    /// fdatasyncs that completed successfully.
    pub syncs: u64,
    /// fdatasyncs slower than `AsyncOptions::slow_sync`.
    pub slow_syncs: u64,
    /// Entries per batch written.
    pub entries_per_batch: Histogram,
    /// Payload bytes per batch written (the batch's entries' payloads, as `payload_bytes`).
    pub bytes_per_batch: Histogram,
    /// How long each of those fdatasyncs took, in microseconds.
    pub sync_latency_us: Histogram,
    /// Entries queued and not yet resolved, when the snapshot was taken.
    pub queue_depth: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    stats: Mutex<Stats>,
}

impl Metrics {
    fn lock(&self) -> MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn batch(&self, entries: usize, bytes: usize, during_sync: bool, by_waiter: bool) {
        let mut s = self.lock();
        s.appends += entries as u64;
        s.payload_bytes += bytes as u64;
        s.batches += 1;
        s.batches_during_sync += u64::from(during_sync);
        s.batches_by_waiters += u64::from(by_waiter);
        s.entries_per_batch.record(entries as u64);
        s.bytes_per_batch.record(bytes as u64);
    }

    /// Records one fdatasync; returns whether it was slow.
    pub(crate) fn sync(&self, took: Duration, slow: Duration) -> bool {
        let mut s = self.lock();
        s.syncs += 1;
        s.sync_latency_us.record(took.as_micros().min(u128::from(u64::MAX)) as u64);
        let is_slow = took >= slow;
        if is_slow {
            s.slow_syncs += 1;
        }
        is_slow
    }

    pub(crate) fn snapshot(&self, queue_depth: usize) -> Stats {
        Stats { queue_depth, ..self.lock().clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_bucket_upper_bounds_never_understated() {
        let mut h = Histogram::default();
        for v in 1..=100u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.sum(), 5050);
        assert_eq!(h.max(), 100);
        let p50 = h.quantile(0.5);
        assert!((50..=63).contains(&p50), "{p50}");
        assert_eq!(h.quantile(0.99), 100);
        h.record(0);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    /// Each value lands in the one bucket whose bounds hold it: above the previous bucket's
    /// bound, at most its own (the last bucket unbounded).
    #[test]
    fn buckets_hold_exactly_the_values_their_bounds_say() {
        let values = [0u64, 1, 2, 3, 4, 7, 8, 1000, 1023, 1024, (1 << 39) - 1, 1 << 39, u64::MAX];
        for v in values {
            let mut h = Histogram::default();
            h.record(v);
            let mut below = None;
            let holding: Vec<(Option<u64>, Option<u64>)> = h
                .buckets()
                .filter_map(|(bound, c)| {
                    let lower = below;
                    below = bound;
                    (c == 1).then_some((lower, bound))
                })
                .collect();
            assert_eq!(holding.len(), 1, "{v}: {holding:?}");
            let (lower, upper) = holding[0];
            assert!(lower.is_none_or(|l| v > l) && upper.is_none_or(|u| v <= u), "{v}: {holding:?}");
        }
        assert_eq!(Histogram::default().buckets().count(), BUCKETS);
        assert_eq!(Histogram::default().buckets().last(), Some((None, 0)));
    }
}
