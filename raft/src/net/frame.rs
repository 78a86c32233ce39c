//! The one framing every message on a node's TCP port uses (Raft RPCs, client writes, admin):
//!
//! ```text
//! 0  u32 LE  n: bytes after this field (at most MAX_FRAME_LEN)
//! 4  u32 LE  j: bytes of JSON (j <= n - 4)
//! 8  [j]     the message, serde_json
//! …  [n-4-j] a raw tail: the snapshot bytes of a full-snapshot RPC, empty otherwise
//! ```
//!
//! Why JSON: openraft's messages already derive serde (the `serde` feature), `serde_json` is
//! already a workspace dependency, and a frame can be read with `jq` when a test fails. What
//! JSON is bad at — byte arrays (an array of numbers, up to 4 bytes per byte) — is kept out of
//! it: a snapshot chunk and the entries of an append-entries RPC travel as the raw tail
//! ([`super::append`], [`super::chunks`]). Every length is checked before anything is
//! allocated, and a frame that does not parse is an error for that connection, never a panic.
//!
//! A frame is bounded ([`MAX_FRAME_LEN`], or a node's `max_frame_bytes`); what can be larger
//! than a frame is split by its sender: a snapshot into chunks, an append-entries batch into
//! the prefix that fits (the rest follows in the next RPC).

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame a node reads or writes by default.
pub const MAX_FRAME_LEN: usize = 64 << 20;

/// The smallest frame limit a node accepts: room for any message but a snapshot chunk or a
/// batch of entries, which are split to fit.
pub const MIN_FRAME_LEN: usize = 16 << 10;

/// The frame's length field for `json` bytes of message and `tail` bytes after it.
pub fn frame_len(json: usize, tail: usize) -> usize {
    4 + json + tail
}

/// Writes one frame: `msg` as JSON, then `tail`.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
    tail: &[u8],
) -> io::Result<()> {
    write_frame_max(w, msg, tail, MAX_FRAME_LEN).await
}

/// [`write_frame`] with a frame limit of `max` bytes.
pub async fn write_frame_max<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
    tail: &[u8],
    max: usize,
) -> io::Result<()> {
    let json = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let n = frame_len(json.len(), tail.len());
    if n > max {
        return Err(io::Error::other(format!("a {n}-byte frame is larger than the limit {max}")));
    }
    let mut buf = Vec::with_capacity(8 + json.len() + tail.len().min(1 << 16));
    buf.extend_from_slice(&(n as u32).to_le_bytes());
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    if tail.len() <= 1 << 16 {
        buf.extend_from_slice(tail);
        w.write_all(&buf).await?;
    } else {
        w.write_all(&buf).await?;
        w.write_all(tail).await?;
    }
    w.flush().await
}

/// Reads one frame; `Ok(None)` when the peer closed the connection between frames.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> io::Result<Option<(T, Vec<u8>)>> {
    read_frame_max(r, MAX_FRAME_LEN).await
}

/// [`read_frame`] with a frame limit of `max` bytes.
pub async fn read_frame_max<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<(T, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n_untrusted = u32::from_le_bytes(len) as usize;
    if !(4..=max).contains(&n_untrusted) {
        return Err(invalid(format!("frame length {n_untrusted} outside 4..={max}")));
    }
    let mut body = vec![0u8; n_untrusted];
    r.read_exact(&mut body).await?;
    let Some((j, rest)) = body.split_first_chunk::<4>() else {
        return Err(invalid("frame shorter than its JSON length".into()));
    };
    let j_untrusted = u32::from_le_bytes(*j) as usize;
    if j_untrusted > rest.len() {
        return Err(invalid(format!("JSON length {j_untrusted} past the frame's {} bytes", rest.len())));
    }
    let (json, tail) = rest.split_at(j_untrusted);
    let msg = serde_json::from_slice(json).map_err(|e| invalid(format!("bad message: {e}")))?;
    Ok(Some((msg, tail.to_vec())))
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_and_bad_frames_are_errors() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &vec![1u32, 2], b"tail").await.unwrap();
        let (m, tail): (Vec<u32>, Vec<u8>) = read_frame(&mut buf.as_slice()).await.unwrap().unwrap();
        assert_eq!((m, tail), (vec![1, 2], b"tail".to_vec()));
        // A closed connection between frames is the end, not an error.
        assert!(read_frame::<_, Vec<u32>>(&mut &b""[..]).await.unwrap().is_none());
        // Oversized, JSON length past the end, bad JSON, cut short: errors.
        let huge = ((MAX_FRAME_LEN + 1) as u32).to_le_bytes();
        assert!(read_frame::<_, Vec<u32>>(&mut &huge[..]).await.is_err());
        let past = [8, 0, 0, 0, 9, 0, 0, 0, b'[', b']', 0, 0];
        assert!(read_frame::<_, Vec<u32>>(&mut &past[..]).await.is_err());
        let bad = [6, 0, 0, 0, 2, 0, 0, 0, b'{', b'x'];
        assert!(read_frame::<_, Vec<u32>>(&mut &bad[..]).await.is_err());
        assert!(read_frame::<_, Vec<u32>>(&mut &buf[..buf.len() - 1]).await.is_err());
    }
}
