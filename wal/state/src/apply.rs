//! [`Applier`]: the one function through which a committed entry reaches a state machine.
//!
//! The pipeline calls it after commit and the replayer calls it on restart and in `walcheck`;
//! nothing else ever calls [`StateMachine::apply`]. Around the state machine it keeps what both
//! paths must agree on: the last applied LSN (entries arrive strictly in LSN order), the
//! request-id table that drops duplicates (deterministic: it is built from the log alone), and
//! the fence that a panic in user code sets (docs/invariants.md I8: the library never aborts; the state
//! is then read-only).

use super::{Committed, Envelope, Outcome, SetDigest, StateMachine, DIGEST_VERSION};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use wal::Checkpoint;
use wal::{Epoch, Lsn};

/// What happened to one committed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The state machine applied (or refused) it.
    Outcome(Outcome),
    /// Its request id was already applied at `first_lsn` (within the dedupe window): the entry
    /// is in the log but changed nothing.
    Duplicate {
        /// The LSN at which the request id was first applied.
        first_lsn: Lsn,
    },
}

/// A request id the applier remembers: where it was applied and whether the domain refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupeRecord {
    /// The request id (never 0, which means none).
    pub request_id: u64,
    /// The LSN of the entry that applied it.
    pub lsn: Lsn,
    /// Whether the state machine refused it ([`Outcome::Refused`]).
    pub refused: bool,
}

/// What is known about a request id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Applied at `lsn` (`refused`: the domain said no, which is also final).
    Applied {
        /// The LSN of the entry that applied it.
        lsn: Lsn,
        /// Whether the state machine refused it.
        refused: bool,
    },
    /// Not applied within the dedupe window (never seen, or forgotten).
    NotApplied,
}

/// The apply seam: a state machine plus the bookkeeping both apply paths share.
#[derive(Debug)]
pub struct Applier<S> {
    sm: S,
    applied: Option<Lsn>,
    window: u64,
    seen: HashMap<u64, DedupeRecord>,
    order: VecDeque<(Lsn, u64)>,
    fenced: Option<String>,
}

impl<S: StateMachine> Applier<S> {
    /// A fresh applier over `sm`. Request ids are remembered for `dedupe_window` LSNs after
    /// the entry that carried them; the window must be the same on every path over one log
    /// (it is recorded in snapshots, and a mismatch is refused on import).
    pub fn new(sm: S, dedupe_window: u64) -> Self {
        Applier {
            sm,
            applied: None,
            window: dedupe_window,
            seen: HashMap::new(),
            order: VecDeque::new(),
            fenced: None,
        }
    }

    /// Rebuilds an applier from a snapshot's parts.
    pub fn from_parts(
        sm: S,
        applied: Option<Lsn>,
        dedupe_window: u64,
        records: impl IntoIterator<Item = DedupeRecord>,
    ) -> Result<Self, String> {
        let mut a = Applier::new(sm, dedupe_window);
        a.applied = applied;
        for r in records {
            if applied.is_none_or(|l| r.lsn > l) {
                return Err(format!("request {} recorded at LSN {} past the snapshot", r.request_id, r.lsn));
            }
            if a.order.back().is_some_and(|&(l, _)| l >= r.lsn) {
                return Err(format!("request records out of LSN order at LSN {}", r.lsn));
            }
            if a.seen.insert(r.request_id, r).is_some() {
                return Err(format!("request id {} recorded twice", r.request_id));
            }
            a.order.push_back((r.lsn, r.request_id));
        }
        Ok(a)
    }

    /// THE apply function: decodes the envelope, drops a duplicate request, and otherwise hands
    /// the entry to the state machine. Entries must come in strictly increasing LSN order. A
    /// panic in the state machine is caught and fences the applier (every later call fails).
    pub fn apply(&mut self, lsn: Lsn, epoch: Epoch, payload: &[u8]) -> Result<Applied, String> {
        if let Some(why) = &self.fenced {
            return Err(format!("the state machine is fenced: {why}"));
        }
        if self.applied.is_some_and(|a| lsn <= a) {
            return Err(format!(
                "entry {lsn} applied out of order (last applied {})",
                self.applied.map_or(0, |a| a.0)
            ));
        }
        let env = Envelope::decode(payload).map_err(|e| format!("entry {lsn}: {e}"))?;
        self.expire(lsn);
        self.applied = Some(lsn);
        if let Some(id) = env.request_id {
            if let Some(r) = self.seen.get(&id) {
                return Ok(Applied::Duplicate { first_lsn: r.lsn });
            }
        }
        let entry = Committed { lsn, epoch, kind: env.kind, request_id: env.request_id, body: env.body };
        let sm = &mut self.sm;
        let outcome = match catch_unwind(AssertUnwindSafe(|| sm.apply(&entry))) {
            Ok(o) => o,
            Err(panic) => {
                let msg = panic_message(&*panic);
                let why = format!("apply panicked at LSN {lsn}: {msg}");
                self.fenced = Some(why.clone());
                return Err(why);
            }
        };
        if let Some(id) = env.request_id {
            self.seen.insert(id, DedupeRecord { request_id: id, lsn, refused: outcome.is_refused() });
            self.order.push_back((lsn, id));
        }
        Ok(Applied::Outcome(outcome))
    }

    /// Mutant (tools/mutants.sh, I2): replay forgets every request id, so it re-applies
    /// duplicates the online path dropped (a second apply path that drifts).
    pub(crate) fn mutant_forget_request_ids(&mut self) {
        self.seen.clear();
        self.order.clear();
    }

    /// Forgets request ids that fell out of the window before `lsn` is applied.
    fn expire(&mut self, lsn: Lsn) {
        while let Some(&(l, id)) = self.order.front() {
            if lsn.0.saturating_sub(l.0) <= self.window {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&id);
        }
    }

    /// What is known about a request id.
    pub fn fate(&self, request_id: u64) -> Fate {
        match self.seen.get(&request_id) {
            Some(r) => Fate::Applied { lsn: r.lsn, refused: r.refused },
            None => Fate::NotApplied,
        }
    }

    /// The last applied LSN.
    pub fn applied(&self) -> Option<Lsn> {
        self.applied
    }

    /// The running entity-set digest.
    pub fn digest(&self) -> SetDigest {
        self.sm.digest()
    }

    /// The checkpoint value of the current state.
    pub fn checkpoint(&self) -> Checkpoint {
        let d = self.sm.digest();
        Checkpoint {
            digest: d.finalize(S::VERSION),
            entity_count: d.count(),
            digest_version: DIGEST_VERSION,
            state_machine_version: S::VERSION,
        }
    }

    /// Read access to the state (queries; never mutation).
    pub fn state(&self) -> &S {
        &self.sm
    }

    /// The dedupe window in LSNs.
    pub fn dedupe_window(&self) -> u64 {
        self.window
    }

    /// The remembered request ids, oldest first (what a snapshot stores).
    pub fn dedupe_records(&self) -> impl Iterator<Item = DedupeRecord> + '_ {
        self.order.iter().filter_map(|(_, id)| self.seen.get(id).copied())
    }

    /// Why the applier is fenced, if it is.
    pub fn fenced(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    /// Fences the applier from outside (a divergence found by a comparison, a hook panic).
    pub fn fence(&mut self, why: String) {
        self.fenced.get_or_insert(why);
    }
}

/// The text of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}
