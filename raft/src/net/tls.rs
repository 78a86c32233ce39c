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
//! last load and reads the three again when one moved. Connections already open keep the
//! certificates they were made with. A directory caught half-rewritten (a key that does not
//! match the certificate, a file cut short) does not replace what works: the last good material
//! stays in use, the failure is logged once per change, and the next change is tried again. To
//! rotate, write the new files beside the old ones and rename them into place.
//!
//! Both sides insist on a certificate: a server that asks for none, or a client that sends none,
//! does not complete a handshake. TLS 1.3 session tickets and resumption are off: every
//! connection verifies the peer's certificate, so a revoked (replaced) authority takes effect at
//! the next connection.

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    /// This process's own certificate (to check at start that it names what it should).
    pub own: CertificateDer<'static>,
}

/// Size, modification time and inode of each file: what says it changed.
type Stamp = [(u64, i64, i64, u64); 3];

#[derive(Debug)]
struct Loaded {
    stamp: Stamp,
    configs: Configs,
    /// The stamp of a change that failed to load (logged once; tried again when it moves).
    failed: Option<Stamp>,
}

/// A TLS directory and the material last loaded from it.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
    loaded: Mutex<Loaded>,
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
/// like one is refused rather than read forever).
fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    let m =
        std::fs::metadata(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if !m.is_file() {
        return Err(invalid(path, "not a regular file"));
    }
    if m.len() > 1 << 20 {
        return Err(invalid(path, format!("{} bytes: larger than any certificate or key", m.len())));
    }
    std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
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

/// Reads the directory and builds both configurations; every error names the file.
fn load(dir: &Path) -> io::Result<Configs> {
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
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions)?
        .with_client_cert_verifier(verifier)
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
    Ok(Configs { server: Arc::new(server), client: Arc::new(client), own: chain[0].clone() })
}

impl TlsFiles {
    /// Loads `dir`'s three files now: a process given a directory it cannot use does not
    /// start (the error names the file and what is wrong with it).
    pub fn open(dir: &Path) -> io::Result<TlsFiles> {
        let stamp = stamp(dir)?;
        let configs = load(dir)?;
        Ok(TlsFiles { dir: dir.to_path_buf(), loaded: Mutex::new(Loaded { stamp, configs, failed: None }) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The material for a new connection: read again first if a file changed since the last
    /// load (see the module docs for a change that does not load).
    pub fn current(&self) -> Configs {
        let mut l = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(now) = stamp(&self.dir) else {
            // A file missing for a moment (a rename in progress): keep what works.
            return l.configs.clone();
        };
        if now != l.stamp && l.failed != Some(now) {
            match load(&self.dir) {
                Ok(c) => {
                    tracing::info!("TLS material in {} reloaded", self.dir.display());
                    l.configs = c;
                    l.stamp = now;
                    l.failed = None;
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
        l.configs.clone()
    }
}
