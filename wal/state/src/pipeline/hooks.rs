//! The pipeline's hooks ([`Hooks`]): pre-hooks validate a proposed entry ([`Proposal`]) on a
//! read-only view of the state before anything is logged; after-hooks see each applied entry
//! ([`Notice`]) on the apply thread, before its acknowledgement resolves.

use crate::{Applied, EntryKind};
use wal::Lsn;

/// A proposed entry as pre-hooks see it.
#[derive(Clone, Copy, Debug)]
pub struct Proposal<'a> {
    /// A command or a fact.
    pub kind: EntryKind,
    /// The caller's request id, if it gave one.
    pub request_id: Option<u64>,
    /// The state machine's bytes (without the envelope).
    pub body: &'a [u8],
}

/// A committed, applied entry as after-hooks see it.
#[derive(Clone, Copy, Debug)]
pub struct Notice<'a> {
    /// The entry's LSN.
    pub lsn: Lsn,
    /// A command or a fact.
    pub kind: EntryKind,
    /// The request id the entry carries, if any.
    pub request_id: Option<u64>,
    /// The state machine's bytes (without the envelope).
    pub body: &'a [u8],
    /// What applying it did.
    pub applied: &'a Applied,
}

/// Validation before anything is logged: a read-only view of the state and the proposal.
pub type PreHook<S> = Box<dyn Fn(&S, &Proposal<'_>) -> std::result::Result<(), String> + Send + Sync>;

/// Notification after apply: the state after the entry and what happened.
pub type AfterHook<S> = Box<dyn FnMut(&S, &Notice<'_>) + Send>;

/// The hooks of a pipeline.
pub struct Hooks<S> {
    /// Run in order on the submitting thread before anything is logged; the first `Err`
    /// rejects the submission (a panic also fences the pipeline).
    pub pre: Vec<PreHook<S>>,
    /// Run in order on the apply thread after each applied entry, before its acknowledgement resolves;
    /// a panic fences the pipeline.
    pub after: Vec<AfterHook<S>>,
}

impl<S> Default for Hooks<S> {
    fn default() -> Self {
        Hooks { pre: Vec::new(), after: Vec::new() }
    }
}

impl<S> std::fmt::Debug for Hooks<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hooks {{ pre: {}, after: {} }}", self.pre.len(), self.after.len())
    }
}
