//! Helpers of the engine's tests that other crates' tests compile too, with `#[path]`:
//! `hostile.rs` (walcheck's tests) and `dir_bytes.rs` (the Raft adapter's). The crash tests'
//! history and the key-value state machine live in the simulation crate, which the fault sweep
//! shares: `wal_sim::workload::{history, kv}`.

pub mod dir_bytes;
pub mod hostile;
