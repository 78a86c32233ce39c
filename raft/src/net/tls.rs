//! A node's or a client's TLS material, read from a directory and read again when it changes.
//!
//! The directory (`--tls DIR`) holds three PEM files: [`CA_FILE`], the cluster's certificate
//! authority (the only one trusted: a peer's certificate must chain to it, in both directions);
//! [`CERT_FILE`], this process's certificate (and any intermediates after it); [`KEY_FILE`], its
//! private key. `walraft-node certs` writes such directories; any authority whose certificates
//! carry the names of `net/access.rs` will do.
//!
//! **Reload without a restart.** Every new connection, accepted or opened, asks
//! [`TlsFiles::current`], which compares each file's size, modification time and inode with the
//! last load and reads the three again when one moved; a node also looks once a second
//! (`node/server/connection.rs`), so a change takes effect with no new connection. Each load that
//! replaces the material is a new generation ([`TlsFiles::changes`]), and connections already
//! open are checked against it: one whose peer's certificate no longer verifies (its authority
//! was replaced) is closed at once by the node that accepted it (`node/server/connection.rs`) and not
//! reused by the one that opened it ([`super::stream::Stream::reusable`]). A revoked
//! certificate therefore stops working on kept connections too, within a second.
//!
//! **What a load must pass.** The three files must parse and the key must be the
//! certificate's, and this process's own certificate must chain to the authority in `ca.pem`
//! for a client (clientAuth), and, for a node, also as a server (serverAuth) naming its own
//! name and [`super::access::NODES`] exactly ([`TlsFiles::require_node`]). A directory caught
//! half-rewritten, or rewritten with another process's certificate, does not replace what
//! works: the last good material stays in use, the failure is logged once per change, and the
//! next change is tried again. To change files, write the new ones beside the old and rename
//! them into place.
//!
//! **Rotating the authority** without a moment in which nodes refuse each other: first put the
//! new authority's certificate in every `ca.pem` *beside* the old one (`ca.pem` may hold
//! several; each is trusted), then replace every process's `cert.pem` and `key.pem` with ones
//! from the new authority, then remove the old authority from every `ca.pem`. Connections made
//! with a certificate from the old authority are closed at that last step.
//!
//! Both sides insist on a certificate: a server that asks for none, or a client that sends none,
//! does not complete a handshake. TLS 1.3 session tickets and resumption are off: every
//! connection verifies the peer's certificate, so a revoked (replaced) authority takes effect at
//! the next connection.

use crate::net::access::{names, node_name, NODES};
use rustls::client::danger::ServerCertVerifier;
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The cluster's certificate authority, in PEM.
pub const CA_FILE: &str = "ca.pem";
/// This process's certificate chain, leaf first, in PEM.
pub const CERT_FILE: &str = "cert.pem";
/// This process's private key (PKCS#8, PKCS#1 or SEC1), in PEM.
pub const KEY_FILE: &str = "key.pem";

/// What one load of the directory gave.
#[derive(Clone, Debug)]
pub struct Configs {
    /// For connections this process accepts: its certificate, and a client certificate
    /// required from the peer, chained to the authority.
    pub server: Arc<ServerConfig>,
    /// For connections this process opens: its certificate offered, the server's verified.
    pub client: Arc<ClientConfig>,
    /// This process's own certificate chain, leaf first (checked at load and when a node takes
    /// the files: `require_node`).
    pub chain: Vec<CertificateDer<'static>>,
    /// Whether a peer's client certificate chains to the authority (a kept connection's peer
    /// is checked again with the newest).
    pub clients: Arc<dyn ClientCertVerifier>,
    /// Whether a server's certificate chains to the authority and names a server name.
    pub servers: Arc<WebPkiServerVerifier>,
    /// Which load this is: 0 for the first, one more for each that replaced the material.
    pub generation: u64,
}

/// Size, modification time and inode of each file: what says it changed.
type Stamp = [(u64, i64, i64, u64); 3];

#[derive(Debug)]
struct Loaded {
    stamp: Stamp,
    configs: Configs,
    /// The stamp of a change that failed to load (logged once; tried again when it moves).
    failed: Option<Stamp>,
    /// When the files were last looked at.
    looked: std::time::Instant,
}

/// How often [`TlsFiles::look`] looks at the files.
pub const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A TLS directory and the material last loaded from it.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
    loaded: Mutex<Loaded>,
    /// Set once when a node takes these files: the node id its certificate must name.
    node: OnceLock<u64>,
    /// The generation of the material in use, for connections that watch for a change.
    changes: tokio::sync::watch::Sender<u64>,
}

fn stamp(dir: &Path) -> io::Result<Stamp> {
    let one = |name: &str| -> io::Result<(u64, i64, i64, u64)> {
        let m = std::fs::metadata(dir.join(name))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(name).display())))?;
        Ok((m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
    };
    Ok([one(CA_FILE)?, one(CERT_FILE)?, one(KEY_FILE)?])
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

/// Reads a regular file of at most 1 MiB (a certificate or a key; a FIFO or a device named
/// like one is refused rather than read forever). Opened without blocking (a FIFO with no
/// writer would block the open itself), and its type checked on the open handle, so a name
/// swapped for a FIFO between a look and the open cannot make the read wait.
fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let f =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(named)?;
    let m = f.metadata().map_err(named)?;
    if !m.is_file() {
        let what = if m.file_type().is_fifo() { "not a regular file (a FIFO)" } else { "not a regular file" };
        return Err(invalid(path, what));
    }
    if m.len() > 1 << 20 {
        return Err(invalid(path, format!("{} bytes: larger than any certificate or key", m.len())));
    }
    let mut data = Vec::with_capacity(m.len() as usize);
    f.take(1 << 20).read_to_end(&mut data).map_err(named)?;
    Ok(data)
}

fn certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let pem = read_small(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(path, "holds no certificate"));
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Checks that this process's own chain is one its peers will take: it chains to the
/// authority as a client's, and for node `node` as a server's named `N.node.walraft` and
/// [`NODES`] (exactly: `names`).
fn check_own(
    dir: &Path,
    chain: &[CertificateDer<'static>],
    clients: &dyn ClientCertVerifier,
    servers: &WebPkiServerVerifier,
    node: Option<u64>,
) -> io::Result<()> {
    let path = dir.join(CERT_FILE);
    let now = UnixTime::now();
    clients.verify_client_cert(&chain[0], &chain[1..], now).map_err(|e| {
        invalid(&path, format!("is not a client certificate of the authority in {CA_FILE}: {e}"))
    })?;
    let Some(id) = node else { return Ok(()) };
    for name in [node_name(id), NODES.to_string()] {
        if !names(&chain[0], &name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: the certificate does not name {name}, which node {id}'s must (walraft-node certs --node {id})",
                    path.display()
                ),
            ));
        }
        let server = ServerName::try_from(name.clone()).map_err(|e| invalid(&path, e))?;
        servers.verify_server_cert(&chain[0], &chain[1..], &server, &[], now).map_err(|e| {
            invalid(
                &path,
                format!("is not a server certificate for {name} from the authority in {CA_FILE}: {e}"),
            )
        })?;
    }
    Ok(())
}

/// Reads the directory and builds both configurations; every error names the file. `node`:
/// the node id the certificate must name, for a node.
fn load(dir: &Path, node: Option<u64>, generation: u64) -> io::Result<Configs> {
    let ca_path = dir.join(CA_FILE);
    let mut roots = RootCertStore::empty();
    for c in certs(&ca_path)? {
        roots.add(c).map_err(|e| invalid(&ca_path, format!("not a usable authority: {e}")))?;
    }
    let roots = Arc::new(roots);
    let chain = certs(&dir.join(CERT_FILE))?;
    let key_path = dir.join(KEY_FILE);
    let key = PrivateKeyDer::from_pem_slice(&read_small(&key_path)?)
        .map_err(|e| invalid(&key_path, format!("not a PEM private key: {e}")))?;
    let versions = |e: rustls::Error| invalid(dir, format!("TLS versions: {e}"));
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| invalid(&ca_path, format!("cannot verify clients with it: {e}")))?;
    let servers = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| invalid(&ca_path, format!("cannot verify servers with it: {e}")))?;
    check_own(dir, &chain, verifier.as_ref(), &servers, node)?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions)?
        .with_client_cert_verifier(verifier.clone())
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| invalid(&key_path, format!("does not go with {CERT_FILE}: {e}")))?;
    server.send_tls13_tickets = 0;
    server.session_storage = Arc::new(NoServerSessionStorage {});
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain.clone(), key)
        .map_err(|e| invalid(&key_path, format!("does not go with {CERT_FILE}: {e}")))?;
    client.resumption = Resumption::disabled();
    Ok(Configs {
        server: Arc::new(server),
        client: Arc::new(client),
        chain,
        clients: verifier,
        servers,
        generation,
    })
}

impl TlsFiles {
    /// Loads `dir`'s three files now: a process given a directory it cannot use does not
    /// start (the error names the file and what is wrong with it).
    pub fn open(dir: &Path) -> io::Result<TlsFiles> {
        let stamp = stamp(dir)?;
        let configs = load(dir, None, 0)?;
        Ok(TlsFiles {
            dir: dir.to_path_buf(),
            loaded: Mutex::new(Loaded { stamp, configs, failed: None, looked: std::time::Instant::now() }),
            node: OnceLock::new(),
            changes: tokio::sync::watch::Sender::new(0),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes these files node `id`'s: its certificate must name it, now (checked here) and at
    /// every reload. Files already taken for another node are refused.
    pub fn require_node(&self, id: u64) -> io::Result<()> {
        if *self.node.get_or_init(|| id) != id {
            return Err(io::Error::other(format!("{}: already another node's", self.dir.display())));
        }
        // The material in use (loaded before the node id was known) is what must name it.
        let c = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).configs.clone();
        check_own(&self.dir, &c.chain, c.clients.as_ref(), &c.servers, Some(id))
    }

    /// The generation of the material in use.
    pub fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Tells of every change of generation (see the module docs).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether a peer's client certificate chain still verifies against the current material.
    pub fn trusts_client(&self, chain: &[CertificateDer<'static>]) -> bool {
        let c = self.current();
        !chain.is_empty() && c.clients.verify_client_cert(&chain[0], &chain[1..], UnixTime::now()).is_ok()
    }

    /// Whether a server's certificate chain still verifies against the current material, for
    /// the server name `name` (exactly).
    pub fn trusts_server(&self, chain: &[CertificateDer<'static>], name: &str) -> bool {
        let c = self.current();
        let Ok(server) = ServerName::try_from(name.to_string()) else { return false };
        !chain.is_empty()
            && names(&chain[0], name)
            && c.servers.verify_server_cert(&chain[0], &chain[1..], &server, &[], UnixTime::now()).is_ok()
    }

    /// The material for a new connection: read again first if a file changed since the last
    /// load (see the module docs for a change that does not load).
    pub fn current(&self) -> Configs {
        let mut l = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        self.refresh(&mut l);
        l.configs.clone()
    }

    /// Reads the files again if they changed and the last look was [`LOOK_EVERY`] ago or more
    /// (what a kept connection asks before its reuse: cheap enough for every request).
    pub fn look(&self) {
        let mut l = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if l.looked.elapsed() >= LOOK_EVERY {
            self.refresh(&mut l);
        }
    }

    fn refresh(&self, l: &mut Loaded) {
        l.looked = std::time::Instant::now();
        let Ok(now) = stamp(&self.dir) else {
            // A file missing for a moment (a rename in progress): keep what works.
            return;
        };
        if now != l.stamp && l.failed != Some(now) {
            match load(&self.dir, self.node.get().copied(), l.configs.generation + 1) {
                Ok(c) => {
                    tracing::info!("TLS material in {} reloaded", self.dir.display());
                    let generation = c.generation;
                    l.configs = c;
                    l.stamp = now;
                    l.failed = None;
                    self.changes.send_replace(generation);
                }
                Err(e) => {
                    tracing::warn!(
                        "TLS material in {} changed but does not load, the previous stays in use: {e}",
                        self.dir.display()
                    );
                    l.failed = Some(now);
                }
            }
        }
    }
}
