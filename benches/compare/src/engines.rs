//! One adapter per engine behind a small trait, plus each engine's replay.
//!
//! Every adapter is written against the engine's public API as a user would call it; the
//! durability caveats (what "durable" costs in each) are in `README.md`.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub const ENGINES: [&str; 4] = ["wal", "raft-engine", "okaywal", "raw"];

/// How a log is opened for a write workload.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Synced workloads: each engine in its steady state (okaywal recycles segments, the raw
    /// loop wraps around a preallocated file of `raw_bytes`).
    Synced { raw_bytes: u64 },
    /// The bulk load that the replays read back: nothing may be dropped, so okaywal never
    /// checkpoints and the raw file holds `bytes` of records without wrapping.
    Bulk { bytes: u64 },
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
        "wal" => Box::new(WalEngine::open(dir, matches!(mode, Mode::Synced { .. }))?),
        "raft-engine" => Box::new(RaftEngine::open(dir)?),
        "okaywal" => Box::new(OkayWal::open(dir, mode)?),
        "raw" => Box::new(match mode {
            Mode::Synced { raw_bytes } => Raw::open(dir, raw_bytes, true)?,
            Mode::Bulk { bytes } => Raw::open(dir, bytes, false)?,
        }),
        other => return Err(format!("unknown engine {other}").into()),
    })
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
fn check(seq_expected: u64, payload: &[u8], len: usize) -> Res<()> {
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
        "raw" => Raw::replay(dir, len)?,
        other => return Err(format!("unknown engine {other}").into()),
    };
    if out.entries != n {
        return Err(format!("{engine} replay found {} entries, {n} were written", out.entries).into());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// wal (this engine): the I/O thread, each caller waiting for its own ticket.

pub struct WalEngine {
    log: Arc<wal::AsyncWal>,
    /// The purger thread of the synced workloads; dropping the sender stops it.
    purger: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

impl WalEngine {
    /// A new log has writer epoch 0.
    const EPOCH: wal::Epoch = wal::Epoch(0);

    /// How often the synced workloads' log purges what its sealed segments hold.
    const PURGE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

    /// Opens a log; with `purge_behind` (the synced workloads, in their steady state like the
    /// peers': okaywal checkpoints and recycles, the raw loop wraps) a thread purges every sealed
    /// segment every [`Self::PURGE_EVERY`], as a controller that snapshots continuously would,
    /// so that the log recycles their files (`WAL_PURGE=0` turns it off, to compare).
    pub fn open(dir: &Path, purge_behind: bool) -> Res<WalEngine> {
        std::fs::create_dir_all(dir)?;
        let mut opts = wal::Options {
            segment_len_bytes: 64 << 20,
            segment_fill: segment_fill()?,
            ..wal::Options::default()
        };
        if let Ok(n) = std::env::var("WAL_RECYCLE") {
            opts.recycle_segments = n.parse().map_err(|_| format!("WAL_RECYCLE={n}: a count"))?;
        }
        let (log, _report) = wal::Wal::open(dir, opts)?;
        let log = Arc::new(wal::AsyncWal::start(log, wal::AsyncOptions::default())?);
        let purge_behind = purge_behind && std::env::var("WAL_PURGE").as_deref() != Ok("0");
        let purger = if purge_behind {
            let (stop, stopped) = std::sync::mpsc::channel::<()>();
            let l = log.clone();
            let h = std::thread::Builder::new().name("compare-purge".into()).spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Self::PURGE_EVERY)
                {
                    // Only sealed segments go (the one taking appends never does).
                    if l.purge_before(l.next_lsn()).is_err() {
                        return;
                    }
                }
            })?;
            Some((stop, h))
        } else {
            None
        };
        Ok(WalEngine { log, purger })
    }

    /// Enqueues one entry and returns its ticket without waiting (the pipelined workloads).
    pub fn submit(&self, entry: Vec<u8>) -> Res<wal::Ticket> {
        Ok(self.log.append(Self::EPOCH, entry, wal::Durability::Durable)?)
    }

    fn replay(dir: &Path, len: usize) -> Res<Replayed> {
        let t = Instant::now();
        let opts = wal::Options { create: false, ..wal::Options::default() };
        let (log, _report) = wal::Wal::open(dir, opts)?;
        let open_s = t.elapsed().as_secs_f64();
        let mut out = Replayed { open_s, ..Replayed::default() };
        let mut r = log.replay()?;
        while let Some(item) = r.next() {
            let item = item?;
            if item.kind == wal::ItemKind::Entry {
                out.entries += 1;
                check(out.entries, item.payload, len)?;
                out.bytes += item.payload.len() as u64;
            }
        }
        drop(r);
        drop(log);
        Ok(out)
    }
}

impl Engine for WalEngine {
    /// A durable append waits at once, so it goes through `append_wait` (the caller's thread
    /// runs the round when the I/O thread is idle, as the peers' blocking writers do).
    fn append(&self, _stream: u32, entries: &[&[u8]], durable: bool) -> Res<()> {
        let payload = match entries {
            [one] => wal::Payload::One(one.to_vec()),
            many => wal::Payload::Group(many.iter().map(|e| e.to_vec()).collect()),
        };
        if durable {
            self.log.append_wait(Self::EPOCH, payload)?.wait()?;
        } else {
            self.log.append_with(Self::EPOCH, payload, wal::Durability::Written, None)?;
        }
        Ok(())
    }

    /// Hands each entry's buffer to the log (its API takes ownership: no copy).
    fn bulk(&self, n: u64, next: &mut dyn FnMut(u64, &mut Vec<u8>), lat: &mut Vec<u64>) -> Res<()> {
        for seq in 1..=n {
            let mut e = Vec::new();
            next(seq, &mut e);
            let d = if seq == n { wal::Durability::Durable } else { wal::Durability::Written };
            let t = Instant::now();
            let ticket = self.log.append(Self::EPOCH, e, d)?;
            if seq == n {
                ticket.wait()?;
            }
            lat.push(t.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        let WalEngine { log, purger } = *self;
        if let Some((stop, h)) = purger {
            drop(stop);
            h.join().map_err(|_| "the purger thread panicked")?;
        }
        let log = Arc::try_unwrap(log).map_err(|_| "the log is still shared")?;
        Ok(log.close()?)
    }
}

/// `WAL_SEGMENT_FILL=zeros|reserved|adaptive` (default: the engine's default, adaptive): how
/// this engine's segments get their zeros, to measure what the adaptive choice costs or saves.
fn segment_fill() -> Res<wal::SegmentFill> {
    Ok(match std::env::var("WAL_SEGMENT_FILL").as_deref() {
        Err(_) | Ok("adaptive") => wal::SegmentFill::Adaptive,
        Ok("zeros") => wal::SegmentFill::Zeros,
        Ok("reserved") => wal::SegmentFill::Reserved,
        Ok(other) => return Err(format!("WAL_SEGMENT_FILL={other}: zeros, reserved or adaptive").into()),
    })
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
    engine: raft_engine::Engine,
}

impl RaftEngine {
    fn config(dir: &Path) -> raft_engine::Config {
        raft_engine::Config {
            dir: dir.to_string_lossy().into_owned(),
            // Every engine writes the bytes it is given: no compression.
            batch_compression_threshold: raft_engine::ReadableSize(0),
            ..raft_engine::Config::default()
        }
    }

    fn open(dir: &Path) -> Res<RaftEngine> {
        Ok(RaftEngine { engine: raft_engine::Engine::open(Self::config(dir))? })
    }

    fn replay(dir: &Path, len: usize) -> Res<Replayed> {
        let t = Instant::now();
        let engine = raft_engine::Engine::open(Self::config(dir))?;
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
        drop(self.engine);
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

/// The log manager: checkpoints are instant (no state to apply) in the synced workloads; a
/// replay refuses them so that the recovered segments stay for the next replay.
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
        if let Mode::Bulk { .. } = mode {
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
