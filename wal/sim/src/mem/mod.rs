//! An in-memory backend with a durable image beside the live one, for tests.
//!
//! Model (Linux page cache over a device that tears at 512-byte sectors):
//! - a write changes the live bytes at once and marks its sectors dirty;
//! - `SyncData` copies the file's dirty sectors (and its length) into the durable image;
//! - a *failed* `SyncData` forgets the dirty marks without making them durable, yet the live bytes
//!   stay readable, and a later sync "succeeds": the fsyncgate semantics the log must not trust;
//! - names (create, rename, remove) become durable only with `SyncDir`;
//! - a crash image keeps the durable names and, per dirty sector, the new bytes, the old bytes
//!   or garbage ([`SectorFate`]). Nothing is ever synced by close.
//!
//! Operations run when submitted, unless [`Faults::defer`] holds writes and syncs back until a
//! reap that waits, or a [`Completions::wait`](wal::storage::Completions::wait) (then, with
//! [`Faults::reorder`], they run and complete in the reverse order: a write submitted after a
//! sync lands before it), or a sync thread
//! ([`MemStorage::set_sync_thread`]) runs the syncs. It also checks the discipline the log must
//! keep with syncs in flight: it counts syncs submitted while a write to the same file was
//! still unreaped, and a second sync submitted while one was in flight on the same file.
//!
//! With [`Faults::seed`] it is the simulated file system of the fault sweep: every
//! choice it makes comes from that seed, so a run replays exactly. Held-back operations then run
//! as a seeded random *part* of them in a seeded random order at each waiting reap (a sync may
//! run before a write submitted ahead of it, and then does not cover it: the io_uring hazard of a
//! sync issued before its writes completed), completions are delivered shuffled, and short writes
//! complete a seeded number of bytes. [`Faults::fail_calls`] fails a chosen call of a kind
//! (create, rename, remove, directory sync, zero-fill, write, read), and
//! [`Faults::observe_every_op`] hands the observer a crash point after every write, zero-fill and
//! directory operation as well as before every sync.

//!
//! One part per file: this one holds [`MemStorage`] itself, its shared state and the operations
//! as they take effect (writes, syncs, zero-fills, held-back and held syncs, the observer);
//! `image.rs` the state and the crash images, `faults.rs` the faults, `backend.rs` the
//! storage seam methods, `rng.rs` the seeded generator behind every choice (also the one the
//! workspace's tests, fixtures and workloads draw from).

mod backend;
mod faults;
mod image;

pub use faults::{Call, FailCall, Faults};
pub use image::{Boundary, CrashPoint, MemState, SectorFate};

use image::Node;
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use wal::storage::{Completion, FileId, Op, Reader, Ready, Submission, SyncThread};

const SECTOR: u64 = wal::format::SECTOR as u64;

/// A sync held by [`MemStorage::hold_next_sync`]; dropping it releases the sync.
#[derive(Debug)]
pub struct HeldSync(MemStorage);

impl Drop for HeldSync {
    fn drop(&mut self) {
        self.0.release_held_sync();
    }
}

type SyncObserver = Box<dyn FnMut(CrashPoint) + Send>;

/// Holds one sync on the sync thread before it takes effect, with nothing locked, so the
/// submitter can go on writing meanwhile (see [`MemStorage::hold_next_sync`]).
#[derive(Debug, Default)]
struct Gate {
    st: Mutex<GateState>,
    cv: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    armed: bool,
    holding: bool,
    released: bool,
}

impl Gate {
    fn pass(&self) {
        let mut g = lock(&self.st);
        if !g.armed {
            return;
        }
        g.armed = false;
        g.holding = true;
        self.cv.notify_all();
        while !g.released {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.holding = false;
        g.released = false;
    }
}

/// In-memory storage with crash images and fault injection. Cloning shares the same files.
#[derive(Clone)]
pub struct MemStorage {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<MemState>,
    handles: Mutex<HashMap<FileId, u64>>,
    next_handle: Mutex<FileId>,
    ready: Arc<Ready>,
    /// Held back by `Faults::defer`.
    deferred: Mutex<Vec<Submission>>,
    /// Writes and syncs submitted and not reaped yet: (token, is a sync, node).
    unreaped: Mutex<Vec<(u64, bool, u64)>>,
    syncer: Mutex<Option<SyncThread>>,
    gate: Arc<Gate>,
    faults: Mutex<Faults>,
    observer: Mutex<Option<SyncObserver>>,
    sync_ops: Mutex<u64>,
    locks: Mutex<(bool, u32)>,
}

impl std::fmt::Debug for MemStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemStorage")
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct MemLock {
    inner: Arc<Inner>,
    exclusive: bool,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut l = lock(&self.inner.locks);
        if self.exclusive {
            l.0 = false;
        } else {
            l.1 = l.1.saturating_sub(1);
        }
    }
}

impl Default for MemStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStorage {
    pub fn new() -> Self {
        Self::from_state(MemState { next_node: 1, ..MemState::default() })
    }

    /// A storage holding exactly these files, all durable (tests that hand-craft or damage logs).
    pub fn from_files(files: Vec<(String, Vec<u8>)>) -> Self {
        let mut st = MemState { next_node: 1, ..MemState::default() };
        for (name, bytes) in files {
            let id = st.next_node;
            st.next_node += 1;
            st.nodes.insert(id, Node { live: bytes.clone(), durable: bytes, dirty: BTreeSet::new() });
            st.live_names.insert(name.clone(), id);
            st.durable_names.insert(name, id);
        }
        Self::from_state(st)
    }

    fn from_state(state: MemState) -> Self {
        MemStorage {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                handles: Mutex::new(HashMap::new()),
                next_handle: Mutex::new(1),
                ready: Arc::default(),
                deferred: Mutex::new(Vec::new()),
                unreaped: Mutex::new(Vec::new()),
                syncer: Mutex::new(None),
                gate: Arc::default(),
                faults: Mutex::new(Faults::default()),
                observer: Mutex::new(None),
                sync_ops: Mutex::new(0),
                locks: Mutex::new((false, 0)),
            }),
        }
    }

    /// A copy of the whole state (live and durable).
    pub fn state(&self) -> MemState {
        lock(&self.inner.state).clone()
    }

    /// Edits the state in place (fault injection by tests).
    pub fn with_state<R>(&self, f: impl FnOnce(&mut MemState) -> R) -> R {
        f(&mut lock(&self.inner.state))
    }

    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        lock(&self.inner.faults)
    }

    /// Runs every `SyncData` on a sync thread from now on (or again on the submitter), so a
    /// sync stays in flight while the submitter goes on, as with io_uring. The sync observer
    /// then runs on that thread.
    pub fn set_sync_thread(&self, on: bool) -> io::Result<()> {
        let t = if on { Some(SyncThread::start("mem-sync")?) } else { None };
        *lock(&self.inner.syncer) = t;
        Ok(())
    }

    /// Holds the next sync the sync thread runs (see [`MemStorage::set_sync_thread`]) before it
    /// takes effect, until [`MemStorage::release_held_sync`] or until the returned guard is
    /// dropped (so a failing assertion cannot leave a writer or a close waiting for it).
    /// Nothing is locked meanwhile.
    #[must_use = "dropping the guard releases the held sync at once"]
    pub fn hold_next_sync(&self) -> HeldSync {
        let mut g = lock(&self.inner.gate.st);
        g.armed = true;
        g.released = false;
        HeldSync(self.clone())
    }

    /// Waits until a sync is being held; false after `timeout`.
    pub fn wait_sync_held(&self, timeout: std::time::Duration) -> bool {
        let g = lock(&self.inner.gate.st);
        let (g, _) = self
            .inner
            .gate
            .cv
            .wait_timeout_while(g, timeout, |g| !g.holding)
            .unwrap_or_else(|e| e.into_inner());
        g.holding
    }

    /// Lets the held sync go on.
    pub fn release_held_sync(&self) {
        lock(&self.inner.gate.st).released = true;
        self.inner.gate.cv.notify_all();
    }

    /// Records a submitted write or sync, checking the discipline of syncs in flight.
    fn track(&self, token: u64, op: &Op) {
        let (file, sync) = match op {
            Op::Write { file, .. } => (*file, false),
            Op::SyncData { file } => (*file, true),
            _ => return,
        };
        let Ok(node) = self.node(file) else { return };
        let mut u = lock(&self.inner.unreaped);
        let (writes, syncs) =
            u.iter().filter(|e| e.2 == node).fold(
                (0, 0),
                |(w, s), e| {
                    if e.1 {
                        (w, s + 1)
                    } else {
                        (w + 1, s)
                    }
                },
            );
        {
            let mut f = self.faults();
            if sync && writes > 0 {
                f.syncs_over_unreaped_writes += 1;
            }
            if sync && syncs > 0 {
                f.overlapping_syncs += 1;
            }
            if !sync && syncs > 0 {
                f.writes_during_sync += 1;
            }
        }
        u.push((token, sync, node));
    }

    fn untrack(&self, done: &[Completion]) {
        let mut u = lock(&self.inner.unreaped);
        for c in done {
            if let Some(i) = u.iter().position(|e| e.0 == c.token) {
                u.remove(i);
            }
        }
    }

    /// Runs one operation now.
    fn execute(&self, op: Op) -> (io::Result<u64>, Option<Vec<u8>>) {
        match op {
            Op::Write { file, offset, data } => (self.run_write(file, offset, &data), Some(data)),
            Op::SyncData { file } => (self.run_sync_data(file), None),
            Op::SyncDir => (self.run_sync_dir(), None),
            Op::ZeroFill { file, len } => (self.run_zero_fill(file, len), None),
        }
    }

    /// Runs what `Faults::defer` held back: all of it, in reverse with `Faults::reorder`.
    fn run_deferred(&self) {
        let mut subs = std::mem::take(&mut *lock(&self.inner.deferred));
        {
            let mut f = self.faults();
            if f.seed.is_some() && !subs.is_empty() {
                // A seeded part of what is held back runs now, in a seeded order; the rest stays
                // held, in submission order, for a later reap or wait.
                let mut order: Vec<usize> = (0..subs.len()).collect();
                f.shuffle(&mut order);
                let run = 1 + (f.draw().unwrap_or(0) % subs.len() as u64) as usize;
                order.truncate(run);
                // An operation runs out of order when one submitted before it has not run yet.
                let early =
                    order.iter().enumerate().filter(|&(k, &i)| (0..i).any(|j| !order[..k].contains(&j)));
                let early = early.count() as u64;
                f.ran_out_of_order += early;
                f.reordered += u64::from(early > 0);
                let mut slots: Vec<Option<Submission>> = subs.into_iter().map(Some).collect();
                subs = order.iter().filter_map(|&i| slots.get_mut(i).and_then(Option::take)).collect();
                lock(&self.inner.deferred).splice(0..0, slots.into_iter().flatten());
            } else if subs.len() > 1 && f.reorder {
                subs.reverse();
                f.reordered += 1;
            }
        }
        for sub in subs {
            let (result, buf) = self.execute(sub.op);
            self.inner.ready.push(Completion { token: sub.token, result, buf });
        }
    }

    /// Calls `f` with the state just before every sync (data or directory) takes effect. `f` runs
    /// with the storage locked: it must not call back into it.
    pub fn set_sync_observer(&self, f: impl FnMut(CrashPoint) + Send + 'static) {
        *lock(&self.inner.observer) = Some(Box::new(f));
    }

    fn node(&self, file: FileId) -> io::Result<u64> {
        lock(&self.inner.handles)
            .get(&file)
            .copied()
            .ok_or_else(|| io::Error::other(format!("file handle {file} is not open")))
    }

    fn observe_sync(&self, at: Boundary) {
        let idx = {
            let mut n = lock(&self.inner.sync_ops);
            *n += 1;
            *n - 1
        };
        self.observe_at(idx, at);
    }

    /// A crash point just after a non-sync operation took effect (with `observe_every_op`).
    fn observe_op(&self, at: Boundary) {
        if !self.faults().observe_every_op {
            return;
        }
        let idx = *lock(&self.inner.sync_ops);
        self.observe_at(idx, at);
    }

    fn observe_at(&self, idx: u64, at: Boundary) {
        // The state stays locked while the observer runs: whatever else the observer reads (a
        // test's "acknowledged so far") cannot move past the state it was handed, since a sync
        // on another thread needs this lock to make anything durable.
        let st = lock(&self.inner.state);
        let mut obs = lock(&self.inner.observer);
        if let Some(f) = obs.as_mut() {
            f(CrashPoint { sync_index: idx, at, state: st.clone() });
        }
    }

    fn used_bytes(st: &MemState) -> u64 {
        st.nodes.values().map(|n| n.live.len() as u64).sum()
    }

    fn run_write(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<u64> {
        let node = self.node(file)?;
        let mut n = data.len() as u64;
        {
            let mut f = self.faults();
            if let Some(e) = f.call(Call::Write) {
                return Err(e);
            }
            if let Some(max) = f.short_write_max {
                // Seeded: the write ends at a seeded sector boundary within the most allowed,
                // where a real file system's short write ends (at a block it could not
                // allocate, a page it could not copy), so a crash still finds each sector old or
                // new; with no boundary before its end it completes whole.
                let max = match f.draw() {
                    Some(r) => {
                        let first = (offset / SECTOR + 1) * SECTOR;
                        let reach = offset + max.min(n);
                        if first < offset + n && first <= reach {
                            let ends = (reach - first) / SECTOR + 1;
                            first + (r % ends) * SECTOR - offset
                        } else {
                            n
                        }
                    }
                    None => max,
                };
                if n > max {
                    n = max;
                    f.short_writes_done += 1;
                }
            }
        }
        let mut st = lock(&self.inner.state);
        let end = offset + n;
        let cap = self.faults().capacity_bytes;
        let cur_len = st.nodes.get(&node).map_or(0, |x| x.live.len() as u64);
        if let Some(cap) = cap {
            if end > cur_len && Self::used_bytes(&st) + (end - cur_len) > cap {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
        }
        let nd = st.nodes.get_mut(&node).ok_or_else(|| io::Error::other("missing node"))?;
        if (nd.live.len() as u64) < end {
            nd.live.resize(end as usize, 0);
        }
        if let (Some(dst), Some(src)) =
            (nd.live.get_mut(offset as usize..end as usize), data.get(..n as usize))
        {
            dst.copy_from_slice(src);
        }
        if n > 0 {
            for s in offset / SECTOR..=(end - 1) / SECTOR {
                nd.dirty.insert(s);
            }
        }
        drop(st);
        self.observe_op(Boundary::Write);
        Ok(n)
    }

    fn run_sync_data(&self, file: FileId) -> io::Result<u64> {
        let node = self.node(file)?;
        self.observe_sync(Boundary::SyncData);
        let fail = {
            let mut f = self.faults();
            let i = f.syncs_seen;
            f.syncs_seen += 1;
            f.fail_sync_from.is_some_and(|from| i >= from) && f.fail_sync_until.is_none_or(|until| i < until)
        };
        let mut st = lock(&self.inner.state);
        let nd = st.nodes.get_mut(&node).ok_or_else(|| io::Error::other("missing node"))?;
        if fail {
            // Linux: the dirty pages are marked clean (their error reported once) but never
            // reached the device; the page cache still shows them.
            nd.dirty.clear();
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        let len = nd.live.len();
        nd.durable.resize(len, 0);
        for &s in &nd.dirty {
            let a = (s * SECTOR) as usize;
            let b = (a + SECTOR as usize).min(len);
            if let (Some(dst), Some(src)) = (nd.durable.get_mut(a..b), nd.live.get(a..b)) {
                dst.copy_from_slice(src);
            }
        }
        nd.dirty.clear();
        Ok(0)
    }

    fn run_sync_dir(&self) -> io::Result<u64> {
        self.observe_sync(Boundary::SyncDir);
        if let Some(e) = self.faults().call(Call::SyncDir) {
            // Like a failed fdatasync: nothing is made durable, and nothing says what is.
            return Err(e);
        }
        self.sync_names();
        Ok(0)
    }

    fn sync_names(&self) {
        let mut st = lock(&self.inner.state);
        st.durable_names = st.live_names.clone();
        st.names_dirty = false;
    }

    fn run_zero_fill(&self, file: FileId, len: u64) -> io::Result<u64> {
        if let Some(e) = self.faults().call(Call::ZeroFill) {
            return Err(e);
        }
        let cur = self.len(file)?;
        if len > cur {
            // Written in full here (a zero-fill is not a caller's write: it is neither split
            // nor failed by the write faults, only by capacity), observed once at its end.
            let node = self.node(file)?;
            let mut st = lock(&self.inner.state);
            let cap = self.faults().capacity_bytes;
            if cap.is_some_and(|cap| Self::used_bytes(&st) + (len - cur) > cap) {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let nd = st.nodes.get_mut(&node).ok_or_else(|| io::Error::other("missing node"))?;
            nd.live.resize(len as usize, 0);
            for s in cur / SECTOR..=(len - 1) / SECTOR {
                nd.dirty.insert(s);
            }
            drop(st);
            self.observe_op(Boundary::ZeroFill);
        }
        Ok(0)
    }
}
