//! Snapshot files (FORMAT.md section 10.4): a state machine's export at an applied LSN, with the
//! apply seam's request-id table, their own checksums, the digest and the versions.
//!
//! A snapshot is written to `<name>.tmp`, synced, renamed to `snapshot-<LSN>.snap` and the
//! directory synced, so a crash leaves either no snapshot or a whole one (a leftover `.tmp` is
//! ignored and replaced). Reading checks the header checksum, every length against the file
//! before allocating, the body checksum, the versions, and finally that the imported state's
//! digest equals the recorded one: a snapshot that does not rebuild the state it claims is
//! refused, never trusted.

use crate::{Applier, DedupeRecord, StateMachine, DIGEST_VERSION};
use wal::seam::{write_all_at, Reader, Writer};
use wal::{Error, Lsn, Result};

/// The first bytes of every snapshot file (the 0x89 and CR LF catch text-mode damage).
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"\x89CWSNP\r\n";
/// The snapshot layout version this build writes and reads.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 1;
/// Bytes in the fixed header.
pub const SNAPSHOT_HEADER_LEN: usize = 128;
const RECORD_LEN: usize = 24;
const FLAG_HAS_APPLIED: u32 = 1;

/// What a snapshot header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The file name (`snapshot-{lsn:020}.snap`, or `snapshot-empty.snap`).
    pub name: String,
    /// The last LSN applied to the state it holds; `None` for a state before any entry.
    pub applied: Option<Lsn>,
    /// How many entities the state holds.
    pub entity_count: u64,
    /// The state digest (FORMAT.md section 10.2).
    pub digest: [u8; 32],
    /// The digest's version.
    pub digest_version: u32,
    /// The version of the state machine that exported it ([`StateMachine::VERSION`]).
    pub state_machine_version: u32,
    /// The id of the log the snapshot belongs to.
    pub log_id: [u8; 16],
    /// The file's length in bytes.
    pub bytes: u64,
}

/// The file name of the snapshot at `applied` (sorts by LSN).
pub fn snapshot_file_name(applied: Option<Lsn>) -> String {
    match applied {
        Some(l) => format!("snapshot-{:020}.snap", l.0),
        None => "snapshot-empty.snap".to_string(),
    }
}

/// Snapshot files in the directory with the applied LSN their name gives, oldest first.
pub fn list_snapshots(storage: &dyn Reader) -> Result<Vec<(Option<Lsn>, String)>> {
    let names = storage.list().map_err(|e| Error::io("listing snapshots", e))?;
    let mut snaps: Vec<(Option<u64>, String)> = names
        .into_iter()
        .filter_map(|n| {
            let stem = n.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
            let lsn = if stem == "empty" {
                None
            } else if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
                Some(stem.parse().ok()?)
            } else {
                return None;
            };
            Some((lsn, n))
        })
        .collect();
    snaps.sort();
    Ok(snaps.into_iter().map(|(l, n)| (l.map(Lsn), n)).collect())
}

fn bad(name: &str, what: impl Into<String>) -> Error {
    Error::BadSnapshot { name: name.to_string(), what: what.into() }
}

/// Encodes the snapshot of `applier` for log `log_id`.
pub fn encode<S: StateMachine>(applier: &Applier<S>, log_id: [u8; 16]) -> std::io::Result<Vec<u8>> {
    let cp = applier.checkpoint();
    let records: Vec<DedupeRecord> = applier.dedupe_records().collect();
    let mut out = vec![0u8; SNAPSHOT_HEADER_LEN];
    for r in &records {
        out.extend_from_slice(&r.request_id.to_le_bytes());
        out.extend_from_slice(&r.lsn.0.to_le_bytes());
        out.extend_from_slice(&[r.refused as u8, 0, 0, 0, 0, 0, 0, 0]);
    }
    let body_at = out.len();
    applier.state().export(&mut out)?;
    let body_len = (out.len() - body_at) as u64;
    let body_crc = crc32c::crc32c(&out[SNAPSHOT_HEADER_LEN..]);
    let h = &mut out[..SNAPSHOT_HEADER_LEN];
    h[0..8].copy_from_slice(&SNAPSHOT_MAGIC);
    h[8..12].copy_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&cp.digest_version.to_le_bytes());
    h[16..20].copy_from_slice(&cp.state_machine_version.to_le_bytes());
    let applied = applier.applied();
    let flags = if applied.is_some() { FLAG_HAS_APPLIED } else { 0 };
    h[20..24].copy_from_slice(&flags.to_le_bytes());
    h[24..32].copy_from_slice(&applied.map_or(0, |l| l.0).to_le_bytes());
    h[32..40].copy_from_slice(&cp.entity_count.to_le_bytes());
    h[40..72].copy_from_slice(&cp.digest);
    h[72..88].copy_from_slice(&log_id);
    h[88..96].copy_from_slice(&applier.dedupe_window().to_le_bytes());
    h[96..104].copy_from_slice(&(records.len() as u64).to_le_bytes());
    h[104..112].copy_from_slice(&body_len.to_le_bytes());
    h[112..116].copy_from_slice(&body_crc.to_le_bytes());
    let header_crc = crc32c::crc32c(&h[..124]);
    h[124..128].copy_from_slice(&header_crc.to_le_bytes());
    Ok(out)
}

/// Writes a snapshot of `applier` durably: temporary name, fdatasync, rename, directory sync.
/// Returns its name.
pub fn write_snapshot<S: StateMachine>(
    storage: &dyn Writer,
    applier: &Applier<S>,
    log_id: [u8; 16],
) -> Result<String> {
    let bytes = encode(applier, log_id).map_err(|e| Error::io("exporting the state", e))?;
    let name = snapshot_file_name(applier.applied());
    let tmp = format!("{name}.tmp");
    if storage.list().map_err(|e| Error::io("listing the directory", e))?.contains(&tmp) {
        storage.remove(&tmp).map_err(|e| Error::io(format!("removing a stale {tmp}"), e))?;
    }
    let file = storage.create(&tmp).map_err(|e| Error::io(format!("creating {tmp}"), e))?;
    let written = write_all_at(storage, file, 0, &bytes).and_then(|()| storage.sync_data(file));
    storage.close(file);
    written.map_err(|e| Error::io(format!("writing {tmp}"), e))?;
    storage.rename(&tmp, &name).map_err(|e| Error::io(format!("renaming {tmp}"), e))?;
    storage.sync_dir().map_err(|e| Error::io("syncing the directory", e))?;
    Ok(name)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Checks a snapshot header and returns what it says.
pub fn read_info(name: &str, bytes_untrusted: &[u8]) -> Result<SnapshotInfo> {
    let Some(h) = bytes_untrusted.get(..SNAPSHOT_HEADER_LEN) else {
        return Err(bad(name, format!("{} bytes is shorter than the header", bytes_untrusted.len())));
    };
    if h[0..8] != SNAPSHOT_MAGIC {
        return Err(bad(name, "bad magic (not a snapshot file)"));
    }
    let (stored, actual) = (u32_at(h, 124), crc32c::crc32c(&h[..124]));
    if stored != actual {
        return Err(bad(
            name,
            format!("header checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"),
        ));
    }
    let version = u32_at(h, 8);
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(Error::Unsupported(format!("{name}: snapshot format version {version}")));
    }
    let flags = u32_at(h, 20);
    if flags & !FLAG_HAS_APPLIED != 0 || u64_at(h, 116) != 0 {
        return Err(bad(name, "non-zero reserved header bytes"));
    }
    let applied = (flags & FLAG_HAS_APPLIED != 0).then(|| Lsn(u64_at(h, 24)));
    if applied.is_none() && u64_at(h, 24) != 0 {
        return Err(bad(name, "an applied LSN without its flag"));
    }
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&h[40..72]);
    let mut log_id = [0u8; 16];
    log_id.copy_from_slice(&h[72..88]);
    let records = u64_at(h, 96);
    let body_len = u64_at(h, 104);
    let expected = records
        .checked_mul(RECORD_LEN as u64)
        .and_then(|r| r.checked_add(body_len))
        .and_then(|r| r.checked_add(SNAPSHOT_HEADER_LEN as u64));
    if expected != Some(bytes_untrusted.len() as u64) {
        return Err(bad(
            name,
            format!("the header declares {records} request records and {body_len} body bytes; the file has {} bytes", bytes_untrusted.len()),
        ));
    }
    Ok(SnapshotInfo {
        name: name.to_string(),
        applied,
        entity_count: u64_at(h, 32),
        digest,
        digest_version: u32_at(h, 12),
        state_machine_version: u32_at(h, 16),
        log_id,
        bytes: bytes_untrusted.len() as u64,
    })
}

/// Decodes and checks a whole snapshot into an applier ready to go on applying after it.
pub fn decode<S: StateMachine>(name: &str, bytes_untrusted: &[u8]) -> Result<(Applier<S>, SnapshotInfo)> {
    let info = read_info(name, bytes_untrusted)?;
    if info.digest_version != DIGEST_VERSION || info.state_machine_version != S::VERSION {
        return Err(Error::Unsupported(format!(
            "{name}: digest version {} and state-machine version {}; this build knows {DIGEST_VERSION} and {}",
            info.digest_version,
            info.state_machine_version,
            S::VERSION
        )));
    }
    let rest = &bytes_untrusted[SNAPSHOT_HEADER_LEN..];
    let (stored, actual) = (u32_at(bytes_untrusted, 112), crc32c::crc32c(rest));
    if stored != actual {
        return Err(bad(
            name,
            format!("body checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"),
        ));
    }
    let window = u64_at(bytes_untrusted, 88);
    let n = u64_at(bytes_untrusted, 96) as usize; // bounded by the file length above
    let (recs, body) = rest.split_at(n * RECORD_LEN);
    let mut records = Vec::with_capacity(n);
    for r in recs.chunks_exact(RECORD_LEN) {
        if r[17..24].iter().any(|&b| b != 0) || r[16] > 1 {
            return Err(bad(name, "bad request record flags"));
        }
        records.push(DedupeRecord { request_id: u64_at(r, 0), lsn: Lsn(u64_at(r, 8)), refused: r[16] == 1 });
    }
    let sm = S::import(body).map_err(|e| bad(name, format!("the state machine refused the body: {e}")))?;
    let applier = Applier::from_parts(sm, info.applied, window, records).map_err(|e| bad(name, e))?;
    let cp = applier.checkpoint();
    if cp.digest != info.digest || cp.entity_count != info.entity_count {
        return Err(bad(
            name,
            format!(
                "the imported state does not match the recorded digest ({} entities recorded, {} imported)",
                info.entity_count, cp.entity_count
            ),
        ));
    }
    Ok((applier, info))
}

/// Reads and checks the snapshot `name` through `storage`.
pub fn read_snapshot<S: StateMachine>(
    storage: &dyn Reader,
    name: &str,
) -> Result<(Applier<S>, SnapshotInfo)> {
    let file = storage.open(name).map_err(|e| Error::io(format!("opening {name}"), e))?;
    let map = storage.map(file);
    storage.close(file);
    let map = map.map_err(|e| Error::io(format!("reading {name}"), e))?;
    decode(name, &map)
}
