//! One adapter per engine behind a small trait, plus each engine's replay (this engine's adapter
//! is `wal_engine.rs`).
//!
//! Every adapter is written against the engine's public API as a user would call it; the
//! durability caveats (what "durable" costs in each) and what each engine does under each
//! [`Practice`] are in `README.md`.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::raft_log_engine::RaftLogEngine;
use crate::wal_engine::WalEngine;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub const ENGINES: [&str; 5] = ["wal", "raft-engine", "okaywal", "raft-log", "raw"];

/// How each engine is run: what a user gets by default, or the engine's documented steady
/// state (its purge or checkpoint policy running).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Practice {
    /// Default options, no maintenance thread: `wal` and raft-engine are never purged (their
    /// logs grow); okaywal checkpoints by itself (a `LogManager` is mandatory; ours is a no-op).
    #[default]
    Default,
    /// `wal` purges every sealed segment every 100 ms (sealed segments are recycled);
    /// raft-engine compacts every region to its last entry and calls `purge_expired_files`
    /// every 100 ms, with a purge threshold of two files (purged files are recycled); okaywal as
    /// by default (it checkpoints and recycles by design); the raw loop as always.
    Best,
}

impl Practice {
    pub const ALL: [Practice; 2] = [Practice::Default, Practice::Best];

    pub fn id(self) -> &'static str {
        match self {
            Practice::Default => "default",
            Practice::Best => "best",
        }
    }

    pub fn parse(s: &str) -> Option<Practice> {
        Practice::ALL.into_iter().find(|p| p.id() == s)
    }
}

/// How a log is opened for a write workload.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Synced workloads, under `practice`; the raw loop wraps around a preallocated file of
    /// `raw_bytes`.
    Synced { raw_bytes: u64, practice: Practice },
    /// The log kept whole (the bulk load that the replays read back, and `retained`): nothing
    /// is purged whatever the practice, okaywal never checkpoints and the raw file holds `bytes`
    /// of records without wrapping.
    Kept { bytes: u64 },
}

/// A log open for writing, shared by the writer threads.
pub trait Engine: Sync {
    /// Appends `entries` as one atomic call for writer `stream` (which numbers its entries
    /// from 1 in their first 8 bytes). With `durable`, returns once an fdatasync covered them.
    fn append(&self, stream: u32, entries: &[&[u8]], durable: bool) -> Res<()>;

    /// The bulk load: `n` entries from `next`, each appended without asking for durability
    /// except the last, whose return means every entry is durable. The time of each append
    /// call goes into `lat` (nanoseconds).
    fn bulk(&self, n: u64, next: &mut dyn FnMut(u64, &mut Vec<u8>), lat: &mut Vec<u64>) -> Res<()> {
        let mut e = Vec::new();
        for seq in 1..=n {
            next(seq, &mut e);
            let t = Instant::now();
            self.append(0, &[&e], seq == n)?;
            lat.push(t.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    /// Shuts down cleanly (untimed).
    fn close(self: Box<Self>) -> Res<()>;
}

pub fn open(engine: &str, dir: &Path, mode: Mode) -> Res<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match engine {
        "wal" => Box::new(WalEngine::open(dir, practice_of(mode))?),
        "raft-engine" => Box::new(RaftEngine::open(dir, practice_of(mode))?),
        "okaywal" => Box::new(OkayWal::open(dir, mode)?),
        "raft-log" => Box::new(RaftLogEngine::open(dir, practice_of(mode))?),
        "raw" => Box::new(match mode {
            Mode::Synced { raw_bytes, .. } => Raw::open(dir, raw_bytes, true)?,
            Mode::Kept { bytes } => Raw::open(dir, bytes, false)?,
        }),
        other => return Err(format!("unknown engine {other}").into()),
    })
}

/// The practice an engine is opened with: a kept log is never purged, which is what
/// [`Practice::Default`] does for every engine that purges on request.
fn practice_of(mode: Mode) -> Practice {
    match mode {
        Mode::Synced { practice, .. } => practice,
        Mode::Kept { .. } => Practice::Default,
    }
}

/// A maintenance thread: runs `work` every `period` until [`Every::stop`] or until `work`
/// returns false (an error: the engine's own calls report it).
pub struct Every {
    stop: std::sync::mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Every {
    pub fn spawn(
        name: &str,
        period: Duration,
        mut work: impl FnMut() -> bool + Send + 'static,
    ) -> Res<Every> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::Builder::new().name(name.into()).spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                if !work() {
                    return;
                }
            }
        })?;
        Ok(Every { stop, handle })
    }

    pub fn stop(self) -> Res<()> {
        drop(self.stop);
        self.handle.join().map_err(|_| "a maintenance thread panicked")?;
        Ok(())
    }
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct Replayed {
    pub entries: u64,
    pub bytes: u64,
    /// Time of the open call alone (okaywal replays inside its open).
    pub open_s: f64,
}

/// Checks that entry `seq` of the bulk load came back as written (stream 0, in order).
pub fn check(seq_expected: u64, payload: &[u8], len: usize) -> Res<()> {
    let seq = payload.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    if seq != Some(seq_expected) || payload.len() != len {
        return Err(format!(
            "replay: entry {seq_expected} came back as {seq:?} with {} bytes (want {len})",
            payload.len()
        )
        .into());
    }
    Ok(())
}

/// Opens the log in `dir` as its engine does after a restart and iterates every entry of the
/// bulk load (`n` entries of `len` bytes), checking each engine's checksums and the order.
pub fn replay(engine: &str, dir: &Path, n: u64, len: usize) -> Res<Replayed> {
    let out = match engine {
        "wal" => WalEngine::replay(dir, len)?,
        "raft-engine" => RaftEngine::replay(dir, len)?,
        "okaywal" => OkayWal::replay(dir, len)?,
        "raft-log" => RaftLogEngine::replay(dir, len)?,
        "raw" => Raw::replay(dir, len)?,
        other => return Err(format!("unknown engine {other}").into()),
    };
    if out.entries != n {
        return Err(format!("{engine} replay found {} entries, {n} were written", out.entries).into());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// raft-engine 0.4.2: entries are protobuf messages with a gap-free index per region.

struct Msgs;

impl raft_engine::MessageExt for Msgs {
    type Entry = protobuf::well_known_types::BytesValue;

    fn index(e: &Self::Entry) -> u64 {
        e.value.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }
}

thread_local! {
    /// Per writer thread: a reused batch and reused messages (as a Raft store would keep them).
    static RAFT_SCRATCH: RefCell<(raft_engine::LogBatch, Vec<protobuf::well_known_types::BytesValue>)> =
        RefCell::new((raft_engine::LogBatch::default(), Vec::new()));
}

pub struct RaftEngine {
    engine: Arc<raft_engine::Engine>,
    /// The compact-and-purge thread of [`Practice::Best`].
    purger: Option<Every>,
}

impl RaftEngine {
    /// How often [`Practice::Best`] compacts and purges (as often as this engine's purge).
    const PURGE_EVERY: Duration = Duration::from_millis(100);

    /// Default configuration but for compression, which is off: every engine writes the bytes
    /// it is given. [`Practice::Best`] lowers `purge_threshold` from 10 GB to two files
    /// (256 MiB), the least that lets `purge_expired_files` act within a run of seconds; that
    /// also sizes the recycle pool (`enable_log_recycle`, on by default with format version 2,
    /// keeps 1.5 x threshold / file size = 3 purged files for reuse).
    /// `file` replaces the default file size (128 MiB) in the tests only.
    fn config(dir: &Path, practice: Practice, file: Option<u64>) -> raft_engine::Config {
        let default = raft_engine::Config::default();
        let target_file_size = file.map_or(default.target_file_size, raft_engine::ReadableSize);
        let purge_threshold = match practice {
            Practice::Default => default.purge_threshold,
            Practice::Best => raft_engine::ReadableSize(2 * target_file_size.0),
        };
        raft_engine::Config {
            dir: dir.to_string_lossy().into_owned(),
            batch_compression_threshold: raft_engine::ReadableSize(0),
            target_file_size,
            purge_threshold,
            ..default
        }
    }

    fn open(dir: &Path, practice: Practice) -> Res<RaftEngine> {
        Self::open_sized(dir, practice, None)
    }

    fn open_sized(dir: &Path, practice: Practice, file: Option<u64>) -> Res<RaftEngine> {
        let engine = Arc::new(raft_engine::Engine::open(Self::config(dir, practice, file))?);
        let purger = match practice {
            Practice::Default => None,
            Practice::Best => {
                let e = engine.clone();
                // A Raft store compacts a region's log up to what its snapshot covers, then asks
                // the engine to drop (and recycle) the files nothing refers to any more. Every
                // entry here is as good as applied: each region keeps its last one.
                Some(Every::spawn("compare-raft-purge", Self::PURGE_EVERY, move || {
                    for region in e.raft_groups() {
                        if let Some(last) = e.last_index(region) {
                            e.compact_to(region, last);
                        }
                    }
                    e.purge_expired_files().is_ok()
                })?)
            }
        };
        Ok(RaftEngine { engine, purger })
    }

    fn replay(dir: &Path, len: usize) -> Res<Replayed> {
        let t = Instant::now();
        let engine = raft_engine::Engine::open(Self::config(dir, Practice::Default, None))?;
        let open_s = t.elapsed().as_secs_f64();
        let mut out = Replayed { open_s, ..Replayed::default() };
        let mut buf = Vec::new();
        let mut regions = engine.raft_groups();
        regions.sort_unstable();
        for region in regions {
            let (Some(first), Some(last)) = (engine.first_index(region), engine.last_index(region)) else {
                continue;
            };
            let mut at = first;
            while at <= last {
                let end = (at + 4096).min(last + 1);
                buf.clear();
                engine.fetch_entries_to::<Msgs>(region, at, end, None, &mut buf)?;
                for m in &buf {
                    out.entries += 1;
                    check(out.entries, &m.value, len)?;
                    out.bytes += m.value.len() as u64;
                }
                at = end;
            }
        }
        Ok(out)
    }
}

impl Engine for RaftEngine {
    fn append(&self, stream: u32, entries: &[&[u8]], durable: bool) -> Res<()> {
        RAFT_SCRATCH.with(|s| {
            let (batch, msgs) = &mut *s.borrow_mut();
            msgs.resize_with(entries.len(), Default::default);
            for (m, e) in msgs.iter_mut().zip(entries) {
                m.value.clear();
                m.value.extend_from_slice(e);
            }
            batch.add_entries::<Msgs>(u64::from(stream) + 1, msgs)?;
            self.engine.write(batch, durable)?;
            Ok(())
        })
    }

    fn close(self: Box<Self>) -> Res<()> {
        let RaftEngine { engine, purger } = *self;
        if let Some(p) = purger {
            p.stop()?;
        }
        drop(engine);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// okaywal 0.3.1: an entry is a sequence of chunks; commit flushes and fdatasyncs.

/// Records per commit in the bulk load: okaywal has no unsynced commit (peerbench's grouping).
pub const OKAYWAL_BULK_GROUP: u64 = 1024;

#[derive(Debug, Default)]
struct Tally {
    entries: u64,
    bytes: u64,
    error: Option<String>,
}

/// The log manager (okaywal requires one, under either practice): checkpoints are instant (no
/// state to apply) in the synced workloads; a replay refuses them so that the recovered
/// segments stay for the next replay.
#[derive(Debug)]
struct Manager {
    replay: Option<(Arc<Mutex<Tally>>, usize)>,
}

impl okaywal::LogManager for Manager {
    fn recover(&mut self, entry: &mut okaywal::Entry<'_>) -> std::io::Result<()> {
        let Some((tally, len)) = &self.replay else { return Ok(()) };
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = Vec::with_capacity(*len);
        loop {
            match entry.read_chunk()? {
                okaywal::ReadChunkResult::Chunk(mut chunk) => {
                    buf.clear();
                    chunk.read_to_end(&mut buf)?;
                    if !chunk.check_crc()? {
                        return Err(std::io::Error::other("okaywal chunk crc mismatch"));
                    }
                    t.entries += 1;
                    t.bytes += buf.len() as u64;
                    if t.error.is_none() {
                        if let Err(e) = check(t.entries, &buf, *len) {
                            t.error = Some(e.to_string());
                        }
                    }
                }
                okaywal::ReadChunkResult::EndOfEntry => return Ok(()),
                okaywal::ReadChunkResult::AbortedEntry => {
                    return Err(std::io::Error::other("okaywal: aborted entry in a clean log"))
                }
            }
        }
    }

    fn checkpoint_to(
        &mut self,
        _last: okaywal::EntryId,
        _entries: &mut okaywal::SegmentReader,
        _wal: &okaywal::WriteAheadLog,
    ) -> std::io::Result<()> {
        match self.replay {
            None => Ok(()),
            Some(_) => Err(std::io::Error::other("replay only: segments are kept")),
        }
    }
}

pub struct OkayWal {
    wal: okaywal::WriteAheadLog,
}

impl OkayWal {
    fn open(dir: &Path, mode: Mode) -> Res<OkayWal> {
        let mut cfg = okaywal::Configuration::default_for(dir);
        if let Mode::Kept { .. } = mode {
            cfg = cfg.checkpoint_after_bytes(u64::MAX);
        }
        Ok(OkayWal { wal: cfg.open(Manager { replay: None })? })
    }

    fn replay(dir: &Path, len: usize) -> Res<Replayed> {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let t = Instant::now();
        let cfg = okaywal::Configuration::default_for(dir).checkpoint_after_bytes(u64::MAX);
        let wal = cfg.open(Manager { replay: Some((tally.clone(), len)) })?;
        let open_s = t.elapsed().as_secs_f64();
        // Not `shutdown`: the checkpoint thread may already have stopped on the refusal.
        drop(wal);
        let t = tally.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &t.error {
            return Err(e.clone().into());
        }
        Ok(Replayed { entries: t.entries, bytes: t.bytes, open_s })
    }
}

impl Engine for OkayWal {
    fn append(&self, _stream: u32, entries: &[&[u8]], _durable: bool) -> Res<()> {
        // Every commit is durable: okaywal has no other kind.
        let mut e = self.wal.begin_entry()?;
        for chunk in entries {
            e.write_chunk(chunk)?;
        }
        e.commit()?;
        Ok(())
    }

    fn bulk(&self, n: u64, next: &mut dyn FnMut(u64, &mut Vec<u8>), lat: &mut Vec<u64>) -> Res<()> {
        // One entry per OKAYWAL_BULK_GROUP records, one chunk per record: begin_entry's time
        // counts for the group's first record, commit's for its last.
        let mut rec = Vec::new();
        let mut seq = 1;
        while seq <= n {
            let end = (seq + OKAYWAL_BULK_GROUP - 1).min(n);
            let t = Instant::now();
            let mut e = self.wal.begin_entry()?;
            let mut carry = t.elapsed().as_nanos() as u64;
            for s in seq..=end {
                next(s, &mut rec);
                let t = Instant::now();
                e.write_chunk(&rec)?;
                lat.push(t.elapsed().as_nanos() as u64 + std::mem::take(&mut carry));
            }
            let t = Instant::now();
            e.commit()?;
            if let Some(last) = lat.last_mut() {
                *last += t.elapsed().as_nanos() as u64;
            }
            seq = end + 1;
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        Ok(self.wal.shutdown()?)
    }
}

// ---------------------------------------------------------------------------------------------
// raw: one preallocated, zero-filled, fsynced file; pwrite per append call, fdatasync per
// durable call, leader/follower group commit between threads.

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

    fn replay(dir: &Path, len: usize) -> Res<Replayed> {
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

/// The disk probe: `ms` milliseconds of 4 KiB pwrite + fdatasync into an already written file.
/// Returns (syncs per second, p50 us, p99 us).
pub fn probe(file: &File, ms: u64) -> Res<(f64, f64, f64)> {
    let buf = vec![0x5au8; 4096];
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed().as_millis() < u128::from(ms) || i < 3 {
        let t = Instant::now();
        file.write_all_at(&buf, (i % 256) * 4096)?;
        file.sync_data()?;
        lat.push(t.elapsed().as_nanos() as u64);
        i += 1;
    }
    let rate = i as f64 / start.elapsed().as_secs_f64();
    lat.sort_unstable();
    Ok((rate, pct(&lat, 0.50), pct(&lat, 0.99)))
}

/// Percentile (in microseconds) of sorted nanosecond samples.
pub fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let d = std::env::temp_dir().join(format!("wal-compare-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            TempDir(d)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Writes `mib` MiB to region 1 in 64 x 4 KiB batches, the last one synced.
    fn write_mib(e: &RaftEngine, mib: u64) -> Res<()> {
        let entry = vec![7u8; 4096];
        let mut seq = 0u64;
        for call in 0..mib * 4 {
            let mut batch: Vec<Vec<u8>> = Vec::with_capacity(64);
            for _ in 0..64 {
                seq += 1;
                let mut b = entry.clone();
                b[..8].copy_from_slice(&seq.to_le_bytes());
                batch.push(b);
            }
            let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            e.append(0, &refs, call + 1 == mib * 4)?;
        }
        Ok(())
    }

    /// Under the best practice the compact-and-purge thread keeps raft-engine's log at about its
    /// purge threshold; by default nothing is ever purged. With 1 MiB files (threshold 2 MiB),
    /// 16 MiB written leaves 16 files or more by default and, within a generous bound, at most
    /// 3 with the best practice.
    #[test]
    fn raft_engine_best_practice_purges_and_default_does_not() -> Res<()> {
        const FILE: u64 = 1 << 20;
        let default_dir = TempDir::new("raft-default");
        let e = RaftEngine::open_sized(&default_dir.0, Practice::Default, Some(FILE))?;
        write_mib(&e, 16)?;
        std::thread::sleep(RaftEngine::PURGE_EVERY * 3);
        let used = e.engine.get_used_size() as u64;
        assert!(used >= 16 * FILE, "default practice: {used} bytes of log files after 16 MiB written");
        Box::new(e).close()?;

        let best_dir = TempDir::new("raft-best");
        let e = RaftEngine::open_sized(&best_dir.0, Practice::Best, Some(FILE))?;
        write_mib(&e, 16)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut used = e.engine.get_used_size() as u64;
        while used > 3 * FILE && Instant::now() < deadline {
            std::thread::sleep(RaftEngine::PURGE_EVERY);
            used = e.engine.get_used_size() as u64;
        }
        assert!(used <= 3 * FILE, "best practice: still {used} bytes of log files after 30 s");
        Box::new(e).close()?;
        Ok(())
    }
}
