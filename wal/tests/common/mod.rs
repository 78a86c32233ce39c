//! Helpers shared by integration tests.
#![allow(dead_code)]

pub mod dir_bytes;
// The crash tests' history and the key-value state machine live in the simulation crate, which
// the fault sweep shares.
#[allow(unused_imports)] // not every test binary uses both
pub use wal_sim::workload::{history, kv};
