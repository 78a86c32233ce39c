//! Simulation for testing the write-ahead log, never a product dependency: what the engine's
//! tests, the fault sweep, the fixtures and the fuzz targets run the engine on.
//!
//! - [`MemStorage`] (`mem/`): a storage backend in memory with a durable image beside the live
//!   one, crash images at sector granularity, and injected faults (failed syncs with Linux
//!   semantics, short writes, reordered and deferred completions, failed calls, disk full). With
//!   a seed it is the simulated file system of the fault sweep.
//! - [`Rng`]: the one seeded generator of the simulator and the tests, its sequences pinned
//!   (the `wal-rng` crate's, re-exported).
//! - [`workload`]: the staged history a crash test holds a recovered log to, a small key-value
//!   state machine, and record forgery for tests of hostile bytes.
//! - [`sweep`]: the fault sweep: seeded workloads on the simulator, every case of the fault
//!   matrix checked by one oracle. Its fast subset is `tests/fault_sweep.rs` (in `cargo test`);
//!   the long sweep is the `wal-sweep` binary.
//! - [`fuzz`]: the harness of the fuzz targets (`fuzz/`, nightly), which the engine's
//!   `fuzz_corpus` test runs over the committed corpus on stable.

pub mod fuzz;
pub mod mem;
pub mod sweep;
pub mod workload;

pub use mem::{Boundary, Call, CrashPoint, FailCall, Faults, HeldSync, MemState, MemStorage, SectorFate};
pub use wal_rng::Rng;
