//! The names a log owns in its directory, and refusing one that is not a regular file before
//! anything reads it (FORMAT.md section 1).
//!
//! A FIFO, a socket, a device, a directory or a symbolic link under the name of a segment,
//! `wal.meta` or `wal.close` is CORRUPT, naming the file and what it is
//! ([`DamageKind::NotRegularFile`]): the log never makes one, no crash makes one, and the bytes
//! the name should hold are not there to be read (for a segment, as when it is missing, which
//! is CORRUPT too). It is not IO_ERROR: nothing failed to read, and reading again will not
//! help; someone must look at the directory. The file is not opened, so a FIFO cannot block
//! the scan and a device cannot be read; a writer refuses to open, and walcheck repair does not
//! touch it.

use crate::error::{CrcVerdict, Damage, DamageKind, Error, Result};
use crate::format::{parse_segment_file_name, CLOSE_FILE_NAME, META_FILE_NAME};
use crate::storage::{NotRegularFile, Reader};

/// The names a scan reads: segments (any sequence: a leftover below the purge floor is removed
/// by a writer, a spare becomes a segment), `wal.meta` and `wal.close`.
fn read_by_a_scan(name: &str) -> Option<u64> {
    if name == META_FILE_NAME || name == CLOSE_FILE_NAME {
        return Some(0);
    }
    parse_segment_file_name(name)
}

/// The first of `names` (the directory's listing, in order) that the log owns and that is not
/// a regular file, as CORRUPT damage at its segment (0 for `wal.meta` and `wal.close`).
pub(crate) fn not_regular_damage(storage: &dyn Reader, names: &[String]) -> Result<Option<Damage>> {
    for name in names {
        let Some(segment) = read_by_a_scan(name) else { continue };
        let what = storage.not_regular(name).map_err(|e| Error::io(format!("looking at {name}"), e))?;
        if let Some(what) = what {
            let kind = DamageKind::NotRegularFile(Box::new(NotRegularFile { name: name.clone(), what }));
            return Ok(Some(Damage {
                verdict: CrcVerdict::Corrupt,
                kind,
                segment,
                offset: 0,
                lsn: 0,
                seq: 0,
                batch_start: 0,
                batch_lsn: 0,
            }));
        }
    }
    Ok(None)
}
