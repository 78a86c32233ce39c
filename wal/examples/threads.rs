//! A controller's use of the log, start to finish, with nothing but the crate root: open the log
//! with its writer thread, append from several threads and wait for durable acknowledgements,
//! close, reopen and replay.
//!
//! `cargo run -p wal --example threads [-- DIR]` (a temporary directory by default).

use std::error::Error;
use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, CrcVerdict, Durability, Epoch, Options, Wal};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 250;

fn main() -> Result<(), Box<dyn Error>> {
    let tmp = tempfile::tempdir()?;
    let dir = std::env::args().nth(1).map_or_else(|| tmp.path().to_path_buf(), Into::into);
    // Small segments so that a short run rotates; the default is 64 MiB.
    let opts = Options { segment_len_bytes: 1 << 20, ..Options::default() };

    // Open (creating it) and start the writer thread in one call.
    let (log, report) = AsyncWal::open(&dir, opts.clone(), AsyncOptions::default())?;
    println!("opened {}: {} (next LSN {})", dir.display(), report.verdict, log.next_lsn());
    let log = Arc::new(log);

    // Each thread appends its commands and waits for each to be durable: the ticket resolves
    // only after the fdatasync that covers the entry completed. Concurrent appends share syncs.
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || -> Result<Vec<u64>, Box<dyn Error + Send + Sync>> {
                let mut lsns = Vec::new();
                for i in 0..PER_THREAD {
                    let command = format!("thread {t} sets key {i}").into_bytes();
                    // An `Err` here is a refusal (nothing was logged); a failed ticket says
                    // whether the entry may still be in the log (Indeterminate) or not (Rejected).
                    let ticket = log.append(Epoch(0), command, Durability::Durable)?;
                    lsns.push(ticket.wait()?.0);
                }
                Ok(lsns)
            })
        })
        .collect();
    let mut acknowledged = 0;
    for w in workers {
        acknowledged += w.join().map_err(|_| "a writer thread panicked")?.map_err(|e| e.to_string())?.len();
    }
    let stats = log.stats();
    println!("{acknowledged} entries acknowledged durable with {} fdatasyncs", stats.syncs);
    log.close()?;

    // Reopen with the synchronous handle and replay every entry.
    let (log, report) = Wal::open(&dir, opts)?;
    assert_eq!(report.verdict, CrcVerdict::Ok);
    let mut replayed = 0;
    for entry in log.replay()?.entries() {
        let (lsn, payload) = entry?;
        if replayed < 2 {
            println!("LSN {lsn}: {}", String::from_utf8_lossy(&payload));
        }
        replayed += 1;
    }
    println!("replayed {replayed} entries");
    assert_eq!(replayed, acknowledged, "every acknowledged entry is in the log");
    log.close()?;
    Ok(())
}
