//! The one oracle every case is checked by: the image a restart finds scans with an allowed
//! verdict, holds a state the model allows, and replays CLEAN through the apply seam.

use super::model::{model_state, Candidate};
use super::SEG;
use crate::workload::kv::Kv;
use crate::MemStorage;
use std::sync::Arc;
use wal::{Checkpoint, CrcVerdict, Durability, Error, Lsn, Options, RecoveryMode, Wal};
use wal_state::snapshot::{list_snapshots, read_snapshot};
use wal_state::{Applier, Replayer};

/// Verdicts a crash image may have when every unsynced sector is new or old.
pub(super) const ZERO: &[CrcVerdict] = &[CrcVerdict::Ok, CrcVerdict::TornTail];
/// Verdicts a crash image may have when unsynced sectors may also be garbage.
pub(super) const GARBAGE: &[CrcVerdict] = &[CrcVerdict::Ok, CrcVerdict::TornTail, CrcVerdict::CorruptTail];

/// One oracle for every case (docs/testing.md, the fault sweep).
#[derive(Debug)]
pub struct Oracle<'a> {
    /// The states the log may hold; the first is everything acknowledged.
    pub candidates: &'a [Candidate],
    /// Verdicts this fault allows.
    pub allow: &'a [CrcVerdict],
    /// A prefix purge had started: the recovered log may begin later, its state coming from a
    /// snapshot.
    pub purging: bool,
    /// Snapshots written so far: (LSN, the state's checkpoint).
    pub snapshots: &'a [(u64, Checkpoint)],
    /// Also append, close and reopen after recovery.
    pub carry_on: bool,
}

/// What a passing check saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub verdict: Option<CrcVerdict>,
    pub acked: u64,
    pub checkpoints: u64,
}

impl Oracle<'_> {
    /// Checks the image `img` a restart finds. `Err` says what broke.
    pub fn check(&self, img: &MemStorage) -> Result<Seen, String> {
        let acked = &self.candidates[0];
        let scan = match wal::scan_log(img, true) {
            Err(Error::NotFound(_)) if acked.entries.is_empty() => return Ok(Seen::default()),
            Err(e) => return Err(format!("the scan failed: {e}")),
            Ok(s) => s,
        };
        if !self.allow.contains(&scan.verdict) {
            return Err(format!(
                "verdict {} is not one of {:?}: {:?}",
                scan.verdict.as_str(),
                self.allow,
                scan.damage
            ));
        }
        // Every snapshot under its final name is whole and holds the state it was taken of.
        let snaps = list_snapshots(img).map_err(|e| e.to_string())?;
        let mut bases = Vec::new();
        for (lsn, name) in &snaps {
            let (a, _) =
                read_snapshot::<Kv>(img, name).map_err(|e| format!("snapshot {name} unreadable: {e}"))?;
            let want = self.snapshots.iter().find(|s| Some(Lsn(s.0)) == *lsn).map(|s| s.1);
            if want != Some(a.checkpoint()) {
                return Err(format!("snapshot {name} does not hold the state it was taken of"));
            }
            bases.push(a);
        }
        let writer = scan.verdict != CrcVerdict::CorruptTail;
        let opts = Options {
            segment_len_bytes: SEG,
            recovery: if writer { RecoveryMode::TruncateTornTail } else { RecoveryMode::Salvage },
            prepare_in_background: false,
            ..Options::default()
        };
        let (log, _) =
            Wal::open_with(Arc::new(img.clone()), opts.clone()).map_err(|e| format!("open: {e}"))?;
        let got =
            log.replay().map_err(|e| e.to_string())?.collect_entries().map_err(|e| format!("replay: {e}"))?;
        // The recovered entries: a state between the acknowledged and the staged one (exactly,
        // for a writer; a prefix that keeps everything acknowledged, for a salvage read). With a
        // purge under way the log may start later; the state then comes from a snapshot.
        // (An empty log after a purge starts at its next LSN: its state is all in a snapshot.)
        let from = got.first().map_or(log.next_lsn().0, |e| e.0);
        let tail = |c: &Candidate| -> Vec<(u64, Vec<u8>)> {
            if self.purging {
                c.entries.iter().filter(|e| e.0 >= from).cloned().collect()
            } else {
                c.entries.clone()
            }
        };
        let fits = |c: &Candidate| {
            let t = tail(c);
            if writer {
                return t == got;
            }
            let keep = acked.entries.iter().zip(&c.entries).take_while(|(a, b)| a == b).count();
            let keep = tail(&Candidate::new(c.entries[..keep].to_vec())).len();
            got.len() >= keep && t.starts_with(&got)
        };
        let Some(c) = self.candidates.iter().find(|c| fits(c)) else {
            let first_diff = tail(acked).iter().zip(&got).find(|(a, b)| a != b).map(|(a, _)| a.0);
            return Err(format!(
                "recovered {} entries ({:?}..{:?}), not a state between the acknowledged ({} entries, last {:?}) \
                 and the staged ones ({} states); first LSN unlike the acknowledged state: {first_diff:?}",
                got.len(),
                got.first().map(|e| e.0),
                got.last().map(|e| e.0),
                acked.entries.len(),
                acked.entries.last().map(|e| e.0),
                self.candidates.len(),
            ));
        };
        let acked_here = acked.entries.iter().filter(|e| got.contains(e)).count() as u64;
        // Replay through the apply seam: every checkpoint matches (CLEAN), and the state is the
        // model's for the recovered entries (for a salvage read, the prefix read).
        let first_model = c.entries.first().map_or(u64::MAX, |e| e.0);
        let start = if from > first_model && self.purging {
            let base = bases
                .into_iter()
                .filter(|a| a.applied().is_some_and(|l| l.0 + 1 >= from))
                .min_by_key(|a| a.applied())
                .ok_or_else(|| {
                    format!("the log starts at LSN {from} but no snapshot covers what was purged")
                })?;
            base
        } else {
            Applier::new(Kv::default(), 1024)
        };
        let from_lsn = start.applied().map(|l| Lsn(l.0 + 1));
        let mut r = Replayer::new(start);
        let mut it = log.replay_from(from_lsn, Durability::Written).map_err(|e| e.to_string())?;
        r.run(&mut it).map_err(|e| format!("replay through the seam: {e}"))?;
        let (applier, report) = r.finish();
        if let Some(d) = &report.divergence {
            return Err(format!("DIVERGENT (not CLEAN): {d:?}"));
        }
        if let Some(u) = &report.unsupported {
            return Err(format!("unsupported: {u}"));
        }
        let want = if writer {
            c.state()
        } else {
            // The salvaged prefix (on top of the snapshot, when the replay started from one).
            let upto = got.last().map(|e| e.0).max(report.base.map(|b| b.0)).unwrap_or(0);
            let prefix: Vec<_> = c.entries.iter().filter(|e| e.0 <= upto).cloned().collect();
            model_state(&prefix).checkpoint()
        };
        if applier.checkpoint() != want {
            return Err("the replayed state is not the model's".into());
        }
        if self.carry_on && writer {
            let mut log = log;
            let at = log
                .append(log.epoch(), b"after recovery")
                .map_err(|e| format!("append after recovery: {e}"))?;
            log.close().map_err(|e| format!("close after recovery: {e}"))?;
            let (log, rep) =
                Wal::open_with(Arc::new(img.clone()), opts).map_err(|e| format!("reopen: {e}"))?;
            if rep.verdict != CrcVerdict::Ok {
                return Err(format!("not OK after recovery and a clean close: {:?}", rep.damage));
            }
            let again =
                log.replay().map_err(|e| e.to_string())?.collect_entries().map_err(|e| e.to_string())?;
            if again.last() != Some(&(at.0, b"after recovery".to_vec())) || again.len() != got.len() + 1 {
                return Err("the entry appended after recovery did not survive a reopen".into());
            }
            log.abandon();
        }
        Ok(Seen { verdict: Some(scan.verdict), acked: acked_here, checkpoints: report.checkpoints_checked })
    }
}
