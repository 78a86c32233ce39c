//! What an open takes on trust, and the check every write waits for (README "What an open
//! checks").
//!
//! A write-open reads O(segments) bytes: a sealed segment whose footer the next segment's header
//! chains to, and the segment a clean close sealed (`wal.meta` names its footer, `wal.close` holds
//! the state at the close, FORMAT.md 6.1), are taken on their footers; only the last, unsealed
//! segment is walked. A flipped bit inside a trusted segment is invisible to that open. The
//! contract: **no write lands after an acknowledged record that fails its checksum without
//! `Error::Damaged` (CORRUPT, with segment, offset and LSN) reported first.** By default
//! ([`OpenCheck::BeforeFirstWrite`]) a handle whose open trusted any segment refuses to write
//! until every record has been checked, by one of:
//!
//! - a replay of the whole log through this handle ([`crate::Wal::replay`], or `replay_from`
//!   with no start) that ran to its end without damage: it re-checks every record's checksum and
//!   the chain inside every segment, and the open checked the chain between segments (each
//!   header against the footer before it), so it is the same evidence as a full scan;
//! - otherwise the first write (any of them: append, sync, checkpoint, purge, rotate, close with
//!   something to seal), or [`crate::Wal::check_records`], walks the whole log (the verifier's
//!   full scan, bounded memory) and refuses with the first damage it finds.
//!
//! Why this default and not a full walk at every open: a controller's restart is open + replay,
//! and the replay already walks every record; a full scan at the open would walk everything
//! twice (the README's open numbers: an open after a clean close is about 2% of a full replay
//! at 1 GiB, a scan about as long as the replay). Deferred, open + replay costs one walk, and
//! open + append one walk before the first write. A replay that skips records (from an LSN)
//! does not count: the records it skipped were not checked. Read-only opens and
//! [`crate::RecoveryMode::Salvage`] never write and are unaffected.

use super::Wal;
use crate::error::{Damage, Error, Result};
use std::sync::{Arc, OnceLock};

/// When the records an open took on trust are checked (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpenCheck {
    /// The open is fast; the first write walks the whole log first, unless a replay of the
    /// whole log through the handle already did. A damaged log refuses that write (and every
    /// later one) with `Error::Damaged`.
    #[default]
    BeforeFirstWrite,
    /// The open walks every record of every segment (a full scan) and refuses a damaged log
    /// itself: an open as long as a replay, for callers that want the answer at the open.
    AtOpen,
    /// Trust sealed segments' footers and `wal.close` for good: nothing checks their records
    /// before this handle writes, so a flipped bit in acknowledged data there is found only by a
    /// replay or `walcheck verify`, and appends land after it. Only for a log just verified by
    /// other means (e.g. `walcheck verify` under the same lock holder) and an open that must
    /// not pay a walk.
    TrustSealed,
}

/// Whether a handle's records have been checked; shared with the replays it hands out (a whole
/// replay that ends cleanly checks them). Unset while unchecked; set once, for good, to `Ok`
/// (checked) or to the damage the check found (every write refuses with it). Every write
/// reads it, without a lock.
#[derive(Debug)]
pub(crate) struct Trust(OnceLock<std::result::Result<(), Damage>>);

impl Trust {
    pub(crate) fn new(checked: bool) -> Arc<Trust> {
        Arc::new(Trust(if checked { OnceLock::from(Ok(())) } else { OnceLock::new() }))
    }

    pub(crate) fn unchecked(&self) -> bool {
        self.0.get().is_none()
    }

    /// A replay of the whole log ran to its end without damage.
    pub(crate) fn replayed_whole(&self) {
        let _ = self.0.set(Ok(()));
    }
}

impl Wal {
    /// Checks now every record the open took on trust (see [`OpenCheck`]): `Ok` once the whole
    /// log checked out (at most one walk per handle), `Error::Damaged` with the first damage
    /// otherwise, the same each time it is asked. Every write calls it first; a caller that
    /// hands the handle to another thread (the I/O thread, a Raft store) calls it before, so
    /// that the refusal comes at the start. A read-only handle writes nothing: `Ok`.
    pub fn check_records(&mut self) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        if self.trust.unchecked() {
            // Nothing was written through this handle yet (writes wait for this), so the
            // directory holds exactly what the open found, after its torn-tail cut.
            let scan = crate::recovery::scan_log(&*self.storage, true)?;
            // Set once: a whole replay that ended cleanly meanwhile read the same records.
            let _ = self.trust.0.set(scan.damage.map_or(Ok(()), Err));
        }
        if let Some(Err(d)) = self.trust.0.get() {
            return Err(Error::Damaged(d.clone()));
        }
        // The next segment's preparation waits for the check too (it creates a file).
        if let Some(seq) = self.files.take_deferred_prepare() {
            self.prepare_next(seq);
        }
        Ok(())
    }
}
