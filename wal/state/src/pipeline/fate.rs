//! What became of a submission: the outcome its acknowledgement (`Ack<Done>`) resolves with
//! ([`Resolution`]: applied, [`Done`], or one of the two failures), its fate asked later by
//! request id ([`RequestFate`]), and after a reopen what the restart found ([`RestartReport`])
//! and the fate of an LSN handed out before it ([`LsnFate`]).

use crate::snapshot::SnapshotInfo;
use crate::{Applied, CompareReport};
use wal::Lsn;
use wal::OpenReport;
use wal::Result;
use wal::{Ack, Failure};

/// What a resolved command reports: where it was applied and what apply said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    /// The LSN the command was logged and applied at.
    pub lsn: Lsn,
    /// What applying it did: the state machine's outcome (a refusal included), or a duplicate.
    pub applied: Applied,
}

/// What a command's acknowledgement resolves to: applied (with the outcome), or one of the two
/// failures of docs/invariants.md I1.
pub type Resolution = Result<Done, Failure>;

/// The callback of a command's acknowledgement, [`Ack::on_resolved`] under the pipeline's name:
/// `ack.on_done(|r| ..)` with `use wal_state::pipeline::OnDone`.
pub trait OnDone {
    /// Runs `f` with the outcome on the apply thread once it is known (at once, on this thread,
    /// if it already is). Only the pipeline's acknowledgements take a callback: the apply
    /// thread that resolves them runs user code anyway (apply, hooks), while the writer's I/O
    /// thread never does. Keep it short: a panic in it fences the pipeline like a panic in a
    /// hook.
    fn on_done(&self, f: impl FnOnce(&Resolution) + Send + 'static);
}

impl OnDone for Ack<Done> {
    fn on_done(&self, f: impl FnOnce(&Resolution) + Send + 'static) {
        // The pipeline makes every command's acknowledgement with `Ack::pending`, which takes
        // callbacks; only a writer's ticket refuses one.
        let taken = self.on_resolved(f);
        debug_assert!(taken.is_ok(), "a pipeline acknowledgement refused a callback");
    }
}

/// What a fate query knows about a request id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFate {
    /// Applied at `lsn` (a domain refusal is also final).
    Applied {
        /// The LSN it was applied at.
        lsn: Lsn,
        /// Whether the state machine refused it
        /// ([`Outcome::Refused`](crate::Outcome::Refused)).
        refused: bool,
    },
    /// Logged or being logged, not yet applied.
    Pending {
        /// The LSN the entry was given.
        lsn: Lsn,
    },
    /// Not applied and not pending (never submitted, withdrawn, or lost with a fenced tail;
    /// or older than the dedupe window).
    NotApplied,
}

/// What an LSN from before a restart became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LsnFate {
    /// The log holds it and the restart applied it.
    Applied,
    /// The log does not hold it: it never became durable (its LSN may be reused).
    Absent,
}

/// What opening a pipeline found.
#[derive(Debug)]
pub struct RestartReport {
    /// What opening the log found and did.
    pub open: OpenReport,
    /// The snapshot the state was rebuilt from, if any.
    pub snapshot: Option<SnapshotInfo>,
    /// Snapshots that were skipped, with why.
    pub snapshots_refused: Vec<String>,
    /// The replay from the snapshot (or the log's start) to the log's end, compared with every
    /// checkpoint it met.
    pub compare: CompareReport,
    /// The last entry the log held at the restart (what the restart applied up to).
    pub recovered_end: Option<Lsn>,
    /// The pipeline is fenced from the start (DIVERGENT or unsupported), with why.
    pub fenced: Option<String>,
}

impl RestartReport {
    /// The fate of an LSN handed out before this restart (typically to an Indeterminate
    /// submission). Valid for LSNs of the previous run only: new entries reuse absent LSNs.
    pub fn fate_at(&self, lsn: Lsn) -> LsnFate {
        if self.recovered_end.is_some_and(|e| lsn <= e) {
            LsnFate::Applied
        } else {
            LsnFate::Absent
        }
    }
}
