//! The one framing every message on a node's TCP port uses (Raft RPCs, client writes, admin):
//!
//! ```text
//! 0  u32 LE  n: bytes after this field (at most the reader's limit)
//! 4  u32 LE  j: bytes of JSON (j <= n - 4)
//! 8  [j]     the message, serde_json
//! …  [n-4-j] a raw tail: a snapshot chunk's bytes, an append-entries RPC's entries, a client
//!            write's command; empty otherwise
//! ```
//!
//! Why JSON: openraft's messages already derive serde (the `serde` feature), `serde_json` is
//! already a workspace dependency, and a frame can be read with `jq` when a test fails. What
//! JSON is bad at — byte arrays (an array of numbers, up to 4 bytes per byte) — is kept out of
//! it: a snapshot chunk, the entries of an append-entries RPC and a client's command travel as
//! the raw tail ([`super::append`], [`super::chunks`], [`super::limit`]). Every length is
//! checked before anything is allocated, and a frame that does not parse is an error for that
//! connection, never a panic.
//!
//! A frame is bounded ([`MAX_FRAME_LEN`], or a node's `max_frame_bytes`); what can be larger
//! than a frame is split by its sender: a snapshot into chunks, an append-entries batch into
//! the prefix that fits (the rest follows in the next RPC). A client's write cannot be split:
//! one larger than the limit is refused ([`super::limit`]).
//!
//! **A frame over the limit is answered, not dropped.** Its length field is known before its
//! body is read, so a server reads it with [`read_next`], which gives [`Next::TooLarge`]
//! instead of reading the body; the server answers it (a typed reply naming the frame's length
//! and the limit, `Reply::TooLarge`) and then skips the body ([`skip_body`]: read in pieces and
//! discarded, nothing allocated for it) and goes on reading the next frame. Why skip rather
//! than close: the connection stays in step (one reply per request, the next frame starting
//! where the length field said), so the peer reads the answer after it finishes sending, as
//! it does for any request, and may keep using the connection. Closing instead would be
//! unsound: a socket closed with unread bytes in its receive buffer sends a reset, and a reset
//! can discard the reply before the peer reads it (the peer sees "connection reset", which a
//! client must take for "maybe appended"); and a peer still writing a body larger than the
//! socket buffers would never get to read the reply at all. Skipping costs the server reading
//! the bytes it refused (none kept), and is bounded: a body is skipped only up to
//! [`MAX_FRAME_LEN`] or the reader's own limit, whichever is larger, since no conforming peer
//! sends more (a client refuses before sending what its own limit, by default
//! [`MAX_FRAME_LEN`], cannot carry, and a node splits what it sends to its limit). A length
//! field past that (up to 4 GiB, from something that is not a node or client) is answered and
//! the connection closed, its body unread: a node neither waits for gigabytes that may never
//! come nor reads them at line speed. (Like every read on a node's port, a skip has no
//! deadline: a peer that sends slowly holds its own connection's task, nothing more.) Readers of
//! replies ([`read_frame_max`]) have nobody to answer: a reply over their limit is an error
//! whose inner error is the typed [`TooLarge`].

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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

/// A frame longer than a limit: a frame read whose length field says more (its body was not
/// read), or one a writer refused to send. On the wire as `Reply::TooLarge`, and inside the
/// `io::Error` of [`read_frame_max`] and [`write_frame_max`] ([`TooLarge::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("a {len}-byte frame is larger than the limit of {max} bytes")]
pub struct TooLarge {
    /// The frame's length field: its bytes after that field.
    pub len: u64,
    /// The limit it exceeds.
    pub max: u64,
}

impl TooLarge {
    /// The [`TooLarge`] an `io::Error` of this module carries, if it is one.
    pub fn of(e: &io::Error) -> Option<TooLarge> {
        e.get_ref()?.downcast_ref::<TooLarge>().copied()
    }
}

/// What [`read_next`] read.
#[derive(Debug)]
pub enum Next<T> {
    /// A whole frame: its message and tail.
    Frame(T, Vec<u8>),
    /// A length field over the limit; the `len` bytes of the body follow, unread.
    TooLarge(TooLarge),
    /// The peer closed the connection between frames.
    Closed,
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
        let t = TooLarge { len: n as u64, max: max as u64 };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, t));
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

/// [`read_frame`] with a frame limit of `max` bytes; a frame over it is an error carrying
/// [`TooLarge`] (the connection is then out of step: drop it).
pub async fn read_frame_max<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<(T, Vec<u8>)>> {
    match read_next(r, max).await? {
        Next::Frame(msg, tail) => Ok(Some((msg, tail))),
        Next::Closed => Ok(None),
        Next::TooLarge(t) => Err(io::Error::new(io::ErrorKind::InvalidData, t)),
    }
}

/// Reads one frame of at most `max` bytes, or only the length field of a longer one
/// ([`Next::TooLarge`]: the caller answers it, then skips its body with [`skip_body`]).
pub async fn read_next<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
    max: usize,
) -> io::Result<Next<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Next::Closed),
        Err(e) => return Err(e),
    }
    let n_untrusted = u32::from_le_bytes(len) as usize;
    if n_untrusted < 4 {
        return Err(invalid(format!("frame length {n_untrusted} is shorter than its JSON length field")));
    }
    if n_untrusted > max {
        return Ok(Next::TooLarge(TooLarge { len: n_untrusted as u64, max: max as u64 }));
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
    Ok(Next::Frame(msg, tail.to_vec()))
}

/// Reads and discards the body of a frame [`read_next`] found too large (`t.len` bytes), in
/// small pieces: nothing in proportion to it is allocated, and the next frame starts where it
/// ends. An error when the peer closes before the end, and, without reading anything, when the
/// body is longer than [`MAX_FRAME_LEN`] and the reader's own limit (`t.max`): no conforming
/// peer sends that (see the module docs); the caller closes the connection.
pub async fn skip_body<R: AsyncRead + Unpin>(r: &mut R, t: TooLarge) -> io::Result<()> {
    let most = t.max.max(MAX_FRAME_LEN as u64);
    if t.len > most {
        return Err(invalid(format!(
            "{t}, and past any frame a node or client sends ({most} bytes): not skipped"
        )));
    }
    let skipped = tokio::io::copy(&mut (&mut *r).take(t.len), &mut tokio::io::sink()).await?;
    if skipped < t.len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the peer closed the connection {skipped} bytes into the body of {t}"),
        ));
    }
    Ok(())
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
        let err = read_frame::<_, Vec<u32>>(&mut &huge[..]).await.unwrap_err();
        let t = TooLarge { len: MAX_FRAME_LEN as u64 + 1, max: MAX_FRAME_LEN as u64 };
        assert_eq!(TooLarge::of(&err), Some(t), "{err}");
        let short = [3, 0, 0, 0, 0, 0, 0];
        assert!(read_frame::<_, Vec<u32>>(&mut &short[..]).await.is_err());
        let past = [8, 0, 0, 0, 9, 0, 0, 0, b'[', b']', 0, 0];
        assert!(read_frame::<_, Vec<u32>>(&mut &past[..]).await.is_err());
        let bad = [6, 0, 0, 0, 2, 0, 0, 0, b'{', b'x'];
        assert!(read_frame::<_, Vec<u32>>(&mut &bad[..]).await.is_err());
        assert!(read_frame::<_, Vec<u32>>(&mut &buf[..buf.len() - 1]).await.is_err());
    }

    /// A frame over the reader's limit is reported with its length and the limit, before its
    /// body is read; skipping the body leaves the stream at the next frame, which reads whole.
    #[tokio::test]
    async fn a_frame_over_the_limit_is_named_then_skipped_and_the_next_frame_reads() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &"big", &[7u8; 100]).await.unwrap();
        let big = buf.len() - 4;
        write_frame(&mut buf, &"small", b"tail").await.unwrap();
        let r = &mut buf.as_slice();
        let Next::TooLarge(t) = read_next::<_, String>(r, 64).await.unwrap() else { panic!("not refused") };
        assert_eq!(t, TooLarge { len: big as u64, max: 64 });
        assert_eq!(t.to_string(), format!("a {big}-byte frame is larger than the limit of 64 bytes"));
        assert_eq!(r.len(), buf.len() - 4, "only the length field was read");
        skip_body(r, t).await.unwrap();
        match read_next::<_, String>(r, 64).await.unwrap() {
            Next::Frame(m, tail) => assert_eq!((m.as_str(), tail.as_slice()), ("small", &b"tail"[..])),
            other => panic!("{other:?}"),
        }
        assert!(matches!(read_next::<_, String>(r, 64).await.unwrap(), Next::Closed));
        // A body cut short by the peer: an error, not a frame.
        let r = &mut &buf[..40];
        let Next::TooLarge(t) = read_next::<_, String>(r, 64).await.unwrap() else { panic!("not refused") };
        let err = skip_body(r, t).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
        // A body past any frame a conforming peer sends is not skipped (nor read at all).
        let r = &mut &[0xffu8, 0xff, 0xff, 0xff, 1, 2, 3][..];
        let Next::TooLarge(t) = read_next::<_, String>(r, 64).await.unwrap() else { panic!("not refused") };
        let err = skip_body(r, t).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert_eq!(r.len(), 3, "nothing of the body was read");
        // A writer refuses to send what is over its limit, with the same typed error.
        let err = write_frame_max(&mut Vec::new(), &"big", &[7u8; 100], 64).await.unwrap_err();
        assert_eq!(TooLarge::of(&err), Some(TooLarge { len: big as u64, max: 64 }));
    }
}
