//! `sync`: the synchronous handle ([`wal::Wal`]) through every operation that changes what the
//! log holds.
//!
//! Ninety rounds, each one to ten appends (sometimes one user batch) and one `sync`, then an
//! `entry` line per appended LSN. Woven in, at fixed rounds so a seed always gives the same
//! script: the first open creates the log; segments of 64 KiB (the minimum) rotate about every
//! 60 entries, and every ninth round rotates on purpose; three truncations (`cut-begin`,
//! `truncate_after`, rewritten entries of the next generation in the same batch, sync, `cut`);
//! two epoch advances (sync, then `epoch`); two purges (`purge-begin`, `purge_before`, `purge`),
//! whose removed segments are set aside and recycled by the next rotations; a clean close and
//! reopen, and a reopen after `abandon` (a handle dropped without sync or seal, as a crash
//! leaves it in-process).

use crate::acks::{content, seeded, Ack, Acker, Rng};
use std::path::Path;
use wal::{Backend, Epoch, Lsn, Options, Wal};

const ROUNDS: u64 = 90;

fn options() -> Options {
    Options { segment_len_bytes: crate::SEGMENT_LEN, backend: Backend::Portable, ..Options::default() }
}

struct Run<'a> {
    dir: &'a Path,
    seed: u64,
    acker: &'a Acker,
    rng: Rng,
    wal: Option<Wal>,
    gen: u64,
    epoch: Epoch,
}

impl Run<'_> {
    fn wal(&mut self) -> Result<&mut Wal, String> {
        self.wal.as_mut().ok_or_else(|| "the log is not open".to_string())
    }

    fn open(&mut self) -> Result<(), String> {
        let (wal, _) =
            Wal::open(self.dir, options()).map_err(|e| format!("open {}: {e}", self.dir.display()))?;
        self.epoch = wal.epoch();
        self.wal = Some(wal);
        Ok(())
    }

    /// Appends `n` entries of the current generation (as one user batch or one by one) and
    /// returns their LSNs; nothing is durable yet.
    fn append(&mut self, n: u64) -> Result<Vec<u64>, String> {
        let (seed, gen, epoch) = (self.seed, self.gen, self.epoch);
        let as_batch = self.rng.below(4) == 0;
        let wal = self.wal()?;
        let first = wal.next_lsn().0;
        let lsns: Vec<u64> = (first..first + n).collect();
        if as_batch {
            let payloads: Vec<Vec<u8>> = lsns.iter().map(|&l| content(seed, l, gen)).collect();
            let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            let got = wal.append_batch(epoch, &refs).map_err(|e| format!("append_batch: {e}"))?;
            if got.0 != first {
                return Err(format!("append_batch gave LSN {} for {first}", got.0));
            }
        } else {
            for &l in &lsns {
                let got = wal.append(epoch, &content(seed, l, gen)).map_err(|e| format!("append: {e}"))?;
                if got.0 != l {
                    return Err(format!("append gave LSN {} for {l}", got.0));
                }
            }
        }
        Ok(lsns)
    }

    fn sync_and_ack(&mut self, lsns: &[u64]) -> Result<(), String> {
        self.wal()?.sync().map_err(|e| format!("sync: {e}"))?;
        for &lsn in lsns {
            self.acker.say(&Ack::Entry { lsn, gen: self.gen, seed: self.seed })?;
        }
        Ok(())
    }

    /// Cuts the last 1 to 15 entries (never below the first live one) and rewrites some.
    fn truncate(&mut self) -> Result<(), String> {
        let wal = self.wal()?;
        let (next, first) = (wal.next_lsn().0, wal.first_lsn().map_or(u64::MAX, |l| l.0));
        let live = next.saturating_sub(first);
        if first == u64::MAX || live < 2 {
            return Ok(());
        }
        let after = next - 1 - (1 + self.rng.below(live.min(16) - 1));
        self.acker.say(&Ack::CutBegin { after })?;
        let epoch = self.epoch;
        self.wal()?.truncate_after(epoch, Lsn(after)).map_err(|e| format!("truncate_after {after}: {e}"))?;
        self.gen += 1;
        let n = 1 + self.rng.below(4);
        let lsns = self.append(n)?;
        self.wal()?.sync().map_err(|e| format!("sync after truncate: {e}"))?;
        self.acker.say(&Ack::Cut { after, gen: self.gen })?;
        for &lsn in &lsns {
            self.acker.say(&Ack::Entry { lsn, gen: self.gen, seed: self.seed })?;
        }
        Ok(())
    }

    fn advance_epoch(&mut self) -> Result<(), String> {
        let new = Epoch(self.epoch.0 + 1 + self.rng.below(3));
        let wal = self.wal()?;
        wal.advance_epoch(new).map_err(|e| format!("advance_epoch {}: {e}", new.0))?;
        wal.sync().map_err(|e| format!("sync after advance_epoch: {e}"))?;
        self.epoch = new;
        self.acker.say(&Ack::Epoch { epoch: new.0 })
    }

    /// Purges below an LSN some 60 to 160 entries back (whole sealed segments only).
    fn purge(&mut self) -> Result<(), String> {
        let next = self.wal()?.next_lsn().0;
        let below = next.saturating_sub(60 + self.rng.below(100)).max(1);
        self.acker.say(&Ack::PurgeBegin { below })?;
        self.wal()?.purge_before(Lsn(below)).map_err(|e| format!("purge_before {below}: {e}"))?;
        self.acker.say(&Ack::Purge { below })
    }

    /// One to ten appends, one sync, their acknowledgements.
    fn round(&mut self) -> Result<(), String> {
        let n = 1 + self.rng.below(10);
        let lsns = self.append(n)?;
        self.sync_and_ack(&lsns)
    }

    fn close(mut self) -> Result<(), String> {
        self.wal.take().ok_or("the log is not open")?.close().map_err(|e| format!("close: {e}"))
    }

    fn reopen(&mut self, clean: bool) -> Result<(), String> {
        let wal = self.wal.take().ok_or("the log is not open")?;
        if clean {
            wal.close().map_err(|e| format!("close: {e}"))?;
        } else {
            wal.abandon();
        }
        self.open()
    }
}

pub fn run(dir: &Path, seed: u64, acker: &Acker) -> Result<(), String> {
    let mut r = Run { dir, seed, acker, rng: seeded(seed), wal: None, gen: 0, epoch: Epoch(0) };
    r.open()?;
    for round in 0..ROUNDS {
        match round {
            20 | 55 | 80 => r.truncate()?,
            30 | 70 => r.advance_epoch()?,
            40 | 75 => r.purge()?,
            45 => r.reopen(true)?,
            65 => r.reopen(false)?,
            _ if round % 9 == 8 => r.wal()?.rotate().map_err(|e| format!("rotate: {e}"))?,
            _ => {}
        }
        r.round()?;
    }
    r.close()
}

/// Rounds of a resumed run: enough for several rotations and one truncation after recovery.
const RESUME_ROUNDS: u64 = 40;

/// Carries on a log a power loss left (`run sync --resume`): the open is the recovery (a torn
/// tail cut, a half-made spare or recycled file dealt with) and every write after it lands on
/// what recovery left, which is what a second power loss then tests. New entries use the seed
/// `seed` and the highest generation among the live entries, so they are told apart from the
/// first run's and no acknowledged truncation of it is contradicted (a generation only grows).
pub fn resume(dir: &Path, seed: u64, acker: &Acker) -> Result<(), String> {
    let mut r = Run { dir, seed, acker, rng: seeded(seed), wal: None, gen: 0, epoch: Epoch(0) };
    r.open()?;
    let live = r
        .wal()?
        .replay()
        .and_then(|p| p.collect_entries())
        .map_err(|e| format!("replay after recovery: {e}"))?;
    r.gen = live.iter().filter_map(|(_, p)| crate::acks::decode(p)).map(|(_, _, g)| g).max().unwrap_or(0);
    for round in 0..RESUME_ROUNDS {
        match round {
            12 => r.truncate()?,
            25 => r.advance_epoch()?,
            _ if round % 7 == 6 => r.wal()?.rotate().map_err(|e| format!("rotate: {e}"))?,
            _ => {}
        }
        r.round()?;
    }
    r.close()
}
