//! A job-scheduler controller on the commit pipeline: job submission is a command, worker
//! reports (started, finished, failed, resource usage) are facts, and the order
//! pre-hooks → commit → apply → notify runs end to end. A job array is one atomic user batch.
//!
//! ```sh
//! cargo run -p wal-state --example job_controller            # in a temporary directory
//! cargo run -p wal-state --example job_controller -- <DIR>   # or in <DIR> (run it twice: restart)
//! ```
//!
//! It submits jobs and a job array, lets two worker threads report on them, closes, reopens
//! (the restart replays the log through the same apply function and checks every checkpoint),
//! and prints what the restart found.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use wal_state::pipeline::{AfterHook, Hooks, Notice, Pipeline, PipelineOptions, PreHook, Proposal};
use wal_state::{Committed, EntryKind, Outcome, SetDigest, StateMachine};

#[derive(Clone, Debug, PartialEq, Eq)]
enum JobState {
    Queued,
    Running { worker: String },
    Finished { exit: i32 },
    Failed { reason: String },
}

#[derive(Clone, Debug)]
struct Job {
    name: String,
    state: JobState,
    cpu_ms: u64,
    version: u64,
}

impl Job {
    /// The canonical form the digest hashes: id, version, name, state, usage.
    fn canonical(&self, id: u64) -> Vec<u8> {
        format!("{id}\0{}\0{}\0{:?}\0{}", self.version, self.name, self.state, self.cpu_ms).into_bytes()
    }
}

/// The controller's authoritative state: the job table.
#[derive(Debug, Default)]
struct Jobs {
    jobs: BTreeMap<u64, Job>,
    digest: SetDigest,
}

impl Jobs {
    fn put(&mut self, id: u64, new: Job) {
        if let Some(old) = self.jobs.get(&id) {
            self.digest.remove(&old.canonical(id));
        }
        self.digest.insert(&new.canonical(id));
        self.jobs.insert(id, new);
    }

    fn transition(&mut self, id: u64, f: impl FnOnce(&mut Job) -> Result<(), String>) -> Outcome {
        let Some(job) = self.jobs.get(&id) else { return Outcome::Refused(format!("no job {id}")) };
        let mut job = job.clone();
        if let Err(why) = f(&mut job) {
            return Outcome::Refused(why);
        }
        job.version += 1;
        self.put(id, job);
        Outcome::Done(Vec::new())
    }
}

impl StateMachine for Jobs {
    const VERSION: u32 = 1;

    fn apply(&mut self, e: &Committed<'_>) -> Outcome {
        let text = String::from_utf8_lossy(e.body);
        let words: Vec<&str> = text.split(' ').collect();
        let id = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        match (words.first().copied(), id(1)) {
            (Some("submit"), Some(id)) => {
                if self.jobs.contains_key(&id) {
                    return Outcome::Refused(format!("job {id} exists"));
                }
                let name = words.get(2).unwrap_or(&"").to_string();
                self.put(id, Job { name, state: JobState::Queued, cpu_ms: 0, version: 1 });
                Outcome::Done(format!("job {id} queued at LSN {}", e.lsn).into_bytes())
            }
            (Some("started"), Some(id)) => {
                let worker = words.get(2).unwrap_or(&"?").to_string();
                self.transition(id, |j| match j.state {
                    JobState::Queued => {
                        j.state = JobState::Running { worker };
                        Ok(())
                    }
                    ref s => Err(format!("job {id} cannot start from {s:?}")),
                })
            }
            (Some("finished"), Some(id)) => {
                let exit = words.get(2).and_then(|w| w.parse().ok()).unwrap_or(-1);
                self.transition(id, |j| match j.state {
                    JobState::Running { .. } => {
                        j.state = if exit == 0 {
                            JobState::Finished { exit }
                        } else {
                            JobState::Failed { reason: format!("exit {exit}") }
                        };
                        Ok(())
                    }
                    ref s => Err(format!("job {id} cannot finish from {s:?}")),
                })
            }
            (Some("usage"), Some(id)) => {
                let ms = words.get(2).and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
                self.transition(id, |j| {
                    j.cpu_ms += ms;
                    Ok(())
                })
            }
            _ => Outcome::Refused(format!("not a job command: {text}")),
        }
    }

    fn digest(&self) -> SetDigest {
        self.digest
    }

    fn export(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for (id, j) in &self.jobs {
            let state = match &j.state {
                JobState::Queued => "queued".to_string(),
                JobState::Running { worker } => format!("running:{worker}"),
                JobState::Finished { exit } => format!("finished:{exit}"),
                JobState::Failed { reason } => format!("failed:{}", reason.replace(' ', "_")),
            };
            writeln!(out, "{id} {} {} {} {state}", j.version, j.cpu_ms, j.name)?;
        }
        Ok(())
    }

    fn import(input: &[u8]) -> Result<Self, String> {
        let mut jobs = Jobs::default();
        for line in std::str::from_utf8(input).map_err(|e| e.to_string())?.lines() {
            let w: Vec<&str> = line.split(' ').collect();
            let [id, version, cpu, name, state] = w.as_slice() else {
                return Err(format!("bad line {line}"));
            };
            let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
            let state = match state.split_once(':') {
                None if *state == "queued" => JobState::Queued,
                Some(("running", wk)) => JobState::Running { worker: wk.to_string() },
                Some(("finished", x)) => JobState::Finished { exit: x.parse().map_err(|_| "bad exit")? },
                Some(("failed", r)) => JobState::Failed { reason: r.replace('_', " ") },
                _ => return Err(format!("bad state {state}")),
            };
            let job = Job { name: name.to_string(), state, cpu_ms: num(cpu)?, version: num(version)? };
            jobs.put(num(id)?, job);
        }
        Ok(jobs)
    }
}

fn hooks(events: Arc<Mutex<Vec<String>>>) -> Hooks<Jobs> {
    let mut h = Hooks::default();
    // Pre-hook: validation only, against a read-only view; nothing is logged if it says no.
    h.pre.push(Box::new(|jobs: &Jobs, p: &Proposal<'_>| {
        if p.kind == EntryKind::Command && jobs.jobs.len() >= 10_000 {
            return Err("the queue is full".into());
        }
        if p.body.is_empty() {
            return Err("empty entry".into());
        }
        Ok(())
    }) as PreHook<Jobs>);
    // After-hook: the scheduler push, on committed and applied state only.
    h.after.push(Box::new(move |jobs: &Jobs, n: &Notice<'_>| {
        let text = String::from_utf8_lossy(n.body);
        if let Some(id) = text.strip_prefix("submit ").and_then(|r| r.split(' ').next()?.parse::<u64>().ok())
        {
            if jobs.jobs.get(&id).is_some_and(|j| j.state == JobState::Queued) {
                events.lock().unwrap().push(format!("scheduler: dispatch job {id} (LSN {})", n.lsn));
            }
        }
    }) as AfterHook<Jobs>);
    h
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let opts = PipelineOptions { checkpoint_every_entries: 8, ..PipelineOptions::default() };
    let (p, report) = Pipeline::open(&dir, opts.clone(), hooks(events.clone()), Jobs::default)?;
    println!(
        "opened {}: CRC verdict {:?}, {} entries replayed",
        dir.display(),
        report.open.verdict,
        report.compare.entries_applied
    );
    let base = p.read(|j| j.jobs.keys().next_back().copied().unwrap_or(0)) + 1;

    // Commands: the caller waits for commit and the apply outcome (the client reply).
    for (i, name) in ["etl", "train", "report"].iter().enumerate() {
        let id = base + i as u64;
        let done = p.submit(format!("submit {id} {name}").as_bytes(), Some(id))?.wait()?;
        println!("client: {}", reply(&done.applied));
    }
    // A job array: one atomic user batch.
    let array: Vec<Vec<u8>> =
        (0..4).map(|i| format!("submit {} shard-{i}", base + 10 + i).into_bytes()).collect();
    let items: Vec<(&[u8], Option<u64>)> = array.iter().map(|b| (b.as_slice(), None)).collect();
    for pr in p.submit_batch(&items)? {
        pr.wait()?;
    }
    println!("client: job array of 4 committed as one batch");

    // Facts from two workers: nobody waits; they are applied only after commit.
    let p = Arc::new(p);
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let p = p.clone();
            std::thread::spawn(move || -> wal::Result<()> {
                for id in (base..base + 3).chain(base + 10..base + 14).filter(|id| id % 2 == w) {
                    p.report_fact(format!("started {id} worker-{w}").as_bytes(), None)?;
                    p.report_fact(format!("usage {id} {}", 100 + id).as_bytes(), None)?;
                    p.report_fact(format!("finished {id} {}", (id % 3 == 0) as i32).as_bytes(), None)?;
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread")?;
    }
    // A command after the facts resolves after them, so the table below includes them.
    let refused = p.submit(format!("submit {base} duplicate").as_bytes(), None)?.wait()?;
    println!("client: resubmitting job {base}: {}", reply(&refused.applied));
    for e in events.lock().unwrap().iter() {
        println!("{e}");
    }
    let (applied, cp) = p.applied();
    println!("online: applied through {:?}, {} jobs, digest {}", applied, cp.entity_count, hex(&cp.digest));
    Arc::try_unwrap(p).map_err(|_| "pipeline still shared")?.close()?;

    // Restart: the same apply function rebuilds the table; every checkpoint is compared.
    let (p, report) = Pipeline::open(&dir, opts, hooks(Arc::default()), Jobs::default)?;
    let c = &report.compare;
    let state = match (&c.divergence, &report.fenced) {
        (None, None) => format!(
            "CLEAN through LSN {:?} ({} checkpoints checked)",
            c.verified_through.map(|l| l.0),
            c.checkpoints_checked
        ),
        (_, why) => format!("DIVERGENT: {why:?}"),
    };
    println!("restart: CRC verdict {:?}, state {state}", report.open.verdict);
    let (applied2, cp2) = p.applied();
    assert_eq!((applied2, cp2), (applied, cp), "the restart rebuilt a different state");
    p.read(|jobs| {
        for (id, j) in jobs.jobs.range(base..) {
            println!("  job {id:>3} {:<8} v{} {:?} cpu {} ms", j.name, j.version, j.state, j.cpu_ms);
        }
    });
    p.close()?;
    Ok(())
}

/// The client reply for an apply outcome.
fn reply(a: &wal_state::Applied) -> String {
    match a {
        wal_state::Applied::Outcome(Outcome::Done(r)) => String::from_utf8_lossy(r).into_owned(),
        wal_state::Applied::Outcome(Outcome::Refused(why)) => format!("refused: {why}"),
        wal_state::Applied::Duplicate { first_lsn } => format!("duplicate of LSN {first_lsn}"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().take(8).map(|x| format!("{x:02x}")).collect::<String>() + "…"
}
