//! [`MemStorage`] as a storage backend, all three sides of the seam: names, opening, reads and
//! maps ([`Reader`]); creating, removing, renaming, locks and the blocking writes and syncs that
//! preparing and recycling files make ([`Writer`]); submissions, their completions and waiting
//! ([`Completions`]).

use super::{lock, Boundary, Call, MemLock, MemStorage, Node};
use std::io;
use std::sync::Arc;
use wal::storage::{
    Bell, Completion, Completions, FileId, LockGuard, Mapping, Op, Reader, Submission, Writer,
};

impl Reader for MemStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(lock(&self.inner.state).live_names.keys().cloned().collect())
    }

    fn open(&self, name: &str) -> io::Result<FileId> {
        self.open_node(name, false)
    }

    fn close(&self, file: FileId) {
        lock(&self.inner.handles).remove(&file);
    }

    fn len(&self, file: FileId) -> io::Result<u64> {
        let node = self.node(file)?;
        Ok(lock(&self.inner.state).nodes.get(&node).map_or(0, |n| n.live.len() as u64))
    }

    /// As a file system that reports every block it holds no non-zero byte in as unwritten
    /// (more than a real one does): the end of the last 512-byte sector with a non-zero byte.
    /// So the simulated crashes exercise the readers that skip what is past it.
    fn written_end(&self, file: FileId) -> io::Result<u64> {
        let node = self.node(file)?;
        let st = lock(&self.inner.state);
        let live = st.nodes.get(&node).map(|n| n.live.as_slice()).unwrap_or_default();
        let end = live.iter().rposition(|&b| b != 0).map_or(0, |i| (i + 1).next_multiple_of(512));
        Ok(end.min(live.len()) as u64)
    }

    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = self.faults().call(Call::Read) {
            return Err(e);
        }
        let node = self.node(file)?;
        let st = lock(&self.inner.state);
        let live = st.nodes.get(&node).map(|n| n.live.as_slice()).unwrap_or_default();
        let src = live.get(offset as usize..).unwrap_or_default();
        let n = src.len().min(buf.len());
        if let (Some(d), Some(s)) = (buf.get_mut(..n), src.get(..n)) {
            d.copy_from_slice(s);
        }
        Ok(n)
    }

    fn map(&self, file: FileId) -> io::Result<Mapping> {
        if let Some(e) = self.faults().call(Call::Read) {
            return Err(e);
        }
        let node = self.node(file)?;
        let st = lock(&self.inner.state);
        let live = st.nodes.get(&node).map(|n| n.live.as_slice()).unwrap_or_default();
        Ok(Mapping::Bytes(Arc::from(live)))
    }

    fn lock_shared(&self) -> io::Result<LockGuard> {
        self.take_lock(false)
    }
}

impl Writer for MemStorage {
    fn create(&self, name: &str) -> io::Result<FileId> {
        if let Some(e) = self.faults().call(Call::Create) {
            return Err(e);
        }
        self.open_node(name, true)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        if let Some(e) = self.faults().call(Call::Remove) {
            return Err(e);
        }
        let mut st = lock(&self.inner.state);
        st.live_names.remove(name).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.names_dirty = true;
        drop(st);
        self.observe_op(Boundary::Remove);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        if let Some(e) = self.faults().call(Call::Rename) {
            return Err(e);
        }
        let mut st = lock(&self.inner.state);
        let n = st.live_names.remove(from).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.live_names.insert(to.to_string(), n);
        st.names_dirty = true;
        drop(st);
        self.observe_op(Boundary::Rename);
        Ok(())
    }

    fn lock_exclusive(&self) -> io::Result<LockGuard> {
        self.take_lock(true)
    }

    fn write_at(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<usize> {
        self.run_write(file, offset, data).map(|n| n as usize)
    }

    fn sync_data(&self, file: FileId) -> io::Result<()> {
        self.run_sync_data(file).map(|_| ())
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.run_sync_dir().map(|_| ())
    }

    fn zero_fill(&self, file: FileId, len: u64) -> io::Result<()> {
        self.run_zero_fill(file, len).map(|_| ())
    }
}

impl Completions for MemStorage {
    fn submit(&self, sub: Submission) -> io::Result<()> {
        self.track(sub.token, &sub.op);
        let defer = self.faults().defer;
        if defer && matches!(sub.op, Op::Write { .. } | Op::SyncData { .. }) {
            lock(&self.inner.deferred).push(sub);
            return Ok(());
        }
        if let Op::SyncData { file } = sub.op {
            let syncer = lock(&self.inner.syncer);
            if let Some(t) = syncer.as_ref() {
                let (me, ready, token) = (self.clone(), self.inner.ready.clone(), sub.token);
                ready.start();
                let job = Box::new(move || {
                    me.inner.gate.pass();
                    let result = me.run_sync_data(file);
                    ready.finish(Completion { token, result, buf: None });
                });
                if t.run(job).is_err() {
                    let gone = io::Error::other("the sync thread has stopped");
                    self.inner.ready.finish(Completion { token: sub.token, result: Err(gone), buf: None });
                }
                return Ok(());
            }
        }
        let (result, buf) = self.execute(sub.op);
        self.inner.ready.push(Completion { token: sub.token, result, buf });
        Ok(())
    }

    fn reap(&self, out: &mut Vec<Completion>, wait: bool) -> io::Result<()> {
        if wait {
            self.run_deferred();
        }
        let start = out.len();
        self.inner.ready.reap(out, wait)?;
        let mut f = self.faults();
        if f.seed.is_some() && out.len() - start > 1 {
            f.shuffle(out.get_mut(start..).unwrap_or_default());
            f.reordered += 1;
        } else if f.reorder && !f.defer && out.len() - start > 1 {
            out.get_mut(start..).unwrap_or_default().reverse();
            f.reordered += 1;
        }
        drop(f);
        self.untrack(out.get(start..).unwrap_or_default());
        Ok(())
    }

    fn wait(&self, bell: &Arc<Bell>, timeout: Option<std::time::Duration>) -> io::Result<()> {
        if !lock(&self.inner.deferred).is_empty() {
            // What was held back completes now.
            self.run_deferred();
        }
        if !self.inner.ready.is_empty() {
            return Ok(());
        }
        self.inner.ready.wait(bell, timeout);
        Ok(())
    }
}

impl MemStorage {
    /// Opens `name`, creating it (it must not exist) with `create_new`, and gives it a handle.
    fn open_node(&self, name: &str, create_new: bool) -> io::Result<FileId> {
        let mut st = lock(&self.inner.state);
        let node = match (st.live_names.get(name).copied(), create_new) {
            (Some(_), true) => return Err(io::Error::from(io::ErrorKind::AlreadyExists)),
            (Some(n), false) => n,
            (None, false) => return Err(io::Error::from(io::ErrorKind::NotFound)),
            (None, true) => {
                let n = st.next_node;
                st.next_node += 1;
                st.nodes.insert(n, Node::default());
                st.live_names.insert(name.to_string(), n);
                st.names_dirty = true;
                n
            }
        };
        drop(st);
        if create_new {
            self.observe_op(Boundary::Create);
        }
        let mut h = lock(&self.inner.next_handle);
        let id = *h;
        *h += 1;
        lock(&self.inner.handles).insert(id, node);
        Ok(id)
    }

    fn take_lock(&self, exclusive: bool) -> io::Result<LockGuard> {
        let mut l = lock(&self.inner.locks);
        let ok = if exclusive { !l.0 && l.1 == 0 } else { !l.0 };
        if !ok {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "log is locked"));
        }
        if exclusive {
            l.0 = true;
        } else {
            l.1 += 1;
        }
        Ok(LockGuard::new(Box::new(MemLock { inner: self.inner.clone(), exclusive })))
    }
}
