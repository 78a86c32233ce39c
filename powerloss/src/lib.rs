//! Power loss under a real file system (issue 24).
//!
//! A loop device whose backing file lives on a small FUSE file system served by this crate
//! ([`recorder`]) records every block write and every flush of a real ext4 (or xfs) in order,
//! while a workload ([`campaign`], the `powerloss-workload` binary) runs on it and prints its
//! acknowledgements; crash images are rebuilt from that stream at flush points and between them
//! ([`image`]), mounted (the journal replayed) and checked by the workload's own checker. See
//! `powerloss/README.md` for what this models and what it does not.

pub mod campaign;
pub mod device;
pub mod image;
pub mod recorder;
