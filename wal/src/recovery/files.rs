//! Reading a log's files for a scan: `wal.meta` checked, a segment mapped (with where its
//! written bytes end), its header read alone, or its two ends (header and footer slot) read into
//! a zero buffer of its length; each read names the file when it fails.

use crate::error::{DamageKind, Error, Result};
use crate::format::*;
use crate::storage::{FileId, Mapping, Reader};
use zerocopy::FromBytes;

pub(crate) fn read_meta(storage: &dyn Reader) -> Result<std::result::Result<MetaFile, DamageKind>> {
    let f = storage.open(META_FILE_NAME).map_err(|e| Error::io("opening wal.meta", e))?;
    let mut buf = [0u8; META_FILE_LEN + 1];
    let n = storage.read_at(f, 0, &mut buf);
    storage.close(f);
    let n = n.map_err(|e| Error::io("reading wal.meta", e))?;
    if n != META_FILE_LEN {
        return Ok(Err(DamageKind::BadMetaFile("wrong length")));
    }
    let Ok(m) = MetaFile::read_from_bytes(buf.get(..META_FILE_LEN).unwrap_or_default()) else {
        return Ok(Err(DamageKind::BadMetaFile("unreadable")));
    };
    if m.crc.get() != m.compute_crc() {
        return Ok(Err(DamageKind::BadMetaFile("checksum mismatch")));
    }
    if m.magic != META_MAGIC {
        return Ok(Err(DamageKind::BadMetaFile("bad magic")));
    }
    if m.format_version.get() != FORMAT_VERSION {
        return Ok(Err(DamageKind::UnsupportedVersion(m.format_version.get())));
    }
    if matches!(m.floor_first_record_seq.get(), 0 | u64::MAX) || m.floor_segment_seq.get() == 0 {
        return Ok(Err(DamageKind::BadMetaFile("impossible floor")));
    }
    Ok(Ok(m))
}

/// True when every listed segment file is entirely zero (never took a record).
pub(crate) fn only_blank_segments(storage: &dyn Reader, seqs: &[u64]) -> Result<bool> {
    for &s in seqs {
        let (map, written) = map_segment_written(storage, s)?;
        if !is_zero(map.get(..written).unwrap_or_default()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A segment's header and footer slot at their offsets in a zero buffer of the file's length
/// (a quick check reads nothing else).
pub(super) fn read_ends(storage: &dyn Reader, seq: u64) -> Result<Mapping> {
    let buf = on_segment(storage, seq, "reading", |f| {
        let len = storage.len(f)? as usize;
        let mut buf = vec![0u8; len];
        let head = len.min(SEGMENT_HEADER_LEN);
        storage.read_at(f, 0, buf.get_mut(..head).unwrap_or_default())?;
        if len >= MIN_SEGMENT_LEN as usize {
            let at = len - FOOTER_SLOT_LEN;
            storage.read_at(f, at as u64, buf.get_mut(at..).unwrap_or_default())?;
        }
        Ok(buf)
    })?;
    // Not copied into an `Arc<[u8]>`: the zeros between would all become resident.
    Ok(Mapping::Shared(std::sync::Arc::new(buf)))
}

/// Opens segment `seq`, runs `op` on it and closes it; an error of `op` is reported as
/// "`doing` {file name}".
pub(super) fn on_segment<T>(
    storage: &dyn Reader,
    seq: u64,
    doing: &str,
    op: impl FnOnce(FileId) -> std::io::Result<T>,
) -> Result<T> {
    let name = segment_file_name(seq);
    let f = storage.open(&name).map_err(|e| Error::io(format!("opening {name}"), e))?;
    let r = op(f);
    storage.close(f);
    r.map_err(|e| Error::io(format!("{doing} {name}"), e))
}

/// Maps a segment file by sequence.
pub(crate) fn map_segment(storage: &dyn Reader, seq: u64) -> Result<Mapping> {
    on_segment(storage, seq, "mapping", |f| storage.map(f))
}

/// [`map_segment`], and where the segment's written bytes end ([`written_within`]): every
/// byte of the map past it is zero.
pub(crate) fn map_segment_written(storage: &dyn Reader, seq: u64) -> Result<(Mapping, usize)> {
    on_segment(storage, seq, "mapping", |f| {
        let m = storage.map(f)?;
        let written = written_within(storage, f, m.len())?;
        Ok((m, written))
    })
}

/// [`Reader::written_end`] of `f`, at most `len` (the bytes at hand).
pub(super) fn written_within(storage: &dyn Reader, f: FileId, len: usize) -> std::io::Result<usize> {
    Ok(usize::try_from(storage.written_end(f)?).unwrap_or(usize::MAX).min(len))
}

/// A segment's header when it checks out on its own (magic and checksum; whether it fits the
/// chain is judged where the segment is walked).
///
/// A file nothing was written to (a reserved spare) is not read: a read would put zero pages
/// in the page cache, which some file systems (ext4) then report as written data.
pub(super) fn valid_header(storage: &dyn Reader, seq: u64) -> Result<Option<SegmentHeader>> {
    let b = on_segment(storage, seq, "reading", |f| {
        if storage.written_end(f).is_ok_and(|end| end == 0) {
            return Ok(None);
        }
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        Ok((storage.read_at(f, 0, &mut b)? == SEGMENT_HEADER_LEN).then_some(b))
    })?;
    Ok(b.and_then(|b| SegmentHeader::self_valid(&b)))
}
