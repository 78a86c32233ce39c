//! A program written by a reader who had only the README (issue 25's test of the front door):
//! three writer threads append and wait for durability, the log is reopened, and every
//! acknowledged LSN must replay with the bytes its thread wrote. It compiled and ran on the first
//! try; what the reader had to guess went back into the README. CI runs it like every example.
//!
//! `cargo run -p wal --example from_readme`

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Options, Wal};

const THREADS: usize = 3;
const PER_THREAD: usize = 50;

type BoxErr = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let dir = std::env::temp_dir().join(format!("fresh-wal-{}-{}", std::process::id(), nanos));

    let (log, _report) = AsyncWal::open(&dir, Options::default(), AsyncOptions::default())?;
    let log = Arc::new(log);

    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || -> Result<Vec<(_, Vec<u8>)>, BoxErr> {
                let mut given = Vec::with_capacity(PER_THREAD);
                for i in 0..PER_THREAD {
                    let text = format!("writer {t} / record {i}: hello from thread {t}").into_bytes();
                    let ticket = log.append(Epoch(0), text.clone(), Durability::Durable)?;
                    let lsn = ticket.wait()?;
                    given.push((lsn, text));
                }
                Ok(given)
            })
        })
        .collect();

    let mut expected = HashMap::new();
    for w in writers {
        let given = w.join().expect("writer thread").map_err(|e| e.to_string())?;
        for (lsn, text) in given {
            if expected.insert(lsn, text).is_some() {
                return Err(format!("LSN {lsn} was given to two appends").into());
            }
        }
    }
    log.close()?;

    let (log, _report) = Wal::open(&dir, Options::default())?;
    let mut replayed = 0usize;
    let mut matched = 0usize;
    for entry in log.replay()?.entries() {
        let (lsn, payload) = entry?;
        replayed += 1;
        if let Some(want) = expected.get(&lsn) {
            if payload[..] != want[..] {
                return Err(format!("LSN {lsn}: replayed bytes differ from what was written").into());
            }
            matched += 1;
        }
    }
    log.close()?;

    if matched != expected.len() {
        return Err(
            format!("only {matched} of {} acknowledged LSNs were found on replay", expected.len()).into()
        );
    }

    std::fs::remove_dir_all(&dir)?;
    println!(
        "ok: {THREADS} writers x {PER_THREAD} durable appends; {} LSNs acknowledged, {replayed} replayed, all {matched} matched byte for byte",
        expected.len()
    );
    Ok(())
}
