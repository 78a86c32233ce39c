//! Helpers shared by integration tests.
#![allow(dead_code)]

pub mod dir_bytes;
pub mod history;
pub mod kv;
