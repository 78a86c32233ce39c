//! Full verify — the CRC scan and the replay through the catalog's apply function with every
//! checkpoint compared, in one pass as `walcheck verify` does it, and as two passes — on about
//! 256-byte catalog entries, next to blake3 over the same number
//! of 256-byte buffers in the same run (issue 6: at least 1 million entries per second on one
//! core).
//!
//! The log (200,000 `Create` commands with a checkpoint every 1,024 entries, written through the
//! apply seam exactly as the pipeline does) is built before timing and read from the page
//! cache. Rounds interleave the operations; medians are reported.
//!
//! `taskset -c 0 cargo bench -p wal-benches --bench verify_state` (one core, as the floor asks;
//! about a minute with the build).

use catalog::test_support::lake_command;
use catalog::Catalog;
use std::path::Path;
use std::time::Instant;
use verifier::state::{check_state, StateOptions, StateVerdict};
use verifier::verify_with_state;
use wal::{Epoch, Lsn, Options, Wal};
use wal_benches::{median, scaled};
use wal_state::{Applier, EntryKind, Envelope, DEDUPE_WINDOW_META_KEY};

/// Entries in the log (a few thousand in a smoke run, see `wal_benches::smoke`).
fn entry_count() -> u64 {
    scaled(200_000, 5_000)
}
const WINDOW: u64 = 1 << 20;

fn build(dir: &Path) -> u64 {
    let opts = Options { segment_len_bytes: scaled(64 << 20, 8 << 20), ..Options::default() };
    let (mut log, _) = Wal::open(dir, opts).unwrap();
    log.set_meta(DEDUPE_WINDOW_META_KEY, &WINDOW.to_le_bytes()).unwrap();
    let mut a = Applier::new(Catalog::new(), WINDOW);
    let mut bytes = 0u64;
    for i in 0..entry_count() {
        let cmd = lake_command(i, format!("catalog-{i:08}"), vec![b'p'; 200]);
        let p = Envelope::encode(EntryKind::Command, None, &cmd.encode());
        bytes += p.len() as u64;
        let lsn = log.append(Epoch(0), &p).unwrap();
        a.apply(lsn, Epoch(0), &p).unwrap();
        if (i + 1) % 1024 == 0 {
            log.checkpoint(Epoch(0), lsn, &a.checkpoint()).unwrap();
        }
        if (i + 1) % 256 == 0 {
            log.flush().unwrap();
        }
    }
    log.checkpoint(Epoch(0), Lsn(entry_count()), &a.checkpoint()).unwrap();
    log.close().unwrap();
    bytes / entry_count()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let avg = build(d.path());
    let spec = walcheck::catalog_spec();
    // Check once that the work is real: CLEAN through the end, every entry replayed.
    let r = check_state(d.path(), wal::CrcVerdict::Ok, &StateOptions::default(), &spec);
    assert_eq!(r.verdict, StateVerdict::Clean, "{}", r.summary());
    let c = r.compare.unwrap();
    assert_eq!((c.entries_applied, c.verified_through), (entry_count(), Some(Lsn(entry_count()))));
    let bufs: Vec<Vec<u8>> = (0..4096).map(|i| vec![(i % 251) as u8; 256]).collect();
    // The same entries in memory, to time the apply seam and the catalog alone.
    let (log, _) = Wal::open(d.path(), Options { read_only: true, ..Options::default() }).unwrap();
    let entries = log.replay().unwrap().collect_entries().unwrap();
    drop(log);
    let (mut full, mut two, mut state, mut crc, mut b3) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut apply = Vec::new();
    let rounds = scaled(7, 1);
    for _ in 0..rounds {
        // What `walcheck verify` does: the CRC scan feeding the replay in one pass.
        let t = Instant::now();
        let rep = verify_with_state(d.path(), false, &StateOptions::default(), &spec, &mut |_| {});
        full.push(t.elapsed().as_secs_f64());
        let s = rep.state.expect("a state report");
        assert!(s.verdict == StateVerdict::Clean && s.single_pass, "{}", s.summary());
        let t = Instant::now();
        let rep = verifier::verify(d.path(), &verifier::VerifyOptions::default(), &mut |_| {});
        crc.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let s = check_state(d.path(), rep.crc, &StateOptions::default(), &spec);
        two.push(crc.last().copied().unwrap_or(0.0) + t.elapsed().as_secs_f64());
        assert_eq!(s.verdict, StateVerdict::Clean);
        let t = Instant::now();
        let s = check_state(d.path(), wal::CrcVerdict::Ok, &StateOptions::default(), &spec);
        state.push(t.elapsed().as_secs_f64());
        assert_eq!(s.verdict, StateVerdict::Clean);
        let t = Instant::now();
        let mut x = 0u8;
        for i in 0..entry_count() as usize {
            x ^= blake3::hash(&bufs[i % bufs.len()]).as_bytes()[0];
        }
        b3.push(t.elapsed().as_secs_f64());
        std::hint::black_box(x);
        let t = Instant::now();
        let mut a = Applier::new(Catalog::new(), WINDOW);
        for (lsn, p) in &entries {
            a.apply(Lsn(*lsn), Epoch(0), p).unwrap();
        }
        std::hint::black_box(a.checkpoint());
        drop(a);
        apply.push(t.elapsed().as_secs_f64());
    }
    let rate = |v: &[f64]| entry_count() as f64 / median(&mut v.to_vec());
    println!(
        "verify_state: {} catalog entries of about {avg} bytes, {} interleaved rounds, medians",
        entry_count(),
        rounds
    );
    println!("{:<34} {:>14} {:>10}", "operation", "entries/s", "vs blake3");
    let b3r = rate(&b3);
    for (name, v) in [
        ("full verify, one pass (walcheck)", &full),
        ("CRC scan, then a separate replay", &two),
        ("CRC scan alone", &crc),
        ("replay + compare alone", &state),
        ("apply seam + catalog, in memory", &apply),
        ("blake3, one 256-byte buffer each", &b3),
    ] {
        println!("{name:<34} {:>14.0} {:>9.2}x", rate(v), rate(v) / b3r);
    }
}
