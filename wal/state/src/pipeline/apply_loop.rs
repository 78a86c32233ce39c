//! The apply thread: learns of submitted entries (in LSN order) and of their log outcomes (from
//! the completion channel), and applies each committed entry in LSN order through the seam,
//! then notifies, then resolves the caller's acknowledgement.

use super::Resolution as Outcome;
use super::{AfterHook, CommitPolicy, Core, Done, Item, Msg, Notice};
use crate::snapshot::{list_snapshots, write_snapshot};
use crate::{panic_message, Envelope, StateMachine};
use crossbeam_channel::{select, Receiver};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use wal::{Completion, Failure, Resolver};
use wal::{Epoch, Lsn};

/// One submission: a single entry or a user batch, committed together.
struct Entry {
    tag: u64,
    epoch: Epoch,
    items: Vec<Item>,
}

struct Loop<'a, S> {
    core: &'a Core<S>,
    after: Vec<AfterHook<S>>,
    queue: VecDeque<Entry>,
    done: HashMap<u64, Result<Lsn, Failure>>,
    committed: Option<Lsn>,
    since_checkpoint: u64,
    last_checkpoint: Instant,
    since_snapshot: u64,
    closing: bool,
}

pub(crate) fn run<S: StateMachine>(
    core: &Core<S>,
    after: Vec<AfterHook<S>>,
    rx: &Receiver<Msg>,
    done_rx: &Receiver<Completion>,
) {
    let mut l = Loop {
        core,
        after,
        queue: VecDeque::new(),
        done: HashMap::new(),
        committed: None,
        since_checkpoint: 0,
        last_checkpoint: Instant::now(),
        since_snapshot: 0,
        closing: false,
    };
    loop {
        let wait = if l.since_checkpoint > 0 {
            core.opts.checkpoint_every.saturating_sub(l.last_checkpoint.elapsed())
        } else {
            Duration::from_secs(3600)
        };
        select! {
            recv(rx) -> m => match m {
                Ok(m) => l.message(m),
                Err(_) => l.closing = true,
            },
            recv(done_rx) -> c => {
                if let Ok(c) = c {
                    l.done.insert(c.tag, c.outcome);
                }
            }
            default(wait) => {}
        }
        while let Ok(m) = rx.try_recv() {
            l.message(m);
        }
        while let Ok(c) = done_rx.try_recv() {
            l.done.insert(c.tag, c.outcome);
        }
        l.advance();
        let due = l.since_checkpoint >= core.opts.checkpoint_every_entries
            || (l.since_checkpoint > 0 && l.last_checkpoint.elapsed() >= core.opts.checkpoint_every);
        if due {
            l.checkpoint();
        }
        if core.opts.snapshot_every_entries.is_some_and(|n| l.since_snapshot >= n) {
            if let Err(e) = l.snapshot() {
                // Through the `log` facade, to whatever logger the application installed.
                log::warn!(target: "wal_state", "snapshot failed (the log is unaffected): {e}");
            }
        }
        if l.closing && core.opts.commit == CommitPolicy::External {
            // Nobody will commit them any more: durable entries still waiting for the commit
            // index are the log's to decide (a consensus library may still commit them).
            l.release_uncommitted();
        }
        if l.closing && l.queue.is_empty() {
            if l.since_checkpoint > 0 {
                l.checkpoint();
            }
            return;
        }
    }
}

impl<S: StateMachine> Loop<'_, S> {
    fn message(&mut self, m: Msg) {
        match m {
            Msg::Pending { tag, epoch, items } => self.queue.push_back(Entry { tag, epoch, items }),
            Msg::CommitThrough(l) => self.committed = self.committed.max(Some(l)),
            Msg::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Msg::Close => self.closing = true,
        }
    }

    /// Applies, in LSN order, every entry at the front whose fate is known.
    fn advance(&mut self) {
        // Mutant (tools/mutants.sh, I1): apply each entry as soon as it is submitted, before
        // its log outcome (durable, failed) or its commit is known.
        while wal_format::mutants::on("apply-before-commit") {
            let Some(e) = self.queue.pop_front() else { break };
            self.apply(e);
        }
        while let Some(front) = self.queue.front() {
            let Some(outcome) = self.done.get(&front.tag) else { return };
            if outcome.is_ok() {
                let last = front.items.last().map_or(Lsn(0), |i| i.lsn);
                let committed = match self.core.opts.commit {
                    CommitPolicy::Durable => true,
                    CommitPolicy::External => self.committed.is_some_and(|c| c >= last),
                };
                if !committed {
                    return;
                }
            }
            let Some(e) = self.queue.pop_front() else { return };
            let outcome =
                self.done.remove(&e.tag).unwrap_or_else(|| Err(Failure::Indeterminate("lost".into())));
            match outcome {
                Ok(_) => self.apply(e),
                Err(f) => {
                    if let Failure::Indeterminate(why) = &f {
                        self.core.fence(format!("the log is fenced: {why}"));
                    }
                    for item in e.items {
                        self.forget(&item);
                        self.resolve(item.ack, Err(f.clone()));
                    }
                }
            }
        }
    }

    /// At close under an external commit policy: entries whose log outcome is known but that
    /// were never committed resolve Indeterminate.
    fn release_uncommitted(&mut self) {
        while let Some(front) = self.queue.front() {
            if !self.done.contains_key(&front.tag) {
                return;
            }
            let Some(e) = self.queue.pop_front() else { return };
            let outcome = self.done.remove(&e.tag);
            for item in e.items {
                self.forget(&item);
                let f = match &outcome {
                    Some(Err(f)) => f.clone(),
                    _ => Failure::Indeterminate("the pipeline closed before the entry was committed".into()),
                };
                self.resolve(item.ack, Err(f));
            }
        }
    }

    fn forget(&self, item: &Item) {
        if let Some(id) = item.request_id {
            let mut p = super::lock(&self.core.pending_ids);
            if p.get(&id) == Some(&item.lsn) {
                p.remove(&id);
            }
        }
    }

    /// Applies a committed submission: every item in LSN order under one write lock (a user
    /// batch is applied whole), after-hooks after each, then the acknowledgements resolve.
    fn apply(&mut self, e: Entry) {
        let mut resolved = Vec::with_capacity(e.items.len());
        {
            let mut a = self.core.applier.write().unwrap_or_else(|p| p.into_inner());
            for item in e.items {
                self.forget(&item);
                if let Some(why) = super::lock(&self.core.fenced).clone() {
                    // Durable, so the log applies it at the next restart; this process will not.
                    let f = format!("durable but not applied: the pipeline is fenced ({why})");
                    resolved.push((item.ack, Err(Failure::Indeterminate(f))));
                    continue;
                }
                let applied = match a.apply(item.lsn, e.epoch, &item.payload) {
                    Ok(x) => x,
                    Err(why) => {
                        self.core.fence(why.clone());
                        resolved.push((item.ack, Err(Failure::Indeterminate(why))));
                        continue;
                    }
                };
                self.since_checkpoint += 1;
                self.since_snapshot += 1;
                if let Ok(env) = Envelope::decode(&item.payload) {
                    let notice = Notice {
                        lsn: item.lsn,
                        kind: env.kind,
                        request_id: item.request_id,
                        body: env.body,
                        applied: &applied,
                    };
                    for hook in &mut self.after {
                        if let Err(p) = catch_unwind(AssertUnwindSafe(|| hook(a.state(), &notice))) {
                            let why =
                                format!("an after-hook panicked at LSN {}: {}", item.lsn, panic_message(&*p));
                            a.fence(why.clone());
                            self.core.fence(why);
                            break;
                        }
                    }
                }
                resolved.push((item.ack, Ok(Done { lsn: item.lsn, applied })));
            }
        }
        for (ack, outcome) in resolved {
            self.resolve(ack, outcome);
        }
    }

    /// Resolves a command's acknowledgement and runs the callback given for it, here: the
    /// apply thread is where user code may run.
    fn resolve(&self, ack: Option<Resolver<Done>>, outcome: Outcome) {
        let Some(ack) = ack else { return };
        if let Err(panic) = ack.resolve(outcome) {
            self.core.fence(format!("a ticket callback panicked: {}", panic_message(&*panic)));
        }
    }

    fn checkpoint(&mut self) {
        let (lsn, cp) = {
            let a = self.core.read();
            (a.applied(), a.checkpoint())
        };
        if let Some(lsn) = lsn {
            // A fenced log refuses it; there is nothing to record then.
            let _ = self.core.log.checkpoint(self.core.log.epoch(), lsn, &cp);
        }
        self.since_checkpoint = 0;
        self.last_checkpoint = Instant::now();
    }

    fn snapshot(&mut self) -> wal::Result<String> {
        self.since_snapshot = 0;
        let (name, applied) = {
            let a = self.core.read();
            if let Some(why) = a.fenced() {
                return Err(wal::Error::Fenced { cause: why.to_string() });
            }
            (write_snapshot(&*self.core.snapshots, &a, self.core.log_id)?, a.applied())
        };
        debug_assert!(applied.is_some());
        if self.core.opts.purge_after_snapshot {
            let st = &*self.core.snapshots;
            let snaps = list_snapshots(st)?;
            let keep_from = snaps.len().saturating_sub(2);
            for (_, old) in snaps.get(..keep_from).unwrap_or_default() {
                st.remove(old).map_err(|e| wal::Error::io(format!("removing {old}"), e))?;
            }
            if keep_from > 0 {
                st.sync_dir().map_err(|e| wal::Error::io("syncing the directory", e))?;
            }
            // Only below durable snapshots: write_snapshot synced the file and the directory.
            if let Some((Some(older), _)) = snaps.get(keep_from).filter(|_| snaps.len() >= 2) {
                let mut below = older.0 + 1;
                // Cursors within the lag cap pin the purge at their position.
                let end = applied.map_or(0, |a| a.0 + 1);
                let max_lag = self.core.opts.cursor_pin_max_lag;
                for &pos in super::lock(&self.core.cursors).values() {
                    if end.saturating_sub(pos.0) <= max_lag {
                        below = below.min(pos.0);
                    }
                }
                self.core.log.purge_before(Lsn(below))?;
            }
        }
        Ok(name)
    }
}
