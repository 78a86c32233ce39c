//! The command line: its help text, the configuration it gives, and the parser.

use crate::engines::{self, Practice, Res};
use crate::workloads::RETAINED_CALL;
use crate::WORKLOADS;
use std::path::PathBuf;

const HELP: &str = "\
compare: wal vs raft-engine vs okaywal vs raft-log vs a raw fdatasync loop (issue 8)

  --quick            2 short rounds: a smoke test, not a measurement (0.4 s per workload,
                     0.1 s warm-up, 32 MiB bulk, 64 MiB retained, 1 s first-minute, 150 ms
                     probes)
  --rounds N         rounds (default 7; engine order rotates each round)
  --practice P       default, best or both (default both): each engine as its users get it by
                     default (no purge thread), with its documented purge/checkpoint policy, or
                     both, as two sets of tables
  --secs S           seconds per time-bound workload (default 3)
  --warmup S         untimed seconds before each time-bound workload (default 1)
  --bulk-mib M       bulk-1k volume in MiB (default 1024)
  --retained-gib G   retained volume in GiB, fractions allowed (default 4)
  --first-secs S     first-minute: seconds of durable-8 after the timed open (default 20)
  --window N         in-flight entries of `pipelined` (default 64)
  --window-1m N      in-flight 1 MiB entries of `pipelined-1m` (default 4)
  --probe-ms MS      length of each disk probe (default 500)
  --engines LIST     comma-separated subset of wal,raft-engine,okaywal,raft-log,raw
  --workloads LIST   comma-separated subset of the workload ids
  --dir DIR          where the logs are made (default /tmp); a fresh subdirectory is used
  --json FILE        append one JSON object per sample and per probe to FILE
  --report FILE      print the tables from a JSON file instead of running
  --plot DIR         also write throughput-vs-writers.svg and latency-vs-writers.svg there
";

#[derive(Clone, Debug)]
pub struct Cfg {
    pub quick: bool,
    pub rounds: usize,
    pub secs: f64,
    pub warmup: f64,
    pub bulk_mib: u64,
    /// `retained`'s volume in bytes.
    pub retained_bytes: u64,
    pub first_secs: f64,
    pub practices: Vec<Practice>,
    pub window: usize,
    pub window_1m: usize,
    pub probe_ms: u64,
    pub engines: Vec<String>,
    pub workloads: Vec<String>,
    pub dir: PathBuf,
    pub json: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

fn list(v: &str, allowed: &[&str]) -> Res<Vec<String>> {
    let out: Vec<String> = v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    for x in &out {
        if !allowed.contains(&x.as_str()) {
            return Err(format!("unknown id {x:?}; known: {}", allowed.join(",")).into());
        }
    }
    Ok(out)
}

pub(crate) fn parse_args() -> Res<Cfg> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut c = Cfg {
        quick,
        rounds: if quick { 2 } else { 7 },
        secs: if quick { 0.4 } else { 3.0 },
        warmup: if quick { 0.1 } else { 1.0 },
        bulk_mib: if quick { 32 } else { 1024 },
        retained_bytes: if quick { 64 << 20 } else { 4 << 30 },
        first_secs: if quick { 1.0 } else { 20.0 },
        practices: Practice::ALL.to_vec(),
        window: 64,
        window_1m: 4,
        probe_ms: if quick { 150 } else { 500 },
        engines: engines::ENGINES.iter().map(|s| s.to_string()).collect(),
        workloads: WORKLOADS.iter().map(|s| s.to_string()).collect(),
        dir: PathBuf::from("/tmp"),
        json: None,
        report: None,
        plot: None,
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => {}
            "--rounds" => c.rounds = val()?.parse()?,
            "--secs" => c.secs = val()?.parse()?,
            "--warmup" => c.warmup = val()?.parse()?,
            "--bulk-mib" => c.bulk_mib = val()?.parse()?,
            "--retained-gib" => {
                let g: f64 = val()?.parse()?;
                c.retained_bytes = (g * (1u64 << 30) as f64) as u64;
            }
            "--first-secs" => c.first_secs = val()?.parse()?,
            "--practice" => {
                let v = val()?;
                c.practices = match v.as_str() {
                    "both" => Practice::ALL.to_vec(),
                    one => vec![Practice::parse(one)
                        .ok_or_else(|| format!("--practice {one:?}: default, best or both"))?],
                };
            }
            "--window" => c.window = val()?.parse()?,
            "--window-1m" => c.window_1m = val()?.parse()?,
            "--probe-ms" => c.probe_ms = val()?.parse()?,
            "--engines" => c.engines = list(&val()?, &engines::ENGINES)?,
            "--workloads" => c.workloads = list(&val()?, &WORKLOADS)?,
            "--dir" => c.dir = PathBuf::from(val()?),
            "--json" => c.json = Some(PathBuf::from(val()?)),
            "--report" => c.report = Some(PathBuf::from(val()?)),
            "--plot" => c.plot = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{HELP}").into()),
        }
    }
    if c.rounds == 0
        || c.window == 0
        || c.window_1m == 0
        || c.secs <= 0.0
        || c.bulk_mib == 0
        || c.first_secs <= 0.0
        || c.retained_bytes < RETAINED_CALL
    {
        return Err(
            "--rounds, --secs, --bulk-mib, --first-secs, the windows and --retained-gib (at least one \
             call of 256 KiB) must be positive"
                .into(),
        );
    }
    Ok(c)
}
