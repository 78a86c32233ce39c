//! The commit pipeline: pre-hooks → commit → apply → notify (docs/invariants.md I1, I5, I8).
//!
//! ```text
//! caller: submit(body, kind, request id)
//!           ├─ pre-hooks (read-only view of the state; may reject: nothing is logged)
//!           └─ AsyncWal::append_with(.., completion channel) ── returns an Ack<Done> at once
//! I/O thread: batch, write, fdatasync ── completion (durable / failed) on the channel
//! apply thread: in LSN order, once an entry is committed (single node: durable; or as an
//!           external commit source says): Applier::apply (THE seam), after-hooks, then the
//!           acknowledgement resolves; checkpoints every N entries or T seconds and
//!           at close; snapshots on a policy, then a prefix purge below them.
//! ```
//!
//! The I/O thread never runs user code; hooks and callbacks run on the apply thread, and a
//! panic in any of them (or in apply) fences the pipeline: read-only, the reason kept, nothing
//! aborts.
//!
//! One rule for errors: what is refused at submission (an empty batch, a pre-hook's refusal, a
//! fenced or closing pipeline, the log refusing the append) is an [`Error`] from the submit
//! call, and nothing was logged; what is decided later is the acknowledgement's
//! [`Failure`](wal::Failure), one of the two kinds of I1: `Rejected` (never logged) and
//! `Indeterminate` (possibly logged: a failed sync, a fenced log). [`Pipeline::fate`] answers
//! later by request id, and [`RestartReport::fate_at`] by LSN after a reopen.

// (Not in the module docs above, which a controller reads: this file holds `Pipeline` (open,
// restart, submit, fate queries, close) and what it shares with the apply thread; beside it:
// options.rs, hooks.rs, fate.rs (what a caller configures, hooks in, and learns, with the
// acknowledgement's callback), cursor.rs, and apply_loop.rs (the apply thread).)

mod apply_loop;
mod cursor;
mod fate;
mod hooks;
mod options;

pub use cursor::{Cursor, CursorEntry};
pub use fate::{Done, LsnFate, OnDone, RequestFate, Resolution, RestartReport};
pub use hooks::{AfterHook, Hooks, Notice, PreHook, Proposal};
pub use options::{CommitPolicy, FactsWhenFenced, PipelineOptions};

use crate::snapshot::{list_snapshots, read_snapshot, SnapshotInfo};
use crate::{Applier, EntryKind, Envelope, Fate, Replayer, StateMachine};
use crossbeam_channel::Sender;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use wal::seam::{FileStorage, Writer};
use wal::AsyncWal;
use wal::Durability;
use wal::Lsn;
use wal::{Ack, Notify, Resolver};
use wal::{Error, Result};
use wal::{OpenReport, Wal};

/// One entry of a submission, as the apply thread receives it.
pub(crate) struct Item {
    pub(crate) lsn: Lsn,
    pub(crate) request_id: Option<u64>,
    pub(crate) payload: Vec<u8>,
    /// What resolves a command's acknowledgement (a fact has none).
    pub(crate) ack: Option<Resolver<Done>>,
}

pub(crate) enum Msg {
    Pending { tag: u64, epoch: wal::Epoch, items: Vec<Item> },
    CommitThrough(Lsn),
    Snapshot(Sender<Result<String>>),
    Close,
}

struct Submit {
    next_tag: u64,
    closing: bool,
    next_cursor: u64,
}

pub(crate) struct Core<S> {
    pub(crate) log: AsyncWal,
    pub(crate) applier: RwLock<Applier<S>>,
    pub(crate) fenced: Mutex<Option<String>>,
    /// Request id → LSN of submissions not yet applied.
    pub(crate) pending_ids: Mutex<HashMap<u64, Lsn>>,
    /// Open cursors: id → next LSN to read.
    pub(crate) cursors: Mutex<std::collections::BTreeMap<u64, Lsn>>,
    submit: Mutex<Submit>,
    pre: Vec<PreHook<S>>,
    pub(crate) completions: Sender<wal::Completion>,
    pub(crate) to_apply: Sender<Msg>,
    pub(crate) opts: PipelineOptions,
    pub(crate) snapshots: Arc<dyn Writer>,
    pub(crate) log_id: [u8; 16],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S> Core<S> {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Applier<S>> {
        self.applier.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn fence(&self, why: String) {
        lock(&self.fenced).get_or_insert(why);
    }
}

/// A controller's commit pipeline over one log and one state machine.
pub struct Pipeline<S: StateMachine> {
    core: Option<Arc<Core<S>>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: StateMachine> std::fmt::Debug for Pipeline<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pipeline")
    }
}

impl<S: StateMachine + Sync> Pipeline<S> {
    /// Opens (or creates) the log in `dir`, rebuilds the state from the newest usable snapshot
    /// plus the log through the apply seam, compares every checkpoint met, and starts the I/O
    /// and apply threads. A DIVERGENT or unsupported replay does not fail the open: the
    /// pipeline starts fenced (read-only) and the report says why (docs/invariants.md I8).
    pub fn open(
        dir: impl AsRef<Path>,
        opts: PipelineOptions,
        hooks: Hooks<S>,
        fresh: impl FnOnce() -> S,
    ) -> Result<(Pipeline<S>, RestartReport)> {
        let dir = dir.as_ref();
        let (wal, open) = Wal::open(dir, opts.log.clone())?;
        let snapshots =
            FileStorage::new(dir, false).map_err(|e| Error::io("opening the snapshot directory", e))?;
        let snapshots: Arc<dyn Writer> = Arc::new(snapshots);
        Self::start(wal, open, snapshots, opts, hooks, fresh)
    }

    /// [`Pipeline::open`] over an already opened log, with snapshots read and written through
    /// `snapshots` (a storage instance of its own: the I/O thread owns the log's).
    pub fn start(
        wal: Wal,
        open: OpenReport,
        snapshots: Arc<dyn Writer>,
        opts: PipelineOptions,
        hooks: Hooks<S>,
        fresh: impl FnOnce() -> S,
    ) -> Result<(Pipeline<S>, RestartReport)> {
        if opts.checkpoint_every_entries == 0 || opts.snapshot_every_entries == Some(0) {
            return Err(Error::InvalidArgument(
                "checkpoint and snapshot intervals must be at least 1".into(),
            ));
        }
        let log_id = wal.log_id();
        let mut wal = wal;
        match crate::recorded_dedupe_window(wal.meta(crate::DEDUPE_WINDOW_META_KEY)) {
            Some(w) if w != opts.dedupe_window => {
                return Err(Error::InvalidArgument(format!(
                    "this log was written with a dedupe window of {w} LSNs; the options say {} \
                     (replay would drop different duplicates)",
                    opts.dedupe_window
                )));
            }
            Some(_) => {}
            None if opts.log.read_only => {}
            None => wal.set_meta(crate::DEDUPE_WINDOW_META_KEY, &opts.dedupe_window.to_le_bytes())?,
        }
        let (base, snapshot, refused) = newest_snapshot::<S>(&*snapshots, &wal, log_id, opts.dedupe_window)?;
        let applier = match base {
            Some(a) => a,
            None => {
                if wal.prefix_purged() {
                    // Entries were purged and no snapshot covers them: the state cannot be
                    // rebuilt, and guessing would be silent data loss.
                    return Err(Error::InvalidArgument(format!(
                        "the log's prefix was purged and no usable snapshot covers it ({})",
                        if refused.is_empty() { "no snapshot found".to_string() } else { refused.join("; ") }
                    )));
                }
                Applier::new(fresh(), opts.dedupe_window)
            }
        };
        let mut replayer = Replayer::new(applier);
        let start = replayer.applier().applied().map(|l| Lsn(l.0 + 1));
        let mut replay = wal.replay_from(start, Durability::Durable)?;
        replayer.run(&mut replay)?;
        drop(replay);
        let (applier, compare) = replayer.finish();
        let fenced = match (&compare.divergence, &compare.unsupported) {
            (Some(d), _) => Some(format!("DIVERGENT at LSN {}: {}", d.lsn, d.reason)),
            (None, Some(u)) => Some(format!("UNSUPPORTED_VERSION: {u}")),
            (None, None) => None,
        };
        // Mutant (tools/mutants.sh, I8): a DIVERGENT restart starts writable, not fenced.
        let fenced = fenced
            .filter(|f| !(wal_format::mutants::on("no-divergence-fence") && f.starts_with("DIVERGENT")));
        let recovered_end = wal.next_lsn().0.checked_sub(1).map(Lsn).filter(|_| wal.first_lsn().is_some());
        if let (Some(l), None, false, true) =
            (applier.applied(), &fenced, opts.log.read_only, compare.unchecked_entries > 0)
        {
            // Entries replayed after the last checkpoint: record where this restart stands, so
            // the next verification compares against it.
            wal.checkpoint(wal.epoch(), l, &applier.checkpoint())?;
        }
        let log = AsyncWal::start(wal, opts.io.clone())?;
        let (to_apply, apply_rx) = crossbeam_channel::unbounded();
        let (completions, done_rx) = crossbeam_channel::unbounded();
        let core = Arc::new(Core {
            log,
            applier: RwLock::new(applier),
            fenced: Mutex::new(fenced.clone()),
            pending_ids: Mutex::new(HashMap::new()),
            cursors: Mutex::new(std::collections::BTreeMap::new()),
            submit: Mutex::new(Submit { next_tag: 1, closing: false, next_cursor: 1 }),
            pre: hooks.pre,
            completions,
            to_apply,
            opts,
            snapshots,
            log_id,
        });
        let c = core.clone();
        let after = hooks.after;
        let thread = std::thread::Builder::new()
            .name("wal-apply".into())
            .spawn(move || apply_loop::run(&c, after, &apply_rx, &done_rx))
            .map_err(|e| Error::io("starting the apply thread", e))?;
        let report =
            RestartReport { open, snapshot, snapshots_refused: refused, compare, recovered_end, fenced };
        Ok((Pipeline { core: Some(core), thread: Some(thread) }, report))
    }

    fn core(&self) -> &Core<S> {
        self.core.as_deref().expect("the core lives until close")
    }

    /// Submits a command: pre-hooks, then the log, without blocking on disk. The
    /// acknowledgement resolves after commit and apply with the outcome, or with the
    /// [`Failure`](wal::Failure) decided later. An `Err` is a refusal now (a pre-hook's
    /// [`Error::Rejected`], a fenced or closing pipeline, the log's own refusal): nothing was
    /// logged.
    pub fn submit(&self, body: &[u8], request_id: Option<u64>) -> Result<Ack<Done>> {
        self.submit_kind(None, EntryKind::Command, body, request_id)
            .map(|a| a.expect("commands are acknowledged"))
    }

    /// [`Pipeline::submit`] under an explicit writer epoch (a leader's): an epoch older than
    /// the log's is refused, [`Error::StaleEpoch`] (docs/invariants.md I7).
    pub fn submit_as(&self, epoch: wal::Epoch, body: &[u8], request_id: Option<u64>) -> Result<Ack<Done>> {
        self.submit_kind(Some(epoch), EntryKind::Command, body, request_id)
            .map(|a| a.expect("commands are acknowledged"))
    }

    /// Submits a fact (a reported event): applied only after commit, through the same seam;
    /// nobody waits. On a fenced pipeline the refusal is as the fact policy says
    /// ([`FactsWhenFenced`]); any other `Err` is a refusal as for a command.
    pub fn report_fact(&self, body: &[u8], request_id: Option<u64>) -> Result<()> {
        self.submit_kind(None, EntryKind::Fact, body, request_id).map(|_| ())
    }

    fn submit_kind(
        &self,
        epoch: Option<wal::Epoch>,
        kind: EntryKind,
        body: &[u8],
        request_id: Option<u64>,
    ) -> Result<Option<Ack<Done>>> {
        let mut acks = self.submit_items(epoch, kind, &[(body, request_id)])?;
        Ok(acks.pop().flatten())
    }

    /// Submits a user batch of commands (a job array): one atomic group in the log, so after
    /// any crash every element exists or none does; applied together, in order. One
    /// acknowledgement per element; an `Err` refuses the whole batch (nothing was logged).
    pub fn submit_batch(&self, bodies: &[(&[u8], Option<u64>)]) -> Result<Vec<Ack<Done>>> {
        let acks = self.submit_items(None, EntryKind::Command, bodies)?;
        Ok(acks.into_iter().flatten().collect())
    }

    fn submit_items(
        &self,
        epoch: Option<wal::Epoch>,
        kind: EntryKind,
        items: &[(&[u8], Option<u64>)],
    ) -> Result<Vec<Option<Ack<Done>>>> {
        let core = self.core();
        if items.is_empty() {
            return Err(Error::InvalidArgument("an empty batch".into()));
        }
        if let Some(cause) = lock(&core.fenced).clone() {
            return Err(if kept_for_reopen(kind, core.opts.facts_when_fenced) {
                Error::Fenced { cause }
            } else {
                Error::Rejected(format!("fenced: {cause}"))
            });
        }
        if items.iter().any(|(_, id)| *id == Some(0)) {
            return Err(Error::InvalidArgument("request id 0 means none; use None".into()));
        }
        {
            let state = core.read();
            for &(body, request_id) in items {
                let proposal = Proposal { kind, request_id, body };
                for hook in &core.pre {
                    let verdict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        hook(state.state(), &proposal)
                    }));
                    match verdict {
                        Ok(Ok(())) => {}
                        Ok(Err(why)) => return Err(Error::Rejected(format!("pre-hook: {why}"))),
                        Err(p) => {
                            let why = format!("a pre-hook panicked: {}", crate::panic_message(&*p));
                            core.fence(why.clone());
                            return Err(Error::Rejected(why));
                        }
                    }
                }
            }
        }
        let payloads: Vec<Vec<u8>> =
            items.iter().map(|&(body, id)| Envelope::encode(kind, id, body)).collect();
        let mut sub = lock(&core.submit);
        if sub.closing {
            return Err(Error::Rejected("the pipeline is closing".into()));
        }
        let tag = sub.next_tag;
        let notify = Notify { tx: core.completions.clone(), tag };
        let epoch = epoch.unwrap_or_else(|| core.log.epoch());
        // Each entry is copied into a buffer the log hands back for reuse (the apply thread keeps
        // the encoded envelopes); more than one go in as one atomic group.
        let appended = core.log.append_with(epoch, payloads.as_slice(), Durability::Durable, Some(notify));
        let ticket = match appended {
            Ok(t) => t,
            Err(Error::Fenced { cause }) => {
                return Err(if kept_for_reopen(kind, core.opts.facts_when_fenced) {
                    Error::Fenced { cause }
                } else {
                    Error::Rejected(format!("fenced: {cause}"))
                });
            }
            // The log's own refusal (a stale epoch, too large, a full queue) as it gave it.
            Err(e) => return Err(e),
        };
        sub.next_tag += 1;
        let mut out = Vec::with_capacity(items.len());
        let mut queued = Vec::with_capacity(items.len());
        for (i, (payload, &(_, request_id))) in payloads.into_iter().zip(items).enumerate() {
            let lsn = Lsn(ticket.lsn.0 + i as u64);
            let (ack, resolver) = match kind {
                EntryKind::Command => {
                    let (ack, resolver) = Ack::pending(lsn);
                    (Some(ack), Some(resolver))
                }
                EntryKind::Fact => (None, None),
            };
            if let Some(id) = request_id {
                lock(&core.pending_ids).insert(id, lsn);
            }
            out.push(ack);
            queued.push(Item { lsn, request_id, payload, ack: resolver });
        }
        // Under the submit lock: the apply thread learns of entries in LSN order.
        let _ = core.to_apply.send(Msg::Pending { tag, epoch, items: queued });
        Ok(out)
    }

    /// A tailing cursor that returns committed entries from `from` on.
    pub fn cursor(&self, from: Lsn) -> Cursor<S> {
        let core = self.core.as_ref().expect("the core lives until close");
        let id = {
            let mut sub = lock(&core.submit);
            sub.next_cursor += 1;
            sub.next_cursor
        };
        lock(&core.cursors).insert(id, from);
        Cursor::new(Arc::downgrade(core), id, from)
    }

    /// Tells an [`CommitPolicy::External`] pipeline that everything up to `lsn` is committed.
    pub fn commit_through(&self, lsn: Lsn) {
        let _ = self.core().to_apply.send(Msg::CommitThrough(lsn));
    }

    /// What is known about a request id.
    pub fn fate(&self, request_id: u64) -> RequestFate {
        let core = self.core();
        // Pending first: an entry moves from pending to applied under the state's write lock.
        let pending = lock(&core.pending_ids).get(&request_id).copied();
        match core.read().fate(request_id) {
            Fate::Applied { lsn, refused } => RequestFate::Applied { lsn, refused },
            Fate::NotApplied => match pending.or_else(|| lock(&core.pending_ids).get(&request_id).copied()) {
                Some(lsn) => RequestFate::Pending { lsn },
                None => RequestFate::NotApplied,
            },
        }
    }

    /// Reads the state (never mutates it; the apply thread waits while the guard lives).
    pub fn read<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(self.core().read().state())
    }

    /// The last applied LSN and the current checkpoint value.
    pub fn applied(&self) -> (Option<Lsn>, wal::Checkpoint) {
        let a = self.core().read();
        (a.applied(), a.checkpoint())
    }

    /// Why the pipeline is fenced (read-only), if it is.
    pub fn fenced(&self) -> Option<String> {
        lock(&self.core().fenced).clone()
    }

    /// Writes a snapshot now (on the apply thread, between entries) and returns its name.
    pub fn snapshot(&self) -> Result<String> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.core()
            .to_apply
            .send(Msg::Snapshot(tx))
            .map_err(|_| Error::Fenced { cause: "the apply thread has stopped".into() })?;
        rx.recv().map_err(|_| Error::Fenced { cause: "the apply thread has stopped".into() })?
    }

    /// The I/O thread's counters.
    pub fn io_stats(&self) -> wal::Stats {
        self.core().log.stats()
    }

    /// Stops taking submissions, lets every pending entry commit and apply (or fail), writes a
    /// final checkpoint, then drains, syncs and seals the log. Every acknowledgement is resolved.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        let Some(core) = self.core.take() else { return Ok(()) };
        lock(&core.submit).closing = true;
        let _ = core.to_apply.send(Msg::Close);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let fenced = lock(&core.fenced).clone();
        match Arc::try_unwrap(core) {
            Ok(core) => {
                let closed = core.log.close();
                match (closed, fenced) {
                    (Err(e), _) => Err(e),
                    (Ok(()), Some(cause)) => Err(Error::Fenced { cause }),
                    (Ok(()), None) => Ok(()),
                }
            }
            Err(_) => Err(Error::Fenced { cause: "the pipeline core is still shared".into() }),
        }
    }
}

impl<S: StateMachine> Drop for Pipeline<S> {
    fn drop(&mut self) {
        if let Some(core) = self.core.take() {
            lock(&core.submit).closing = true;
            let _ = core.to_apply.send(Msg::Close);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// Whether a submission a fenced pipeline (or log) refuses is one to keep for after a reopen:
/// a fact under [`FactsWhenFenced::Indeterminate`], refused as [`Error::Fenced`], which is not a
/// rejection (the controller resubmits it after a reopen). Anything else is
/// [`Error::Rejected`]: dropped, nothing was logged and nothing will be.
fn kept_for_reopen(kind: EntryKind, facts: FactsWhenFenced) -> bool {
    kind == EntryKind::Fact && facts == FactsWhenFenced::Indeterminate
}

/// The newest snapshot that decodes, belongs to this log and leaves no gap before the log's
/// first entry. Older ones are the fallback when a newer one is damaged.
#[allow(clippy::type_complexity)]
fn newest_snapshot<S: StateMachine>(
    storage: &dyn Writer,
    wal: &Wal,
    log_id: [u8; 16],
    window: u64,
) -> Result<(Option<Applier<S>>, Option<SnapshotInfo>, Vec<String>)> {
    let mut refused = Vec::new();
    for (_, name) in list_snapshots(storage)?.into_iter().rev() {
        match read_snapshot::<S>(storage, &name) {
            Ok((a, info)) => {
                let gap = match (wal.first_lsn(), info.applied) {
                    (Some(first), Some(at)) => first.0 > at.0 + 1,
                    (Some(_), None) => wal.prefix_purged(),
                    (None, _) => false,
                };
                if info.log_id != log_id {
                    refused.push(format!("{name}: belongs to another log"));
                } else if a.dedupe_window() != window {
                    refused
                        .push(format!("{name}: dedupe window {} (configured {window})", a.dedupe_window()));
                } else if gap {
                    refused.push(format!("{name}: the log's first entry is after it"));
                } else if info.applied.is_some_and(|at| at.0 >= wal.next_lsn().0) {
                    refused.push(format!("{name}: newer than the log's end"));
                } else {
                    return Ok((Some(a), Some(info), refused));
                }
            }
            Err(e) => refused.push(e.to_string()),
        }
    }
    Ok((None, None, refused))
}
