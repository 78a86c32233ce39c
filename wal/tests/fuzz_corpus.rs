//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) and deterministic pseudo-random inputs
//! through the fuzz harness on stable, so CI checks every input the fuzzer ever kept.
//!
//! The harness is `wal_sim::fuzz` (`wal/sim/src/fuzz.rs`; the cargo-fuzz crate under `fuzz/`
//! needs nightly and is not a workspace member, so the harness lives in the simulation crate). Besides the harness's oracle (no panic,
//! Salvage never writes, the readers agree), this test bounds every single allocation the
//! harness makes to the size of the largest input file plus a constant: no length read from the
//! bytes drives an allocation.
//!
//! Regenerate the seed corpus: `WAL_FUZZ_REGEN=1 cargo test -p wal --test fuzz_corpus --
//! --ignored regenerate_seed_corpus`.

use wal_sim::fuzz as harness;

use harness::{Fix, Outcome};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use wal::{CrcVerdict, DamageKind};
use wal_sim::Rng;

// ----- an allocator that records the largest allocation made while armed (per thread) -----

struct Watch;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}
static EVER_LARGEST: AtomicUsize = AtomicUsize::new(0);

fn note(size: usize) {
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Watch = Watch;

/// Slack over the largest file: the writer check may create a fresh segment of `SEG` bytes and
/// a batch buffer; nothing else is that large.
const ALLOC_SLACK: usize = 2 * harness::SEG as usize;
/// Any single input taking longer than this is a hang (the slowest take a few milliseconds).
const HANG: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Bytes,
    Mutated,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Bytes => "verify_bytes",
            Target::Mutated => "verify_mutated",
        }
    }
}

/// Runs one input through the harness with the allocation and time oracles.
fn run(target: Target, data: &[u8], what: &str) -> Outcome {
    let case = match target {
        Target::Bytes => harness::case_from_bytes(data),
        Target::Mutated => harness::case_from_mutations(data),
    };
    let largest_file = case.files.iter().map(|f| f.1.len()).max().unwrap_or(0);
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let t = Instant::now();
    let r = std::panic::catch_unwind(|| harness::check(&case));
    let took = t.elapsed();
    ARMED.with(|a| a.set(false));
    let out = match r {
        Ok(out) => out,
        Err(e) => panic!(
            "{} input {what} panicked: {:?}",
            target.name(),
            e.downcast_ref::<String>().map(String::as_str).or(e.downcast_ref::<&str>().copied())
        ),
    };
    let largest = LARGEST.with(Cell::get);
    EVER_LARGEST.fetch_max(largest, Ordering::Relaxed);
    assert!(
        largest <= largest_file + ALLOC_SLACK,
        "{} input {what}: an allocation of {largest} bytes for files of at most {largest_file}",
        target.name()
    );
    assert!(took < HANG, "{} input {what} took {took:?}", target.name());
    out
}

fn corpus_dir(target: Target) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target.name())
}

fn corpus(target: Target) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(corpus_dir(target)) else { return out };
    for e in rd {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.ends_with(".md") {
                continue;
            }
            out.push((name, std::fs::read(e.path()).unwrap()));
        }
    }
    out.sort();
    out
}

fn replay_corpus(target: Target) {
    let files = corpus(target);
    assert!(!files.is_empty(), "no corpus in {}", corpus_dir(target).display());
    for (name, data) in &files {
        run(target, data, name);
    }
    eprintln!("{}: {} corpus inputs", target.name(), files.len());
}

#[test]
fn corpus_verify_bytes() {
    replay_corpus(Target::Bytes);
}

#[test]
fn corpus_verify_mutated() {
    replay_corpus(Target::Mutated);
}

/// Pseudo-random inputs: a third raw random bytes, the rest corpus entries with random byte
/// flips, overwrites, insertions and truncations (what a fuzzer does first).
fn random_inputs(target: Target, n: usize, seed: u64) -> Vec<Vec<u8>> {
    let seeds: Vec<Vec<u8>> = corpus(target).into_iter().map(|c| c.1).collect();
    // xorshift64*: the inputs these seeds gave when the corpus was written.
    let mut rng = Rng::xorshift64_star(seed);
    (0..n)
        .map(|i| {
            if i % 3 == 0 || seeds.is_empty() {
                let len = rng.below(if target == Target::Bytes { 4096 } else { 256 }) as usize;
                return (0..len).map(|_| rng.next_u64() as u8).collect();
            }
            let mut v = seeds[rng.below(seeds.len() as u64) as usize].clone();
            for _ in 0..1 + rng.below(8) {
                if v.is_empty() {
                    v.push(rng.next_u64() as u8);
                }
                let at = rng.below(v.len() as u64) as usize;
                match rng.below(10) {
                    0..=4 => v[at] ^= 1 << rng.below(8),
                    5..=6 => v[at] = rng.next_u64() as u8,
                    7 => v.insert(at, rng.next_u64() as u8),
                    8 => v.truncate(at.max(2)),
                    _ => {
                        // an (offset, xor) mutation or a flag byte change
                        if target == Target::Mutated {
                            v.extend_from_slice(&(rng.next_u64() as u32).to_le_bytes());
                        } else {
                            v[0] ^= 1 << rng.below(8);
                        }
                    }
                }
            }
            v
        })
        .collect()
}

fn random_run(target: Target, n: usize, seed: u64) {
    let t = Instant::now();
    let mut verdicts = std::collections::BTreeMap::new();
    for (i, data) in random_inputs(target, n, seed).iter().enumerate() {
        let out = run(target, data, &format!("random #{i} (seed {seed:#x}) {}", hex(data, 4096)));
        *verdicts.entry(format!("{:?}", out.verdict)).or_insert(0usize) += 1;
    }
    eprintln!("{}: {n} random inputs in {:?}: {verdicts:?}", target.name(), t.elapsed());
}

fn hex(b: &[u8], max: usize) -> String {
    let mut s: String = b.iter().take(max).map(|x| format!("{x:02x}")).collect();
    if b.len() > max {
        s.push_str("...");
    }
    s
}

#[test]
fn random_verify_bytes() {
    random_run(Target::Bytes, 2000, 0x5eed_0001);
}

#[test]
fn random_verify_mutated() {
    random_run(Target::Mutated, 2000, 0x5eed_0002);
}

// ----- the seeds themselves -----

/// The seed corpus: (target, file name, bytes). Every seed is small (a `verify_bytes` seed keeps
/// only the non-zero head and footer of each segment).
fn seeds() -> Vec<(Target, String, Vec<u8>)> {
    let mut out = Vec::new();
    let bases = harness::bases();
    for (i, b) in bases.iter().enumerate() {
        // verify_bytes: the base log itself, when it fits the compact encoding.
        let fits = b.unchecked.is_empty()
            && b.files.iter().filter(|f| f.0.ends_with(".wal")).count() <= 3
            && b.files.iter().all(|f| f.0 == "wal.meta" || f.1.len() == harness::SEG as usize);
        if fits {
            let enc = harness::encode_bytes_input(&b.files, Fix::NONE, 3);
            out.push((Target::Bytes, format!("seed-{}", b.name), enc.clone()));
            let mut fixed = enc;
            fixed[0] |= Fix::ALL.bits() << 2;
            out.push((Target::Bytes, format!("seed-{}-rechain", b.name), fixed));
        }
        // verify_mutated: unchanged, one flipped bit in the first batch, a zeroed sector in the
        // second segment, a flipped LSN with checksums repaired.
        let base = i as u8;
        // Offsets into the files concatenated in name order; skip a file left below the floor.
        let seg1 = if b.unchecked.is_empty() { 0 } else { harness::SEG };
        out.push((
            Target::Mutated,
            format!("seed-{}-clean", b.name),
            harness::encode_mutations(base, Fix::NONE, 3, &[]),
        ));
        out.push((
            Target::Mutated,
            format!("seed-{}-bitflip", b.name),
            harness::encode_mutations(base, Fix::NONE, 3, &[(seg1 + 64 + 48 + 30, 0x10)]),
        ));
        out.push((
            Target::Mutated,
            format!("seed-{}-zero-sector", b.name),
            harness::encode_mutations(base, Fix::NONE, 0, &[(seg1 + harness::SEG + 1024, 0)]),
        ));
        out.push((
            Target::Mutated,
            format!("seed-{}-lsn-rechained", b.name),
            harness::encode_mutations(base, Fix::ALL, 5, &[(seg1 + harness::SEG + 136 + 24, 0x01)]),
        ));
    }
    // verify_bytes: degenerate directories.
    out.push((Target::Bytes, "seed-empty".into(), Vec::new()));
    out.push((Target::Bytes, "seed-meta-only".into(), {
        let meta = &bases[0].files.iter().find(|f| f.0 == "wal.meta").unwrap().1;
        let mut v = vec![0x00, 0x01, 64];
        v.extend_from_slice(meta);
        v
    }));
    out
}

#[test]
fn seeds_decode_to_what_was_encoded() {
    for b in harness::bases() {
        let s = wal::scan_log(&wal_sim::MemStorage::from_files(b.files.clone()), true).unwrap();
        assert_eq!(s.verdict, CrcVerdict::Ok, "base {} must be a valid log: {:?}", b.name, s.damage);
        assert!(s.records_walked > 10, "base {}", b.name);
    }
    for (target, name, data) in seeds() {
        let out = run(target, &data, &name);
        if name.ends_with("-clean") || name == "seed-closed" || name == "seed-live" {
            assert_eq!(out.verdict, Some(CrcVerdict::Ok), "{name}: {:?}", out.damage);
            assert!(out.replayed.unwrap() > 5, "{name}");
            assert!(out.writer_opened, "{name}");
        }
        if name.ends_with("-rechain") {
            // Recomputing the checksums of a valid log changes nothing.
            assert_eq!(out.verdict, Some(CrcVerdict::Ok), "{name}: {:?}", out.damage);
        }
        if target == Target::Bytes && (name == "seed-closed" || name == "seed-live") {
            let case = harness::case_from_bytes(&data);
            let base = harness::bases().iter().find(|b| name.ends_with(b.name)).unwrap();
            assert_eq!(case.files, base.files, "{name} round trip");
        }
    }
}

// ----- regressions: the fuzzing findings of "walcheck part 1", fixed in b436af5 -----
//
// Each is crafted on a base log and kept in fuzz/corpus/<target>/regression-<name> (so the corpus
// replay and every fuzz run start from them); the test below also pins the verdict. A new bug
// that is not fixed yet goes to fuzz/regressions/<target>/ instead (`cargo fuzz run` stops at the
// first crashing corpus input) with an `#[ignore = "bug: ..."]` test and an entry in
// fuzz/src/lib.rs KNOWN_BUGS.

/// A `verify_mutated` input that sets bytes of a base log to given values: (file index in name
/// order, offset in the file, new bytes).
fn set_bytes(base: u8, fix: Fix, edits: &[(usize, usize, &[u8])]) -> Vec<u8> {
    let files = &harness::bases()[usize::from(base)].files;
    let mut muts = Vec::new();
    for &(file, off, value) in edits {
        let start: usize = files[..file].iter().map(|f| f.1.len()).sum();
        for (i, &v) in value.iter().enumerate() {
            let x = files[file].1[off + i] ^ v;
            if x != 0 {
                muts.push(((start + off + i) as u32, x));
            }
        }
    }
    harness::encode_mutations(base, fix, 3, &muts)
}

const FOOTER: usize = harness::SEG as usize - 2048;
const NO_RECHAIN: Fix = Fix { meta: true, headers: true, records: true, rechain: false };

/// (target, reproducer name, bytes): crafted on the base log "closed" (three segments, files in
/// name order: segments 1-3, then wal.meta), checksums recomputed by the harness.
fn regressions() -> Vec<(Target, &'static str, Vec<u8>)> {
    vec![
        // Segment 1's first frame (offset 64): batch_len (payload offset 16) = 2^64 - 8.
        (
            Target::Mutated,
            "frame-batch-len-overflow",
            set_bytes(0, Fix::ALL, &[(0, 64 + 48 + 16, &0xffff_ffff_ffff_fff8u64.to_le_bytes())]),
        ),
        // Segment 1's footer: durable_seq (payload offset 0) = u64::MAX.
        (
            Target::Mutated,
            "footer-durable-seq-overflow",
            set_bytes(0, Fix::ALL, &[(0, FOOTER + 48, &u64::MAX.to_le_bytes())]),
        ),
        // wal.meta floor_first_record_seq = u64::MAX - 1, the chain relinked from it: the
        // second record has seq u64::MAX.
        (
            Target::Mutated,
            "record-seq-overflow",
            set_bytes(0, Fix::ALL, &[(3, 40, &(u64::MAX - 1).to_le_bytes())]),
        ),
        // Segment 1's footer: seq = u64::MAX, checksums recomputed but not relinked. The full
        // scan reports a SeqGap; the fast scan (any write-open, `walcheck --quick`) trusts the
        // sealed footer of a segment that has a later one and computes seq + 1.
        (
            Target::Mutated,
            "fast-scan-footer-seq-overflow",
            set_bytes(0, NO_RECHAIN, &[(0, FOOTER + 16, &u64::MAX.to_le_bytes())]),
        ),
        // A new, empty log whose wal.meta says floor_first_record_seq = 0 (checksum valid): every
        // scan says OK, a writer opens it and writes a first frame with seq 0 and durable_seq 0,
        // which the reader then rejects ("durable sequence out of order": CORRUPT).
        (Target::Bytes, "meta-first-record-seq-zero", {
            let mut meta = vec![0u8; 64];
            meta[..8].copy_from_slice(b"\x89WALMT\r\n");
            meta[8] = 1; // format_version
            meta[16..32].copy_from_slice(&harness::LOG_ID);
            // floor_segment_seq; then one blank 64 KiB segment 1; Fix::meta recomputes the crc.
            meta[32] = 1;
            let mut v = vec![Fix { meta: true, ..Fix::NONE }.bits() << 2, 0x01, 64];
            v.extend_from_slice(&meta);
            v
        }),
    ]
}

/// Each regression is CORRUPT with this damage kind (before the fixes: a panic with overflow
/// checks, or an OK log that the writer's first batch turned CORRUPT).
fn expected_kind(name: &str) -> DamageKind {
    match name {
        "frame-batch-len-overflow" => DamageKind::BadFrame("impossible count or length"),
        "footer-durable-seq-overflow" => DamageKind::BadFooter("durable sequence or data end disagree"),
        "record-seq-overflow" => DamageKind::BadState("record sequence overflow"),
        "fast-scan-footer-seq-overflow" => DamageKind::SeqGap { expected: 20, found: u64::MAX },
        "meta-first-record-seq-zero" => DamageKind::BadMetaFile("impossible floor"),
        _ => unreachable!("{name}"),
    }
}

// ----- open bugs: reproducers in fuzz/regressions/<target>/, one ignored test each -----

/// A `wal.meta` (floor segment 1, first record 1) and a segment 1 holding only a valid header.
/// It once scanned OK while a writer then continued at offset 512 and the reader expected 64;
/// a header without its first batch is now damage (ZeroHeader at 64, cut back to a spare).
/// Found by random_verify_bytes from a truncated corpus input.
fn header_only_segment() -> (Target, &'static str, Vec<u8>) {
    (Target::Bytes, "header-only-segment", {
        let mut meta = vec![0u8; 64];
        meta[..8].copy_from_slice(b"\x89WALMT\r\n");
        meta[8] = 1; // format_version
        meta[16..32].copy_from_slice(&harness::LOG_ID);
        meta[32] = 1; // floor_segment_seq
        meta[40] = 1; // floor_first_record_seq
        let mut header = vec![0u8; 60];
        header[..8].copy_from_slice(b"\x89WAL\r\n\x1a\n");
        header[8] = 1; // format_version
        header[12..16].copy_from_slice(&harness::SEG.to_le_bytes());
        header[16..32].copy_from_slice(&harness::LOG_ID);
        header[32] = 1; // segment_seq
        header[40] = 1; // first_record_seq; prev_crc 0; the harness fills in header_crc
        let fix = Fix { meta: true, headers: true, ..Fix::NONE };
        let mut v = vec![fix.bits() << 2, 0x01, 64];
        v.extend_from_slice(&meta);
        v.push(0); // 64 KiB file
        v.extend_from_slice(&(header.len() as u16).to_le_bytes());
        v.extend_from_slice(&header);
        v
    })
}

/// Open (unfixed) findings; each would have a reproducer in fuzz/regressions/<target>/.
fn open_bugs() -> Vec<(Target, &'static str, Vec<u8>)> {
    Vec::new()
}

fn regression_dir(target: Target) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target.name())
}

/// Every open bug still reproduces, and the tolerant oracle recognizes it; when one is fixed
/// this test names it.
#[test]
fn open_bugs_still_reproduce() {
    for (target, name, data) in open_bugs() {
        let case = match target {
            Target::Bytes => harness::case_from_bytes(&data),
            Target::Mutated => harness::case_from_mutations(&data),
        };
        let out = run(target, &data, name);
        assert_eq!(out.verdict, Some(CrcVerdict::Ok), "{name}");
        let strict = std::panic::catch_unwind(|| harness::check_with(&case, true));
        assert!(
            strict.is_err(),
            "{name} is fixed: un-ignore its test, move it to fuzz/corpus, drop known_bug"
        );
    }
}

#[test]
fn regression_header_only_segment_is_damage() {
    let (target, name, data) = header_only_segment();
    let stored = std::fs::read(corpus_dir(target).join(format!("regression-{name}"))).unwrap();
    assert_eq!(stored, data, "fuzz/corpus/{}/regression-{name} is stale", target.name());
    let out = run(target, &data, name);
    assert_eq!(out.verdict, Some(CrcVerdict::CorruptTail), "{name}: {:?}", out.damage);
    let d = out.damage.unwrap();
    assert_eq!((d.kind, d.offset, d.batch_start), (DamageKind::ZeroHeader, 64, 0));
    harness::check_with(&harness::case_from_bytes(&data), true);
}

#[test]
fn regressions_are_corrupt_and_in_the_corpus() {
    for (target, name, data) in regressions() {
        let stored = std::fs::read(corpus_dir(target).join(format!("regression-{name}"))).unwrap();
        assert_eq!(stored, data, "fuzz/corpus/{}/regression-{name} is stale", target.name());
        let out = run(target, &data, name);
        assert_eq!(out.verdict, Some(CrcVerdict::Corrupt), "{name}: {:?}", out.damage);
        assert_eq!(out.damage.unwrap().kind, expected_kind(name), "{name}");
    }
}

/// Writes the seed corpus (only with `WAL_FUZZ_REGEN=1`). Existing files are kept: the fuzzer's
/// own additions stay.
#[test]
#[ignore = "writes fuzz/corpus; run with WAL_FUZZ_REGEN=1"]
fn regenerate_seed_corpus() {
    if std::env::var_os("WAL_FUZZ_REGEN").is_none() {
        eprintln!("set WAL_FUZZ_REGEN=1 to write fuzz/corpus");
        return;
    }
    let mut total = 0;
    for (target, name, data) in seeds() {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        total += data.len();
        std::fs::write(dir.join(&name), &data).unwrap();
        eprintln!("{}/{name}: {} bytes", target.name(), data.len());
    }
    eprintln!("{total} bytes of seeds");
    for (target, name, data) in open_bugs() {
        let dir = regression_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), &data).unwrap();
        eprintln!("regressions/{}/{name}: {} bytes", target.name(), data.len());
    }
    for (target, name, data) in regressions() {
        std::fs::write(corpus_dir(target).join(format!("regression-{name}")), &data).unwrap();
        eprintln!("{}/regression-{name}: {} bytes", target.name(), data.len());
    }
}

#[test]
fn largest_allocation_is_reported() {
    // Runs after (or alongside) the others; only prints what the oracle saw.
    run(Target::Mutated, &[0, 0], "clean closed log");
    eprintln!("largest single allocation so far: {} bytes", EVER_LARGEST.load(Ordering::Relaxed));
}
