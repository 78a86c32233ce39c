//! The staged history the crash tests hold a recovered log to (tests/engine/crash.rs, the fault sweep),
//! and their seeded generator.

use std::collections::BTreeMap;

/// The seeded generator: every choice of a seeded test comes from its seed, so a failure
/// replays.
pub use crate::Rng;

/// The tests' generator for `seed` (xorshift64*, the sequences their recorded seeds were found
/// with), its first draws differing well between neighbouring seeds.
pub fn seeded(seed: u64) -> Rng {
    Rng::xorshift64_star(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

/// One staged change to the log's entries.
#[derive(Clone, Debug)]
pub enum Op {
    Put(u64, Vec<u8>),
    /// Cut every LSN at or above this.
    Cut(u64),
}

/// The staged operations; `ok[k]`: the state after `ops[..k]` may be recovered (false inside a
/// user batch: all of it or none).
#[derive(Clone, Debug)]
pub struct History {
    pub ops: Vec<Op>,
    pub ok: Vec<bool>,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    pub fn new() -> History {
        History { ops: Vec::new(), ok: vec![true] }
    }
    pub fn push(&mut self, op: Op, boundary: bool) {
        self.ops.push(op);
        self.ok.push(boundary);
    }
    pub fn truncate(&mut self, len: usize) {
        self.ops.truncate(len);
        self.ok.truncate(len + 1);
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

pub fn apply(m: &mut BTreeMap<u64, Vec<u8>>, op: &Op) {
    match op {
        Op::Put(l, p) => {
            m.insert(*l, p.clone());
        }
        Op::Cut(k) => {
            m.split_off(k);
        }
    }
}

/// The next LSN after `ops` (a log starting at LSN 1).
pub fn next_lsn_after(ops: &[Op]) -> u64 {
    ops.iter().fold(1, |_, op| match op {
        Op::Put(l, _) => l + 1,
        Op::Cut(k) => *k,
    })
}
