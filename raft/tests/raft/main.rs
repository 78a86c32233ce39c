//! The Raft adapter's integration tests, one test binary (one link step for all of them); each
//! module is one former test file, `support` (shared with the `failover` example) what they
//! share. Tests that run a three-node cluster of real `walraft-node` processes keep to their
//! own limits as before (`processes`, `fence` and `failover` run their clusters one at a time).
//!
//! One module: `cargo test -p wal-raft --test raft security::`.

#[path = "../support/mod.rs"]
mod support;

mod campaign;
mod check;
mod client;
mod cluster;
mod crash;
mod divergent;
mod double_kill;
mod failover;
mod fence;
mod large_messages;
mod membership;
mod open_check;
mod operate;
mod oversized_write;
mod processes;
mod prometheus;
mod security;
mod suite;
mod usage;
