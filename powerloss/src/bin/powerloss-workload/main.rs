//! The workloads run on the recorded file system, and their checkers (see `powerloss/README.md`).

fn main() {}
