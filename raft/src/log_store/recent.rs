//! The most recent entries appended, kept in memory ([`Recent`]) so that openraft's reads right
//! after an append never wait behind the fdatasync in flight. Separate from the store
//! (`mod.rs`): a bounded, contiguous window with its own rules and tests, which the store only
//! pushes to, cuts and asks.

use crate::Entry;

/// The most recent entries appended (queued to the writer, durable or not), contiguous and
/// ending at `Known::last` whenever not empty; evicted oldest first past a budget, cut by
/// `truncate_after`, dropped by `purge`, all under the same lock that orders the FIFO.
///
/// Why: openraft reads an entry right after appending it (a leader's replication streams, every
/// node's state machine worker). Through the writer's FIFO such a read waits behind the
/// fdatasync in flight, which makes the leader's own sync and its followers' syncs serial and
/// delays every apply by one more sync. From here it does not wait; the writer serves only
/// reads that start below the oldest entry kept.
#[derive(Debug, Default)]
pub(super) struct Recent {
    entries: std::collections::VecDeque<(Entry, usize)>,
    bytes: usize,
}

/// The budget of [`Recent`]: this many bytes of encoded entries, or this many entries.
const RECENT_MAX_BYTES: usize = 16 << 20;
const RECENT_MAX_ENTRIES: usize = 1 << 16;

impl Recent {
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    pub(super) fn push(&mut self, e: Entry, size: usize) {
        if self.entries.back().is_some_and(|(b, _)| b.log_id.index + 1 != e.log_id.index) {
            self.clear();
        }
        self.entries.push_back((e, size));
        self.bytes += size;
        while self.bytes > RECENT_MAX_BYTES || self.entries.len() > RECENT_MAX_ENTRIES {
            let Some((_, n)) = self.entries.pop_front() else { break };
            self.bytes -= n;
        }
    }

    /// Keeps entries at or below `index` (`None`: none).
    pub(super) fn cut_after(&mut self, index: Option<u64>) {
        while self.entries.back().is_some_and(|(b, _)| index.is_none_or(|i| b.log_id.index > i)) {
            if let Some((_, n)) = self.entries.pop_back() {
                self.bytes -= n;
            }
        }
    }

    /// Drops entries at or below `index`.
    pub(super) fn drop_upto(&mut self, index: u64) {
        while self.entries.front().is_some_and(|(f, _)| f.log_id.index <= index) {
            if let Some((_, n)) = self.entries.pop_front() {
                self.bytes -= n;
            }
        }
    }

    /// The entries with `start <= index < end`, when every live entry from `start` on is here
    /// (the oldest one kept is at or below `start`); `None`: ask the log.
    pub(super) fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let (first, _) = self.entries.front()?;
        let first = first.log_id.index;
        if start < first {
            return None;
        }
        if start >= end {
            return Some(Vec::new());
        }
        let skip = usize::try_from(start - first).ok()?;
        let take = usize::try_from(end - start).unwrap_or(usize::MAX);
        Some(self.entries.iter().skip(skip).take(take).map(|(e, _)| e.clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LogId, TypeConfig};
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;

    fn entry(index: u64) -> Entry {
        let id = LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(1, 1), index);
        Entry { log_id: id, payload: openraft::EntryPayload::Blank }
    }

    fn indexes(v: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn recent_entries_serve_only_ranges_they_hold_whole() {
        let mut r = Recent::default();
        assert_eq!(indexes(r.get(0, 10)), None, "empty: ask the log");
        for i in 5..10 {
            r.push(entry(i), 10);
        }
        assert_eq!(indexes(r.get(4, 10)), None, "starts below the oldest kept");
        assert_eq!(indexes(r.get(5, 7)), Some(vec![5, 6]));
        assert_eq!(indexes(r.get(8, u64::MAX)), Some(vec![8, 9]));
        assert_eq!(indexes(r.get(12, 20)), Some(vec![]), "past the end: nothing there");
        r.cut_after(Some(7));
        assert_eq!(indexes(r.get(5, 20)), Some(vec![5, 6, 7]));
        r.drop_upto(5);
        assert_eq!(indexes(r.get(5, 20)), None);
        assert_eq!(indexes(r.get(6, 20)), Some(vec![6, 7]));
        assert_eq!(r.bytes, 20);
        // Not contiguous with what is kept (cannot happen through the store): start over.
        r.push(entry(30), 10);
        assert_eq!(indexes(r.get(6, 40)), None);
        assert_eq!(indexes(r.get(30, 40)), Some(vec![30]));
        r.cut_after(None);
        assert_eq!((r.entries.len(), r.bytes), (0, 0));
        // The budget evicts the oldest first.
        for i in 0..3 {
            r.push(entry(i), RECENT_MAX_BYTES / 2);
        }
        assert_eq!(indexes(r.get(0, 3)), None);
        assert_eq!(indexes(r.get(1, 3)), Some(vec![1, 2]));
    }
}
