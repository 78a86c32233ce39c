//! okaywal 0.3.1: an entry is a sequence of chunks; commit flushes and fdatasyncs.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::engines::{check, Engine, Mode, Replayed, Res};

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
    pub fn open(dir: &Path, mode: Mode) -> Res<OkayWal> {
        let mut cfg = okaywal::Configuration::default_for(dir);
        if let Mode::Kept { .. } = mode {
            cfg = cfg.checkpoint_after_bytes(u64::MAX);
        }
        Ok(OkayWal { wal: cfg.open(Manager { replay: None })? })
    }

    pub fn replay(dir: &Path, len: usize) -> Res<Replayed> {
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
