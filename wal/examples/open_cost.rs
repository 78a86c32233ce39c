//! What a writer's restart costs with each `Options::open_check` (issue 22): a write-open after
//! a clean close, open + a full replay (a controller's restart), and open + the check the first
//! append waits for (`Wal::check_records`), next to `TrustSealed` (the open before the check
//! existed: nothing walks the sealed segments) and `AtOpen` (a full walk at the open).
//!
//! ```sh
//! cargo run --release -p wal --example open_cost -- --mib 1024 --rounds 5
//! cargo run -p wal --example open_cost -- --mib 1 --rounds 1 --segment-kib 256   # CI: seconds
//! ```
//!
//! 1 KiB entries, the default 64 MiB segments (`--segment-kib`), a log in a fresh directory under `--dir` (default
//! `/tmp`, removed at the end), read from the page cache (warm). No round writes: a handle that
//! wrote nothing leaves the log as it found it, so every round opens the same bytes. Medians.

use std::path::Path;
use std::time::Instant;
use wal::{Epoch, OpenCheck, Options, Wal};

type Res<T> = Result<T, Box<dyn std::error::Error>>;
/// What a round does on the opened handle.
type Then<'a> = &'a dyn Fn(&mut Wal) -> Res<()>;

fn build(dir: &Path, opts: &Options, mib: u64) -> Res<u64> {
    let (mut log, _) = Wal::open(dir, opts.clone())?;
    let payload: Vec<u8> = (0..1024).map(|i| (i % 251) as u8).collect();
    let n = (mib << 20) / 1024;
    for i in 0..n {
        log.append(Epoch(0), &payload)?;
        if (i + 1) % 256 == 0 {
            log.flush()?;
        }
    }
    log.close()?;
    Ok(n)
}

/// A write-open with `check`, then `then` on the handle; seconds.
fn timed(dir: &Path, opts: &Options, check: OpenCheck, then: Then) -> Res<f64> {
    let t = Instant::now();
    let (mut log, _) = Wal::open(dir, Options { open_check: check, ..opts.clone() })?;
    then(&mut log)?;
    let s = t.elapsed().as_secs_f64();
    drop(log);
    Ok(s)
}

fn replay(log: &mut Wal, entries: u64) -> Res<()> {
    let mut r = log.replay()?;
    let mut n = 0u64;
    while let Some(item) = r.next() {
        std::hint::black_box(item?.payload.len());
        n += 1;
    }
    if n != entries {
        return Err(format!("replayed {n} entries of {entries}").into());
    }
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let mib: u64 = value("--mib").map_or(Ok(256), |v| v.parse())?;
    let rounds: usize = value("--rounds").map_or(Ok(5), |v| v.parse())?;
    let segment_kib: u32 = value("--segment-kib").map_or(Ok(64 << 10), |v| v.parse())?;
    let root = value("--dir").unwrap_or_else(|| "/tmp".into());
    if mib == 0 || rounds == 0 {
        return Err(
            "usage: open_cost [--mib N] [--rounds N] [--segment-kib N] [--dir DIR] (N at least 1)".into()
        );
    }
    let opts = Options { segment_len_bytes: segment_kib.saturating_mul(1024), ..Options::default() };
    let tmp = tempfile::Builder::new().prefix("wal-open-cost-").tempdir_in(root)?;
    let dir = tmp.path().join("log");
    let n = build(&dir, &opts, mib)?;
    let nothing = |_: &mut Wal| Ok(());
    let replayed = |l: &mut Wal| replay(l, n);
    let checked = |l: &mut Wal| Ok(l.check_records()?);
    let rows: [(&str, OpenCheck, Then); 6] = [
        ("open (default: BeforeFirstWrite)", OpenCheck::BeforeFirstWrite, &nothing),
        ("open + full replay (default)", OpenCheck::BeforeFirstWrite, &replayed),
        ("open + the first write's check (default)", OpenCheck::BeforeFirstWrite, &checked),
        ("open + full replay (TrustSealed: as before)", OpenCheck::TrustSealed, &replayed),
        ("open (AtOpen)", OpenCheck::AtOpen, &nothing),
        ("open + full replay (AtOpen)", OpenCheck::AtOpen, &replayed),
    ];
    let mut times = vec![Vec::new(); rows.len()];
    for _ in 0..rounds {
        // Interleaved, so that a change of the machine's load touches every row alike.
        for ((_, check, then), t) in rows.iter().zip(times.iter_mut()) {
            t.push(timed(&dir, &opts, *check, *then)?);
        }
    }
    println!("open_cost: {mib} MiB log, {n} entries of 1 KiB, {segment_kib} KiB segments, warm, median of {rounds}");
    for ((name, _, _), t) in rows.iter().zip(times.iter_mut()) {
        t.sort_by(f64::total_cmp);
        println!("  {name:<45} {:>9.2} ms", t[t.len() / 2] * 1e3);
    }
    Ok(())
}
