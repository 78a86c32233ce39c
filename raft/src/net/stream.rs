//! Every connection a node accepts or opens, and every client's: mutual TLS, or plaintext
//! between loopback addresses only.
//!
//! [`Security`] is chosen once per process (`--tls DIR` or `--plaintext`) and used at both ends
//! of every connection, so the rules hold in one place:
//!
//! - **TLS.** A connection is accepted only after a TLS handshake in which the peer presented a
//!   certificate chained to the cluster's authority and naming a role (`net/access.rs`); until
//!   then no byte of it is read as a frame. A node connecting to node N checks that the server
//!   is N (its certificate names `N.node.walraft`), a client that it is a node ([`NODES`]).
//!   A connection whose first byte is not a TLS handshake record (a plaintext client, an old
//!   build) is answered one plaintext [`Reply::Refused`] frame, without reading what it sent, and
//!   closed: the client learns why instead of waiting for a handshake.
//! - **Plaintext** (`--plaintext`) only between loopback addresses: a node refuses to listen on
//!   another address, closes a connection from one after answering `Refused`, and does not
//!   connect to one. Over plaintext every peer is trusted ([`Identity::Loopback`]).
//!
//! **The greeting.** A connection a client or a forwarding node opens starts with
//! [`Msg::Greet`], answered by the node's id, before any request is written on it. Under TLS 1.3
//! the server verifies the client's certificate after the client's side of the handshake has
//! ended, so a refused certificate shows only at the client's first read: without the greeting
//! that read would be the reply to a write already sent ("maybe appended"); with it, a refusal is
//! known before anything was sent, and a write is `Rejected`, not `Indeterminate`.
//! (Node-to-node connections start with `Msg::Hello`, which does the same.)

use crate::net::access::{node_name, Identity, NODES};
use crate::net::frame::{read_frame_max, write_frame_max};
use crate::net::tls::TlsFiles;
use crate::net::wire::{Msg, Reply};
use rustls_pki_types::ServerName;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long a peer has to complete its handshake (TLS, or its first byte) before the node
/// gives up on the connection: a peer that connects and sends nothing holds no task for long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// How this process's connections are secured.
#[derive(Clone, Debug)]
pub enum Security {
    /// Plaintext between loopback addresses only (`--plaintext`).
    Plaintext,
    /// Mutual TLS with the material in a directory (`--tls DIR`, `net/tls.rs`).
    Tls(Arc<TlsFiles>),
}

/// Which server a connection is meant to reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Node `id`, and no other (a node connecting to a peer, or forwarding to its leader).
    Node(u64),
    /// Any node of the cluster (a client).
    AnyNode,
}

/// A connection, in either direction, secured or not.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    /// Opened by this process, to a server that was to be `name`, with the material of
    /// `generation` (to check again once the material changed: [`Stream::reusable`]).
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>, Arc<str>, u64),
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Client(s, ..) => s.get_ref().0,
            Stream::Server(s) => s.get_ref().0,
        }
    }

    /// Whether a connection kept idle may carry the next request: open as far as a look can
    /// tell (`net/idle.rs`), and, if the TLS material changed since it was opened, the server's
    /// certificate still verifies against the new (a replaced authority revokes it).
    pub fn reusable(&mut self, security: &Security) -> bool {
        if !crate::net::idle::reusable(self.tcp()) {
            return false;
        }
        match (self, security) {
            (Stream::Client(s, name, generation), Security::Tls(files)) => {
                files.look();
                let now = files.generation();
                if now == *generation {
                    return true;
                }
                let chain = s.get_ref().1.peer_certificates().unwrap_or_default();
                let trusted = files.trusts_server(chain, name);
                // Checked against this generation: not again until the next.
                *generation = now;
                trusted
            }
            _ => true,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Client(s, ..) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::Server(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Client(s, ..) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::Server(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Client(s, ..) => Pin::new(&mut **s).poll_flush(cx),
            Stream::Server(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Client(s, ..) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::Server(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// An authentication failure: a TLS error (a certificate the peer or this process refused,
/// an alert), or the node's [`Reply::Refused`]. Such a failure repeats on every retry until
/// someone changes a certificate or a flag, unlike a network failure.
pub fn is_refusal(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

fn refusal(e: io::Error) -> io::Error {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(t) => io::Error::new(io::ErrorKind::PermissionDenied, format!("TLS: {t}")),
        None => e,
    }
}

fn plaintext_off_loopback(addr: std::net::SocketAddr) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "plaintext (--plaintext) is for loopback addresses only, and {addr} is not one: use --tls DIR"
        ),
    )
}

impl Security {
    /// Mutual TLS with the material in `dir`, loaded now (an error names the file).
    pub fn tls(dir: &std::path::Path) -> io::Result<Security> {
        Ok(Security::Tls(Arc::new(TlsFiles::open(dir)?)))
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Security::Tls(_))
    }

    /// Refuses to serve plaintext on a non-loopback address.
    pub fn check_listen(&self, addr: std::net::SocketAddr) -> io::Result<()> {
        match self {
            Security::Plaintext if !addr.ip().is_loopback() => Err(plaintext_off_loopback(addr)),
            _ => Ok(()),
        }
    }

    /// Refuses a plaintext peer address that is an IP address other than loopback (a host
    /// name is checked when connected: `connect` refuses a non-loopback peer).
    pub fn check_peer(&self, addr: &str) -> io::Result<()> {
        match (self, addr.parse::<std::net::SocketAddr>()) {
            (Security::Plaintext, Ok(a)) if !a.ip().is_loopback() => Err(plaintext_off_loopback(a)),
            _ => Ok(()),
        }
    }

    /// Checks at start that a node's own certificate names it (node `id`, and a node for
    /// clients) and chains to the authority as a server's and a client's; reloads are held to
    /// the same (`TlsFiles::require_node`). A wrong certificate would otherwise show only as
    /// every peer refusing it.
    pub fn check_node(&self, id: u64) -> io::Result<()> {
        match self {
            Security::Tls(files) => files.require_node(id),
            Security::Plaintext => Ok(()),
        }
    }

    /// Connects to `addr`, meaning to reach `expect`; with TLS, the handshake too. Nothing is
    /// sent on the connection yet.
    pub async fn connect(&self, addr: &str, expect: Expect) -> io::Result<Stream> {
        // Plaintext to an IP address off loopback: not even a connection attempt.
        self.check_peer(addr)?;
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        match self {
            Security::Plaintext => {
                let peer = tcp.peer_addr()?;
                if !peer.ip().is_loopback() {
                    return Err(plaintext_off_loopback(peer));
                }
                Ok(Stream::Plain(tcp))
            }
            Security::Tls(files) => {
                let name = match expect {
                    Expect::Node(id) => node_name(id),
                    Expect::AnyNode => NODES.to_string(),
                };
                let server = ServerName::try_from(name.clone()).map_err(io::Error::other)?;
                let configs = files.current();
                let connector = tokio_rustls::TlsConnector::from(configs.client);
                let s = connector.connect(server, tcp).await.map_err(refusal)?;
                // rustls accepted the name by a TLS client's rules, under which a wildcard
                // certificate is every node; only the name itself makes a node this one.
                let cert = s.get_ref().1.peer_certificates().and_then(|c| c.first());
                if !cert.is_some_and(|c| crate::net::access::names(c, &name)) {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{addr}: its certificate does not name {name} itself (a wildcard is not a node)"
                        ),
                    ));
                }
                Ok(Stream::Client(Box::new(s), name.into(), configs.generation))
            }
        }
    }

    /// [`Security::connect`], then the greeting: the id of the node that answered (checked to
    /// be `expect`'s). A failure before the greeting's answer sent no request.
    pub async fn connect_greeted(&self, addr: &str, expect: Expect, max_frame: usize) -> io::Result<Stream> {
        let mut s = self.connect(addr, expect).await?;
        write_frame_max(&mut s, &Msg::Greet, &[], max_frame).await.map_err(refusal)?;
        let answer =
            read_frame_max::<_, Reply>(&mut s, max_frame).await.map_err(|e| not_a_node(refusal(e)))?;
        match answer {
            Some((Reply::Greet { node }, _)) => match expect {
                Expect::Node(id) if node != id => Err(io::Error::other(format!(
                    "{addr} is node {node}, not node {id}: a stale or wrong address"
                ))),
                _ => Ok(s),
            },
            Some((Reply::Refused(why), _)) => {
                Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("refused by {addr}: {why}")))
            }
            Some((other, _)) => Err(io::Error::other(format!("{addr} answered a greeting with {other:?}"))),
            None => {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{addr} closed the connection")))
            }
        }
    }

    /// Completes an accepted connection: the TLS handshake and the peer's identity, or the
    /// plaintext loopback check. `Err` (what to log) when the connection is refused; a peer that
    /// can read plaintext was told why first.
    pub async fn accept(&self, tcp: TcpStream, max_frame: usize) -> Result<(Stream, Identity), String> {
        let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let files = match self {
            Security::Plaintext => {
                if peer.ip().is_loopback() {
                    return Ok((Stream::Plain(tcp), Identity::Loopback));
                }
                let why =
                    format!("this node serves plaintext to loopback addresses only, and {peer} is not one");
                return Err(refuse(tcp, &why, max_frame).await);
            }
            Security::Tls(files) => files,
        };
        let handshake = async {
            let mut first = [0u8; 1];
            let n = tcp.peek(&mut first).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!("{peer} closed the connection before a handshake"));
            }
            if first[0] != TLS_HANDSHAKE {
                let why = "this node accepts TLS connections only (a client needs --tls DIR with a certificate from the cluster's authority)";
                return Err(refuse(tcp, why, max_frame).await);
            }
            let acceptor = tokio_rustls::TlsAcceptor::from(files.current().server);
            let s = acceptor.accept(tcp).await.map_err(|e| format!("TLS handshake with {peer}: {e}"))?;
            let chain: Vec<_> = s
                .get_ref()
                .1
                .peer_certificates()
                .unwrap_or_default()
                .iter()
                .map(|c| c.clone().into_owned())
                .collect();
            let mut s = Stream::Server(Box::new(s));
            let who = Identity::of(chain);
            match who {
                Some(who) => Ok((s, who)),
                None => {
                    let why = "the certificate names no node and no client role (net/access.rs)";
                    let _ = write_frame_max(&mut s, &Reply::Refused(why.into()), &[], max_frame).await;
                    Err(format!("{peer}: {why}"))
                }
            }
        };
        tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .unwrap_or_else(|_| Err(format!("{peer}: no handshake within {HANDSHAKE_TIMEOUT:?}")))
    }
}

/// A reply whose length field is past the limit: what answered may not be a node at all.
pub fn not_a_node(e: io::Error) -> io::Error {
    match crate::net::frame::TooLarge::of(&e) {
        Some(t) => io::Error::new(
            e.kind(),
            format!("its reply is not one this client reads ({t}): is a walraft node listening there?"),
        ),
        None => e,
    }
}

/// Answers `why` on a connection refused before any of it was read, and closes it; what to log.
async fn refuse(mut tcp: TcpStream, why: &str, max_frame: usize) -> String {
    let peer = tcp.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "a peer".into());
    let _ = write_frame_max(&mut tcp, &Reply::Refused(why.to_string()), &[], max_frame).await;
    // Closing with unread bytes in the socket would send a reset, which may discard the answer
    // before the peer reads it: end this side, then read what the peer sent (a little, briefly)
    // until it closes.
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut tcp).await;
    let drain = async {
        let mut buf = [0u8; 4096];
        for _ in 0..16 {
            match tokio::io::AsyncReadExt::read(&mut tcp, &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    format!("refused {peer}: {why}")
}
