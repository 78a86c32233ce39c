//! `walcheck`: the logic is `walcheck::run`, which returns the exit code.
fn main() {
    std::process::exit(walcheck::run(std::env::args_os()));
}
