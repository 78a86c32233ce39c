//! The catalog's integration tests, one test binary (one link step for all of them); each module
//! is one former test file, `common` their shared harness.
//!
//! One module: `cargo test -p catalog --test catalog rules::`.

mod common;

mod diff;
mod pipeline_races;
mod props;
mod rules;
mod wal_e2e;
