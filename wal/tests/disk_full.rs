//! Running out of space (docs/invariants.md I6: disk full is its own error, the log stays usable) on a
//! real, small file system and against the configured size budget.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use wal::storage::Reader;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Error, Failure, Options, Wal};
use wal_sim::workload::kv::Kv;
use wal_sim::MemStorage;

const SEG: u32 = 64 * 1024;

/// The tests of this file run one at a time. Each mounts and unmounts with a child process,
/// and a child holds a copy of every descriptor of this process from its fork to its exec,
/// the log's `LOCK` among them: a test that closes a log and reopens it at once could find it
/// still locked by a sibling test's `mount` (seen once in CI on a loaded machine).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tmpfs of `size` bytes mounted for one test and unmounted (and removed) when dropped.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// `None` when this machine does not let the test mount (not root, no tmpfs): the caller
    /// says so and skips.
    fn mount(size: u64) -> Option<SmallFs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallFs { dir })
    }

    /// The 448 KiB tmpfs of these tests with 2 segments' worth of ballast in it (that a test
    /// frees to make room again); `None`, after saying SKIPPED, where it cannot be mounted.
    fn mount_with_ballast() -> Option<(SmallFs, PathBuf)> {
        let Some(fs) = SmallFs::mount(448 * 1024) else {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
            return None;
        };
        let ballast = fs.dir.path().join("ballast");
        std::fs::write(&ballast, vec![1u8; 2 * SEG as usize]).ok()?;
        Some((fs, ballast))
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("log")
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fills the file system until a write fails with ENOSPC; returns the filler's path.
fn fill(root: &Path) -> PathBuf {
    use std::io::Write;
    let path = root.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0xa5u8; 4096];
    for _ in 0..1_000_000 {
        if let Err(e) = f.write_all(&block) {
            assert_eq!(e.raw_os_error(), Some(28), "{e}");
            break;
        }
    }
    let _ = f.sync_all();
    path
}

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

/// Appends 1 KiB entries through the I/O thread until one is refused; returns the acknowledged
/// LSNs and the refusal.
fn append_until_refused(log: &AsyncWal) -> (Vec<u64>, Failure) {
    let mut acked = Vec::new();
    for i in 0..100_000u64 {
        let t = log.append(Epoch(0), vec![(i % 251) as u8; 1024], Durability::Durable).unwrap();
        match t.wait() {
            Ok(lsn) => acked.push(lsn.0),
            Err(f) => return (acked, f),
        }
    }
    panic!("never ran out of space");
}

fn entries(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let (log, _) = Wal::open(dir, Options { read_only: true, ..opts() }).unwrap();
    log.replay().unwrap().collect_entries().unwrap()
}

#[test]
fn a_real_full_file_system_refuses_the_entry_keeps_the_log_and_recovers_while_full() {
    let _serial = serial();
    let Some((fs, ballast)) = SmallFs::mount_with_ballast() else { return };
    let dir = fs.path();
    let (wal, _) = Wal::open(&dir, opts()).unwrap();
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap();
    let (acked, refused) = append_until_refused(&log);
    assert!(matches!(refused, Failure::Rejected(ref why) if why.contains("disk full")), "{refused:?}");
    assert!(acked.len() > 100, "only {} entries fit", acked.len());
    // Not fenced: the log takes appends again once there is room (here: never, so it refuses
    // again, still as Rejected, and still without fencing).
    let again = log.append(Epoch(0), vec![1; 1024], Durability::Durable).unwrap().wait();
    assert!(matches!(again, Err(Failure::Rejected(_))), "{again:?}");
    // Closing on a full disk: the footer and wal.meta still fit (the footer slot is
    // preallocated; wal.meta is replaced by a 64-byte file).
    log.close().unwrap();
    let got = entries(&dir);
    assert_eq!(got.iter().map(|e| e.0).collect::<Vec<_>>(), acked, "an acknowledged entry was lost");
    // Recovery on a file system with no free byte at all.
    let filler = fill(fs.dir.path());
    let (wal, report) = Wal::open(&dir, opts()).unwrap();
    assert_eq!(report.verdict, wal::CrcVerdict::Ok);
    assert_eq!(wal.replay().unwrap().collect_entries().unwrap().len(), acked.len());
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap();
    // Room again: appends resume at the next LSN.
    std::fs::remove_file(filler).unwrap();
    std::fs::remove_file(ballast).unwrap();
    let t = log.append(Epoch(0), b"after".to_vec(), Durability::Durable).unwrap();
    assert_eq!(t.wait(), Ok(wal::Lsn(acked.len() as u64 + 1)));
    log.close().unwrap();
    assert_eq!(entries(&dir).last().unwrap().1, b"after".to_vec());
}

#[test]
fn the_size_budget_refuses_before_the_file_system_is_full() {
    let _serial = serial();
    let st = MemStorage::new();
    let o = Options { max_log_bytes: Some(3 * u64::from(SEG)), ..opts() };
    let (wal, _) = Wal::open_with(Arc::new(st.clone()), o.clone()).unwrap();
    let log = AsyncWal::start(wal, AsyncOptions::default()).unwrap();
    let (acked, refused) = append_until_refused(&log);
    assert!(matches!(refused, Failure::Rejected(ref why) if why.contains("size budget")), "{refused:?}");
    log.close().unwrap();
    let segs = st.state().file_names().iter().filter(|n| n.ends_with(".wal")).count();
    assert_eq!(segs, 3, "the budget allows exactly three segment files");
    // The synchronous API says the same, as its own error, and the log stays usable: a purge
    // frees a segment and the next append goes through.
    let (mut wal, _) = Wal::open_with(Arc::new(st.clone()), o.clone()).unwrap();
    let err = loop {
        if let Err(e) = wal.append(Epoch(0), &[3; 1024]).and_then(|_| wal.flush()) {
            break e;
        }
    };
    assert!(matches!(err, Error::DiskFull { .. }), "{err}");
    assert!(!wal.is_fenced());
    let first_kept = wal::Lsn(acked[acked.len() / 2]);
    wal.purge_before(first_kept).unwrap();
    wal.append(Epoch(0), b"after the purge").unwrap();
    wal.close().unwrap();
    let bad = Wal::open_with(Arc::new(st), Options { max_log_bytes: Some(u64::from(SEG)), ..o });
    assert!(matches!(bad, Err(Error::InvalidArgument(_))), "a budget below two segments is refused");
}

/// The commit pipeline on a real full file system (issue 7: "an error, the tail withdrawn,
/// existing data intact"): the submission that finds no room resolves Rejected (never applied,
/// never Indeterminate), the state holds exactly the committed entries, the pipeline is not
/// fenced and refuses again while full; after space returns, a restart replays the log to the
/// same state, CLEAN against every checkpoint, and takes entries again.
#[test]
fn the_pipeline_on_a_full_file_system_rejects_without_applying_and_restarts_clean() {
    let _serial = serial();
    use wal_state::pipeline::{Hooks, Pipeline, PipelineOptions};
    let Some((fs, ballast)) = SmallFs::mount_with_ballast() else { return };
    let dir = fs.path();
    let o = PipelineOptions {
        log: Options { create: true, prepare_in_background: false, ..opts() },
        checkpoint_every_entries: 16,
        ..PipelineOptions::default()
    };
    let (p, _) = Pipeline::open(&dir, o.clone(), Hooks::default(), Kv::default).unwrap();
    let mut committed = 0u64;
    let why = loop {
        let body = format!("put k{committed} {}", "v".repeat(900));
        match p.submit(body.as_bytes(), None).unwrap().wait() {
            Ok(_) => committed += 1,
            Err(f) => break f,
        }
        assert!(committed < 10_000, "never ran out of space");
    };
    assert!(matches!(why, Failure::Rejected(ref w) if w.contains("disk full")), "{why:?}");
    assert!(committed > 100, "only {committed} entries fit");
    assert_eq!(p.read(|kv| kv.map.len() as u64), committed, "a refused entry was applied");
    assert!(p.fenced().is_none(), "disk full fenced the pipeline");
    let again = p.submit(b"put again x", None).unwrap().wait();
    assert!(matches!(again, Err(Failure::Rejected(_))), "{again:?}");
    // Closing may need room for its final checkpoint; either way nothing committed is lost.
    let _ = p.close();
    std::fs::remove_file(ballast).unwrap();
    let (p, restart) = Pipeline::open(&dir, o, Hooks::default(), Kv::default).unwrap();
    assert!(restart.compare.divergence.is_none() && restart.fenced.is_none(), "{restart:?}");
    assert!(restart.compare.checkpoints_checked > 0, "no checkpoint compared");
    assert_eq!(p.read(|kv| kv.map.len() as u64), committed);
    assert!(p.read(|kv| kv.map.contains_key(&format!("k{}", committed - 1))));
    assert!(p.submit(b"put after room", None).unwrap().wait().is_ok());
    p.close().unwrap();
}

/// A clean close on a disk with no block left for `wal.close` still closes: without the file
/// (the next open walks the last segment for its state), and without an older `wal.close`,
/// which would name another close than the one `wal.meta` records (a CORRUPT log if kept).
/// Seen on the real tmpfs above, where it depended on how full the disk happened to be.
#[test]
fn a_close_with_no_room_for_wal_close_closes_without_it() {
    let _serial = serial();
    let st = MemStorage::new();
    // No spare prepared on a helper thread: its create could take the refusal meant for
    // wal.close's temporary (seen once in CI).
    let o = Options { prepare_in_background: false, ..opts() };
    let open = || Wal::open_with(Arc::new(st.clone()), o.clone()).unwrap().0;
    let mut wal = open();
    for i in 0..10u8 {
        wal.append(Epoch(0), &[i; 100]).unwrap();
    }
    wal.close().unwrap();
    assert!(st.list().unwrap().iter().any(|n| n == "wal.close"), "the first close wrote wal.close");
    let mut wal = open();
    for i in 10..20u8 {
        wal.append(Epoch(0), &[i; 100]).unwrap();
    }
    {
        // The next file created is wal.close's temporary: no room for it.
        let mut f = st.faults();
        let nth = f.calls[0];
        f.fail_calls.push(wal_sim::FailCall { call: wal_sim::Call::Create, nth, errno: 28 });
    }
    wal.close().expect("a close on a full disk");
    assert_eq!(st.faults().calls_failed, 1, "the create of wal.close.tmp was not refused");
    assert!(!st.list().unwrap().iter().any(|n| n.starts_with("wal.close")), "{:?}", st.list());
    let scan = wal::scan_log(&st, true).unwrap();
    assert_eq!(scan.verdict, wal::CrcVerdict::Ok, "{:?}", scan.damage);
    let got = open().replay().unwrap().collect_entries().unwrap();
    assert_eq!(got.len(), 20);
    assert!(got.iter().enumerate().all(|(i, e)| e.1 == vec![i as u8; 100]));
}
