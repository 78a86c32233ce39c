//! The requests a round of the I/O thread takes from the queue, each staged into the log in
//! queue order (appends, the other operations, checkpoints) or run between batches (purge,
//! replay); a placement that differs from the one promised at submission fences the log, and
//! disk full gives the entries back.

use super::engine::{Io, Pending};
use super::queue::{Req, POOL_BUFFERS, POOL_BUFFER_BYTES};
use super::Payload;
use crate::error::{Error, Result};
use crate::ticket::Failure;
use crate::{Durability, Epoch, Lsn};

impl Io {
    /// Takes queued requests without blocking, up to a batch. Returns whether it took any.
    pub(super) fn take_requests(&mut self) -> bool {
        let max = self.shared.opts.max_batch_entries;
        let (mut took, mut bytes) = (false, 0);
        while self.staged.len() < max && !self.closing {
            let Ok(req) = self.rx.try_recv() else { break };
            took = true;
            bytes += req.queued().1;
            self.handle(req);
        }
        if bytes > 0 {
            let mut st = self.shared.lock();
            st.untaken_bytes = st.untaken_bytes.saturating_sub(bytes);
            let room = POOL_BUFFERS.saturating_sub(st.pool.len());
            let back = self.spent.len().min(room);
            st.pool.extend(self.spent.drain(..back));
        }
        self.spent.clear();
        took
    }

    fn handle(&mut self, req: Req) {
        match req {
            Req::Close => self.closing = true,
            Req::Abandon => (self.closing, self.abandoning) = (true, true),
            Req::Checkpoint { epoch, lsn, cp } => {
                if self.fenced().is_none() {
                    let seq_before = self.wal.written_seq();
                    match self.wal.checkpoint(Epoch(epoch), Lsn(lsn), &cp) {
                        Ok(()) => self.staged_checkpoint = true,
                        // Not recorded, which loses nothing (a checkpoint is an extra check);
                        // what was staged before it is kept or withdrawn as for an append.
                        Err(e @ Error::DiskFull { .. }) => self.after_disk_full(None, seq_before, &e),
                        Err(e) => self.fence(e.to_string()),
                    }
                    self.after_log_call();
                }
            }
            Req::Purge { below, reply } => {
                // Between batches: what is staged goes out first. The purge waits for the sync
                // in flight (it rewrites wal.meta and syncs the directory).
                self.write_now();
                let r = self.wal.purge_before(below);
                let _ = reply.send(r);
                self.after_log_call();
            }
            Req::Replay { from, bound, reply } => {
                let _ = reply.send(self.replay(from, bound));
            }
            Req::Append { lsn, epoch, payload, durability, slot } => {
                if let Some(why) = self.fenced() {
                    let entries = payload.entries();
                    self.shared.release(entries, payload.bytes());
                    slot.resolve(Err(Failure::Indeterminate(why)));
                    return;
                }
                let (entries, bytes) = (payload.entries(), payload.bytes());
                let seq_before = self.wal.written_seq();
                let appended = match &payload {
                    Payload::One(p) => self.wal.append(Epoch(epoch), p),
                    Payload::Group(g) => {
                        let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
                        self.wal.append_batch(Epoch(epoch), &refs)
                    }
                };
                // Staged (copied into the batch): the buffers go back for borrowed appends.
                let small = |buf: &Vec<u8>| buf.capacity() <= POOL_BUFFER_BYTES;
                match payload {
                    Payload::One(buf) => self.spent.extend(Some(buf).filter(small)),
                    Payload::Group(g) => self.spent.extend(g.into_iter().filter(small)),
                }
                let p = Pending { lsn, entries, bytes, durability, slot };
                self.keep_staged(p, appended.map(|l| l.0), lsn, seq_before);
            }
            Req::Control { op, epoch, lsn, next, durability, slot } => {
                let (entries, bytes) = op.size();
                if let Some(why) = self.fenced() {
                    self.shared.release(entries, bytes);
                    slot.resolve(Err(Failure::Indeterminate(why)));
                    return;
                }
                let seq_before = self.wal.written_seq();
                let placed = op.run(&mut self.wal, Epoch(epoch));
                let p = Pending { lsn, entries, bytes, durability, slot };
                self.keep_staged(p, placed, next, seq_before);
            }
        }
    }

    /// Disk full (or a batch no segment can hold) while the log ran an operation (`failed`, if
    /// it has a ticket): nothing of it was written. What was staged before it is either written
    /// (the seal wrote it, then no new segment could be made) or withdrawn with the seal's
    /// batch that ran out of space: the log's written sequence tells which. Then `failed` and
    /// everything queued after it are withdrawn.
    fn after_disk_full(&mut self, failed: Option<Pending>, seq_before: u64, e: &Error) {
        let written = self.wal.written_seq() > seq_before;
        let staged = std::mem::take(&mut self.staged);
        let mut lost = if written {
            self.staged = staged;
            Vec::new()
        } else {
            self.staged_checkpoint = false;
            staged
        };
        self.write_now();
        lost.extend(failed);
        self.withdraw(lost, &e.to_string());
    }

    /// A replay from `from`: of the durable log, or of everything written (what is staged is
    /// written first, so it sees every append queued before the request).
    fn replay(&mut self, from: Option<Lsn>, bound: Durability) -> Result<crate::replay::Replay> {
        if bound == Durability::Written {
            if let Some(cause) = self.fenced() {
                return Err(Error::Fenced { cause });
            }
            self.write_now();
            if let Some(cause) = self.fenced() {
                return Err(Error::Fenced { cause });
            }
        }
        self.wal.replay_from(from, bound)
    }

    /// Keeps a staged append or operation after the log ran it. `placed` is the position the
    /// log reports (an append's first LSN, an operation's next LSN after it), `promised` the
    /// one the submit side gave, `seq_before` the log's written sequence before it ran.
    fn keep_staged(&mut self, p: Pending, placed: Result<u64>, promised: u64, seq_before: u64) {
        match placed {
            Ok(got) if got == promised => {
                // Mutant (tools/mutants.sh, I3): acknowledge a Durable entry as soon as
                // it is staged, before its batch is even written (the kill -9 test sees it).
                if crate::mutants::on("ack-before-write") && p.durability == Durability::Durable {
                    p.slot.resolve(Ok(Lsn(p.lsn)));
                }
                self.staged.push(p)
            }
            Ok(got) => {
                // Both positions ran the same admission (`log/position.rs`) on the same
                // operations in the same order, so this is a bug (a copy out of step): fenced, so
                // that no ticket names an LSN its entry does not have (I1, I6).
                self.staged.push(p);
                self.fence(format!("internal: the log is at LSN {got} where {promised} was promised"));
            }
            // Refused by the log as it ran: no space for a new segment, or a user batch larger
            // than a whole segment (the submit side checks each payload, not their sum).
            Err(e @ (Error::DiskFull { .. } | Error::TooLarge { .. })) => {
                self.after_disk_full(Some(p), seq_before, &e)
            }
            Err(e) => {
                self.staged.push(p);
                self.fence(e.to_string());
            }
        }
        self.after_log_call();
    }
}
