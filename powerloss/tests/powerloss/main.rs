//! The power-loss crate's integration tests, one test binary (one link step for all of them);
//! each module is one former test file. Their workloads run as child processes, and every test
//! names its scratch directory after itself, so the tests share no state.
//!
//! The suite's CI subset alone: `cargo test -p wal-powerloss --test powerloss powerloss::`.

mod harness;
mod powerloss;
mod workloads;
