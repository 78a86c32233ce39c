//! raw: one preallocated, zero-filled, fsynced file; pwrite per append call, fdatasync per
//! durable call, leader/follower group commit between threads.
//!
//! raw-fresh: the same loop into fresh blocks, what any log that keeps what it writes gets from
//! the file system: the file grows by 64 MiB reservations (`fallocate`, unwritten extents, as
//! `wal` reserves a segment), so each fdatasync also makes durable the extents its writes
//! converted; and the pages synced more than 256 MiB behind are dropped from the page cache
//! (`posix_fadvise(DONTNEED)`, as `wal` does by default), so that the loop reuses memory rather
//! than taking new memory for every byte.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::engines::{check, Engine, Replayed, Res};

struct SyncState {
    synced: u64,
    syncing: bool,
    /// raw-fresh: the page-cache pages below this were dropped.
    dropped: u64,
}

/// raw-fresh grows its file by this much at a time (`wal`'s default segment length).
const FRESH_STEP: u64 = 64 << 20;
/// raw-fresh leaves this many synced bytes cached (`wal`'s default `cached_log_bytes`).
const FRESH_CACHED: u64 = 256 << 20;

pub struct Raw {
    file: File,
    cap: u64,
    wrap: bool,
    /// raw-fresh: the file is reserved ahead of the writes, `FRESH_STEP` at a time, never
    /// wrapped; `reserved` is how far.
    fresh: bool,
    reserved: Mutex<u64>,
    /// Logical end of the written records (grows past `cap` when wrapping).
    tail: Mutex<u64>,
    written: AtomicU64,
    sync: Mutex<SyncState>,
    synced_cv: Condvar,
}

thread_local! {
    static RAW_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Record framing of the raw loop: len u32 LE, crc32c u32 LE, payload.
pub const RAW_HEADER: u64 = 8;

impl Raw {
    pub fn open(dir: &Path, cap: u64, wrap: bool) -> Res<Raw> {
        let path = dir.join("raw.log");
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        zero_fill(&file, cap)?;
        File::open(dir)?.sync_all()?;
        Ok(Raw {
            file,
            cap,
            wrap,
            fresh: false,
            reserved: Mutex::new(cap),
            tail: Mutex::new(0),
            written: AtomicU64::new(0),
            sync: Mutex::new(SyncState { synced: 0, syncing: false, dropped: 0 }),
            synced_cv: Condvar::new(),
        })
    }

    /// raw-fresh: an empty file in `dir`, reserved as it grows (untimed: the first 64 MiB).
    pub fn open_fresh(dir: &Path) -> Res<Raw> {
        let path = dir.join("raw.log");
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        reserve(&file, 0, FRESH_STEP)?;
        file.sync_all()?;
        File::open(dir)?.sync_all()?;
        Ok(Raw {
            file,
            cap: u64::MAX,
            wrap: false,
            fresh: true,
            reserved: Mutex::new(FRESH_STEP),
            tail: Mutex::new(0),
            written: AtomicU64::new(0),
            sync: Mutex::new(SyncState { synced: 0, syncing: false, dropped: 0 }),
            synced_cv: Condvar::new(),
        })
    }

    /// raw-fresh: reserves the next steps of the file before a write reaches past them.
    fn reserve_through(&self, end: u64) -> Res<()> {
        let mut r = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        while *r < end {
            reserve(&self.file, *r, FRESH_STEP)?;
            *r += FRESH_STEP;
        }
        Ok(())
    }

    /// Returns once an fdatasync that started after `end` was written has completed.
    fn sync_through(&self, end: u64) -> Res<()> {
        let mut st = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if st.synced >= end {
                return Ok(());
            }
            if st.syncing {
                st = self.synced_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.syncing = true;
            drop(st);
            let target = self.written.load(Ordering::Acquire);
            let r = self.file.sync_data();
            st = self.sync.lock().unwrap_or_else(|e| e.into_inner());
            st.syncing = false;
            if r.is_ok() {
                st.synced = st.synced.max(target);
                if self.fresh && st.synced - st.dropped >= FRESH_CACHED + FRESH_STEP {
                    // A step's worth of synced pages beyond the cached bytes: drop them.
                    let (from, len) = (st.dropped, FRESH_STEP);
                    st.dropped += len;
                    // SAFETY: plain syscall on an open descriptor.
                    let _ = unsafe {
                        libc::posix_fadvise(
                            self.file.as_raw_fd(),
                            from as libc::off_t,
                            len as libc::off_t,
                            libc::POSIX_FADV_DONTNEED,
                        )
                    };
                }
            }
            self.synced_cv.notify_all();
            r?;
        }
    }

    pub fn replay(dir: &Path, len: usize) -> Res<Replayed> {
        let t = Instant::now();
        let file = File::open(dir.join("raw.log"))?;
        let open_s = t.elapsed().as_secs_f64();
        let mut r = BufReader::with_capacity(1 << 20, file);
        let mut out = Replayed { open_s, ..Replayed::default() };
        let mut head = [0u8; RAW_HEADER as usize];
        let mut buf = vec![0u8; len];
        loop {
            match r.read_exact(&mut head) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
            let n = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if n == 0 {
                break;
            }
            let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            buf.resize(n, 0);
            r.read_exact(&mut buf)?;
            if crc32c::crc32c(&buf) != crc {
                return Err(format!("raw: crc mismatch at record {}", out.entries + 1).into());
            }
            out.entries += 1;
            check(out.entries, &buf, len)?;
            out.bytes += n as u64;
        }
        Ok(out)
    }
}

/// Reserves `len` bytes of unwritten extents at `offset` (`fallocate`, mode 0: the file's
/// length grows with them).
fn reserve(file: &File, offset: u64, len: u64) -> Res<()> {
    // SAFETY: plain syscall on an open descriptor.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) };
    if r != 0 {
        return Err(format!("raw-fresh: fallocate: {}", std::io::Error::last_os_error()).into());
    }
    Ok(())
}

/// Writes `len` zero bytes and makes them durable (untimed setup of the raw loop).
pub fn zero_fill(file: &File, len: u64) -> Res<()> {
    let zeros = vec![0u8; 8 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    file.sync_all()?;
    Ok(())
}

impl Engine for Raw {
    fn append(&self, _stream: u32, entries: &[&[u8]], durable: bool) -> Res<()> {
        let end = RAW_BUF.with(|b| -> Res<u64> {
            let buf = &mut *b.borrow_mut();
            buf.clear();
            for e in entries {
                buf.extend_from_slice(&(e.len() as u32).to_le_bytes());
                buf.extend_from_slice(&crc32c::crc32c(e).to_le_bytes());
                buf.extend_from_slice(e);
            }
            let len = buf.len() as u64;
            let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
            let mut pos = *tail;
            let mut phys = if self.wrap { pos % self.cap } else { pos };
            if phys + len > self.cap {
                if !self.wrap {
                    return Err("raw: the preallocated file is full".into());
                }
                pos += self.cap - phys;
                phys = 0;
            }
            if self.fresh {
                self.reserve_through(phys + len)?;
            }
            self.file.write_all_at(buf, phys)?;
            *tail = pos + len;
            self.written.store(pos + len, Ordering::Release);
            Ok(pos + len)
        })?;
        if durable {
            self.sync_through(end)?;
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        Ok(())
    }
}
