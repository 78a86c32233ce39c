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
//! reap that waits, or a [`Storage::wait`] (then, with [`Faults::reorder`], they run and complete
//! in the reverse order: a write submitted after a sync lands before it), or a sync thread
//! ([`MemStorage::set_sync_thread`]) runs the syncs. It also checks the discipline the log must
//! keep with syncs in flight: it counts syncs submitted while a write to the same file was
//! still unreaped, and a second sync submitted while one was in flight on the same file.
//!
//! With [`Faults::seed`] it is the simulated file system of the fault sweep (issue 7): every
//! choice it makes comes from that seed, so a run replays exactly. Held-back operations then run
//! as a seeded random *part* of them in a seeded random order at each waiting reap (a sync may
//! run before a write submitted ahead of it, and then does not cover it: the io_uring hazard of a
//! sync issued before its writes completed), completions are delivered shuffled, and short writes
//! complete a seeded number of bytes. [`Faults::fail_calls`] fails a chosen call of a kind
//! (create, rename, remove, directory sync, zero-fill, write, read), and
//! [`Faults::observe_every_op`] hands the observer a crash point after every write, zero-fill and
//! directory operation as well as before every sync.

use super::{Bell, Completion, FileId, LockGuard, Mapping, Op, Ready, Storage, Submission, SyncThread};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

const SECTOR: u64 = crate::format::SECTOR as u64;

#[derive(Clone, Debug, Default)]
struct Node {
    live: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<u64>,
}

/// The whole state of a [`MemStorage`]: enough to build every crash image from it.
#[derive(Clone, Debug, Default)]
pub struct MemState {
    nodes: HashMap<u64, Node>,
    live_names: BTreeMap<String, u64>,
    durable_names: BTreeMap<String, u64>,
    names_dirty: bool,
    next_node: u64,
}

/// What a dirty sector holds after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectorFate {
    New,
    Old,
    Garbage(u64),
}

/// A sync held by [`MemStorage::hold_next_sync`]; dropping it releases the sync.
#[derive(Debug)]
pub struct HeldSync(MemStorage);

impl Drop for HeldSync {
    fn drop(&mut self) {
        self.0.release_held_sync();
    }
}

/// Where a crash happens, as seen by the sync observer.
#[derive(Clone, Debug)]
pub struct CrashPoint {
    /// Count of sync operations (data and directory) submitted before this one.
    pub sync_index: u64,
    /// The operation at whose boundary the state was taken.
    pub at: Boundary,
    pub state: MemState,
}

/// The operation next to a crash point: before a sync takes effect, or just after any other
/// operation took effect (those only with [`Faults::observe_every_op`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Boundary {
    SyncData,
    SyncDir,
    Write,
    ZeroFill,
    /// A set-aside file overwritten with zeros, before its rename ([`Storage::recycle_file`]).
    Recycle,
    Create,
    Rename,
    Remove,
}

/// A kind of call [`Faults::fail_calls`] can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// `open` with `create_new` (also the one inside `prepare_file`).
    Create,
    Rename,
    Remove,
    SyncDir,
    ZeroFill,
    Write,
    /// `read_at` and `map`.
    Read,
}

impl Call {
    pub const ALL: [Call; 7] =
        [Call::Create, Call::Rename, Call::Remove, Call::SyncDir, Call::ZeroFill, Call::Write, Call::Read];

    fn index(self) -> usize {
        self as usize
    }
}

/// Fails the `nth` (0-based) call of a kind with `errno` (5 EIO, 28 ENOSPC, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailCall {
    pub call: Call,
    pub nth: u64,
    pub errno: i32,
}

impl MemState {
    /// Dirty sectors across all files reachable after a crash, in a fixed order.
    pub fn dirty_sectors(&self) -> Vec<(u64, u64)> {
        let mut nodes: Vec<u64> = self.durable_names.values().copied().collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mut out = Vec::new();
        for n in nodes {
            if let Some(node) = self.nodes.get(&n) {
                out.extend(node.dirty.iter().map(|&s| (n, s)));
            }
        }
        out
    }

    /// Dirty sectors whose live bytes differ from what a crash would otherwise leave (durable
    /// bytes, zero past the durable length): the only sectors whose fate changes a crash image.
    pub fn effective_dirty_sectors(&self) -> Vec<(u64, u64)> {
        self.dirty_sectors()
            .into_iter()
            .filter(|&(n, s)| {
                let Some(node) = self.nodes.get(&n) else { return false };
                let a = (s * SECTOR) as usize;
                let b = (a + SECTOR as usize).min(node.live.len());
                (a..b).any(|i| node.live.get(i) != Some(node.durable.get(i).unwrap_or(&0)))
            })
            .collect()
    }

    /// The storage a restart would find: durable names, and each dirty sector as `fate` says.
    pub fn crash(&self, mut fate: impl FnMut(u64, u64) -> SectorFate) -> MemStorage {
        let mut nodes = HashMap::new();
        for &id in self.durable_names.values() {
            let Some(node) = self.nodes.get(&id) else {
                continue;
            };
            let mut bytes = node.durable.clone();
            for &s in &node.dirty {
                let start = s * SECTOR;
                let end = (start + SECTOR).min(node.live.len() as u64);
                if start >= end {
                    continue;
                }
                let (start, end) = (start as usize, end as usize);
                match fate(id, s) {
                    SectorFate::Old => {}
                    SectorFate::New => {
                        if bytes.len() < end {
                            bytes.resize(end, 0);
                        }
                        if let (Some(dst), Some(src)) = (bytes.get_mut(start..end), node.live.get(start..end))
                        {
                            dst.copy_from_slice(src);
                        }
                    }
                    SectorFate::Garbage(seed) => {
                        if bytes.len() < end {
                            bytes.resize(end, 0);
                        }
                        let mut x = seed | 1;
                        for b in bytes.get_mut(start..end).unwrap_or_default() {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            *b = x as u8;
                        }
                    }
                }
            }
            nodes.insert(id, Node { live: bytes.clone(), durable: bytes, dirty: BTreeSet::new() });
        }
        let state = MemState {
            nodes,
            live_names: self.durable_names.clone(),
            durable_names: self.durable_names.clone(),
            names_dirty: false,
            next_node: self.next_node,
        };
        MemStorage::from_state(state)
    }

    /// Bytes of a file as live now (for tests that corrupt an image directly).
    pub fn file_bytes(&self, name: &str) -> Option<&[u8]> {
        self.nodes.get(self.live_names.get(name)?).map(|n| n.live.as_slice())
    }

    /// Replaces a file's live and durable bytes (tests that inject corruption).
    pub fn set_file_bytes(&mut self, name: &str, bytes: Vec<u8>) -> bool {
        let Some(id) = self.live_names.get(name) else {
            return false;
        };
        let Some(node) = self.nodes.get_mut(id) else {
            return false;
        };
        node.durable = bytes.clone();
        node.live = bytes;
        node.dirty.clear();
        true
    }

    /// Removes a name from the live and durable directory (tests of missing segments).
    pub fn remove_file(&mut self, name: &str) -> bool {
        let a = self.live_names.remove(name).is_some();
        self.durable_names.remove(name);
        a
    }

    pub fn file_names(&self) -> Vec<String> {
        self.live_names.keys().cloned().collect()
    }
}

/// Faults to inject. Counters count operations since the storage was created.
#[derive(Debug, Default)]
pub struct Faults {
    /// The n-th `SyncData` (0-based) and every later one fails with EIO.
    pub fail_sync_from: Option<u64>,
    /// With `fail_sync_from`: the first `SyncData` that succeeds again (a transient EIO). Linux
    /// then reports the retry as a success, though the failed sync's pages never reached the
    /// device: this is what a retry must never be trusted for.
    pub fail_sync_until: Option<u64>,
    /// Writes complete at most this many bytes at a time (short writes).
    pub short_write_max: Option<u64>,
    /// Total bytes the device holds; a write or zero-fill past it fails with ENOSPC.
    pub capacity_bytes: Option<u64>,
    /// Deliver each reap's completions in reverse order (with `defer`: run them so).
    pub reorder: bool,
    /// Hold writes and syncs back until a reap that waits (or a `wait`), then run them all (in
    /// reverse order with `reorder`): completions arrive late, in bursts, out of submission
    /// order.
    pub defer: bool,
    pub syncs_seen: u64,
    pub short_writes_done: u64,
    /// Reaps that delivered (or, with `defer`, bursts that ran) more than one operation out of
    /// submission order.
    pub reordered: u64,
    /// Writes submitted while a sync on the same file was in flight (pipelining seen).
    pub writes_during_sync: u64,
    /// Syncs submitted while a write to the same file was still unreaped: the log must never
    /// do this (such a sync need not cover that write).
    pub syncs_over_unreaped_writes: u64,
    /// Syncs submitted while another sync on the same file was in flight: the log must never
    /// do this (an error reported to one of them can be lost to the other).
    pub overlapping_syncs: u64,
    /// Seeds every choice of the simulation (see the module doc); `None` keeps the fixed ones.
    /// Holds the generator's state as it goes.
    pub seed: Option<u64>,
    /// Calls to fail, each once.
    pub fail_calls: Vec<FailCall>,
    /// Calls made so far, by kind ([`Call`] order).
    pub calls: [u64; Call::ALL.len()],
    /// Calls failed by `fail_calls`.
    pub calls_failed: u64,
    /// Hand the sync observer a crash point after every write, zero-fill, create, rename and
    /// remove too, not only before every sync.
    pub observe_every_op: bool,
    /// Held-back operations that ran before one submitted ahead of them.
    pub ran_out_of_order: u64,
}

impl Faults {
    /// The next draw of the seeded generator (xorshift64*); `None` without a seed.
    fn draw(&mut self) -> Option<u64> {
        let x = self.seed.as_mut()?;
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        if *x == 0 {
            *x = 0x9e37_79b9_7f4a_7c15;
        }
        Some(x.wrapping_mul(0x2545_F491_4F6C_DD1D))
    }

    /// Counts a call of `call` and returns the error it is to fail with, if any.
    fn call(&mut self, call: Call) -> Option<io::Error> {
        let n = self.calls[call.index()];
        self.calls[call.index()] += 1;
        let hit = self.fail_calls.iter().find(|f| f.call == call && f.nth == n)?;
        self.calls_failed += 1;
        Some(io::Error::from_raw_os_error(hit.errno))
    }

    /// A seeded permutation of `0..n` (identity without a seed).
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let Some(r) = self.draw() else { return };
            v.swap(i, (r % (i as u64 + 1)) as usize);
        }
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
            Op::Write { file, offset, data } => (self.write(file, offset, &data), Some(data)),
            Op::SyncData { file } => (self.sync_data(file), None),
            Op::SyncDir => (self.sync_dir(), None),
            Op::ZeroFill { file, len } => (self.zero_fill(file, len), None),
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

    fn write(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<u64> {
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

    fn sync_data(&self, file: FileId) -> io::Result<u64> {
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

    fn sync_dir(&self) -> io::Result<u64> {
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

    fn zero_fill(&self, file: FileId, len: u64) -> io::Result<u64> {
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

impl MemStorage {
    /// Makes a recycling's `writes` in `file` (unsynced, so a crash keeps each sector old or
    /// new), observed once at their end.
    fn overwrite(&self, file: FileId, writes: &[(u64, Vec<u8>)]) -> io::Result<()> {
        if let Some(e) = self.faults().call(Call::ZeroFill) {
            return Err(e);
        }
        let node = self.node(file)?;
        let mut st = lock(&self.inner.state);
        let nd = st.nodes.get_mut(&node).ok_or_else(|| io::Error::other("missing node"))?;
        for (at, bytes) in writes {
            let (a, b) = (*at as usize, *at as usize + bytes.len());
            let dst =
                nd.live.get_mut(a..b).ok_or_else(|| io::Error::other("a recycling write past the end"))?;
            dst.copy_from_slice(bytes);
            for s in *at / SECTOR..(b as u64).div_ceil(SECTOR) {
                nd.dirty.insert(s);
            }
        }
        drop(st);
        self.observe_op(Boundary::Recycle);
        Ok(())
    }
}

impl Storage for MemStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(lock(&self.inner.state).live_names.keys().cloned().collect())
    }

    fn open(&self, name: &str, create_new: bool) -> io::Result<FileId> {
        if create_new {
            if let Some(e) = self.faults().call(Call::Create) {
                return Err(e);
            }
        }
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

    fn close(&self, file: FileId) {
        lock(&self.inner.handles).remove(&file);
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
                    let result = me.sync_data(file);
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

    fn prepare_file(&self, name: &str, len: u64) -> io::Result<()> {
        let f = self.open(name, true)?;
        let r = self.zero_fill(f, len).and_then(|_| self.sync_data(f));
        self.close(f);
        let r = r.and_then(|_| self.sync_dir().map(|_| ()));
        if r.is_err() {
            let _ = self.remove(name);
            self.sync_names();
        }
        r
    }

    fn recycle_file(&self, from: &str, name: &str, len: u64, writes: &[(u64, Vec<u8>)]) -> io::Result<()> {
        let f = self.open(from, false)?;
        let r = (|| {
            let have = self.len(f)?;
            if have != len {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{from}: {have} bytes")));
            }
            self.overwrite(f, writes)?;
            self.sync_data(f)
        })();
        self.close(f);
        let r = r.and_then(|_| self.rename(from, name)).and_then(|()| self.sync_dir().map(|_| ()));
        if r.is_err() {
            let _ = self.remove(from);
            let _ = self.remove(name);
            self.sync_names();
        }
        r
    }

    fn lock(&self, exclusive: bool) -> io::Result<LockGuard> {
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
