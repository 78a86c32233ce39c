//! The engine's integration tests, one test binary (one link step for all of them); each module
//! is one former test file. `tests/disk_full.rs` and `tests/fuzz_corpus.rs` stay binaries of
//! their own: the first mounts file systems with child processes, which inherit every descriptor
//! of the process between fork and exec (another test's log `LOCK` among them); the second
//! installs a global allocator that watches every allocation.
//!
//! One module: `cargo test -p wal --test engine io_thread::`.

#[path = "../common/mod.rs"]
mod common;

mod backends;
mod basic;
mod close_state;
mod corruption;
mod crash;
mod hostile_files;
mod io_thread;
mod model;
mod module_cycles;
mod open_check;
mod page_cache;
mod pipelining;
mod recovery_modes;
mod recycle;
mod root_surface;
mod seam;
mod segment_fill;
mod torn_footer;
mod torn_only;
mod written_end;
