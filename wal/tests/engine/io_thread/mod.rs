//! The I/O thread (first step of issue 3): tickets, group commit, fail-stop, rejection.

mod append_wait;
mod borrowed;
mod operations;
mod same_answers;
mod tickets;
mod untracked;

use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, Options, Wal};
use wal_sim::MemStorage;

const SEG: u32 = 64 * 1024;

fn start(st: &MemStorage, opts: AsyncOptions) -> AsyncWal {
    let (wal, _) =
        Wal::open_with(Arc::new(st.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
            .unwrap();
    AsyncWal::start(wal, opts).unwrap()
}

/// A log on `st` that prepares its next segment on the appending thread: the only syncs are
/// the batches' own (a test that holds or times a sync holds or times one of those).
fn open_unprepared(st: Arc<dyn wal::storage::Storage>) -> Wal {
    Wal::open_with(st, Options { segment_len_bytes: SEG, prepare_in_background: false, ..Options::default() })
        .unwrap()
        .0
}

/// A writer over `st` whose syncs run on the storage's own sync thread, so that a test can
/// hold one ([`MemStorage::hold_next_sync`]) while appends go on; the log is `open_unprepared`.
fn start_on_sync_thread(st: &MemStorage, opts: AsyncOptions) -> AsyncWal {
    st.set_sync_thread(true).unwrap();
    AsyncWal::start(open_unprepared(Arc::new(st.clone())), opts).unwrap()
}

fn reopen(st: &MemStorage) -> Vec<(u64, Vec<u8>)> {
    let (wal, _) =
        Wal::open_with(Arc::new(st.clone()), Options { segment_len_bytes: SEG, ..Options::default() })
            .unwrap();
    wal.replay().unwrap().collect_entries().unwrap()
}
