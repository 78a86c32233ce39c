#![allow(dead_code)] // each test crate that includes this file uses part of it
//! Files that are not what their names say (issue 22), made at test time where a log keeps a
//! file: shared by the engine's tests (`wal/tests/engine/hostile_files.rs`) and walcheck's
//! (`cli/tests/hostile_files.rs`, which compiles this file with `#[path]`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a directory entry.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(r, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

/// [`mkfifo`] that takes one made meanwhile by another test as made.
pub fn mkfifo_once(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: as in `mkfifo`.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    let e = std::io::Error::last_os_error();
    assert!(r == 0 || e.kind() == std::io::ErrorKind::AlreadyExists, "mkfifo {}: {e}", path.display());
}

/// Removes `name` from `dir` if it is there (a file, a link or an empty directory), then has
/// `make` create something at its path.
pub fn replace(dir: &Path, name: &str, make: impl FnOnce(&Path)) {
    let p = dir.join(name);
    match std::fs::symlink_metadata(&p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(&p).unwrap(),
        Ok(_) => std::fs::remove_file(&p).unwrap(),
        Err(_) => {}
    }
    make(&p);
}

/// Makes one kind of file at a path; the second path is a scratch directory outside the log.
pub type Make = Box<dyn Fn(&Path, &Path)>;

/// Each kind of file that is not a regular one in the log directory, with the words a report
/// says of it: a socket, a directory, symbolic links to devices, to a regular file outside the
/// log, and to nothing. (FIFOs are made with [`mkfifo`].)
pub fn kinds(segment_len: usize) -> Vec<(&'static str, Make)> {
    vec![
        (
            "socket",
            Box::new(|p, _| {
                // The socket file stays after the listener is gone.
                drop(std::os::unix::net::UnixListener::bind(p).unwrap());
            }),
        ),
        ("directory", Box::new(|p, _| std::fs::create_dir(p).unwrap())),
        (
            "symbolic link to a character device",
            Box::new(|p, _| std::os::unix::fs::symlink("/dev/zero", p).unwrap()),
        ),
        (
            "symbolic link to a character device",
            Box::new(|p, _| std::os::unix::fs::symlink("/dev/null", p).unwrap()),
        ),
        (
            "symbolic link to a regular file",
            Box::new(move |p, scratch| {
                let copy = scratch.join("outside.wal");
                std::fs::write(&copy, vec![0u8; segment_len]).unwrap();
                std::os::unix::fs::symlink(copy, p).unwrap()
            }),
        ),
        (
            "dangling symbolic link",
            Box::new(|p, scratch| std::os::unix::fs::symlink(scratch.join("nothing"), p).unwrap()),
        ),
    ]
}
