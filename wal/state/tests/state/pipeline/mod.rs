//! The commit pipeline (issue 4): pre-hooks → commit → apply → notify, failures as Rejected or
//! Indeterminate (docs/invariants.md I1), fencing without exiting (I8), restart through the same seam.

use std::sync::Arc;
use std::time::Duration;
use wal::storage::Storage;
use wal::{Lsn, Options, Wal};
use wal_sim::workload::kv::Kv;
use wal_sim::MemStorage;
use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};
use wal_state::Applied;

mod cursors;
mod failures;
mod flow;
mod restart;

fn opts() -> PipelineOptions {
    PipelineOptions {
        // No background segment preparation: its syncs would reach the sync observers and the
        // failed-sync faults of the crash tests at timing-dependent points.
        log: Options {
            segment_len_bytes: 64 * 1024,
            create: true,
            prepare_in_background: false,
            ..Options::default()
        },
        checkpoint_every_entries: 16,
        dedupe_window: 1000,
        ..PipelineOptions::default()
    }
}

/// A pipeline over a MemStorage log (snapshots in a storage of their own).
fn start_mem(
    st: &MemStorage,
    snaps: &MemStorage,
    o: PipelineOptions,
    hooks: Hooks<Kv>,
) -> (Pipeline<Kv>, wal_state::pipeline::RestartReport) {
    let (wal, open) = Wal::open_with(Arc::new(st.clone()), o.log.clone()).unwrap();
    let snaps: Arc<dyn Storage> = Arc::new(snaps.clone());
    Pipeline::start(wal, open, snaps, o, hooks, Kv::default).unwrap()
}

fn done(p: &wal::Ack<wal_state::pipeline::Done>) -> (Lsn, Applied) {
    let d = p.wait_timeout(Duration::from_secs(20)).expect("resolved").expect("committed");
    (d.lsn, d.applied)
}

fn put(k: &str, v: &str) -> Vec<u8> {
    format!("put {k} {v}").into_bytes()
}
