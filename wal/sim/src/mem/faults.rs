//! The faults the simulator injects ([`Faults`]: failed and transient syncs, short writes, a
//! capacity, held-back and reordered operations, chosen calls failed ([`FailCall`])), the
//! state of its seeded generator ([`Rng`]), and the counters of what it saw.

use crate::Rng;
use std::io;

/// A kind of call [`Faults::fail_calls`] can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// `create` (also the one inside segment preparation).
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

    pub(super) fn index(self) -> usize {
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
    /// The next draw of the seeded generator ([`Rng::xorshift64_star`], its state kept in
    /// `seed`); `None` without a seed.
    pub(super) fn draw(&mut self) -> Option<u64> {
        let state = self.seed.as_mut()?;
        let mut rng = Rng::xorshift64_star(*state);
        let x = rng.next_u64();
        *state = rng.state();
        Some(x)
    }

    /// Counts a call of `call` and returns the error it is to fail with, if any.
    pub(super) fn call(&mut self, call: Call) -> Option<io::Error> {
        let n = self.calls[call.index()];
        self.calls[call.index()] += 1;
        let hit = self.fail_calls.iter().find(|f| f.call == call && f.nth == n)?;
        self.calls_failed += 1;
        Some(io::Error::from_raw_os_error(hit.errno))
    }

    /// A seeded permutation of `0..n` (identity without a seed).
    pub(super) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let Some(r) = self.draw() else { return };
            v.swap(i, (r % (i as u64 + 1)) as usize);
        }
    }
}
