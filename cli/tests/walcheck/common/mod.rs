//! What the issue-22 test files share: running the binary, finding a committed fixture.

use std::path::Path;
use std::process::Command;

/// Runs the walcheck binary: (exit code, stdout, stderr).
pub fn walcheck(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_walcheck")).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// The path of a committed fixture log.
pub fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/logs").join(name).to_str().unwrap().to_string()
}
