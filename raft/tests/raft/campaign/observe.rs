//! What the campaign watches while it runs: every node's metrics a few times a second (who
//! leads which term, how long a node that came back takes to catch up) and the size of each
//! node's snapshot file. A node that does not answer (stopped, killed, restarting) is skipped
//! for that round.

use crate::support::metrics_at;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wal_raft::net::wire::NodeMetrics;

/// How often the nodes are polled.
const EVERY: Duration = Duration::from_millis(200);

/// What the observer saw.
#[derive(Debug, Default)]
pub struct Observed {
    /// Each (term, leader) pair seen, in the order first seen.
    pub leaders: Vec<(u64, u64)>,
    pub max_term: u64,
    /// The largest snapshot file any node held, in bytes.
    pub largest_snapshot: u64,
    /// Each node's latest metrics.
    pub last: BTreeMap<u64, NodeMetrics>,
    /// Nodes that came back and have not yet applied what the others held then.
    pub pending: Vec<CatchUp>,
    /// How long each completed catch-up took.
    pub caught_up: Vec<(u64, Duration)>,
    /// The digest some node reported at each applied index seen (the most recent
    /// [`DIGESTS_KEPT`]), and the node.
    digests: BTreeMap<u64, (u64, String)>,
    /// Times two nodes were seen at one applied index: with the same digest, and with two.
    pub coincidences: u64,
    pub diverged: Vec<String>,
}

/// Applied indexes whose digest is remembered for comparison.
const DIGESTS_KEPT: usize = 4096;

/// A node that came back (restarted, resumed, reconnected) and must apply through `target`,
/// the last index the others held at that moment.
#[derive(Clone, Copy, Debug)]
pub struct CatchUp {
    pub node: u64,
    pub target: u64,
    pub since: Instant,
}

impl Observed {
    /// Replicas at one applied index must have one digest there (the digest is read with the
    /// applied index, under the state machine). Two nodes are seldom polled at the same index
    /// while writes flow, but often when a fault has stopped commits: a divergence such as
    /// issue 21's finding 1 shows here while the run goes on, at the index it shows.
    fn compare_digest(&mut self, m: &NodeMetrics) {
        // A state machine that could not be read has no digest to compare.
        let Some(at) = m.last_applied.filter(|_| !m.digest.starts_with("unavailable")) else { return };
        match self.digests.get(&at) {
            Some((n, d)) if *n != m.id && *d != m.digest => {
                self.coincidences += 1;
                let what =
                    format!("applied index {at}: node {n} has digest {d}, node {} has {}", m.id, m.digest);
                if !self.diverged.contains(&what) {
                    self.diverged.push(what);
                }
            }
            Some((n, _)) if *n != m.id => {
                self.coincidences += 1;
            }
            Some(_) => {}
            None => {
                self.digests.insert(at, (m.id, m.digest.clone()));
                while self.digests.len() > DIGESTS_KEPT {
                    self.digests.pop_first();
                }
            }
        }
    }
}

/// The observer task, until `stop`.
#[derive(Debug)]
pub struct Observer {
    pub seen: Arc<Mutex<Observed>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    /// Watches the nodes at `addrs` (id → address) whose snapshot files are at `snapshots`.
    pub fn start(addrs: BTreeMap<u64, String>, snapshots: BTreeMap<u64, PathBuf>) -> Observer {
        let seen = Arc::new(Mutex::new(Observed::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !st.load(Ordering::Relaxed) {
                let polls = addrs.iter().map(|(id, a)| async move { (*id, metrics_at(a, EVERY * 2).await) });
                let got = futures_util::future::join_all(polls).await;
                let sizes: Vec<u64> =
                    snapshots.values().filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len())).collect();
                {
                    let mut o = s.lock().unwrap();
                    for (id, m) in got {
                        let Some(m) = m else { continue };
                        if m.state == "Leader" && !o.leaders.contains(&(m.term, m.id)) {
                            o.leaders.push((m.term, m.id));
                        }
                        o.max_term = o.max_term.max(m.term);
                        o.compare_digest(&m);
                        let applied = m.last_applied.unwrap_or(0);
                        let (done, left): (Vec<CatchUp>, Vec<CatchUp>) =
                            o.pending.iter().partition(|p| p.node == id && applied >= p.target);
                        o.pending = left;
                        o.caught_up.extend(done.iter().map(|p| (id, p.since.elapsed())));
                        o.last.insert(id, m);
                    }
                    o.largest_snapshot = sizes.into_iter().fold(o.largest_snapshot, u64::max);
                }
                tokio::time::sleep(EVERY).await;
            }
        });
        Observer { seen, stop, task }
    }

    pub async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}
