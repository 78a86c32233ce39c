//! `walraft-node`'s usage errors exit 64: clap's default, 2, is also what `client` answers for a
//! write the cluster rejected, so a script could not tell a typo from a refused write (issue 22).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_walraft-node");

fn code(args: &[&str]) -> Option<i32> {
    Command::new(BIN).args(args).output().unwrap().status.code()
}

#[test]
fn usage_errors_do_not_reuse_a_documented_code() {
    // No --node, an unknown operation, a missing subcommand: usage errors, never 2 (REJECTED).
    assert_eq!(code(&["client", "create"]), Some(64));
    assert_eq!(code(&["client", "--node", "127.0.0.1:1", "frobnicate"]), Some(64));
    assert_eq!(code(&["client", "--node", "127.0.0.1:1"]), Some(64));
    assert_eq!(code(&["frobnicate"]), Some(64));
    assert_eq!(code(&["--help"]), Some(0));
}

/// Each option's default as `walraft-node SUB --help` prints it (`[default: N]`), by flag name.
fn defaults(sub: &str) -> Vec<(String, String)> {
    let out = Command::new(BIN).args([sub, "--help"]).output().unwrap();
    assert!(out.status.success(), "{sub} --help: {out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let mut flag: Option<String> = None;
    let mut found = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--").or_else(|| t.split_once(", --").map(|(_, r)| r)) {
            flag = Some(rest.split([' ', ',']).next().unwrap().to_string());
        }
        if let (Some(f), Some((_, d))) = (&flag, line.split_once("[default: ")) {
            found.push((f.clone(), d.trim_end_matches(']').to_string()));
        }
    }
    found
}

/// The defaults docs/running-a-cluster.md gives, `` `--flag` (N `` (and
/// `` `--a`/`--b` (N/M ``), are the binary's; `--max-frame-bytes` is given as 64 MiB.
#[test]
fn the_cluster_guide_states_the_defaults_the_binary_has() {
    let mut have = defaults("run");
    have.extend(defaults("client"));
    let default = |f: &str| -> String {
        let all: Vec<&String> = have.iter().filter(|(k, _)| k == f).map(|(_, v)| v).collect();
        assert!(!all.is_empty(), "walraft-node has no default for --{f}: {have:?}");
        assert!(all.iter().all(|v| *v == all[0]), "--{f} has two defaults: {all:?}");
        all[0].clone()
    };
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/running-a-cluster.md");
    let doc = std::fs::read_to_string(path).unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    let mut checked = 0;
    for (i, _) in doc.match_indices("`--") {
        // `--a` (N or `--a`/`--b` (N/M: the names, then the numbers after " (".
        let mut names = Vec::new();
        let mut rest = &doc[i..];
        while let Some(r) = rest.strip_prefix("`--") {
            let (name, after) = r.split_once('`').unwrap();
            names.push(name);
            rest = after.strip_prefix('/').unwrap_or(after);
        }
        let Some(r) = rest.strip_prefix(" (") else { continue };
        let quoted: Vec<&str> =
            r.split(|c: char| !c.is_ascii_digit() && c != '/').next().unwrap().split('/').collect();
        if quoted.len() != names.len() || quoted.iter().any(|q| q.is_empty()) {
            continue;
        }
        for (name, q) in names.iter().zip(quoted) {
            assert_eq!(default(name), q, "docs/running-a-cluster.md gives --{name} ({q})");
            checked += 1;
        }
    }
    // The nine flags the guide lists with a number: client and run.
    assert_eq!(checked, 9, "docs/running-a-cluster.md: defaults found");
    assert_eq!(default("max-frame-bytes"), (64 << 20).to_string());
    assert!(doc.contains("`--max-frame-bytes` (the cluster's, to refuse a write too large for it without sending it; 64 MiB by default)"));
}
