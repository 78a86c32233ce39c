//! Crash images built from a [`Recording`]: what a disk can hold after a power loss.
//!
//! Number the flushes of the recording 1..=F. A power loss in *window k* (after flush k, before
//! flush k+1 or the end; window 0 is before the first flush) leaves every write logged before
//! flush k, plus any subset of the writes logged in the window: none of those was flushed, so
//! the drive may have kept some and not others, in any order, and a write may be torn at a
//! 512-byte sector. Whatever the image holds, every acknowledgement logged before the window's end
//! was given before the power went, so all of them must hold: the crash point is the end of the
//! window, the strictest one with that disk state.
//!
//! - A *flush-point image* keeps none of the window's writes.
//! - A *between image* keeps a seeded subset: each write kept with probability 1/2, a kept write
//!   torn (a random subset of its sectors) with probability 1/4, the kept writes applied in a
//!   shuffled order (two writes to one block may land either way round).
//!
//! [`Cursor`] walks the windows in order with one working copy of the disk, so building image k
//! costs the writes since image k-1 and one sparse copy.

use crate::device::sparse_copy;
use crate::recorder::{Event, Recording};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The smallest sector a write can be torn at.
pub const SECTOR: u64 = 512;

/// One image: the window and, for a between image, the seed of its subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ImageSpec {
    pub window: usize,
    pub subset: Option<u64>,
}

impl std::fmt::Display for ImageSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.subset {
            None => write!(f, "window {} (flush point)", self.window),
            Some(s) => write!(f, "window {} subset {s}", self.window),
        }
    }
}

/// The event ranges of each window: window k is `bounds[k]..bounds[k + 1]`, where a bound is a
/// flush's position (the flush itself belongs to the window it opens).
pub fn windows(rec: &Recording) -> Vec<(usize, usize)> {
    let mut starts = vec![0];
    starts.extend(rec.flushes());
    let mut out = Vec::with_capacity(starts.len());
    for (i, &s) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(rec.events.len());
        out.push((s, end));
    }
    out
}

/// The acknowledgements an image of `window` must honour: every mark before the window's end.
pub fn required(rec: &Recording, window: usize) -> Vec<String> {
    let end = windows(rec)[window].1;
    rec.marks_before(end).into_iter().map(str::to_string).collect()
}

/// A working copy of the disk, advanced window by window.
#[derive(Debug)]
pub struct Cursor<'a> {
    rec: &'a Recording,
    windows: Vec<(usize, usize)>,
    work: PathBuf,
    file: File,
    /// Events before this position are applied to `work`.
    applied: usize,
    /// What a torn write keeps or loses whole: [`SECTOR`], or a file system's own block where
    /// the model is a drive with larger atomic sectors.
    sector: u64,
}

impl<'a> Cursor<'a> {
    /// Starts from a copy of `base` (the disk before the first event) at `work`; writes tear at
    /// `sector` bytes.
    pub fn new(rec: &'a Recording, base: &Path, work: &Path, sector: u64) -> io::Result<Cursor<'a>> {
        sparse_copy(base, work)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(work)?;
        Ok(Cursor {
            rec,
            windows: windows(rec),
            work: work.to_path_buf(),
            file,
            applied: 0,
            sector: sector.max(SECTOR),
        })
    }

    pub fn windows(&self) -> usize {
        self.windows.len()
    }

    /// Writes the image `spec` to `out`. Specs must come in non-decreasing window order.
    pub fn build(&mut self, spec: ImageSpec, out: &Path) -> io::Result<()> {
        let (start, end) = self.windows[spec.window];
        if start < self.applied {
            return Err(io::Error::other(format!("{spec}: the cursor is already past it")));
        }
        for i in self.applied..start {
            apply(self.rec, &self.rec.events[i], &self.file, None, self.sector)?;
        }
        self.applied = start;
        sparse_copy(&self.work, out)?;
        if let Some(seed) = spec.subset {
            let img = std::fs::OpenOptions::new().write(true).open(out)?;
            let mut rng = wal_rng::Rng::splitmix64(seed);
            let mut kept: Vec<usize> = (start..end)
                .filter(|&i| matches!(self.rec.events[i], Event::Write { .. } | Event::Zero { .. }))
                .filter(|_| rng.bool())
                .collect();
            rng.shuffle(&mut kept);
            for i in kept {
                let torn = rng.below(4) == 0;
                apply(self.rec, &self.rec.events[i], &img, torn.then_some(&mut rng), self.sector)?;
            }
        }
        Ok(())
    }
}

/// Applies one block event to `file`; with `tear`, a write keeps only a random subset of its
/// sectors (at least one dropped when it spans more than one).
fn apply(
    rec: &Recording,
    e: &Event,
    file: &File,
    tear: Option<&mut wal_rng::Rng>,
    sector: u64,
) -> io::Result<()> {
    match *e {
        Event::Write { offset, len, at } => {
            let data = rec.bytes(at, len);
            match tear {
                None => file.write_all_at(data, offset),
                Some(rng) => {
                    // Sectors of the disk, not of the write: a write need not start on one.
                    let first = offset / sector;
                    let sectors = (offset + len as u64).div_ceil(sector) - first;
                    let dropped = rng.below(sectors.max(1));
                    for s in 0..sectors {
                        if s == dropped || (sectors > 2 && rng.below(4) == 0) {
                            continue;
                        }
                        let a = ((first + s) * sector).saturating_sub(offset).min(len as u64) as usize;
                        let b = ((first + s + 1) * sector - offset).min(len as u64) as usize;
                        file.write_all_at(&data[a..b], offset + a as u64)?;
                    }
                    Ok(())
                }
            }
        }
        Event::Zero { offset, len } => {
            // Zeros written, not a hole punched: the image is a plain file either way.
            let zeros = vec![0u8; len.min(1 << 20) as usize];
            let mut at = 0;
            while at < len {
                let n = (len - at).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], offset + at)?;
                at += n as u64;
            }
            Ok(())
        }
        Event::Flush | Event::Mark(_) => Ok(()),
    }
}
