//! The documents cannot drift from what they describe (issue 25):
//!
//! - the README's quick start is `wal/examples/quickstart.rs`, which CI runs, and every other
//!   Rust block of the repository's Markdown is compiled and run as a doctest (`cli/src/lib.rs`);
//! - the output the README shows for the set-up's first command is what that command prints;
//! - every `cargo` command in a shell block names a package, target and feature that exist;
//! - every number in the README's test figures comes from the committed summary it cites, and
//!   its verdict table gives walcheck's exit codes; the fault sweep's figures in docs/testing.md
//!   are the committed long sweep's, and its counts of fixtures and fuzz inputs are the
//!   committed files'.
//!
//! The README's performance table is held to its committed results file by a test of
//! `benches/compare` (`readme_performance_rows_come_from_the_committed_run`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The Markdown files of the repository (build output, version control and the fuzz corpus
/// skipped), relative to the root.
fn markdown_files() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            let name = e.file_name();
            if kind.is_dir() {
                if name != "target" && name != ".git" {
                    walk(&path, root, out);
                }
            } else if kind.is_file() && path.extension().is_some_and(|x| x == "md") {
                out.push(path.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &root(), &mut out);
    out.sort();
    out
}

/// The fenced code blocks of `text`: (the info string, the body).
fn code_blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The code spans of `text` outside fenced blocks (a span may wrap to the next line).
fn code_spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose.split('`').skip(1).step_by(2).map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// The text between `<!-- name -->` and `<!-- /name -->`.
fn marked<'a>(text: &'a str, name: &str) -> &'a str {
    let open = format!("<!-- {name} -->");
    let close = format!("<!-- /{name} -->");
    let start = text.find(&open).unwrap_or_else(|| panic!("no {open} marker")) + open.len();
    let end = text[start..].find(&close).unwrap_or_else(|| panic!("no {close} marker")) + start;
    &text[start..end]
}

/// `n` with thousands separated by commas, as the documents write counts.
fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The numbers written in `text` (digits and commas, not part of a word such as `ext4` or an
/// invariant's name), without their commas.
fn numbers_in(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-')) {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_digit() || (b[i] == b',' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
            {
                i += 1;
            }
            if !b.get(i).is_some_and(|c| c.is_ascii_alphabetic()) {
                out.push(text[start..i].replace(',', ""));
            }
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_readme_quick_start_is_the_example_ci_runs() {
    let readme = read("README.md");
    let rust: Vec<_> = code_blocks(&readme).into_iter().filter(|(info, _)| info == "rust").collect();
    assert_eq!(rust.len(), 1, "the README has one Rust block, the quick start");
    let example = read("wal/examples/quickstart.rs");
    assert_eq!(rust[0].1, example, "the README's quick start differs from wal/examples/quickstart.rs");
    // The crate's documentation opens with the same file.
    assert!(read("wal/src/lib.rs").contains("include_str!(\"../examples/quickstart.rs\")"));
}

#[test]
fn every_rust_block_in_the_markdown_is_compiled() {
    let lib = read("cli/src/lib.rs");
    let mut compiled = 0;
    for file in markdown_files() {
        let blocks = code_blocks(&read(&file));
        let rust = blocks.iter().filter(|(info, _)| info.split(',').next() == Some("rust")).count();
        if rust == 0 || file == "README.md" {
            continue;
        }
        let include = format!("#[doc = include_str!(\"../../{file}\")]");
        assert!(
            lib.contains(&include),
            "{file} has {rust} Rust block(s) that nothing compiles: add `{include}` under cfg(doctest) in cli/src/lib.rs"
        );
        for (info, _) in &blocks {
            assert!(!info.is_empty(), "{file}: a block without a language would be compiled as Rust");
            assert!(
                !info.contains("ignore") && !info.contains("no_run"),
                "{file}: a `{info}` block is not run"
            );
        }
        compiled += rust;
    }
    assert!(compiled >= 2, "the documents' Rust blocks were not found ({compiled})");
}

#[test]
fn the_readme_shows_what_the_set_up_command_prints() {
    let readme = read("README.md");
    let setup = &readme[readme.find("## Set-up").expect("a Set-up section")..];
    let blocks = code_blocks(setup);
    let (info, commands) = &blocks[0];
    assert_eq!(info, "sh");
    let first = commands.lines().next().unwrap();
    assert!(first.starts_with("cargo run -q -p walcheck -- verify fixtures/logs/torn-tail"), "{first}");
    let (info, shown) = &blocks[1];
    assert_eq!(info, "text", "the output block follows the commands");
    let out = Command::new(env!("CARGO_BIN_EXE_walcheck"))
        .args(["verify", "fixtures/logs/torn-tail"])
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "the README says it exits 1 (TORN_TAIL)");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        *shown,
        "the README's output block is not what verify prints"
    );
}

/// `cargo metadata` of the workspace, and of the comparison crate (excluded from it): package
/// name -> (targets by kind, features).
type Packages = BTreeMap<String, (BTreeSet<(String, String)>, BTreeSet<String>)>;

fn packages() -> Packages {
    let mut out = Packages::new();
    for manifest in ["Cargo.toml", "benches/compare/Cargo.toml"] {
        let o = Command::new(env!("CARGO"))
            .args([
                "metadata",
                "--no-deps",
                "--offline",
                "--format-version",
                "1",
                "--manifest-path",
                manifest,
            ])
            .current_dir(root())
            .output()
            .unwrap();
        assert!(o.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for p in v["packages"].as_array().unwrap() {
            let targets = p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|t| {
                    let name = t["name"].as_str().unwrap().to_string();
                    t["kind"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(move |k| (k.as_str().unwrap().to_string(), name.clone()))
                })
                .collect();
            let features = p["features"].as_object().unwrap().keys().cloned().collect();
            out.insert(p["name"].as_str().unwrap().to_string(), (targets, features));
        }
    }
    out
}

/// What is wrong with one `cargo ...` command line, if anything.
fn command_problems(line: &str, pkgs: &Packages) -> Vec<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some(at) = words.iter().position(|w| *w == "cargo") else { return vec![] };
    let args: Vec<&str> =
        words[at + 1..].iter().take_while(|w| **w != "--" && !w.starts_with('#')).copied().collect();
    let Some(sub) = args.iter().find(|a| !a.starts_with('+') && !a.starts_with('-')) else { return vec![] };
    if !["run", "test", "bench", "build", "check", "clippy", "doc"].contains(sub) {
        return vec![];
    }
    let mut problems = Vec::new();
    let value = |flag: &str| args.iter().position(|a| *a == flag).and_then(|i| args.get(i + 1)).copied();
    let package = match (value("-p").or(value("--package")), value("--manifest-path")) {
        (Some(p), _) => Some(p.to_string()),
        (None, Some("benches/compare/Cargo.toml")) => Some("wal-compare".to_string()),
        (None, Some(m)) => {
            problems.push(format!("--manifest-path {m}: not a manifest this test knows"));
            None
        }
        (None, None) => None,
    };
    let Some(package) = package else { return problems };
    let Some((targets, features)) = pkgs.get(&package) else {
        return vec![format!("no package {package:?}")];
    };
    for (flag, kind) in [("--example", "example"), ("--bin", "bin"), ("--test", "test"), ("--bench", "bench")]
    {
        if let Some(name) = value(flag) {
            if name != "'*'" && !targets.contains(&(kind.to_string(), name.to_string())) {
                problems.push(format!("{package} has no {kind} target {name:?}"));
            }
        }
    }
    if let Some(list) = value("--features") {
        for f in list.split(',') {
            let f = f.strip_prefix(&format!("{package}/")).unwrap_or(f);
            if !f.starts_with('<') && !features.contains(f) {
                problems.push(format!("{package} has no feature {f:?}"));
            }
        }
    }
    problems
}

#[test]
fn every_cargo_command_in_the_documents_names_what_exists() {
    let pkgs = packages();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        if file.starts_with("fuzz/") {
            continue; // the fuzz crate is outside the workspace and needs a nightly toolchain
        }
        let text = read(&file);
        let mut lines: Vec<String> = code_blocks(&text)
            .into_iter()
            .filter(|(info, _)| matches!(info.as_str(), "sh" | "bash" | "console"))
            .flat_map(|(_, body)| body.lines().map(str::to_string).collect::<Vec<_>>())
            .collect();
        // Commands quoted in the prose too, as code spans.
        lines.extend(code_spans(&text).into_iter().filter(|s| s.starts_with("cargo ")));
        for line in lines.iter().filter(|l| l.contains("cargo ")) {
            checked += 1;
            problems
                .extend(command_problems(line, &pkgs).into_iter().map(|p| format!("{file}: `{line}`: {p}")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 20, "only {checked} cargo commands found");
    // The check finds what it is for.
    let wrong = [
        "cargo run -p wal --example no_such_example",
        "cargo test -p nope --test x",
        "cargo bench -p wal-benches --bench missing",
        "cargo test -p wal --features mutant-nonexistent --test engine",
    ];
    for line in wrong {
        assert_eq!(command_problems(line, &pkgs).len(), 1, "{line}");
    }
    assert!(command_problems("cargo run -p walcheck -- verify x --example y", &pkgs).is_empty());
}

#[test]
fn the_readme_test_figures_come_from_their_committed_summaries() {
    let readme = read("README.md");
    let block = marked(&readme, "readme-figures").split_whitespace().collect::<Vec<_>>().join(" ");
    let json = |rel: &str| -> serde_json::Value { serde_json::from_str(&read(rel)).unwrap() };
    let num = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));

    let sweep = json("reliability/sweep-summary.json");
    let cases = num(&sweep["cases_total"]);
    let lost = num(&sweep["entries_lost"]);
    let mut want = vec![format!("{} cases in the last long run, {lost} entries lost", commas(cases))];

    let power = json("reliability/powerloss-summary.json");
    let runs = power["runs"].as_array().unwrap();
    let images: u64 = runs.iter().map(|r| num(&r["images"])).sum();
    let losses: u64 = runs.iter().map(|r| num(&r["losses"])).sum();
    want.push(format!("{} images in the last long run, {losses} lost", commas(images)));

    let campaign: BTreeMap<&str, &str> =
        read_static("docs/campaign-summary.txt").lines().filter_map(|l| l.split_once(": ")).collect();
    let faults: u64 = campaign["faults.total"].parse().unwrap();
    let minutes = campaign["duration_s"].parse::<u64>().unwrap() / 60;
    let committed: u64 = campaign["writes.committed"].parse().unwrap();
    assert_eq!(campaign["verdict"], "PASS");
    assert_eq!(campaign["checks.creates_lost"], "0");
    want.push(format!(
        "{faults} faults (kills, pauses, partitions) in {minutes} minutes, {} writes committed, none lost",
        commas(committed)
    ));

    let mutants = read("tools/mutants.sh").lines().filter(|l| l.starts_with("  \"mutant-")).count() as u64;
    want.push(format!("{mutants} deliberate breaks of the invariants"));
    let fixtures = json("fixtures/manifest.json")["fixtures"].as_array().unwrap().len() as u64;
    want.push(format!("{fixtures} shipped fixtures"));

    for w in &want {
        assert!(block.contains(w.as_str()), "the README's test figures lack `{w}`:\n{block}");
    }
    // And no number there that is not one of these.
    let allowed: BTreeSet<String> =
        [cases, lost, images, losses, faults, minutes, committed, mutants, fixtures]
            .iter()
            .map(u64::to_string)
            .collect();
    let stray: Vec<_> =
        numbers_in(&block.replace("kill -9", "")).into_iter().filter(|n| !allowed.contains(n)).collect();
    assert!(stray.is_empty(), "numbers in the README's test figures that no summary holds: {stray:?}");
}

#[test]
fn docs_report_the_committed_long_sweep_summary() {
    let json: serde_json::Value = serde_json::from_str(&read("reliability/sweep-summary.json")).unwrap();
    let page = read("docs/testing.md");
    let section = marked(&page, "sweep-summary");
    let num = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    // Every figure docs/testing.md gives, as the JSON has it.
    let mut want = vec![
        ("cases", num(&json["cases_total"])),
        ("acknowledged entries checked", num(&json["acknowledged_entries_checked"])),
        ("entries lost", num(&json["entries_lost"])),
        ("seeds", num(&json["seeds"]["count"])),
    ];
    for (class, n) in json["cases_by_class"].as_object().unwrap() {
        want.push((class.as_str(), num(n)));
    }
    for (k, n) in json["faults_injected"].as_object().unwrap() {
        want.push((k.as_str(), num(n)));
    }
    for (what, n) in want {
        let line = format!("| {what} | {} |", commas(n));
        assert!(section.contains(&line), "docs/testing.md's sweep section lacks `{line}`");
    }
    assert!(section.contains(json["git_commit"].as_str().unwrap()), "docs/testing.md names another commit");
    assert_eq!(num(&json["entries_lost"]), 0);
}

/// The counts docs/testing.md gives of committed files: the fixtures `fixtures/tests/` checks and
/// the fuzz corpus `wal/tests/fuzz_corpus.rs` replays.
#[test]
fn docs_count_the_committed_fixtures_and_fuzz_corpus() {
    let page = read("docs/testing.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let manifest: serde_json::Value = serde_json::from_str(&read("fixtures/manifest.json")).unwrap();
    let fixtures = manifest["fixtures"].as_array().unwrap().len() as u64;
    // Every input of every target's corpus, as fuzz_corpus.rs reads them: regular files, dot
    // files and notes skipped.
    let mut inputs = 0u64;
    for target in std::fs::read_dir(root().join("fuzz/corpus")).unwrap() {
        let target = target.unwrap();
        if !target.file_type().unwrap().is_dir() {
            continue;
        }
        for e in std::fs::read_dir(target.path()).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_file() && !name.starts_with('.') && !name.ends_with(".md") {
                inputs += 1;
            }
        }
    }
    assert!(fixtures > 0 && inputs > 0);
    for line in [
        format!("each of the {fixtures} committed fixtures"),
        format!("the committed corpus ({} inputs)", commas(inputs)),
    ] {
        assert!(page.contains(&line), "docs/testing.md lacks `{line}`");
    }
}

#[test]
fn the_readme_states_the_defaults_and_the_rust_version_the_code_has() {
    let readme = read("README.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let opts = wal::Options::default();
    let segment_mib = u64::from(opts.segment_len_bytes) >> 20;
    // The active segment and the spare prepared in the background for the next one.
    assert!(opts.prepare_in_background);
    let line =
        format!("a new log takes {} MiB on disk (a {segment_mib} MiB segment and the spare", 2 * segment_mib);
    assert!(readme.contains(&line), "the README lacks `{line}`");
    let manifest = read("Cargo.toml");
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace's rust-version")
        .trim_matches('"');
    assert!(
        readme.contains(&format!("the `rust-version` is {version}")),
        "the README gives another rust-version"
    );
}

/// The synopsis lines (`walcheck <command> ...`) of the README and walcheck's manual name
/// commands and options that `walcheck <command> --help` lists, and `--payload`'s values are the
/// ones it accepts.
#[test]
fn the_walcheck_synopses_match_its_help() {
    let mut checked = 0;
    for file in ["README.md", "cli/README.md"] {
        for (_, body) in code_blocks(&read(file)) {
            for line in body.lines().filter(|l| l.starts_with("walcheck ")) {
                let sub = line.split_whitespace().nth(1).unwrap();
                let help =
                    Command::new(env!("CARGO_BIN_EXE_walcheck")).args([sub, "--help"]).output().unwrap();
                assert!(help.status.success(), "{file}: `walcheck {sub}` is not a command");
                let help = String::from_utf8(help.stdout).unwrap();
                for flag in line
                    .split(|c: char| c.is_whitespace() || c == '[' || c == ']')
                    .filter(|w| w.starts_with("--"))
                {
                    assert!(help.contains(flag), "{file}: `walcheck {sub} --help` does not list {flag}");
                }
                if let Some(values) = line.split("--payload ").nth(1).and_then(|r| r.split(']').next()) {
                    for v in values.split('|') {
                        assert!(help.contains(v), "{file}: --payload {v} is not in the help");
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} synopsis lines");
}

fn read_static(rel: &str) -> &'static str {
    Box::leak(read(rel).into_boxed_str())
}

#[test]
fn the_readme_verdict_table_gives_walchecks_exit_codes() {
    let readme = read("README.md");
    let table = &readme[readme.find("| verdict | meaning | exit |").expect("the verdict table")..];
    let mut rows = 0;
    for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (verdict, code) = (cells[1], cells[3]);
        let word = if verdict == "usage error" { "usage" } else { verdict };
        let label = format!("{word}:");
        let listed = walcheck::EXIT_CODES.lines().any(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some(code) && w.next() == Some(label.as_str())
        });
        assert!(listed, "README: {verdict} exits {code}, which walcheck's EXIT_CODES does not say");
        rows += 1;
    }
    let codes =
        walcheck::EXIT_CODES.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()));
    assert_eq!(rows, codes.count(), "every exit code has a row");
}
