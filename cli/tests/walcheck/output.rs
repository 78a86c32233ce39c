//! Output an operator can trust (issue 22): no raw control bytes from a log on the terminal,
//! failed writes to standard output reported, a missing path named as missing, replica
//! comparisons that count what matched, `stat --json` with the verdict, exit codes in `--help`.

use crate::common::{fixture, walcheck};
use std::process::{Command, Stdio};
use wal::{Epoch, Options, Wal};

#[test]
fn dump_text_escapes_control_bytes_one_record_per_line() {
    let d = tempfile::tempdir().unwrap();
    let (mut log, _) =
        Wal::open(d.path(), Options { segment_len_bytes: 64 * 1024, ..Options::default() }).unwrap();
    log.append(Epoch(0), b"a\x1b[2Jb\0c\nd\re\\f\xff\x7f").unwrap();
    log.append(Epoch(0), b"plain text").unwrap();
    log.close().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_walcheck"))
        .args(["dump", "--payload", "text", d.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = o.stdout;
    assert!(
        out.iter().all(|&b| b == b'\n' || (0x20..0x7f).contains(&b)),
        "only printable ASCII and line ends: {:?}",
        String::from_utf8_lossy(&out)
    );
    let text = String::from_utf8(out).unwrap();
    let st = wal::storage::FileStorage::new(d.path(), false).unwrap();
    let mut records = 0;
    wal::scan_log_with(&st, wal::Depth::Full, &mut |_, _| records += 1).unwrap();
    assert_eq!(text.lines().count(), records, "one record per line: {text}");
    assert!(text.contains(r"a\x1b[2Jb\x00c\nd\re\\f\xff\x7f"), "{text}");
    assert!(text.contains("plain text"), "{text}");
}

#[test]
fn a_failed_write_to_stdout_is_reported_and_not_exit_0() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_walcheck"))
        .args(["verify", "--json", &fixture("clean")])
        .stdout(Stdio::from(full))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("standard output"), "{err}");
}

#[test]
fn a_missing_path_says_it_does_not_exist() {
    let (code, _, err) = walcheck(&["verify", "/definitely/not/here"]);
    assert_eq!(code, 64);
    assert!(err.contains("does not exist"), "{err}");
    let (code, _, err) = walcheck(&["verify", &fixture("clean"), "--state", "/definitely/not/here.snap"]);
    assert_eq!(code, 64);
    assert!(err.contains("does not exist"), "{err}");
    let f = tempfile::NamedTempFile::new().unwrap();
    let (code, _, err) = walcheck(&["verify", f.path().to_str().unwrap()]);
    assert_eq!(code, 64);
    assert!(err.contains("not a directory"), "{err}");
}

#[test]
fn compare_divergent_counts_the_entries_that_matched() {
    let (code, out, _) = walcheck(&["compare", &fixture("replicas-differ/a"), &fixture("replicas-differ/b")]);
    assert_eq!(code, 4, "{out}");
    // The replicas differ at LSN 47: LSN 1..=46 matched.
    assert!(out.contains("46 entries compared"), "{out}");
    let (_, out, _) =
        walcheck(&["compare", "--json", &fixture("replicas-differ/a"), &fixture("replicas-differ/b")]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["entries_compared"], 46, "{j}");
}

#[test]
fn stat_json_has_the_verdict_and_the_damage() {
    let (code, out, _) = walcheck(&["stat", "--json", &fixture("bitflip-attested")]);
    assert_eq!(code, 3);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["crc"], "CORRUPT", "{j}");
    assert_eq!(j["exit_code"], 3, "{j}");
    assert_eq!(j["damage"]["segment"], 2, "{j}");
    assert_eq!(j["damage"]["lsn"], 46, "{j}");
    assert!(j["entries"].as_u64().is_some(), "the statistics stay at the top level: {j}");
}

#[test]
fn help_lists_the_exit_codes() {
    let (code, out, _) = walcheck(&["--help"]);
    assert_eq!(code, 0);
    for want in [
        "0 ",
        "TORN_TAIL",
        "CORRUPT_TAIL",
        "DIVERGENT",
        "IO_ERROR",
        "UNSUPPORTED_VERSION",
        "INCOMPLETE_CREATE",
        "64",
    ] {
        assert!(out.contains(want), "--help lacks {want}: {out}");
    }
}
