//! `walcheck repair`: cut damage at the end of a log, after a backup.
//!
//! The order is what makes it safe (issue 22). The log's lock is taken first, exclusive, as a
//! writer takes it, and held through the scan, the backup and the cut: no writer can open the
//! log in between and have entries it acknowledged cut, and of two repairs one waits its turn
//! and then finds nothing to do, or is refused. What is cut is exactly what that scan found.
//! The backup is a new directory outside the log, its files, itself and its parent synced
//! before the first byte of the log changes. Without `--lossy` only a TORN_TAIL is cut; a
//! lossy repair names the LSNs it drops. The result is then verified in full (CRC and state,
//! as `walcheck verify` does) and that verdict is the exit code.

mod backup;

use crate::{Out, EXIT_USAGE};
use std::path::Path;
use verifier::report::{describe, EXIT_IO_ERROR};
use verifier::state::{StateMachineSpec, StateOptions};
use verifier::verify_with_state;
use verifier::VerifyOptions;
use wal::format::{segment_file_name, CLOSE_FILE_NAME, META_FILE_NAME, SEGMENT_HEADER_LEN};
use wal::storage::Writer;
use wal::{CrcVerdict, Damage, DamageKind};
use wal_state::StateMachine;

/// What the repair does to the log.
enum Cut {
    /// Zero the damaged batch and the rest of its segment, remove later segments
    /// ([`wal::lifecycle::cut_tail`]).
    Tail(Damage),
    /// End the log with this segment, removing every later one (a segment before it is missing).
    After(u64),
}

impl Cut {
    /// The segment files the cut changes or removes, and wal.meta (which a cut may replace) and
    /// wal.close: the backup.
    fn files(&self, dir: &Path) -> Vec<String> {
        let first = match self {
            Cut::Tail(d) => d.segment,
            Cut::After(last) => last + 1,
        };
        let mut files: Vec<String> =
            segments(dir).into_iter().filter(|&s| s >= first).map(segment_file_name).collect();
        files.push(META_FILE_NAME.to_string());
        files.push(CLOSE_FILE_NAME.to_string());
        files
    }
}

/// The segment numbers of the files in `dir`, in order.
fn segments(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str().and_then(wal::format::parse_segment_file_name))
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The highest record sequence the scan walked in each segment, and the records of the last
/// segment it walked: what a cut keeps, so that the records found in the cut bytes above it
/// are the ones it drops.
#[derive(Default)]
struct Walked {
    done: Vec<(u64, u64)>,
    segment: u64,
    records: Vec<(u64, u64)>,
}

impl Walked {
    fn record(&mut self, segment: u64, r: &wal::scan::Rec<'_>) {
        if segment != self.segment {
            if let Some(max) = self.records.iter().map(|&(_, s)| s).max() {
                self.done.push((self.segment, max));
            }
            self.records.clear();
            self.segment = segment;
        }
        self.records.push((r.offset, r.seq));
    }

    /// The highest sequence of the records walked before `offset` of `segment`.
    fn kept_seq(&self, segment: u64, offset: u64) -> u64 {
        let before = self.done.iter().filter(|&&(s, _)| s < segment).map(|&(_, m)| m).max().unwrap_or(0);
        let here = self
            .records
            .iter()
            .filter(|&&(o, _)| self.segment < segment || (self.segment == segment && o < offset))
            .map(|&(_, s)| s)
            .max()
            .unwrap_or(0);
        before.max(here)
    }
}

/// What a cut drops, in words: the LSNs from where the kept log continues to the highest entry
/// found in the bytes it cuts or removes (LSNs are consecutive, FORMAT.md section 3.1).
fn dropped(dir: &Path, cut: &Cut, from_lsn: u64, walked: &Walked) -> String {
    let (first_seg, from, kept) = match cut {
        Cut::Tail(d) => {
            let from = wal::lifecycle::cut_start(d);
            (d.segment, from, walked.kept_seq(d.segment, from))
        }
        Cut::After(last) => (last + 1, 0, walked.kept_seq(last + 1, 0)),
    };
    let mut lsns = Vec::new();
    for s in segments(dir).into_iter().filter(|&s| s >= first_seg) {
        let path = dir.join(segment_file_name(s));
        // Only a regular file is read: a FIFO under a segment's name would never end.
        let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        let bytes = if regular { std::fs::read(&path).unwrap_or_default() } else { Vec::new() };
        let part = if s == first_seg { bytes.get(from as usize..).unwrap_or_default() } else { &bytes[..] };
        lsns.extend(wal::lifecycle::entries_in(part, kept));
    }
    match lsns.iter().copied().filter(|&l| l >= from_lsn).max() {
        Some(last) => {
            let n = last - from_lsn + 1;
            format!("drops LSN {from_lsn}..{last} ({n} {})", if n == 1 { "entry" } else { "entries" })
        }
        None => format!("drops no readable entry (the log continues at LSN {from_lsn})"),
    }
}

/// The segment header of `segment`'s file, if it checks out on its own, and the file's length.
fn header_of(dir: &Path, segment: u64) -> Option<(wal::format::SegmentHeader, u64)> {
    let path = dir.join(segment_file_name(segment));
    let meta = std::fs::symlink_metadata(&path).ok().filter(|m| m.is_file())?;
    let mut head = vec![0u8; SEGMENT_HEADER_LEN];
    let f = std::fs::File::open(&path).ok()?;
    wal::storage::pread_full(&f, 0, &mut head).ok()?;
    Some((wal::format::SegmentHeader::self_valid(&head)?, meta.len()))
}

/// Why a TORN_TAIL in `segment` is not one a crash can leave, checked again here because a
/// repair without --lossy must never cut acknowledged entries, whatever the scan said: a file
/// whose length differs from the length its header declares (segments are preallocated and
/// never shrunk or grown), or a later segment file with a valid header (a rotation syncs a
/// segment before the next takes its header, so that header attests every byte before it).
fn not_a_crash(dir: &Path, segment: u64) -> Option<String> {
    if let Some((h, len)) = header_of(dir, segment) {
        let declared = u64::from(h.segment_len.get());
        if declared != len {
            return Some(format!(
                "segment {segment}'s file is {len} bytes but its header says {declared}: no crash changes a segment's length, so this is not a torn tail"
            ));
        }
    }
    let later = segments(dir).into_iter().find(|&s| s > segment && header_of(dir, s).is_some())?;
    Some(format!(
        "segment {later} has a valid header, which attests every byte of segment {segment}: this is not a torn tail"
    ))
}

pub(crate) fn repair<S: StateMachine>(
    out: &mut Out,
    dir: &Path,
    lossy: bool,
    dry_run: bool,
    backup: Option<&Path>,
    spec: &StateMachineSpec<S>,
) -> i32 {
    let log = match dir.canonicalize() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("walcheck: {}: {e}", dir.display());
            return EXIT_USAGE;
        }
    };
    let target = match backup.map(|b| backup::check(&log, b).map_err(|why| (b, why))).transpose() {
        Ok(t) => t,
        Err((b, why)) => {
            eprintln!("walcheck: refusing --backup {}: {why}; nothing changed", b.display());
            return EXIT_USAGE;
        }
    };
    // Taking the lock creates the lock file: never in a directory that holds no log.
    if !log.join(META_FILE_NAME).exists() && segments(&log).is_empty() {
        eprintln!(
            "walcheck: {}: no log here (no {META_FILE_NAME}, no segment file); nothing changed",
            dir.display()
        );
        return EXIT_USAGE;
    }
    let storage = match wal::storage::FileStorage::new(&log, false) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("walcheck: cannot repair {}: {e}; nothing changed", dir.display());
            return EXIT_IO_ERROR;
        }
    };
    let lock = match storage.lock_exclusive() {
        Ok(l) => l,
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::WouldBlock {
                "its lock is held (a writer has the log open, or another repair is running)".to_string()
            } else {
                format!("taking its lock: {e}")
            };
            eprintln!("walcheck: cannot repair {}: {why}; nothing changed", dir.display());
            return EXIT_IO_ERROR;
        }
    };
    let mut walked = Walked::default();
    let report =
        verifier::verify_locked(&log, &VerifyOptions { quick: false }, &mut |s, r| walked.record(s, r));
    if let Some(e) = &report.io_error {
        eprintln!("walcheck: cannot repair {}: {e}; nothing changed", dir.display());
        return report.exit_code().max(EXIT_IO_ERROR);
    }
    let Some(d) = report.damage.clone() else {
        out.line(&format!("{}: CRC {}: nothing to repair", dir.display(), report.crc_word()));
        return report.exit_code();
    };
    out.line(&format!("{}: {}", dir.display(), describe(&d)));
    let cut = match plan(&log, &d, lossy, &walked, &report) {
        Ok(c) => c,
        Err(lines) => {
            for l in lines {
                out.line(&l);
            }
            return report.exit_code();
        }
    };
    let files = cut.files(&log);
    out.line(&match &cut {
        Cut::Tail(d) => format!(
            "will cut segment {} from offset {} (zeroed in place) and remove {} later segment file(s)",
            d.segment,
            wal::lifecycle::cut_start(d),
            segments(&log).iter().filter(|&&s| s > d.segment).count()
        ),
        Cut::After(last) => format!(
            "will end the log with segment {last} and remove the {} segment file(s) after it",
            segments(&log).iter().filter(|&&s| s > *last).count()
        ),
    });
    let what = dropped(&log, &cut, d.batch_lsn, &walked);
    out.line(&if d.verdict == CrcVerdict::TornTail && !matches!(cut, Cut::After(_)) {
        format!("{what}: never acknowledged (a torn tail)")
    } else {
        format!("{what}: LOST (lossy repair)")
    });
    if dry_run {
        out.line("dry run: nothing changed");
        return report.exit_code();
    }
    let made = match backup::create(&log, target) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("walcheck: cannot create the backup directory, nothing changed: {e}");
            return EXIT_IO_ERROR;
        }
    };
    match backup::copy_into(&made, &log, &files) {
        Ok(n) => out.line(&format!("backup of {n} file(s) in {} (synced)", made.display())),
        Err(e) => {
            eprintln!("walcheck: backup to {} failed, nothing changed: {e}", made.display());
            return EXIT_IO_ERROR;
        }
    }
    let result = match &cut {
        Cut::Tail(d) => wal::lifecycle::cut_tail(&storage, d)
            .map(|(seg, off, len)| format!("cut {len} bytes of segment {seg} at offset {off}")),
        Cut::After(last) => wal::lifecycle::cut_after_segment(&storage, *last).map(|removed| {
            let names: Vec<String> = removed.iter().map(|s| s.to_string()).collect();
            format!("cut after segment {last}: removed segment(s) {}", names.join(", "))
        }),
    };
    match result {
        Ok(l) => out.line(&l),
        Err(e) => {
            eprintln!("walcheck: repair failed: {e} (the backup is in {})", made.display());
            return EXIT_IO_ERROR;
        }
    }
    // Verified once the lock is let go: the verifier would take its own lock for a writer's.
    drop(lock);
    verify_after(out, dir, spec)
}

/// What to cut for damage `d`, or the lines that say why not and what the operator can do.
fn plan(
    log: &Path,
    d: &Damage,
    lossy: bool,
    walked: &Walked,
    report: &verifier::Report,
) -> Result<Cut, Vec<String>> {
    if d.verdict == CrcVerdict::UnsupportedVersion {
        return Err(vec!["refusing: a newer version wrote this log; use a walcheck of that version".into()]);
    }
    if matches!(d.kind, DamageKind::NotRegularFile(_)) {
        // Never copied, zeroed or removed: what it is, and where the real file went, is for
        // the operator to decide.
        return Err(vec![
            "refusing: a file named like a log file is not a regular file; move it away and restore the real file".into(),
        ]);
    }
    if d.segment == 0 || matches!(d.kind, DamageKind::MissingPurgeFloor | DamageKind::BadMetaFile(_)) {
        return Err(vec![
            "refusing: this cannot be repaired by cutting the log; restore the file from a backup".into(),
        ]);
    }
    if let DamageKind::MissingSegment { segment: m } = d.kind {
        let floor = report.stats.floor_segment.unwrap_or(1);
        if m <= floor || !log.join(segment_file_name(m - 1)).is_file() {
            return Err(vec![format!(
                "refusing: segment {m} is missing and no segment before it is left to keep; restore segment {m}'s file from a backup"
            )]);
        }
        let cut = Cut::After(m - 1);
        if lossy {
            return Ok(cut);
        }
        return Err(vec![
            format!(
                "refusing: segment {m} is missing, so the segments after it cannot be chained to the ones before; restore its file from a backup and verify again"
            ),
            format!(
                "or `walcheck repair --lossy` ends the log with segment {} and removes every later segment: it {}",
                m - 1,
                dropped(log, &cut, d.batch_lsn, walked)
            ),
        ]);
    }
    let cut = Cut::Tail(d.clone());
    let not_torn = match d.verdict {
        CrcVerdict::TornTail => not_a_crash(log, d.segment),
        _ => Some("this damage may hold acknowledged data".to_string()),
    };
    match not_torn {
        Some(why) if !lossy => Err(vec![format!(
            "refusing: {why}; restore the damaged file from a backup if there is one, or `walcheck repair --lossy` cuts the log at segment {} offset {}: it {}",
            d.segment,
            wal::lifecycle::cut_start(d),
            dropped(log, &cut, d.batch_lsn, walked)
        )]),
        _ => Ok(cut),
    }
}

/// `walcheck verify` of the repaired log, CRC and state, printed; its exit code is repair's.
fn verify_after<S: StateMachine>(out: &mut Out, dir: &Path, spec: &StateMachineSpec<S>) -> i32 {
    let opts = StateOptions { diff_limit: 10, ..StateOptions::default() };
    let after = verify_with_state(dir, false, &opts, spec, &mut |_| {});
    out.line(&format!("after repair: CRC {}  STATE {}", after.crc_word(), after.state_word()));
    for l in after.to_text(false).lines() {
        out.line(l);
    }
    if let Some(e) = &after.io_error {
        eprintln!("walcheck: {e}");
    }
    after.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture `name` copied into a new temporary directory.
    fn copy(name: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs").join(name);
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), d.path().join(e.file_name())).unwrap();
        }
        d
    }

    #[test]
    fn a_torn_tail_is_checked_again_before_a_cut() {
        let d = copy("torn-tail");
        assert_eq!(not_a_crash(d.path(), 2), None, "the fixture's torn tail is one a crash leaves");
        // A later file that starts with a valid header (here segment 1's): attested.
        let seg1 = std::fs::read(d.path().join(segment_file_name(1))).unwrap();
        std::fs::write(d.path().join(segment_file_name(3)), &seg1[..4096]).unwrap();
        let why = not_a_crash(d.path(), 2).unwrap();
        assert!(why.contains("segment 3 has a valid header"), "{why}");
        // A blank spare after it is no evidence either way.
        std::fs::write(d.path().join(segment_file_name(3)), vec![0u8; 4096]).unwrap();
        assert_eq!(not_a_crash(d.path(), 2), None);
        // A file shorter than its header says.
        std::fs::File::options()
            .write(true)
            .open(d.path().join(segment_file_name(2)))
            .unwrap()
            .set_len(4096)
            .unwrap();
        assert!(not_a_crash(d.path(), 2).unwrap().contains("4096 bytes but its header says 65536"));
    }
}
