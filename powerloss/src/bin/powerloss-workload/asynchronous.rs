//! `async`: the I/O thread ([`wal::AsyncWal`]) with several writers sharing its group commits.
//!
//! Two phases of 360 entries, each written by four threads that keep a window of four
//! `Durable` tickets in flight and print an `entry` line when a ticket resolves durable; one
//! append in eight is `Written` only (never acknowledged, present or not). Appends are taken
//! one at a time under a lock so that each writer knows the LSN its payload is for (the
//! payload is a function of it); the waits overlap, so syncs are shared. Between the phases: a
//! purge through the I/O thread, a clean close, a reopen (recovery of a cleanly closed log with
//! recycled spares), an epoch advance on the synchronous handle, and a new I/O thread; after
//! the second phase another purge and a close. The first open creates the log; 64 KiB
//! segments rotate some ten times per phase.

use crate::acks::{content, seeded, Ack, Acker, Rng};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Lsn, Options, Ticket, Wal};

const WRITERS: u64 = 4;
const WINDOW: usize = 4;
const PER_PHASE: u64 = 360;
/// The longest a ticket may take to resolve before the run gives up.
const TICKET_TIMEOUT: Duration = Duration::from_secs(20);

fn options() -> Options {
    Options { segment_len_bytes: crate::SEGMENT_LEN, ..Options::default() }
}

/// What the writers of one phase share: the log, the append order and how many are left.
struct Phase {
    log: AsyncWal,
    epoch: Epoch,
    /// Held while taking an LSN and appending; the count of appends still to make.
    left: Mutex<u64>,
}

fn wait(t: &Ticket) -> Result<u64, String> {
    match t.wait_timeout(TICKET_TIMEOUT) {
        Some(Ok(lsn)) => Ok(lsn.0),
        Some(Err(f)) => Err(format!("a durable append failed: {f:?}")),
        None => Err(format!("a ticket did not resolve in {TICKET_TIMEOUT:?}")),
    }
}

fn writer(p: &Phase, seed: u64, writer: u64, acker: &Acker) -> Result<(), String> {
    let mut rng = seeded(seed ^ writer.wrapping_mul(0x1000_0001));
    let mut window: VecDeque<Ticket> = VecDeque::new();
    loop {
        if window.len() < WINDOW {
            let mut left = p.left.lock().unwrap_or_else(|e| e.into_inner());
            if *left > 0 {
                *left -= 1;
                let lsn = p.log.next_lsn().0;
                let durability = if rng.below(8) == 0 { Durability::Written } else { Durability::Durable };
                let t = p
                    .log
                    .append(p.epoch, content(seed, lsn, 0), durability)
                    .map_err(|e| format!("append: {e}"))?;
                if t.lsn.0 != lsn {
                    return Err(format!("the ticket's LSN {} is not the {lsn} the payload is for", t.lsn.0));
                }
                drop(left);
                if durability == Durability::Durable {
                    window.push_back(t);
                }
                continue;
            }
        }
        let Some(t) = window.pop_front() else { return Ok(()) };
        let lsn = wait(&t)?;
        acker.say(&Ack::Entry { lsn, gen: 0, seed })?;
    }
}

fn phase(log: AsyncWal, seed: u64, acker: &Acker) -> Result<AsyncWal, String> {
    let p = Phase { epoch: log.epoch(), log, left: Mutex::new(PER_PHASE) };
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let shared = &p;
        let handles: Vec<_> = (0..WRITERS).map(|w| s.spawn(move || writer(shared, seed, w, acker))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into()))).collect()
    });
    results.into_iter().collect::<Result<(), String>>()?;
    Ok(p.log)
}

fn purge(log: &AsyncWal, rng: &mut Rng, acker: &Acker) -> Result<(), String> {
    let below = log.next_lsn().0.saturating_sub(80 + rng.below(80)).max(1);
    acker.say(&Ack::PurgeBegin { below })?;
    log.purge_before(Lsn(below)).map_err(|e| format!("purge_before {below}: {e}"))?;
    acker.say(&Ack::Purge { below })
}

pub fn run(dir: &Path, seed: u64, acker: &Acker) -> Result<(), String> {
    let mut rng = seeded(seed);
    let (wal, _) = Wal::open(dir, options()).map_err(|e| format!("open {}: {e}", dir.display()))?;
    let log = AsyncWal::start(wal, AsyncOptions::default()).map_err(|e| format!("start: {e}"))?;
    let log = phase(log, seed, acker)?;
    purge(&log, &mut rng, acker)?;
    log.close().map_err(|e| format!("close: {e}"))?;

    let (mut wal, _) = Wal::open(dir, options()).map_err(|e| format!("reopen: {e}"))?;
    let epoch = Epoch(wal.epoch().0 + 1 + rng.below(3));
    wal.advance_epoch(epoch).and_then(|()| wal.sync()).map_err(|e| format!("advance_epoch: {e}"))?;
    acker.say(&Ack::Epoch { epoch: epoch.0 })?;
    let log = AsyncWal::start(wal, AsyncOptions::default()).map_err(|e| format!("restart: {e}"))?;
    let log = phase(log, seed, acker)?;
    purge(&log, &mut rng, acker)?;
    log.close().map_err(|e| format!("close: {e}"))
}
