//! A node's connections: accepted among the handshakes in progress, each request read under
//! the frame limit (an oversized one answered and skipped), checked against what the peer's
//! identity may ask, then answered by `handle` (`mod.rs`). Separate from the answers: this is
//! the connection's life, whatever the requests are.

use super::{handle, Ctx};
use crate::net::access::Identity;
use crate::net::admission::{Handshakes, RefusalLog, IN_HANDSHAKE};
use crate::net::frame::{read_next, skip_body, write_frame_max, Next};
use crate::net::stream::{Security, Stream};
use crate::net::wire::{MembershipFailure, Msg, Reply, WriteReply};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// in progress (`net/admission.rs`); and looks at the TLS files once a second, so a changed
/// certificate or authority takes effect without waiting for a new connection (`net/tls.rs`).
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    let handshakes = Handshakes::new(IN_HANDSHAKE);
    let refusals = Arc::new(RefusalLog::default());
    let mut look = tokio::time::interval(Duration::from_secs(1));
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = look.tick() => {
                if let Security::Tls(files) = &ctx.security {
                    files.look();
                }
                continue;
            }
        };
        match accepted {
            Ok((s, _)) => {
                let place = handshakes.admit();
                let (ctx, refusals) = (ctx.clone(), refusals.clone());
                tokio::spawn(async move {
                    let accepted = tokio::select! {
                        a = ctx.security.accept(s, ctx.max_frame) => a,
                        _ = place.dropped() => Err(format!(
                            "dropped a connection still in its handshake: more than {IN_HANDSHAKE} at once"
                        )),
                    };
                    drop(place);
                    let (s, who) = match accepted {
                        Ok(a) => a,
                        Err(why) => {
                            if let Some(line) = refusals.refused(std::time::Instant::now(), &why) {
                                tracing::warn!(node = ctx.id, "refused a connection: {line}");
                            }
                            return;
                        }
                    };
                    // A connection's failure ends that connection only.
                    let _ = connection(s, &who, &ctx).await;
                });
            }
            // Out of descriptors or similar: wait a little rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The next request on `s`, or `None` to close the connection: the peer closed it, or the TLS
/// material changed and the peer's certificate no longer verifies (a revoked certificate ends
/// its kept connections too). The read in progress is kept, not cancelled, while the
/// certificate is checked again, so no request is cut.
async fn next_checked(
    s: &mut Stream,
    who: &Identity,
    changes: &mut Option<(tokio::sync::watch::Receiver<u64>, Arc<crate::net::tls::TlsFiles>)>,
    ctx: &Ctx,
) -> io::Result<Option<(Msg, Vec<u8>)>> {
    let Some((rx, files)) = changes else { return next_request(s, ctx.max_frame).await };
    let read = next_request(s, ctx.max_frame);
    tokio::pin!(read);
    loop {
        tokio::select! {
            r = &mut read => return r,
            Ok(()) = rx.changed() => {
                rx.borrow_and_update();
                if !who.chain().is_some_and(|c| files.trusts_client(c)) {
                    tracing::warn!(
                        node = ctx.id,
                        "closed a connection from {}: its certificate no longer verifies against the reloaded authority",
                        who.describe()
                    );
                    return Ok(None);
                }
            }
        }
    }
}

async fn connection(mut s: Stream, who: &Identity, ctx: &Ctx) -> io::Result<()> {
    let mut served = 0u64;
    // A snapshot being received in chunks on this connection.
    let mut incoming = None;
    // The node that said hello to this node on this connection (`Msg::Hello`): Raft messages
    // need one, and must come from it.
    let mut greeted: Option<u64> = None;
    let mut changes = match (&ctx.security, who.chain()) {
        (Security::Tls(files), Some(_)) => Some((files.changes(), files.clone())),
        _ => None,
    };
    while let Some((msg, tail)) = next_checked(&mut s, who, &mut changes, ctx).await? {
        served += 1;
        let raft = msg.is_raft();
        if raft && ctx.partition.is_on() {
            return Ok(());
        }
        if let Err(why) = who.permits(&msg) {
            let denied = match &msg {
                Msg::Write { .. } => {
                    Reply::Write(WriteReply::Rejected { why: format!("not appended: {why}"), retry: false })
                }
                Msg::Membership(_) => Reply::Membership(Err(MembershipFailure::Refused(why.clone()))),
                Msg::Hello { .. } => Reply::Hello(Err(why.clone())),
                m if m.is_raft() => {
                    tracing::warn!(node = ctx.id, "closed a connection that sent a Raft message: {why}");
                    return Ok(());
                }
                _ => Reply::Error(why.clone()),
            };
            tracing::warn!(node = ctx.id, "refused a request: {why}");
            write_frame_max(&mut s, &denied, &[], ctx.max_frame).await?;
            if matches!(msg, Msg::Hello { .. }) {
                return Ok(());
            }
            continue;
        }
        if let Msg::Hello { from, to } = msg {
            if to != ctx.id {
                let why = format!(
                    "this is node {}, not node {to} (node {from} has a wrong address for it)",
                    ctx.id
                );
                tracing::warn!(node = ctx.id, "refused a peer connection: {why}");
                write_frame_max(&mut s, &Reply::Hello(Err(why)), &[], ctx.max_frame).await?;
                return Ok(());
            }
            greeted = Some(from);
            write_frame_max(&mut s, &Reply::Hello(Ok(())), &[], ctx.max_frame).await?;
            continue;
        }
        if msg.needs_hello() && greeted.is_none() {
            let why = "a Raft message on a connection that did not say which node it is for (Hello first)";
            write_frame_max(&mut s, &Reply::Error(why.into()), &[], ctx.max_frame).await?;
            return Ok(());
        }
        if let (Some(from), Some(sender)) = (greeted, msg.raft_sender()) {
            if from != sender {
                // Node `from`'s certificate speaking for another node: closed unanswered, like
                // any Raft message this connection may not send; openraft never sees it.
                tracing::warn!(
                    node = ctx.id,
                    "closed a connection from node {from} that sent a Raft message as node {sender}"
                );
                return Ok(());
            }
        }
        let reply = handle(ctx, msg, tail, &mut incoming).await;
        if raft && ctx.partition.is_on() {
            return Ok(());
        }
        write_frame_max(&mut s, &reply, &[], ctx.max_frame).await?;
        debug_assert!(served < u64::MAX);
    }
    Ok(())
}

/// The next request on `s` of at most `max` bytes; `None` when the peer closed the connection.
/// A longer frame is answered here, `Reply::TooLarge`, and its body skipped; then the next.
async fn next_request<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    max: usize,
) -> io::Result<Option<(Msg, Vec<u8>)>> {
    loop {
        match read_next::<_, Msg>(s, max).await? {
            Next::Frame(msg, tail) => return Ok(Some((msg, tail))),
            Next::Closed => return Ok(None),
            Next::TooLarge(t) => {
                // The answer first: a peer that reads while it sends learns at once, and one
                // that reads after sending finds it waiting.
                write_frame_max(s, &Reply::TooLarge(t), &[], max).await?;
                skip_body(s, t).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::frame::{read_frame, write_frame, TooLarge};

    /// A request over the limit is answered `TooLarge` while its sender is still sending (the
    /// pipe holds far less than the body), its body is skipped, and the request after it on
    /// the same connection is served.
    #[tokio::test]
    async fn an_oversized_request_is_answered_then_skipped_and_the_next_one_served() {
        let (mut node, peer) = tokio::io::duplex(4096);
        let (mut from_node, mut to_node) = tokio::io::split(peer);
        let sender = tokio::spawn(async move {
            write_frame(&mut to_node, &Msg::Write { request_id: 7, forwarded: false }, &[1u8; 100_000])
                .await?;
            write_frame(&mut to_node, &Msg::Metrics, &[]).await
        });
        let max = 16 << 10;
        let (msg, tail) = next_request(&mut node, max).await.unwrap().unwrap();
        assert!(matches!(msg, Msg::Metrics) && tail.is_empty(), "{msg:?}");
        sender.await.unwrap().unwrap();
        let (reply, _) = read_frame::<_, Reply>(&mut from_node).await.unwrap().unwrap();
        let Reply::TooLarge(t) = reply else { panic!("{reply:?}") };
        let json = serde_json::to_vec(&Msg::Write { request_id: 7, forwarded: false }).unwrap().len();
        assert_eq!(t, TooLarge { len: (4 + json + 100_000) as u64, max: max as u64 });
        // The peer closes: the end, not an error.
        drop(from_node);
        assert!(next_request(&mut node, max).await.unwrap().is_none());
    }

    /// A length field past the protocol maximum (4 GiB, from a peer that is not a conforming
    /// node or client) is answered, and the connection closed rather than its body read: the
    /// peer holds the connection open and sends nothing more, and the node does not wait for
    /// 4 GiB that will never come (nor read them at line speed if they did).
    #[tokio::test]
    async fn a_length_past_the_protocol_maximum_is_answered_and_the_connection_closed() {
        let (mut node, peer) = tokio::io::duplex(4096);
        let (mut from_node, mut to_node) = tokio::io::split(peer);
        tokio::io::AsyncWriteExt::write_all(&mut to_node, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(10), next_request(&mut node, 16 << 10))
            .await
            .expect("the node waited for the body of a 4 GiB frame");
        let err = r.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let (reply, _) = read_frame::<_, Reply>(&mut from_node).await.unwrap().unwrap();
        assert!(matches!(reply, Reply::TooLarge(TooLarge { len: 0xffff_ffff, .. })), "{reply:?}");
        drop(to_node);
    }
}
