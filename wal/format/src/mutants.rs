//! The mutants of `tools/mutants.sh`: each breaks one invariant of docs/invariants.md on purpose,
//! at the one point the code enforces it, to show that the tests catch it.
//!
//! A mutant is chosen at build time by the environment variable `WAL_MUTANT` (its name, e.g.
//! `ack-before-sync`), not by a cargo feature: a feature is visible to, and can be switched on
//! by, every crate that depends on the engine, and a test-only switch has no business there.
//! Cargo rebuilds the crates that read the variable when it changes, as it does for a feature.
//! Unset, every [`on`] is a constant `false` and the code behind it is compiled out.

/// Every mutant there is, with the invariant it breaks. A name outside the list fails the build.
pub const ALL: &[(&str, &str)] = &[
    ("apply-before-commit", "I1"),
    ("replay-ignores-dedupe", "I2"),
    ("ack-before-sync", "I3"),
    ("ack-before-write", "I3"),
    ("no-dir-sync", "I3"),
    ("attested-damage-as-torn", "I4"),
    ("append-blocks-on-sync", "I5"),
    ("no-fence-on-sync-error", "I6"),
    ("stale-epoch-accepted", "I7"),
    ("no-divergence-fence", "I8"),
    ("rename-skips-name-check", "I9"),
    ("version-not-advanced", "I9"),
];

/// The mutant this build carries: `WAL_MUTANT` at build time, or empty.
pub const ACTIVE: &str = match option_env!("WAL_MUTANT") {
    Some(m) => m,
    None => "",
};

/// Whether this build carries the mutant `name` (one of [`ALL`]).
pub const fn on(name: &str) -> bool {
    eq(ACTIVE, name)
}

const fn eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn known(name: &str) -> bool {
    let mut i = 0;
    while i < ALL.len() {
        if eq(ALL[i].0, name) {
            return true;
        }
        i += 1;
    }
    false
}

const _: () =
    assert!(ACTIVE.is_empty() || known(ACTIVE), "WAL_MUTANT names no mutant of wal_format::mutants::ALL");
const _: () = assert!(
    ACTIVE.is_empty() || cfg!(debug_assertions),
    "WAL_MUTANT is set in a build without debug assertions: mutants exist only for tools/mutants.sh"
);

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_told_apart_exactly() {
        assert!(super::eq("ack-before-sync", "ack-before-sync"));
        assert!(!super::eq("ack-before-sync", "ack-before-write"));
        assert!(!super::eq("ack-before", "ack-before-sync"));
        assert!(super::known("no-dir-sync") && !super::known("no-dir"));
        // An ordinary build carries none.
        if option_env!("WAL_MUTANT").is_none() {
            assert!(super::ALL.iter().all(|(m, _)| !super::on(m)));
        }
    }

    /// tools/mutants.sh runs every mutant there is, under its invariant, and no other.
    #[test]
    fn the_script_runs_every_mutant() {
        let script = include_str!("../../../tools/mutants.sh");
        let rows: Vec<(&str, &str)> = script
            .lines()
            .filter_map(|l| l.trim().strip_prefix("\"mutant-"))
            .filter_map(|l| {
                let mut cells = l.split('|');
                let (_, inv, mutant) = (cells.next()?, cells.next()?, cells.next()?);
                Some((mutant, inv))
            })
            .collect();
        assert_eq!(rows, super::ALL, "tools/mutants.sh's TABLE and mutants::ALL differ");
    }
}
