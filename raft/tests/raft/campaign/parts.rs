//! The campaign's parts checked on their own: the schedule, the model of what the answers
//! allow, the documents' quotes of the committed summary, and the supervisor leaving a node
//! that fenced itself down.

use super::load::{Answer, Op, Record};
use super::schedule::{restart_class, Kind, Scale, Schedule, Step};
use super::{
    faults, load, observe, schedule, summary, workspace_root, DOCS_FILE, QUOTED, SUMMARY_FILE, TIMING,
};
use crate::support::Cluster;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn timing_and(scale: Scale, seed: u64) -> Vec<Step> {
    let mut s = Schedule::new(seed, TIMING, scale);
    (0..64).map(|_| s.next_step()).collect()
}

#[test]
fn the_schedule_is_a_function_of_the_seed() {
    assert_eq!(timing_and(Scale::LONG, 7), timing_and(Scale::LONG, 7));
    assert_ne!(timing_and(Scale::LONG, 7), timing_and(Scale::LONG, 8));
    // The short run's scale changes durations, never which faults come.
    let kinds = |v: &[Step]| v.iter().map(|s| s.fault.kind()).collect::<Vec<_>>();
    assert_eq!(kinds(&timing_and(Scale::SHORT, 7)), kinds(&timing_and(Scale::LONG, 7)));
}

#[test]
fn every_kind_comes_every_cycle_scaled_to_the_election_timeout() {
    let e = TIMING.election_max_ms;
    for scale in [Scale::SHORT, Scale::LONG] {
        let steps = timing_and(scale, 21);
        let mut every: Vec<Kind> = Kind::ALL.iter().chain(&schedule::CYCLE_TWICE).copied().collect();
        every.sort();
        for cycle in steps.chunks(schedule::CYCLE).filter(|c| c.len() == schedule::CYCLE) {
            let mut kinds: Vec<Kind> = cycle.iter().map(|s| s.fault.kind()).collect();
            kinds.sort();
            assert_eq!(kinds, every);
        }
        let mut leader_first = 0;
        for s in &steps {
            let t = s.fault.targets();
            leader_first += usize::from(t[0] == schedule::Role::Leader);
            assert!(t.iter().enumerate().all(|(i, r)| !t[..i].contains(r)), "one node twice: {}", s.fault);
            let pauses = match &s.fault {
                schedule::Fault::Pause { ms, .. } => ms.clone(),
                schedule::Fault::Partition { ms, .. } => vec![*ms],
                schedule::Fault::KillDuringPause { pause_ms, kill_at_ms, .. }
                | schedule::Fault::KillDuringPartition { cut_ms: pause_ms, kill_at_ms, .. } => {
                    assert!(kill_at_ms < pause_ms, "{}", s.fault);
                    vec![*pause_ms]
                }
                _ => vec![],
            };
            for p in pauses {
                assert!(p >= e && p as f64 <= e as f64 * scale.max_pause, "{}", s.fault);
            }
            for (_, down) in s.fault.restarts() {
                assert!(down as f64 <= e as f64 * scale.max_down, "{}", s.fault);
            }
        }
        // The leader on purpose, more often than not (65 in 100 of the first targets; backlog
        // faults target a follower): a rate, so counted over 20 seeds' schedules, not one.
        let (mut led, mut all) = (leader_first, steps.len());
        for seed in 22..41 {
            let more = timing_and(scale, seed);
            led += more.iter().filter(|s| s.fault.targets()[0] == schedule::Role::Leader).count();
            all += more.len();
        }
        assert!(led * 2 > all, "{led} of {all} first targets are the leader");
        let classes: Vec<&str> =
            steps.iter().flat_map(|s| s.fault.restarts()).map(|(_, d)| restart_class(d, TIMING)).collect();
        for class in ["at_once", "within_election_timeout", "past_election_timeout"] {
            assert!(classes.contains(&class), "no restart {class} in {classes:?}");
        }
    }
}

fn record(op: Op, name: &str, target: Option<(u64, u64)>, answer: Answer) -> Record {
    Record {
        writer: 0,
        op,
        name: name.into(),
        target,
        bytes: 0,
        retried: false,
        answer,
        done_at: Duration::ZERO,
    }
}

fn receipt(op: catalog::Op, id: u64, version: u64) -> wal_raft::Response {
    wal_raft::Response::Done(catalog::Receipt { op, id: catalog::EntityId(id), version, removed: 0 }.encode())
}

fn view(id: u64, version: u64) -> Option<wal_raft::net::wire::EntityView> {
    Some(wal_raft::net::wire::EntityView {
        id,
        parent: None,
        kind: "metalake".into(),
        name: "x".into(),
        version,
    })
}

/// The model the entity check holds replicas to: what the answers allow, and how an
/// Indeterminate write resolves. These are what make the campaign able to fail.
#[test]
fn the_answers_say_what_each_entity_must_be() {
    use load::{expect, resolve, Possible};
    let committed = |index, outcome| Answer::Committed { index, outcome };
    let create = record(Op::Create, "x", None, committed(10, receipt(catalog::Op::Create, 10, 1)));
    let update = record(Op::Update, "x", Some((10, 1)), committed(12, receipt(catalog::Op::Update, 10, 2)));
    let e = expect(&[&create, &update]);
    assert!(e.problems.is_empty(), "{e:?}");
    assert_eq!(e.possible, vec![Possible::Live { id: Some(10), version: 2 }]);
    // An acknowledged update that is not there (version 1), or the entity at another index.
    assert!(!e.possible.iter().any(|p| p.matches(&view(10, 1))));
    assert!(!e.possible.iter().any(|p| p.matches(&view(11, 2))));
    // A Rejected drop changes nothing; an Indeterminate one may or may not have applied.
    let rejected = record(Op::Drop, "x", Some((10, 2)), Answer::Rejected("no leader".into()));
    assert_eq!(expect(&[&create, &update, &rejected]).possible, e.possible);
    let maybe = record(Op::Drop, "x", Some((10, 2)), Answer::Indeterminate("timeout".into()));
    let before = [&create, &update];
    assert_eq!(resolve(&before, &maybe, &None), Some(true));
    assert_eq!(resolve(&before, &maybe, &view(10, 2)), Some(false));
    assert_eq!(resolve(&before, &maybe, &view(10, 3)), None);
    // A sole writer's write refused by the catalog: applied twice, or something lost.
    let twice =
        record(Op::Create, "x", None, committed(14, wal_raft::Response::Refused("name exists".into())));
    assert!(!expect(&[&create, &twice]).problems.is_empty());
    // A receipt that disagrees with the index it was acknowledged at.
    let moved = record(Op::Create, "y", None, committed(20, receipt(catalog::Op::Create, 19, 1)));
    assert!(!expect(&[&moved]).problems.is_empty());
    // A retry under the same request id answered Duplicate: the first index, applied once.
    let dup = record(Op::Create, "z", None, committed(31, wal_raft::Response::Duplicate { first_index: 30 }));
    assert_eq!(expect(&[&dup]).possible, vec![Possible::Live { id: Some(30), version: 1 }]);
}

/// docs/fault-campaign.md quotes the committed summary's figures; each must be the file's.
#[test]
fn the_docs_quote_the_committed_campaign_summary() {
    let root = workspace_root();
    let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let text = read(SUMMARY_FILE);
    let figures = summary::parse(&text).unwrap_or_else(|e| panic!("{SUMMARY_FILE}: {e}"));
    let md = read(DOCS_FILE);
    let differ = summary::docs_differ(&md, &figures);
    assert!(differ.is_empty(), "{DOCS_FILE} against {SUMMARY_FILE}:\n{}", differ.join("\n"));
    let quoted: Vec<String> = summary::quoted(&md).into_iter().map(|q| q.1).collect();
    for k in QUOTED {
        assert!(quoted.iter().any(|q| q == k), "{DOCS_FILE} does not quote `{k}`");
    }
    assert_eq!(figures.get("verdict").map(String::as_str), Some("PASS"), "the committed run failed");
}

#[test]
fn a_quoted_figure_that_differs_from_the_summary_is_named() {
    let figures = summary::parse("# a comment\nseed: 7\nfaults.total: 412\n").unwrap();
    // Rows outside the section (a table of meanings, a later section) are not quotes.
    let md =
        "## Meanings\n\n| `seed` | the seed |\n\n## The committed run\n\n| figure | value |\n|---|---|\n\
              | `seed` | 7 |\n| `faults.total` | 413 |\n| `gone` | 1 |\n\n## Later\n\n| `seed` | 9 |\n";
    assert_eq!(
        summary::docs_differ(md, &figures),
        vec![
            "line 10: `faults.total` is \"413\" in the docs, \"412\" in the summary".to_string(),
            "line 11: `gone` is not in the summary".to_string(),
        ]
    );
    assert!(summary::parse("seed 7\n").unwrap_err().contains("line 1"));
    assert!(summary::parse("seed: 7\nseed: 8\n").unwrap_err().contains("line 2"));
}

/// The supervisor does not restart a node that fenced itself: its `FENCED` file refuses every
/// start (exit 9), so a restart would only loop, one failure every poll. It is one failure, and
/// the node stays down however often the campaign heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_fenced_itself_is_left_down_and_failed_once() {
    let mut c = Cluster::start(&[]);
    c.leader(&[1, 2, 3]).await;
    c.kill9(3);
    std::fs::write(c.data(3).join(wal_raft::fence::FENCE_FILE), "node 3 diverged at index 8 (a test)\n")
        .unwrap();
    let seen = Arc::new(Mutex::new(observe::Observed::default()));
    let mut inj = faults::Injector::new(c, Instant::now(), Arc::new(Mutex::new(Vec::new())), seen);
    for _ in 0..3 {
        inj.heal_all().await;
        assert!(!inj.c.running(3), "the fenced node was started again");
    }
    assert_eq!(inj.failures.len(), 1, "{:#?}", inj.failures);
    assert!(inj.failures[0].contains("node 3 fenced itself") && inj.failures[0].contains("(a test)"));
    assert!(inj.c.running(1) && inj.c.running(2));
    inj.c.stop_all();
}
