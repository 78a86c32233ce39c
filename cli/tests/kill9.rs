//! Issue 7, real-process crash check: a real writer process is killed with SIGKILL at random
//! moments, and every LSN it acknowledged as durable must be in the log afterwards.
//!
//! The test binary re-executes itself as the child (`kill9_child_role`, selected by the
//! `WAL_KILL9_CHILD` environment variable). The child opens the log (recovering what the last
//! kill left), starts the I/O thread ([`wal::AsyncWal`], io_uring or pwrite + fdatasync,
//! alternating by round) and runs four writers that each keep a window of eight durable appends
//! in flight, and a fifth that waits for each entry with `append_wait` (driving the round
//! itself when it can). Every payload is a function of its LSN ([`content`]). When a ticket resolves
//! durable, the child writes `ack <lsn>` to its stdout, a pipe the parent reads. The parent kills
//! it at a seeded random moment (half the rounds after 0 to 400 ms, so some kills land during
//! the open and its tail cut and most during appends and rotations; half right after the
//! parent has read the n-th acknowledgement, n random, when the child is surely mid-append), then
//!
//! - runs the `walcheck verify` binary on the directory: OK or TORN_TAIL (exit 0 or 1), never
//!   CORRUPT_TAIL or CORRUPT;
//! - opens the log read-only and replays it: the LSNs are dense from the first LSN, every
//!   payload is [`content`] of its LSN, and every LSN acknowledged in this or an earlier round is
//!   there;
//!
//! and starts the next round on the same directory, so recovery after a kill is exercised again
//! and again and appends carry on after each reopen.
//!
//! What this proves and what it does not: a process kill loses the process, not the page
//! cache. So it shows that the real process acknowledges only entries it has handed to the
//! kernel, that recovery after a kill at any moment of the real I/O path (a write in the ring,
//! a rotation, a background zero-fill, an open cutting a torn tail) gives a clean prefix, and
//! that appends continue with dense LSNs. It cannot show that an acknowledgement waited for
//! the fdatasync (docs/invariants.md I3): an entry acknowledged after its write but before its sync
//! survives a kill. That is shown in simulation, where a crash drops what was never synced
//! (`wal/tests/engine/io_thread/`, `wal/tests/engine/crash.rs`; the `mutant-ack-before-sync` mutant in
//! `tools/mutants.sh` is caught there and survives here, while `mutant-ack-before-write`, which
//! acknowledges before the write, is caught here).
//!
//! `WAL_KILL9_SEED=n` replays a seed's choices (printed at the start and in every failure): the
//! backend and the kill time or acknowledgement count of every round; where the child stands at
//! that moment depends on the machine's timing, so a replay is close, not byte-identical.
//! `WAL_KILL9_ROUNDS=n` changes the number of rounds (20).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use verifier::report::{EXIT_INCOMPLETE_CREATE, EXIT_USAGE};
use wal::{AsyncOptions, AsyncWal, Backend, Durability, Options, Payload, Wal};
use wal_sim::Rng;

const SEG: u32 = 64 * 1024;
const CHILD_ENV: &str = "WAL_KILL9_CHILD";
const BACKEND_ENV: &str = "WAL_KILL9_BACKEND";
/// The child stops by itself after this long, should the parent never kill it.
const CHILD_MAX_RUN: Duration = Duration::from_secs(20);

/// The payload of the entry at `lsn`: 16 to 415 bytes, the LSN first, then bytes that depend
/// on the LSN and the position.
fn content(lsn: u64) -> Vec<u8> {
    let len = 16 + (lsn.wrapping_mul(37) % 400) as usize;
    let mut p = lsn.to_le_bytes().to_vec();
    p.extend((8..len).map(|i| (lsn.wrapping_mul(31).wrapping_add(i as u64) % 251) as u8));
    p
}

fn opts(backend: Backend, read_only: bool) -> Options {
    Options { segment_len_bytes: SEG, backend, read_only, ..Options::default() }
}

/// One line to the parent, written straight to the pipe (not through the test harness's capture).
fn say(line: String) {
    let mut out = std::io::stdout().lock();
    // A closed pipe means the parent is gone: nothing left to report to.
    let _ = out.write_all(line.as_bytes()).and_then(|_| out.flush());
}

/// The child's role; a plain test run (without `WAL_KILL9_CHILD`) returns at once.
#[test]
fn kill9_child_role() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let backend = match std::env::var(BACKEND_ENV).as_deref() {
        Ok("uring") => Backend::Uring,
        _ => Backend::Portable,
    };
    let (wal, report) = Wal::open(Path::new(&dir), opts(backend, false)).expect("child: open");
    say(format!("open next_lsn={} verdict={:?} cut={:?}\n", wal.next_lsn().0, report.verdict, report.cut));
    let epoch = wal.epoch();
    let log = Arc::new(AsyncWal::start(wal, AsyncOptions::default()).expect("child: start"));
    // Appends are taken one at a time under this lock, so each writer knows the LSN its
    // payload is for before it appends; the waits overlap, so syncs are shared.
    let order = Arc::new(Mutex::new(()));
    let started = Instant::now();
    let mut writers: Vec<_> = (0..4)
        .map(|_| {
            let (log, order) = (log.clone(), order.clone());
            std::thread::spawn(move || {
                let mut window = VecDeque::new();
                while started.elapsed() < CHILD_MAX_RUN {
                    if window.len() < 8 {
                        let _turn = order.lock().unwrap_or_else(|e| e.into_inner());
                        let lsn = log.next_lsn().0;
                        let t = log.append(epoch, content(lsn), Durability::Durable).expect("child: append");
                        assert_eq!(t.lsn.0, lsn, "child: the ticket's LSN is the one the payload is for");
                        window.push_back(t);
                        continue;
                    }
                    if let Some(t) = window.pop_front() {
                        let lsn = t.wait().expect("child: a durable append failed");
                        say(format!("ack {}\n", lsn.0));
                    }
                }
            })
        })
        .collect();
    // A fifth writer waits for each entry with `append_wait`, which runs the round (write,
    // fdatasync, acknowledge) on this thread whenever the I/O thread is idle.
    let (log5, order5) = (log.clone(), order.clone());
    writers.push(std::thread::spawn(move || {
        while started.elapsed() < CHILD_MAX_RUN {
            let t = {
                let _turn = order5.lock().unwrap_or_else(|e| e.into_inner());
                let lsn = log5.next_lsn().0;
                let t = log5.append_wait(epoch, Payload::One(content(lsn))).expect("child: append_wait");
                assert_eq!(t.lsn.0, lsn, "child: the ticket's LSN is the one the payload is for");
                t
            };
            let lsn = t.wait().expect("child: a durable append_wait failed");
            say(format!("ack {}\n", lsn.0));
        }
    }));
    for w in writers {
        w.join().expect("child: writer panicked");
    }
}

/// What a killed child reported.
#[derive(Default)]
struct Reported {
    acks: Vec<u64>,
    open: Option<String>,
}

/// When the parent kills the child.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// After this long.
    After(Duration),
    /// As soon as the parent has read this many acknowledgements (at the latest after 2 s):
    /// the child is then certainly in the middle of appending.
    AtAck(usize),
}

fn run_child(dir: &Path, backend: &str, kill: Kill) -> (Reported, std::process::ExitStatus) {
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["kill9_child_role", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env(BACKEND_ENV, backend)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning the child");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = Reported::default();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("ack ") {
                r.acks.push(n.trim().parse().expect("an ack line holds an LSN"));
                let _ = tx.send(());
            } else if let Some(i) = line.find("open next_lsn=") {
                // The harness may print its own words ahead of the child's first line.
                r.open = line.get(i..).map(str::to_string);
            }
        }
        r
    });
    match kill {
        Kill::After(delay) => std::thread::sleep(delay),
        Kill::AtAck(n) => {
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut seen = 0;
            while seen < n {
                let left = deadline.saturating_duration_since(Instant::now());
                if rx.recv_timeout(left).is_err() {
                    break;
                }
                seen += 1;
            }
        }
    }
    // Child::kill sends SIGKILL.
    let _ = child.kill();
    let status = child.wait().expect("waiting for the child");
    // The pipe closes when the child is gone; every complete line it wrote is read.
    let reported = reader.join().expect("reader thread");
    (reported, status)
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_entry() {
    let seed = std::env::var("WAL_KILL9_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64)
    });
    let rounds: u32 = std::env::var("WAL_KILL9_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    println!("kill9: seed {seed} (WAL_KILL9_SEED={seed} replays the choices), {rounds} rounds");
    // splitmix64: the seeded choices of the parent.
    let mut rng = Rng::splitmix64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let probe = tempfile::tempdir().expect("tempdir");
    let uring = wal::storage::UringStorage::new(probe.path(), true).is_ok();
    let t0 = Instant::now();
    let (mut max_acked, mut total_acks, mut torn, mut cut, mut early) = (None::<u64>, 0usize, 0, 0, 0);
    let mut entries = 0;
    // The first round whose child finished opening (creating) the log.
    let mut created = None;
    for round in 0..rounds {
        let backend = if uring && round % 2 == 1 { "uring" } else { "portable" };
        // Half the kills come at a random time (one in five of those early, while the child is
        // still opening or recovering), half right after a random acknowledgement.
        let kill = match rng.below(10) {
            0 => Kill::After(Duration::from_millis(rng.below(30))),
            1..=4 => Kill::After(Duration::from_millis(30 + rng.below(370))),
            _ => Kill::AtAck(1 + rng.below(3000) as usize),
        };
        let ctx = format!("seed {seed}, round {round}, backend {backend}, kill {kill:?}");
        let (rep, status) = run_child(dir, backend, kill);
        assert_eq!(status.signal(), Some(9), "{ctx}: the child ended before the kill: {status}");
        if rep.open.as_deref().is_some_and(|o| !o.contains("cut=None")) {
            cut += 1;
        }
        if rep.open.is_none() {
            early += 1;
        } else {
            created.get_or_insert(round);
        }
        total_acks += rep.acks.len();
        if let Some(&m) = rep.acks.iter().max() {
            max_acked = max_acked.max(Some(m));
        }

        // walcheck: OK or TORN_TAIL, never a damage that could be acknowledged data.
        let o = Command::new(env!("CARGO_BIN_EXE_walcheck"))
            .args(["verify", dir.to_str().expect("utf-8 path")])
            .output()
            .expect("running walcheck");
        let code = o.status.code().unwrap_or(-1);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        if created.is_none() && code == EXIT_INCOMPLETE_CREATE && err.contains("interrupted creation") {
            // Killed while creating the log, before any open finished: there is no log yet
            // and nothing was acknowledged; the next child's open creates it again.
            println!("kill9: round {round:2} {backend:8} {kill:?}: killed while creating the log");
            early += 1;
            continue;
        }
        if created.is_none() && code == EXIT_USAGE && err.contains("no log here") {
            // Killed before the child began to create the log (a kill a millisecond after the
            // spawn): the directory holds nothing, and nothing can have been acknowledged.
            assert!(rep.acks.is_empty(), "{ctx}: acknowledgements without a log: {:?}", rep.acks);
            println!("kill9: round {round:2} {backend:8} {kill:?}: killed before creating the log");
            early += 1;
            continue;
        }
        assert!(
            code == 0 || code == 1,
            "{ctx}: walcheck verify exited {code} (OK or TORN_TAIL expected)\n{out}\n{err}"
        );
        assert!(!out.contains("CORRUPT"), "{ctx}: walcheck verify said CORRUPT\n{out}");
        torn += (code == 1) as u32;

        // The recovered log: a dense prefix, every payload right, every acknowledgement there.
        let (log, _) = Wal::open(dir, opts(Backend::Portable, true))
            .unwrap_or_else(|e| panic!("{ctx}: read-only open failed: {e}"));
        let got = log
            .replay()
            .and_then(|r| r.collect_entries())
            .unwrap_or_else(|e| panic!("{ctx}: replay failed: {e}"));
        drop(log);
        for (i, (lsn, payload)) in got.iter().enumerate() {
            assert_eq!(*lsn, 1 + i as u64, "{ctx}: the recovered LSNs are not dense from 1");
            assert!(*payload == content(*lsn), "{ctx}: the payload at LSN {lsn} is not its content");
        }
        let last = got.last().map(|e| e.0);
        if let Some(m) = max_acked {
            assert!(
                last.is_some_and(|l| l >= m),
                "{ctx}: LSN {m} was acknowledged durable but the log ends at {last:?}"
            );
        }
        entries = got.len();
        println!(
            "kill9: round {round:2} {backend:8} {kill:?}: {:5} acks, log ends at {:?}, walcheck exit {code}, {}",
            rep.acks.len(),
            last,
            rep.open.as_deref().unwrap_or("killed before the open finished")
        );
    }
    println!(
        "kill9: {rounds} rounds in {:.1} s: {total_acks} acknowledgements checked, {entries} entries in the log, \
         {torn} torn tails seen by walcheck, {cut} cut at the next open, {early} kills before the open finished",
        t0.elapsed().as_secs_f64()
    );
    assert!(total_acks > 0, "seed {seed}: no round acknowledged anything: the test checked nothing");
}
