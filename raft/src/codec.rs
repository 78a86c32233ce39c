//! How Raft things are stored in the log: an entry's payload, and the metadata values (vote,
//! committed log id, purged log id) kept under the log's own metadata keys.
//!
//! An openraft entry at index `i` is the log entry at LSN `i`. Its payload is
//!
//! ```text
//! 0  u8   raft entry encoding version = 1
//! 1  u8   kind: 0 blank, 1 normal (application data), 2 membership, 3 digest claim
//! 2  u32  n: length of the JSON header that follows (little-endian)
//! 6  [n]  JSON header: the log id (term, leader node, index) and, for kind 2, the membership
//! …       kind 1: the application bytes (the apply seam's envelope + state-machine body)
//!         kind 3: the claim, 64 bytes (below)
//! ```
//!
//! so a normal entry carries the envelope and command bytes unchanged after a short header.
//! Kinds 0 and 2 have no body.
//!
//! A digest claim (kind 3, issue 21: "node N: digest D after index i", `claims/`) is an
//! openraft normal entry whose data is [`crate::Request::Claim`]; it never reaches the apply
//! seam, so it changes neither the catalog nor its digest. Its body, little-endian:
//!
//! ```text
//! 0   u64   node id of the claimer
//! 8   u64   index i the digest is claimed after (a claim index, before this entry's own)
//! 16  [32]  state digest after applying index i (FORMAT.md 10.2)
//! 48  u64   entity count
//! 56  u32   digest version
//! 60  u32   state-machine version
//! ```
//!
//! A build older than kind 3 refuses such an entry ("unknown kind 3"): every node of a cluster
//! must run a build that knows it. The metadata values are JSON (each at most the log's 256-byte
//! metadata limit).

use crate::claims::Claim;
use crate::{LogId, Membership, Request};
use openraft::EntryPayload;
use serde::{Deserialize, Serialize};
use std::io;

/// Log metadata key that says what the log is: [`LOG_KIND`], written when the log store first
/// opens a log, so that a tool reading the log alone (walcheck) knows its entries are Raft
/// entries (`verifier::state::RAFT_META_KEYS` holds every key of this crate).
pub const LOG_KIND_META_KEY: u32 = 0x5241_4600;
/// The value of [`LOG_KIND_META_KEY`].
pub const LOG_KIND: &[u8] = b"wal-raft log";
/// Log metadata key of the vote (JSON of `VoteOf<TypeConfig>`).
pub const VOTE_META_KEY: u32 = 0x5241_4601;
/// Log metadata key of the committed log id (JSON of `Option<LogId>`).
pub const COMMITTED_META_KEY: u32 = 0x5241_4602;
/// Log metadata key of the last purged log id (JSON of `LogId`).
pub const PURGED_META_KEY: u32 = 0x5241_4603;

/// The version byte at the start of every Raft entry payload.
pub const ENTRY_ENCODING_VERSION: u8 = 1;

const KIND_BLANK: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;
const KIND_CLAIM: u8 = 3;
const HEAD_LEN: usize = 6;

#[derive(Serialize, Deserialize)]
struct Head {
    log_id: LogId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    membership: Option<Membership>,
}

pub(crate) fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Encodes an openraft entry as the payload of the log entry at LSN `entry.log_id.index`.
pub fn encode_entry(entry: &crate::Entry) -> io::Result<Vec<u8>> {
    let claim;
    let (kind, membership, body): (u8, Option<Membership>, &[u8]) = match &entry.payload {
        EntryPayload::Blank => (KIND_BLANK, None, &[]),
        EntryPayload::Normal(Request::Command(bytes)) => (KIND_NORMAL, None, bytes),
        EntryPayload::Normal(Request::Claim(c)) => {
            claim = c.encode();
            (KIND_CLAIM, None, &claim)
        }
        EntryPayload::Membership(m) => (KIND_MEMBERSHIP, Some(m.clone()), &[]),
    };
    let head = serde_json::to_vec(&Head { log_id: entry.log_id, membership }).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(HEAD_LEN + head.len() + body.len());
    out.push(ENTRY_ENCODING_VERSION);
    out.push(kind);
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(body);
    Ok(out)
}

/// Decodes a log entry's payload; `lsn` is where the log holds it and must equal the index.
pub fn decode_entry(lsn: u64, payload_untrusted: &[u8]) -> io::Result<crate::Entry> {
    let bad = |what: &str| invalid(format!("raft entry at LSN {lsn}: {what}"));
    let Some((fixed, rest)) = payload_untrusted.split_first_chunk::<HEAD_LEN>() else {
        return Err(bad("shorter than its header"));
    };
    let [version, kind, l0, l1, l2, l3] = *fixed;
    if version != ENTRY_ENCODING_VERSION {
        return Err(bad(&format!("unknown encoding version {version}")));
    }
    let n = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
    if n > rest.len() {
        return Err(bad("header length past the end of the payload"));
    }
    let (head, body) = rest.split_at(n);
    let head: Head = serde_json::from_slice(head).map_err(|e| bad(&format!("bad header: {e}")))?;
    if head.log_id.index != lsn {
        return Err(bad(&format!("holds index {}", head.log_id.index)));
    }
    let payload = match (kind, head.membership) {
        (KIND_BLANK, None) if body.is_empty() => EntryPayload::Blank,
        (KIND_NORMAL, None) => EntryPayload::Normal(Request::Command(body.to_vec())),
        (KIND_MEMBERSHIP, Some(m)) if body.is_empty() => EntryPayload::Membership(m),
        (KIND_CLAIM, None) => EntryPayload::Normal(Request::Claim(Claim::decode(body).map_err(|e| bad(&e))?)),
        (k, _) if k > KIND_CLAIM => return Err(bad(&format!("unknown kind {k}"))),
        _ => return Err(bad(&format!("kind {kind} does not match its header or body"))),
    };
    Ok(crate::Entry { log_id: head.log_id, payload })
}

/// JSON of a metadata value, checked against the log's metadata size limit.
pub(crate) fn meta_value<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    let bytes = serde_json::to_vec(v).map_err(io::Error::other)?;
    if bytes.len() > wal::format::MAX_META_VALUE_LEN {
        return Err(io::Error::other(format!("a {}-byte metadata value is too large", bytes.len())));
    }
    Ok(bytes)
}

pub(crate) fn read_meta<T: for<'de> Deserialize<'de>>(
    key: u32,
    value_untrusted: Option<&[u8]>,
) -> io::Result<Option<T>> {
    let Some(v) = value_untrusted else { return Ok(None) };
    serde_json::from_slice(v).map(Some).map_err(|e| invalid(format!("log metadata {key:#x}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;

    fn lid(index: u64) -> LogId {
        LogId::new(<crate::TypeConfig as RaftTypeConfig>::LeaderId::new_committed(2, 1), index)
    }

    /// walcheck tells a Raft log by these keys (`verifier::state::RAFT_META_KEYS`) and points
    /// at `walraft-node check` instead of replaying Raft entries as apply-seam entries.
    #[test]
    fn walcheck_knows_the_raft_metadata_keys() {
        for k in [LOG_KIND_META_KEY, VOTE_META_KEY, COMMITTED_META_KEY, PURGED_META_KEY] {
            assert!(verifier::state::RAFT_META_KEYS.contains(&k), "{k:#x}");
        }
    }

    #[test]
    fn a_claim_entry_round_trips_and_unknown_kinds_are_refused() {
        let cp =
            wal::Checkpoint { digest: [7; 32], entity_count: 3, digest_version: 1, state_machine_version: 1 };
        let e = crate::Entry {
            log_id: lid(9),
            payload: EntryPayload::Normal(Request::Claim(Claim::new(2, 8, &cp))),
        };
        let bytes = encode_entry(&e).unwrap();
        assert_eq!(bytes[1], KIND_CLAIM);
        assert_eq!(bytes.len(), HEAD_LEN + u32::from_le_bytes(bytes[2..6].try_into().unwrap()) as usize + 64);
        assert_eq!(decode_entry(9, &bytes).unwrap(), e);
        let mut short = bytes.clone();
        short.pop();
        assert!(decode_entry(9, &short).unwrap_err().to_string().contains("a claim is 64 bytes"));
        let mut unknown = bytes;
        unknown[1] = 4;
        assert!(decode_entry(9, &unknown).unwrap_err().to_string().contains("unknown kind 4"));
    }
}
