//! `walcheck compare` on replicas that purged their prefixes at different points: each log's
//! first entry is where its own purge left it, so the comparison starts at the highest of them.

use crate::common::walcheck;
use catalog::{Command, EntityKind};
use std::path::Path;
use wal::{Epoch, Lsn, Options, Wal};
use wal_state::{EntryKind, Envelope};

/// A log of 4000 creates in 64 KiB segments, purged below `purge` (whole segments only);
/// with `other`, the entry at that LSN carries another name.
fn replica(dir: &Path, purge: u64, other: Option<u64>) {
    let opts = Options { segment_len_bytes: 64 << 10, ..Options::default() };
    let (mut log, _) = Wal::open(dir, opts).unwrap();
    for i in 1..=4000u64 {
        let name = if other == Some(i) { "x".to_string() } else { format!("lake-{i:05}-{}", "p".repeat(40)) };
        let cmd = Command::Create { parent: None, kind: EntityKind::Metalake, name, props: vec![] };
        log.append(Epoch(0), &Envelope::encode(EntryKind::Command, None, &cmd.encode())).unwrap();
    }
    log.sync().unwrap();
    assert!(!log.purge_before(Lsn(purge)).unwrap().segments_removed.is_empty());
    log.close().unwrap();
}

#[test]
fn replicas_purged_at_different_points_agree_from_their_common_start() {
    let d = tempfile::tempdir().unwrap();
    let dirs: Vec<String> = ["a", "b", "c"].iter().map(|n| d.path().join(n).display().to_string()).collect();
    replica(Path::new(&dirs[0]), 1000, None);
    replica(Path::new(&dirs[1]), 2000, None);
    replica(Path::new(&dirs[2]), 3000, None);
    let args: Vec<&str> = ["compare"].into_iter().chain(dirs.iter().map(String::as_str)).collect();
    let (code, out, err) = walcheck(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("AGREE"), "{out}");
    // The common range starts at c's first entry, past every purge.
    assert!(!out.contains("common LSN 1.."), "{out}");

    let x = d.path().join("x").display().to_string();
    replica(Path::new(&x), 1500, Some(3800));
    let (code, out, err) = walcheck(&["compare", &dirs[0], &dirs[1], &x]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("LSN 3800"), "{out}");
}
