//! What a controller sees at the root of `wal` (default features, so without the workspace's
//! `internal` feature): read from `wal/src/lib.rs`, every name a root `pub` item or `pub use`
//! makes that no `#[cfg(feature = "internal")]` gates. The list below is the public surface
//! ARCHITECTURE.md describes; a name added or removed must be added or removed here, on
//! purpose, and the root stays at most 40 items.

use std::path::Path;

/// The root's names without `internal` (`prometheus` only with its own feature).
const ROOT: &[&str] = &[
    // Positions and levels.
    "Lsn",
    "Epoch",
    "Durability",
    // Errors and verdicts.
    "CrcVerdict",
    "Damage",
    "DamageKind",
    "Error",
    "Result",
    // The writer thread.
    "AsyncOptions",
    "AsyncWal",
    "IntoPayload",
    "Payload",
    "WhenFull",
    // The log handle and its options and reports.
    "Backend",
    "Checkpoint",
    "OpenCheck",
    "OpenReport",
    "Options",
    "PurgeReport",
    "SegmentFill",
    "Wal",
    "RecoveryMode",
    // Counters.
    "Histogram",
    "Stats",
    // Replay.
    "Entries",
    "Item",
    "ItemKind",
    "Replay",
    // Acknowledgements.
    "Ack",
    "Completion",
    "DurableFuture",
    "Failure",
    "Notify",
    "Resolver",
    "Stage",
    "Ticket",
    // Modules: the storage seam's two sides for files kept beside the log; the metrics
    // exposition (feature `prometheus`).
    "seam",
    "prometheus",
];

/// The names the root of `src` (a `lib.rs`) makes public, skipping items gated on `internal`.
fn root_names(lib: &str) -> Vec<String> {
    let mut names = Vec::new();
    let (mut depth, mut gated) = (0usize, false);
    let mut lines = lib.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if depth == 0 && t.starts_with("#[cfg(feature = \"internal\")]") {
            gated = true;
            continue;
        }
        if t.starts_with("#[") || t.starts_with("//") || t.is_empty() {
            depth += t.matches('{').count();
            depth -= t.matches('}').count().min(depth);
            continue;
        }
        if depth == 0 && t.starts_with("pub ") && !t.starts_with("pub(") {
            // The whole item head: a `use` up to its `;`, anything else up to its `;` or `{`.
            let mut head = t.to_string();
            let is_use = t.starts_with("pub use ");
            while !head.contains(';') && (is_use || !head.contains('{')) {
                let Some(next) = lines.next() else { break };
                head.push(' ');
                head.push_str(next.trim());
            }
            if !gated {
                names.extend(item_names(&head));
            }
            gated = false;
            if !is_use {
                depth += head.matches('{').count();
                depth -= head.matches('}').count().min(depth);
            }
            continue;
        }
        gated = false;
        depth += t.matches('{').count();
        depth -= t.matches('}').count().min(depth);
    }
    names
}

/// The names one root item head declares: `pub use a::{B, C};` gives B and C, `pub struct X`
/// gives X.
fn item_names(head: &str) -> Vec<String> {
    if let Some(path) = head.strip_prefix("pub use ") {
        let path = path.split(';').next().unwrap_or(path);
        let list = match path.split_once('{') {
            Some((_, inner)) => inner.replace('}', ""),
            None => path.rsplit("::").next().unwrap_or(path).to_string(),
        };
        return list
            .split(',')
            .map(|n| n.trim().rsplit(" as ").next().unwrap_or("").trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
    }
    let head = head.split(['{', ';']).next().unwrap_or(head);
    let words: Vec<&str> = head.split_whitespace().collect();
    // The item's keyword: `const fn x` and `unsafe fn x` are functions named x.
    let kw = ["struct", "enum", "mod", "fn", "trait", "type", "const", "static"];
    let name = (0..words.len()).find(|&i| kw.contains(&words[i]) && words.get(i + 1) != Some(&"fn"));
    name.and_then(|i| words.get(i + 1))
        .map(|n| vec![n.split(['<', '(', ':']).next().unwrap_or(n).to_string()])
        .unwrap_or_default()
}

#[test]
fn the_root_without_internal_is_the_listed_surface_of_at_most_40_items() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let mut got = root_names(&lib);
    got.sort();
    let mut want: Vec<String> = ROOT.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want, "the root's public names (left) against the documented surface (right)");
    assert!(got.len() <= 40, "{} root items", got.len());
    // What `seam` re-exports: the storage seam's read and write sides, nothing more.
    let seam = &lib[lib.find("pub mod seam {").expect("a seam module")..];
    let seam = &seam[..seam.find('}').unwrap_or(seam.len())];
    let mut names = item_names(seam.lines().find(|l| l.trim().starts_with("pub use")).unwrap_or("").trim());
    names.sort();
    assert_eq!(names, ["FileId", "FileStorage", "LockGuard", "Mapping", "Reader", "Writer", "write_all_at"]);
    // No macro reaches the root without `internal`.
    for f in walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let src = std::fs::read_to_string(&f).unwrap();
        for (i, line) in src.lines().enumerate() {
            if line.contains("macro_export") {
                assert!(
                    line.contains("cfg_attr(feature = \"internal\", macro_export)"),
                    "{}:{}: a macro exported without `internal`",
                    f.display(),
                    i + 1
                );
            }
        }
    }
}

/// The reader itself: an ungated item counts, a gated one does not, a `pub use` list gives
/// each name, a module's body is not the root.
#[test]
fn the_reader_counts_what_it_must() {
    let lib = "pub use a::{B, C as D};\n#[cfg(feature = \"internal\")]\n#[doc(hidden)]\npub mod hidden;\n\
               pub mod seam {\n    pub use x::Inner;\n}\npub struct S(pub u64);\npub(crate) fn f() {}\n\
               pub use e::{\n    F,\n    G,\n};\n";
    assert_eq!(root_names(lib), ["B", "D", "seam", "S", "F", "G"]);
    assert_eq!(item_names("pub const fn f() -> u8 {"), ["f"]);
    assert_eq!(item_names("pub const MAX: u32 = 1;"), ["MAX"]);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}
