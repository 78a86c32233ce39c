//! The seeded workload on the synchronous API, and the model of it the crash observer reads:
//! appends, batches, checkpoints, cuts, epochs, flushes, syncs, a snapshot and a purge.

use super::lock;
use super::model::model_state;
use super::SEG;
use crate::workload::history::{apply as apply_op, next_lsn_after, seeded, History, Op as HOp, Rng};
use crate::{MemState, MemStorage};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use wal::storage::Storage;
use wal::{Checkpoint, Epoch, Error, Lsn, Options, Wal};
use wal_state::snapshot::write_snapshot;
use wal_state::{EntryKind, Envelope};

/// What the observer needs of the workload at a crash point (updated by the workload between
/// log calls, never during one: the observer runs inside them).
#[derive(Debug)]
pub struct Model {
    pub(super) hist: History,
    pub(super) acked: usize,
    pub(super) staged: usize,
    pub(super) purging: bool,
    pub(super) phase: &'static str,
    /// A cut is staged and not yet synced: writes and syncs now are the suffix truncation's.
    pub(super) cut_pending: bool,
    pub(super) snapshots: Vec<(u64, Checkpoint)>,
}

/// A command for the key-value state machine, in the entry envelope.
pub(super) fn command(rng: &mut Rng, i: u64) -> Vec<u8> {
    let k = rng.below(13);
    let body = if rng.below(6) == 0 {
        format!("del k{k}")
    } else {
        let len = 100 + rng.below(2400) as usize;
        let v: String = (0..len).map(|j| (b'a' + ((i as usize * 7 + j * 13) % 26) as u8) as char).collect();
        format!("put k{k} {v}")
    };
    Envelope::encode(EntryKind::Command, None, body.as_bytes())
}

pub(super) fn opts(seed: u64) -> Options {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&seed.to_le_bytes());
    id[8] = 0x5e;
    Options { segment_len_bytes: SEG, prepare_in_background: false, log_id: Some(id), ..Options::default() }
}

/// How a workload runs.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub seed: u64,
    /// Split writes short (at seeded sector boundaries).
    pub short_writes: bool,
    /// Stop after this many steps (the error classes run shorter logs).
    pub steps: usize,
    /// Segments to reach before stopping.
    pub segments: usize,
    pub snapshot_and_purge: bool,
    /// Suffix truncations. Off where disk full may withdraw a batch: the model then finds what
    /// stayed from the log's next LSN, which a cut and a re-append of the same LSN in one
    /// withdrawn batch would make ambiguous.
    pub cuts: bool,
}

impl Plan {
    pub fn full(seed: u64) -> Plan {
        Plan {
            seed,
            short_writes: seed % 2 == 1,
            steps: 600,
            segments: 4,
            snapshot_and_purge: true,
            cuts: true,
        }
    }
    pub fn short(seed: u64) -> Plan {
        Plan {
            seed,
            short_writes: seed % 2 == 1,
            steps: 40,
            segments: 2,
            snapshot_and_purge: false,
            cuts: true,
        }
    }
}

/// How a workload ended.
#[derive(Debug)]
pub struct Ran {
    pub st: MemStorage,
    pub(super) hist: History,
    pub(super) acked: usize,
    pub(super) staged: usize,
    pub(super) purged: bool,
    pub(super) snapshots: Vec<(u64, Checkpoint)>,
    /// The first error a log call returned (with the log fenced or not), if any.
    pub error: Option<(Error, bool)>,
    pub stale_rejected: u64,
    /// After a fencing error: whether every later call was refused without a sync (or what
    /// was not).
    pub later_refused: Option<Result<(), String>>,
    /// The open (creating the log) succeeded.
    pub opened: bool,
    /// The failure came from `close` (which consumes the log: nothing to call after it).
    pub close_failed: bool,
    /// The state when the log reached its next-to-last segment (for stale sectors).
    pub mid: Option<MemState>,
}

/// Runs the seeded workload on `st` (whose faults the caller set). Stops at the first error a
/// log call returns when the log is fenced; otherwise the refused operation leaves the model,
/// as it left the log, and the workload goes on.
pub fn run_workload(st: &MemStorage, plan: &Plan, model: &Arc<Mutex<Model>>) -> Ran {
    let set = |f: &mut dyn FnMut(&mut Model)| f(&mut lock(model));
    let mut rng = seeded(plan.seed ^ 0x0077_6f72_6b6c_6f61);
    let mut ran = Ran {
        st: st.clone(),
        hist: History::new(),
        acked: 0,
        staged: 0,
        purged: false,
        snapshots: Vec::new(),
        error: None,
        stale_rejected: 0,
        later_refused: None,
        opened: false,
        close_failed: false,
        mid: None,
    };
    let (mut log, _) = match Wal::open_with(Arc::new(st.clone()), opts(plan.seed)) {
        Ok(l) => l,
        Err(e) => {
            let p = matches!(e, Error::Fenced { .. }) || !matches!(e, Error::DiskFull { .. });
            ran.error = Some((e, p));
            return ran;
        }
    };
    ran.opened = true;
    let mut hist = History::new();
    let mut acked = 0usize;
    let mut flushed = 0usize;
    let mut epoch = 0u64;
    let mut last_cp = 0u64;
    let mut snapshotted = false;
    let mut purging = false;
    let sync_model = |hist: &History, acked: usize, purging: bool, phase: &'static str| {
        set(&mut |md: &mut Model| {
            md.hist = hist.clone();
            md.acked = acked;
            md.staged = hist.len();
            md.purging = purging;
            md.phase = phase;
            let last_sync = hist.ops[acked..].iter().any(|o| matches!(o, HOp::Cut(_)));
            md.cut_pending = last_sync;
        })
    };
    for step in 0..plan.steps {
        if log.segment_count() >= plan.segments && step > 10 {
            break;
        }
        if ran.mid.is_none() && log.segment_count() >= plan.segments.saturating_sub(1).max(1) {
            ran.mid = Some(st.state());
        }
        let next = log.next_lsn().0;
        let before = hist.len();
        epoch = log.epoch().0;
        // Snapshot, then purge below it, once the log has three segments.
        if plan.snapshot_and_purge && !snapshotted && log.segment_count() >= 3 && next > 2 {
            snapshotted = true;
            sync_model(&hist, acked, purging, "sync");
            if let Err(e) = log.sync() {
                ran.error = Some((e, log.is_fenced()));
                break;
            }
            acked = hist.len();
            flushed = acked;
            let mut m = BTreeMap::new();
            hist.ops.iter().for_each(|o| apply_op(&mut m, o));
            let entries: Vec<(u64, Vec<u8>)> = m.into_iter().collect();
            let state = model_state(&entries);
            if let Some(l) = state.applied() {
                // Applied state: never cut below it (a cut only removes uncommitted entries).
                last_cp = last_cp.max(l.0);
                set(&mut |md: &mut Model| md.snapshots.push((l.0, state.checkpoint())));
                ran.snapshots.push((l.0, state.checkpoint()));
                sync_model(&hist, acked, purging, "snapshot");
                if let Err(e) = write_snapshot(st as &dyn Storage, &state, log.log_id()) {
                    ran.error = Some((e, log.is_fenced()));
                    continue;
                }
                purging = true;
                sync_model(&hist, acked, purging, "purge");
                match log.purge_before(Lsn(l.0 + 1)) {
                    Ok(r) => ran.purged |= !r.segments_removed.is_empty(),
                    Err(e) => {
                        let p = log.is_fenced();
                        ran.error = Some((e, p));
                        if p {
                            break;
                        }
                    }
                }
            }
            continue;
        }
        let r: Result<&'static str, Error> = match rng.below(100) {
            0..=54 => {
                let p = command(&mut rng, next);
                hist.push(HOp::Put(next, p.clone()), true);
                sync_model(&hist, acked, purging, "append");
                log.append(Epoch(epoch), &p).map(|_| "append")
            }
            55..=64 => {
                let n = 2 + rng.below(3);
                let ps: Vec<Vec<u8>> = (0..n).map(|i| command(&mut rng, next + i)).collect();
                for (i, p) in ps.iter().enumerate() {
                    hist.push(HOp::Put(next + i as u64, p.clone()), i as u64 + 1 == n);
                }
                sync_model(&hist, acked, purging, "batch");
                let refs: Vec<&[u8]> = ps.iter().map(Vec::as_slice).collect();
                log.append_batch(Epoch(epoch), &refs).map(|_| "batch")
            }
            65..=69 if next > 1 => {
                let mut m = BTreeMap::new();
                hist.ops.iter().for_each(|o| apply_op(&mut m, o));
                let entries: Vec<(u64, Vec<u8>)> = m.into_iter().collect();
                match entries.last().map(|e| e.0) {
                    Some(l) => {
                        last_cp = l;
                        let cp = model_state(&entries).checkpoint();
                        sync_model(&hist, acked, purging, "checkpoint");
                        log.checkpoint(Epoch(epoch), Lsn(l), &cp).map(|_| "checkpoint")
                    }
                    None => Ok("checkpoint"),
                }
            }
            70..=72 if plan.cuts && next > last_cp + 2 && next > 3 => {
                // A conflicting leader's cut, above the last checkpoint.
                let after = (next - 1 - rng.below(3)).max(last_cp);
                hist.push(HOp::Cut(after + 1), true);
                sync_model(&hist, acked, purging, "truncate");
                log.truncate_after(Epoch(epoch), Lsn(after)).map(|_| "truncate")
            }
            73..=74 => {
                sync_model(&hist, acked, purging, "epoch");
                let r = log.advance_epoch(Epoch(epoch + 1));
                epoch += u64::from(r.is_ok());
                r.map(|_| "epoch")
            }
            75..=76 if epoch > 0 => {
                // A stale writer: Rejected, no LSN consumed, nothing staged.
                match log.append(Epoch(epoch - 1), b"REJECTED stale writer") {
                    Err(Error::StaleEpoch { .. }) if log.next_lsn().0 == next => {
                        ran.stale_rejected += 1;
                        Ok("stale")
                    }
                    other => panic!("seed {}: a stale append gave {other:?}", plan.seed),
                }
            }
            77..=84 => {
                sync_model(&hist, acked, purging, "flush");
                log.flush().map(|_| "flush")
            }
            _ => {
                sync_model(&hist, acked, purging, "sync");
                log.sync().map(|_| "sync")
            }
        };
        match r {
            Ok("sync") => {
                acked = hist.len();
                flushed = acked;
            }
            Ok("flush") => flushed = hist.len(),
            Ok(_) => {}
            Err(e) => {
                let fenced = log.is_fenced();
                if !fenced {
                    // Refused (disk full): what the call staged is gone; a batch write that ran
                    // out of space also withdrew the rest of the unwritten batch, while a sync
                    // refused at a rotation leaves it staged. The log's next LSN says which.
                    // (A batch also goes out when an append fills it or rotates, so the
                    // withdrawn part may start after the last explicit flush: the latest point
                    // that fits.)
                    let now = log.next_lsn().0;
                    let keep = [hist.len(), before]
                        .into_iter()
                        .chain((acked..=hist.len()).rev())
                        .find(|&k| hist.ok[k] && next_lsn_after(&hist.ops[..k]) == now)
                        .unwrap_or_else(|| {
                            panic!("seed {}: after {e} the log's next LSN {now} fits no model", plan.seed)
                        });
                    hist.truncate(keep);
                    flushed = flushed.min(keep);
                }
                let first = ran.error.is_none();
                if first {
                    ran.error = Some((e, fenced));
                }
                sync_model(&hist, acked, purging, "refused");
                if fenced {
                    break;
                }
            }
        }
    }
    if ran.error.as_ref().is_none_or(|e| !e.1) {
        sync_model(&hist, acked, purging, "close");
        match log.close() {
            Ok(()) => acked = hist.len(),
            Err(e) => {
                if ran.error.is_none() {
                    // Disk full at a close (no room for wal.close or wal.meta's replacement)
                    // is an error like any disk full: the sealed segment holds everything.
                    let fenced = !matches!(e, Error::DiskFull { .. });
                    ran.error = Some((e, fenced));
                    ran.close_failed = true;
                }
            }
        }
    } else {
        // Fenced (I6): every later call fails, and nothing is retried into a success.
        let syncs = st.faults().syncs_seen;
        let calls = [
            ("append", log.append(Epoch(epoch), b"after the fence").map(|_| ())),
            ("sync", log.sync()),
            ("flush", log.flush()),
        ];
        let wrong: Vec<String> = calls
            .into_iter()
            .filter(|(_, r)| !matches!(r, Err(Error::Fenced { .. })))
            .map(|(c, r)| format!("{c} gave {r:?}"))
            .collect();
        let retried = st.faults().syncs_seen - syncs;
        ran.later_refused = Some(if wrong.is_empty() && retried == 0 {
            Ok(())
        } else {
            Err(format!("after the fence: {wrong:?}, {retried} syncs issued"))
        });
        log.abandon();
    }
    sync_model(&hist, acked, purging, "after");
    ran.hist = hist;
    ran.acked = acked;
    ran.staged = ran.hist.len();
    ran.purged |= purging;
    ran
}

pub fn new_model() -> Arc<Mutex<Model>> {
    Arc::new(Mutex::new(Model {
        hist: History::new(),
        acked: 0,
        staged: 0,
        purging: false,
        phase: "open",
        cut_pending: false,
        snapshots: Vec::new(),
    }))
}
