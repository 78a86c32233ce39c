//! A controller with its own state machine builds its own `walcheck` in a few lines: here a
//! state machine of named counters (`add <name> <n>`), verified by replay through its own
//! apply function.
//!
//! ```sh
//! cargo run -p walcheck --example counter_walcheck -- demo            # writes a log, verifies it
//! cargo run -p walcheck --example counter_walcheck -- verify <DIR>    # any walcheck command
//! ```

use std::collections::BTreeMap;
use verifier::state::StateMachineSpec;
use wal_state::{Committed, Outcome, SetDigest, StateMachine};

/// Named counters. The canonical entity form is `name \0 value` (decimal).
#[derive(Debug, Default)]
struct Counters {
    values: BTreeMap<String, i64>,
    digest: SetDigest,
}

fn canon(name: &str, v: i64) -> Vec<u8> {
    format!("{name}\0{v}").into_bytes()
}

impl StateMachine for Counters {
    const VERSION: u32 = 1;

    fn apply(&mut self, e: &Committed<'_>) -> Outcome {
        let text = String::from_utf8_lossy(e.body);
        let mut w = text.split(' ');
        let (Some("add"), Some(name), Some(Ok(n))) = (w.next(), w.next(), w.next().map(str::parse::<i64>))
        else {
            return Outcome::Refused(format!("not a counter command: {text}"));
        };
        let old = self.values.get(name).copied();
        let Some(new) = old.unwrap_or(0).checked_add(n) else {
            return Outcome::Refused(format!("{name} would overflow"));
        };
        if let Some(o) = old {
            self.digest.remove(&canon(name, o));
        }
        self.digest.insert(&canon(name, new));
        self.values.insert(name.to_string(), new);
        Outcome::Done(new.to_string().into_bytes())
    }

    fn digest(&self) -> SetDigest {
        self.digest
    }

    fn export(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for (k, v) in &self.values {
            writeln!(out, "{k} {v}")?;
        }
        Ok(())
    }

    fn import(input: &[u8]) -> Result<Self, String> {
        let mut c = Counters::default();
        for line in std::str::from_utf8(input).map_err(|e| e.to_string())?.lines() {
            let (k, v) = line.split_once(' ').ok_or("a line without a value")?;
            let v: i64 = v.parse().map_err(|e| format!("{k}: {e}"))?;
            c.digest.insert(&canon(k, v));
            c.values.insert(k.to_string(), v);
        }
        Ok(c)
    }
}

/// How two counter states differ, for `verify --state`.
fn diff(a: &Counters, b: &Counters, limit: usize) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a.values.keys().chain(b.values.keys()).collect();
    keys.into_iter()
        .filter(|k| a.values.get(*k) != b.values.get(*k))
        .take(limit)
        .map(|k| format!("counter {k}: {:?} vs {:?}", a.values.get(k), b.values.get(k)))
        .collect()
}

const SPEC: StateMachineSpec<Counters> =
    StateMachineSpec { name: "counters", fresh: Counters::default, diff };

/// Writes a small log through the pipeline, then verifies it with this walcheck.
fn demo() -> i32 {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = wal_state::pipeline::PipelineOptions { checkpoint_every_entries: 10, ..Default::default() };
    let (p, _) = wal_state::pipeline::Pipeline::open(dir.path(), opts, Default::default(), Counters::default)
        .expect("open");
    for i in 0..35 {
        let cmd = format!("add c{} {}", i % 4, i);
        p.submit(cmd.as_bytes(), None).expect("submit").wait().expect("applied");
    }
    p.close().expect("close");
    let path = dir.path().as_os_str().to_owned();
    walcheck::run_with(["walcheck".into(), "verify".into(), path], &SPEC)
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let code =
        if args.get(1).is_some_and(|a| a == "demo") { demo() } else { walcheck::run_with(args, &SPEC) };
    std::process::exit(code);
}
