//! Offline checks of Raft nodes' data directories, with walcheck's verdicts and exit codes.
//!
//! Plain `walcheck` cannot read a Raft log's state: each entry is an openraft entry (a log id
//! header, then the apply seam's envelope and command, `codec.rs`), and blank and membership
//! entries carry no command at all, so the catalog replay would refuse the first entry. The
//! generic entry point (`walcheck::run_with`) takes a different state machine but not a
//! different entry encoding. So this module keeps walcheck's two halves and swaps only the
//! decoding:
//!
//! - the CRC verdict is `verifier::verify` on `DIR/log`, unchanged (the log format is ours);
//! - the state verdict replays the log with `wal_state::Replayer` (the replay-and-compare core
//!   the pipeline and walcheck use) from the node's snapshot file (`DIR/sm/raft-snapshot`),
//!   feeding it the command bytes of each command entry and every checkpoint record the node's
//!   state machine wrote, and compares the replayed state with every digest a majority of the
//!   voters claimed in the log (`claims/`) after an index past the snapshot: CLEAN,
//!   DIVERGENT (where, with both digests) or UNSUPPORTED_VERSION. The claims are what make a
//!   replica whose log differs from the others' DIVERGENT: its own checkpoints agree with its
//!   own log;
//! - `compare` reads several nodes' logs in lockstep with `verifier::compare::lockstep` (the
//!   loop `walcheck compare` uses): the same entry bytes (log id, payload) at every index all of
//!   them hold, and the same state digest at the highest common index.

use crate::claims::Replayed;
use crate::codec::decode_entry;
use crate::state_machine::read_snapshot_file;
use catalog::Catalog;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wal::{Durability, Options, RecoveryMode, Wal};
use wal::{ItemKind, Replay};
use wal_state::Applier;

/// walcheck's exit code for DIVERGENT.
pub const EXIT_DIVERGENT: i32 = 4;
/// walcheck's exit code for UNSUPPORTED_VERSION.
pub const EXIT_UNSUPPORTED: i32 = 6;
/// walcheck's exit code for IO_ERROR.
pub const EXIT_IO_ERROR: i32 = 5;

/// The state verdict of one node's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// `claims`: digests a majority of the voters claimed that the replay reached, the
    /// highest at `claims_through`.
    Clean {
        checkpoints: u64,
        through: Option<u64>,
        unchecked: u64,
        claims: u64,
        claims_through: Option<u64>,
    },
    Divergent(String),
    Unsupported(String),
    NotChecked(String),
}

impl State {
    pub fn word(&self) -> &'static str {
        match self {
            State::Clean { .. } => "CLEAN",
            State::Divergent(_) => "DIVERGENT",
            State::Unsupported(_) => "UNSUPPORTED_VERSION",
            State::NotChecked(_) => "NOT_CHECKED",
        }
    }

    fn code(&self) -> i32 {
        match self {
            State::Clean { .. } | State::NotChecked(_) => 0,
            State::Divergent(_) => EXIT_DIVERGENT,
            State::Unsupported(_) => EXIT_UNSUPPORTED,
        }
    }
}

/// What checking one node's directory found.
#[derive(Clone, Debug)]
pub struct NodeCheck {
    pub dir: PathBuf,
    pub crc: &'static str,
    pub crc_code: i32,
    pub state: State,
    /// The snapshot the replay started from (its last index).
    pub base: Option<u64>,
    /// The last index replayed, and the digest (hex) and entity count there.
    pub last: Option<u64>,
    pub digest: Option<String>,
    pub entities: Option<u64>,
    /// The node fenced itself while it ran (the first line of its `FENCED` file): its log may
    /// still be intact (a divergence in memory), which the state verdict says.
    pub fenced: Option<String>,
}

impl NodeCheck {
    /// The more severe of the two verdicts' codes.
    pub fn exit_code(&self) -> i32 {
        self.crc_code.max(self.state.code())
    }

    pub fn summary(&self) -> String {
        let mut s = format!("{}  CRC {}  STATE {}", self.dir.display(), self.crc, self.state.word());
        match &self.state {
            State::Clean { checkpoints, through, unchecked, claims, claims_through } => {
                let _ = write!(
                    s,
                    "\n  CLEAN replayed through index {} from {}; {checkpoints} checkpoints verified{}; {unchecked} entries after the last one not cross-checked; {claims} majority digest claims verified{}",
                    self.last.map_or("-".into(), |l| l.to_string()),
                    self.base.map_or("the start".into(), |b| format!("the snapshot at {b}")),
                    through.map_or(String::new(), |t| format!(" through {t}")),
                    claims_through.map_or(String::new(), |t| format!(" through {t}")),
                );
            }
            State::Divergent(w) | State::Unsupported(w) | State::NotChecked(w) => {
                let _ = write!(s, "\n  {}: {w}", self.state.word());
            }
        }
        if let Some(f) = &self.fenced {
            let _ = write!(
                s,
                "\n  FENCED (the node fenced itself while running; {}): {f}",
                crate::fence::FENCE_FILE
            );
        }
        if let (Some(d), Some(n)) = (&self.digest, self.entities) {
            let _ = write!(s, "\n  digest {d} over {n} entities");
        }
        s
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A node's log opened for reading, with the replay that feeds the replayer.
struct Opened {
    wal: Wal,
    base: Option<u64>,
    /// The membership at the snapshot (the voters claims are counted against).
    membership: crate::Membership,
    /// The snapshot's state (or a fresh one); taken by the one walk over this log.
    applier: Option<Applier<Catalog>>,
}

fn open(dir: &Path) -> Result<Opened, String> {
    let log_dir = dir.join("log");
    let opts = Options {
        recovery: RecoveryMode::Salvage,
        read_only: true,
        create: false,
        first_lsn: 0,
        ..Options::default()
    };
    let (wal, _) = Wal::open_reader(Arc::new(verifier::pread::ReadOnlyDir::new(&log_dir)), opts)
        .map_err(|e| format!("{}: {e}", log_dir.display()))?;
    let snap =
        read_snapshot_file(&dir.join("sm")).map_err(|e| format!("{}: {e}", dir.join("sm").display()))?;
    let (base, membership, applier) = match snap {
        Some((meta, applier)) => {
            (meta.last_log_id.map(|l| l.index), meta.last_membership.membership().clone(), applier)
        }
        None => (None, crate::Membership::default(), Applier::new(Catalog::new(), crate::DEDUPE_WINDOW)),
    };
    if wal.prefix_purged() && base.is_none() {
        return Err("the log's prefix was purged and there is no snapshot file to start from".into());
    }
    Ok(Opened { wal, base, membership, applier: Some(applier) })
}

/// Walks one node's log: every live entry, each fed to the one replay of a Raft log
/// (`claims::Replayed`: the commands after the base applied, the checkpoints and the claims
/// compared with the replayed states).
struct Walk {
    replay: Replay,
    replayed: Replayed,
    prev: Option<u64>,
    /// The snapshot's last index: the first entry must come at or before the one after it.
    base: Option<u64>,
}

impl Walk {
    fn new(o: &mut Opened) -> Result<Walk, String> {
        let replay = o.wal.replay_from(None, Durability::Written).map_err(|e| format!("replay: {e}"))?;
        let applier = o.applier.take().ok_or("internal: a log walked twice")?;
        let replayed = Replayed::new(applier, o.base, &o.membership);
        Ok(Walk { replay, replayed, prev: None, base: o.base })
    }

    /// The next entry at or below `end` (index, raw payload); `None` past it or at the end.
    fn next(&mut self, end: Option<u64>) -> Result<Option<(u64, Vec<u8>)>, String> {
        while let Some(item) = self.replay.next() {
            let item = item.map_err(|e| format!("replay: {e}"))?;
            let lsn = item.lsn.0;
            match item.kind {
                ItemKind::Checkpoint(cp) => self.replayed.checkpoint(lsn, &cp),
                ItemKind::Entry if end.is_some_and(|e| lsn > e) => return Ok(None),
                ItemKind::Entry => {
                    if self.prev.is_some_and(|p| lsn != p + 1) {
                        return Err(format!(
                            "a hole in the Raft log between {} and {lsn}",
                            self.prev.unwrap_or(0)
                        ));
                    }
                    // A purge never passes the snapshot: entries between the two would be in
                    // neither, and the state replayed from here would be wrong.
                    if let (None, Some(b)) = (self.prev, self.base.filter(|b| lsn > b + 1)) {
                        return Err(format!(
                            "the log starts at index {lsn}, but the snapshot ends at {b}: indexes {}..{lsn} are in neither",
                            b + 1
                        ));
                    }
                    self.prev = Some(lsn);
                    let e = decode_entry(lsn, item.payload).map_err(|e| e.to_string())?;
                    self.replayed.entry(&e);
                    return Ok(Some((lsn, item.payload.to_vec())));
                }
            }
        }
        Ok(None)
    }
}

fn crc_of(dir: &Path) -> (&'static str, i32) {
    let r = verifier::verify(&dir.join("log"), &verifier::VerifyOptions::default(), &mut |_| {});
    (r.crc_word(), r.exit_code())
}

/// Checks one node's data directory: the CRC verdict and the state verdict.
pub fn check(dir: &Path) -> NodeCheck {
    let (crc, crc_code) = crc_of(dir);
    let mut out = NodeCheck {
        dir: dir.to_path_buf(),
        crc,
        crc_code,
        state: State::NotChecked(String::new()),
        base: None,
        last: None,
        digest: None,
        entities: None,
        fenced: crate::fence::read(dir).ok().flatten(),
    };
    if crc_code > 1 {
        out.state = State::NotChecked(format!("the log is {crc}: replay after repair"));
        return out;
    }
    let mut o = match open(dir) {
        Ok(o) => o,
        Err(e) => {
            out.state = State::NotChecked(e);
            return out;
        }
    };
    out.base = o.base;
    let mut walk = match Walk::new(&mut o) {
        Ok(w) => w,
        Err(e) => {
            out.state = State::NotChecked(e);
            return out;
        }
    };
    for _ in 0..u64::MAX {
        match walk.next(None) {
            Ok(Some(_)) if walk.replayed.stopped() => break,
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                out.state = State::Divergent(e);
                return out;
            }
        }
    }
    let (verified, claims_through) = (walk.replayed.verified, walk.replayed.through);
    let (applier, report, mismatch) = walk.replayed.finish();
    out.state = if let Some(m) = mismatch {
        State::Divergent(format!(
            "at index {}: the replayed digest is {}, the majority's {}: {}",
            m.index,
            hex(&m.replayed.digest),
            hex(&m.majority.digest),
            m.why
        ))
    } else if let Some(d) = report.divergence {
        State::Divergent(format!(
            "at index {} (last good {}): {}",
            d.lsn,
            d.last_good.map_or("-".into(), |l| l.to_string()),
            d.reason
        ))
    } else if let Some(u) = report.unsupported {
        State::Unsupported(u)
    } else {
        State::Clean {
            checkpoints: report.checkpoints_checked,
            through: report.verified_through.map(|l| l.0),
            unchecked: report.unchecked_entries,
            claims: verified,
            claims_through,
        }
    };
    let cp = applier.checkpoint();
    out.last = walk.prev.max(o.base);
    out.digest = Some(hex(&cp.digest));
    out.entities = Some(cp.entity_count);
    out
}

/// What comparing several nodes' logs found.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// AGREE, DIVERGENT, NOT_COMPARED, NOT_CHECKED or IO_ERROR, and why.
    pub verdict: &'static str,
    pub why: String,
    /// The index range every log holds: from the highest of their first entries (each log
    /// starts where its own purge left it) to the lowest of their last.
    pub common: Option<(u64, u64)>,
    pub compared: u64,
    /// Per node: its directory, CRC word and the digest (hex) at the common end.
    pub nodes: Vec<(PathBuf, &'static str, Option<String>)>,
    worst_crc: i32,
}

impl Comparison {
    /// walcheck's codes: AGREE 0, DIVERGENT 4, IO_ERROR 5, NOT_COMPARED 8 (nothing or not all
    /// of it could be compared: a replica too far behind is not a pass), never less than the
    /// worst log's CRC code (which is what a NOT_CHECKED comparison stopped on).
    pub fn exit_code(&self) -> i32 {
        let v = match self.verdict {
            "DIVERGENT" => EXIT_DIVERGENT,
            "IO_ERROR" => EXIT_IO_ERROR,
            "NOT_COMPARED" => verifier::report::EXIT_NOT_COMPARED,
            _ => 0,
        };
        v.max(self.worst_crc)
    }

    pub fn summary(&self) -> String {
        let mut s = format!("{}: {}", self.verdict, self.why);
        for (d, crc, digest) in &self.nodes {
            let _ = write!(s, "\n  {}  CRC {crc}  digest {}", d.display(), digest.as_deref().unwrap_or("-"));
        }
        s
    }
}

/// The index of the first entry physically in a log (`None`: it holds none). Not
/// `Wal::first_lsn`, which still counts purged segments.
fn first_entry(o: &Opened) -> Result<Option<u64>, String> {
    let mut replay = o.wal.replay_from(None, Durability::Written).map_err(|e| format!("replay: {e}"))?;
    while let Some(item) = replay.next() {
        let item = item.map_err(|e| format!("replay: {e}"))?;
        if matches!(item.kind, ItemKind::Entry) {
            return Ok(Some(item.lsn.0));
        }
    }
    Ok(None)
}

/// Compares the logs of the nodes in `dirs` (at least two): the same entry bytes at every
/// index from the common first index to the common last, and the same state digest there.
pub fn compare(dirs: &[PathBuf]) -> Comparison {
    let mut c = Comparison {
        verdict: "AGREE",
        why: String::new(),
        common: None,
        compared: 0,
        nodes: Vec::new(),
        worst_crc: 0,
    };
    let mut opened = Vec::new();
    // Per log: its first entry and its last index.
    let mut spans = Vec::new();
    for d in dirs {
        let (crc, code) = crc_of(d);
        c.worst_crc = c.worst_crc.max(code);
        c.nodes.push((d.clone(), crc, None));
        if code > 1 {
            return Comparison {
                verdict: "NOT_CHECKED",
                why: format!("{} is {crc}: compare after repair", d.display()),
                ..c
            };
        }
        let o = match open(d) {
            Ok(o) => o,
            Err(e) => return Comparison { verdict: "IO_ERROR", why: e, ..c },
        };
        match first_entry(&o) {
            Ok(Some(first)) => spans.push((first, o.wal.next_lsn().0.saturating_sub(1))),
            Ok(None) => {
                return Comparison {
                    verdict: "NOT_COMPARED",
                    why: format!("{} holds no entries", d.display()),
                    ..c
                }
            }
            Err(e) => return Comparison { verdict: "IO_ERROR", why: format!("{}: {e}", d.display()), ..c },
        }
        opened.push(o);
    }
    let (Some((lo_at, lo)), Some((hi_at, hi))) = (
        spans.iter().enumerate().map(|(i, s)| (i, s.0)).max_by_key(|x| x.1),
        spans.iter().enumerate().map(|(i, s)| (i, s.1)).min_by_key(|x| x.1),
    ) else {
        return Comparison { verdict: "NOT_COMPARED", why: "no logs to compare".into(), ..c };
    };
    if lo > hi {
        return Comparison {
            verdict: "NOT_COMPARED",
            why: format!(
                "the logs share no index: {} ends at index {hi}, before {}'s first entry {lo} \
                 (too far behind to compare; a snapshot install brings it up)",
                dirs[hi_at].display(),
                dirs[lo_at].display()
            ),
            ..c
        };
    }
    c.common = Some((lo, hi));
    let mut walks = Vec::new();
    for o in &mut opened {
        match Walk::new(o) {
            Ok(w) => walks.push(w),
            Err(e) => return Comparison { verdict: "IO_ERROR", why: e, ..c },
        }
    }
    match verifier::compare::lockstep(dirs, (lo, hi), "index", |i| walks[i].next(Some(hi))) {
        Ok(w) => c.compared = w.compared,
        Err(verifier::compare::Apart::Differ(why)) => return Comparison { verdict: "DIVERGENT", why, ..c },
        Err(verifier::compare::Apart::Failed(i, e)) => {
            return Comparison { verdict: "DIVERGENT", why: format!("{}: {e}", dirs[i].display()), ..c }
        }
    }
    // A node whose snapshot is past the common end has no state at it to compare.
    if let Some((i, b)) =
        opened.iter().enumerate().find_map(|(i, o)| o.base.filter(|b| *b > hi).map(|b| (i, b)))
    {
        return Comparison {
            verdict: "NOT_COMPARED",
            why: format!(
                "the same {} entries at indexes {lo}..={hi}, but {}'s snapshot (index {b}) is past \
                 that common end: no digest to compare there (a replica is too far behind)",
                c.compared,
                dirs[i].display()
            ),
            ..c
        };
    }
    let mut digests = Vec::new();
    for (i, w) in walks.into_iter().enumerate() {
        let (a, r, _) = w.replayed.finish();
        if let Some(d) = r.divergence {
            return Comparison {
                verdict: "DIVERGENT",
                why: format!(
                    "{} disagrees with its own checkpoint at index {}: {}",
                    dirs[i].display(),
                    d.lsn,
                    d.reason
                ),
                ..c
            };
        }
        let d = hex(&a.checkpoint().digest);
        c.nodes[i].2 = Some(d.clone());
        digests.push(d);
    }
    if digests.windows(2).any(|w| w[0] != w[1]) {
        c.verdict = "DIVERGENT";
        c.why = format!("the same entries through index {hi}, but the state digests there differ");
    } else {
        c.why = format!(
            "{} logs hold the same {} entries at indexes {lo}..={hi} and the same digest at {hi}",
            dirs.len(),
            c.compared
        );
    }
    c
}

/// Every live entry's log id in a node's log, in index order (offline: the node is stopped).
/// What a test or an operator reads to see which leader wrote each index.
pub fn log_ids(dir: &Path) -> Result<Vec<crate::LogId>, String> {
    let o = open(dir)?;
    let mut replay = o.wal.replay_from(None, Durability::Written).map_err(|e| format!("replay: {e}"))?;
    let mut out = Vec::new();
    while let Some(item) = replay.next() {
        let item = item.map_err(|e| format!("replay: {e}"))?;
        if matches!(item.kind, ItemKind::Entry) {
            out.push(decode_entry(item.lsn.0, item.payload).map_err(|e| e.to_string())?.log_id);
        }
    }
    Ok(out)
}
