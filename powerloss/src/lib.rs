//! Power loss under a real file system (issue 24).
//!
//! A loop device whose backing file lives on a small FUSE file system records every block write
//! and every flush of a real ext4 (or xfs) in order; crash images are rebuilt from that stream at
//! flush points and between them, mounted (the journal replayed) and checked by the workloads'
//! own checkers. See `powerloss/README.md`.
