//! Opening a log: locking, creating, syncing what a crash may have left unsynced, scanning,
//! applying the recovery mode, and building the handle from what the scan found.

use crate::batch::FRAME_LEN;
use crate::error::{CrcVerdict, Error, Result};
use crate::format::*;
use crate::lifecycle::{cut_tail, init, sync_dir, sync_unsealed};
use crate::log::open_check::Trust;
use crate::log::{
    Backend, Files, OpenCheck, OpenReport, Opened, Options, Spare, Wal, Watermarks, STATE_MAX_LEN,
};
use crate::recovery::{self, LogScan, RecoveryMode};
use crate::scan::Logical;
use crate::storage::{FileStorage, LockGuard, Reader, Storage};
use std::path::Path;
use std::sync::Arc;

#[cfg(target_os = "linux")]
fn uring(dir: &Path, create: bool) -> std::io::Result<crate::storage::UringStorage> {
    crate::storage::UringStorage::new(dir, create)
}

#[cfg(not(target_os = "linux"))]
fn uring(_: &Path, _: bool) -> std::io::Result<FileStorage> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "io_uring is Linux-only"))
}

impl Wal {
    /// Opens (or creates) the log in directory `dir` on real files, with the backend
    /// `opts.backend` chooses (see [`Backend`] for why Auto is pwrite + fdatasync today).
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<(Wal, OpenReport)> {
        let create = opts.create && !opts.read_only && opts.recovery != RecoveryMode::Salvage;
        let dir = dir.as_ref();
        let ctx = || format!("opening {}", dir.display());
        let (storage, name): (Arc<dyn Storage>, &'static str) = match opts.backend {
            Backend::Uring => (Arc::new(uring(dir, create).map_err(|e| Error::io(ctx(), e))?), "io_uring"),
            Backend::Portable | Backend::Auto => {
                (Arc::new(FileStorage::new(dir, create).map_err(|e| Error::io(ctx(), e))?), "portable")
            }
        };
        let (wal, mut report) = Wal::open_with(storage, opts)?;
        report.backend = name;
        Ok((wal, report))
    }

    /// Opens the log read-only behind a storage that implements only the read side (the
    /// verifier's read-only directory): as [`Wal::open_with`] with `opts.read_only` set, which a
    /// reader cannot do otherwise. The handle replays and answers questions; every write is
    /// refused ([`Error::ReadOnly`] before the storage is reached).
    #[cfg(feature = "internal")]
    #[doc(hidden)]
    pub fn open_reader(reader: Arc<dyn Reader>, mut opts: Options) -> Result<(Wal, OpenReport)> {
        opts.read_only = true;
        Wal::open_with(Arc::new(crate::storage::ReadOnly::new(reader)), opts)
    }

    /// Opens the log behind any storage backend.
    pub fn open_with(storage: Arc<dyn Storage>, mut opts: Options) -> Result<(Wal, OpenReport)> {
        if opts.recovery == RecoveryMode::Salvage {
            opts.read_only = true;
        }
        let seg_len = opts.segment_len_bytes;
        if !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&seg_len)
            || !(seg_len as usize).is_multiple_of(SECTOR)
        {
            return Err(Error::InvalidArgument(format!(
                "segment_len_bytes {seg_len} must be a multiple of {SECTOR} between {MIN_SEGMENT_LEN} and {MAX_SEGMENT_LEN}"
            )));
        }
        if opts.max_log_bytes.is_some_and(|b| b < 2 * u64::from(seg_len)) {
            return Err(Error::InvalidArgument(format!(
                "max_log_bytes must allow at least two segments of {seg_len} bytes (a rotation needs both)"
            )));
        }
        // Whether a segment is a new file or a recycled one (whose stale table takes room), an
        // entry that is accepted fits in it.
        let room = crate::stale::data_limit(seg_len, true)
            - SEGMENT_HEADER_LEN
            - FRAME_LEN
            - STATE_MAX_LEN
            - RECORD_HEADER_LEN;
        let most = (room as u32).min(MAX_PAYLOAD_LEN) & !(ALIGN as u32 - 1);
        let max_payload = opts.max_payload_bytes.unwrap_or(most);
        if max_payload > most || max_payload == 0 {
            return Err(Error::InvalidArgument(format!(
                "max_payload_bytes {max_payload} must be between 1 and {most} for {seg_len}-byte segments"
            )));
        }
        let lock = if opts.read_only { storage.lock_shared() } else { storage.lock_exclusive() };
        let lock = lock.map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => Error::Locked(e.to_string()),
            _ => Error::io("locking the log directory", e),
        })?;
        let mut created = false;
        let names = storage.list().map_err(|e| Error::io("listing the log directory", e))?;
        let has_meta = names.iter().any(|n| n == META_FILE_NAME);
        let seqs: Vec<u64> = names.iter().filter_map(|n| parse_segment_file_name(n)).collect();
        // Nothing is read, created or removed while a log file is a FIFO, a device, ...
        if let Some(d) = crate::log_files::not_regular_damage(&*storage, &names)? {
            return Err(Error::Damaged(d));
        }
        let empty = !has_meta && recovery::only_blank_segments(&*storage, &seqs)?;
        if empty {
            if opts.read_only || !opts.create {
                return Err(Error::NotFound("the directory holds no log".into()));
            }
            for &s in &seqs {
                storage
                    .remove(&segment_file_name(s))
                    .map_err(|e| Error::io("removing a blank segment", e))?;
            }
            init(&*storage, seg_len, opts.log_id)?;
            created = true;
        }
        if !opts.read_only {
            // Never classify bytes that were never durable: sync what a crash may have left
            // unsynced (the newest segments and the directory) before reading anything.
            sync_unsealed(&*storage)?;
        }
        // A full scan when asked for at the open (log/open_check.rs); a fast one otherwise.
        let full = opts.open_check == OpenCheck::AtOpen;
        let mut scan = recovery::scan_log(&*storage, full)?;
        let mut report = OpenReport {
            verdict: scan.verdict,
            damage: scan.damage.clone(),
            cut: None,
            segments: scan.segments.len(),
            records_walked: scan.records_walked,
            leftovers_removed: Vec::new(),
            created,
            backend: "custom",
        };
        if let Some(d) = scan.damage.clone() {
            match (opts.recovery, d.verdict) {
                (RecoveryMode::Salvage, _) => {}
                (RecoveryMode::TruncateTornTail, CrcVerdict::TornTail) if !opts.read_only => {
                    report.cut = Some(cut_tail(&*storage, &d)?);
                    scan = recovery::scan_log(&*storage, full)?;
                    if let Some(d2) = scan.damage {
                        return Err(Error::Damaged(d2));
                    }
                }
                _ => return Err(Error::Damaged(d)),
            }
        }
        if !opts.read_only && !scan.leftovers.is_empty() {
            for &s in &scan.leftovers {
                storage
                    .remove(&segment_file_name(s))
                    .map_err(|e| Error::io("removing a purged segment", e))?;
            }
            sync_dir(&*storage)?;
            report.leftovers_removed = scan.leftovers.clone();
        }
        let Some(meta) = scan.meta else {
            return Err(Error::NotFound("no wal.meta".into()));
        };
        let pool =
            if opts.read_only { Vec::new() } else { crate::log::recycle::adopt(&*storage, &names, &opts)? };
        Wal::from_scan(storage, lock, opts, max_payload, meta, scan, pool).map(|w| (w, report))
    }

    fn from_scan(
        storage: Arc<dyn Storage>,
        lock: LockGuard,
        opts: Options,
        max_payload: u32,
        meta: MetaFile,
        scan: LogScan,
        pool: Vec<u64>,
    ) -> Result<Wal> {
        let logical = scan.logical.clone().unwrap_or(Logical {
            next_lsn: opts.first_lsn,
            first_lsn: None,
            epoch: 0,
            meta: Default::default(),
        });
        let last_seq = scan.next_seq.saturating_sub(1);
        // (segment, offset) just past the last batch the scan found: durable, as all it found.
        let end = scan.segments.last().map(|s| (s.seq, s.data_end));
        let spares = scan
            .spares
            .iter()
            .map(|&seq| Spare { seq, recycled: scan.recycled_spares.contains(&seq) })
            .collect();
        let checked = scan.trusted == 0 || opts.open_check == OpenCheck::TrustSealed;
        let mut wal = Wal::from_open(Opened {
            storage,
            lock,
            opts,
            max_payload,
            meta,
            files: Files::opened(scan.segments, spares, pool, scan.next_seq, scan.last_crc),
            marks: Watermarks::opened(last_seq, logical.clone(), end),
            position: logical.into(),
            trust: Trust::new(checked),
        });
        wal.resume_after_open(checked)?;
        Ok(wal)
    }
}

#[cfg(all(test, feature = "internal"))]
mod tests {
    use crate::storage::{FileStorage, Reader};
    use crate::{Epoch, Error, Options, Wal};
    use std::sync::Arc;

    /// A log opened through a reader replays what was written and refuses to write, and the
    /// directory is byte for byte as it was.
    #[test]
    fn a_reader_opens_a_log_read_only() {
        let d = tempfile::tempdir().unwrap();
        let opts = Options { segment_len_bytes: 64 * 1024, ..Options::default() };
        let (mut log, _) = Wal::open(d.path(), opts.clone()).unwrap();
        for i in 0..10u8 {
            log.append(Epoch(0), &[i; 100]).unwrap();
        }
        log.sync().unwrap();
        drop(log); // no clean close: the open walks the last segment
        let before: Vec<(String, Vec<u8>)> = files(d.path());
        let reader: Arc<dyn Reader> = Arc::new(FileStorage::new(d.path(), false).unwrap());
        let (mut log, _) = Wal::open_reader(reader, opts).unwrap();
        assert_eq!(log.replay().unwrap().collect_entries().unwrap().len(), 10);
        assert!(matches!(log.append(Epoch(0), b"x"), Err(Error::ReadOnly)));
        drop(log);
        assert_eq!(files(d.path()), before);
    }

    fn files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
            .collect();
        v.sort();
        v
    }
}
