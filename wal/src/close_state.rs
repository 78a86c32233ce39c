//! `wal.close` (FORMAT.md section 6.1): the logical state at a clean close, written by the
//! close ([`write_close_state`]) and read back by the next open ([`read_close_state`]), which
//! then need not walk the segment the close sealed. A file of its own rather than a part of
//! `lifecycle.rs`: the scan (`recovery.rs`) reads it, and lifecycle.rs's cut reads through the
//! scan.

use crate::error::{Error, Result};
use crate::format::*;
use crate::scan;
use crate::storage::{self, Op, Reader, Storage};
use zerocopy::IntoBytes;

/// Writes `wal.close` (FORMAT.md section 6.1): the logical state `l` at the clean close that
/// sealed `segment` with a footer whose checksum is `footer_crc`. Written to a temporary name,
/// synced and renamed; `wal.meta` naming the same close, replaced after this, is what makes it
/// count, so a crash anywhere in between leaves a file that is ignored.
pub(crate) fn write_close_state(
    storage: &dyn Storage,
    segment: u64,
    footer_crc: u32,
    l: &scan::Logical,
) -> std::io::Result<()> {
    let mut state = Vec::new();
    scan::encode_state(l, &mut state);
    let header = CloseHeader {
        magic: CLOSE_MAGIC,
        format_version: FORMAT_VERSION.into(),
        state_len: (state.len() as u32).into(),
        closed_segment_seq: segment.into(),
        closed_footer_crc: footer_crc.into(),
        reserved: 0.into(),
    };
    let mut data = header.as_bytes().to_vec();
    data.extend_from_slice(&state);
    data.extend_from_slice(&crc32c::crc32c(&data).to_le_bytes());
    let _ = storage.remove(CLOSE_TMP_NAME);
    let f = storage.create(CLOSE_TMP_NAME)?;
    let r = storage::complete(storage, 13, Op::Write { file: f, offset: 0, data })
        .and_then(|_| storage::complete(storage, 14, Op::SyncData { file: f }));
    storage.close(f);
    r?;
    storage.rename(CLOSE_TMP_NAME, CLOSE_FILE_NAME)
}

/// The logical state recorded by the clean close of `segment` with footer checksum
/// `footer_crc` (its epoch is the footer's), if `wal.close` holds exactly that: any other
/// content (another close, a torn or foreign file, none) is `Ok(None)`, and the caller walks the
/// segment instead. A file that cannot be read is `Err`: an I/O error says nothing about the
/// bytes, so a scan reports it as such, never as damage.
pub(crate) fn read_close_state(
    storage: &dyn Reader,
    segment: u64,
    footer_crc: u32,
) -> Result<Option<scan::Logical>> {
    let f = match storage.open(CLOSE_FILE_NAME) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {CLOSE_FILE_NAME}"), e)),
    };
    // Sixteen keys of 256 bytes and their headers stay far below 64 KiB.
    let read = storage.len(f).and_then(|len| {
        if len > 64 << 10 {
            return Ok(None);
        }
        let mut buf = vec![0u8; len as usize];
        let n = storage.read_at(f, 0, &mut buf)?;
        buf.truncate(n);
        Ok(Some(buf))
    });
    storage.close(f);
    let Some(data) = read.map_err(|e| Error::io(format!("reading {CLOSE_FILE_NAME}"), e))? else {
        return Ok(None);
    };
    Ok(parse_close_state(&data, segment, footer_crc))
}

fn parse_close_state(data: &[u8], segment: u64, footer_crc: u32) -> Option<scan::Logical> {
    use zerocopy::FromBytes;
    let (body, crc) = data.split_at_checked(data.len().checked_sub(4)?)?;
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let (head, state) = body.split_at_checked(CLOSE_HEADER_LEN)?;
    let h = CloseHeader::read_from_bytes(head).ok()?;
    let ok = h.magic == CLOSE_MAGIC
        && h.format_version.get() == FORMAT_VERSION
        && h.state_len.get() as usize == state.len()
        && h.closed_segment_seq.get() == segment
        && h.closed_footer_crc.get() == footer_crc
        && h.reserved.get() == 0;
    if !ok {
        return None;
    }
    scan::parse_state(state).ok()
}
