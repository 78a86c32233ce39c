//! `walcheck repair`: cut damage at the end of a log, after a backup.

use crate::Out;
use std::path::Path;
use verifier::report::{describe, EXIT_IO_ERROR};
use verifier::VerifyOptions;
use wal::format::{segment_file_name, META_FILE_NAME};
use wal::CrcVerdict;

pub(crate) fn repair(out: &mut Out, dir: &Path, lossy: bool, dry_run: bool, backup: Option<&Path>) -> i32 {
    let report = verifier::verify(dir, &VerifyOptions { quick: false }, &mut |_| {});
    if report.io_error.is_some() || report.live {
        let why = report.io_error.clone().unwrap_or_else(|| "a writer holds the log".into());
        eprintln!("walcheck: cannot repair {}: {why}", dir.display());
        return report.exit_code().max(EXIT_IO_ERROR);
    }
    let Some(d) = report.damage.clone() else {
        out.line(&format!("{}: CRC {}: nothing to repair", dir.display(), report.crc_word()));
        return report.exit_code();
    };
    let cuttable = match d.verdict {
        CrcVerdict::TornTail => true,
        CrcVerdict::CorruptTail | CrcVerdict::Corrupt => lossy,
        CrcVerdict::Ok | CrcVerdict::UnsupportedVersion => false,
    };
    if d.segment == 0
        || matches!(
            d.kind,
            wal::DamageKind::MissingPurgeFloor
                | wal::DamageKind::BadMetaFile(_)
                // Never copied, zeroed or removed: what it is is for the operator to decide.
                | wal::DamageKind::NotRegularFile(_)
        )
    {
        eprintln!("walcheck: {} cannot be repaired by cutting: {}", dir.display(), describe(&d));
        return report.exit_code();
    }
    if !cuttable {
        out.line(&format!("{}: {}", dir.display(), describe(&d)));
        out.line(&format!(
            "refusing: this damage may hold acknowledged data; `walcheck repair --lossy` cuts the log at segment {} offset {} (entries from LSN {} on are lost)",
            d.segment, d.batch_start, d.batch_lsn
        ));
        return report.exit_code();
    }
    let later: Vec<u64> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str().and_then(wal::format::parse_segment_file_name))
                .filter(|&s| s > d.segment)
                .collect()
        })
        .unwrap_or_default();
    out.line(&format!("{}: {}", dir.display(), describe(&d)));
    out.line(&format!(
        "will cut segment {} from offset {} (zeroed in place) and remove {} later segment file(s); entries from LSN {} on {}",
        d.segment,
        d.batch_start,
        later.len(),
        d.batch_lsn,
        if d.verdict == CrcVerdict::TornTail { "were never acknowledged" } else { "are LOST (lossy repair)" }
    ));
    if dry_run {
        out.line("dry run: nothing changed");
        return report.exit_code();
    }
    let backup = backup.map(Path::to_path_buf).unwrap_or_else(|| {
        let secs =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let name = dir.file_name().map_or("log".into(), |n| n.to_string_lossy().into_owned());
        dir.with_file_name(format!("{name}.walcheck-backup-{secs}"))
    });
    let mut files: Vec<String> = later.iter().map(|&s| segment_file_name(s)).collect();
    files.push(segment_file_name(d.segment));
    files.push(META_FILE_NAME.to_string());
    if let Err(e) = copy_files(dir, &backup, &files) {
        eprintln!("walcheck: backup to {} failed, nothing changed: {e}", backup.display());
        return EXIT_IO_ERROR;
    }
    out.line(&format!("backup of {} file(s) in {}", files.len(), backup.display()));
    let result = wal::storage::FileStorage::new(dir, false).map_err(|e| e.to_string()).and_then(|st| {
        use wal::storage::Storage;
        let _lock = st.lock(true).map_err(|e| e.to_string())?;
        wal::lifecycle::cut_tail(&st, &d).map_err(|e| e.to_string())
    });
    match result {
        Ok((seg, off, len)) => out.line(&format!("cut {len} bytes of segment {seg} at offset {off}")),
        Err(e) => {
            eprintln!("walcheck: repair failed: {e} (the backup is in {})", backup.display());
            return EXIT_IO_ERROR;
        }
    }
    let after = verifier::verify(dir, &VerifyOptions { quick: false }, &mut |_| {});
    out.line(&format!("after repair: CRC {}", after.crc_word()));
    after.exit_code()
}

fn copy_files(from: &Path, to: &Path, names: &[String]) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for n in names {
        let src = from.join(n);
        if src.exists() {
            std::fs::copy(&src, to.join(n))?;
            std::fs::File::open(to.join(n))?.sync_all()?;
        }
    }
    std::fs::File::open(to)?.sync_all()
}
