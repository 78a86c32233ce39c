//! Encoding a staged batch: sequence numbers, chain links and checksums are set in one pass
//! when the batch is written, so appends only copy bytes.

use crate::format::*;
use crate::scan::Counts;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, IntoBytes};

/// Frame header plus payload.
pub const FRAME_LEN: usize = RECORD_HEADER_LEN + FRAME_PAYLOAD_LEN;

/// A record header with sequence, link and checksums left for [`seal_batch`] (or set by the caller).
pub fn header(kind: Kind, flags: u8, payload_len: usize, lsn: u64, epoch: u64) -> RecordHeader {
    RecordHeader {
        crc: U32::new(0),
        header_crc: U32::new(0),
        kind: kind as u8,
        flags,
        reserved0: [0; 2],
        payload_len: U32::new(payload_len as u32),
        seq: U64::new(0),
        lsn: U64::new(lsn),
        epoch: U64::new(epoch),
        prev_crc: U32::new(0),
        reserved1: [0; 4],
    }
}

/// Encodes a complete record (sequence, link and checksums set) into `out`.
pub fn encode_record(mut h: RecordHeader, seq: u64, prev_crc: u32, payload: &[u8], out: &mut Vec<u8>) -> u32 {
    h.seq = U64::new(seq);
    h.prev_crc = U32::new(prev_crc);
    h.header_crc = U32::new(h.compute_header_crc());
    h.crc = U32::new(h.compute_crc(payload));
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len() + align_up(payload.len()) - payload.len(), 0);
    h.crc.get()
}

/// Where a staged batch's frame is and what it says.
#[derive(Debug)]
pub struct Frame {
    /// Offset of the frame in the staged buffer (after a segment header, if one leads it).
    pub at: usize,
    /// The next LSN when the batch opened.
    pub lsn: u64,
    /// The writer epoch when the batch opened.
    pub epoch: u64,
    /// Records staged after the frame (counted while staging, not by walking the buffer).
    pub records: u32,
}

/// Sets sequence, chain links and checksums of a staged batch. Returns the next sequence and the
/// last checksum.
pub fn seal_batch(
    buf: &mut [u8],
    frame: &Frame,
    mut seq: u64,
    mut prev: u32,
    durable_seq: u64,
) -> (u64, u32) {
    let (frame_at, frame_lsn, frame_epoch, count) = (frame.at, frame.lsn, frame.epoch, frame.records);
    let frame_end = frame_at + FRAME_LEN;
    let fp = FramePayload {
        durable_seq: U64::new(durable_seq),
        record_count: U32::new(count),
        reserved: [0; 4],
        batch_len: U64::new((buf.len() - frame_end) as u64),
    };
    let fh = header(Kind::Frame, 0, FRAME_PAYLOAD_LEN, frame_lsn, frame_epoch);
    buf[frame_at..frame_at + RECORD_HEADER_LEN].copy_from_slice(fh.as_bytes());
    buf[frame_at + RECORD_HEADER_LEN..frame_end].copy_from_slice(fp.as_bytes());
    let first_seq = seq;
    let mut off = frame_at;
    while off + RECORD_HEADER_LEN <= buf.len() {
        let Ok(mut h) = RecordHeader::read_from_bytes(&buf[off..off + RECORD_HEADER_LEN]) else { break };
        let plen = h.payload_len.get() as usize;
        h.seq = U64::new(seq);
        h.prev_crc = U32::new(prev);
        h.header_crc = U32::new(h.compute_header_crc());
        buf[off..off + RECORD_HEADER_LEN].copy_from_slice(h.as_bytes());
        // Header (from byte 4) and payload are contiguous: one checksum call, as the reader does.
        let crc = crc32c::crc32c(&buf[off + 4..off + RECORD_HEADER_LEN + plen]);
        buf[off..off + 4].copy_from_slice(&crc.to_le_bytes());
        prev = crc;
        seq += 1;
        off += record_len(plen);
    }
    // Pair assertion: the buffer holds exactly the frame and the records staging counted.
    debug_assert_eq!(seq - first_seq, u64::from(count) + 1, "staged record count disagrees with the buffer");
    debug_assert_eq!(off, buf.len());
    (seq, prev)
}

pub fn merge_counts(into: &mut Counts, batch: &Counts, records: u32) {
    into.records += records;
    if batch.entries > 0 {
        into.min_lsn = if into.entries == 0 { batch.min_lsn } else { into.min_lsn.min(batch.min_lsn) };
        into.max_lsn = if into.entries == 0 { batch.max_lsn } else { into.max_lsn.max(batch.max_lsn) };
    }
    into.entries += batch.entries;
    into.cuts += batch.cuts;
    into.min_keep_lt = into.min_keep_lt.min(batch.min_keep_lt);
}
