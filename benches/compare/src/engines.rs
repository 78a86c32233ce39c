//! One adapter per engine behind a small trait, plus each engine's replay; the adapters are
//! `wal_engine.rs` (this engine), `raft_engine_engine.rs`, `okaywal_engine.rs`,
//! `raft_log_engine.rs` and `raw_engine.rs` (the raw loop, over a pre-written file or, as
//! `raw-fresh`, into fresh blocks).
//!
//! Every adapter is written against the engine's public API as a user would call it; the
//! durability caveats (what "durable" costs in each) and what each engine does under each
//! [`Practice`] are in `README.md`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::okaywal_engine::OkayWal;
use crate::raft_engine_engine::RaftEngine;
use crate::raft_log_engine::RaftLogEngine;
use crate::raw_engine::Raw;
use crate::wal_engine::WalEngine;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub const ENGINES: [&str; 6] = ["wal", "raft-engine", "okaywal", "raft-log", "raw", "raw-fresh"];

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
        "raw-fresh" => Box::new(Raw::open_fresh(dir)?),
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
