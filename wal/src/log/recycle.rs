//! Recycling purged segment files. A purge sets up to [`Options::recycle_segments`] of the files
//! it frees aside (renamed `{seq}.recycle`, FORMAT.md section 1) instead of removing them, and
//! the next segment is made of one of them rather than of a new file: its old contents stay,
//! its header sector and footer slot are zeroed, a stale table of its old sectors is written
//! ([`crate::stale`], FORMAT.md section 2.2), then it is synced and renamed. Overwriting the old
//! contents with zeros instead cost as much disk bandwidth as the log's own writes.
//!
//! Why: on the machines measured (README, "Why the throughput rows fell short") a page-cache
//! page the kernel must newly allocate costs far more than overwriting one that exists (fresh
//! files 400 MiB/s once recently freed pages are used up, rewrites 5.8-7.5 GB/s), and a file
//! system's overwrite of allocated blocks needs no allocation, so it cannot fail for space.
//!
//! A file's bytes change under whoever has it mapped, so a file is overwritten only when no
//! replay of this process maps it: each [`crate::Replay`] pins the segment it has mapped
//! ([`Pins`]) before opening it by name, and a purge renames before the overwrite checks the
//! pins. A replay that pins after the rename finds no file (as after a removal); one that pinned
//! before is seen, and its file waits until the replay moves on. Other processes never
//! map a segment while a writer holds the log (the directory lock).
//!
//! [`Options::recycle_segments`]: crate::Options::recycle_segments

use super::options::Options;
use super::Wal;
use crate::error::{Error, Result};
use crate::format::{parse_recycle_file_name, recycle_file_name, segment_file_name};
use crate::recovery::SegmentInfo;
use crate::stale::Owner;
use crate::storage::{prepare, FileId, Storage};
use std::sync::{Arc, Mutex, MutexGuard};

/// The segments that replays of this process have mapped, by sequence (one entry per map).
#[derive(Debug, Default)]
pub(crate) struct Pins(Mutex<Vec<u64>>);

/// A segment pinned while a replay maps it; unpinned on drop.
#[derive(Debug)]
pub(crate) struct Pin {
    pins: Arc<Pins>,
    seq: u64,
}

impl Pins {
    fn lock(&self) -> MutexGuard<'_, Vec<u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn pin(self: &Arc<Self>, seq: u64) -> Pin {
        self.lock().push(seq);
        Pin { pins: self.clone(), seq }
    }

    pub(crate) fn is_pinned(&self, seq: u64) -> bool {
        self.lock().contains(&seq)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut v = self.pins.lock();
        if let Some(i) = v.iter().position(|&s| s == self.seq) {
            v.swap_remove(i);
        }
    }
}

/// At a write-open: the files set aside by earlier purges that can be reused (the right length,
/// up to the limit), newest last; the others are removed.
pub(crate) fn adopt(storage: &dyn Storage, names: &[String], opts: &Options) -> Result<Vec<u64>> {
    let mut found: Vec<u64> = names.iter().filter_map(|n| parse_recycle_file_name(n)).collect();
    found.sort_unstable();
    let mut pool = Vec::new();
    let mut removed = false;
    for &seq in found.iter().rev() {
        let name = recycle_file_name(seq);
        let fits = pool.len() < opts.recycle_segments
            && file_len(storage, &name).is_ok_and(|l| l == u64::from(opts.segment_len_bytes));
        if fits {
            pool.push(seq);
        } else {
            storage.remove(&name).map_err(|e| Error::io(format!("removing {name}"), e))?;
            removed = true;
        }
    }
    if removed {
        crate::lifecycle::sync_dir(storage)?;
    }
    pool.reverse();
    Ok(pool)
}

fn file_len(storage: &dyn Storage, name: &str) -> std::io::Result<u64> {
    let f: FileId = storage.open(name)?;
    let r = storage.len(f);
    storage.close(f);
    r
}

impl Wal {
    /// Purge: removes the files of `removed` or sets them aside for reuse (the newest ones,
    /// while the pool has room and their length is today's). Durable at the next directory sync.
    pub(crate) fn remove_or_set_aside(&mut self, removed: &[SegmentInfo]) -> Result<()> {
        // A helper still dropping the pages of a file set aside here would go on advising it
        // once it is a spare or the active segment: wait for them first (a log that purges
        // rarely has any running, it seldom holds more than the page-cache budget).
        self.files.finish_uncaching();
        for s in removed.iter().rev() {
            let name = segment_file_name(s.seq);
            let keep = self.files.pool_len() < self.opts.recycle_segments
                && s.header.segment_len.get() == self.opts.segment_len_bytes;
            let r = if keep {
                self.storage.rename(&name, &recycle_file_name(s.seq))
            } else {
                self.storage.remove(&name)
            };
            if let Err(e) = r {
                return Err(self.fail_io("removing a purged segment", e));
            }
            if keep {
                self.files.set_aside(s.seq);
            }
        }
        Ok(())
    }

    /// Rotation without a prepared spare: makes segment file `name` of a set-aside file, if one
    /// can be taken and its recycling works (otherwise the caller creates a new file).
    pub(crate) fn recycle_into(&mut self, seq: u64, len: u32) -> Result<Option<FileId>> {
        let Some(old) = self.files.take_recyclable() else { return Ok(None) };
        let name = segment_file_name(seq);
        let owner = Owner { log_id: self.meta.log_id, segment_seq: seq };
        if !recycle(&*self.storage, old, &name, len, owner) {
            return Ok(None);
        }
        match self.storage.open(&name) {
            Ok(f) => Ok(Some(f)),
            Err(e) => Err(self.fail_io(format!("opening {name}"), e)),
        }
    }
}

/// Makes the set-aside file of segment `old` into segment file `name`, a recycled spare:
/// [`prepare::recycle_file_with`] opens it and checks its length, the file is read once (mapped)
/// for its stale table, then the table is written, the header sector and the footer slot
/// zeroed, the file synced and renamed. False when any of that failed: the file is removed then
/// (by `recycle_file_with`), and the caller makes a new one.
pub(crate) fn recycle(storage: &dyn Storage, old: u64, name: &str, len: u32, owner: Owner) -> bool {
    let from = recycle_file_name(old);
    let stale = |f| storage.map(f).map(|old| crate::stale::recycling_writes(&old, len, owner));
    prepare::recycle_file_with(storage, &from, name, len.into(), stale).is_ok()
}
