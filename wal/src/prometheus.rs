//! The writer thread's figures ([`Stats`]) for Prometheus, through the official Rust client,
//! [`prometheus_client`] (encoding only: no HTTP server comes with it). With the `prometheus`
//! feature.
//!
//! - [`WalCollector`]: registered with a [`Registry`], it reads the figures at each scrape
//!   (from an [`AsyncWal`], any function giving a [`Stats`], e.g. a pipeline's
//!   `io_stats`, or one fixed snapshot). A controller serves the registry its own way.
//! - [`encode`]: one snapshot into a collector's [`DescriptorEncoder`], beside the controller's
//!   own figures.
//! - [`render`]: one snapshot as the Prometheus text format (version 0.0.4, [`CONTENT_TYPE`]).
//!
//! What is exported (counters end in `_total`; a registry's prefix, if any, goes before):
//!
//! | metric | type | from |
//! |---|---|---|
//! | `wal_appended_entries_total` | counter | [`Stats::appends`] |
//! | `wal_appended_payload_bytes_total` | counter | [`Stats::payload_bytes`] |
//! | `wal_batches_total` | counter | [`Stats::batches`] |
//! | `wal_batches_during_fsync_total` | counter | [`Stats::batches_during_sync`] |
//! | `wal_batches_by_waiters_total` | counter | [`Stats::batches_by_waiters`] |
//! | `wal_fsyncs_total` | counter | [`Stats::syncs`] |
//! | `wal_slow_fsyncs_total` | counter | [`Stats::slow_syncs`] |
//! | `wal_queued_entries` | gauge | [`Stats::queue_depth`] |
//! | `wal_fsync_latency_microseconds` | histogram | [`Stats::sync_latency_us`] |
//! | `wal_batch_entries` | histogram | [`Stats::entries_per_batch`] |
//! | `wal_batch_payload_bytes` | histogram | [`Stats::bytes_per_batch`] |
//!
//! A histogram is exported as the handle keeps it: its own power-of-two buckets (`le` is each
//! bucket's inclusive upper bound, `2^(i+1) - 1`, [`Histogram::buckets`]; the last is `+Inf`),
//! their counts, and the exact sum and count. Latency stays in microseconds, the unit the
//! writer measures in, so `_sum` is exactly [`Histogram::sum`] (no conversion to seconds).
//!
//! ```
//! use wal::prometheus::{prometheus_client::registry::Registry, WalCollector};
//! let dir = tempfile::tempdir().unwrap();
//! let opts = wal::Options { segment_len_bytes: 64 * 1024, ..wal::Options::default() };
//! let (log, _) = wal::AsyncWal::open(dir.path(), opts, wal::AsyncOptions::default()).unwrap();
//! let log = std::sync::Arc::new(log);
//! log.append(wal::Epoch(0), b"x".to_vec(), wal::Durability::Durable).unwrap().wait().unwrap();
//!
//! let mut registry = Registry::default();
//! registry.register_collector(Box::new(WalCollector::new(log.clone())));
//! let mut text = String::new();
//! wal::prometheus::prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
//!     .unwrap();
//! assert!(text.contains("\nwal_appended_entries_total 1\n"), "{text}");
//! assert!(text.contains("\nwal_fsync_latency_microseconds_count 1\n"), "{text}");
//! log.close().unwrap();
//! ```

use crate::{AsyncWal, Histogram, Stats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::Arc;

/// The client this module encodes with, re-exported so that a controller registers into the
/// same version's [`Registry`].
pub use prometheus_client;

/// The `Content-Type` of what [`render`] gives: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

type Read = dyn Fn() -> Stats + Send + Sync;

/// A [`Collector`] of the writer thread's figures: each scrape encodes the [`Stats`] it reads
/// then (see the module docs for the names).
pub struct WalCollector {
    read: Box<Read>,
}

impl fmt::Debug for WalCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalCollector").finish_non_exhaustive()
    }
}

impl WalCollector {
    /// Reads `log`'s [`AsyncWal::stats`] at each scrape. The collector holds the handle: the
    /// writer thread stays up while the registry holding the collector does (closing the log
    /// still works; its figures then stay as they were at the close).
    pub fn new(log: Arc<AsyncWal>) -> WalCollector {
        WalCollector::from_fn(move || log.stats())
    }

    /// Calls `read` at each scrape (a pipeline's `io_stats`, or a handle the controller keeps
    /// elsewhere).
    pub fn from_fn(read: impl Fn() -> Stats + Send + Sync + 'static) -> WalCollector {
        WalCollector { read: Box::new(read) }
    }

    /// Always encodes `stats`: one snapshot, read once by the caller.
    pub fn snapshot(stats: Stats) -> WalCollector {
        WalCollector::from_fn(move || stats.clone())
    }
}

impl Collector for WalCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        encode(&(self.read)(), &mut encoder)
    }
}

/// Encodes `stats` into `encoder` (a [`Collector`]'s), under the names of the module docs.
pub fn encode(stats: &Stats, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let counters = [
        ("wal_appended_entries", "Entries the writer wrote, each entry of a group counted", stats.appends),
        (
            "wal_appended_payload_bytes",
            "Payload bytes of those entries (record headers and framing not included)",
            stats.payload_bytes,
        ),
        ("wal_batches", "Batches written (one write of a batch frame and its records each)", stats.batches),
        (
            "wal_batches_during_fsync",
            "Batches written while an fdatasync was in flight (pipelined)",
            stats.batches_during_sync,
        ),
        (
            "wal_batches_by_waiters",
            "Batches written and synced on the thread of a caller waiting for its append",
            stats.batches_by_waiters,
        ),
        ("wal_fsyncs", "fdatasyncs that completed successfully", stats.syncs),
        ("wal_slow_fsyncs", "fdatasyncs slower than the writer's slow_sync option", stats.slow_syncs),
    ];
    for (name, help, v) in counters {
        let c = ConstCounter::new(v);
        c.encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)?;
    }
    let depth = ConstGauge::new(stats.queue_depth as u64);
    depth.encode(encoder.encode_descriptor(
        "wal_queued_entries",
        "Entries queued and not yet resolved, when the figures were read",
        None,
        MetricType::Gauge,
    )?)?;
    let histograms = [
        (
            "wal_fsync_latency_microseconds",
            "How long each completed fdatasync took, in microseconds",
            &stats.sync_latency_us,
        ),
        ("wal_batch_entries", "Entries per batch written", &stats.entries_per_batch),
        ("wal_batch_payload_bytes", "Payload bytes per batch written", &stats.bytes_per_batch),
    ];
    for (name, help, h) in histograms {
        encode_histogram(h, encoder.encode_descriptor(name, help, None, MetricType::Histogram)?)?;
    }
    Ok(())
}

/// `h` with its own buckets: each bound its inclusive upper bound, the last `+Inf`.
fn encode_histogram(
    h: &Histogram,
    mut encoder: prometheus_client::encoding::MetricEncoder<'_>,
) -> fmt::Result {
    let buckets: Vec<(f64, u64)> =
        h.buckets().map(|(bound, c)| (bound.map_or(f64::INFINITY, |b| b as f64), c)).collect();
    encoder.encode_histogram::<NoLabelSet>(h.sum() as f64, h.count(), &buckets, None)
}

/// `stats` as the Prometheus text format, version 0.0.4 ([`CONTENT_TYPE`]).
pub fn render(stats: &Stats) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(WalCollector::snapshot(stats.clone())));
    let mut text = String::new();
    // Writing into a String fails only if an encoder does, and these do not.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `series` (its name and labels, exactly as written) in `text`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// A Stats with known histogram contents renders exactly those buckets (each `le` the
    /// bucket's real inclusive bound, each cumulative count the number of values at or below
    /// it), that sum and count, and every counter.
    #[test]
    fn a_snapshot_renders_its_own_buckets_sum_and_counters() {
        let latencies = [0u64, 1, 3, 700, 1023, 1024, 1500, 90_000, 1 << 45];
        let mut stats = Stats {
            appends: 41,
            payload_bytes: 4100,
            batches: 7,
            batches_during_sync: 2,
            batches_by_waiters: 1,
            syncs: latencies.len() as u64,
            slow_syncs: 1,
            queue_depth: 3,
            ..Stats::default()
        };
        for v in latencies {
            stats.sync_latency_us.record(v);
        }
        for v in [1u64, 1, 5, 34] {
            stats.entries_per_batch.record(v);
            stats.bytes_per_batch.record(v * 100);
        }
        let text = render(&stats);

        let name = "wal_fsync_latency_microseconds";
        assert!(text.contains(&format!("# TYPE {name} histogram\n")), "{text}");
        let mut bounds = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&format!("{name}_bucket{{"))) {
            let le = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()).unwrap();
            let count: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() };
            let at_or_below = latencies.iter().filter(|v| (**v as f64) <= le).count() as u64;
            assert_eq!(count, at_or_below, "{line}");
            bounds.push(le);
        }
        let expected: Vec<f64> = (1..40).map(|i| ((1u64 << i) - 1) as f64).chain([f64::INFINITY]).collect();
        assert_eq!(bounds, expected, "{text}");
        assert_eq!(sample(&text, &format!("{name}_sum")), Some(latencies.iter().sum::<u64>() as f64));
        assert_eq!(sample(&text, &format!("{name}_count")), Some(latencies.len() as f64));
        // The small end, exactly as written.
        assert!(
            text.contains(concat!(
                "wal_fsync_latency_microseconds_bucket{le=\"1\"} 2\n",
                "wal_fsync_latency_microseconds_bucket{le=\"3\"} 3\n",
                "wal_fsync_latency_microseconds_bucket{le=\"7\"} 3\n",
            )),
            "{text}"
        );

        assert_eq!(sample(&text, "wal_batch_entries_bucket{le=\"1\"}"), Some(2.0));
        assert_eq!(sample(&text, "wal_batch_entries_bucket{le=\"7\"}"), Some(3.0));
        assert_eq!(sample(&text, "wal_batch_entries_bucket{le=\"63\"}"), Some(4.0));
        assert_eq!(sample(&text, "wal_batch_entries_sum"), Some(41.0));
        assert_eq!(sample(&text, "wal_batch_payload_bytes_bucket{le=\"127\"}"), Some(2.0));
        assert_eq!(sample(&text, "wal_batch_payload_bytes_bucket{le=\"511\"}"), Some(3.0));
        assert_eq!(sample(&text, "wal_batch_payload_bytes_bucket{le=\"4095\"}"), Some(4.0));
        assert_eq!(sample(&text, "wal_batch_payload_bytes_sum"), Some(4100.0));
        assert_eq!(sample(&text, "wal_batch_payload_bytes_count"), Some(4.0));

        for (series, v) in [
            ("wal_appended_entries_total", 41),
            ("wal_appended_payload_bytes_total", 4100),
            ("wal_batches_total", 7),
            ("wal_batches_during_fsync_total", 2),
            ("wal_batches_by_waiters_total", 1),
            ("wal_fsyncs_total", 9),
            ("wal_slow_fsyncs_total", 1),
            ("wal_queued_entries", 3),
        ] {
            assert_eq!(sample(&text, series), Some(v as f64), "{series}\n{text}");
        }
        assert!(text.contains("# TYPE wal_fsyncs_total counter\n"), "{text}");
    }

    /// A collector reads its source at every scrape, not once.
    #[test]
    fn a_collector_reads_its_source_at_each_scrape() {
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let read = n.clone();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(WalCollector::from_fn(move || Stats {
            syncs: read.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            ..Stats::default()
        })));
        for want in 1..=2 {
            let mut text = String::new();
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
            assert_eq!(sample(&text, "wal_fsyncs_total"), Some(want as f64), "{text}");
        }
    }
}
