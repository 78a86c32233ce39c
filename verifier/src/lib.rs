//! Read-only verification of a `wal` log directory: the CRC verdict of docs/invariants.md with where the
//! damage is, and statistics. It never writes, reads with `pread` (never a map), streams each
//! segment through one reused window of about 1 MiB (a damaged segment is read whole, once, to
//! classify the damage: only its non-zero pages take memory), and shares the engine's walker and decision table rather than having a
//! second decoder.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! # let (mut log, _) = wal::Wal::open(dir.path(), wal::Options { segment_len_bytes: 65536, ..Default::default() }).unwrap();
//! # log.append(wal::Epoch(0), b"x").unwrap();
//! # log.close().unwrap();
//! let report = verifier::verify(dir.path(), &verifier::VerifyOptions::default(), &mut |_| {});
//! assert_eq!(report.crc_word(), "OK");
//! assert_eq!(report.state_word(), "NOT_CHECKED");
//! assert_eq!(report.exit_code(), 0);
//! ```
#![forbid(unsafe_code)]

pub mod compare;
pub mod exit;
mod fused;
pub mod pread;
pub mod report;
pub mod state;

pub use fused::verify_with_state;
pub use report::{Report, Stats};

use pread::ReadOnlyDir;
use std::path::Path;
use wal::format::{Kind, FRAME_PAYLOAD_LEN};
use wal::{CrcVerdict, Depth};

/// A value of one of the report's JSON views. Serializing them cannot fail (string keys, no
/// non-finite floats), so a failure would be a bug in a view.
pub(crate) fn to_value(view: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(view).expect("a JSON view serializes")
}

/// What to check.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// Segment continuity from headers and footers only; records are not read.
    pub quick: bool,
}

/// Progress of a long scan: segments done and the one being read.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub segment: u64,
    pub records: u64,
}

/// Verifies the log in `dir`. Never fails: unreadable logs are IO_ERROR in the report.
pub fn verify(dir: &Path, opts: &VerifyOptions, progress: &mut dyn FnMut(Progress)) -> Report {
    verify_visiting(dir, opts, progress, &mut |_| {})
}

/// [`verify`], also handing `also` every valid record the scan walks, in log order (a record
/// of a damaged tail may be handed over before the damage after it is found).
pub fn verify_visiting(
    dir: &Path,
    opts: &VerifyOptions,
    progress: &mut dyn FnMut(Progress),
    also: &mut dyn FnMut(&wal::scan::Rec<'_>),
) -> Report {
    let storage = ReadOnlyDir::new(dir);
    let live = storage.writer_holds_lock();
    scan_report(storage, dir, opts, live, progress, &mut |_, r| also(r))
}

/// [`verify`] for a caller that holds the log's exclusive lock (`walcheck repair`): no writer
/// can be live, so the last batch is judged (the lock probe of [`verify`] would find the
/// caller's own lock and call the log live). Hands `also` every valid record the scan walks,
/// with its segment.
pub fn verify_locked(
    dir: &Path,
    opts: &VerifyOptions,
    also: &mut dyn FnMut(u64, &wal::scan::Rec<'_>),
) -> Report {
    scan_report(ReadOnlyDir::new(dir), dir, opts, false, &mut |_| {}, also)
}

fn scan_report(
    storage: ReadOnlyDir,
    dir: &Path,
    opts: &VerifyOptions,
    live: bool,
    progress: &mut dyn FnMut(Progress),
    also: &mut dyn FnMut(u64, &wal::scan::Rec<'_>),
) -> Report {
    let mut report = Report::new(dir, opts.quick);
    report.live = live;
    let stats = &mut report.stats;
    let mut last_segment = 0;
    let mut visit = |segment: u64, r: &wal::scan::Rec<'_>| {
        stats.count(r);
        also(segment, r);
        if segment != last_segment {
            last_segment = segment;
            progress(Progress { segment, records: stats.records });
        }
    };
    let depth = if opts.quick { Depth::Quick } else { Depth::Full };
    match wal::scan_log_with(&storage, depth, &mut visit) {
        Ok(scan) => report.absorb(scan, &storage),
        Err(wal::Error::NotFound(_)) => report.no_log = Some(no_log_kind(&storage)),
        Err(e) => report.io_error = Some(e.to_string()),
    }
    report
}

/// Which kind of no-log a directory the scan found without one is: the scan says "not found"
/// for a directory without `wal.meta` that holds no segment file or only blank ones.
fn no_log_kind(storage: &ReadOnlyDir) -> report::NoLog {
    use wal::storage::Reader;
    let segments = storage.list().unwrap_or_default();
    if segments.iter().any(|n| wal::format::parse_segment_file_name(n).is_some()) {
        report::NoLog::InterruptedCreation
    } else {
        report::NoLog::Absent
    }
}

impl Stats {
    #[inline]
    fn count(&mut self, r: &wal::scan::Rec<'_>) {
        self.records += 1;
        self.min_epoch = Some(self.min_epoch.map_or(r.epoch, |e| e.min(r.epoch)));
        self.max_epoch = Some(self.max_epoch.map_or(r.epoch, |e| e.max(r.epoch)));
        match r.kind {
            Kind::Entry => {
                self.entries += 1;
                self.payload_bytes += r.payload.len() as u64;
                self.min_lsn = Some(self.min_lsn.map_or(r.lsn, |l| l.min(r.lsn)));
                self.max_lsn = Some(self.max_lsn.map_or(r.lsn, |l| l.max(r.lsn)));
            }
            Kind::Frame => {
                self.batches += 1;
                if let Some(n) = r.payload.get(8..12).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
                    debug_assert_eq!(r.payload.len(), FRAME_PAYLOAD_LEN);
                    self.max_batch_records = self.max_batch_records.max(u32::from_le_bytes(n));
                }
            }
            Kind::Checkpoint => {
                self.checkpoints += 1;
                self.last_checkpoint_lsn = Some(r.lsn);
            }
            Kind::Truncate => self.truncations += 1,
            Kind::Reset => self.resets += 1,
            Kind::Epoch => self.epoch_changes += 1,
            Kind::Meta => self.metas += 1,
            Kind::State | Kind::Footer => {}
        }
    }
}

/// The spares of `spares` whose length no segment has (0 bytes above all): what the log's own
/// preparation of a spare never leaves, except when a crash cuts it short (see
/// [`Report::unfinished_spares`]).
fn unfinished_spares(spares: &[u64], storage: &ReadOnlyDir) -> Vec<(u64, u64)> {
    use wal::format::{segment_file_name, MAX_SEGMENT_LEN, MIN_SEGMENT_LEN, SECTOR};
    use wal::storage::Reader;
    let mut out = Vec::new();
    for &seq in spares {
        let Ok(f) = storage.open(&segment_file_name(seq)) else { continue };
        let len = storage.len(f);
        storage.close(f);
        if let Ok(len) = len {
            let segment_like = (u64::from(MIN_SEGMENT_LEN)..=u64::from(MAX_SEGMENT_LEN)).contains(&len)
                && len.is_multiple_of(SECTOR as u64);
            if !segment_like {
                out.push((seq, len));
            }
        }
    }
    out
}

impl Report {
    fn absorb(&mut self, scan: wal::LogScan, storage: &ReadOnlyDir) {
        use wal::storage::Reader;
        self.stats.segments = scan.segments.len();
        self.stats.sealed = scan.segments.iter().filter(|s| s.sealed()).count();
        self.stats.spares = scan.spares.len();
        self.stats.leftovers = scan.leftovers.len();
        self.stats.next_lsn = scan.logical.as_ref().map(|l| l.next_lsn);
        self.stats.epoch = scan.logical.as_ref().map(|l| l.epoch);
        self.stats.floor_segment = scan.meta.map(|m| m.floor_segment_seq.get());
        let mut bytes = 0;
        for s in &scan.segments {
            if let Ok(f) = storage.open(&wal::format::segment_file_name(s.seq)) {
                bytes += storage.len(f).unwrap_or(0);
                storage.close(f);
            }
        }
        self.stats.bytes = bytes;
        self.unfinished_spares = unfinished_spares(&scan.spares, storage);
        self.crc = scan.verdict;
        self.damage = scan.damage;
        // A live writer may be in the middle of its last batch: that is not a torn write.
        if self.live && matches!(self.crc, CrcVerdict::TornTail | CrcVerdict::CorruptTail) {
            self.live_tail = self.damage.take();
            self.crc = CrcVerdict::Ok;
        }
    }
}
