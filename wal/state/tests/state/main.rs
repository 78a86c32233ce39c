//! The state layer's integration tests, one test binary: the apply seam, replay comparison and
//! snapshots (`apply_seam`), and the commit pipeline over the simulator and real files
//! (`pipeline`).
//!
//! One module: `cargo test -p wal-state --test state pipeline::`.

mod apply_seam;
mod pipeline;
