//! raft-engine 0.4.2: entries are protobuf messages with a gap-free index per region.

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engines::{check, Engine, Every, Practice, Replayed, Res};

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

    pub fn open(dir: &Path, practice: Practice) -> Res<RaftEngine> {
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

    pub fn replay(dir: &Path, len: usize) -> Res<Replayed> {
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
