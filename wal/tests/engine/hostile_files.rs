//! Files that are not what their names say (issue 22): a FIFO, a socket, a directory or a
//! symbolic link where the log keeps a segment, `wal.meta` or `wal.close`. A writer's open
//! reports each as CORRUPT naming the file, without reading it (a FIFO would block the read
//! forever), and never panics. Every open here runs on a thread with a deadline, so a hang fails
//! the test instead of hanging it.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use wal::format::{segment_file_name, CLOSE_FILE_NAME, LOCK_FILE_NAME, META_FILE_NAME};
use wal::{CrcVerdict, Epoch, Error, Options, Wal};

use crate::common::hostile::{kinds, mkfifo, replace};

const SEG: u32 = 64 * 1024;

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

/// A log of a few sealed segments, closed cleanly (so it has `wal.close`); returns the
/// sequence of its last segment holding records.
fn clean_log(dir: &Path) -> u64 {
    let (mut log, _) = Wal::open(dir, opts()).unwrap();
    for i in 0..400u32 {
        log.append(Epoch(0), format!("entry {i} {}", "x".repeat(300)).as_bytes()).unwrap();
        if i % 10 == 9 {
            log.sync().unwrap();
        }
    }
    log.close().unwrap();
    let scan = wal::recovery::scan_log(&wal::storage::FileStorage::new(dir, false).unwrap(), true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok);
    assert!(scan.segments.len() >= 3, "{} segments", scan.segments.len());
    scan.segments.last().unwrap().seq
}

/// `Wal::open` on another thread; its result, or a failed test if it takes longer than 30 s.
fn open_with_deadline(dir: &Path) -> Result<(), Error> {
    let (tx, rx) = mpsc::channel();
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Wal::open(&d, opts()).map(|(log, _)| drop(log)));
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("Wal::open of {} hung (over 30 s)", dir.display()))
}

/// The open is refused as CORRUPT, naming `name` and saying what it is.
fn assert_refused(dir: &Path, name: &str, what: &str) {
    match open_with_deadline(dir) {
        Err(Error::Damaged(d)) => {
            assert_eq!(d.verdict, CrcVerdict::Corrupt, "{d}");
            let kind = d.kind.to_string();
            assert!(kind.contains(name), "{name}: {kind} does not name it");
            assert!(kind.contains(what), "{name}: {kind} does not say it is a {what}");
        }
        other => panic!("{name} ({what}): expected CORRUPT naming it, got {other:?}"),
    }
}

/// Each file the log reads, as a FIFO: refused, never read.
#[test]
fn fifo_named_like_a_log_file_refuses_the_open() {
    let names = |last: u64| {
        vec![
            segment_file_name(1),
            segment_file_name(last),
            segment_file_name(last + 1),
            segment_file_name(last + 5),
            META_FILE_NAME.to_string(),
            CLOSE_FILE_NAME.to_string(),
        ]
    };
    let probe = tempfile::tempdir().unwrap();
    let last = clean_log(probe.path());
    for name in names(last) {
        let t = tempfile::tempdir().unwrap();
        clean_log(t.path());
        replace(t.path(), &name, mkfifo);
        assert_refused(t.path(), &name, "FIFO");
        assert!(
            std::fs::symlink_metadata(t.path().join(&name)).unwrap().file_type().is_fifo(),
            "{name} was replaced"
        );
    }
}

/// A socket, a directory, symbolic links (to a device, to a regular file, dangling) named
/// like a segment: refused, naming what each is.
#[test]
fn sockets_directories_and_symlinks_refuse_the_open() {
    let outside = tempfile::tempdir().unwrap();
    let cases = kinds(SEG as usize);
    for (what, make) in &cases {
        for middle in [true, false] {
            let t = tempfile::tempdir().unwrap();
            let last = clean_log(t.path());
            let name = segment_file_name(if middle { 2 } else { last + 1 });
            replace(t.path(), &name, |p| make(p, outside.path()));
            assert_refused(t.path(), &name, what);
        }
    }
}

/// The lock file as a FIFO: the open fails with an I/O error naming it, at once.
#[test]
fn fifo_lock_file_fails_the_open_without_hanging() {
    let t = tempfile::tempdir().unwrap();
    clean_log(t.path());
    replace(t.path(), LOCK_FILE_NAME, mkfifo);
    match open_with_deadline(t.path()) {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("FIFO"), "{e}"),
        other => panic!("expected an I/O error naming the FIFO, got {other:?}"),
    }
}

/// A zero-byte file named like the next segment (a spare whose preparation a crash cut short:
/// created, never filled) holds nothing: the open takes it, the writer replaces it when it
/// needs the segment, and every entry reads back.
#[test]
fn zero_byte_spare_is_replaced_by_the_writer() {
    let t = tempfile::tempdir().unwrap();
    let last = clean_log(t.path());
    for s in last + 1..last + 3 {
        let _ = std::fs::remove_file(t.path().join(segment_file_name(s)));
    }
    std::fs::File::create(t.path().join(segment_file_name(last + 1))).unwrap();
    let (mut log, _) = Wal::open(t.path(), opts()).unwrap();
    for i in 0..400u32 {
        log.append(Epoch(0), format!("more {i} {}", "y".repeat(300)).as_bytes()).unwrap();
    }
    log.close().unwrap();
    let len = std::fs::metadata(t.path().join(segment_file_name(last + 1))).unwrap().len();
    assert_eq!(len, u64::from(SEG));
    let scan =
        wal::recovery::scan_log(&wal::storage::FileStorage::new(t.path(), false).unwrap(), true).unwrap();
    assert_eq!(scan.verdict, CrcVerdict::Ok);
}
