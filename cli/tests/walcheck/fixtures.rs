//! The `walcheck` binary on every committed fixture check (`fixtures/manifest.json`), run as an
//! operator runs it (from the workspace root, with the manifest's arguments) plus `--json`:
//! verdict words, exit code and where (verified LSN, divergence window, differing entity,
//! differing replica LSN) as the fixture generator recorded them.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

#[path = "../../../wal/tests/common/hostile.rs"]
mod hostile;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifest() -> Value {
    let p = workspace().join("fixtures/manifest.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    let m: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // The FIFOs a fixture holds are made at test time: git cannot hold one.
    for f in m["fixtures"].as_array().into_iter().flatten() {
        for rel in f["fifos"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            let at = workspace().join(rel);
            if std::fs::symlink_metadata(&at).is_err() {
                hostile::mkfifo_once(&at);
            }
        }
    }
    m
}

/// The number right after the first `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What one `walcheck <args> --json` run gave, in the manifest's terms.
fn observe(args: &[String]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_walcheck"))
        .current_dir(workspace())
        .args(args)
        .arg("--json")
        .output()
        .unwrap_or_else(|e| panic!("running walcheck: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let j: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("`walcheck {}` printed no JSON ({e}): {stdout}", args.join(" ")));
    let code = out.status.code().unwrap_or(-1);
    let mut got = serde_json::json!({ "exit_code": code });
    if args[0] == "verify" {
        let d = &j["state_detail"];
        got["crc"] = j["crc"].clone();
        got["state"] = j["state"].clone();
        got["json_exit_code"] = j["exit_code"].clone();
        got["verified_through"] =
            if j["state"] == "CLEAN" { d["verified_through"].clone() } else { Value::Null };
        got["divergence"] = match &d["divergence"] {
            Value::Null => Value::Null,
            w => serde_json::json!({ "last_good": w["last_good"], "lsn": w["lsn"] }),
        };
        got["entity"] = d["state"]["differences"][0].as_str().and_then(|s| number_after(s, "entity ")).into();
        got["replica_lsn"] = Value::Null;
    } else {
        let crcs: Vec<&str> =
            j["replicas"].as_array().into_iter().flatten().filter_map(|r| r["crc"].as_str()).collect();
        let all_same = crcs.windows(2).all(|w| w[0] == w[1]);
        got["crc"] = if all_same { crcs.first().copied().unwrap_or("-").into() } else { "mixed".into() };
        got["state"] = j["verdict"].clone();
        got["json_exit_code"] = code.into();
        got["verified_through"] = Value::Null;
        got["divergence"] = Value::Null;
        got["entity"] = Value::Null;
        got["replica_lsn"] = j["reason"].as_str().and_then(|s| number_after(s, "at LSN ")).into();
    }
    (got, stdout)
}

#[test]
fn walcheck_json_gives_every_fixture_check_its_verdicts_and_where() {
    let m = manifest();
    let fixtures = m["fixtures"].as_array().unwrap_or_else(|| panic!("the manifest lists no fixture"));
    let mut failures = Vec::new();
    let mut runs = 0;
    for f in fixtures {
        for c in f["checks"].as_array().into_iter().flatten() {
            let args: Vec<String> = c["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(String::from))
                .collect();
            let want = serde_json::json!({
                "exit_code": c["exit_code"],
                "json_exit_code": c["exit_code"],
                "crc": f["crc"],
                "state": c["state"],
                "verified_through": c["verified_through"],
                "divergence": c["divergence"],
                "entity": c["entity"],
                "replica_lsn": c["replica_lsn"],
            });
            let (got, stdout) = observe(&args);
            runs += 1;
            if got != want {
                failures.push(format!(
                    "`walcheck {} --json`\n  expected {want}\n  got      {got}\n  output   {stdout}",
                    args.join(" ")
                ));
            }
        }
    }
    assert!(runs >= 17, "only {runs} checks in the manifest");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
