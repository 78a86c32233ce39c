//! raft-log 0.4.6 (the log store by openraft's author: openraft's own examples and databend-meta
//! keep their Raft logs in it), through its public API as its documentation shows it.
//!
//! It is a Raft log, not a general write-ahead log: every entry has a log id `(term, index)`
//! with gap-free indexes, the payload is an owned value (`Vec<u8>` here: a copy per entry, which
//! its API requires), and writes are `&mut self`, so writers share it behind a mutex, as an
//! openraft log store does. An append is handed to its flush worker by `flush(sync, callback)`;
//! a durable append passes `sync = true` and waits, outside the mutex, for its callback, so that
//! concurrent writers' flushes are batched by the worker into one fsync (its group commit). An
//! unsynced append passes `sync = false` (written to the OS, durable at the next sync flush).
//!
//! Options: [`Config::new`], its defaults (chunk files closed at 1 Mi records or 1 GiB; the
//! flush worker waits up to 1 ms to batch before it syncs, at most 2,048 requests a batch;
//! 100,000 entries and 1 GiB of payload cached in memory).
//! [`Practice::Best`] purges up to the last appended entry every 100 ms and flushes with
//! `sync = true`, the only flush that removes purged chunks.

use crate::engines::{check, Engine, Every, Practice, Replayed, Res};
use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::{Config, RaftLog, Types};
use std::io;
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The type parameters raft-log asks for: log id and vote as `(term, index)` and
/// `(term, node)`, payloads as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bytes;

impl Types for Bytes {
    type LogId = (u64, u64);
    type LogPayload = Vec<u8>;
    type Vote = (u64, u64);
    type Callback = SyncSender<io::Result<()>>;
    type UserData = String;

    fn log_index(log_id: &Self::LogId) -> u64 {
        log_id.1
    }

    fn payload_size(payload: &Self::LogPayload) -> u64 {
        payload.len() as u64
    }
}

/// The term every entry of the comparison is written in.
const TERM: u64 = 1;

struct Log {
    log: RaftLog<Bytes>,
    /// The index the next entry gets.
    next: u64,
}

pub struct RaftLogEngine {
    log: Arc<Mutex<Log>>,
    purger: Option<Every>,
}

fn lock(m: &Mutex<Log>) -> std::sync::MutexGuard<'_, Log> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RaftLogEngine {
    /// How often [`Practice::Best`] purges.
    pub const PURGE_EVERY: Duration = Duration::from_millis(100);

    pub fn open(dir: &Path, practice: Practice) -> Res<RaftLogEngine> {
        let cfg = Arc::new(Config::new(dir.display()));
        let log = RaftLog::<Bytes>::open(cfg)?;
        let next = <Bytes as Types>::next_log_index(log.log_state().last());
        let log = Arc::new(Mutex::new(Log { log, next }));
        let purger = match practice {
            Practice::Default => None,
            Practice::Best => {
                let l = log.clone();
                Some(Every::spawn("compare-raft-log-purge", Self::PURGE_EVERY, move || {
                    let mut g = lock(&l);
                    let Some(last) = g.next.checked_sub(1) else { return true };
                    g.log.purge((TERM, last)).is_ok() && g.log.flush(true, None).is_ok()
                })?)
            }
        };
        Ok(RaftLogEngine { log, purger })
    }

    /// Opens the log in `dir` as after a restart (its open replays the whole log to rebuild the
    /// index) and reads every entry.
    pub fn replay(dir: &Path, len: usize) -> Res<Replayed> {
        let t = Instant::now();
        let log = RaftLog::<Bytes>::open(Arc::new(Config::new(dir.display())))?;
        let open_s = t.elapsed().as_secs_f64();
        let mut out = Replayed { open_s, ..Replayed::default() };
        for item in log.read(0, u64::MAX) {
            let (_, payload) = item?;
            out.entries += 1;
            check(out.entries, &payload, len)?;
            out.bytes += payload.len() as u64;
        }
        Ok(out)
    }
}

impl Engine for RaftLogEngine {
    fn append(&self, _stream: u32, entries: &[&[u8]], durable: bool) -> Res<()> {
        let rx = {
            let mut g = lock(&self.log);
            let first = g.next;
            g.next += entries.len() as u64;
            let ids = (first..).map(|i| (TERM, i));
            g.log.append(ids.zip(entries.iter().map(|e| e.to_vec())))?;
            if durable {
                let (tx, rx) = sync_channel(1);
                g.log.flush(true, Some(tx))?;
                Some(rx)
            } else {
                g.log.flush(false, None)?;
                None
            }
        };
        if let Some(rx) = rx {
            rx.recv().map_err(|_| "raft-log's flush worker stopped")??;
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        let RaftLogEngine { log, purger } = *self;
        if let Some(p) = purger {
            p.stop()?;
        }
        let mut g = lock(&log);
        let (tx, rx) = sync_channel(1);
        g.log.flush(true, Some(tx))?;
        drop(g);
        rx.recv().map_err(|_| "raft-log's flush worker stopped")??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("wal-compare-raft-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn entry(seq: u64, len: usize) -> Vec<u8> {
        let mut e = vec![0x5au8; len];
        e[..8].copy_from_slice(&seq.to_le_bytes());
        e
    }

    /// Entries appended one call at a time (synced and not) and in groups come back from a
    /// reopened log in order, every one, with its bytes; the log's indexes are gap-free.
    #[test]
    fn what_was_appended_is_replayed_in_order() -> Res<()> {
        let dir = temp("replay");
        let e = RaftLogEngine::open(&dir, Practice::Default)?;
        let mut seq = 0;
        for call in 0..200u64 {
            let group: Vec<Vec<u8>> = (0..1 + call % 4)
                .map(|_| {
                    seq += 1;
                    entry(seq, 100)
                })
                .collect();
            let refs: Vec<&[u8]> = group.iter().map(Vec::as_slice).collect();
            e.append(0, &refs, call % 3 == 0)?;
        }
        Box::new(e).close()?;
        let r = RaftLogEngine::replay(&dir, 100)?;
        assert_eq!((r.entries, r.bytes), (seq, seq * 100));
        // Reopened for writing, it continues after the last index.
        let e = RaftLogEngine::open(&dir, Practice::Default)?;
        assert_eq!(lock(&e.log).next, seq);
        Box::new(e).close()?;
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    /// The best practice purges up to the last entry within a few periods; the default never.
    #[test]
    fn best_practice_purges_and_default_does_not() -> Res<()> {
        for (practice, purges) in [(Practice::Default, false), (Practice::Best, true)] {
            let dir = temp(practice.id());
            let e = RaftLogEngine::open(&dir, practice)?;
            for seq in 1..=100 {
                e.append(0, &[&entry(seq, 64)], seq == 100)?;
            }
            let purged = || lock(&e.log).log.log_state().purged().copied();
            if purges {
                let deadline = Instant::now() + Duration::from_secs(30);
                while purged().is_none() {
                    assert!(Instant::now() < deadline, "nothing purged within 30 s");
                    std::thread::sleep(RaftLogEngine::PURGE_EVERY);
                }
            } else {
                std::thread::sleep(RaftLogEngine::PURGE_EVERY * 3);
            }
            let purged = purged();
            assert_eq!(purged.is_some(), purges, "{practice:?}: purged {purged:?}");
            Box::new(e).close()?;
            std::fs::remove_dir_all(&dir)?;
        }
        Ok(())
    }
}
