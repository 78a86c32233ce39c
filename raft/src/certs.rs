//! `walraft-node certs`: a certificate authority for a cluster, and the certificates of its
//! nodes and clients, named as `net/access.rs` checks them.
//!
//! For a first or a test cluster; an organisation with its own authority issues certificates
//! carrying the same names instead. Layout of `DIR`:
//!
//! ```text
//! DIR/ca.pem  DIR/ca.key      the authority (ca.key: mode 0600; keep it off the nodes)
//! DIR/node-N/                 node N's --tls directory: ca.pem cert.pem key.pem
//! DIR/admin/  DIR/writer/     clients' --tls directories
//! ```
//!
//! Run again with the same `DIR` to issue more (a node added later): the authority is reused.
//! An identity directory that exists already is refused, never overwritten: its key may be in
//! use. Keys are ECDSA P-256; certificates are valid for ten years from today.

use crate::net::access::{node_name, ADMIN, NODES, WRITER};
use crate::net::tls::{CA_FILE, CERT_FILE, KEY_FILE};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The authority's private key, beside its certificate.
pub const CA_KEY_FILE: &str = "ca.key";

/// A client role a certificate can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Writer,
    Admin,
}

impl Role {
    fn dir(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Admin => "admin",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Writer => WRITER,
            Role::Admin => ADMIN,
        }
    }
}

fn other(what: impl std::fmt::Display) -> io::Error {
    io::Error::other(what.to_string())
}

/// The years since 1970 now (for validity dates; a day's error is harmless).
fn this_year() -> i32 {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    1970 + (secs / 31_556_952) as i32
}

fn validity(p: &mut CertificateParams) {
    let y = this_year();
    p.not_before = rcgen::date_time_ymd(y - 1, 1, 1);
    p.not_after = rcgen::date_time_ymd(y + 10, 1, 1);
}

/// The authority's parameters: the same every time, so a reloaded key issues certificates that
/// chain to the certificate written the first time.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "walraft cluster authority");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut p);
    p
}

fn exists(out: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} exists: not overwritten (its key may be in use); remove it to issue a new one",
            out.display()
        ),
    )
}

/// Creates `path` with `data`, failing if it exists; `secret`: mode 0600.
fn create(path: &Path, data: &str, secret: bool) -> io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true).mode(if secret { 0o600 } else { 0o644 });
    let mut f = o.open(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    f.write_all(data.as_bytes())?;
    f.sync_all()
}

/// The authority in `dir`: loaded when `ca.key` and `ca.pem` exist, else made.
fn authority(dir: &Path) -> io::Result<(Issuer<'static, KeyPair>, String)> {
    let (key_path, cert_path) = (dir.join(CA_KEY_FILE), dir.join(CA_FILE));
    if key_path.exists() || cert_path.exists() {
        let key = std::fs::read_to_string(&key_path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", key_path.display())))?;
        let key = KeyPair::from_pem(&key).map_err(|e| other(format!("{}: {e}", key_path.display())))?;
        let pem = std::fs::read_to_string(&cert_path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", cert_path.display())))?;
        return Ok((Issuer::new(ca_params(), key), pem));
    }
    std::fs::create_dir_all(dir)?;
    let key = KeyPair::generate().map_err(other)?;
    let cert = ca_params().self_signed(&key).map_err(other)?;
    create(&key_path, &key.serialize_pem(), true)?;
    create(&cert_path, &cert.pem(), false)?;
    Ok((Issuer::new(ca_params(), key), cert.pem()))
}

/// Issues one identity: `dir/sub/` with the authority's certificate, a certificate for `names`
/// and its key.
fn issue(
    dir: &Path,
    sub: &str,
    names: Vec<String>,
    server: bool,
    ca: &(Issuer<'static, KeyPair>, String),
) -> io::Result<PathBuf> {
    let out = dir.join(sub);
    if out.exists() {
        return Err(exists(&out));
    }
    let mut p = CertificateParams::new(names.clone()).map_err(other)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, names[0].as_str());
    p.distinguished_name = dn;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    if server {
        p.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth);
    }
    validity(&mut p);
    let key = KeyPair::generate().map_err(other)?;
    let cert = p.signed_by(&key, &ca.0).map_err(other)?;
    verifies(dir, &ca.1, cert.der())?;
    // Written under a temporary name and renamed: a directory that exists is complete.
    let tmp = dir.join(format!(".{sub}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    create(&tmp.join(CA_FILE), &ca.1, false)?;
    create(&tmp.join(CERT_FILE), &cert.pem(), false)?;
    create(&tmp.join(KEY_FILE), &key.serialize_pem(), true)?;
    std::fs::rename(&tmp, &out)?;
    Ok(out)
}

/// Checks that `cert`, just signed with `ca.key`, verifies against `ca_pem`: a `ca.key` that is
/// not `ca.pem`'s (files from two authorities mixed up) would otherwise issue certificates no
/// node accepts, found only when the cluster refuses them.
fn verifies(dir: &Path, ca_pem: &str, cert: &rustls_pki_types::CertificateDer<'_>) -> io::Result<()> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let c = c.map_err(|e| other(format!("{}: {e}", dir.join(CA_FILE).display())))?;
        roots.add(c).map_err(|e| other(format!("{}: {e}", dir.join(CA_FILE).display())))?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(other)?;
    verifier.verify_client_cert(cert, &[], rustls_pki_types::UnixTime::now()).map(|_| ()).map_err(|e| {
        other(format!(
            "{} is not the key of {} (a certificate it signed does not verify: {e}); nothing was written",
            dir.join(CA_KEY_FILE).display(),
            dir.join(CA_FILE).display()
        ))
    })
}

/// Issues one certificate holding exactly `names` from the authority in `dir` (made if
/// absent), in `dir/sub`: for a role of one's own, or a test of a certificate that names
/// none. Client authentication, and server authentication too when a name is under
/// `node.walraft` (as a node's are).
pub fn issue_for(dir: &Path, sub: &str, names: &[&str]) -> io::Result<PathBuf> {
    if names.is_empty() {
        return Err(other("a certificate needs at least one name"));
    }
    if dir.join(sub).exists() {
        return Err(exists(&dir.join(sub)));
    }
    let ca = authority(dir)?;
    let server = names.iter().any(|n| n.ends_with(NODES));
    issue(dir, sub, names.iter().map(|n| n.to_string()).collect(), server, &ca)
}

/// Issues node certificates for `nodes` and client certificates for `roles` under `dir`,
/// making the authority first if `dir` has none; the directories written.
pub fn issue_all(dir: &Path, nodes: &[u64], roles: &[Role]) -> io::Result<Vec<PathBuf>> {
    let mut nodes = nodes.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    let mut roles = roles.to_vec();
    roles.sort_unstable();
    roles.dedup();
    // Refused before anything is written: a run that would stop half way leaves no half.
    for sub in nodes.iter().map(|n| format!("node-{n}")).chain(roles.iter().map(|r| r.dir().to_string())) {
        if dir.join(&sub).exists() {
            return Err(exists(&dir.join(sub)));
        }
    }
    let ca = authority(dir)?;
    let mut made = Vec::new();
    for n in &nodes {
        made.push(issue(dir, &format!("node-{n}"), vec![node_name(*n), NODES.to_string()], true, &ca)?);
    }
    for r in &roles {
        made.push(issue(dir, r.dir(), vec![r.name().to_string()], false, &ca)?);
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_key_from_another_authority_issues_nothing() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        issue_all(&a, &[1], &[]).unwrap();
        issue_all(&b, &[1], &[]).unwrap();
        std::fs::copy(b.join(CA_KEY_FILE), a.join(CA_KEY_FILE)).unwrap();
        let e = issue_for(&a, "w", &[WRITER]).unwrap_err();
        assert!(e.to_string().contains("is not the key of"), "{e}");
        assert!(!a.join("w").exists(), "a certificate no node would accept was written");
        // With its own key, the same authority issues.
        std::fs::remove_file(a.join(CA_KEY_FILE)).unwrap();
        std::fs::copy(b.join(CA_KEY_FILE), a.join(CA_KEY_FILE)).unwrap();
        std::fs::copy(b.join(CA_FILE), a.join(CA_FILE)).unwrap();
        issue_for(&a, "w", &[WRITER]).unwrap();
    }
}
