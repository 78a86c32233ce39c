//! The campaign's fault schedule: a sequence of faults that is a function of the seed alone.
//! The same seed gives the same faults with the same durations, in the same order, whatever
//! the cluster does; only which node id a role names (the leader, a follower) is decided when
//! the fault starts, because leadership cannot be known in advance.
//!
//! Every kind of fault comes once per cycle, kills twice ([`CYCLE_TWICE`]), in a seeded order,
//! so a run of one cycle already has every kind. The first target
//! of a fault is the leader more often than not (`LEADER_FIRST`): losing the leader is what
//! exercises elections, discarded entries and the restart rules of docs/replication-safety.md.

use std::fmt;

/// The node timing the schedule scales to (the nodes' flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
}

/// How far the schedule stretches its durations, in election timeouts (`election_max_ms`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    /// A pause lasts from one election timeout up to this many.
    pub max_pause: f64,
    /// A restart "past the election timeout" comes after 1.5 up to this many.
    pub max_down: f64,
    /// The load runs alone between two faults for this many milliseconds, at most.
    pub max_gap_ms: u64,
}

impl Scale {
    /// CI: short pauses and downtimes, so every kind fits in about half a minute.
    pub const SHORT: Scale = Scale { max_pause: 2.5, max_down: 2.0, max_gap_ms: 600 };
    /// The long run: pauses of 1-10 election timeouts (1-10 s at the campaign's timing), as an
    /// operator's campaign would.
    pub const LONG: Scale = Scale { max_pause: 10.0, max_down: 5.0, max_gap_ms: 3000 };
}

/// Who a fault targets; resolved to a node id when the fault starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Leader,
    /// The first or second follower, by id.
    Follower(u8),
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Leader => write!(f, "leader"),
            Role::Follower(i) => write!(f, "follower{i}"),
        }
    }
}

/// The kinds of fault, as the summary counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    KillOne,
    KillTwo,
    PauseOne,
    PauseTwo,
    Partition,
    KillDuringPause,
    KillDuringPartition,
    Backlog,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::KillOne,
        Kind::KillTwo,
        Kind::PauseOne,
        Kind::PauseTwo,
        Kind::Partition,
        Kind::KillDuringPause,
        Kind::KillDuringPartition,
        Kind::Backlog,
    ];

    /// The summary's key.
    pub fn key(self) -> &'static str {
        match self {
            Kind::KillOne => "kill_one",
            Kind::KillTwo => "kill_two",
            Kind::PauseOne => "pause_one",
            Kind::PauseTwo => "pause_two",
            Kind::Partition => "partition",
            Kind::KillDuringPause => "kill_during_pause",
            Kind::KillDuringPartition => "kill_during_partition",
            Kind::Backlog => "backlog",
        }
    }
}

/// One fault. Durations in milliseconds from the fault's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL one or two nodes at the same moment; restart each after its `down_ms`.
    Kill { who: Vec<Role>, down_ms: Vec<u64> },
    /// SIGSTOP one or two nodes; SIGCONT each after its `ms`.
    Pause { who: Vec<Role>, ms: Vec<u64> },
    /// The partition switch on for `ms`: no Raft traffic in or out of the node.
    Partition { who: Role, ms: u64 },
    /// `paused` is stopped for `pause_ms`; `killed` is killed `kill_at_ms` into the pause and
    /// restarted `down_ms` later (the cluster has no quorum while both are out).
    KillDuringPause { paused: Role, pause_ms: u64, killed: Role, kill_at_ms: u64, down_ms: u64 },
    /// The same with the partition switch instead of the pause.
    KillDuringPartition { cut: Role, cut_ms: u64, killed: Role, kill_at_ms: u64, down_ms: u64 },
    /// A follower is killed, `entities` creates of `props` bytes each are written while it is
    /// down (a backlog of many frames), and it is restarted: it catches up from the log in
    /// several batches, or from a snapshot sent in chunks.
    Backlog { who: Role, entities: u32, props: u32 },
}

impl Fault {
    pub fn kind(&self) -> Kind {
        match self {
            Fault::Kill { who, .. } if who.len() == 1 => Kind::KillOne,
            Fault::Kill { .. } => Kind::KillTwo,
            Fault::Pause { who, .. } if who.len() == 1 => Kind::PauseOne,
            Fault::Pause { .. } => Kind::PauseTwo,
            Fault::Partition { .. } => Kind::Partition,
            Fault::KillDuringPause { .. } => Kind::KillDuringPause,
            Fault::KillDuringPartition { .. } => Kind::KillDuringPartition,
            Fault::Backlog { .. } => Kind::Backlog,
        }
    }

    /// The roles it kills, with the delay before each restart.
    pub fn restarts(&self) -> Vec<(Role, u64)> {
        match self {
            Fault::Kill { who, down_ms } => who.iter().copied().zip(down_ms.iter().copied()).collect(),
            Fault::KillDuringPause { killed, down_ms, .. }
            | Fault::KillDuringPartition { killed, down_ms, .. } => vec![(*killed, *down_ms)],
            Fault::Backlog { who, .. } => vec![(*who, 0)],
            Fault::Pause { .. } | Fault::Partition { .. } => vec![],
        }
    }

    /// Every role it targets.
    pub fn targets(&self) -> Vec<Role> {
        match self {
            Fault::Kill { who, .. } | Fault::Pause { who, .. } => who.clone(),
            Fault::Partition { who, .. } | Fault::Backlog { who, .. } => vec![*who],
            Fault::KillDuringPause { paused: a, killed: b, .. }
            | Fault::KillDuringPartition { cut: a, killed: b, .. } => vec![*a, *b],
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[Role]| v.iter().map(Role::to_string).collect::<Vec<_>>().join("+");
        match self {
            Fault::Kill { who, down_ms } => write!(f, "SIGKILL {}, restarts after {down_ms:?} ms", list(who)),
            Fault::Pause { who, ms } => write!(f, "SIGSTOP {} for {ms:?} ms", list(who)),
            Fault::Partition { who, ms } => write!(f, "partition {who} for {ms} ms"),
            Fault::KillDuringPause { paused, pause_ms, killed, kill_at_ms, down_ms } => write!(
                f,
                "SIGSTOP {paused} for {pause_ms} ms; SIGKILL {killed} at {kill_at_ms} ms, restart {down_ms} ms later"
            ),
            Fault::KillDuringPartition { cut, cut_ms, killed, kill_at_ms, down_ms } => write!(
                f,
                "partition {cut} for {cut_ms} ms; SIGKILL {killed} at {kill_at_ms} ms, restart {down_ms} ms later"
            ),
            Fault::Backlog { who, entities, props } => {
                write!(f, "SIGKILL {who}, {entities} creates of {props} bytes, restart")
            }
        }
    }
}

/// A fault and the load-only gap before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub gap_ms: u64,
    pub fault: Fault,
}

/// How often (in 100) a fault's first target is the leader.
const LEADER_FIRST: u64 = 65;

/// Kinds that come twice a cycle: kills are what lose a node's unsynced tail and what a
/// restart within the election timeout (issue 21, finding 1) needs.
pub const CYCLE_TWICE: [Kind; 2] = [Kind::KillOne, Kind::KillTwo];

/// The length of a cycle: every kind once, [`CYCLE_TWICE`] twice.
pub const CYCLE: usize = Kind::ALL.len() + CYCLE_TWICE.len();

/// The seeded sequence of steps.
#[derive(Debug)]
pub struct Schedule {
    rng: wal_rng::Rng,
    timing: Timing,
    scale: Scale,
    /// The kinds still to come in this cycle.
    cycle: Vec<Kind>,
}

impl Schedule {
    pub fn new(seed: u64, timing: Timing, scale: Scale) -> Schedule {
        Schedule { rng: wal_rng::Rng::splitmix64(seed), timing, scale, cycle: Vec::new() }
    }

    /// The next step.
    pub fn next_step(&mut self) -> Step {
        if self.cycle.is_empty() {
            self.cycle = Kind::ALL.iter().chain(&CYCLE_TWICE).copied().collect();
            self.rng.shuffle(&mut self.cycle);
        }
        let kind = self.cycle.pop().unwrap_or(Kind::KillOne);
        let gap_ms =
            self.rng.range(self.timing.heartbeat_ms, self.scale.max_gap_ms.max(self.timing.heartbeat_ms));
        Step { gap_ms, fault: self.fault(kind) }
    }

    fn fault(&mut self, kind: Kind) -> Fault {
        match kind {
            Kind::KillOne => {
                let a = self.first();
                Fault::Kill { who: vec![a], down_ms: vec![self.down(a)] }
            }
            Kind::KillTwo => {
                let a = self.first();
                let b = self.other(a);
                Fault::Kill { who: vec![a, b], down_ms: vec![self.down(a), self.down(b)] }
            }
            Kind::PauseOne => Fault::Pause { who: vec![self.first()], ms: vec![self.pause()] },
            Kind::PauseTwo => {
                let a = self.first();
                Fault::Pause { who: vec![a, self.other(a)], ms: vec![self.pause(), self.pause()] }
            }
            Kind::Partition => Fault::Partition { who: self.first(), ms: self.pause() },
            Kind::KillDuringPause => {
                let (paused, pause_ms, killed, kill_at_ms, down_ms) = self.kill_during();
                Fault::KillDuringPause { paused, pause_ms, killed, kill_at_ms, down_ms }
            }
            Kind::KillDuringPartition => {
                let (cut, cut_ms, killed, kill_at_ms, down_ms) = self.kill_during();
                Fault::KillDuringPartition { cut, cut_ms, killed, kill_at_ms, down_ms }
            }
            // A follower: the backlog is what the others write while it is away, besides the
            // writers' load: 48 to 96 creates of 2-3 KiB, 96 KiB or more, at least six 16 KiB
            // frames. (A command travels as raw bytes; with 16 KiB frames a node takes one of
            // up to 15,852 bytes, `net/limit.rs`: these are far from that limit.)
            Kind::Backlog => Fault::Backlog {
                who: Role::Follower(self.rng.below(2) as u8),
                entities: self.rng.range(48, 96) as u32,
                props: self.rng.range(2 << 10, 3 << 10) as u32,
            },
        }
    }

    /// A node out for a while (its role and how long), and another killed during that time
    /// (its role, when, and its restart delay).
    fn kill_during(&mut self) -> (Role, u64, Role, u64, u64) {
        let (out, ms) = (self.first(), self.pause());
        let killed = self.other(out);
        let kill_at_ms = self.rng.range(ms / 5, ms * 3 / 5);
        (out, ms, killed, kill_at_ms, self.down(killed))
    }

    /// A fault's first target: the leader, on purpose, more often than not.
    fn first(&mut self) -> Role {
        if self.rng.below(100) < LEADER_FIRST {
            Role::Leader
        } else {
            Role::Follower(self.rng.below(2) as u8)
        }
    }

    /// A second target, different from `a`.
    fn other(&mut self, a: Role) -> Role {
        match a {
            Role::Leader => Role::Follower(self.rng.below(2) as u8),
            Role::Follower(i) if self.rng.bool() => Role::Follower(1 - i),
            Role::Follower(_) => Role::Leader,
        }
    }

    /// The restart delay of `who`: at once, within the election timeout (before the
    /// survivors' earliest election), or past it (1.5 up to `max_down` election timeouts). In
    /// equal shares for a follower; a leader comes back before an election three times in four
    /// (what finding 1 needed: a leader back in the same term).
    fn down(&mut self, who: Role) -> u64 {
        let t = self.timing;
        let roll = match who {
            Role::Leader => self.rng.below(8) as u8 / 3,
            Role::Follower(_) => self.rng.below(3) as u8,
        };
        match roll {
            0 => 0,
            1 => self.rng.range(1, t.election_min_ms / 2),
            _ => {
                let hi = (t.election_max_ms as f64 * self.scale.max_down) as u64;
                self.rng.range(t.election_max_ms * 3 / 2, hi.max(t.election_max_ms * 3 / 2))
            }
        }
    }

    /// A pause or partition: one election timeout up to `max_pause` of them.
    fn pause(&mut self) -> u64 {
        let e = self.timing.election_max_ms;
        let hi = (e as f64 * self.scale.max_pause) as u64;
        self.rng.range(e, hi.max(e))
    }
}

/// How a restart delay compares with the election timeout (the summary's classes).
pub fn restart_class(down_ms: u64, t: Timing) -> &'static str {
    if down_ms == 0 {
        "at_once"
    } else if down_ms < t.election_min_ms {
        "within_election_timeout"
    } else if down_ms > t.election_max_ms {
        "past_election_timeout"
    } else {
        "during_election_timeout"
    }
}
