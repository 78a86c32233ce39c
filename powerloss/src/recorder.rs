//! The block-write recorder: a one-file FUSE file system whose file backs a loop device.
//!
//! The kernel here has no device-mapper (no dm-log-writes), no nbd and no ublk, but a loop device
//! reads and writes its backing file through the VFS, so when that file lives on a FUSE file system
//! served by this process, every block write of the file system on the loop device reaches
//! [`Recorder`] as a FUSE `WRITE` at the block's byte offset, and every cache flush as an `FSYNC`:
//! the loop driver turns `REQ_PREFLUSH` into `vfs_fsync` of its backing file, and it advertises no
//! FUA, so the block layer turns a FUA write into a write followed by a flush. Discards and
//! write-zeroes arrive as `FALLOCATE` (punch hole or zero range); both read back as zeros.
//!
//! FUSE writes are write-through (no `writeback_cache` is negotiated), so a write is in the log
//! before the loop driver completes the block request, and a flush is logged before the file system
//! above sees it complete. The session serves one request at a time, so a write that completed
//! before a flush was issued is logged before that flush (requests in flight together are logged
//! as they arrived, which need not be as they were issued). A write logged before a flush may have been in flight
//! when the flush was issued; treating it as durable at that flush is one outcome a real disk may
//! also give, so every image built from a prefix of the log is a state a power loss can leave.
//!
//! Acknowledgements enter the same log as [`Event::Mark`]s: a workload writes each line to the
//! second file, [`MARKS_NAME`], or the harness logs a line the workload printed. So
//! "acknowledged before this flush" is a position in one sequence.

use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow,
};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// The name of the recorded file inside the FUSE mount.
pub const DISK_NAME: &str = "disk";

/// The file a workload writes its acknowledgements to, one line per `write`: each line becomes an
/// [`Event::Mark`] in sequence with the block events, without a round trip through the harness.
pub const MARKS_NAME: &str = "marks";

const ROOT: u64 = 1;
const DISK: u64 = 2;
const MARKS: u64 = 3;
const TTL: Duration = Duration::from_secs(3600);

/// One thing the recorder saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `len` bytes written at byte `offset` of the disk; the bytes are `data[at..at + len]` of
    /// the [`Recording`].
    Write { offset: u64, len: u32, at: u64 },
    /// `len` bytes from `offset` now read as zeros (a discard or write-zeroes).
    Zero { offset: u64, len: u64 },
    /// A cache flush: every write logged before it is durable.
    Flush,
    /// A line the harness logged (an acknowledgement the workload printed).
    Mark(String),
}

/// The events and the bytes of their writes.
#[derive(Debug, Default, Clone)]
pub struct Recording {
    pub events: Vec<Event>,
    pub data: Vec<u8>,
}

impl Recording {
    /// The bytes of a [`Event::Write`].
    pub fn bytes(&self, at: u64, len: u32) -> &[u8] {
        &self.data[at as usize..at as usize + len as usize]
    }

    /// Positions (indices into `events`) of every flush.
    pub fn flushes(&self) -> Vec<usize> {
        self.events.iter().enumerate().filter(|(_, e)| **e == Event::Flush).map(|(i, _)| i).collect()
    }

    /// The marks logged before position `end`.
    pub fn marks_before(&self, end: usize) -> Vec<&str> {
        self.events[..end]
            .iter()
            .filter_map(|e| match e {
                Event::Mark(m) => Some(m.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// The shared log: the FUSE thread appends block events, the harness appends marks.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Recording>>);

impl Log {
    fn lock(&self) -> MutexGuard<'_, Recording> {
        // A panic in the FUSE thread while holding the lock leaves a log that is still
        // well-formed (events are pushed whole), so the poison carries no meaning here.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs a mark at the current position.
    pub fn mark(&self, text: &str) {
        self.lock().events.push(Event::Mark(text.to_string()));
    }

    /// A copy of everything logged so far.
    pub fn snapshot(&self) -> Recording {
        self.lock().clone()
    }

    /// How many events are logged.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// Whether nothing is logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The FUSE file system: a root directory holding one file, [`DISK_NAME`], whose contents are
/// `backing` (a file on tmpfs) and whose writes, zeroings and flushes are logged.
struct DiskFs {
    backing: File,
    size: u64,
    log: Log,
    /// Set after the first failed write to the backing file: the image would be wrong, so the
    /// harness fails the run rather than check images built from it.
    failed: Arc<Mutex<Option<String>>>,
    /// The end of a mark line whose `\n` has not come yet.
    partial: Vec<u8>,
}

impl DiskFs {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            MARKS => (FileType::RegularFile, 0o666, 0, 1),
            _ => (FileType::RegularFile, 0o600, self.size, 1),
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn fail(&self, what: String) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(what);
    }
}

impl Filesystem for DiskFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT && name == DISK_NAME {
            reply.entry(&TTL, &self.attr(DISK), 0);
        } else if parent == ROOT && name == MARKS_NAME {
            reply.entry(&Duration::ZERO, &self.attr(MARKS), 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            ROOT | DISK | MARKS => reply.attr(&TTL, &self.attr(ino)),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        // The disk has a fixed size: a resize would be a change no block device makes.
        match size {
            Some(s) if ino == DISK && s != self.size => reply.error(libc::EPERM),
            _ => reply.attr(&TTL, &self.attr(ino)),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyData,
    ) {
        if ino != DISK || offset < 0 {
            return reply.error(libc::EINVAL);
        }
        let offset = offset as u64;
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        let mut buf = vec![0u8; len];
        match self.backing.read_exact_at(&mut buf, offset) {
            Ok(()) => reply.data(&buf),
            Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyWrite,
    ) {
        if ino == MARKS {
            let mut log = self.log.lock();
            self.partial.extend_from_slice(data);
            while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line[..end]).trim().to_string();
                if !text.is_empty() {
                    log.events.push(Event::Mark(text));
                }
            }
            return reply.written(data.len() as u32);
        }
        if ino != DISK || offset < 0 || offset as u64 + data.len() as u64 > self.size {
            return reply.error(libc::ENOSPC);
        }
        if let Err(e) = self.backing.write_all_at(data, offset as u64) {
            self.fail(format!("writing {} bytes at {offset} of the backing file: {e}", data.len()));
            return reply.error(libc::EIO);
        }
        let mut log = self.log.lock();
        let at = log.data.len() as u64;
        log.data.extend_from_slice(data);
        log.events.push(Event::Write { offset: offset as u64, len: data.len() as u32, at });
        reply.written(data.len() as u32);
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        // The backing file is on tmpfs, which loses nothing the images need: the log is what
        // the images are built from.
        self.log.lock().events.push(Event::Flush);
        reply.ok();
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        // close(2), not a cache flush.
        reply.ok();
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let zeroes = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        if ino != DISK || offset < 0 || length < 0 || !zeroes {
            // Plain allocation has no meaning on a device of fixed size.
            return reply.error(libc::EOPNOTSUPP);
        }
        // SAFETY: fallocate on an open descriptor with plain integer arguments.
        let r = unsafe { libc::fallocate(self.backing.as_raw_fd(), mode, offset, length) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return reply.error(e.raw_os_error().unwrap_or(libc::EIO));
        }
        self.log.lock().events.push(Event::Zero { offset: offset as u64, len: length as u64 });
        reply.ok();
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        if ino != ROOT {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (DISK, FileType::RegularFile, DISK_NAME),
            (MARKS, FileType::RegularFile, MARKS_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as i64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match ino {
            // Direct I/O for the marks: every write reaches the recorder as written, never
            // merged or cached.
            MARKS => reply.opened(0, fuser::consts::FOPEN_DIRECT_IO),
            DISK => reply.opened(0, 0),
            _ => reply.error(libc::EISDIR),
        }
    }
}

/// A mounted recorder: the FUSE session serving `mountpoint/disk`.
///
/// Dropping it unmounts the FUSE file system (the loop device over it must be detached first).
pub struct Recorder {
    mountpoint: PathBuf,
    log: Log,
    failed: Arc<Mutex<Option<String>>>,
    session: Option<fuser::BackgroundSession>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("mountpoint", &self.mountpoint).finish_non_exhaustive()
    }
}

impl Recorder {
    /// Mounts the recorder at `mountpoint` (an empty directory) over `backing`, whose current
    /// contents are the disk before the first recorded event.
    pub fn mount(backing: &Path, mountpoint: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(backing)?;
        let size = file.metadata()?.len();
        let log = Log::default();
        let failed = Arc::new(Mutex::new(None));
        let fs =
            DiskFs { backing: file, size, log: log.clone(), failed: failed.clone(), partial: Vec::new() };
        let options = [MountOption::FSName("walpowerloss".into()), MountOption::RW];
        let session = fuser::spawn_mount2(fs, mountpoint, &options)?;
        Ok(Recorder { mountpoint: mountpoint.to_path_buf(), log, failed, session: Some(session) })
    }

    /// The recorded file, to put a loop device over.
    pub fn disk(&self) -> PathBuf {
        self.mountpoint.join(DISK_NAME)
    }

    /// The file whose lines become marks.
    pub fn marks(&self) -> PathBuf {
        self.mountpoint.join(MARKS_NAME)
    }

    /// The shared log (for marks and snapshots).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The first failure to write the backing file, if any.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Unmounts and returns everything logged.
    pub fn finish(mut self) -> Recording {
        self.unmount();
        self.log.snapshot()
    }

    /// Ends the session (fuser unmounts, but only logs a failure); if the mount is still
    /// there, detaches it lazily.
    fn unmount(&mut self) {
        if let Some(session) = self.session.take() {
            drop(session);
            crate::device::unmount_lazily(&self.mountpoint);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.unmount();
    }
}
