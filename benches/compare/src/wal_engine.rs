//! The adapter of this engine (`wal`): every call into the `wal` crate's API is in this file, so
//! that a change of that API touches the comparison here only (`main.rs` sees [`WalEngine`] and
//! [`Pending`], never a `wal::` type).
//!
//! Appends go through the I/O thread (`AsyncWal`), each caller waiting for its own ticket. Under
//! [`Practice::Best`] a maintenance thread purges every sealed segment every
//! [`WalEngine::PURGE_EVERY`], so that the log recycles their files; under
//! [`Practice::Default`] nothing is ever purged (the log grows by fresh segments).

use crate::engines::{check, Engine, Every, Practice, Replayed, Res};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct WalEngine {
    log: Arc<wal::AsyncWal>,
    /// The purge thread of [`Practice::Best`].
    purger: Option<Every>,
}

/// A durable append in flight (the pipelined workloads), waited for with [`Pending::wait`].
pub struct Pending(wal::Ticket);

impl Pending {
    pub fn wait(self) -> Res<()> {
        self.0.wait()?;
        Ok(())
    }
}

impl WalEngine {
    /// A new log has writer epoch 0.
    const EPOCH: wal::Epoch = wal::Epoch(0);

    /// How often [`Practice::Best`] purges what the sealed segments hold.
    pub const PURGE_EVERY: Duration = Duration::from_millis(100);

    /// Opens (or creates) a log in `dir` with the default `Options` and `AsyncOptions` (but for
    /// the `WAL_SEGMENT_FILL`, `WAL_RECYCLE` and `WAL_CACHED_LOG_BYTES` experiments); with [`Practice::Best`] a thread
    /// purges every sealed segment every [`Self::PURGE_EVERY`], as a controller that snapshots
    /// continuously would.
    pub fn open(dir: &Path, practice: Practice) -> Res<WalEngine> {
        std::fs::create_dir_all(dir)?;
        let mut opts = wal::Options::default();
        if let Some(fill) = segment_fill()? {
            opts.segment_fill = fill;
        }
        if let Ok(n) = std::env::var("WAL_RECYCLE") {
            opts.recycle_segments = n.parse().map_err(|_| format!("WAL_RECYCLE={n}: a count"))?;
        }
        if let Ok(n) = std::env::var("WAL_CACHED_LOG_BYTES") {
            opts.cached_log_bytes = match n.as_str() {
                "max" => u64::MAX,
                _ => n.parse().map_err(|_| format!("WAL_CACHED_LOG_BYTES={n}: a byte count or max"))?,
            };
        }
        let (log, _report) = wal::Wal::open(dir, opts)?;
        let log = Arc::new(wal::AsyncWal::start(log, wal::AsyncOptions::default())?);
        let purger = match practice {
            Practice::Default => None,
            Practice::Best => {
                let l = log.clone();
                // Only sealed segments go (the one taking appends never does).
                Some(Every::spawn("compare-wal-purge", Self::PURGE_EVERY, move || {
                    l.purge_before(l.next_lsn()).is_ok()
                })?)
            }
        };
        Ok(WalEngine { log, purger })
    }

    /// Enqueues one durable entry and returns without waiting (the pipelined workloads).
    pub fn submit(&self, entry: Vec<u8>) -> Res<Pending> {
        Ok(Pending(self.log.append(Self::EPOCH, entry, wal::Durability::Durable)?))
    }

    /// Opens the log in `dir` as after a restart (default options) and iterates every entry.
    pub fn replay(dir: &Path, len: usize) -> Res<Replayed> {
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
    /// runs the round when the I/O thread is idle, as the peers' blocking writers do). The
    /// entries go in borrowed, as `Wal::append_batch` takes them: copied once into buffers the
    /// I/O thread hands back (several as one atomic group).
    fn append(&self, _stream: u32, entries: &[&[u8]], durable: bool) -> Res<()> {
        if durable {
            self.log.append_wait(Self::EPOCH, entries)?.wait()?;
        } else {
            self.log.append_with(Self::EPOCH, entries, wal::Durability::Written, None)?;
        }
        Ok(())
    }

    /// Every entry but the last without a ticket, from one reused buffer (`append_untracked`
    /// copies it into a pooled buffer); the last one `Durable` with a ticket, whose sync covers
    /// everything before it. A fence on the way fails the next append or that ticket.
    fn bulk(&self, n: u64, next: &mut dyn FnMut(u64, &mut Vec<u8>), lat: &mut Vec<u64>) -> Res<()> {
        let mut e = Vec::new();
        for seq in 1..=n {
            next(seq, &mut e);
            let t = Instant::now();
            if seq == n {
                self.log.append(Self::EPOCH, e.clone(), wal::Durability::Durable)?.wait()?;
            } else {
                self.log.append_untracked(Self::EPOCH, &e, wal::Durability::Written)?;
            }
            lat.push(t.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    fn close(self: Box<Self>) -> Res<()> {
        let WalEngine { log, purger } = *self;
        if let Some(p) = purger {
            p.stop()?;
        }
        let log = Arc::try_unwrap(log).map_err(|_| "the log is still shared")?;
        Ok(log.close()?)
    }
}

/// `WAL_SEGMENT_FILL=zeros|reserved|adaptive` (unset: the engine's default): how this engine's
/// segments get their zeros, to measure what a choice costs or saves.
fn segment_fill() -> Res<Option<wal::SegmentFill>> {
    Ok(match std::env::var("WAL_SEGMENT_FILL").as_deref() {
        Err(_) => None,
        Ok("adaptive") => Some(wal::SegmentFill::Adaptive),
        Ok("zeros") => Some(wal::SegmentFill::Zeros),
        Ok("reserved") => Some(wal::SegmentFill::Reserved),
        Ok(other) => return Err(format!("WAL_SEGMENT_FILL={other}: zeros, reserved or adaptive").into()),
    })
}
