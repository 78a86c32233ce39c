//! The workloads: writers waiting for durability, the pipelined writer, the first minute of a
//! fresh log, the retained log, and the bulk load with the replays of its log.

use crate::engines::{self, Engine, Mode, Practice, Res};
use crate::{cpu_secs, drop_caches, raw_engine, remove, report, stamp, sync_all_fs, wal_engine};
use crate::{Cfg, Filler, Measured, Sample};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// `threads` writers, each appending `per_call` entries of `len` bytes per call and waiting for
/// them to be durable: `warmup` untimed, then `dur` timed (every writer starts the timed part
/// together). Latency is per call.
fn writers(
    log: &dyn Engine,
    filler: &Filler,
    threads: usize,
    per_call: usize,
    len: usize,
    warmup: Duration,
    dur: Duration,
) -> Res<Measured> {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| -> Res<Measured> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> Res<(u64, Vec<u64>)> {
                    let mut bufs: Vec<Vec<u8>> = (0..per_call)
                        .map(|_| {
                            let mut b = Vec::new();
                            filler.fill(&mut b, len, t as u32, 0);
                            b
                        })
                        .collect();
                    let mut lat = Vec::with_capacity(1 << 16);
                    let mut seq = 0u64;
                    let mut run = |until: Instant, seq: &mut u64, lat: Option<&mut Vec<u64>>| -> Res<()> {
                        let mut lat = lat;
                        while Instant::now() < until {
                            for b in &mut bufs {
                                *seq += 1;
                                stamp(b, t as u32, *seq);
                            }
                            let refs: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
                            let t0 = Instant::now();
                            log.append(t as u32, &refs, true)?;
                            if let Some(lat) = lat.as_deref_mut() {
                                lat.push(t0.elapsed().as_nanos() as u64);
                            }
                        }
                        Ok(())
                    };
                    // A failed writer still meets both barriers, so nobody waits forever.
                    barrier.wait();
                    let warm = run(Instant::now() + warmup, &mut seq, None);
                    barrier.wait();
                    let before = seq;
                    warm?;
                    run(Instant::now() + dur, &mut seq, Some(&mut lat))?;
                    Ok((seq - before, lat))
                })
            })
            .collect();
        barrier.wait();
        barrier.wait();
        let cpu0 = cpu_secs();
        let start = Instant::now();
        let mut m = Measured { secs: 0.0, entries: 0, bytes: 0, cpu_s: 0.0, lat: Vec::new() };
        let mut err = None;
        for h in hs {
            match h.join() {
                Ok(Ok((n, lat))) => {
                    m.entries += n;
                    m.lat.extend(lat);
                }
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some("a writer thread panicked".into()),
            }
        }
        m.secs = start.elapsed().as_secs_f64();
        m.cpu_s = cpu_secs() - cpu0;
        m.bytes = m.entries * len as u64;
        match err {
            Some(e) => Err(e),
            None => Ok(m),
        }
    })
}

/// This engine's own workload: one submitter keeping `window` durable entries of `len` bytes in
/// flight for `dur`. Latency is submit to durable, per entry.
fn pipelined(
    log: &wal_engine::WalEngine,
    filler: &Filler,
    window: usize,
    len: usize,
    dur: Duration,
) -> Res<Measured> {
    let mut inflight: VecDeque<(wal_engine::Pending, Instant)> = VecDeque::with_capacity(window);
    let mut lat = Vec::with_capacity(1 << 16);
    let (cpu0, start) = (cpu_secs(), Instant::now());
    let deadline = start + dur;
    let mut seq = 0u64;
    while Instant::now() < deadline {
        if inflight.len() == window {
            if let Some((t, at)) = inflight.pop_front() {
                t.wait()?;
                lat.push(at.elapsed().as_nanos() as u64);
            }
        }
        seq += 1;
        let mut e = Vec::with_capacity(len);
        filler.fill(&mut e, len, 0, seq);
        let at = Instant::now();
        inflight.push_back((log.submit(e)?, at));
    }
    for (t, at) in inflight.drain(..) {
        t.wait()?;
        lat.push(at.elapsed().as_nanos() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Measured { secs, entries: seq, bytes: seq * len as u64, cpu_s: cpu_secs() - cpu0, lat })
}

/// The raw loop's file in the synced workloads (it wraps around it).
fn raw_bytes(cfg: &Cfg) -> u64 {
    if cfg.quick {
        16 << 20
    } else {
        64 << 20
    }
}

/// Runs one time-bound synced workload for one engine under `practice`, in a fresh directory.
pub(crate) fn synced(
    cfg: &Cfg,
    base: &Path,
    engine: &str,
    w: &str,
    practice: Practice,
    round: usize,
    filler: &Filler,
) -> Res<Sample> {
    let dur = Duration::from_secs_f64(cfg.secs);
    let warm = Duration::from_secs_f64(cfg.warmup);
    let dir = fresh(base, engine, w, practice, round);
    let m = if engine == "wal" && w.starts_with("pipelined") {
        let log = wal_engine::WalEngine::open(&dir, practice)?;
        sync_all_fs();
        let (window, len) = if w == "pipelined" { (cfg.window, 256) } else { (cfg.window_1m, 1 << 20) };
        pipelined(&log, filler, window, len, warm)?;
        let m = pipelined(&log, filler, window, len, dur)?;
        Box::new(log).close()?;
        m
    } else {
        let log = engines::open(engine, &dir, Mode::Synced { raw_bytes: raw_bytes(cfg), practice })?;
        sync_all_fs();
        let m = match w {
            "durable-1" => writers(&*log, filler, 1, 1, 256, warm, dur)?,
            "durable-8" => writers(&*log, filler, 8, 1, 256, warm, dur)?,
            "durable-64" => writers(&*log, filler, 64, 1, 256, warm, dur)?,
            "batch4k-64" => writers(&*log, filler, 1, 64, 4096, warm, dur)?,
            // The raw loop's 1 MiB write + fdatasync, one at a time.
            "pipelined-1m" => writers(&*log, filler, 1, 1, 1 << 20, warm, dur)?,
            other => return Err(format!("{engine} does not run {other}").into()),
        };
        log.close()?;
        m
    };
    remove(&dir);
    Ok(m.sample(engine, w, practice))
}

/// `first-minute`: a brand-new log, its open timed together with `first_secs` of `durable-8`
/// (no warm-up): what a new log's first segments cost (creation, first preparation, rotations
/// onto fresh files). Latency is per append call; `open_s` is the open alone.
pub(crate) fn first_minute(
    cfg: &Cfg,
    base: &Path,
    engine: &str,
    practice: Practice,
    round: usize,
    filler: &Filler,
) -> Res<Sample> {
    let dir = fresh(base, engine, "first-minute", practice, round);
    sync_all_fs();
    let (cpu0, start) = (cpu_secs(), Instant::now());
    let log = engines::open(engine, &dir, Mode::Synced { raw_bytes: raw_bytes(cfg), practice })?;
    let open_s = start.elapsed().as_secs_f64();
    let dur = Duration::from_secs_f64(cfg.first_secs);
    let mut m = writers(&*log, filler, 8, 1, 256, Duration::ZERO, dur)?;
    m.secs = start.elapsed().as_secs_f64();
    m.cpu_s = cpu_secs() - cpu0;
    log.close()?;
    remove(&dir);
    let mut s = m.sample(engine, "first-minute", practice);
    s.open_s = Some(open_s);
    Ok(s)
}

/// Entries per call of `retained` (and of `batch4k-64`), and the bytes of one call.
const RETAINED_ENTRIES: usize = 64;
const RETAINED_LEN: usize = 4096;
pub(crate) const RETAINED_CALL: u64 = (RETAINED_ENTRIES * RETAINED_LEN) as u64;

/// `retained`: the log kept whole (no engine purges, okaywal does not checkpoint, the raw loop
/// writes one file preallocated to the whole volume), 64 x 4 KiB durable per call until
/// `retained_bytes` are written; timed from the first append to the return of the last (whose
/// sync is the last). Latency is per call.
pub(crate) fn retained(cfg: &Cfg, base: &Path, engine: &str, round: usize, filler: &Filler) -> Res<Sample> {
    let calls = cfg.retained_bytes / RETAINED_CALL;
    let dir = fresh(base, engine, "retained", Practice::Default, round);
    let raw = calls * RETAINED_ENTRIES as u64 * (RETAINED_LEN as u64 + raw_engine::RAW_HEADER);
    let log = engines::open(engine, &dir, Mode::Kept { bytes: raw })?;
    sync_all_fs();
    let mut bufs: Vec<Vec<u8>> = (0..RETAINED_ENTRIES)
        .map(|_| {
            let mut b = Vec::new();
            filler.fill(&mut b, RETAINED_LEN, 0, 0);
            b
        })
        .collect();
    let mut lat = Vec::with_capacity(calls as usize);
    let mut seq = 0u64;
    let (cpu0, start) = (cpu_secs(), Instant::now());
    for _ in 0..calls {
        for b in &mut bufs {
            seq += 1;
            stamp(b, 0, seq);
        }
        let refs: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let t0 = Instant::now();
        log.append(0, &refs, true)?;
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    let m = Measured { secs, entries: seq, bytes: seq * RETAINED_LEN as u64, cpu_s: cpu_secs() - cpu0, lat };
    log.close()?;
    remove(&dir);
    Ok(m.sample(engine, "retained", Practice::Default))
}

/// A fresh (absent) directory for one run.
fn fresh(base: &Path, engine: &str, w: &str, practice: Practice, round: usize) -> PathBuf {
    let d = base.join(format!("{engine}-{w}-{}-r{round}", practice.id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The bulk load for one engine, then the selected replays of what it wrote.
pub(crate) fn bulk(cfg: &Cfg, base: &Path, engine: &str, round: usize, filler: &Filler) -> Res<Vec<Sample>> {
    const LEN: usize = 1024;
    let want = |w: &str| cfg.workloads.iter().any(|x| x == w);
    let mut out = Vec::new();
    let n = (cfg.bulk_mib << 20) / LEN as u64;
    let dir = fresh(base, engine, "bulk-1k", Practice::Default, round);
    let log = engines::open(engine, &dir, Mode::Kept { bytes: n * (LEN as u64 + raw_engine::RAW_HEADER) })?;
    sync_all_fs();
    let mut lat = Vec::with_capacity(n as usize);
    let (cpu0, start) = (cpu_secs(), Instant::now());
    log.bulk(n, &mut |seq, buf| filler.fill(buf, LEN, 0, seq), &mut lat)?;
    let secs = start.elapsed().as_secs_f64();
    let m = Measured { secs, entries: n, bytes: n * LEN as u64, cpu_s: cpu_secs() - cpu0, lat };
    log.close()?;
    if want("bulk-1k") {
        out.push(m.sample(engine, "bulk-1k", Practice::Default));
        report::progress(out.last());
    }
    for (w, cold) in [("replay-warm", false), ("replay-cold", true)] {
        if !want(w) {
            continue;
        }
        let dropped = cold && drop_caches();
        let (cpu0, start) = (cpu_secs(), Instant::now());
        let r = engines::replay(engine, &dir, n, LEN)?;
        let secs = start.elapsed().as_secs_f64();
        let m =
            Measured { secs, entries: r.entries, bytes: r.bytes, cpu_s: cpu_secs() - cpu0, lat: Vec::new() };
        let mut s = m.sample(engine, w, Practice::Default);
        s.open_s = Some(r.open_s);
        s.cold = Some(dropped);
        out.push(s);
        report::progress(out.last());
    }
    remove(&dir);
    Ok(out)
}
