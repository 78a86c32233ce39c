//! raw: one preallocated, zero-filled, fsynced file; pwrite per append call, fdatasync per
//! durable call, leader/follower group commit between threads.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crate::engines::{check, Engine, Replayed, Res};

struct SyncState {
    synced: u64,
    syncing: bool,
}

pub struct Raw {
    file: File,
    cap: u64,
    wrap: bool,
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
            tail: Mutex::new(0),
            written: AtomicU64::new(0),
            sync: Mutex::new(SyncState { synced: 0, syncing: false }),
            synced_cv: Condvar::new(),
        })
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
