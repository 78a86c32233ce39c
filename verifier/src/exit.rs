//! The exit codes of a verification beyond the CRC verdicts' own (docs/invariants.md lists
//! every code): a log that could not be read, an interrupted creation, nothing to compare, a
//! usage error. `report` re-exports them, where callers have always found them.

/// Exit code for a log that could not be read (docs/invariants.md), or for a report that could not be
/// written out.
pub const EXIT_IO_ERROR: i32 = 5;

/// Exit code for a directory holding only an interrupted creation: blank segments and no
/// `wal.meta` (FORMAT.md section 9, Create). Nothing was ever acknowledged in it, so it is
/// neither damage nor a disk error.
pub const EXIT_INCOMPLETE_CREATE: i32 = 7;

/// Exit code for `walcheck compare` when there was nothing to compare: a replica holds no
/// entries, or the replicas share no LSN.
pub const EXIT_NOT_COMPARED: i32 = 8;

/// Exit code for an invocation that cannot be carried out: bad arguments, a path that does
/// not exist, a directory holding no log, a `--base` or `--state` file that cannot be used.
pub const EXIT_USAGE: i32 = 64;
