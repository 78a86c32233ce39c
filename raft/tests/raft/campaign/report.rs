//! The end of a run: the summary's figures, then the report (printed, written where asked,
//! the data directories kept when it failed).

use super::load::{Answer, Op, Record};
use super::schedule::{restart_class, Kind};
use super::summary::Summary;
use super::{
    commit, faults, load, max_gap, now_utc, workspace_root, Ending, Phase, Run, Watched, FRAME, TIMING,
};
use std::collections::BTreeMap;

/// The summary's figures (docs/fault-campaign.md says what each means).
pub(super) fn summarize(
    run: &Run,
    flags: &[String],
    phase: &Phase,
    records: &[Record],
    ending: &Ending,
    watched: &Watched,
    inj: &faults::Injector,
) -> Summary {
    let mut s = Summary::default();
    s.put("run", run.label);
    s.put("seed", run.seed);
    s.put("duration_s", run.secs);
    s.put("fault_phase_s", (phase.to - phase.from).as_secs());
    s.put("commit", commit());
    s.put("build", if cfg!(debug_assertions) { "debug" } else { "release" });
    s.put("cores", std::thread::available_parallelism().map_or(0, |n| n.get()));
    let tempers: Vec<load::Temper> = (0..run.writers).map(load::Temper::of).collect();
    let count = |t| tempers.iter().filter(|x| **x == t).count();
    s.put(
        "writers",
        format!(
            "{} ({} patient, {} impatient, {} hasty)",
            run.writers,
            count(load::Temper::Patient),
            count(load::Temper::Impatient),
            count(load::Temper::Hasty)
        ),
    );
    s.put("node_flags", flags.join(" "));
    s.put("frame_bytes", FRAME);
    s.put("faults.total", phase.steps.len());
    for k in Kind::ALL {
        s.put(&format!("faults.{}", k.key()), phase.steps.iter().filter(|st| st.fault.kind() == k).count());
    }
    s.put("faults.leader_targeted", inj.hit_leader);
    s.put("faults.leader_unknown", inj.leader_unknown);
    s.put("faults.leader_kills", inj.leader_kills);
    s.put("faults.leader_kills_losing_shipped_entries", inj.unwritten_tail_kills);
    let mut restarts: BTreeMap<&str, u64> = BTreeMap::new();
    for st in &phase.steps {
        for (_, down) in st.fault.restarts() {
            *restarts.entry(restart_class(down, TIMING)).or_default() += 1;
        }
    }
    for class in ["at_once", "within_election_timeout", "during_election_timeout", "past_election_timeout"] {
        s.put(&format!("restarts.{class}"), restarts.get(class).copied().unwrap_or(0));
    }
    s.put("writes.total", records.len());
    for a in ["committed", "rejected", "indeterminate"] {
        s.put(&format!("writes.{a}"), records.iter().filter(|r| r.answer.key() == a).count());
    }
    for op in [Op::Create, Op::Update, Op::Drop] {
        let of: Vec<&Record> = records.iter().filter(|r| r.op == op).collect();
        let count = |a: &str| of.iter().filter(|r| r.answer.key() == a).count();
        s.put(
            &format!("writes.{}", op.key()),
            format!(
                "{} ({} committed, {} rejected, {} indeterminate)",
                of.len(),
                count("committed"),
                count("rejected"),
                count("indeterminate")
            ),
        );
    }
    let retried: Vec<&Record> = records.iter().filter(|r| r.retried).collect();
    s.put(
        "writes.retried_same_id",
        format!(
            "{} ({} committed, {} indeterminate again)",
            retried.len(),
            retried.iter().filter(|r| r.answer.key() == "committed").count(),
            retried.iter().filter(|r| r.answer.key() == "indeterminate").count()
        ),
    );
    let duplicate = |r: &&Record| {
        matches!(r.answer, Answer::Committed { outcome: wal_raft::Response::Duplicate { .. }, .. })
    };
    s.put("writes.duplicates", records.iter().filter(duplicate).count());
    let e = &ending.entities;
    s.put("writes.indeterminate_applied", e.indeterminate_applied);
    s.put("writes.indeterminate_not_applied", e.indeterminate_not_applied);
    s.put("writes.indeterminate_unresolved", e.indeterminate_unresolved);
    let (gap, gap_at) = max_gap(records, phase.from, phase.to);
    let during: Vec<String> = phase
        .spans
        .iter()
        .filter(|sp| sp.from <= gap_at + gap && sp.to >= gap_at)
        .map(|sp| format!("fault {} ({})", sp.n, sp.kind.key()))
        .collect();
    s.put("acks.max_gap_ms", gap.as_millis());
    s.put("acks.max_gap_during", if during.is_empty() { "no fault".into() } else { during.join(", ") });
    s.put("raft.max_term", watched.max_term);
    s.put("raft.leaders_seen", watched.leaders);
    s.put("catchup.rejoins", inj.rejoins.len());
    s.put("catchup.seen_complete", watched.catch_ups.len());
    s.put("catchup.slowest_ms", watched.catch_ups.iter().map(|c| c.1).max().unwrap_or_default().as_millis());
    s.put("catchup.needing_snapshot", inj.rejoins.iter().filter(|r| r.needs_snapshot()).count());
    let backlog = inj
        .rejoins
        .iter()
        .map(|r| {
            let bytes: usize = records
                .iter()
                .filter(|x| matches!(x.answer, Answer::Committed { index, .. } if index > r.end && index <= r.last))
                .map(|x| x.bytes)
                .sum();
            (r.last.saturating_sub(r.end), bytes)
        })
        .max_by_key(|b| b.1)
        .unwrap_or((0, 0));
    s.put("catchup.largest_backlog_entries", backlog.0);
    s.put("catchup.largest_backlog_bytes", backlog.1);
    s.put("snapshot.largest_bytes", watched.largest_snapshot);
    s.put("snapshot.largest_in_frames", format!("{:.1}", watched.largest_snapshot as f64 / FRAME as f64));
    let end = ending.end.as_ref();
    s.put("end.applied_index", end.and_then(|m| m.last_applied).map_or("-".into(), |a| a.to_string()));
    s.put("end.entities", end.map_or(0, |m| m.entities));
    s.put("end.digests", ending.digests.map_or("-".into(), |d| d.to_string()));
    s.put("end.digest", end.map_or("-".into(), |m| m.digest.chars().take(16).collect::<String>()));
    s.put("checks.digests_compared_online", watched.coincidences);
    s.put("checks.digests_differing_online", inj.failures.iter().filter(|f| f.contains("diverged")).count());
    s.put("checks.names", e.names);
    s.put("checks.creates_lost", e.creates_lost);
    s.put("checks.rejected_applied", e.rejected_applied);
    s.put("checks.entities_wrong", e.wrong);
    s.put("checks.replicas_disagree", e.disagree);
    s.put("checks.unexpected_exits", inj.failures.iter().filter(|f| f.contains("exited on its own")).count());
    s.put("checks.panics", ending.panics);
    s.put("checks.offline_check", ending.offline_checks.join(" "));
    s.put("checks.offline_compare", &ending.offline_compare);
    s.put("failures", inj.failures.len());
    s.put("verdict", if inj.failures.is_empty() { "PASS" } else { "FAIL" });
    s
}

/// Prints the summary (and writes it where asked), keeps the data directories of a failed run
/// (or when `WALRAFT_CAMPAIGN_KEEP` is set), and fails the test with every failure.
pub(super) fn report(run: &Run, reproduce: &str, s: &Summary, inj: &mut faults::Injector) {
    let header = vec![
        "walraft-node fault campaign (raft/tests/raft/campaign/; docs/fault-campaign.md says what each figure means)"
            .to_string(),
        format!(
            "{} run, {} s of faults, seed {}, at commit {}, {}",
            run.label,
            run.secs,
            run.seed,
            s.get("commit").unwrap_or(""),
            now_utc()
        ),
        format!("reproduce: {reproduce}"),
    ];
    let text = s.render(&header);
    eprintln!("\n{text}");
    if let Some(p) = &run.summary {
        let p = if p.is_absolute() { p.clone() } else { workspace_root().join(p) };
        std::fs::write(&p, &text).unwrap_or_else(|e| panic!("writing the summary to {}: {e}", p.display()));
        eprintln!("summary written to {}", p.display());
    }
    let kept = inj.c.dir.path().display().to_string();
    if !inj.failures.is_empty() || std::env::var_os("WALRAFT_CAMPAIGN_KEEP").is_some() {
        inj.c.dir.disable_cleanup(true);
        std::fs::write(inj.c.dir.path().join("campaign-events.txt"), inj.events.join("\n")).ok();
        eprintln!("data directories, node logs (n<id>.out) and the event log kept in {kept}");
    }
    assert!(
        inj.failures.is_empty(),
        "campaign {} (seed {}) failed: {} failure(s):\n{}\n\ndata directories, node logs (n<id>.out) and the event log kept in {kept}\nreproduce: {reproduce}",
        run.label,
        run.seed,
        inj.failures.len(),
        inj.failures.join("\n---\n")
    );
}
