//! What the Raft log store's open promises (issue 22): a log with a flipped bit in an
//! acknowledged entry of a segment its open takes on trust (sealed by a rotation, or by a clean
//! close and covered by `wal.close`) is refused at the open with CORRUPT, before any write.
//! openraft reads entries lazily, so nothing else would walk them before the first append.

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use openraft::vote::RaftLeaderIdExt;
use openraft::RaftTypeConfig;
use std::path::Path;
use std::time::Duration;
use wal_raft::{log_options, Entry, LogId, LogStore, Request, TypeConfig};

#[path = "../../../wal/tests/common/dir_bytes.rs"]
mod dir_bytes;
use dir_bytes::dir_bytes;

const T: Duration = Duration::from_secs(20);

fn lid(term: u64, index: u64) -> LogId {
    LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(term, 1), index)
}

/// A catalog create of a metalake whose name is findable in the segment files.
fn create(index: u64) -> Entry {
    let cmd = catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: format!("metalake-{index:05}-{}", "x".repeat(300)),
        props: vec![],
    };
    Entry::new_normal(lid(1, index), Request::command(&cmd, None))
}

/// Flips a bit in the name of entry `index`; returns the file it was in.
fn flip(dir: &Path, index: u64) -> String {
    let needle = format!("metalake-{index:05}-").into_bytes();
    for (name, mut bytes) in dir_bytes(dir) {
        if !name.ends_with(".wal") {
            continue;
        }
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + needle.len() + 100] ^= 0x08;
            std::fs::write(dir.join(&name), &bytes).unwrap();
            return name;
        }
    }
    panic!("entry {index} not found");
}

/// `n` entries, each appended and made durable; then a clean close or a crash.
async fn write(dir: &Path, n: u64, clean: bool) {
    let mut log = LogStore::open(dir, log_options(64 << 10)).unwrap();
    for i in 1..=n {
        let (tx, rx) = TypeConfig::oneshot();
        tokio::time::timeout(T, log.append(vec![create(i)], IOFlushed::signal(tx))).await.unwrap().unwrap();
        tokio::time::timeout(T, rx).await.unwrap().unwrap().unwrap();
    }
    if clean {
        log.close().unwrap();
    } else {
        log.abandon();
    }
}

#[tokio::test]
async fn a_flipped_bit_in_a_trusted_segment_is_refused_at_the_open() {
    // (entries, clean close, the entry to damage): sealed by a rotation, then by a clean close.
    for (n, clean, victim) in [(400, false, 5), (60, true, 30)] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), n, clean).await;
        let names = dir_bytes(dir.path()).into_keys().filter(|n| n.ends_with(".wal")).count();
        assert!(clean || names >= 3, "{names} segments");
        let file = flip(dir.path(), victim);
        let before = dir_bytes(dir.path());
        match LogStore::open(dir.path(), log_options(64 << 10)) {
            Err(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("CORRUPT") && text.contains(&format!("segment {}", file_seq(&file))),
                    "{text}"
                );
            }
            Ok(mut log) => {
                let (tx, _rx) = TypeConfig::oneshot();
                let r = tokio::time::timeout(T, log.append(vec![create(n + 1)], IOFlushed::signal(tx))).await;
                log.abandon();
                panic!("clean {clean}: the store opened over the damage; an append gave {r:?}");
            }
        }
        assert!(dir_bytes(dir.path()) == before, "clean {clean}: the directory changed");
    }
}

fn file_seq(name: &str) -> u64 {
    wal::format::parse_segment_file_name(name).unwrap()
}
