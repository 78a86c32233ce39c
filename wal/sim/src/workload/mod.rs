//! What the crash tests and the sweep run and check: the staged history a recovered log is held
//! to (`history`), a small key-value state machine with a digest (`kv`), and records forged by
//! hand with valid checksums (`forge`), for tests of bytes whose meaning alone is wrong.

pub mod forge;
pub mod history;
pub mod kv;
