//! Issue 21, finding 4: a stalled leader must not stall its clients. Three real `walraft-node`
//! processes under a steady load of writers whose clients know all three addresses (the leader
//! first, so their writes start at it); the leader is stopped (SIGSTOP), cut off (the partition
//! switch) or killed (SIGKILL), and a write started after the fault must be acknowledged
//! Committed while the fault is still in place. Then the fault ends, the three converge, and
//! every write acknowledged at any moment is on every replica at the index it was acknowledged
//! at (a create's entity id is its index); no write answered Rejected is applied anywhere.
//!
//! No test asserts a time. The fault lasts until that acknowledgement or [`FAULT_BOUND`], and the
//! nodes' write timeout and the clients' call timeout are far longer than that bound: the old
//! ways out of a stall (a write attempt waited for the call timeout, 10 s by default; a leader
//! answered a write it could not commit after its write timeout) cannot produce the
//! acknowledgement in time, only the client's per-attempt deadline, the leader's lease watch and
//! the followers' watch of their leader (silent, or replaced) can.
//!
//! Also: a follower does not forward a write into a pooled connection its killed leader closed.

use crate::support::{create, created_id, Cluster, WAIT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::client::Client;
use wal_raft::net::wire::WriteReply;
use wal_raft::Response;

/// One cluster at a time: three nodes each on two shared cores is enough.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A write timeout far past [`FAULT_BOUND`], so that it cannot be what ends a stall.
const FLAGS: [&str; 4] = ["--write-timeout-ms", "60000", "--snapshot-every", "100000"];

/// The writers' call timeout (which bounded each write attempt before the per-attempt deadline,
/// 10 s by default), far past [`FAULT_BOUND`] so that it cannot be what ends a stall either.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a fault is held at most while waiting for a write started after it to be
/// acknowledged: only bounds a hang (a new leader is elected in about a second).
const FAULT_BOUND: Duration = Duration::from_secs(20);

/// Writers in the load.
const WRITERS: u64 = 2;

/// What one writer's write ended as.
#[derive(Clone, Debug)]
struct Outcome {
    name: String,
    reply: WriteReply,
    /// The write started after the fault was in place.
    after_fault: bool,
    /// How long it took (for failure messages only).
    took: Duration,
}

/// Writers creating uniquely named metalakes, recording every answer.
struct Load {
    stop: Arc<AtomicBool>,
    fault: Arc<AtomicBool>,
    done: Arc<Mutex<Vec<Outcome>>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Each writer's client knows all three nodes, `first` first; its per-attempt deadline is
    /// the default, its call timeout [`CALL_TIMEOUT`].
    fn start(c: &Cluster, first: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let fault = Arc::new(AtomicBool::new(false));
        let done = Arc::new(Mutex::new(Vec::new()));
        let writers = (0..WRITERS)
            .map(|w| {
                let mut order = vec![first];
                let mut rest: Vec<u64> = (1..=3).filter(|i| *i != first).collect();
                if w % 2 == 1 {
                    rest.reverse();
                }
                order.extend(rest);
                let mut client = Client::new(order.iter().map(|i| c.addr(*i)).collect());
                client.call_timeout = CALL_TIMEOUT;
                client.write_deadline = 2 * CALL_TIMEOUT;
                let (stop, fault, done) = (stop.clone(), fault.clone(), done.clone());
                tokio::spawn(async move {
                    for i in 0..100_000u64 {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let name = format!("w{w}-{i}");
                        let after_fault = fault.load(Ordering::SeqCst);
                        let t = Instant::now();
                        let reply = client.write(&create(&name)).await;
                        let took = t.elapsed();
                        done.lock().unwrap().push(Outcome { name, reply, after_fault, took });
                    }
                })
            })
            .collect();
        Load { stop, fault, done, writers }
    }

    fn acked(&self) -> usize {
        self.done.lock().unwrap().iter().filter(|o| created_id(&o.reply).is_some()).count()
    }

    /// Waits (bounded) until at least `n` writes were acknowledged.
    async fn until(&self, n: usize) {
        let t = Instant::now();
        while self.acked() < n {
            assert!(t.elapsed() < WAIT, "only {} writes acknowledged in {WAIT:?}", self.acked());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The fault is in place: writes started from now on count as after it.
    fn fault_in_place(&self) {
        self.fault.store(true, Ordering::SeqCst);
    }

    /// The first write started after the fault and acknowledged, waiting at most `bound`.
    async fn acked_after_fault(&self, bound: Duration) -> Option<Outcome> {
        let t = Instant::now();
        while t.elapsed() < bound {
            let found = self
                .done
                .lock()
                .unwrap()
                .iter()
                .find(|o| o.after_fault && created_id(&o.reply).is_some())
                .cloned();
            if found.is_some() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// What each write ended as, once the writers stopped (each ends the write in flight,
    /// bounded by its deadline).
    async fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.writers {
            let _ = tokio::time::timeout(Duration::from_secs(60), w).await;
        }
        std::mem::take(&mut *self.done.lock().unwrap())
    }

    /// What was answered so far (for a failure message).
    fn summary(&self) -> String {
        let done = self.done.lock().unwrap();
        let tail: Vec<String> = done
            .iter()
            .rev()
            .take(6)
            .map(|o| format!("{} (after fault: {}, took {:?}): {:?}", o.name, o.after_fault, o.took, o.reply))
            .collect();
        format!(
            "{} writes answered, {} acknowledged; the last: {tail:#?}",
            done.len(),
            done.iter().filter(|o| created_id(&o.reply).is_some()).count()
        )
    }
}

/// The end of every test: the three converge, every acknowledged create is on every replica at
/// its index, and no create answered Rejected is on any.
async fn every_acknowledged_write_everywhere(c: &Cluster, done: &[Outcome]) {
    let end = {
        let mut end = 0;
        for id in 1..=3 {
            end = end.max(c.metrics(id).await.and_then(|m| m.last_log_index).unwrap_or(0));
        }
        end
    };
    c.converged(&[1, 2, 3], end).await;
    let mut acked = 0;
    for id in 1..=3 {
        let cl = c.client(&[id]);
        for o in done {
            let e = cl.lookup(&c.addr(id), None, &o.name).await.unwrap();
            match &o.reply {
                WriteReply::Committed { index, .. } => {
                    let created = created_id(&o.reply);
                    assert_eq!(created, Some(*index), "{}: acknowledged {:?}", o.name, o.reply);
                    assert_eq!(
                        e.as_ref().map(|e| e.id),
                        Some(*index),
                        "node {id}: {}, acknowledged at index {index}, is {e:?} there\n{}",
                        o.name,
                        c.output(id)
                    );
                    acked += 1;
                }
                WriteReply::Rejected { .. } => {
                    assert!(e.is_none(), "node {id} applied {}, which was answered {:?}", o.name, o.reply)
                }
                _ => {}
            }
        }
    }
    eprintln!("{} writes, {} acknowledged, each on all three replicas at its index", done.len(), acked / 3);
}

/// What is done to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGSTOP, then SIGCONT: a long pause.
    Stop,
    /// The partition switch on, then off: cut off from its peers, still answering clients.
    Partition,
    /// SIGKILL, then a restart.
    Kill,
}

impl Fault {
    fn word(self) -> &'static str {
        match self {
            Fault::Stop => "stopped",
            Fault::Partition => "partitioned",
            Fault::Kill => "killed",
        }
    }

    async fn start(self, c: &mut Cluster, id: u64) {
        match self {
            Fault::Stop => c.signal(id, "STOP"),
            Fault::Partition => c.client(&[id]).partition(&c.addr(id), true).await.unwrap(),
            Fault::Kill => c.kill9(id),
        }
    }

    async fn end(self, c: &mut Cluster, id: u64) {
        match self {
            Fault::Stop => c.signal(id, "CONT"),
            Fault::Partition => c.client(&[id]).partition(&c.addr(id), false).await.unwrap(),
            Fault::Kill => c.spawn(id),
        }
    }

    /// Where one write attempt (no retry, the long call timeout) is sent right after the fault,
    /// to see the nodes' half of the fix alone: a cut-off leader answers once its lease lapses
    /// (before, after its write timeout); a follower that forwarded a write to a stopped leader
    /// answers once that leader falls silent or another leads (before, after its write timeout
    /// too).
    fn probe_at(self, old: u64, follower: u64) -> u64 {
        match self {
            Fault::Partition => old,
            Fault::Stop | Fault::Kill => follower,
        }
    }
}

/// `fault` on the leader under load: a write started after it is acknowledged, and a single
/// attempt sent right after it is answered, while it is still in place; then it ends and every
/// acknowledged write is everywhere at its index.
async fn while_the_leader_is_faulty(fault: Fault) {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::start(&FLAGS);
    let c = &mut c;
    let what = fault.word();
    let (old, old_term) = c.leader(&[1, 2, 3]).await;
    let others: Vec<u64> = (1..=3).filter(|i| *i != old).collect();
    let load = Load::start(c, old);
    load.until(10).await;
    fault.start(c, old).await;
    load.fault_in_place();
    let at = fault.probe_at(old, others[0]);
    let probe = {
        let mut cl = Client::new(vec![c.addr(at)]);
        cl.call_timeout = CALL_TIMEOUT;
        let addr = c.addr(at);
        tokio::spawn(async move { cl.write_once(&addr, &create("probe"), cl.next_request_id()).await })
    };
    let t = Instant::now();
    let first = load.acked_after_fault(FAULT_BOUND).await;
    let probed = tokio::time::timeout(FAULT_BOUND.saturating_sub(t.elapsed()), probe).await;
    // The ordering facts are settled here, before the fault ends: the acknowledgement and the
    // probe's answer came (or not) while the leader was still faulty.
    let summary = load.summary();
    fault.end(c, old).await;
    let first = first.unwrap_or_else(|| {
        panic!(
            "no write started after the leader ({old}) was {what} was acknowledged while it stayed {what} ({FAULT_BOUND:?}): {summary}\n{}",
            c.outputs(&[1, 2, 3])
        )
    });
    let Ok(probed) = probed else {
        panic!(
            "node {at} did not answer a write sent right after the leader ({old}) was {what}, while it stayed {what} ({FAULT_BOUND:?})\n{}",
            c.outputs(&[1, 2, 3])
        )
    };
    let probed = probed.unwrap().unwrap();
    if fault == Fault::Partition {
        // Sent after the switch was on: the partitioned leader could not replicate it.
        assert!(
            !matches!(probed, WriteReply::Committed { .. }),
            "a partitioned leader acknowledged {probed:?}"
        );
    }
    let (new, new_term) = c.leader(&others).await;
    assert!(
        new_term > old_term,
        "acknowledged by leader {new} in term {new_term}, the old one {old} led {old_term}"
    );
    eprintln!(
        "leader {old} {what}: {} acknowledged at {:?} by the new leader {new} (term {new_term}); node {at} answered the probe {probed:?}",
        first.name,
        created_id(&first.reply)
    );
    // The load goes on after the fault, then stops.
    let n = load.acked();
    load.until(n + 5).await;
    let mut done = load.finish().await;
    let probe = Outcome { name: "probe".into(), reply: probed, after_fault: true, took: Duration::ZERO };
    done.push(probe.clone());
    every_acknowledged_write_everywhere(c, &done).await;
    if fault == Fault::Partition {
        for id in 1..=3 {
            let e = c.client(&[id]).lookup(&c.addr(id), None, "probe").await.unwrap();
            assert!(e.is_none(), "node {id} applied the write only the partitioned leader had: {probe:?}");
        }
    }
    c.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_does_not_hold_writes_until_it_resumes() {
    while_the_leader_is_faulty(Fault::Stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_does_not_hold_writes_for_its_write_timeout() {
    while_the_leader_is_faulty(Fault::Partition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_does_not_hold_writes_until_it_restarts() {
    while_the_leader_is_faulty(Fault::Kill).await;
}

/// A retry of a write that had committed (its first answer lost) is answered Committed at the
/// write's first index, with the apply seam's `Duplicate` as its outcome: never a failure, and
/// never the index of the retry's own no-op entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_write_that_had_committed_is_reported_at_its_first_index() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&FLAGS);
    let (leader, _) = c.leader(&[1, 2, 3]).await;
    let follower = (1..=3).find(|i| *i != leader).unwrap();
    let client = Client::new(vec![c.addr(leader), c.addr(follower)]);
    let id = client.next_request_id();
    let cmd = create("once");
    let first = client.write_with_id(&cmd, id).await;
    let WriteReply::Committed { index, outcome: Response::Done(_) } = first else { panic!("{first:?}") };
    // Entries in between, so that a retry's own entry cannot land at the first index.
    for i in 0..3 {
        assert!(created_id(&client.write(&create(&format!("between{i}"))).await).is_some());
    }
    // The retry, at the leader and through the follower (forwarded).
    for via in [leader, follower] {
        let retry = Client::new(vec![c.addr(via)]).write_with_id(&cmd, id).await;
        assert_eq!(
            retry,
            WriteReply::Committed { index, outcome: Response::Duplicate { first_index: index } },
            "the retry through node {via}"
        );
    }
    let e = c.client(&[follower]).lookup(&c.addr(follower), None, "once").await.unwrap();
    assert_eq!(e.map(|e| e.id), Some(index));
}

/// A follower keeps the connections it forwarded writes on. When the leader is killed, a write
/// the follower forwards before it notices (its leader not yet silent, no other elected) must
/// not go into a pooled connection the leader has closed: nothing reached the leader, so the
/// answer is the redirect (the client tries the leader itself), never Indeterminate. Slow
/// heartbeats (silence after 3 s) and elections (5-6 s) keep the follower's view of the leader
/// in place while the write is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_does_not_forward_into_a_connection_its_killed_leader_closed() {
    let _serial = SERIAL.lock().await;
    let flags = ["--heartbeat-ms", "1000", "--election-min-ms", "5000", "--election-max-ms", "6000"];
    let mut c = Cluster::start(&flags);
    let (leader, _) = c.leader(&[1, 2, 3]).await;
    let follower = (1..=3).find(|i| *i != leader).unwrap();
    let client = c.client(&[follower]);
    // Forwarded, so the follower now pools a connection to the leader.
    let first = client.write_once(&c.addr(follower), &create("pooled"), client.next_request_id()).await;
    assert!(matches!(first, Ok(WriteReply::Committed { .. })), "{first:?}");
    c.kill9(leader);
    let r = client.write_once(&c.addr(follower), &create("after"), client.next_request_id()).await;
    match r {
        Ok(WriteReply::Redirect { leader: l, .. }) => assert_eq!(l, leader),
        // The follower had already found its leader silent: not forwarded at all.
        Ok(WriteReply::Rejected { retry: true, .. }) => {}
        other => panic!("nothing reached the killed leader: {other:?}\n{}", c.outputs(&[follower])),
    }
    c.stop_all();
}
