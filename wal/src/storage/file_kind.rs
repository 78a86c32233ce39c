//! Files that are not what their names say: the log opens a name it owns (a segment, `wal.meta`,
//! `wal.close`, the lock, a set-aside file) only when it is a regular file in the log
//! directory itself (FORMAT.md section 1). A FIFO would block a read forever, a device could
//! be endless or change what it is read from, a socket or directory cannot be read at all, and
//! a symbolic link puts the bytes in another directory, whose entries the log's directory syncs
//! do not make durable and whose file a purge or a repair would not touch. So:
//!
//! - before opening, the name is looked at without following it (`lstat`): anything else than
//!   a regular file is refused with [`NotRegularFile`], saying what it is, and is never opened
//!   (opening a device can have effects of its own);
//! - the open itself does not follow a symbolic link and does not wait (`O_NOFOLLOW`,
//!   `O_NONBLOCK`: a FIFO swapped in after the look opens at once) and the descriptor is
//!   checked again (`fstat`) before a byte is read; `O_NONBLOCK` is then cleared, since io_uring
//!   would turn it into `EAGAIN` for writes a regular file never refuses.

use std::fs::{File, FileType, OpenOptions};
use std::io;
use std::path::Path;

pub use wal_format::damage::NotRegularFile;

fn type_word(t: FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a file of an unknown kind"
    }
}

fn symlink_word(target: Option<FileType>) -> &'static str {
    let Some(t) = target else { return "a dangling symbolic link" };
    match type_word(t) {
        "a regular file" => "a symbolic link to a regular file",
        "a directory" => "a symbolic link to a directory",
        "a FIFO" => "a symbolic link to a FIFO",
        "a socket" => "a symbolic link to a socket",
        "a block device" => "a symbolic link to a block device",
        "a character device" => "a symbolic link to a character device",
        _ => "a symbolic link to a file of an unknown kind",
    }
}

/// What `path` is when it is not a regular file (its entry, not what a link points to);
/// `None` for a regular file. An error when it cannot be looked at (it does not exist).
pub fn not_regular(path: &Path) -> io::Result<Option<&'static str>> {
    let t = std::fs::symlink_metadata(path)?.file_type();
    if t.is_file() {
        return Ok(None);
    }
    if t.is_symlink() {
        return Ok(Some(symlink_word(std::fs::metadata(path).ok().map(|m| m.file_type()))));
    }
    Ok(Some(type_word(t)))
}

/// [`crate::storage::Reader::not_regular`] for the files of directory `dir`: `None` also
/// when `name` does not exist.
pub fn not_regular_in(dir: &Path, name: &str) -> io::Result<Option<&'static str>> {
    match not_regular(&dir.join(name)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        r => r,
    }
}

/// Opens `name` in `dir` with `opts` only if it is a regular file there (see the module docs);
/// anything else is an error carrying [`NotRegularFile`]. With `create_new` set in `opts` the
/// file must not exist, so the look before is skipped.
pub fn open_regular(dir: &Path, name: &str, opts: &mut OpenOptions, creating: bool) -> io::Result<File> {
    let path = dir.join(name);
    if !creating {
        match not_regular(&path) {
            Ok(Some(what)) => return Err(NotRegularFile::io_error(name, what)),
            Ok(None) => {}
            // Gone: the open says so the usual way (NotFound), or creates it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    no_follow_no_wait(opts);
    let f = match opts.open(&path) {
        Ok(f) => f,
        // Replaced since the look (ELOOP: a symbolic link; ENXIO: a socket, a FIFO without a
        // reader; EISDIR): say what is there now.
        Err(e) => match not_regular(&path) {
            Ok(Some(what)) => return Err(NotRegularFile::io_error(name, what)),
            _ => return Err(e),
        },
    };
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(NotRegularFile::io_error(name, type_word(t)));
    }
    blocking_again(&f)?;
    Ok(f)
}

#[cfg(target_os = "linux")]
fn no_follow_no_wait(opts: &mut OpenOptions) {
    use rustix::fs::OFlags;
    use std::os::unix::fs::OpenOptionsExt;
    opts.custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32);
}

#[cfg(target_os = "linux")]
fn blocking_again(f: &File) -> io::Result<()> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let flags = fcntl_getfl(f)?;
    fcntl_setfl(f, flags.difference(OFlags::NONBLOCK))?;
    Ok(())
}

// Elsewhere only the look before the open and the check after it guard the read.
#[cfg(not(target_os = "linux"))]
fn no_follow_no_wait(_: &mut OpenOptions) {}

#[cfg(not(target_os = "linux"))]
fn blocking_again(_: &File) -> io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn regular_files_open_and_others_are_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        std::fs::create_dir(d.path().join("d")).unwrap();
        std::os::unix::fs::symlink(d.path().join("f"), d.path().join("l")).unwrap();
        std::os::unix::fs::symlink("/dev/null", d.path().join("n")).unwrap();
        std::os::unix::fs::symlink(d.path().join("none"), d.path().join("x")).unwrap();
        let open = |name: &str| open_regular(d.path(), name, OpenOptions::new().read(true), false);
        assert!(open("f").is_ok());
        for (name, what) in [
            ("d", "a directory"),
            ("l", "a symbolic link to a regular file"),
            ("n", "a symbolic link to a character device"),
            ("x", "a dangling symbolic link"),
        ] {
            let e = open(name).unwrap_err();
            assert_eq!(NotRegularFile::of(&e), Some(&NotRegularFile { name: name.into(), what }), "{e}");
        }
        assert_eq!(open("none").unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    /// The second guard alone (the look before skipped, as for a FIFO swapped in after it):
    /// the open does not wait for a writer, and the descriptor's check refuses it.
    #[test]
    fn a_fifo_past_the_look_is_refused_by_the_descriptor_check() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("q");
        rustix::fs::mknodat(rustix::fs::CWD, &p, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0)
            .unwrap();
        let e = open_regular(d.path(), "q", OpenOptions::new().read(true), true).unwrap_err();
        assert_eq!(NotRegularFile::of(&e).map(|n| n.what), Some("a FIFO"), "{e}");
    }

    /// A regular file is handed out blocking again: io_uring would answer EAGAIN for a file
    /// opened with O_NONBLOCK.
    #[test]
    fn a_regular_file_is_handed_out_without_o_nonblock() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        let f = open_regular(d.path(), "f", OpenOptions::new().read(true).write(true), false).unwrap();
        let flags = rustix::fs::fcntl_getfl(&f).unwrap();
        assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK), "{flags:?}");
    }
}
