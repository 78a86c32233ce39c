//! A node that found its own state different from a majority's fences itself: it stops voting
//! and serving, says so once on stderr and in its metrics, and leaves a `FENCED` file in its
//! data directory so that it does not start again until an operator has looked
//! (docs/replication-safety.md, "Replicas compare digests").
//!
//! The file is written durably (`crate::durable::replace`: a temporary name, fdatasync,
//! rename, directory fsync), so a crash right after the fence cannot bring the node back
//! unfenced. Its first line is the reason;
//! the rest says what to do. [`read`] is what `node::start` checks first.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The fence file's name in a node's data directory.
pub const FENCE_FILE: &str = "FENCED";

/// What an operator does about a fenced node (in the file and in the start refusal).
pub const RECOVERY: &str = "this replica's state differs from the one a majority of the voters claimed at the same \
index. Restore its data directory from a healthy replica (stop it, replace DIR/log and DIR/sm with a healthy \
replica's, or empty DIR so that it catches up from the leader), then delete DIR/FENCED: deleting the file is what \
clears the fence. If the divergence was only in memory (the log is intact), deleting the file is enough: the \
restart replays the log, and the start-up check refuses (DIVERGENT) if the replayed state still differs from a \
majority's claim";

/// A node's fence: once set it stays set for the life of the process (and of the file).
#[derive(Clone, Debug, Default)]
pub struct Fence {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The data directory the file goes into (`None`: in memory only).
    dir: Option<PathBuf>,
    why: OnceLock<String>,
}

impl Fence {
    /// The fence of the node whose data directory is `dir`.
    pub fn new(dir: &Path) -> Fence {
        Fence { inner: Arc::new(Inner { dir: Some(dir.to_path_buf()), why: OnceLock::new() }) }
    }

    /// Why this node fenced itself, once it has.
    pub fn reason(&self) -> Option<&str> {
        self.inner.why.get().map(String::as_str)
    }

    /// Fences the node for `why` (a one-line reason): persists the file (a failure to is
    /// reported, and the node is fenced in memory all the same), prints one line to stderr.
    /// A second call keeps the first reason.
    pub fn set(&self, node: u64, why: String) {
        if self.inner.why.set(why.clone()).is_err() {
            return;
        }
        let file = match &self.inner.dir {
            Some(d) => match persist(d, &why) {
                Ok(p) => format!("; {} written", p.display()),
                Err(e) => format!("; the fence file could NOT be written ({e}): do not restart this node before restoring it"),
            },
            None => String::new(),
        };
        tracing::error!(node, "walraft-node {node}: FENCED, no longer voting or serving: {why}{file}");
    }
}

fn persist(dir: &Path, why: &str) -> io::Result<PathBuf> {
    crate::durable::replace(dir, FENCE_FILE, format!("{why}\n\nWhat to do: {RECOVERY}.\n").as_bytes())
}

/// The reason in `dir`'s fence file (its first line), if the file exists. A `FENCED` that is
/// not a regular file (a directory, a FIFO, a link) is not read, yet it fences all the same:
/// the reason then says what it is (what an operator removes once the replica is known good).
pub fn read(dir: &Path) -> io::Result<Option<String>> {
    match crate::durable::read(dir, FENCE_FILE) {
        Ok(text) => Ok(text.map(|t| String::from_utf8_lossy(&t).lines().next().unwrap_or("").to_string())),
        Err(e) => match wal::storage::NotRegularFile::of(&e) {
            Some(n) => Ok(Some(format!("{}/{n}", dir.display()))),
            None => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_fence_is_persisted_once_with_its_first_reason() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        let f = Fence::new(d.path());
        assert_eq!(f.reason(), None);
        f.set(2, "node 2 diverged at index 64".into());
        f.set(2, "a later reason".into());
        assert_eq!(f.reason(), Some("node 2 diverged at index 64"));
        assert_eq!(read(d.path()).unwrap().as_deref(), Some("node 2 diverged at index 64"));
        let text = fs::read_to_string(d.path().join(FENCE_FILE)).unwrap();
        assert!(text.contains("delete DIR/FENCED"), "{text}");
        assert!(!d.path().join(format!("{FENCE_FILE}.tmp")).exists());
    }

    /// A second divergence after the first fence was cleared and the node restarted (a new
    /// `Fence`): the file holds the new reason whole, and a temporary a crash left is gone.
    #[test]
    fn a_later_fence_replaces_the_file_whole() {
        let d = tempfile::tempdir().unwrap();
        Fence::new(d.path()).set(2, "node 2 diverged at index 64".into());
        fs::write(d.path().join(format!("{FENCE_FILE}.tmp")), "a crash's leftover").unwrap();
        Fence::new(d.path()).set(2, "node 2 diverged at index 128".into());
        assert_eq!(read(d.path()).unwrap().as_deref(), Some("node 2 diverged at index 128"));
        let text = fs::read_to_string(d.path().join(FENCE_FILE)).unwrap();
        assert_eq!(text.matches("What to do").count(), 1, "{text}");
        assert!(!d.path().join(format!("{FENCE_FILE}.tmp")).exists());
    }
}
