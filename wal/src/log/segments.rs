//! A segment's life on the writer's side: activated (a prepared spare, a recycled file or a new
//! one, within the size budget, zeros written or reserved), the next one prepared ahead on a
//! helper thread, and sealed: its data synced, then its footer written and synced.

use super::options::RESERVE_BYTES_PER_SYNC;
use super::{Active, Wal};
use crate::batch;
use crate::error::{Error, Result};
use crate::format::*;
use crate::recovery::SegmentInfo;
use crate::scan::{self, FooterInfo};
use crate::storage::{FileId, Op};
use zerocopy::little_endian::{U32, U64};
use zerocopy::IntoBytes;

/// How many bytes of a segment's pages one `drop_cached` call drops: the helper thread drops a
/// segment in these pieces, yielding between them, so that it does not hold the kernel's
/// page-cache locks for a whole segment while the writer adds pages of its own.
const DROP_CHUNK: u64 = 4 << 20;

impl Wal {
    /// Makes the next segment the active one: a zero-filled file made durable in the directory,
    /// and a staged first batch holding the segment header and the log's state.
    pub(super) fn activate(&mut self) -> Result<()> {
        debug_assert!(self.files.active().is_none() && !self.staged.open);
        let seq = self.files.last().map_or(self.meta.floor_segment_seq.get(), |s| s.seq + 1);
        let seg_len = self.opts.segment_len_bytes;
        let name = segment_file_name(seq);
        self.choose_fill();
        self.finish_preparing(Some(seq));
        let spare = self.files.spare(seq);
        let (file, recycled) = if let Some(spare) = spare {
            let f = self.storage.open(&name).map_err(|e| self.fail_io("opening a spare segment", e))?;
            let len = self.storage.len(f).map_err(|e| self.fail_io("sizing a spare segment", e))?;
            if len != u64::from(seg_len) {
                self.storage.close(f);
                self.storage.remove(&name).map_err(|e| self.fail_io("replacing a spare segment", e))?;
                (self.create_segment(seq, seg_len)?, false)
            } else {
                (f, spare.recycled)
            }
        } else if let Some(f) = self.recycle_into(seq, seg_len)? {
            (f, true)
        } else {
            self.check_budget("a new segment")?;
            (self.create_segment(seq, seg_len)?, false)
        };
        let (next_seq, last_crc) = (self.files.next_seq(), self.files.last_crc());
        let mut header = SegmentHeader::new(self.meta.log_id, seg_len, seq, next_seq, last_crc);
        if recycled {
            header = header.recycled();
        }
        self.staged.buf.clear();
        self.staged.buf.extend_from_slice(header.as_bytes());
        self.files.activate(Active {
            seq,
            header,
            file,
            write_off: 0,
            index: Vec::new(),
            index_stride: 1,
            batches: 0,
        });
        self.prepare_next(seq + 1);
        self.open_frame();
        let mut state = Vec::new();
        scan::encode_state(self.position.logical(), &mut state);
        let lsn = self.position.next_lsn();
        self.stage(Kind::State, 0, lsn, &state);
        Ok(())
    }

    /// The active segment took no record after all: its file is a spare again.
    pub(super) fn active_back_to_spares(&mut self) {
        if let Some(file) = self.files.active_back_to_spares() {
            self.storage.close(file);
        }
    }

    /// Refuses one more segment file beyond the size budget.
    fn check_budget(&self, what: &str) -> Result<()> {
        let Some(budget) = self.opts.max_log_bytes else { return Ok(()) };
        let need = (self.files.file_count() + 1) * u64::from(self.opts.segment_len_bytes);
        if need > budget {
            return Err(Error::DiskFull {
                context: format!(
                    "creating {what}: the log's size budget of {budget} bytes would be exceeded ({need})"
                ),
            });
        }
        Ok(())
    }

    /// Decides, at an activation, how the next segment files get their zeros
    /// ([`Files::choose_fill`](super::Files::choose_fill)).
    fn choose_fill(&mut self) {
        let (fill, len) = (self.opts.segment_fill, self.opts.segment_len_bytes);
        self.files.choose_fill(fill, RESERVE_BYTES_PER_SYNC, len);
    }

    /// Makes the file of segment `seq` at an activation. A file already there that the log does
    /// not know as a spare is a leftover of a failed preparation or recycling whose cleanup could
    /// not remove it (`storage::prepare`): it is removed and the segment prepared again, once
    /// (a failed removal is the error reported). That cannot remove a record: the log writes
    /// records only into the active segment, and here none is active, `seq` is past every
    /// segment holding records and no background preparation is running (`finish_preparing`
    /// waited for it); a known spare is taken, not made. An open treats such a file alike: a
    /// name after the last segment holding records is a spare (FORMAT.md section 1). Decided
    /// here, by the name, rather than by remembering failures: a recycling's leftover on the
    /// writer's thread, or one found some rotations later, is handled the same way.
    fn create_segment(&mut self, seq: u64, len: u32) -> Result<FileId> {
        let (st, name, reserve) =
            (self.storage.clone(), segment_file_name(seq), self.files.reserve_segments());
        let prepare = || crate::storage::prepare::prepare_file(&*st, &name, len.into(), reserve);
        let mut r = prepare();
        let past_records = self.files.active().is_none()
            && !self.files.preparing()
            && self.files.last().is_none_or(|s| s.seq < seq);
        debug_assert!(past_records, "segment {seq} made over records");
        if past_records && r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::AlreadyExists) {
            st.remove(&name).map_err(|e| self.fail_io(format!("removing a leftover {name}"), e))?;
            r = prepare();
        }
        r.map_err(|e| self.fail_io(format!("preparing {name}"), e))?;
        st.open(&name).map_err(|e| self.fail_io(format!("opening {name}"), e))
    }

    /// Prepares segment `seq` (zero-filled, synced, durable in the directory) on a helper thread,
    /// so the rotation that needs it does not wait for it.
    pub(crate) fn prepare_next(&mut self, seq: u64) {
        if !self.opts.prepare_in_background || !self.files.may_prepare(seq) {
            return;
        }
        // A set-aside file, or a new one within the budget.
        let source = self.files.take_recyclable();
        if source.is_none() && self.check_budget("a spare segment").is_err() {
            return;
        }
        let (st, name, len) = (self.storage.clone(), segment_file_name(seq), self.opts.segment_len_bytes);
        let reserve = self.files.reserve_segments();
        let owner = crate::stale::Owner { log_id: self.meta.log_id, segment_seq: seq };
        let spawned = std::thread::Builder::new().name("wal-prepare".into()).spawn(move || {
            // Ok(true): made of a recycled file.
            if source.is_some_and(|old| super::recycle::recycle(&*st, old, &name, len, owner)) {
                return Ok(true);
            }
            crate::storage::prepare::prepare_file(&*st, &name, len.into(), reserve).map(|()| false)
        });
        // If no thread can be started, the rotation prepares the segment itself.
        if let Ok(h) = spawned {
            self.files.preparing_started(seq, h);
        }
    }

    /// Waits for a background preparation; a prepared `seq` becomes a spare. A failed one is
    /// forgotten: the rotation prepares the segment itself and reports its own error. Should the
    /// failed one have left its file (its cleanup could not remove it), the rotation finds the
    /// name taken, removes that file and prepares the segment again (`create_segment`): a fault
    /// that is gone by then fences nothing.
    pub(super) fn finish_preparing(&mut self, seq: Option<u64>) {
        self.files.finish_preparing(seq);
    }

    /// Waits for every helper thread (a preparation, forgotten; a drop of cached pages): at a
    /// close, so that no thread of this handle touches the directory after it.
    pub(super) fn finish_helpers(&mut self) {
        self.files.finish_preparing(None);
        self.files.finish_uncaching();
    }

    /// Seals the active segment: its data durable, then its footer written and synced. A later
    /// segment only takes records after this, which is what lets a valid later segment attest
    /// every byte of this one.
    pub(super) fn seal_active(&mut self) -> Result<()> {
        self.flush()?;
        self.sync_written()?;
        let Some(a) = self.files.active() else {
            return Ok(());
        };
        let (file, seq, index, header_len) = (a.file, a.seq, a.index.clone(), a.header.segment_len.get());
        let Some(info) = self.files.last().filter(|s| s.seq == seq) else {
            // Nothing was ever written into it: leave it as a spare.
            self.active_back_to_spares();
            return Ok(());
        };
        let (next_seq, last_crc) = (self.files.next_seq(), self.files.last_crc());
        let c = &info.counts;
        let fp = FooterPayload {
            durable_seq: U64::new(next_seq - 1),
            data_end: U64::new(info.data_end),
            record_count: U32::new(c.records),
            entry_count: U32::new(c.entries),
            min_lsn: U64::new(c.min_lsn),
            max_lsn: U64::new(c.max_lsn),
            min_keep_lt: U64::new(c.min_keep_lt),
            cut_count: U32::new(c.cuts),
            index_count: U32::new(index.len() as u32),
        };
        let mut payload = fp.as_bytes().to_vec();
        for p in &index {
            payload.extend_from_slice(p.as_bytes());
        }
        let h =
            batch::header(Kind::Footer, 0, payload.len(), self.position.next_lsn(), self.position.epoch());
        let mut rec = Vec::with_capacity(record_len(payload.len()));
        let footer_crc = batch::encode_record(h, next_seq, last_crc, &payload, &mut rec);
        let at = footer_offset(header_len) as u64;
        let r =
            self.run(Op::Write { file, offset: at, data: rec }).and_then(|_| self.run(Op::SyncData { file }));
        if let Err(e) = r {
            let err = self.fail_io("writing a footer", e);
            // A footer that may be half on disk cannot be withdrawn like a batch.
            self.fence(err.to_string());
            return Err(err);
        }
        let footer = FooterInfo { payload: fp, index, seq: next_seq, crc: footer_crc };
        let file = self.files.sealed(footer);
        self.marks.sealed(next_seq, self.written_end());
        if let Some(file) = file {
            self.storage.close(file);
        }
        self.drop_beyond_cache_budget();
        Ok(())
    }

    /// Tells the OS to drop the cached pages of the sealed segments this seal pushed beyond
    /// [`Options::cached_log_bytes`](super::Options::cached_log_bytes), newest first: those
    /// whose newer sealed segments, this one included, add up to more than the budget, but
    /// did not before this one was sealed (the older ones went at earlier seals). Every byte
    /// of them is durable (each was synced before its footer). A hint, given on a helper
    /// thread: freeing a segment's pages takes milliseconds that the writer would otherwise
    /// wait at the seal (the p999 of durable appends). A failure to open or advise is
    /// ignored, as the pages then simply stay. A purge waits for the helpers before it sets a
    /// file aside for recycling (`Files::finish_uncaching`), so that no advice lands on a file
    /// that has become a spare or the active segment (its pages are clean once synced, and the
    /// advice would drop them).
    fn drop_beyond_cache_budget(&mut self) {
        let budget = self.opts.cached_log_bytes;
        let len = |s: &SegmentInfo| u64::from(s.header.segment_len.get());
        let mut sealed = self.files.segments().iter().rev().filter(|s| s.sealed()).peekable();
        let Some(newest_len) = sealed.peek().map(|s| len(s)) else { return };
        // The segment's length and every newer sealed one's.
        let mut newer = 0u64;
        let mut names = Vec::new();
        for s in sealed {
            newer = newer.saturating_add(len(s));
            if newer <= budget {
                continue;
            }
            if newer - newest_len > budget {
                // Beyond the budget before this seal already: dropped then.
                break;
            }
            names.push(segment_file_name(s.seq));
        }
        if names.is_empty() {
            return;
        }
        let st = self.storage.clone();
        let spawned = std::thread::Builder::new().name("wal-uncache".into()).spawn(move || {
            for name in &names {
                if let Ok(f) = st.open(name) {
                    let len = st.len(f).unwrap_or(0);
                    let mut at = 0;
                    while at < len {
                        let n = DROP_CHUNK.min(len - at);
                        let _ = st.drop_cached(f, at, n);
                        at += n;
                        std::thread::yield_now();
                    }
                    st.close(f);
                }
            }
        });
        // No thread to be had: the pages stay cached, a cost in memory only (the advice is a
        // hint), and the next seals do not list these segments again.
        if let Ok(h) = spawned {
            self.files.uncaching_started(h);
        }
    }

    /// After an open: a last segment that is not sealed becomes the active one again (unless
    /// the log is read-only), and the segment after it is prepared, or, when the open took
    /// records on trust (`checked` false), deferred until they are checked: preparing creates
    /// a file (`open_check.rs`).
    pub(crate) fn resume_after_open(&mut self, checked: bool) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        let Some(last) = self.files.last().filter(|s| !s.sealed()) else {
            return Ok(());
        };
        let (seq, header, data_end) = (last.seq, last.header, last.data_end);
        let name = segment_file_name(seq);
        let file = self.storage.open(&name).map_err(|e| Error::io(format!("opening {name}"), e))?;
        self.files.resume(Active {
            seq,
            header,
            file,
            write_off: data_end.next_multiple_of(SECTOR as u64),
            index: Vec::new(),
            index_stride: 1,
            batches: 0,
        });
        if checked {
            self.prepare_next(seq + 1);
        } else {
            self.files.defer_prepare(seq + 1);
        }
        Ok(())
    }

    /// Seals the active segment now (the next append starts a new one).
    pub fn rotate(&mut self) -> Result<()> {
        self.check_writable(None)?;
        self.seal_active()
    }
}
