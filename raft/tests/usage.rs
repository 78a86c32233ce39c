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
