//! Loop devices, file systems and mounts, each undone by a guard's `Drop`, and the checks that
//! decide whether this machine can run the suite at all.
//!
//! Everything goes through the system's own tools (`losetup`, `mkfs.*`, `mount`, `umount`): the
//! point of the suite is the real kernel path, and those tools are what an operator uses.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A file system the suite can build images of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fs {
    Ext4,
    Xfs,
}

impl Fs {
    pub fn name(self) -> &'static str {
        match self {
            Fs::Ext4 => "ext4",
            Fs::Xfs => "xfs",
        }
    }

    pub fn parse(s: &str) -> Option<Fs> {
        match s {
            "ext4" => Some(Fs::Ext4),
            "xfs" => Some(Fs::Xfs),
            _ => None,
        }
    }

    /// What a torn write keeps or loses whole in this file system's images. ext4: 512 B sectors,
    /// the harshest drive. xfs: 4 KiB, a drive with 4 KiB physical sectors (512e or 4Kn): at
    /// 512 B, a metadata block torn while xfs's own log recovery wrote it in place fails its CRC
    /// in the next recovery, which then refuses to mount (seen in resumed runs) and only
    /// `xfs_repair -L`, discarding the log, gets past it.
    pub fn torn_sector(self) -> u64 {
        match self {
            Fs::Ext4 => 512,
            Fs::Xfs => 4096,
        }
    }

    fn mkfs(self) -> &'static str {
        match self {
            Fs::Ext4 => "mkfs.ext4",
            Fs::Xfs => "mkfs.xfs",
        }
    }
}

impl fmt::Display for Fs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the suite cannot run here, or `None` when it can: root, `/dev/fuse`, the loop control
/// device, the tools, and the file system's kernel support.
pub fn unavailable(fs: Fs) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (loop devices and mounts need it)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control".into());
    }
    for tool in ["losetup", "mount", "umount", fs.mkfs()] {
        if !on_path(tool) {
            return Some(format!("{tool} is not installed"));
        }
    }
    let known = || {
        std::fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .split_whitespace()
            .any(|w| w == fs.name())
    };
    if !known() {
        // A module not loaded yet: load it, then look again.
        let _ = Command::new("modprobe").arg(fs.name()).output();
        if !known() {
            return Some(format!(
                "the kernel has no {fs} (not in /proc/filesystems, and modprobe did not load it)"
            ));
        }
    }
    None
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin"].map(PathBuf::from))
        .any(|d| d.join(tool).is_file())
}

/// Runs a tool; its stderr in the error when it fails.
pub fn run(cmd: &mut Command) -> io::Result<String> {
    let out = cmd.output().map_err(|e| io::Error::new(e.kind(), format!("{cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd:?} exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A sparse file of `bytes` with a fresh file system made by its `mkfs` with default options.
///
/// ext4 is told to initialise its inode tables and journal now (`lazy_itable_init=0,
/// lazy_journal_init=0`: when to zero them, not what the file system is), so that no background
/// zeroing thread writes during the recording.
pub fn make_fs(fs: Fs, path: &Path, bytes: u64) -> io::Result<()> {
    File::create(path)?.set_len(bytes)?;
    let mut cmd = Command::new(fs.mkfs());
    match fs {
        Fs::Ext4 => cmd.args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]),
        Fs::Xfs => cmd.args(["-q", "-f"]),
    };
    run(cmd.arg(path)).map(|_| ())
}

/// Repairs the file system on `dev` as an operator would after it failed to mount: `e2fsck -fy`
/// for ext4 (which falls back to a backup superblock when the primary one is torn, and replays
/// the journal); says which tool ran. xfs is not repaired: `xfs_repair` would have to zero a dirty
/// log (`-L`), discarding what the journal holds, which no operator does lightly.
pub fn repair(fs: Fs, dev: &Path) -> Result<String, String> {
    match fs {
        Fs::Ext4 => {
            let out =
                Command::new("e2fsck").arg("-fy").arg(dev).output().map_err(|e| format!("e2fsck: {e}"))?;
            // 0: clean, 1: errors corrected, 2: corrected, reboot advised; more is failure.
            match out.status.code() {
                Some(0..=2) => Ok("e2fsck -fy".into()),
                _ => Err(format!(
                    "e2fsck -fy exited {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout).trim()
                )),
            }
        }
        Fs::Xfs => Err("xfs images are not repaired".into()),
    }
}

/// An attached loop device, detached on drop.
#[derive(Debug)]
pub struct Loop {
    pub dev: PathBuf,
}

impl Loop {
    /// Attaches `file` to the first free loop device. Two attaches at once (the tests run in
    /// parallel) can pick the same free device and one then finds it busy: tried again a few
    /// times.
    pub fn attach(file: &Path) -> io::Result<Loop> {
        let mut last = None;
        for attempt in 0..10u64 {
            match run(Command::new("losetup").args(["--find", "--show"]).arg(file)) {
                Ok(dev) => return Ok(Loop { dev: PathBuf::from(dev) }),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(20 * (attempt + 1)));
        }
        Err(last.unwrap_or_else(|| io::Error::other("losetup never ran")))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        // Detaching can fail for a moment after an unmount while the kernel lets go of the
        // device; a few tries, then the error is left (the device is reused later by --find
        // only once free).
        for _ in 0..20 {
            if run(Command::new("losetup").arg("-d").arg(&self.dev)).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // `losetup -d` of a device something still holds open only marks it to be cleared on
        // the last close, and until then it keeps its backing file open: a FUSE file system
        // under it could not be unmounted yet. Wait (bounded) until the kernel let go.
        let Some(name) = self.dev.file_name() else { return };
        let backing = Path::new("/sys/block").join(name).join("loop/backing_file");
        for _ in 0..100 {
            if !backing.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Whether `dir` is a mount point now (`/proc/self/mounts`, octal escapes and all).
pub fn is_mounted(dir: &Path) -> bool {
    // A mount whose server is gone answers ENOTCONN to a lookup: fall back to the path given.
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let want = dir.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(want.as_str()))
}

/// Unmounts `dir` lazily if it is still mounted: the last resort for a mount whose server is
/// gone, so that nothing is left mounted under the scratch directory.
pub fn unmount_lazily(dir: &Path) {
    if is_mounted(dir) {
        let _ = run(Command::new("umount").arg("-l").arg(dir));
    }
}

/// A mounted file system, unmounted on drop.
#[derive(Debug)]
pub struct Mount {
    pub dir: PathBuf,
    mounted: bool,
}

impl Mount {
    pub fn new(fs: Fs, dev: &Path, dir: &Path) -> io::Result<Mount> {
        std::fs::create_dir_all(dir)?;
        run(Command::new("mount").args(["-t", fs.name()]).arg(dev).arg(dir))?;
        Ok(Mount { dir: dir.to_path_buf(), mounted: true })
    }

    /// Unmounts now, reporting the error; on an error the drop still detaches it lazily, so
    /// nothing is left mounted over the scratch directory.
    pub fn unmount(mut self) -> io::Result<()> {
        umount(&self.dir)?;
        self.mounted = false;
        Ok(())
    }
}

fn umount(dir: &Path) -> io::Result<()> {
    let mut last = Ok(String::new());
    for _ in 0..20 {
        last = run(Command::new("umount").arg(dir));
        if last.is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    last.map(|_| ())
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted && umount(&self.dir).is_err() {
            let _ = run(Command::new("umount").arg("-l").arg(&self.dir));
        }
    }
}

/// Copies `src` to a new `dst`, keeping holes: only the ranges `SEEK_DATA` finds are copied, so
/// a 600 MiB image with 30 MiB written costs 30 MiB.
pub fn sparse_copy(src: &Path, dst: &Path) -> io::Result<()> {
    let from = File::open(src)?;
    let len = from.metadata()?.len();
    let to = File::create(dst)?;
    to.set_len(len)?;
    let fd = from.as_raw_fd();
    let mut pos: i64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    while (pos as u64) < len {
        // SAFETY: lseek on an open descriptor.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // no data after pos
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut at = data as u64;
        while at < hole as u64 {
            let n = ((hole as u64 - at) as usize).min(buf.len());
            from.read_exact_at(&mut buf[..n], at)?;
            to.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        pos = hole;
    }
    Ok(())
}
