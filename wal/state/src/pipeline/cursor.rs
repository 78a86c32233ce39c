//! Tailing cursors: independent readers of the committed, applied entries (a cache on another
//! node invalidating entries, an audit exporter), each at its own position.
//!
//! A cursor reads the log itself (through the I/O thread's durable replay), never more than
//! the pipeline has applied, so it only ever sees committed state. It reports its lag, and
//! while its lag stays within [`PipelineOptions::cursor_pin_max_lag`](super::PipelineOptions)
//! it pins the prefix purge at its position; a cursor that falls further behind stops pinning
//! and, once the purge passes it, gets [`Error::PurgedPast`] rather than a silent gap.
//! Cursors do not persist: a subscriber that restarts keeps its own position and opens a new
//! cursor there.

use super::{lock, Core};
use crate::{EntryKind, Envelope};
use std::sync::Weak;
use wal::Lsn;
use wal::{Error, Result};
use wal::{ItemKind, Replay};

/// One committed entry as a cursor returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorEntry {
    /// The entry's LSN.
    pub lsn: Lsn,
    /// A command or a fact.
    pub kind: EntryKind,
    /// The request id the entry carries, if any.
    pub request_id: Option<u64>,
    /// The state machine's bytes (without the envelope).
    pub body: Vec<u8>,
}

enum Step {
    Skip,
    End,
    NotYet,
    Gap(Lsn),
    Bad(String),
    Take(CursorEntry),
}

/// A reader of committed entries from its own position.
pub struct Cursor<S> {
    core: Weak<Core<S>>,
    id: u64,
    next: Lsn,
    replay: Option<Replay>,
}

impl<S> std::fmt::Debug for Cursor<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cursor {{ id: {}, next: {} }}", self.id, self.next)
    }
}

impl<S: crate::StateMachine> Cursor<S> {
    pub(crate) fn new(core: Weak<Core<S>>, id: u64, next: Lsn) -> Self {
        Cursor { core, id, next, replay: None }
    }

    /// The next LSN this cursor will return.
    pub fn position(&self) -> Lsn {
        self.next
    }

    fn core(&self) -> Result<std::sync::Arc<Core<S>>> {
        self.core.upgrade().ok_or(Error::ReadOnly)
    }

    /// How many applied entries this cursor has not read yet.
    pub fn lag(&self) -> Result<u64> {
        let core = self.core()?;
        let applied = core.read().applied();
        Ok(applied.map_or(0, |a| (a.0 + 1).saturating_sub(self.next.0)))
    }

    /// Up to `max` committed entries from the cursor's position (empty when it is caught up).
    pub fn next_batch(&mut self, max: usize) -> Result<Vec<CursorEntry>> {
        let core = self.core()?;
        let Some(applied) = core.read().applied() else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut fresh = false;
        while out.len() < max && self.next <= applied {
            if self.replay.is_none() {
                if fresh {
                    break; // a new replay already ran dry: the rest is not durable yet
                }
                self.replay = Some(core.log.replay_from(Some(self.next), wal::Durability::Durable)?);
                fresh = true;
            }
            let Some(replay) = self.replay.as_mut() else { break };
            let next = self.next;
            let step = match replay.next() {
                None => Step::End,
                Some(Err(e)) => return Err(e),
                Some(Ok(item)) if item.kind != ItemKind::Entry || item.lsn < next => Step::Skip,
                Some(Ok(item)) if item.lsn > next => Step::Gap(item.lsn),
                // Durable but not applied yet: read it again next time, from here.
                Some(Ok(item)) if item.lsn > applied => Step::NotYet,
                Some(Ok(item)) => match Envelope::decode(item.payload) {
                    Ok(env) => Step::Take(CursorEntry {
                        lsn: item.lsn,
                        kind: env.kind,
                        request_id: env.request_id,
                        body: env.body.to_vec(),
                    }),
                    Err(e) => Step::Bad(format!("LSN {}: {e}", item.lsn)),
                },
            };
            match step {
                Step::Skip => {}
                Step::End | Step::NotYet => {
                    self.replay = None;
                    if matches!(step, Step::NotYet) {
                        break;
                    }
                }
                Step::Gap(first) => {
                    self.replay = None;
                    return Err(Error::PurgedPast { position: next.0, first: first.0 });
                }
                Step::Bad(why) => return Err(Error::InvalidArgument(why)),
                Step::Take(e) => {
                    self.next = Lsn(e.lsn.0 + 1);
                    out.push(e);
                }
            }
        }
        lock(&core.cursors).insert(self.id, self.next);
        Ok(out)
    }
}

impl<S> Drop for Cursor<S> {
    fn drop(&mut self) {
        if let Some(core) = self.core.upgrade() {
            lock(&core.cursors).remove(&self.id);
        }
    }
}
