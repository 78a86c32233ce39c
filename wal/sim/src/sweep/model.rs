//! The model: the states a log may recover to (the candidates between the acknowledged and
//! the staged history) and the digest the apply seam gives for each.

use crate::workload::history::{apply as apply_op, History};
use crate::workload::kv::Kv;
use std::collections::BTreeMap;
use wal::{Checkpoint, Epoch, Lsn};
use wal_state::Applier;

/// A state the log may recover to: its entries and (computed when first needed) the digest
/// replaying them through the apply seam gives.
#[derive(Debug)]
pub struct Candidate {
    pub entries: Vec<(u64, Vec<u8>)>,
    digest: std::cell::OnceCell<Checkpoint>,
}

impl Candidate {
    pub(super) fn new(entries: Vec<(u64, Vec<u8>)>) -> Candidate {
        Candidate { entries, digest: std::cell::OnceCell::new() }
    }

    /// The digest of the state after these entries, through the apply seam.
    pub(super) fn state(&self) -> Checkpoint {
        *self.digest.get_or_init(|| model_state(&self.entries).checkpoint())
    }
}

pub(super) fn model_state(entries: &[(u64, Vec<u8>)]) -> Applier<Kv> {
    let mut a = Applier::new(Kv::default(), 1024);
    for (l, p) in entries {
        let _ = a.apply(Lsn(*l), Epoch(0), p);
    }
    a
}

/// The states recoverable between `acked` and `staged` ops of `hist`; the first is the acked one.
pub(super) fn candidates(hist: &History, acked: usize, staged: usize) -> Vec<Candidate> {
    let mut m = BTreeMap::new();
    for op in &hist.ops[..acked] {
        apply_op(&mut m, op);
    }
    let mut out = Vec::new();
    for k in acked..=staged {
        if k > acked {
            apply_op(&mut m, &hist.ops[k - 1]);
        }
        if hist.ok[k] {
            out.push(Candidate::new(m.iter().map(|(l, p)| (*l, p.clone())).collect()));
        }
    }
    out
}
