//! Carrying out a fault on the three processes: its roles resolved to node ids at its start,
//! then a timeline of actions (SIGKILL, restart, SIGSTOP, SIGCONT, the partition switch, a
//! burst of writes) at fixed offsets from that start. Every action is logged with its time.
//!
//! A kill of the leader is aimed: it lands, when it can, at a moment when the leader has
//! shipped entries it has not yet written (`Cluster::stop_with_unwritten_tail`, the aim of
//! `double_kill.rs` too).
//!
//! The injector also plays the operator's supervisor: a node whose process ends on its own is
//! a failure of the campaign, recorded with its exit status, and is restarted so the run goes
//! on; unless it fenced itself, as its `FENCED` file refuses every start until an operator
//! deletes it: that node stays down. And it notes, for every node that comes back (restarted, resumed, reconnected), where
//! its log ended and where the others' purge point was: a node whose log ended below the
//! leader's purge point can only catch up from a snapshot.

use super::load::{self, Record};
use super::observe::Observed;
use super::schedule::{Fault, Role};
use crate::support::{metrics_at, Cluster};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::client::Client;

/// One thing done to the processes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    Kill(Vec<u64>),
    Spawn(u64),
    Stop(u64),
    Cont(u64),
    Cut(u64),
    Heal(u64),
    Burst { n: u32, props: u32 },
}

/// A node coming back, and what it had to catch up.
#[derive(Clone, Debug)]
pub struct Rejoin {
    /// The last index in its log when it went away (for a killed node: its durable log).
    pub end: u64,
    /// The leader's (or, with none, the highest of the others') purge point and last log
    /// index when it came back.
    pub purged: u64,
    pub last: u64,
}

impl Rejoin {
    /// Its log ended below the purge point: only a snapshot brings it up.
    pub fn needs_snapshot(&self) -> bool {
        self.end < self.purged
    }
}

/// The processes and everything done to them.
#[derive(Debug)]
pub struct Injector {
    pub c: Cluster,
    pub t0: Instant,
    pub records: Arc<Mutex<Vec<Record>>>,
    /// The observer's view, where rejoins wait to be seen caught up.
    seen: Arc<Mutex<Observed>>,
    stopped: BTreeSet<u64>,
    /// Nodes left down because they fenced themselves ([`Injector::startable`]).
    pub fenced: BTreeSet<u64>,
    cut: BTreeSet<u64>,
    away_end: BTreeMap<u64, u64>,
    /// Every action and observation, timed from the campaign's start.
    pub events: Vec<String>,
    pub failures: Vec<String>,
    pub rejoins: Vec<Rejoin>,
    /// Faults whose targets included the node that led when they started.
    pub hit_leader: u64,
    /// Faults that started with no leader known (roles were given by node id).
    pub leader_unknown: u64,
    /// The leader when the current fault started.
    fault_leader: Option<u64>,
    /// Kills of the leader, and those that found it holding entries it had shipped but not
    /// written (`Cluster::stop_with_unwritten_tail`).
    pub leader_kills: u64,
    pub unwritten_tail_kills: u64,
}

/// How many moments a leader's kill tries for one that loses entries it shipped.
const AIM_TRIES: u64 = 40;

impl Injector {
    pub fn new(
        c: Cluster,
        t0: Instant,
        records: Arc<Mutex<Vec<Record>>>,
        seen: Arc<Mutex<Observed>>,
    ) -> Injector {
        Injector {
            c,
            t0,
            records,
            seen,
            stopped: BTreeSet::new(),
            fenced: BTreeSet::new(),
            cut: BTreeSet::new(),
            away_end: BTreeMap::new(),
            events: Vec::new(),
            failures: Vec::new(),
            rejoins: Vec::new(),
            hit_leader: 0,
            leader_unknown: 0,
            fault_leader: None,
            leader_kills: 0,
            unwritten_tail_kills: 0,
        }
    }

    pub fn log(&mut self, what: String) {
        let line = format!("[{:>8.3}s] {what}", self.t0.elapsed().as_secs_f64());
        eprintln!("campaign {line}");
        self.events.push(line);
    }

    pub fn fail(&mut self, what: String) {
        self.log(format!("FAILURE: {what}"));
        self.failures.push(what);
    }

    fn addrs(&self) -> Vec<String> {
        (1..=3).map(|i| self.c.addr(i)).collect()
    }

    /// A node that ended on its own is a failure; it is restarted (the supervisor's job).
    pub fn check_exits(&mut self) {
        for (id, status) in self.c.exited() {
            let tail = self.c.outputs(&[id]);
            self.fail(format!("node {id} exited on its own ({status})\n{tail}"));
            self.stopped.remove(&id);
            self.cut.remove(&id);
            if self.startable(id) {
                self.c.spawn(id);
                self.log(format!("restarted node {id} after its unexpected exit"));
            }
        }
    }

    /// Whether node `id` may be started again, as a supervisor would: not when it fenced
    /// itself, as its `FENCED` file makes every start exit at once (9) until an operator
    /// deletes it, and restarting it would only loop. Such a node is a failure, recorded once,
    /// and stays down.
    fn startable(&mut self, id: u64) -> bool {
        let fence = self.c.data(id).join(wal_raft::fence::FENCE_FILE);
        if !fence.exists() {
            return true;
        }
        if self.fenced.insert(id) {
            let why = std::fs::read_to_string(&fence).unwrap_or_default();
            self.fail(format!(
                "node {id} fenced itself and is left down (a supervisor cannot restart it): {why}"
            ));
        }
        false
    }

    /// Sleeps `d`, watching for processes that end on their own.
    pub async fn sleep(&mut self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            self.check_exits();
            let now = Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
        }
    }

    /// Nodes running, not stopped and not cut off: the ones that can answer.
    fn reachable(&self) -> Vec<u64> {
        (1..=3).filter(|i| self.c.running(*i) && !self.stopped.contains(i) && !self.cut.contains(i)).collect()
    }

    /// The reachable nodes' metrics (each bounded).
    async fn views(&self, among: &[u64]) -> Vec<wal_raft::net::wire::NodeMetrics> {
        let polls = among.iter().map(|i| {
            let a = self.c.addr(*i);
            async move { metrics_at(&a, Duration::from_millis(500)).await }
        });
        futures_util::future::join_all(polls).await.into_iter().flatten().collect()
    }

    /// The leader of the highest term among the reachable nodes, waiting up to `within`.
    pub async fn leader(&self, within: Duration) -> Option<u64> {
        let t = Instant::now();
        loop {
            let views = self.views(&self.reachable()).await;
            if let Some(l) = views.iter().filter(|m| m.state == "Leader").max_by_key(|m| m.term) {
                return Some(l.id);
            }
            if t.elapsed() >= within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Node ids for roles: the leader, and the others in id order. With no leader known, the
    /// lowest id plays the leader.
    async fn resolve(&mut self) -> BTreeMap<Role, u64> {
        self.fault_leader = self.leader(Duration::from_secs(2)).await;
        let leader = match self.fault_leader {
            Some(l) => l,
            None => {
                self.leader_unknown += 1;
                1
            }
        };
        let others: Vec<u64> = (1..=3).filter(|i| *i != leader).collect();
        BTreeMap::from([
            (Role::Leader, leader),
            (Role::Follower(0), others[0]),
            (Role::Follower(1), others[1]),
        ])
    }

    /// Runs fault number `n`; returns when everything it did is undone.
    pub async fn run(&mut self, n: u64, fault: &Fault) {
        self.check_exits();
        let ids = self.resolve().await;
        let names: Vec<String> = fault.targets().iter().map(|r| format!("{r}=node {}", ids[r])).collect();
        if fault.targets().contains(&Role::Leader) {
            self.hit_leader += 1;
        }
        self.log(format!("fault {n}: {fault} ({})", names.join(", ")));
        let start = Instant::now();
        for (at, action) in timeline(fault, &ids) {
            let due = start + Duration::from_millis(at);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                self.sleep(wait).await;
            }
            self.act(n, action).await;
        }
    }

    /// Undoes whatever is still in effect: every node running, resumed and connected.
    pub async fn heal_all(&mut self) {
        self.check_exits();
        for id in 1..=3 {
            if self.stopped.contains(&id) {
                self.act(0, Action::Cont(id)).await;
            }
            if self.cut.contains(&id) {
                self.act(0, Action::Heal(id)).await;
            }
            if !self.c.running(id) {
                self.act(0, Action::Spawn(id)).await;
            }
        }
    }

    async fn act(&mut self, n: u64, a: Action) {
        self.check_exits();
        match a {
            Action::Kill(ids) => {
                let ids: Vec<u64> = ids.into_iter().filter(|i| self.c.running(*i)).collect();
                if let Some(l) = self.fault_leader.filter(|l| ids.contains(l) && self.reachable().contains(l))
                {
                    self.leader_kills += 1;
                    // Aimed (`Cluster::stop_with_unwritten_tail`): killed anyway when no
                    // moment was found.
                    let others: Vec<u64> = self.reachable().into_iter().filter(|i| *i != l).collect();
                    let aim = self.c.stop_with_unwritten_tail(l, &others, AIM_TRIES).await;
                    self.unwritten_tail_kills += u64::from(aim.is_ok());
                    self.log(format!("  leader {l}: {}", aim.unwrap_or_else(|e| e)));
                }
                self.c.kill9_together(&ids);
                self.seen.lock().unwrap().pending.retain(|p| !ids.contains(&p.node));
                for id in &ids {
                    self.stopped.remove(id);
                    self.cut.remove(id);
                    // Read-only, the process is gone: the durable log is what it comes back with.
                    match wal_raft::check::log_ids(&self.c.data(*id)) {
                        Ok(l) => {
                            // A log emptied by a snapshot install starts after the snapshot.
                            let snap = self.seen.lock().unwrap().last.get(id).and_then(|m| m.snapshot);
                            let end = l.last().map(|l| l.index).max(snap).unwrap_or(0);
                            self.away_end.insert(*id, end);
                        }
                        Err(e) => self.log(format!("  node {id}: its log could not be read offline: {e}")),
                    }
                }
                self.log(format!("  SIGKILL {ids:?} (durable log ends: {:?})", self.away_end));
            }
            Action::Spawn(id) => {
                if self.startable(id) {
                    let r = self.rejoin(id).await;
                    self.c.spawn(id);
                    self.log(format!("  restarted node {id} {r}"));
                }
            }
            Action::Stop(id) => {
                self.note_end(id).await;
                self.c.signal(id, "STOP");
                self.stopped.insert(id);
                self.log(format!("  SIGSTOP node {id}"));
            }
            Action::Cont(id) => {
                self.stopped.remove(&id);
                let r = self.rejoin(id).await;
                self.c.signal(id, "CONT");
                self.log(format!("  SIGCONT node {id} {r}"));
            }
            Action::Cut(id) => {
                self.note_end(id).await;
                self.switch(id, true).await;
                self.cut.insert(id);
                self.log(format!("  partition switch ON at node {id}"));
            }
            Action::Heal(id) => {
                self.cut.remove(&id);
                let r = self.rejoin(id).await;
                self.switch(id, false).await;
                self.log(format!("  partition switch off at node {id} {r}"));
            }
            Action::Burst { n: count, props } => {
                let (w, addrs, t) = (1000 + n as u32, self.addrs(), Instant::now());
                load::burst(&addrs, w, count, props, &self.records, self.t0).await;
                let done = self.records.lock().unwrap().iter().filter(|r| r.writer == w).count();
                self.log(format!("  wrote {done} of {count} creates of {props} bytes in {:?}", t.elapsed()));
            }
        }
    }

    /// Where a node's log ends as it goes away (stopped or cut off); a catch-up it was in is
    /// interrupted.
    async fn note_end(&mut self, id: u64) {
        self.seen.lock().unwrap().pending.retain(|p| p.node != id);
        let m = metrics_at(&self.c.addr(id), Duration::from_millis(500)).await;
        self.away_end.insert(id, m.and_then(|m| m.last_log_index).unwrap_or(0));
    }

    /// Records a node coming back: where it left off, and the others' purge point now.
    async fn rejoin(&mut self, id: u64) -> String {
        let end = self.away_end.remove(&id).unwrap_or(0);
        let others: Vec<u64> = self.reachable().into_iter().filter(|i| *i != id).collect();
        let views = self.views(&others).await;
        let leader = views.iter().filter(|m| m.state == "Leader").max_by_key(|m| m.term);
        let purged = match leader {
            Some(l) => l.purged.unwrap_or(0),
            None => views.iter().filter_map(|m| m.purged).max().unwrap_or(0),
        };
        let last = views.iter().filter_map(|m| m.last_log_index).max().unwrap_or(0);
        let r = Rejoin { end, purged, last };
        self.seen.lock().unwrap().pending.push(super::observe::CatchUp {
            node: id,
            target: last,
            since: Instant::now(),
        });
        let s = format!(
            "(its log ended at {end}; the others' at {last}, purged through {purged}{})",
            if r.needs_snapshot() { ": needs a snapshot" } else { "" }
        );
        self.rejoins.push(r);
        s
    }

    /// The partition switch, retried a few times (the node may be busy catching up).
    async fn switch(&mut self, id: u64, on: bool) {
        let addr = self.c.addr(id);
        let mut c = Client::new(vec![addr.clone()]);
        c.call_timeout = Duration::from_secs(2);
        let mut last = None;
        for _ in 0..5 {
            match c.partition(&addr, on).await {
                Ok(()) => return,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.fail(format!(
            "could not turn the partition switch {} at node {id}: {last:?}",
            if on { "on" } else { "off" }
        ));
    }
}

/// The actions of `fault` with node ids for its roles, at their offsets (ms) from its start.
fn timeline(fault: &Fault, ids: &BTreeMap<Role, u64>) -> Vec<(u64, Action)> {
    let id = |r: &Role| ids[r];
    let mut t = match fault {
        Fault::Kill { who, down_ms } => {
            let mut t = vec![(0, Action::Kill(who.iter().map(id).collect()))];
            t.extend(who.iter().zip(down_ms).map(|(w, d)| (*d, Action::Spawn(id(w)))));
            t
        }
        Fault::Pause { who, ms } => {
            let mut t: Vec<(u64, Action)> = who.iter().map(|w| (0, Action::Stop(id(w)))).collect();
            t.extend(who.iter().zip(ms).map(|(w, m)| (*m, Action::Cont(id(w)))));
            t
        }
        Fault::Partition { who, ms } => vec![(0, Action::Cut(id(who))), (*ms, Action::Heal(id(who)))],
        Fault::KillDuringPause { paused, pause_ms, killed, kill_at_ms, down_ms } => vec![
            (0, Action::Stop(id(paused))),
            (*kill_at_ms, Action::Kill(vec![id(killed)])),
            (kill_at_ms + down_ms, Action::Spawn(id(killed))),
            (*pause_ms, Action::Cont(id(paused))),
        ],
        Fault::KillDuringPartition { cut, cut_ms, killed, kill_at_ms, down_ms } => vec![
            (0, Action::Cut(id(cut))),
            (*kill_at_ms, Action::Kill(vec![id(killed)])),
            (kill_at_ms + down_ms, Action::Spawn(id(killed))),
            (*cut_ms, Action::Heal(id(cut))),
        ],
        Fault::Backlog { who, entities, props } => vec![
            (0, Action::Kill(vec![id(who)])),
            (0, Action::Burst { n: *entities, props: *props }),
            (0, Action::Spawn(id(who))),
        ],
    };
    // Stable: actions at one offset keep their order (a kill before its restart at once).
    t.sort_by_key(|(at, _)| *at);
    t
}
