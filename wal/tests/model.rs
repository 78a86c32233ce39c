//! Model-based tests: random operation sequences run against the log (on `MemStorage`) and
//! against a reference model of its live entries, including clean reopens and crash images.
//!
//! The model tracks three logical states: `cur` (everything appended, staged included), the
//! *written* state (what `replay()` sees, reset by a flush) and the *durable* state (what survives
//! a crash with every unsynced sector old, reset by a sync). A staging operation may find the
//! segment full and seal it, which flushes and syncs everything staged before it; so before every
//! staging operation the model adds the pre-operation state as a candidate for both the written
//! and the durable state. After every operation the log's written and durable replays must each
//! be one of the candidates (and only the matching candidates are kept); a crash image must then
//! recover exactly such a candidate: the durable state when every unsynced sector is old, the
//! written state when every one is new, and some batch end between the two when sectors are torn
//! (a torn tail cut at open). A purge (after a sync) must leave a suffix of the model that keeps
//! every entry at or above its bound; a clean reopen must change nothing.
//!
//! Failures print the minimal failing op sequence (proptest) or the step and recent ops (the
//! deterministic run). `PROPTEST_RNG_SEED=<u64>` makes a proptest run reproducible.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use wal::{CrcVerdict, Durability, Epoch, Lsn, Options, Wal};
use wal_sim::{MemStorage, Rng, SectorFate};

const SEG: u32 = 64 * 1024;
const E: Epoch = Epoch(0);

/// Mixed-fate crashes include tearing the first batch of a fresh segment (it found the bug that
/// `torn_first_batch_of_a_fresh_segment_keeps_the_log_state` guards); true would avoid them.
const AVOID_FRESH_SEGMENT_TEAR: bool = false;

fn opts() -> Options {
    Options { segment_len_bytes: SEG, ..Options::default() }
}

/// One operation. Payloads are given by length only; their bytes are unique per append (see
/// [`payload`]) so that a re-appended LSN never carries the bytes of the entry it replaced.
#[derive(Clone, Debug)]
enum Op {
    Append(u16),
    AppendBatch(Vec<u16>),
    /// `append_at(next_lsn - back)`.
    AppendAt {
        back: u64,
        len: u16,
    },
    /// `truncate_after(next_lsn - 1 - back)` (skipped when that is below LSN 0).
    Truncate {
        back: u64,
    },
    /// `n` single appends of `len` bytes, flushing every `flush_every` appends (0: never); large
    /// enough to fill a segment, so the append path has to seal and rotate by itself.
    Fill {
        n: u16,
        len: u16,
        flush_every: u8,
    },
    Flush,
    Sync,
    Rotate,
    /// Sync, then `purge_before(next_lsn - back)`.
    Purge {
        back: u64,
    },
    /// `close()` and open again.
    Reopen,
    /// Abandon the handle and open the crash image of its storage.
    Crash(Fate),
}

/// What every sector written since its file's last sync holds after a crash.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Old bytes: exactly the durable state survives.
    Old,
    /// New bytes: exactly the written state survives.
    New,
    /// Per file, the unsynced sectors below a random point new, the rest new or old by a coin
    /// flip (hashes of the seed, file and sector): a torn tail, cut back to a batch end between
    /// the durable and the written state.
    Mixed(u64),
}

/// A logical state of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Snap {
    entries: BTreeMap<u64, Arc<[u8]>>,
    next: u64,
    /// The log's `first_lsn()`: the lowest live LSN, still counting purged entries.
    first: Option<u64>,
}

impl Snap {
    fn new() -> Snap {
        Snap { entries: BTreeMap::new(), next: opts().first_lsn, first: None }
    }

    /// What `written_lsn()` / `durable_lsn()` report for this state.
    fn last(&self) -> Option<Lsn> {
        self.first.map(|_| Lsn(self.next - 1))
    }

    fn append(&mut self, p: Arc<[u8]>) {
        self.entries.insert(self.next, p);
        self.first.get_or_insert(self.next);
        self.next += 1;
    }

    /// The next entry becomes `keep_lt`; entries at or above it are cut (a Reset when no live
    /// entry stays below).
    fn cut(&mut self, keep_lt: u64) {
        if self.first.is_none_or(|f| f >= keep_lt) {
            self.first = None;
        }
        self.entries.split_off(&keep_lt);
        self.next = keep_lt;
    }

    fn same_entries(&self, r: &[(u64, Vec<u8>)]) -> bool {
        self.entries.len() == r.len()
            && self.entries.iter().zip(r).all(|((l, p), (rl, rp))| l == rl && **p == **rp)
    }
}

fn describe_entries(r: &[(u64, Vec<u8>)]) -> String {
    match (r.first(), r.last()) {
        (Some(a), Some(b)) => format!("{} entries, LSN {}..={}", r.len(), a.0, b.0),
        _ => "no entries".into(),
    }
}

fn describe_snap(s: &Snap) -> String {
    let range = match (s.entries.keys().next(), s.entries.keys().next_back()) {
        (Some(a), Some(b)) => format!("{} entries, LSN {a}..={b}", s.entries.len()),
        _ => "no entries".into(),
    };
    format!("[{range}, next {}, first {:?}]", s.next, s.first)
}

/// The first difference between a model state and a replay.
fn diff(s: &Snap, r: &[(u64, Vec<u8>)]) -> String {
    let mut it = s.entries.iter();
    for (i, (rl, rp)) in r.iter().enumerate() {
        match it.next() {
            None => return format!("replay has extra entry #{i} at LSN {rl}"),
            Some((l, _)) if l != rl => return format!("entry #{i}: model LSN {l}, replay LSN {rl}"),
            Some((l, p)) if **p != **rp => {
                return format!(
                    "entry #{i} LSN {l}: payload differs (model {} bytes, replay {})",
                    p.len(),
                    rp.len()
                )
            }
            _ => {}
        }
    }
    match it.next() {
        Some((l, _)) => format!("replay lacks model entry at LSN {l}"),
        None => "same entries".into(),
    }
}

/// Unique, checkable payload bytes for the `id`-th append.
fn payload(id: u64, len: u16) -> Arc<[u8]> {
    let mut v: Vec<u8> =
        (0..len as u64).map(|j| (id.wrapping_mul(0x9E37_79B9).wrapping_add(j * 131) >> 3) as u8).collect();
    let tag = id.to_le_bytes();
    let n = v.len().min(8);
    v[..n].copy_from_slice(&tag[..n]);
    v.into()
}

/// splitmix64's first draw from `z`: a well-mixed hash of it.
fn mix(z: u64) -> u64 {
    Rng::splitmix64(z).next_u64()
}

fn open(storage: &MemStorage, torn_ok: bool) -> Result<Wal, String> {
    open_report(storage, torn_ok).map(|(log, _)| log)
}

/// Opens the log; a clean image must scan OK, a torn one (`torn_ok`) may also be a cut torn tail.
/// Also says whether a tail was cut.
fn open_report(storage: &MemStorage, torn_ok: bool) -> Result<(Wal, bool), String> {
    let (log, rep) =
        Wal::open_with(Arc::new(storage.clone()), opts()).map_err(|e| format!("open failed: {e}"))?;
    let ok = match rep.verdict {
        CrcVerdict::Ok => rep.damage.is_none() && rep.cut.is_none(),
        CrcVerdict::TornTail => torn_ok && rep.cut.is_some(),
        _ => false,
    };
    if !ok {
        return Err(format!("open reported {:?}, damage {:?}, cut {:?}", rep.verdict, rep.damage, rep.cut));
    }
    Ok((log, rep.cut.is_some()))
}

#[derive(Debug, Default)]
struct Stats {
    max_segments: usize,
    segments_purged: usize,
    crashes: usize,
    torn_tails_cut: usize,
    mixed_crashes: usize,
    /// Mixed-fate crashes that recovered a state strictly between the durable and written ones.
    mixed_between: usize,
    reopens: usize,
    auto_seals: usize,
}

struct Harness {
    storage: MemStorage,
    log: Option<Wal>,
    cur: Snap,
    written: Vec<Snap>,
    durable: Vec<Snap>,
    /// Every state that may end a batch on disk, in order, from the durable state on: what a
    /// crash with mixed sector fates may recover.
    batch_ends: Vec<Snap>,
    ids: u64,
    stats: Stats,
}

fn err<T: std::fmt::Display>(what: &str) -> impl FnOnce(T) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Harness {
    fn new() -> Result<Harness, String> {
        let storage = MemStorage::new();
        let log = open(&storage, false)?;
        Ok(Harness {
            storage,
            log: Some(log),
            cur: Snap::new(),
            written: vec![Snap::new()],
            durable: vec![Snap::new()],
            batch_ends: vec![Snap::new()],
            ids: 0,
            stats: Stats::default(),
        })
    }

    fn log(&mut self) -> &mut Wal {
        self.log.as_mut().expect("the harness always holds an open log")
    }

    fn next_payload(&mut self, len: u16) -> Arc<[u8]> {
        self.ids += 1;
        payload(self.ids, len)
    }

    /// Before a staging operation: the log may seal (flush and sync) everything staged so far.
    fn before_staging(&mut self) {
        for c in [&mut self.written, &mut self.durable, &mut self.batch_ends] {
            if c.last() != Some(&self.cur) {
                c.push(self.cur.clone());
            }
        }
    }

    fn all_settled(&mut self) {
        self.written = vec![self.cur.clone()];
        self.durable = vec![self.cur.clone()];
        self.batch_ends = vec![self.cur.clone()];
    }

    fn flushed(&mut self) {
        self.written = vec![self.cur.clone()];
        if self.batch_ends.last() != Some(&self.cur) {
            self.batch_ends.push(self.cur.clone());
        }
    }

    fn append(&mut self, len: u16) -> Result<(), String> {
        self.before_staging();
        let p = self.next_payload(len);
        let lsn = self.log().append(E, &p).map_err(err("append"))?;
        if lsn.0 != self.cur.next {
            return Err(format!("append returned LSN {lsn}, model expects {}", self.cur.next));
        }
        self.cur.append(p);
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Append(len) => self.append(*len)?,
            Op::AppendBatch(lens) => {
                self.before_staging();
                let ps: Vec<Arc<[u8]>> = lens.iter().map(|&l| self.next_payload(l)).collect();
                let refs: Vec<&[u8]> = ps.iter().map(|p| &p[..]).collect();
                let lsn = self.log().append_batch(E, &refs).map_err(err("append_batch"))?;
                if lsn.0 != self.cur.next {
                    return Err(format!("append_batch returned LSN {lsn}, model expects {}", self.cur.next));
                }
                for p in ps {
                    self.cur.append(p);
                }
            }
            Op::AppendAt { back, len } => {
                self.before_staging();
                let at = self.cur.next.saturating_sub(*back);
                let p = self.next_payload(*len);
                let lsn = self.log().append_at(E, Lsn(at), &p).map_err(err("append_at"))?;
                if lsn.0 != at {
                    return Err(format!("append_at({at}) returned LSN {lsn}"));
                }
                if at < self.cur.next {
                    self.cur.cut(at);
                }
                self.cur.append(p);
            }
            Op::Truncate { back } => {
                let Some(after) = self.cur.next.checked_sub(1 + back) else {
                    return Ok(());
                };
                self.before_staging();
                self.log().truncate_after(E, Lsn(after)).map_err(err("truncate_after"))?;
                self.cur.cut(after + 1);
            }
            Op::Fill { n, len, flush_every } => {
                for i in 1..=u64::from(*n) {
                    self.append(*len)?;
                    if *flush_every > 0 && i % u64::from(*flush_every) == 0 {
                        self.log().flush().map_err(err("flush"))?;
                        self.flushed();
                    }
                }
            }
            Op::Flush => {
                self.log().flush().map_err(err("flush"))?;
                self.flushed();
            }
            Op::Sync => {
                self.log().sync().map_err(err("sync"))?;
                self.all_settled();
            }
            Op::Rotate => {
                self.log().rotate().map_err(err("rotate"))?;
                self.all_settled();
            }
            Op::Purge { back } => self.purge(*back)?,
            Op::Reopen => {
                let log = self.log.take().expect("open log");
                log.close().map_err(err("close"))?;
                self.all_settled();
                self.log = Some(open(&self.storage, false)?);
                self.stats.reopens += 1;
            }
            Op::Crash(fate) => {
                let log = self.log.take().expect("open log");
                let state = self.storage.state();
                log.abandon();
                let candidates = match fate {
                    Fate::Old => self.durable.clone(),
                    Fate::New => self.written.clone(),
                    Fate::Mixed(_) => self.batch_ends.clone(),
                };
                // Per file: its dirty sectors' range, and whether its first sector (a fresh
                // segment's header) is among them.
                let mut dirty: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
                for (n, s) in state.dirty_sectors() {
                    let r = dirty.entry(n).or_insert((s, s));
                    r.0 = r.0.min(s);
                    r.1 = r.1.max(s);
                }
                self.storage = state.crash(|node, sector| match fate {
                    Fate::Old => SectorFate::Old,
                    Fate::New => SectorFate::New,
                    Fate::Mixed(seed) => {
                        let (lo, hi) = dirty.get(&node).copied().unwrap_or((sector, sector));
                        let new = if AVOID_FRESH_SEGMENT_TEAR && lo == 0 {
                            // Known bug (`torn_first_batch_of_a_fresh_segment_keeps_the_log_state`):
                            // tearing a fresh segment's first batch after its header loses the
                            // log's state. Until it is fixed such a file keeps or loses all its
                            // unsynced sectors.
                            mix(seed ^ node) & 1 == 0
                        } else {
                            // Everything below a random point survives (so that crashes often
                            // recover a state between the durable and the written one), and
                            // each sector from there on by a coin flip.
                            let keep_below = lo + mix(seed ^ node ^ 0x5555) % (hi - lo + 2);
                            sector < keep_below || mix(mix(seed ^ node) ^ sector) & 1 == 0
                        };
                        if new {
                            SectorFate::New
                        } else {
                            SectorFate::Old
                        }
                    }
                });
                let (log, cut) = open_report(&self.storage, matches!(fate, Fate::Mixed(_)))?;
                self.log = Some(log);
                self.stats.crashes += 1;
                self.stats.torn_tails_cut += usize::from(cut);
                // The recovered state must be exactly one of the candidates (entries, next LSN and
                // first LSN), and the model continues from it.
                let log = self.log.as_ref().expect("open log");
                let got = log.replay().map_err(err("replay"))?.collect_entries().map_err(err("collect"))?;
                let (next, first) = (log.next_lsn().0, log.first_lsn().map(|l| l.0));
                let Some(c) = candidates
                    .iter()
                    .rev()
                    .find(|c| c.same_entries(&got) && c.next == next && c.first == first)
                else {
                    let mut m = format!(
                        "crash ({fate:?}) recovered {} with next {next}, first {first:?}; expected one of:",
                        describe_entries(&got)
                    );
                    for c in &candidates {
                        let _ = write!(m, "\n  {} ({})", describe_snap(c), diff(c, &got));
                    }
                    return Err(m);
                };
                if matches!(fate, Fate::Mixed(_)) {
                    self.stats.mixed_crashes += 1;
                    if Some(c) != self.written.last() && Some(c) != self.durable.last() {
                        self.stats.mixed_between += 1;
                    }
                }
                self.cur = c.clone();
                self.all_settled();
            }
        }
        self.check()
    }

    fn purge(&mut self, back: u64) -> Result<(), String> {
        self.log().sync().map_err(err("sync before purge"))?;
        self.all_settled();
        let below = self.cur.next.saturating_sub(back);
        let before = self.log().segment_count();
        let rep = self.log().purge_before(Lsn(below)).map_err(err("purge_before"))?;
        let after = self.log().segment_count();
        if before - after != rep.segments_removed.len() || after == 0 && before > 0 {
            return Err(format!(
                "purge_before({below}): {before} segments before, {after} after, report {rep:?}"
            ));
        }
        self.stats.segments_purged += rep.segments_removed.len();
        let got = self.log().replay().map_err(err("replay"))?.collect_entries().map_err(err("collect"))?;
        // Purge removes whole segments from the front: the replay is the model from some LSN on,
        // and nothing at or above `below` is gone.
        let from = got.first().map_or(u64::MAX, |e| e.0);
        let mut kept = self.cur.clone();
        kept.entries = kept.entries.split_off(&from);
        if !kept.same_entries(&got) {
            return Err(format!(
                "after purge_before({below}) the replay ({}) is not a suffix of the model {}: {}",
                describe_entries(&got),
                describe_snap(&self.cur),
                diff(&kept, &got)
            ));
        }
        if let Some((&lost, _)) = self.cur.entries.range(below..from.max(below)).next() {
            return Err(format!("purge_before({below}) removed entry {lost} (replay starts at {from})"));
        }
        self.cur = kept;
        self.all_settled();
        Ok(())
    }

    /// The log's written and durable views are candidates of the model; LSN accessors agree.
    fn check(&mut self) -> Result<(), String> {
        let log = self.log.as_ref().expect("open log");
        self.stats.max_segments = self.stats.max_segments.max(log.segment_count());
        if log.next_lsn().0 != self.cur.next {
            return Err(format!("next_lsn {} but model {}", log.next_lsn(), self.cur.next));
        }
        if log.first_lsn().map(|l| l.0) != self.cur.first {
            return Err(format!("first_lsn {:?} but model {:?}", log.first_lsn(), self.cur.first));
        }
        let views = [
            ("written", Durability::Written, log.written_lsn(), &mut self.written),
            ("durable", Durability::Durable, log.durable_lsn(), &mut self.durable),
        ];
        for (name, bound, last, cands) in views {
            let got = log
                .replay_from(None, bound)
                .map_err(err("replay"))?
                .collect_entries()
                .map_err(err("collect"))?;
            let keep: Vec<Snap> =
                cands.iter().filter(|c| c.same_entries(&got) && c.last() == last).cloned().collect();
            if keep.is_empty() {
                let mut m = format!(
                    "{name} replay has {} ({name}_lsn {last:?}); expected one of:",
                    describe_entries(&got)
                );
                for c in cands.iter() {
                    let _ = write!(m, "\n  {} ({})", describe_snap(c), diff(c, &got));
                }
                return Err(m);
            }
            if name == "durable" && cands.len() > 1 && keep.last() != cands.first() {
                self.stats.auto_seals += 1;
            }
            if name == "durable" {
                // Batch ends before the (earliest possible) durable state are gone for good.
                if let Some(i) = self.batch_ends.iter().position(|b| keep.contains(b)) {
                    self.batch_ends.drain(..i);
                } else {
                    return Err(format!("durable state {} is no batch end", describe_snap(&keep[0])));
                }
            }
            *cands = keep;
        }
        Ok(())
    }
}

/// Runs `ops` from an empty log; on failure says at which step.
fn run(ops: &[Op]) -> Result<Stats, String> {
    let mut h = Harness::new()?;
    for (i, op) in ops.iter().enumerate() {
        h.apply(op).map_err(|e| {
            let from = i.saturating_sub(12);
            format!("step {i} {op:?} failed: {e}\n  ops {from}..={i}: {:?}", &ops[from..=i])
        })?;
    }
    // A clean reopen at the end must give back exactly the model.
    h.apply(&Op::Reopen).map_err(|e| format!("final reopen: {e}"))?;
    let log = h.log.as_ref().expect("open log");
    let got = log.replay().map_err(err("replay"))?.collect_entries().map_err(err("collect"))?;
    if !h.cur.same_entries(&got) {
        return Err(format!("final replay: {}", diff(&h.cur, &got)));
    }
    Ok(h.stats)
}

/// Op mix: weights for (append, batch, append_at, truncate, fill, flush, sync, rotate, purge,
/// reopen, crash).
type Weights = [u32; 11];

const MIXED: Weights = [30, 10, 8, 6, 3, 10, 8, 3, 3, 3, 4];
/// The long run purges more often, which keeps the log (and every replay of it) short.
const LONG: Weights = [30, 10, 8, 6, 3, 10, 8, 3, 8, 3, 4];
const CRASHY: Weights = [20, 8, 10, 10, 2, 10, 6, 2, 2, 5, 12];

fn op_strategy(w: Weights) -> impl Strategy<Value = Op> {
    let len = || 0u16..300;
    prop_oneof![
        w[0] => len().prop_map(Op::Append),
        w[1] => prop::collection::vec(len(), 1..=5).prop_map(Op::AppendBatch),
        w[2] => (0u64..=5, len()).prop_map(|(back, len)| Op::AppendAt { back, len }),
        w[3] => (0u64..8).prop_map(|back| Op::Truncate { back }),
        w[4] => (1u16..400, len(), 0u8..8).prop_map(|(n, len, flush_every)| Op::Fill { n, len, flush_every }),
        w[5] => Just(Op::Flush),
        w[6] => Just(Op::Sync),
        w[7] => Just(Op::Rotate),
        w[8] => (0u64..600).prop_map(|back| Op::Purge { back }),
        w[9] => Just(Op::Reopen),
        w[10] => prop_oneof![1 => Just(Fate::Old), 1 => Just(Fate::New), 2 => any::<u64>().prop_map(Fate::Mixed)]
            .prop_map(Op::Crash),
    ]
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn model_mixed(ops in prop::collection::vec(op_strategy(MIXED), 1..120)) {
        if let Err(e) = run(&ops) {
            prop_assert!(false, "{}", e);
        }
    }

    #[test]
    fn model_crash_heavy(ops in prop::collection::vec(op_strategy(CRASHY), 1..60)) {
        if let Err(e) = run(&ops) {
            prop_assert!(false, "{}", e);
        }
    }
}

fn random_op(rng: &mut Rng, w: &Weights) -> Op {
    let total: u32 = w.iter().sum();
    let mut pick = rng.below(u64::from(total)) as u32;
    let mut kind = 0;
    while pick >= w[kind] {
        pick -= w[kind];
        kind += 1;
    }
    let len = |rng: &mut Rng| rng.below(300) as u16;
    match kind {
        0 => Op::Append(len(rng)),
        1 => {
            let n = 1 + rng.below(5);
            Op::AppendBatch((0..n).map(|_| len(rng)).collect())
        }
        2 => Op::AppendAt { back: rng.below(6), len: len(rng) },
        3 => Op::Truncate { back: rng.below(8) },
        4 => Op::Fill { n: 1 + rng.below(399) as u16, len: len(rng), flush_every: rng.below(8) as u8 },
        5 => Op::Flush,
        6 => Op::Sync,
        7 => Op::Rotate,
        8 => Op::Purge { back: rng.below(600) },
        9 => Op::Reopen,
        _ => Op::Crash(match rng.below(4) {
            0 => Fate::Old,
            1 => Fate::New,
            _ => Fate::Mixed(rng.next_u64()),
        }),
    }
}

#[test]
fn model_long_deterministic_run() {
    // xorshift64 from a fixed seed: the run the assertions below were written for.
    let mut rng = Rng::xorshift64(0x2545_F491_4F6C_DD1D);
    let ops: Vec<Op> = (0..3000).map(|_| random_op(&mut rng, &LONG)).collect();
    let stats = run(&ops).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{stats:?}");
    // The run must have exercised what it claims to.
    assert!(stats.max_segments >= 3, "{stats:?}");
    assert!(stats.segments_purged > 0, "{stats:?}");
    assert!(stats.crashes > 0 && stats.reopens > 0, "{stats:?}");
    assert!(stats.auto_seals > 0, "{stats:?}");
    assert!(stats.torn_tails_cut > 0 && stats.mixed_between > 0, "{stats:?}");
}

/// The first batch of a fresh segment (after a rotation; a clean close and reopen does the same)
/// is written but not synced; a crash keeps its first sector (segment header, frame, State record)
/// and loses the second. Recovery cuts the torn batch back to offset 64, just after the segment
/// header, leaving a header-only segment (regression: the cut now takes the header too).
/// Expected: the log as of the last sync (entries 1..=20, next LSN 21). Actual: the replay returns
/// entries 1..=20, but `next_lsn()` is 1, `first_lsn()` and `durable_lsn()` are `None`; the next
/// append takes LSN 1 again, and once synced the log no longer opens (CORRUPT: non-zero bytes
/// where the segment must be zero, segment 2 offset 512).
#[test]
fn torn_first_batch_of_a_fresh_segment_keeps_the_log_state() {
    let st = MemStorage::new();
    let mut log = open(&st, false).unwrap();
    for i in 0..20u8 {
        log.append(E, &[i; 100]).unwrap();
    }
    log.rotate().unwrap(); // segment 1 sealed: entries 1..=20 durable
    for i in 0..5u8 {
        log.append(E, &[0xa0 + i; 200]).unwrap(); // segment 2's first batch: about 1.4 KiB
    }
    log.flush().unwrap();
    let state = st.state();
    log.abandon();
    let crashed = state.crash(|_, sector| if sector == 1 { SectorFate::Old } else { SectorFate::New });
    let (mut log, rep) = Wal::open_with(Arc::new(crashed.clone()), opts()).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::TornTail);
    let want: Vec<(u64, Vec<u8>)> = (0..20u8).map(|i| (u64::from(i) + 1, vec![i; 100])).collect();
    assert_eq!(log.replay().unwrap().collect_entries().unwrap(), want);
    assert_eq!(log.next_lsn(), Lsn(21), "recovered next_lsn");
    assert_eq!(log.first_lsn(), Some(Lsn(1)));
    assert_eq!(log.durable_lsn(), Some(Lsn(20)));
    assert_eq!(log.append(E, b"after").unwrap(), Lsn(21));
    log.sync().unwrap();
    drop(log);
    let (log, rep) = Wal::open_with(Arc::new(crashed), opts()).unwrap();
    assert_eq!(rep.verdict, CrcVerdict::Ok);
    assert_eq!(log.next_lsn(), Lsn(22));
}
