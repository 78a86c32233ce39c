//! The `corrupt` class: a cleanly closed log damaged (bits flipped, sectors zeroed, garbage,
//! stale, misdirected or foreign, files truncated, missing or swapped) is CORRUPT, and a
//! salvage read yields a state the log really held.

use super::workload::Ran;
use super::{files_of, Cases, Class, Files, Only, Summary, SEG};
use crate::workload::history::{seeded, History, Op as HOp};
use crate::MemStorage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use wal::{CrcVerdict, Options, RecoveryMode, Wal};

/// Damage to attested data: CORRUPT, never OK, TORN_TAIL or CORRUPT_TAIL (so never CLEAN: the
/// state is not checked on a CORRUPT log), and a salvage read yields a state the log really held:
/// the live entries after some prefix of its history (at a user-batch boundary), from the first
/// entry it reads on. (It stops at the damage, so cuts written after it are not applied: the
/// entries they cut may appear, as they were live at that point. A state the log never held, such
/// as a cut entry next to the one that replaced it, fails.)
fn check_corrupt(files: Files, hist: &History) -> Result<CrcVerdict, String> {
    let img = MemStorage::from_files(files);
    let scan = wal::scan_log(&img, true).map_err(|e| format!("scan failed: {e}"))?;
    if scan.verdict != CrcVerdict::Corrupt {
        return Err(format!("damage to attested data gave {} ({:?})", scan.verdict.as_str(), scan.damage));
    }
    // (A writer's open walks only the last segment, so it is not asked here; a read of the log
    // meets the damage.)
    let salvage = Options { segment_len_bytes: SEG, recovery: RecoveryMode::Salvage, ..Options::default() };
    if let Ok((log, _)) = Wal::open_with(Arc::new(img), salvage) {
        if let Ok(mut r) = log.replay() {
            let mut read = Vec::new();
            while let Some(Ok(item)) = r.next() {
                if item.kind == wal::ItemKind::Entry {
                    read.push((item.lsn.0, item.payload.to_vec()));
                }
            }
            if !held_state(hist, &read) {
                let span = read.first().zip(read.last()).map(|(a, b)| (a.0, b.0));
                return Err(format!(
                    "salvage read {} entries {span:?}: no state the log ever held",
                    read.len()
                ));
            }
        }
    }
    Ok(scan.verdict)
}

/// Whether `read` is the live entries, from its first LSN on, after some prefix of `hist` that
/// ends at a user-batch boundary (an empty read always is).
fn held_state(hist: &History, read: &[(u64, Vec<u8>)]) -> bool {
    let Some(first) = read.first().map(|e| e.0) else { return true };
    let mut m: BTreeMap<u64, &[u8]> = BTreeMap::new();
    let same = |m: &BTreeMap<u64, &[u8]>| {
        m.range(first..).count() == read.len()
            && m.range(first..).zip(read).all(|((l, p), (rl, rp))| l == rl && *p == &rp[..])
    };
    for k in 0..=hist.ops.len() {
        if k > 0 {
            match &hist.ops[k - 1] {
                HOp::Put(l, p) => {
                    m.insert(*l, p);
                }
                HOp::Cut(c) => {
                    m.split_off(c);
                }
            }
        }
        if hist.ok[k] && same(&m) {
            return true;
        }
    }
    false
}

/// Byte ranges of a segment file that hold data (sectors that are not blank: non-zero, and in a
/// recycled segment not the file's old contents either), as sector numbers.
fn data_sectors(bytes: &[u8]) -> Vec<usize> {
    let table = stale_table(bytes);
    (0..bytes.len() / 512)
        .filter(|s| !wal::stale::is_blank(table.as_deref(), s * 512, &bytes[s * 512..s * 512 + 512]))
        .collect()
}

/// A recycled segment file's stale table.
fn stale_table(bytes: &[u8]) -> Option<Arc<wal::stale::StaleTable>> {
    let h = wal::format::SegmentHeader::self_valid(bytes)?;
    let len = h.segment_len.get();
    (h.is_recycled() && len as usize == bytes.len())
        .then(|| wal::stale::StaleTable::find(bytes, len, wal::stale::Owner::of(&h)))
        .flatten()
}

pub fn corrupt_class(seed: u64, ran: &Ran, foreign: &Files, only: Option<Only>, sum: &mut Summary) {
    let mut cases = Cases::new(seed, Class::Corrupt, only);
    let mut rng = seeded(seed ^ 0xbadbad);
    let files = files_of(&ran.st.state());
    let base = MemStorage::from_files(files.clone());
    let scan = wal::scan_log(&base, true).unwrap_or_else(|e| panic!("seed {seed}: clean log: {e}"));
    assert_eq!(scan.verdict, CrcVerdict::Ok, "seed {seed}: the clean log is not OK: {:?}", scan.damage);
    let want = {
        let (log, _) = Wal::open_with(
            Arc::new(base.clone()),
            Options { read_only: true, segment_len_bytes: SEG, ..Options::default() },
        )
        .unwrap();
        log.replay().unwrap().collect_entries().unwrap()
    };
    let segs: Vec<usize> = files
        .iter()
        .enumerate()
        .filter(|(_, (n, b))| wal::format::parse_segment_file_name(n).is_some() && b.iter().any(|&x| x != 0))
        .map(|(i, _)| i)
        .collect();
    let meta = files.iter().position(|f| f.0 == wal::format::META_FILE_NAME);
    let mid = ran.mid.as_ref().map(files_of).unwrap_or_default();
    // The history the oracle searches is this log's: its last state is what the clean log reads.
    assert!(held_state(&ran.hist, &want), "seed {seed}: the clean log is no state of its history");
    let mut run = |what: String, kind: &'static str, v: Files, sum: &mut Summary| {
        let Some(n) = cases.take() else { return };
        let verdict = check_corrupt(v, &ran.hist).unwrap_or_else(|e| panic!("{}: {e}", cases.ctx(n, &what)));
        *sum.cases.entry(Class::Corrupt.name()).or_default() += 1;
        sum.verdict(Class::Corrupt, verdict);
        sum.fault(kind, 1);
        sum.acked_checked += want.len() as u64;
    };
    let mut targets = segs.clone();
    targets.extend(meta);
    for &fi in &targets {
        let len = files[fi].1.len();
        let data = if Some(fi) == meta { (0..len / 512 + 1).collect() } else { data_sectors(&files[fi].1) };
        // Bit flips: in data sectors.
        for _ in 0..40 {
            let s = data[rng.below(data.len() as u64) as usize];
            let b = (s * 512 + rng.below(512) as usize).min(len - 1);
            let bit = rng.below(8);
            let mut v = files.clone();
            v[fi].1[b] ^= 1 << bit;
            run(format!("bit {bit} of byte {b} of {}", files[fi].0), "bit flips", v, sum);
        }
        if Some(fi) == meta {
            continue;
        }
        for &s in &data {
            let r = s * 512..s * 512 + 512;
            let mut v = files.clone();
            v[fi].1[r.clone()].fill(0);
            run(format!("sector {s} of {} zeroed", files[fi].0), "zeroed sectors", v, sum);
            if rng.below(4) == 0 {
                let mut v = files.clone();
                let mut g = seeded(rng.next_u64());
                v[fi].1[r.clone()].iter_mut().for_each(|b| *b = g.next_u64() as u8);
                run(format!("sector {s} of {} garbage", files[fi].0), "garbage sectors", v, sum);
            }
            // Stale: the sector as it was earlier in the run (a lost write, or an older version
            // of it), where that differs.
            if let Some(old) = mid.iter().find(|f| f.0 == files[fi].0) {
                if old.1.get(r.clone()).is_some_and(|o| o != &files[fi].1[r.clone()]) {
                    let mut v = files.clone();
                    v[fi].1[r.clone()].copy_from_slice(&old.1[r.clone()]);
                    run(format!("sector {s} of {} stale", files[fi].0), "stale sectors", v, sum);
                }
            }
            // Misdirected: another data sector of the log written here.
            if rng.below(3) == 0 {
                let (fj, t) = {
                    let fj = segs[rng.below(segs.len() as u64) as usize];
                    let d = data_sectors(&files[fj].1);
                    (fj, d[rng.below(d.len() as u64) as usize])
                };
                if files[fj].1[t * 512..t * 512 + 512] != files[fi].1[r.clone()] {
                    let mut v = files.clone();
                    let src = files[fj].1[t * 512..t * 512 + 512].to_vec();
                    v[fi].1[r.clone()].copy_from_slice(&src);
                    run(
                        format!("sector {s} of {} replaced by sector {t} of {}", files[fi].0, files[fj].0),
                        "misdirected sectors",
                        v,
                        sum,
                    );
                }
            }
            // Foreign: the same sector of another log.
            if let Some(f) = foreign.iter().find(|f| f.0 == files[fi].0) {
                if rng.below(3) == 0
                    && f.1
                        .get(r.clone())
                        .is_some_and(|o| o.iter().any(|&b| b != 0) && o != &files[fi].1[r.clone()])
                {
                    let mut v = files.clone();
                    v[fi].1[r.clone()].copy_from_slice(&f.1[r.clone()]);
                    run(format!("sector {s} of {} from another log", files[fi].0), "foreign sectors", v, sum);
                }
            }
        }
        // Truncation: at a seeded offset in every 509-byte stride, and at every sector boundary
        // of the data.
        let mut cuts: BTreeSet<usize> = (0..len / 509).map(|k| k * 509 + rng.below(509) as usize).collect();
        cuts.extend(data.iter().map(|s| s * 512));
        for cut in cuts.into_iter().filter(|&c| c < len) {
            let mut v = files.clone();
            v[fi].1.truncate(cut);
            run(format!("{} truncated to {cut} bytes", files[fi].0), "truncations", v, sum);
        }
        // Missing.
        let mut v = files.clone();
        v.remove(fi);
        run(format!("{} missing", files[fi].0), "missing segments", v, sum);
    }
    // Reordered: two segments' contents swapped.
    for w in segs.windows(2) {
        let mut v = files.clone();
        let a = v[w[0]].1.clone();
        v[w[0]].1 = std::mem::replace(&mut v[w[1]].1, a);
        run(format!("{} and {} swapped", files[w[0]].0, files[w[1]].0), "reordered segments", v, sum);
    }
}
