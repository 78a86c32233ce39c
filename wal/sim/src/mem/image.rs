//! The simulator's state ([`MemState`]: per file its live bytes, its durable image and its
//! dirty sectors; the live and the durable names) and the crash images built from it: the
//! durable names, and per dirty sector the new bytes, the old ones or garbage ([`SectorFate`]);
//! where a crash is taken ([`CrashPoint`], [`Boundary`]).

use super::{MemStorage, SECTOR};
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Clone, Debug, Default)]
pub(super) struct Node {
    pub(super) live: Vec<u8>,
    pub(super) durable: Vec<u8>,
    pub(super) dirty: BTreeSet<u64>,
}

/// The whole state of a [`MemStorage`]: enough to build every crash image from it.
#[derive(Clone, Debug, Default)]
pub struct MemState {
    pub(super) nodes: HashMap<u64, Node>,
    pub(super) live_names: BTreeMap<String, u64>,
    pub(super) durable_names: BTreeMap<String, u64>,
    pub(super) names_dirty: bool,
    pub(super) next_node: u64,
}

/// What a dirty sector holds after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectorFate {
    New,
    Old,
    Garbage(u64),
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
/// operation took effect (those only with [`Faults::observe_every_op`](super::Faults::observe_every_op)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Boundary {
    SyncData,
    SyncDir,
    Write,
    ZeroFill,
    Create,
    Rename,
    Remove,
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
                        let mut rng = crate::Rng::xorshift64(seed | 1);
                        for b in bytes.get_mut(start..end).unwrap_or_default() {
                            *b = rng.next_u64() as u8;
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
