//! The campaign's load: concurrent writers, each a [`Client`] of all three nodes, each logical
//! write with one request id (the client keeps it on its retries), every answer recorded.
//!
//! A writer owns the entities it creates (names unique to it): nobody else updates or drops
//! them, so what each entity must look like at the end follows from its writer's answers alone
//! ([`expect`]). A writer stops touching an entity once an answer about it was Indeterminate
//! (its version is then unknown), so every Indeterminate write is the last one on its entity
//! and the final state says whether it applied ([`resolve`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::wire::{EntityView, WriteReply};
use wal_raft::Response;

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Create,
    Update,
    Drop,
}

impl Op {
    pub fn key(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Update => "update",
            Op::Drop => "drop",
        }
    }
}

/// A write's final answer, as the client gave it.
#[derive(Clone, Debug)]
pub enum Answer {
    Committed { index: u64, outcome: Response },
    Rejected(String),
    Indeterminate(String),
}

impl Answer {
    pub fn key(&self) -> &'static str {
        match self {
            Answer::Committed { .. } => "committed",
            Answer::Rejected(_) => "rejected",
            Answer::Indeterminate(_) => "indeterminate",
        }
    }
}

/// One logical write and its answer.
#[derive(Clone, Debug)]
pub struct Record {
    pub writer: u32,
    pub op: Op,
    pub name: String,
    /// The entity's id and version the writer expected (updates and drops).
    pub target: Option<(u64, u64)>,
    /// The encoded command's length.
    pub bytes: usize,
    /// Sent a second time under its request id after an Indeterminate answer; `answer` is
    /// the second one's (Indeterminate still, when that one was Rejected: the first may apply).
    pub retried: bool,
    pub answer: Answer,
    /// When the answer came, since the campaign started.
    pub done_at: Duration,
}

/// An entity's state as the checks see it: absent, or live with its id (unknown for a create
/// whose answer was Indeterminate) and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Possible {
    Absent,
    Live { id: Option<u64>, version: u64 },
}

impl Possible {
    /// Whether a lookup's result is this state.
    pub fn matches(&self, seen: &Option<EntityView>) -> bool {
        match (self, seen) {
            (Possible::Absent, None) => true,
            (Possible::Live { id, version }, Some(e)) => {
                id.is_none_or(|i| i == e.id) && *version == e.version
            }
            _ => false,
        }
    }
}

/// What the writes recorded for one name say about it at the end: the states it may be in
/// (one, or two after an Indeterminate), and what in the answers was already wrong.
#[derive(Clone, Debug)]
pub struct Expected {
    pub possible: Vec<Possible>,
    pub problems: Vec<String>,
}

/// The state after `op` applies to `p` (`None`: the catalog would refuse it).
fn applied(op: Op, target: Option<(u64, u64)>, index: Option<u64>, p: Possible) -> Option<Possible> {
    match (op, p, target) {
        (Op::Create, Possible::Absent, _) => Some(Possible::Live { id: index, version: 1 }),
        (Op::Update, Possible::Live { id, version }, Some((tid, tv)))
            if version == tv && id.is_none_or(|i| i == tid) =>
        {
            Some(Possible::Live { id: Some(tid), version: tv + 1 })
        }
        (Op::Drop, Possible::Live { id, version }, Some((tid, tv)))
            if version == tv && id.is_none_or(|i| i == tid) =>
        {
            Some(Possible::Absent)
        }
        _ => None,
    }
}

/// Folds one name's records (in the order its writer made them) into what it must be.
pub fn expect(records: &[&Record]) -> Expected {
    let mut possible = vec![Possible::Absent];
    let mut problems = Vec::new();
    for r in records {
        match &r.answer {
            Answer::Committed { index, outcome } => {
                let at = match outcome {
                    Response::Done(receipt) => {
                        match catalog::Receipt::decode(receipt) {
                            Ok(rc) if r.op == Op::Create && (rc.id.0 != *index || rc.version != 1) => {
                                problems.push(format!(
                                    "{}: create committed at index {index}, receipt says entity {} version {}",
                                    r.name, rc.id.0, rc.version
                                ))
                            }
                            Ok(rc) if r.op == Op::Update && Some((rc.id.0, rc.version.wrapping_sub(1))) != r.target => {
                                problems.push(format!(
                                    "{}: update of {:?} committed at index {index}, receipt says entity {} version {}",
                                    r.name, r.target, rc.id.0, rc.version
                                ))
                            }
                            Ok(_) => {}
                            Err(e) => problems.push(format!("{}: unreadable receipt at index {index}: {e}", r.name)),
                        }
                        *index
                    }
                    Response::Duplicate { first_index } => *first_index,
                    other => {
                        // Nobody else writes this entity: a refusal means an earlier write of it
                        // was applied twice, or one acknowledged was lost.
                        problems.push(format!(
                            "{}: {} committed at index {index} but not applied: {other:?}",
                            r.name,
                            r.op.key()
                        ));
                        *index
                    }
                };
                let next: Vec<Possible> =
                    possible.iter().filter_map(|p| applied(r.op, r.target, Some(at), *p)).collect();
                if next.is_empty() {
                    problems.push(format!(
                        "{}: the writer's own model cannot apply its committed {:?}",
                        r.name, r.op
                    ));
                } else {
                    possible = next;
                }
            }
            Answer::Rejected(_) => {}
            Answer::Indeterminate(_) => {
                let more: Vec<Possible> =
                    possible.iter().filter_map(|p| applied(r.op, r.target, None, *p)).collect();
                possible.extend(more);
            }
        }
    }
    possible.dedup();
    Expected { possible, problems }
}

/// Whether an Indeterminate write (the last on its entity, see the module docs) applied, given
/// the state found at the end: `Some(true)` applied once, `Some(false)` never, `None` neither
/// (a failure the entity check reports).
pub fn resolve(before: &[&Record], last: &Record, seen: &Option<EntityView>) -> Option<bool> {
    let prior = expect(before).possible;
    let after: Vec<Possible> = prior.iter().filter_map(|p| applied(last.op, last.target, None, *p)).collect();
    if after.iter().any(|p| p.matches(seen)) {
        Some(true)
    } else if prior.iter().any(|p| p.matches(seen)) {
        Some(false)
    } else {
        None
    }
}

/// The writers, running until [`Load::finish`].
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    pub records: Arc<Mutex<Vec<Record>>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

/// The campaign's writers' client: short calls, so a stopped node costs a writer little time,
/// and a deadline past the longest fault, so most writes end Committed.
pub fn client(addrs: Vec<String>) -> Client {
    let mut c = Client::new(addrs);
    c.call_timeout = Duration::from_secs(2);
    c.write_deadline = Duration::from_secs(12);
    c
}

/// How a writer bounds its writes. Applications differ, and each kind of answer must be
/// checked: patient writers see nearly every write Committed, impatient ones see Indeterminate
/// answers (and retry them), hasty ones see Rejected ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temper {
    /// The default client's deadline (12 s here): longer than most faults.
    Patient,
    /// A 3 s deadline, and each Indeterminate write sent once more under its request id.
    Impatient,
    /// Half a second for a write and for each call: a write that reached no leader in time is
    /// Rejected (nothing appended), one that may have is Indeterminate.
    Hasty,
}

impl Temper {
    /// Writer `w`'s: patient, impatient, hasty, patient, and again.
    pub fn of(w: u32) -> Temper {
        match w % 4 {
            1 => Temper::Impatient,
            2 => Temper::Hasty,
            _ => Temper::Patient,
        }
    }
}

impl Load {
    /// `writers` writers over `addrs` (each starts at a different node), their choices seeded.
    /// Their records go to `records`.
    pub fn start(
        addrs: &[String],
        writers: u32,
        seed: u64,
        t0: Instant,
        records: Arc<Mutex<Vec<Record>>>,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut seeder = wal_rng::Rng::splitmix64(seed);
        let seeds: Vec<u64> = (0..writers).map(|_| seeder.next_u64()).collect();
        let writers = (0..writers)
            .map(|w| {
                let mut order = addrs.to_vec();
                order.rotate_left(w as usize % addrs.len().max(1));
                let (stop, records) = (stop.clone(), records.clone());
                // Each writer's seed drawn from the run's own generator: seeds that differ by
                // splitmix64's own step would give one stream shifted (as seed 0 would).
                let rng = wal_rng::Rng::splitmix64(seeds[w as usize]);
                tokio::spawn(writer(w, client(order), rng, stop, records, t0))
            })
            .collect();
        Load { stop, records, writers }
    }

    /// Whether some write was acknowledged after `t` (since the campaign's start).
    pub fn acknowledged_after(&self, t: Duration) -> bool {
        self.records
            .lock()
            .unwrap()
            .iter()
            .rev()
            .any(|r| r.done_at > t && matches!(r.answer, Answer::Committed { .. }))
    }

    /// Stops the writers; each ends the write it is in (bounded by its deadline, and by
    /// `bound` here). Says which did not end.
    pub async fn finish(self, bound: Duration) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut stuck = Vec::new();
        for (w, h) in self.writers.into_iter().enumerate() {
            if tokio::time::timeout(bound, h).await.is_err() {
                stuck.push(format!("writer {w} did not end its write within {bound:?}"));
            }
        }
        stuck
    }
}

fn props(rng: &mut wal_rng::Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn to_answer(w: WriteReply) -> Answer {
    match w {
        WriteReply::Committed { index, outcome } => Answer::Committed { index, outcome },
        WriteReply::Rejected { why, .. } => Answer::Rejected(why),
        WriteReply::Indeterminate { why } => Answer::Indeterminate(why),
        // `Client::write` follows redirects; one left over means it gave up routing.
        WriteReply::Redirect { leader, addr } => Answer::Rejected(format!("redirect to {leader} at {addr}")),
    }
}

/// Entities a writer keeps at most: past it, it only updates and drops. The catalog stays a
/// few megabytes (hundreds of frames) however long the run: snapshots are built every few
/// hundred entries, and a debug build on two cores must keep up with them.
const LIVE_CAP: usize = 2500;

/// One writer: creates (55%, until it has [`LIVE_CAP`] entities), updates (30%) and drops
/// (15%) of its own settled entities, as its [`Temper`] says.
async fn writer(
    w: u32,
    client: Client,
    mut rng: wal_rng::Rng,
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<Record>>>,
    t0: Instant,
) {
    // Entities whose state is known: name, id, version.
    let mut live: Vec<(String, u64, u64)> = Vec::new();
    let temper = Temper::of(w);
    let mut retried = false;
    let mut client = client;
    match temper {
        Temper::Patient => {}
        Temper::Impatient => client.write_deadline = Duration::from_secs(3),
        Temper::Hasty => {
            client.write_deadline = Duration::from_millis(500);
            client.call_timeout = Duration::from_millis(500);
        }
    }
    for seq in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let roll = rng.below(100) as u8;
        let create = live.is_empty() || (roll < 55 && live.len() < LIVE_CAP);
        let pick = if create { None } else { Some(rng.below(live.len() as u64) as usize) };
        let (op, name, target, cmd) = match pick {
            None => {
                let name = format!("w{w}-{seq}");
                let len = rng.range(16, 512) as usize;
                let cmd = catalog::Command::Create {
                    parent: None,
                    kind: catalog::EntityKind::Metalake,
                    name: name.clone(),
                    props: props(&mut rng, len),
                };
                (Op::Create, name, None, cmd)
            }
            Some(i) => {
                let (name, id, version) = live[i].clone();
                let cmd = if roll < 85 {
                    let len = rng.range(16, 512) as usize;
                    catalog::Command::Update {
                        id: catalog::EntityId(id),
                        expected_version: version,
                        props: props(&mut rng, len),
                    }
                } else {
                    catalog::Command::Drop {
                        id: catalog::EntityId(id),
                        expected_version: Some(version),
                        cascade: false,
                    }
                };
                let op = if roll < 85 { Op::Update } else { Op::Drop };
                (op, name, Some((id, version)), cmd)
            }
        };
        let request_id = client.next_request_id();
        let mut answer = to_answer(client.write_with_id(&cmd, request_id).await);
        if temper == Temper::Impatient && matches!(answer, Answer::Indeterminate(_)) {
            // What an application does with Indeterminate: the same write again under the same
            // request id, which must apply it at most once (a Duplicate if it already applied).
            tokio::time::sleep(Duration::from_millis(200)).await;
            answer = match (answer, to_answer(client.write_with_id(&cmd, request_id).await)) {
                // Refused this time, but the first may still apply: it stays Indeterminate.
                (Answer::Indeterminate(first), Answer::Rejected(then)) => {
                    Answer::Indeterminate(format!("{first}; the retry was Rejected: {then}"))
                }
                (_, again) => again,
            };
            retried = true;
        }
        let committed = match &answer {
            Answer::Committed { index, outcome: Response::Done(_) } => Some(*index),
            Answer::Committed { outcome: Response::Duplicate { first_index }, .. } => Some(*first_index),
            _ => None,
        };
        match (op, pick, committed, &answer) {
            (Op::Create, _, Some(at), _) => live.push((name.clone(), at, 1)),
            (Op::Update, Some(i), Some(_), _) => live[i].2 += 1,
            // Dropped; or refused, or Indeterminate: not touched again (see the module docs).
            (Op::Drop, Some(i), Some(_), _)
            | (_, Some(i), None, Answer::Committed { .. } | Answer::Indeterminate(_)) => {
                live.swap_remove(i);
            }
            _ => {}
        }
        let failed = committed.is_none();
        records.lock().unwrap().push(Record {
            writer: w,
            op,
            name,
            target,
            bytes: cmd.encode().len(),
            retried: std::mem::take(&mut retried),
            answer,
            done_at: t0.elapsed(),
        });
        if failed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `n` creates of `props` bytes each, one after the other (the backlog fault), recorded as
/// writer `w`'s. Stops early if one is not Committed (the fault's restart must not wait long).
pub async fn burst(
    addrs: &[String],
    w: u32,
    n: u32,
    props_len: u32,
    records: &Mutex<Vec<Record>>,
    t0: Instant,
) {
    let client = client(addrs.to_vec());
    let mut rng = wal_rng::Rng::splitmix64(u64::from(w));
    for i in 0..n {
        let name = format!("b{w}-{i}");
        let cmd = catalog::Command::Create {
            parent: None,
            kind: catalog::EntityKind::Metalake,
            name: name.clone(),
            props: props(&mut rng, props_len as usize),
        };
        let answer = to_answer(client.write(&cmd).await);
        let ok = matches!(answer, Answer::Committed { .. });
        records.lock().unwrap().push(Record {
            writer: w,
            op: Op::Create,
            name,
            target: None,
            bytes: cmd.encode().len(),
            retried: false,
            answer,
            done_at: t0.elapsed(),
        });
        if !ok {
            return;
        }
    }
}
