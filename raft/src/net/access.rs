//! Who is at the other end of a connection, and what it may ask.
//!
//! With TLS (`--tls`), identity is what the peer's certificate, verified against the cluster's
//! authority during the handshake, names. The names are DNS names in the certificate's
//! subject alternative names, each matched exactly ([`names`]: a wildcard grants nothing):
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

/// Whether `cert` names the DNS name `name` exactly (its chain was verified in the handshake).
///
/// Exactly: a wildcard (`*.node.walraft`) is valid for every node's name by the rules a TLS
/// client checks a server by, and would make one certificate every node at once, so an
/// identity needs the name itself among the certificate's subject alternative names (compared
/// without regard to ASCII case, as DNS names are), as well as webpki's verdict that the
/// certificate is valid for it.
pub fn names(cert: &CertificateDer<'_>, name: &str) -> bool {
    let (Ok(ee), Ok(n)) = (webpki::EndEntityCert::try_from(cert), ServerName::try_from(name)) else {
        return false;
    };
    ee.verify_is_valid_for_subject_name(&n).is_ok()
        && ee.valid_dns_names().any(|san| san.eq_ignore_ascii_case(name))
}

/// The other end of a connection a node accepted.
#[derive(Clone, Debug)]
pub enum Identity {
    /// Plaintext between loopback addresses: trusted with everything.
    Loopback,
    /// A verified certificate chain (leaf first) and the roles its leaf names.
    Certified { chain: Vec<CertificateDer<'static>>, node: bool, writer: bool, admin: bool },
}

impl Identity {
    /// The identity of a verified certificate chain; `None` when it is empty or names no role.
    pub fn of(chain: Vec<CertificateDer<'static>>) -> Option<Identity> {
        let cert = chain.first()?;
        let (node, writer, admin) = (names(cert, NODES), names(cert, WRITER), names(cert, ADMIN));
        (node || writer || admin).then_some(Identity::Certified { chain, node, writer, admin })
    }

    /// The certificate chain, if any (to check it again when the authority changes).
    pub fn chain(&self) -> Option<&[CertificateDer<'static>]> {
        match self {
            Identity::Loopback => None,
            Identity::Certified { chain, .. } => Some(chain),
        }
    }

    /// Whether this is node `id` (its certificate names it).
    pub fn is_node(&self, id: u64) -> bool {
        match self {
            Identity::Loopback => true,
            Identity::Certified { chain, .. } => names(&chain[0], &node_name(id)),
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
