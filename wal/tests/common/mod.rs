//! Helpers shared by integration tests.
#![allow(dead_code)]

pub mod history;
pub mod kv;
