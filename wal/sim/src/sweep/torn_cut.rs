//! The non-lossy repair's promise over the sweep's logs (issue 22, FORMAT.md section 8.1): a
//! cut of a TORN_TAIL (`wal::lifecycle::cut_tail`, what `walcheck repair` without `--lossy`
//! and a writer's open with `RecoveryMode::TruncateTornTail` do) never removes an entry that
//! was acknowledged.
//!
//! The logs: crash images of the sweep's workload (each unsynced sector new, old or, now and
//! then, garbage), those images damaged once more, and the cleanly closed log damaged; the
//! damage is the `corrupt` class's (bit flips, zeroed and garbage sectors, truncations) and an
//! adversary's (a segment header's length, a record's length, a frame's count and length, each
//! with checksums recomputed; bytes after the data). *Acknowledged*: for a crash image, synced
//! before the crash (the model's acknowledged state); for a damaged log, what the log itself
//! attested before the damage: records at or below a `durable_seq` some frame declared or a
//! footer covers (a later segment, a clean close). After a cut the log must scan OK, hold a
//! prefix of the records it held before, every attested one among them, and replay to exactly
//! the live entries of that prefix: every acknowledged LSN with its payload, unless a cut
//! record later in that prefix cut it.

use super::model::{candidates, Candidate};
use super::workload::{new_model, run_workload, Plan};
use super::{files_of, lock, SEG};
use crate::workload::forge::{forge_frame, forge_len, forge_segment_len};
use crate::workload::history::{seeded, Rng};
use crate::{MemState, MemStorage, SectorFate};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use wal::format::{parse_segment_file_name, Kind, SECTOR};
use wal::Depth;
use wal::{CrcVerdict, Options, Wal};

/// What the property test saw.
#[derive(Debug, Default)]
pub struct CutStats {
    /// Logs scanned, by verdict.
    pub verdicts: BTreeMap<&'static str, u64>,
    /// TORN_TAIL logs cut and checked.
    pub cuts: u64,
    /// Attested (acknowledged) records checked present after a cut.
    pub attested_checked: u64,
    /// Damaged logs made, by kind of damage.
    pub damage: BTreeMap<&'static str, u64>,
}

/// One valid record of a log as a full scan walks it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    segment: u64,
    offset: u64,
    seq: u64,
    kind: Kind,
    lsn: u64,
    payload: Vec<u8>,
}

/// A log's records and the highest record sequence it attests.
struct Walked {
    verdict: CrcVerdict,
    damage: Option<wal::Damage>,
    recs: Vec<Rec>,
    attested: u64,
}

fn walk(st: &MemStorage) -> Option<Walked> {
    let mut recs = Vec::new();
    let scan = wal::scan_log_with(st, Depth::Full, &mut |segment, r| {
        recs.push(Rec {
            segment,
            offset: r.offset,
            seq: r.seq,
            kind: r.kind,
            lsn: r.lsn,
            payload: r.payload.to_vec(),
        })
    })
    .ok()?;
    // A frame declares what completed syncs made durable; a footer covers its segment (synced
    // before the footer was written, and attested itself by a later segment or a clean close).
    let attested = recs
        .iter()
        .filter_map(|r| match r.kind {
            Kind::Frame => r.payload.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap())),
            Kind::Footer => Some(r.seq - 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    Some(Walked { verdict: scan.verdict, damage: scan.damage, recs, attested })
}

/// The live entries after the records `recs` (entries, truncations, resets).
fn live(recs: &[Rec]) -> Vec<(u64, Vec<u8>)> {
    let mut m = BTreeMap::new();
    for r in recs {
        match r.kind {
            Kind::Entry => {
                m.insert(r.lsn, r.payload.clone());
            }
            Kind::Truncate => {
                m.split_off(&(r.lsn + 1));
            }
            Kind::Reset => m.clear(),
            _ => {}
        }
    }
    m.into_iter().collect()
}

/// Scans `img`; on a TORN_TAIL cuts it and checks the promise against `before` (the records
/// and attestation of the log before any damage) and, for a crash image, `cands` (the states
/// the model allows, the first everything acknowledged). `Err` says what broke.
fn check(
    img: &MemStorage,
    before: &Walked,
    cands: Option<&[Candidate]>,
    st: &mut CutStats,
) -> Result<(), String> {
    let Some(w) = walk(img) else {
        *st.verdicts.entry("no log").or_default() += 1;
        return Ok(());
    };
    *st.verdicts.entry(w.verdict.as_str()).or_default() += 1;
    if w.verdict != CrcVerdict::TornTail {
        return Ok(());
    }
    let d = w.damage.as_ref().ok_or("TORN_TAIL without a damage")?;
    wal::lifecycle::cut_tail(img, d).map_err(|e| format!("the cut failed: {e}"))?;
    st.cuts += 1;
    let after = walk(img).ok_or("no log after the cut")?;
    if after.verdict != CrcVerdict::Ok {
        return Err(format!("after the cut of {d:?}: {} {:?}", after.verdict.as_str(), after.damage));
    }
    let n = after.recs.len();
    if before.recs.get(..n) != Some(&after.recs[..]) {
        return Err(format!("after the cut of {d:?} the records are not a prefix of those before"));
    }
    let kept = after.recs.last().map_or(0, |r| r.seq);
    let attested: Vec<&Rec> = before.recs.iter().filter(|r| r.seq <= before.attested).collect();
    if let Some(lost) = attested.iter().find(|r| r.seq > kept) {
        return Err(format!(
            "the cut of {d:?} removed record {} (segment {} offset {}, {:?} LSN {}), attested up to {}",
            lost.seq, lost.segment, lost.offset, lost.kind, lost.lsn, before.attested
        ));
    }
    st.attested_checked += attested.len() as u64;
    let opts = Options { read_only: true, segment_len_bytes: SEG, ..Options::default() };
    let (log, _) =
        Wal::open_with(Arc::new(img.clone()), opts).map_err(|e| format!("open after the cut: {e}"))?;
    let got = log.replay().map_err(|e| e.to_string())?.collect_entries().map_err(|e| e.to_string())?;
    if got != live(&after.recs) {
        return Err(format!("after the cut of {d:?} the replay differs from the records kept"));
    }
    // Every acknowledged LSN with its payload, unless a cut after the attested point took it.
    let cut_later =
        after.recs.iter().any(|r| r.seq > before.attested && matches!(r.kind, Kind::Truncate | Kind::Reset));
    if !cut_later {
        let acked = live(&attested.iter().map(|r| (*r).clone()).collect::<Vec<_>>());
        if let Some(e) = acked.iter().find(|e| !got.contains(e)) {
            return Err(format!("the cut of {d:?} lost acknowledged LSN {}", e.0));
        }
    }
    if let Some(cands) = cands {
        // A crash image: what was synced before the crash stays (a state the model allows; with
        // a purge under way the log may start later, its state in a snapshot).
        let from = got.first().map_or(u64::MAX, |e| e.0);
        if !cands.iter().any(|c| c.entries.iter().filter(|e| e.0 >= from).eq(got.iter())) {
            return Err(format!("the cut of {d:?} left {} entries, no state the model allows", got.len()));
        }
    }
    Ok(())
}

type Files = Vec<(String, Vec<u8>)>;

/// One damage of `files` (a log whose records are `recs`), seeded by `rng`: mostly in the last
/// segment holding records (where a cut can happen), now and then in an earlier one.
fn damage(files: &Files, recs: &[Rec], rng: &mut Rng) -> Option<(&'static str, Files)> {
    let last = recs.last()?.segment;
    let seg = if rng.below(5) == 0 { recs[rng.below(recs.len() as u64) as usize].segment } else { last };
    let name = wal::format::segment_file_name(seg);
    let fi = files.iter().position(|f| f.0 == name)?;
    let mut v = files.clone();
    let b = &mut v[fi].1;
    let len = b.len();
    let in_seg: Vec<&Rec> = recs.iter().filter(|r| r.segment == seg).collect();
    let data_end = in_seg.iter().map(|r| r.offset as usize + 48 + r.payload.len()).max().unwrap_or(64);
    let data_sectors = data_end.div_ceil(SECTOR);
    let sector = rng.below(data_sectors as u64) as usize * SECTOR;
    let kind = match rng.below(9) {
        0 => {
            let at = sector + rng.below(SECTOR as u64) as usize;
            b[at] ^= 1 << rng.below(8);
            "bit flip"
        }
        1 => {
            b[sector..sector + SECTOR].fill(0);
            "zeroed sector"
        }
        2 => {
            let mut g = seeded(rng.next_u64());
            b[sector..sector + SECTOR].iter_mut().for_each(|x| *x = g.next_u64() as u8);
            "garbage sector"
        }
        3 => {
            b.truncate(rng.below(len as u64) as usize);
            "truncated segment"
        }
        4 => {
            forge_segment_len(b, (len as u32) * 2);
            "forged segment length"
        }
        5 => {
            let r = in_seg
                .iter()
                .filter(|r| r.kind != Kind::Frame)
                .nth(rng.below(in_seg.len() as u64) as usize)?;
            let claim = r.payload.len() as u32 + 8 + rng.below(4096) as u32;
            forge_len(b, r.offset as usize, claim, rng.below(2) == 0);
            "forged record length"
        }
        6 => {
            let frames: Vec<usize> = (0..in_seg.len()).filter(|&k| in_seg[k].kind == Kind::Frame).collect();
            let k = frames[rng.below(frames.len() as u64) as usize];
            let rest: Vec<usize> = in_seg[k + 1..]
                .iter()
                .take_while(|r| r.kind != Kind::Frame)
                .map(|r| r.offset as usize)
                .collect();
            let more = 1 + rng.below(3) as u32;
            forge_frame(b, in_seg[k].offset as usize, more, 512 * (1 + rng.below(8)), &rest);
            "forged frame"
        }
        _ => {
            let limit = len.saturating_sub(2048).max(data_end + 1);
            let at = data_end + rng.below((limit - data_end) as u64) as usize;
            b[at.min(len - 1)] = 0x5a;
            "bytes after the data"
        }
    };
    Some((kind, v))
}

/// A crash point kept for later: the state, and the states the model allows there.
struct Kept {
    state: MemState,
    cands: Vec<Candidate>,
}

/// Runs the sweep's workload for `seed`, keeps up to `points` of its crash points, and checks
/// the promise on a crash image of each, on `damages` damaged copies of each, and on
/// `damages * 4` damaged copies of the cleanly closed end.
pub fn torn_cuts(seed: u64, points: usize, damages: usize, st: &mut CutStats) {
    let plan = Plan { steps: 160, segments: 3, ..Plan::full(seed) };
    let mem = MemStorage::new();
    {
        let mut f = mem.faults();
        f.seed = Some(seed ^ 0x7c07);
        f.short_write_max = plan.short_writes.then_some(4096);
    }
    let model = new_model();
    let kept: Arc<Mutex<Vec<Kept>>> = Arc::default();
    let mut rng = seeded(seed ^ 0x70c7);
    {
        let (model, kept) = (model.clone(), kept.clone());
        let mut pick = seeded(seed ^ 0x51c7);
        mem.set_sync_observer(move |cp| {
            if pick.below(4) != 0 || lock(&kept).len() >= points {
                return;
            }
            let md = lock(&model);
            let cands = candidates(&md.hist, md.acked, md.staged);
            lock(&kept).push(Kept { state: cp.state.clone(), cands });
        });
    }
    let ran = run_workload(&mem, &plan, &model);
    mem.set_sync_observer(|_| {});
    assert!(ran.error.is_none(), "seed {seed}: the workload failed: {:?}", ran.error);
    let ctx = |what: &str| format!("seed {seed}, {what}");
    let kept = std::mem::take(&mut *lock(&kept));
    for (i, k) in kept.iter().enumerate() {
        let dirty = k.state.effective_dirty_sectors();
        let fates: Vec<SectorFate> = dirty
            .iter()
            .map(|_| match rng.below(8) {
                0 => SectorFate::Garbage(rng.next_u64()),
                1..=4 => SectorFate::New,
                _ => SectorFate::Old,
            })
            .collect();
        let img = k
            .state
            .crash(|n, s| dirty.iter().position(|&d| d == (n, s)).map_or(SectorFate::Old, |j| fates[j]));
        let Some(before) = walk(&img) else { continue };
        check(&img, &before, Some(&k.cands), st)
            .unwrap_or_else(|e| panic!("{}: {e}", ctx(&format!("crash image {i}"))));
        // The image as recovery left it (cut, if it was torn) is damaged in turn.
        let Some(base) = walk(&img) else { continue };
        let files = files_of(&img.state());
        damage_and_check(&files, &base, damages, &mut rng, st, &|w| ctx(&format!("crash image {i}, {w}")));
    }
    let files = files_of(&ran.st.state());
    let before = walk(&ran.st).expect("the clean log");
    assert_eq!(before.verdict, CrcVerdict::Ok, "{}", ctx("the clean log"));
    damage_and_check(&files, &before, damages * 4, &mut rng, st, &|w| ctx(&format!("the clean log, {w}")));
}

fn damage_and_check(
    files: &Files,
    before: &Walked,
    n: usize,
    rng: &mut Rng,
    st: &mut CutStats,
    ctx: &dyn Fn(&str) -> String,
) {
    // Damage is judged against an undamaged log.
    if before.verdict != CrcVerdict::Ok || !files.iter().any(|f| parse_segment_file_name(&f.0).is_some()) {
        return;
    }
    for d in 0..n {
        let Some((kind, v)) = damage(files, &before.recs, rng) else { continue };
        *st.damage.entry(kind).or_default() += 1;
        check(&MemStorage::from_files(v), before, None, st)
            .unwrap_or_else(|e| panic!("{}: {e}", ctx(&format!("damage {d} ({kind})"))));
    }
}
