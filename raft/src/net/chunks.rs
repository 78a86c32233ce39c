//! A snapshot on the wire, in chunks: each chunk is one frame (`Msg::SnapshotChunk`: the
//! leader's vote, the snapshot's meta, the chunk's offset and the snapshot's total length, and
//! the chunk's bytes as the raw tail), so a snapshot of any size travels within the frame
//! limit. The sender sends them in order on one connection and waits for each reply; the
//! receiver assembles them per connection and installs the snapshot when the last byte is in.
//! A connection that drops mid-way loses its partial snapshot: openraft sends it again, from
//! the start, on a new connection. A chunk out of order, for another snapshot, or past the
//! announced length is refused with why.

use crate::net::frame::frame_len;
use crate::{SnapshotData, SnapshotMeta, TypeConfig, Vote};
use openraft::type_config::alias::SnapshotOf;
use std::io;

/// How many snapshot bytes fit one frame next to a chunk message whose JSON (with the widest
/// offset and total) is `msg_json` bytes.
pub fn chunk_len(max_frame: usize, msg_json: usize) -> io::Result<usize> {
    match max_frame.checked_sub(frame_len(msg_json, 0)) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(io::Error::other(format!(
            "a snapshot chunk's header ({msg_json} bytes) leaves no room in a frame of {max_frame} bytes"
        ))),
    }
}

/// The pieces of `data` to send, in order, each at most `len` bytes: at least one (an empty
/// snapshot is one empty chunk).
pub fn pieces(data: &[u8], len: usize) -> Vec<(u64, &[u8])> {
    if data.is_empty() {
        return vec![(0, data)];
    }
    data.chunks(len.max(1)).enumerate().map(|(i, c)| ((i * len.max(1)) as u64, c)).collect()
}

/// A whole snapshot, as openraft installs it.
pub type Snapshot = SnapshotOf<TypeConfig, SnapshotData>;

fn through(m: &SnapshotMeta) -> String {
    m.last_log_id.map_or("nothing".into(), |l| format!("index {}", l.index))
}

/// A snapshot being received on one connection.
#[derive(Debug)]
pub struct Incoming {
    meta: SnapshotMeta,
    total: u64,
    buf: SnapshotData,
}

/// One received chunk: `offset` into a snapshot of `total` bytes.
#[derive(Debug)]
pub struct Chunk {
    pub vote: Vote,
    pub meta: SnapshotMeta,
    pub offset: u64,
    pub total: u64,
    pub data: Vec<u8>,
}

/// Adds `c` to the snapshot being received in `slot`. Returns the whole snapshot (and the vote
/// it came with) when `c` completed it, `None` when more is to come, or why `c` was refused
/// (the partial snapshot is then dropped).
pub fn accept(slot: &mut Option<Incoming>, c: Chunk) -> Result<Option<(Vote, Snapshot)>, String> {
    if c.offset == 0 {
        *slot = Some(Incoming { meta: c.meta.clone(), total: c.total, buf: Vec::new() });
    }
    let Some(inc) = slot.as_mut() else {
        return Err(format!("a snapshot chunk at offset {} with no chunk at offset 0 before it", c.offset));
    };
    let have = inc.buf.len() as u64;
    let why = if inc.meta != c.meta || inc.total != c.total {
        Some(format!(
            "a chunk of the snapshot through {} while receiving the one through {}",
            through(&c.meta),
            through(&inc.meta)
        ))
    } else if c.offset != have {
        Some(format!("a chunk at offset {} where {have} bytes were received", c.offset))
    } else if have + c.data.len() as u64 > c.total {
        Some(format!("a chunk past the snapshot's {} bytes", c.total))
    } else {
        None
    };
    if let Some(why) = why {
        *slot = None;
        return Err(why);
    }
    inc.buf.extend_from_slice(&c.data);
    if (inc.buf.len() as u64) < inc.total {
        return Ok(None);
    }
    let Some(done) = slot.take() else { return Ok(None) };
    Ok(Some((c.vote, Snapshot { meta: done.meta, snapshot: done.buf })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::vote::RaftLeaderIdExt;

    fn meta(through: u64) -> SnapshotMeta {
        let id = <crate::TypeConfig as openraft::RaftTypeConfig>::LeaderId::new_committed(1, 1);
        SnapshotMeta {
            last_log_id: Some(crate::LogId::new(id, through)),
            last_membership: Default::default(),
        }
    }

    fn chunk(id: u64, offset: u64, total: u64, data: &[u8]) -> Chunk {
        Chunk { vote: Vote::new_committed(1, 1), meta: meta(id), offset, total, data: data.to_vec() }
    }

    #[test]
    fn chunks_in_order_make_the_snapshot_and_anything_else_is_refused() {
        let data: Vec<u8> = (0..250u8).collect();
        let ps = pieces(&data, 100);
        assert_eq!(
            ps.iter().map(|p| (p.0, p.1.len())).collect::<Vec<_>>(),
            [(0, 100), (100, 100), (200, 50)]
        );
        assert_eq!(pieces(&[], 100).len(), 1, "an empty snapshot is one empty chunk");
        let mut slot = None;
        for (i, (off, p)) in ps.iter().enumerate() {
            let got = accept(&mut slot, chunk(7, *off, 250, p)).unwrap();
            assert_eq!(got.is_some(), i == 2);
            if let Some((_, snap)) = got {
                assert_eq!((snap.meta, snap.snapshot), (meta(7), data.clone()));
            }
        }
        // Out of order, another snapshot, past the end, nothing started: refused.
        let mut slot = None;
        accept(&mut slot, chunk(7, 0, 250, &data[..100])).unwrap();
        assert!(accept(&mut slot, chunk(7, 150, 250, &data[..50])).unwrap_err().contains("offset 150"));
        assert!(slot.is_none(), "a refused chunk drops the partial snapshot");
        accept(&mut slot, chunk(7, 0, 250, &data[..100])).unwrap();
        assert!(accept(&mut slot, chunk(8, 100, 250, &data[..100])).unwrap_err().contains("index 8"));
        accept(&mut slot, chunk(7, 0, 150, &data[..100])).unwrap();
        assert!(accept(&mut slot, chunk(7, 100, 150, &data[..100])).unwrap_err().contains("past"));
        assert!(accept(&mut None, chunk(7, 100, 250, &data[..10])).is_err());
        assert!(chunk_len(100, 200).is_err());
        assert_eq!(chunk_len(1000, 96).unwrap(), 900);
    }
}
