//! The harness behind the cargo-fuzz targets. The harness itself is `wal_sim::fuzz`
//! (`wal/sim/src/fuzz.rs`), which `wal/tests/fuzz_corpus.rs` also runs to replay `corpus/` on
//! stable in CI; this file adds only what needs a crate the `wal` tests do not have (the
//! verifier).

pub use wal_sim::fuzz as harness;

use harness::{Case, Outcome};
use std::sync::OnceLock;

/// Differential check against the read-only verifier (pread, real files): it must reach the same
/// verdict and damage as the full scan over `MemStorage`. Files go to a tmpfs directory.
/// Off unless `WAL_FUZZ_VERIFIER=1` (it costs a directory and a few file writes per input).
pub fn check_verifier(case: &Case, out: &Outcome) {
    static ON: OnceLock<bool> = OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("WAL_FUZZ_VERIFIER").is_some_and(|v| v == "1")) {
        return;
    }
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let dir = tempfile::Builder::new().prefix("wal-fuzz-").tempdir_in(base).expect("tempdir");
    for (name, bytes) in &case.files {
        std::fs::write(dir.path().join(name), bytes).expect("writing a fuzz file");
    }
    let report = verifier::verify(dir.path(), &verifier::VerifyOptions::default(), &mut |_| {});
    let _ = report.to_text(false);
    let _ = report.to_json();
    match out.verdict {
        Some(v) => {
            assert!(report.io_error.is_none(), "verifier I/O error: {:?}", report.io_error);
            assert_eq!(report.crc, v, "verifier and full scan disagree");
            assert_eq!(report.damage, out.damage, "verifier and full scan disagree on the damage");
        }
        None => assert!(report.io_error.is_some(), "verifier found a log where the scan found none"),
    }
    let quick = verifier::verify(dir.path(), &verifier::VerifyOptions { quick: true }, &mut |_| {});
    let _ = quick.to_text(false);
}

/// Panics that are known, reported and not yet fixed bugs: (source file suffix, panic message).
/// With `WAL_FUZZ_SKIP_KNOWN=1` a fuzz run treats them as uninteresting, so it can look for others
/// before they are fixed. Each has a reproducer in `fuzz/regressions/` and an ignored test.
///
/// Empty: the overflows found in "walcheck part 1" (`("wal/src/scan.rs", "attempt to add with
/// overflow")`, `("wal/src/recovery.rs", ...)`) were fixed in b436af5.
pub const KNOWN_BUGS: &[(&str, &str)] = &[];

/// Runs one input; see [`KNOWN_BUGS`].
pub fn guarded(f: impl FnOnce() + std::panic::UnwindSafe) {
    use std::cell::Cell;
    static SKIP: OnceLock<bool> = OnceLock::new();
    thread_local!(static KNOWN: Cell<bool> = const { Cell::new(false) });
    let skip = *SKIP.get_or_init(|| {
        let on = std::env::var_os("WAL_FUZZ_SKIP_KNOWN").is_some_and(|v| v == "1");
        if on {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let file = info.location().map(|l| l.file().to_string()).unwrap_or_default();
                if KNOWN_BUGS.iter().any(|(f, m)| file.ends_with(f) && msg.contains(m)) {
                    KNOWN.with(|k| k.set(true));
                    return;
                }
                prev(info)
            }));
        }
        on
    });
    if !skip {
        f();
        return;
    }
    KNOWN.with(|k| k.set(false));
    if let Err(e) = std::panic::catch_unwind(f) {
        if !KNOWN.with(|k| k.get()) {
            std::panic::resume_unwind(e);
        }
    }
}
