//! Who is at the other end of a connection, and what it may ask.
//!
//! With TLS (`--tls`), identity is what the peer's certificate, verified against the cluster's
//! authority during the handshake, is valid for. The names are DNS names in the certificate's
//! subject alternative names, checked with the same rules a TLS client checks a server's name
//! by:
//!
//! | name                       | held by            | may                                          |
//! |----------------------------|--------------------|----------------------------------------------|
//! | [`NODES`]                  | every node         | be connected to by clients                   |
//! | `N.node.walraft` ([`node_name`]) | node N only  | say hello as node N, send Raft messages and node N's digest claims, forward writes, be connected to as node N |
//! | [`WRITER`]                 | writing clients    | write                                        |
//! | [`ADMIN`]                  | operators          | change the membership, the test fault switches |
//!
//! Anyone with a certificate from the authority may read (metrics, status, lookups). A
//! certificate that names none of these is refused before its first frame is read. Identity is
//! not an address: a node keeps its certificate when it moves (`client set-address`).
//!
//! Without TLS (`--plaintext`) every connection is [`Identity::Loopback`]: allowed only between
//! loopback addresses (`net/stream.rs` refuses any other), and trusted with everything.

use crate::net::wire::Msg;
use rustls_pki_types::{CertificateDer, ServerName};

/// The name every node's certificate holds: what a client checks a node by.
pub const NODES: &str = "node.walraft";
/// The name of a client certificate allowed to write.
pub const WRITER: &str = "writer.client.walraft";
/// The name of a client certificate allowed to change the membership.
pub const ADMIN: &str = "admin.client.walraft";

/// The name only node `id`'s certificate holds.
pub fn node_name(id: u64) -> String {
    format!("{id}.{NODES}")
}

/// Whether `cert` is valid for the DNS name `name` (its chain was verified in the handshake).
pub fn names(cert: &CertificateDer<'_>, name: &str) -> bool {
    let (Ok(ee), Ok(n)) = (webpki::EndEntityCert::try_from(cert), ServerName::try_from(name)) else {
        return false;
    };
    ee.verify_is_valid_for_subject_name(&n).is_ok()
}

/// The other end of a connection a node accepted.
#[derive(Clone, Debug)]
pub enum Identity {
    /// Plaintext between loopback addresses: trusted with everything.
    Loopback,
    /// A verified certificate and the roles it names.
    Certified { cert: CertificateDer<'static>, node: bool, writer: bool, admin: bool },
}

impl Identity {
    /// The identity of a verified certificate; `None` when it names no role.
    pub fn of(cert: CertificateDer<'static>) -> Option<Identity> {
        let (node, writer, admin) = (names(&cert, NODES), names(&cert, WRITER), names(&cert, ADMIN));
        (node || writer || admin).then_some(Identity::Certified { cert, node, writer, admin })
    }

    /// Whether this is node `id` (its certificate names it).
    pub fn is_node(&self, id: u64) -> bool {
        match self {
            Identity::Loopback => true,
            Identity::Certified { cert, .. } => names(cert, &node_name(id)),
        }
    }

    /// What the certificate names, for what is logged.
    pub fn describe(&self) -> String {
        match self {
            Identity::Loopback => "a plaintext loopback peer".into(),
            Identity::Certified { node, writer, admin, .. } => {
                let roles: Vec<&str> = [(*node, "node"), (*writer, "writer"), (*admin, "admin")]
                    .into_iter()
                    .filter_map(|(has, r)| has.then_some(r))
                    .collect();
                format!("a certificate for {}", roles.join("+"))
            }
        }
    }

    /// Whether `msg` may be served to this identity; `Err` says what certificate it needs.
    pub fn permits(&self, msg: &Msg) -> Result<(), String> {
        let Identity::Certified { node, writer, admin, .. } = self else { return Ok(()) };
        let need = |ok: bool, what: &str| -> Result<(), String> {
            if ok {
                Ok(())
            } else {
                Err(format!("not authorized: {what} (this connection presented {})", self.describe()))
            }
        };
        match msg {
            Msg::Greet | Msg::Metrics | Msg::Lookup { .. } => Ok(()),
            Msg::Hello { from, .. } => need(
                self.is_node(*from),
                &format!("only node {from}'s certificate ({}) says hello as node {from}", node_name(*from)),
            ),
            Msg::AppendEntries(_) | Msg::Vote(_) | Msg::PreVote(_) | Msg::SnapshotChunk { .. } => {
                need(*node, &format!("Raft messages need a node's certificate ({NODES})"))
            }
            Msg::Claim(c) => need(
                self.is_node(c.node),
                &format!("node {}'s digest claim needs its certificate ({})", c.node, node_name(c.node)),
            ),
            Msg::Write { .. } => {
                need(*writer || *node, &format!("a write needs a writer's certificate ({WRITER})"))
            }
            Msg::Membership(_) | Msg::Partition { .. } | Msg::AlterState { .. } => {
                need(*admin, &format!("an admin request needs an admin's certificate ({ADMIN})"))
            }
        }
    }
}
