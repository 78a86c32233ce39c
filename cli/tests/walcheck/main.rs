//! walcheck's integration tests, one test binary (one link step for all of them); each module is
//! one former test file, `common` what they share. Two stay binaries of their own, since each
//! re-executes its own test binary as a child, selecting the child's test with `--exact` by
//! name: `tests/kill9.rs` (the child is a writer killed with SIGKILL at timed moments) and
//! `tests/hostile_files.rs` (its memory bounds read a walcheck child's peak RSS, which starts
//! from its parent's at the fork: other tests' memory in one process would count too).
//!
//! One module: `cargo test -p walcheck --test walcheck docs::`.

mod common;

mod cli;
mod compare_purged;
mod docs;
mod fixtures;
mod markdown;
mod output;
mod repair;
mod state;
mod verdicts;
