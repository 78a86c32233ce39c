//! Whether a connection kept idle between requests can still carry the next one.
//!
//! A client keeps one connection per node, a follower a pool of connections to its leader, and
//! openraft's network one per peer. Between two requests the peer may have closed its end (it
//! stopped, restarted, or dropped the connection on an error). A request written into such a
//! connection is accepted by the local kernel and then fails (reset, or end of stream), and
//! afterwards that failure cannot be told from a peer that read the request, perhaps acted on
//! it, and then died: a client writing would have to answer "maybe appended" (Indeterminate)
//! for a write no node ever read, and a client whose whole cluster restarted since its last
//! write could not say "unavailable" (Rejected) any more. The difference can only be seen
//! *before* writing: [`reusable`] looks at the connection without waiting, and a connection
//! that fails the look is dropped and replaced by a new one; nothing was sent on it.
//!
//! What the look cannot see stays conservative: a peer that closes between the look and the
//! write, or a machine that vanished without closing anything (no FIN, no reset), still looks
//! open, and the request that then fails is taken as possibly delivered.

use std::mem::MaybeUninit;
use tokio::net::TcpStream;

/// Whether the idle connection `s` may carry a request: nothing waiting to be read on it, and
/// neither closed nor reset by the peer. One non-blocking `recv(MSG_PEEK)` of one byte, a
/// system call rather than tokio's readiness (which learns of a close only when its driver
/// next polls, so a close that just arrived could be missed); it consumes nothing.
pub fn reusable(s: &TcpStream) -> bool {
    let mut byte = [MaybeUninit::<u8>::uninit()];
    match socket2::SockRef::from(s).peek(&mut byte) {
        // Nothing to read: open, as far as anyone can tell before writing.
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
        // End of stream: the peer closed it.
        Ok(0) => false,
        // Bytes nobody asked for (a late reply to a request given up on): out of step.
        Ok(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_connection_is_reusable_until_the_peer_closes_it_or_sends_unasked() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (a, (mut b, _)) = tokio::join!(TcpStream::connect(addr), async { l.accept().await.unwrap() });
        let a = a.unwrap();
        assert!(reusable(&a), "an idle, open connection");
        b.write_all(b"x").await.unwrap();
        a.readable().await.unwrap();
        assert!(!reusable(&a), "a byte waits that no request asked for");
        let (c, (d, _)) = tokio::join!(TcpStream::connect(addr), async { l.accept().await.unwrap() });
        let c = c.unwrap();
        drop(d);
        c.readable().await.unwrap();
        assert!(!reusable(&c), "the peer closed it");
        assert!(!reusable(&c), "a look consumes nothing: still closed");
    }
}
