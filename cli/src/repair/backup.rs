//! Where `walcheck repair` keeps the bytes it is about to change: a directory it creates, never
//! one that exists, never the log directory, inside it or above it (a backup there would be
//! copied onto itself, or land among the files it protects), with its files, itself and its
//! parent's entry for it synced before the log is touched.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// How many names a default backup tries (`NAME.walcheck-backup-SECS`, then `-1`, `-2`, ...).
const DEFAULT_NAMES: u32 = 1000;

/// Checks an explicit `--backup` path against the log directory `log` (canonical) before
/// anything is read: the path as it will resolve, including a symlink on the way and a part
/// that does not exist yet (resolved through its nearest existing ancestor), must be neither
/// the log nor inside it nor above it, and must not exist. Returns the path to create.
pub(crate) fn check(log: &Path, target: &Path) -> Result<PathBuf, String> {
    let abs = std::path::absolute(target).map_err(|e| format!("cannot resolve it: {e}"))?;
    // The nearest ancestor that exists (a symlink counts, even a dangling one).
    let existing = abs
        .ancestors()
        .find(|a| std::fs::symlink_metadata(a).is_ok())
        .ok_or_else(|| "no part of it exists".to_string())?;
    let rest = abs.strip_prefix(existing).map_err(|e| e.to_string())?;
    if rest.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err("`..` after its last existing directory cannot be resolved safely".into());
    }
    let base = existing
        .canonicalize()
        .map_err(|e| format!("{} cannot be resolved ({e}): a symlink to nothing?", existing.display()))?;
    let canon = base.join(rest);
    outside(log, &canon)?;
    if under(log, &base) {
        return Err(format!(
            "{} is inside the log directory {} by another path",
            canon.display(),
            log.display()
        ));
    }
    if rest.as_os_str().is_empty() {
        return Err(format!(
            "{} exists: a backup is always a new directory, so that no earlier backup is overwritten; name one that does not exist yet",
            canon.display()
        ));
    }
    Ok(canon)
}

/// Refuses a backup that is the log directory, inside it or contains it (canonical paths).
fn outside(log: &Path, canon: &Path) -> Result<(), String> {
    if canon == log {
        Err(format!("{} is the log directory", canon.display()))
    } else if canon.starts_with(log) {
        Err(format!("{} is inside the log directory {}", canon.display(), log.display()))
    } else if log.starts_with(canon) {
        Err(format!("{} contains the log directory {}", canon.display(), log.display()))
    } else {
        Ok(())
    }
}

/// Creates the backup directory: `target` (checked by [`check`]; its missing parents are
/// created), or next to the log `NAME.walcheck-backup-SECS` with the first free suffix. The
/// last component is always created new (`create_dir`), so an existing directory, whoever
/// made it and whenever, is never written into. Checked again once created, by the directory
/// itself (a symlink swapped in meanwhile, a bind mount of the log): it must not be the log or
/// under it.
pub(crate) fn create(log: &Path, target: Option<PathBuf>) -> io::Result<PathBuf> {
    let made = match target {
        Some(t) => {
            if let Some(parent) = t.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::create_dir(&t)?;
            t
        }
        None => create_default(log)?,
    };
    let canon = made.canonicalize()?;
    let again = outside(log, &canon).and_then(|()| {
        if under(log, &canon) {
            Err(format!("{} is inside the log directory {} by another path", canon.display(), log.display()))
        } else {
            Ok(())
        }
    });
    if let Err(why) = again {
        let _ = std::fs::remove_dir(&made);
        return Err(io::Error::other(why));
    }
    Ok(made)
}

/// Whether `path` (existing) or a directory above it is the log directory itself, by device
/// and inode: a bind mount of the log has another path but the same directory.
fn under(log: &Path, path: &Path) -> bool {
    let Ok(id) = std::fs::metadata(log).map(|m| (m.dev(), m.ino())) else { return false };
    path.ancestors().any(|a| std::fs::metadata(a).is_ok_and(|m| (m.dev(), m.ino()) == id))
}

fn create_default(log: &Path) -> io::Result<PathBuf> {
    let parent =
        log.parent().ok_or_else(|| io::Error::other("the log directory has no parent; give --backup"))?;
    let name = log.file_name().map_or("log".into(), |n| n.to_string_lossy().into_owned());
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for n in 0..DEFAULT_NAMES {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let p = parent.join(format!("{name}.walcheck-backup-{secs}{suffix}"));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "{DEFAULT_NAMES} backups named for this second exist already; give --backup"
    )))
}

/// Copies the files `names` of `from` that exist into the new directory `to`, each created new
/// and synced, then syncs `to` and its parent (the entry naming `to`). Returns how many.
pub(crate) fn copy_into(to: &Path, from: &Path, names: &[String]) -> io::Result<usize> {
    let mut copied = 0;
    for n in names {
        let src = from.join(n);
        let meta = match std::fs::symlink_metadata(&src) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !meta.is_file() {
            // A FIFO or device would block or never end; repair changes only regular files.
            return Err(io::Error::other(format!("{} is not a regular file", src.display())));
        }
        let mut r = File::open(&src)?;
        let mut w = OpenOptions::new().write(true).create_new(true).open(to.join(n))?;
        io::copy(&mut r, &mut w)?;
        w.sync_all()?;
        copied += 1;
    }
    File::open(to)?.sync_all()?;
    if let Some(parent) = to.parent() {
        File::open(parent)?.sync_all()?;
    }
    Ok(copied)
}
