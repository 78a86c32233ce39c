//! The logical rules a record keeps, and their effect on the logical state: the writer epoch
//! only grows, entries take consecutive LSNs, a truncation or reset cuts, a checkpoint covers an
//! LSN already taken, metadata stays within its limits, a segment's State record matches the log
//! before it.

use super::decode::Decoded;
use super::logical::{parse_meta, parse_state};
use super::{Logical, Walker};
use crate::damage::DamageKind;
use crate::format::*;

impl Walker {
    pub(super) fn check_epoch(&self, kind: Kind, epoch: u64) -> Result<(), DamageKind> {
        let Some(l) = &self.logical else {
            return Ok(());
        };
        if kind == Kind::Epoch {
            if epoch <= l.epoch {
                return Err(DamageKind::StaleEpoch { current: l.epoch, found: epoch });
            }
        } else if epoch < l.epoch {
            return Err(DamageKind::StaleEpoch { current: l.epoch, found: epoch });
        } else if epoch > l.epoch {
            return Err(DamageKind::BadState("record epoch newer than the log's"));
        }
        Ok(())
    }

    /// Checks a record against the logical state and applies it.
    pub(super) fn apply(&mut self, d: &Decoded<'_>, off: usize) -> Result<(), DamageKind> {
        let h = &d.header;
        let (lsn, epoch) = (h.lsn.get(), h.epoch.get());
        if d.kind == Kind::State {
            let st = parse_state(d.payload)?;
            let st = Logical { epoch, ..st };
            if h.lsn.get() != st.next_lsn {
                return Err(DamageKind::BadState("header LSN differs from the state's"));
            }
            match &self.logical {
                Some(l) if self.full && *l != st => {
                    return Err(DamageKind::BadState("does not match the log before it"))
                }
                _ => self.logical = Some(st),
            }
            return Ok(());
        }
        self.check_epoch(d.kind, epoch)?;
        let Some(l) = self.logical.as_mut() else {
            return Err(DamageKind::BadState("record before the segment's state"));
        };
        let empty = d.payload.is_empty();
        match d.kind {
            Kind::Entry => {
                if lsn != l.next_lsn {
                    return Err(DamageKind::LsnGap { expected: l.next_lsn, found: lsn });
                }
                l.first_lsn.get_or_insert(lsn);
                l.next_lsn = lsn.checked_add(1).ok_or(DamageKind::BadState("LSN overflow"))?;
                let c = &mut self.counts;
                c.min_lsn = if c.entries == 0 { lsn } else { c.min_lsn.min(lsn) };
                c.max_lsn = if c.entries == 0 { lsn } else { c.max_lsn.max(lsn) };
                c.entries += 1;
            }
            Kind::Truncate => {
                if !empty || lsn >= l.next_lsn {
                    return Err(DamageKind::BadState("truncation past the end of the log"));
                }
                if l.first_lsn.is_some_and(|f| lsn < f) {
                    l.first_lsn = None;
                }
                l.next_lsn = lsn + 1;
                self.counts.cuts += 1;
                self.counts.min_keep_lt = self.counts.min_keep_lt.min(lsn + 1);
            }
            Kind::Reset => {
                if !empty {
                    return Err(DamageKind::BadState("reset with a payload"));
                }
                l.first_lsn = None;
                l.next_lsn = lsn;
                self.counts.cuts += 1;
                self.counts.min_keep_lt = 0;
            }
            Kind::Epoch => {
                if !empty || lsn != l.next_lsn {
                    return Err(DamageKind::BadState("malformed epoch record"));
                }
                l.epoch = epoch;
            }
            Kind::Checkpoint => {
                if d.payload.len() != CHECKPOINT_PAYLOAD_LEN {
                    return Err(DamageKind::BadState("malformed checkpoint"));
                }
                // FORMAT.md 3.1: `L` < the next LSN (a writer refuses anything else); one for
                // the next LSN or beyond covers an entry the log had not taken.
                if lsn >= l.next_lsn {
                    return Err(DamageKind::BadState("checkpoint for an LSN the log has not taken"));
                }
            }
            Kind::Meta => {
                let (key, value) = parse_meta(d.payload)?;
                if !l.meta.contains_key(&key) && l.meta.len() >= MAX_META_KEYS {
                    return Err(DamageKind::BadState("too many metadata keys"));
                }
                std::sync::Arc::make_mut(&mut l.meta).insert(key, value.to_vec());
            }
            Kind::Frame | Kind::Footer | Kind::State => {
                let _ = off;
                return Err(DamageKind::BadFrame("misplaced record kind"));
            }
        }
        Ok(())
    }
}
