//! The project's own fault campaign (issue 21): three real `walraft-node` processes on
//! loopback, concurrent writers each writing with request ids and recording every answer, a
//! seeded schedule of faults, then checks that would see a lost acknowledgement, a doubled or
//! Rejected-yet-applied write, a divergence, a crash or a hang. docs/fault-campaign.md says
//! what it does and why, and quotes the last long run's summary (`docs/campaign-summary.txt`).
//!
//! - The load (`campaign/load.rs`): writers creating uniquely named entities (a create's
//!   entity id is its index), updating and dropping their own; one request id per write.
//! - The faults (`campaign/schedule.rs`, `campaign/faults.rs`): SIGKILL of one or two nodes
//!   (the leader on purpose, often, aimed at a moment when it has shipped entries it has not
//!   written) restarted at once, within or past the election timeout; SIGSTOP of one or two
//!   nodes for 1 to 10 election timeouts; the partition switch; a kill during another node's
//!   pause or partition; a follower killed while a backlog of many frames is written. The nodes
//!   run with the smallest frame (16 KiB) and a snapshot every 500 entries, so snapshots and
//!   catch-up backlogs are many frames long within the first seconds.
//! - The checks (`campaign/observe.rs`, `campaign/checks.rs`): while it runs, any two nodes
//!   seen at one applied index have one digest, the cluster acknowledges writes after every
//!   fault and every returning node catches up; after everything is undone, one applied index
//!   and one digest on every replica; every entity on every replica as its writer's answers
//!   say; every Indeterminate write resolved (applied once or not at all); no process that
//!   ended on its own, no panic, no node fenced, no digest claims that disagreed;
//!   `walraft-node check` CLEAN and `compare` AGREE on the stopped nodes.
//!
//! `campaign_short` (CI) is a fixed seed, at least 30 s of faults and two cycles of every
//! kind. The long run is ignored; the command for the committed 30-minute summary:
//!
//! ```sh
//! WALRAFT_CAMPAIGN_SECS=1800 WALRAFT_CAMPAIGN_SUMMARY=docs/campaign-summary.txt \
//!   cargo test -p wal-raft --test raft campaign_long -- --ignored --nocapture
//! ```
//!
//! Knobs: `WALRAFT_CAMPAIGN_SEED` (both runs; the seed is printed first), `WALRAFT_CAMPAIGN_SECS`
//! (long: seconds of faults, 300 by default), `WALRAFT_CAMPAIGN_WRITERS` (long: 4),
//! `WALRAFT_CAMPAIGN_SUMMARY` (long: write the summary there; a relative path is from the
//! workspace root). A failed run keeps its data directories and node logs and says where.

mod checks;
mod faults;
mod load;
mod observe;
mod parts;
mod report;
mod schedule;
mod summary;

use crate::support;
use crate::support::Cluster;
use load::{Answer, Load, Record};
use report::{report, summarize};
use schedule::{Kind, Scale, Schedule, Step, Timing};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::net::wire::NodeMetrics;

/// The nodes' timing. An election timeout of 0.5-1 s: short enough that faults cost
/// elections often, long enough that a loaded 2-core VM running a debug build does not
/// lose leaders to scheduling alone.
const TIMING: Timing = Timing { heartbeat_ms: 100, election_min_ms: 500, election_max_ms: 1000 };
/// The smallest frame a node accepts (`--max-frame-bytes`): the catalog passes it in seconds.
const FRAME: usize = 16 << 10;
/// A snapshot every 500 entries, 50 kept below it: at the load's pace (hundreds of writes a
/// second) a node away for a second or two comes back below the leader's purge point and
/// needs a snapshot of hundreds of frames.
const SNAPSHOT_EVERY: u64 = 500;
const KEEP_LOGS: u64 = 50;
/// CI's seed and length: 30 s of faults, and at least two cycles (every kind twice, kills
/// four times).
const SHORT_SEED: u64 = 21;
const SHORT_SECS: u64 = 30;
const SHORT_CYCLES: usize = 2;
/// After a fault is undone, some write must be acknowledged within this (else: a hang).
const LIVENESS: Duration = Duration::from_secs(30);
/// A node that came back must have applied what the others held then within this (else: a
/// follower left behind, issue 21 finding 2).
const CATCH_UP: Duration = Duration::from_secs(60);
/// Bound of the final convergence (a hang bound, not a measurement).
const CONVERGE: Duration = Duration::from_secs(180);

/// The committed summary and the docs that quote it, from the workspace root.
const SUMMARY_FILE: &str = "docs/campaign-summary.txt";
const DOCS_FILE: &str = "docs/fault-campaign.md";
/// Figures the docs must quote (more may be).
const QUOTED: [&str; 10] = [
    "seed",
    "fault_phase_s",
    "commit",
    "faults.total",
    "writes.committed",
    "writes.indeterminate",
    "checks.creates_lost",
    "checks.entities_wrong",
    "end.digests",
    "verdict",
];

fn node_flags() -> Vec<String> {
    let t = TIMING;
    [
        ("--heartbeat-ms", t.heartbeat_ms.to_string()),
        ("--election-min-ms", t.election_min_ms.to_string()),
        ("--election-max-ms", t.election_max_ms.to_string()),
        ("--write-timeout-ms", "3000".into()),
        ("--snapshot-every", SNAPSHOT_EVERY.to_string()),
        ("--keep-logs", KEEP_LOGS.to_string()),
        ("--checkpoint-every", "16".into()),
        ("--max-frame-bytes", FRAME.to_string()),
    ]
    .into_iter()
    .flat_map(|(f, v)| [f.to_string(), v])
    .collect()
}

/// One campaign's parameters.
#[derive(Debug)]
struct Run {
    label: &'static str,
    seed: u64,
    secs: u64,
    /// At least this many of every kind of fault, however short `secs`.
    cycles: usize,
    writers: u32,
    scale: Scale,
    summary: Option<PathBuf>,
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The commit of the code under test, `+dirty` when tracked files differ from it (the summary
/// file itself aside).
fn commit() -> String {
    let root = workspace_root();
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".into() };
    let exclude = format!(":!{SUMMARY_FILE}");
    let dirty = git(&["status", "--porcelain", "--untracked-files=no", "--", ".", &exclude])
        .is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}+dirty")
    } else {
        head
    }
}

fn now_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The longest stretch between two acknowledgements within `[from, to]`, and where it started.
fn max_gap(records: &[Record], from: Duration, to: Duration) -> (Duration, Duration) {
    let mut acks: Vec<Duration> = records
        .iter()
        .filter(|r| matches!(r.answer, Answer::Committed { .. }) && r.done_at >= from && r.done_at <= to)
        .map(|r| r.done_at)
        .collect();
    acks.sort();
    let mut prev = from;
    let mut best = (Duration::ZERO, from);
    for a in acks.into_iter().chain([to]) {
        if a - prev > best.0 {
            best = (a - prev, prev);
        }
        prev = a;
    }
    best
}

/// A fault's span in the run, for naming what a long stretch without acknowledgement overlapped.
struct Span {
    n: u64,
    kind: Kind,
    from: Duration,
    to: Duration,
}

/// What the fault phase did, and when it ran (since the campaign's start).
struct Phase {
    steps: Vec<Step>,
    spans: Vec<Span>,
    from: Duration,
    to: Duration,
}

/// What the observer saw over the whole run.
struct Watched {
    max_term: u64,
    leaders: usize,
    largest_snapshot: u64,
    catch_ups: Vec<(u64, Duration)>,
    coincidences: u64,
}

/// What the final checks found.
struct Ending {
    /// The metrics at the common applied index, when the replicas converged.
    end: Option<NodeMetrics>,
    /// Distinct digests among the replicas when they last stood at one applied index.
    digests: Option<usize>,
    entities: checks::Entities,
    panics: usize,
    offline_checks: Vec<String>,
    offline_compare: String,
}

async fn campaign(run: Run) {
    let flags = node_flags();
    let reproduce = match run.label {
        "short" => format!(
            "WALRAFT_CAMPAIGN_SEED={} cargo test -p wal-raft --test raft campaign_short -- --nocapture",
            run.seed
        ),
        _ => format!(
            "WALRAFT_CAMPAIGN_SEED={} WALRAFT_CAMPAIGN_SECS={} WALRAFT_CAMPAIGN_WRITERS={} cargo test -p wal-raft --test raft campaign_long -- --ignored --nocapture",
            run.seed, run.secs, run.writers
        ),
    };
    eprintln!(
        "campaign {}: seed {}, {} s of faults, {} writers; nodes: {}\n  reproduce: {reproduce}",
        run.label,
        run.seed,
        run.secs,
        run.writers,
        flags.join(" ")
    );
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let c = Cluster::start(&flag_refs);
    let t0 = Instant::now();
    let addrs: Vec<String> = (1..=3).map(|i| c.addr(i)).collect();
    let records = Arc::new(Mutex::new(Vec::<Record>::new()));
    let observer = observe::Observer::start(
        (1..=3).map(|i| (i, c.addr(i))).collect(),
        (1..=3).map(|i| (i, c.data(i).join("sm").join(wal_raft::SNAPSHOT_FILE))).collect(),
    );
    let mut inj = faults::Injector::new(c, t0, records.clone(), observer.seen.clone());
    if inj.leader(Duration::from_secs(30)).await.is_none() {
        inj.fail("no leader within 30 s of the start".into());
    }
    let load = Load::start(&addrs, run.writers, run.seed, t0, records.clone());
    let phase = fault_phase(&run, &mut inj, &load, &observer).await;
    inj.log(format!("fault phase over after {} faults; healing everything", phase.steps.len()));
    inj.heal_all().await;
    // The writers stop once the healed cluster acknowledged one of their writes (not after a
    // fixed time: the checks below wait for whatever they need).
    let healed = t0.elapsed();
    acknowledged_after(&mut inj, &load, healed, "everything was healed").await;
    for s in load.finish(Duration::from_secs(40)).await {
        inj.fail(s);
    }
    let records: Vec<Record> = records.lock().unwrap().clone();
    // A node that fenced itself is down (a failure already): the checks hold the others.
    let up: Vec<u64> = (1..=3).filter(|i| !inj.fenced.contains(i)).collect();
    let (end, digests, entities) = live_checks(&mut inj, &up, &records).await;
    let watched = watched(&mut inj, observer).await;
    let (panics, offline_checks, offline_compare) = stopped_checks(&mut inj);
    let ending = Ending { end, digests, entities, panics, offline_checks, offline_compare };
    for kind in ["rejected", "indeterminate"] {
        let why: Vec<&str> = records
            .iter()
            .filter_map(|r| match &r.answer {
                Answer::Rejected(w) | Answer::Indeterminate(w) if r.answer.key() == kind => Some(w.as_str()),
                _ => None,
            })
            .take(3)
            .collect();
        eprintln!("campaign: {kind} answers, the first few: {why:#?}");
    }
    let s = summarize(&run, &flags, &phase, &records, &ending, &watched, &inj);
    report(&run, &reproduce, &s, &mut inj);
}

/// Faults until the run's time is up and its cycles are done, or the first failure. After
/// each: an acknowledgement within [`LIVENESS`], no digests that differ, no node left behind.
async fn fault_phase(
    run: &Run,
    inj: &mut faults::Injector,
    load: &Load,
    observer: &observe::Observer,
) -> Phase {
    let t0 = inj.t0;
    let mut schedule = Schedule::new(run.seed, TIMING, run.scale);
    let mut phase = Phase { steps: Vec::new(), spans: Vec::new(), from: t0.elapsed(), to: Duration::ZERO };
    let start = Instant::now();
    while inj.failures.is_empty()
        && (start.elapsed() < Duration::from_secs(run.secs)
            || phase.steps.len() < run.cycles * schedule::CYCLE)
    {
        let step = schedule.next_step();
        let n = phase.steps.len() as u64 + 1;
        inj.sleep(Duration::from_millis(step.gap_ms)).await;
        let from = t0.elapsed();
        inj.run(n, &step.fault).await;
        let healed = t0.elapsed();
        phase.spans.push(Span { n, kind: step.fault.kind(), from, to: healed });
        phase.steps.push(step);
        acknowledged_after(inj, load, healed, &format!("fault {n} was undone")).await;
        let (diverged, stuck) = {
            let mut o = observer.seen.lock().unwrap();
            let stuck: Vec<observe::CatchUp> =
                o.pending.iter().filter(|p| p.since.elapsed() > CATCH_UP).copied().collect();
            (std::mem::take(&mut o.diverged), stuck)
        };
        for d in diverged {
            inj.fail(format!("the replicas diverged: {d}"));
        }
        for p in stuck {
            inj.fail(format!(
                "node {} has not applied through {} {CATCH_UP:?} after it came back (a follower left behind)",
                p.node, p.target
            ));
        }
    }
    phase.to = t0.elapsed();
    phase
}

/// Waits until a write is acknowledged after `healed` (since the campaign's start), at most
/// [`LIVENESS`]: past it, a failure (a hang after `what`).
async fn acknowledged_after(inj: &mut faults::Injector, load: &Load, healed: Duration, what: &str) {
    let t = Instant::now();
    while !load.acknowledged_after(healed) {
        if t.elapsed() > LIVENESS {
            inj.fail(format!("no write acknowledged within {LIVENESS:?} after {what}"));
            return;
        }
        inj.sleep(Duration::from_millis(50)).await;
    }
}

/// With everything healed and the writers stopped, on the nodes `ids` (those up): one more
/// acknowledged write, the replicas converged past it, every name on every replica, and each
/// node's own view (its Raft running).
async fn live_checks(
    inj: &mut faults::Injector,
    ids: &[u64],
    records: &[Record],
) -> (Option<NodeMetrics>, Option<usize>, checks::Entities) {
    let addrs: &[String] = &ids.iter().map(|i| inj.c.addr(*i)).collect::<Vec<_>>();
    let mut end = None;
    match checks::barrier(addrs).await {
        Ok(at) => match support::agreement(addrs, at, CONVERGE).await {
            Ok(m) => end = Some(m),
            Err(e) => inj.fail(e),
        },
        Err(e) => inj.fail(e),
    }
    let entities = match checks::entities(addrs, records).await {
        Ok(e) => e,
        Err(e) => {
            inj.fail(e);
            checks::Entities::default()
        }
    };
    if entities.failures() > 0 {
        inj.fail(format!("entity check: {entities:#?}"));
    }
    let mut views = Vec::new();
    for &id in ids {
        match support::metrics_at(&inj.c.addr(id), Duration::from_secs(5)).await {
            Some(m) => {
                if let Some(f) = &m.fatal {
                    inj.fail(format!("node {id}: raft stopped: {f}"));
                }
                // A healthy run never fences: a fence means the replicas' digests differed.
                if let Some(f) = &m.fenced {
                    inj.fail(format!("node {id} fenced itself: {f}"));
                }
                // Nor do the voters' digest claims disagree without a majority (since this
                // process started; its output, checked once stopped, covers earlier ones).
                if m.claims.split > 0 {
                    inj.fail(format!("node {id} saw digest claims disagree: {:?}", m.claims));
                }
                views.push(m);
            }
            None => inj.fail(format!("node {id} does not answer after the run")),
        }
    }
    let one_index = views.len() == 3 && views.iter().all(|m| m.last_applied == views[0].last_applied);
    let mut digests: Vec<&str> = views.iter().map(|m| m.digest.as_str()).collect();
    digests.sort();
    digests.dedup();
    (end, one_index.then_some(digests.len()), entities)
}

/// Stops the observer; what it saw, its digest comparisons' failures recorded.
async fn watched(inj: &mut faults::Injector, observer: observe::Observer) -> Watched {
    let seen = observer.seen.clone();
    observer.finish().await;
    let o = seen.lock().unwrap();
    for d in &o.diverged {
        inj.fail(format!("the replicas diverged: {d}"));
    }
    Watched {
        max_term: o.max_term,
        leaders: o.leaders.len(),
        largest_snapshot: o.largest_snapshot,
        catch_ups: o.caught_up.clone(),
        coincidences: o.coincidences,
    }
}

/// Stops the nodes (each must exit 0 on SIGTERM), then: no panic and no disagreeing digest
/// claims in any node's output, and the offline tools' verdicts on the data directories.
fn stopped_checks(inj: &mut faults::Injector) -> (usize, Vec<String>, String) {
    inj.check_exits();
    for (id, status) in inj.c.stop_all() {
        if !status.is_some_and(|s| s.success()) {
            inj.fail(format!("node {id} did not stop cleanly on SIGTERM: {status:?}"));
        }
    }
    let mut panics = 0;
    for id in 1..=3 {
        let p = checks::lines(&inj.c, id, "panicked");
        panics += p.len();
        if !p.is_empty() {
            inj.fail(format!("node {id} panicked: {p:?}"));
        }
        // Every process the node ran (its output file is appended to across restarts).
        let split = checks::lines(&inj.c, id, "DIGEST CLAIMS DISAGREE");
        if !split.is_empty() {
            inj.fail(format!("node {id} saw digest claims disagree: {split:?}"));
        }
    }
    let mut failures = Vec::new();
    let (offline_checks, offline_compare) = checks::offline(&inj.c, &mut failures);
    for f in failures {
        inj.fail(f);
    }
    (panics, offline_checks, offline_compare)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_short() {
    campaign(Run {
        label: "short",
        seed: env_u64("WALRAFT_CAMPAIGN_SEED").unwrap_or(SHORT_SEED),
        secs: SHORT_SECS,
        cycles: SHORT_CYCLES,
        writers: 4,
        scale: Scale::SHORT,
        summary: None,
    })
    .await;
}

/// The long run (module docs): `WALRAFT_CAMPAIGN_SECS` of faults (300 by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: minutes; run with --ignored"]
async fn campaign_long() {
    let seed = env_u64("WALRAFT_CAMPAIGN_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    campaign(Run {
        label: "long",
        seed,
        secs: env_u64("WALRAFT_CAMPAIGN_SECS").unwrap_or(300),
        cycles: 1,
        writers: env_u64("WALRAFT_CAMPAIGN_WRITERS").map_or(4, |w| w as u32),
        scale: Scale::LONG,
        summary: std::env::var_os("WALRAFT_CAMPAIGN_SUMMARY").map(PathBuf::from),
    })
    .await;
}
