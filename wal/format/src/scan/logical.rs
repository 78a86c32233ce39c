//! The log's logical state at a point of the record stream ([`Logical`]: next LSN, first live
//! LSN, epoch, metadata), and the payloads that carry it: a State record's (decoded and
//! encoded: the writer encodes one at the start of every segment and in `wal.close`) and a
//! Meta record's.

use crate::damage::DamageKind;
use crate::format::*;
use std::collections::BTreeMap;
use zerocopy::FromBytes;

/// The log's logical state at a point of the record stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logical {
    /// The LSN the next entry takes.
    pub next_lsn: u64,
    /// The lowest live LSN, if any entry is live.
    pub first_lsn: Option<u64>,
    /// The writer epoch in force.
    pub epoch: u64,
    /// Metadata values by key.
    /// Shared copy-on-write: the writer snapshots this state at every flush and sync, and the
    /// map only changes on a metadata record.
    pub meta: std::sync::Arc<BTreeMap<u32, Vec<u8>>>,
}

/// A `Meta` record's payload: the key and the value (FORMAT.md).
pub fn parse_meta(payload: &[u8]) -> Result<(u32, &[u8]), DamageKind> {
    let bad = DamageKind::BadState("malformed metadata");
    let key = payload.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()).ok_or(bad.clone())?;
    let len = payload.get(4..8).and_then(|b| <[u8; 4]>::try_from(b).ok()).ok_or(bad.clone())?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_META_VALUE_LEN || payload.len() != 8 + len {
        return Err(bad);
    }
    Ok((u32::from_le_bytes(key), payload.get(8..).unwrap_or_default()))
}

pub fn parse_state(payload: &[u8]) -> Result<Logical, DamageKind> {
    let bad = |w| DamageKind::BadState(w);
    let fixed = payload.get(..STATE_FIXED_LEN).ok_or(bad("too short"))?;
    let s = StatePayload::read_from_bytes(fixed).map_err(|_| bad("too short"))?;
    if s.reserved != [0; 3] || s.has_entries > 1 || s.meta_count.get() as usize > MAX_META_KEYS {
        return Err(bad("malformed"));
    }
    let mut meta = BTreeMap::new();
    let mut at = STATE_FIXED_LEN;
    for _ in 0..s.meta_count.get() {
        let head = payload.get(at..at + 8).ok_or(bad("metadata runs past the record"))?;
        let (key, len) = head.split_at(4);
        let key = u32::from_le_bytes(<[u8; 4]>::try_from(key).map_err(|_| bad("key"))?);
        let len = u32::from_le_bytes(<[u8; 4]>::try_from(len).map_err(|_| bad("len"))?) as usize;
        if len > MAX_META_VALUE_LEN {
            return Err(bad("metadata value too long"));
        }
        let v = payload.get(at + 8..at + 8 + len).ok_or(bad("metadata runs past the record"))?;
        let padded = align_up(8 + len);
        if !is_zero(payload.get(at + 8 + len..at + padded).unwrap_or_default()) {
            return Err(DamageKind::NonZeroPadding);
        }
        if meta.insert(key, v.to_vec()).is_some() {
            return Err(bad("duplicate metadata key"));
        }
        at += padded;
    }
    if at != payload.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(Logical {
        next_lsn: s.next_lsn.get(),
        first_lsn: (s.has_entries == 1).then(|| s.first_lsn.get()),
        epoch: 0,
        meta: meta.into(),
    })
}

/// Encodes a State payload for `l`.
pub fn encode_state(l: &Logical, out: &mut Vec<u8>) {
    use zerocopy::IntoBytes;
    let s = StatePayload {
        next_lsn: l.next_lsn.into(),
        first_lsn: l.first_lsn.unwrap_or(0).into(),
        has_entries: u8::from(l.first_lsn.is_some()),
        reserved: [0; 3],
        meta_count: (l.meta.len() as u32).into(),
    };
    out.extend_from_slice(s.as_bytes());
    for (k, v) in l.meta.iter() {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
        out.resize(out.len() + align_up(8 + v.len()) - 8 - v.len(), 0);
    }
}
