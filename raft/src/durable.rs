//! A node's small files of its own (the snapshot file `sm/raft-snapshot`, the `FENCED` file),
//! read and replaced one way.
//!
//! - [`replace`] writes a file whole and durably: a temporary name, fdatasync, rename, then a
//!   directory fsync, so after a crash the name holds the old bytes or the new ones, never a
//!   part. A temporary left by a crash before its rename is removed first, whatever it is: a
//!   FIFO there would make the create wait for a reader forever.
//! - [`read`] reads a file whole only when it is a regular file, with the log's own rule for
//!   the names it owns (`wal::storage::open_regular`: looked at without following it, opened
//!   without following a link and without waiting). A FIFO in its place would block the read
//!   forever, and a node would hang at start instead of saying what is wrong.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Replaces `dir/name` with `bytes` durably; returns its path.
pub(crate) fn replace(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let at =
        |what: &str, p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()));
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(at("removing the stale", &tmp, e)),
        _ => {}
    }
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| at("creating", &tmp, e))?;
        f.write_all(bytes).and_then(|()| f.sync_data()).map_err(|e| at("writing", &tmp, e))?;
    }
    fs::rename(&tmp, &path).map_err(|e| at("renaming to", &path, e))?;
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| at("syncing", dir, e))?;
    Ok(path)
}

/// The bytes of `dir/name`; `None` when it does not exist. When it is not a regular file (a
/// directory, a FIFO, a link, ...) it is never read: the error carries a
/// `wal::storage::NotRegularFile` saying what it is.
pub(crate) fn read(dir: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let mut f = match wal::storage::open_regular(dir, name, OpenOptions::new().read(true), false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo").arg(p).status().unwrap().success();
        assert!(ok, "mkfifo {}", p.display());
    }

    #[test]
    fn a_replace_is_whole_and_a_stale_temporary_even_a_fifo_is_replaced() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path(), "f").unwrap(), None);
        replace(d.path(), "f", b"one").unwrap();
        mkfifo(&d.path().join("f.tmp"));
        replace(d.path(), "f", b"two").unwrap();
        assert_eq!(read(d.path(), "f").unwrap().as_deref(), Some(&b"two"[..]));
        assert!(!d.path().join("f.tmp").exists());
    }

    #[test]
    fn a_name_that_is_not_a_regular_file_is_an_error_not_a_hang() {
        let d = tempfile::tempdir().unwrap();
        mkfifo(&d.path().join("fifo"));
        fs::create_dir(d.path().join("dir")).unwrap();
        std::os::unix::fs::symlink("elsewhere", d.path().join("link")).unwrap();
        for (name, what) in [("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a dangling symbolic link")]
        {
            let e = read(d.path(), name).unwrap_err();
            let n = wal::storage::NotRegularFile::of(&e).unwrap_or_else(|| panic!("{e}"));
            assert_eq!((n.name.as_str(), n.what), (name, what));
        }
    }
}
