//! The campaign's final checks, once every fault is undone and the writers have stopped:
//! the replicas converge (one applied index, one digest: `support::agreement`), every entity
//! on every replica is what its writer's answers say (so every acknowledged write is there,
//! once, and nothing Rejected applied), every Indeterminate write is resolved, and, with the
//! nodes stopped, the offline tools agree: `walraft-node check` CLEAN on each data directory
//! and `walraft-node compare` AGREE on the three.

use super::load::{self, Answer, Op, Record};
use crate::support::{create, Cluster, BIN};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;
use wal_raft::net::wire::EntityView;

/// One acknowledged write after everything healed (it also commits whatever an earlier leader
/// left uncommitted); its index. Bounded.
pub async fn barrier(addrs: &[String]) -> Result<u64, String> {
    let c = load::client(addrs.to_vec());
    let cmd = create("campaign-barrier");
    let mut last = None;
    for _ in 0..5 {
        match c.write(&cmd).await {
            wal_raft::net::wire::WriteReply::Committed { index, .. } => return Ok(index),
            other => last = Some(other),
        }
    }
    Err(format!("no write acknowledged after healing: {last:?}"))
}

/// What the entity check found.
#[derive(Debug, Default)]
pub struct Entities {
    pub names: u64,
    /// Committed creates whose entity is missing, or not the one made at the acknowledged
    /// index, on some replica.
    pub creates_lost: u64,
    /// Rejected creates whose name exists on some replica.
    pub rejected_applied: u64,
    /// Names whose state on some replica is none its writer's answers allow (a lost, doubled
    /// or Rejected-yet-applied update or drop; or a create above), or whose answers were
    /// already inconsistent (a sole writer's write refused by the catalog, a receipt that
    /// disagrees with its index).
    pub wrong: u64,
    /// Names the replicas do not agree on.
    pub disagree: u64,
    /// Indeterminate writes found applied once, found not applied, and neither.
    pub indeterminate_applied: u64,
    pub indeterminate_not_applied: u64,
    pub indeterminate_unresolved: u64,
    /// The first few problems, for the report.
    pub examples: Vec<String>,
}

impl Entities {
    fn note(&mut self, what: String) {
        if self.examples.len() < 20 {
            self.examples.push(what);
        }
    }

    pub fn failures(&self) -> u64 {
        self.creates_lost + self.rejected_applied + self.wrong + self.disagree + self.indeterminate_unresolved
    }
}

/// Looks every recorded name up on every replica and holds it to its writer's answers.
pub async fn entities(addrs: &[String], records: &[Record]) -> Result<Entities, String> {
    let mut by_name: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        by_name.entry(r.name.as_str()).or_default().push(r);
    }
    let names: Vec<String> = by_name.keys().map(|n| n.to_string()).collect();
    // Each replica looked up by its own task, all names in order.
    let lookups = addrs.iter().map(|a| {
        let names = names.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let mut c = wal_raft::client::Client::new(vec![a.clone()]);
            c.call_timeout = Duration::from_secs(10);
            let mut out = Vec::with_capacity(names.len());
            for n in &names {
                out.push(c.lookup(&a, None, n).await.map_err(|e| format!("{a}: lookup {n}: {e}"))?);
            }
            Ok::<Vec<Option<EntityView>>, String>(out)
        })
    });
    let mut seen: Vec<Vec<Option<EntityView>>> = Vec::new();
    for h in futures_util::future::join_all(lookups).await {
        seen.push(h.map_err(|e| e.to_string())??);
    }
    let mut e = Entities { names: names.len() as u64, ..Entities::default() };
    for (i, (name, recs)) in by_name.iter().enumerate() {
        let views: Vec<&Option<EntityView>> = seen.iter().map(|s| &s[i]).collect();
        let expected = load::expect(recs);
        if views.iter().any(|v| *v != views[0]) {
            e.disagree += 1;
            e.note(format!("{name}: the replicas differ: {views:?}"));
        }
        for p in &expected.problems {
            e.note(p.clone());
        }
        let mut wrong = !expected.problems.is_empty();
        for (node, v) in views.iter().enumerate() {
            for r in recs.iter().filter(|r| r.op == Op::Create) {
                let at = match &r.answer {
                    Answer::Committed { outcome: wal_raft::Response::Duplicate { first_index }, .. } => {
                        Some(*first_index)
                    }
                    Answer::Committed { index, .. } => Some(*index),
                    _ => None,
                };
                let dropped =
                    recs.iter().any(|d| d.op == Op::Drop && !matches!(d.answer, Answer::Rejected(_)));
                if let Some(at) = at {
                    if !dropped && v.as_ref().map(|v| v.id) != Some(at) {
                        e.creates_lost += 1;
                        e.note(format!(
                            "{name}: created at index {at} (acknowledged); node {} has {v:?}",
                            node + 1
                        ));
                    }
                }
                if matches!(r.answer, Answer::Rejected(_)) && v.is_some() {
                    e.rejected_applied += 1;
                    e.note(format!("{name}: create Rejected, yet node {} has {v:?}", node + 1));
                }
            }
            if !expected.possible.iter().any(|p| p.matches(v)) {
                wrong = true;
                e.note(format!(
                    "{name}: node {} has {v:?}; the answers allow {:?}; writes: {:?}",
                    node + 1,
                    expected.possible,
                    recs.iter().map(|r| (r.op, r.target, r.answer.key())).collect::<Vec<_>>()
                ));
            }
        }
        e.wrong += u64::from(wrong);
        if let Some((last, before)) = recs.split_last() {
            if matches!(last.answer, Answer::Indeterminate(_)) {
                match load::resolve(before, last, views[0]) {
                    Some(true) => e.indeterminate_applied += 1,
                    Some(false) => e.indeterminate_not_applied += 1,
                    None => {
                        e.indeterminate_unresolved += 1;
                        e.note(format!(
                            "{name}: Indeterminate {:?} neither applied nor not: {:?}",
                            last.op, views[0]
                        ));
                    }
                }
            }
        }
    }
    Ok(e)
}

/// The offline tools on the stopped nodes' data directories: each `check` line, then the
/// `compare` verdict. Failures are pushed to `failures`.
pub fn offline(c: &Cluster, failures: &mut Vec<String>) -> (Vec<String>, String) {
    let mut checks = Vec::new();
    for id in 1..=3 {
        let out = Command::new(BIN).arg("check").arg(c.data(id)).output();
        let word = match out {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).to_string();
                let clean = o.status.success() && text.contains("STATE CLEAN");
                if !clean {
                    failures.push(format!("walraft-node check of node {id}: {}\n{text}", o.status));
                }
                if clean { "CLEAN" } else { "NOT_CLEAN" }.to_string()
            }
            Err(e) => {
                failures.push(format!("walraft-node check of node {id} did not run: {e}"));
                "NOT_RUN".into()
            }
        };
        checks.push(word);
    }
    let out = Command::new(BIN).arg("compare").args((1..=3).map(|i| c.data(i))).output();
    let verdict = match out {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            let word = text.split(':').next().unwrap_or("").trim().to_string();
            if !(o.status.success() && word == "AGREE") {
                failures.push(format!("walraft-node compare: {}\n{text}", o.status));
            }
            word
        }
        Err(e) => {
            failures.push(format!("walraft-node compare did not run: {e}"));
            "NOT_RUN".into()
        }
    };
    (checks, verdict)
}

/// The lines of a node's output (every process it ran) that contain `what`.
pub fn lines(c: &Cluster, id: u64, what: &str) -> Vec<String> {
    c.output(id).lines().filter(|l| l.contains(what)).map(str::to_string).collect()
}
