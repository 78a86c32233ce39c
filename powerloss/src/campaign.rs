//! One campaign: record a workload on a fresh file system through the recorder, then build crash
//! images from the recording, mount each (the journal replayed) and run the workload's checker.
//!
//! The workload runs as its own process (`powerloss-workload run KIND --marks FILE`): each
//! acknowledging thread writes its line to the recorder's marks file right after the engine
//! acknowledged, so the mark trails the acknowledgement by one system call in the same sequence
//! as the block events (a workload that only prints is answered line by line instead, see
//! [`Setup::direct_marks`]). On a failure the recording is kept (see [`save`]) and the
//! message carries the command that rebuilds and checks that one image.

use crate::device::{self, make_fs, sparse_copy, Fs, Loop, Mount};
use crate::image::{self, Cursor, ImageSpec};
use crate::recorder::{Event, Recorder, Recording};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The size of the recorded disk: above the 512 MiB under which mkfs.ext4 picks its "small"
/// profile (1 KiB blocks), so the file system is made as a real disk's would be; sparse, so it
/// costs what is written.
pub const DISK_BYTES: u64 = 640 << 20;

/// How long a workload may run before it counts as hung.
pub const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// How long one image's check may take (the Raft checker's own waits add up to 40 s).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(90);

/// What to record.
#[derive(Debug, Clone)]
pub struct Setup {
    pub fs: Fs,
    pub kind: String,
    pub seed: u64,
    /// The `powerloss-workload` binary.
    pub workload: PathBuf,
    /// A scratch directory on tmpfs, created and emptied by the campaign.
    pub scratch: PathBuf,
    /// The workload writes its acknowledgements to the recorder's marks file itself
    /// (`powerloss-workload --marks`); otherwise it prints them and waits for the handshake.
    pub direct_marks: bool,
    /// Carry on the log already on the disk (`--resume`) rather than create it.
    pub resume: bool,
}

/// Which images to check.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Flush-point images: `None` for every window, `Some(n)` for n seeded windows (the last
    /// window always among them).
    pub flush_points: Option<usize>,
    /// Between images, in seeded windows.
    pub between: usize,
    pub seed: u64,
}

/// A finished recording and the disk it started from.
#[derive(Debug)]
pub struct Recorded {
    pub base: PathBuf,
    pub rec: Recording,
    /// Acknowledgements given before the recording began (a resumed run: the first run's, that
    /// the image it started from had to honour): every image of this recording must honour them
    /// too.
    pub prior: Vec<String>,
    /// For a resumed run, the first run's image it started from.
    pub origin: Option<ImageSpec>,
}

impl Recorded {
    pub fn acks(&self) -> usize {
        self.rec.events.iter().filter(|e| matches!(e, Event::Mark(_))).count()
    }
    pub fn flushes(&self) -> usize {
        self.rec.flushes().len()
    }
}

/// What the checked images showed.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub images: usize,
    pub between: usize,
    /// Acknowledgements the images had to honour, summed over images.
    pub required: usize,
    /// Images that mounted only after the file system's own repair (`e2fsck -fy`).
    pub repaired: usize,
    pub failures: Vec<(ImageSpec, String)>,
}

/// One line on a campaign: the recording's size and what its images showed.
pub fn report(setup: &Setup, rec: &Recorded, s: &Summary) -> String {
    format!(
        "{} {} seed {}: {} flushes, {} acknowledgements; {} images checked ({} between, {} mounted after fsck), {} acknowledgements required, {} losses",
        setup.fs,
        setup.kind,
        setup.seed,
        rec.flushes(),
        rec.acks(),
        s.images,
        s.between,
        s.repaired,
        s.required,
        s.failures.len()
    )
}

/// Records `setup`'s workload on a fresh file system.
pub fn record(setup: &Setup) -> Result<Recorded, String> {
    record_from(setup, None)
}

/// Records `setup`'s workload on the disk `from` (a crash image, for a resumed run), or on a
/// fresh file system.
pub fn record_from(setup: &Setup, from: Option<&Path>) -> Result<Recorded, String> {
    let s = &setup.scratch;
    // A recorder left mounted there by a run that was killed would make the removal below
    // descend into it (or fail on a dead mount): detach it first.
    crate::device::unmount_lazily(&s.join("fuse"));
    let _ = std::fs::remove_dir_all(s);
    std::fs::create_dir_all(s.join("fuse")).map_err(|e| format!("{}: {e}", s.display()))?;
    let base = s.join("base.img");
    let backing = s.join("backing.img");
    match from {
        Some(image) => sparse_copy(image, &base).map_err(|e| format!("copying the starting image: {e}"))?,
        None => make_fs(setup.fs, &base, DISK_BYTES).map_err(|e| format!("making {}: {e}", setup.fs))?,
    }
    sparse_copy(&base, &backing).map_err(|e| format!("copying the base image: {e}"))?;
    let recorder =
        Recorder::mount(&backing, &s.join("fuse")).map_err(|e| format!("mounting the FUSE recorder: {e}"))?;
    let outcome = (|| {
        let dev =
            Loop::attach(&recorder.disk()).map_err(|e| format!("loop device over the recorder: {e}"))?;
        let mnt = Mount::new(setup.fs, &dev.dev, &s.join("mnt")).map_err(|e| e.to_string())?;
        let ran = run_workload(setup, &mnt.dir, &recorder);
        let unmounted = mnt.unmount().map_err(|e| format!("unmounting the recorded file system: {e}"));
        drop(dev);
        ran.and(unmounted)
    })();
    let failure = recorder.failure();
    let rec = recorder.finish();
    outcome?;
    if let Some(f) = failure {
        return Err(format!("the recorder failed: {f}"));
    }
    let _ = std::fs::remove_file(&backing);
    Ok(Recorded { base, rec, prior: Vec::new(), origin: None })
}

/// Kills a child that runs over its time, without ever signalling a reaped (and so perhaps
/// reused) pid: the kill happens under `state`'s lock while `reaped` is false, and the owner
/// sets `reaped` under that lock only after `waitid(WNOWAIT)` saw the child exit and before it
/// reaps it.
struct Watchdog {
    state: Arc<Mutex<(bool, bool)>>, // (reaped, killed)
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn start(pid: u32, timeout: Duration) -> Watchdog {
        let state = Arc::new(Mutex::new((false, false)));
        let s = state.clone();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(20));
                let mut g = s.lock().unwrap_or_else(|p| p.into_inner());
                if g.0 {
                    return;
                }
                if start.elapsed() > timeout {
                    // SAFETY: kill(2) of our child, not reaped yet (see the type's doc).
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    g.1 = true;
                    return;
                }
            }
        });
        Watchdog { state, thread }
    }

    /// Waits for the child to exit (it stays a zombie), stops the watchdog, reaps it; whether
    /// the watchdog killed it.
    fn wait(self, child: &mut Child) -> io::Result<(ExitStatus, bool)> {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: waitid on our own child's pid with WNOWAIT: it does not reap.
            let r =
                unsafe { libc::waitid(libc::P_PID, child.id(), &mut info, libc::WEXITED | libc::WNOWAIT) };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let killed = {
            let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
            g.0 = true;
            g.1
        };
        let _ = self.thread.join();
        Ok((child.wait()?, killed))
    }
}

/// Runs the workload on the mounted file system. Its acknowledgements become marks either
/// through the recorder's marks file, written by the workload's acknowledging threads
/// (`direct_marks`), or, for a workload that only prints them, by this reader, which answers
/// each line (the handshake) only after logging it.
fn run_workload(setup: &Setup, mnt: &Path, recorder: &Recorder) -> Result<(), String> {
    let stderr_path = setup.scratch.join("workload.stderr");
    let stderr = File::create(&stderr_path).map_err(|e| format!("{}: {e}", stderr_path.display()))?;
    let mut cmd = Command::new(&setup.workload);
    cmd.args(["run", &setup.kind, "--dir"]).arg(mnt.join("wl")).args(["--seed", &setup.seed.to_string()]);
    if setup.resume {
        cmd.arg("--resume");
    }
    if setup.direct_marks {
        cmd.arg("--marks").arg(recorder.marks());
    } else {
        cmd.arg("--handshake");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", setup.workload.display()))?;
    let watchdog = Watchdog::start(child.id(), WORKLOAD_TIMEOUT);
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut done = false;
    let mut err = None;
    for line in stdout.lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                err = Some(format!("reading the workload: {e}"));
                break;
            }
        };
        if line.starts_with("ack") && !setup.direct_marks {
            recorder.log().mark(&line);
            if stdin.write_all(b"\n").and_then(|()| stdin.flush()).is_err() {
                break;
            }
        } else if line == "done" {
            done = true;
        }
    }
    drop(stdin);
    let waited = watchdog.wait(&mut child).map_err(|e| format!("waiting for the workload: {e}"));
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let (status, killed) = waited?;
    if killed {
        return Err(format!("the workload ran over {WORKLOAD_TIMEOUT:?} and was killed: {}", stderr.trim()));
    }
    if let Some(e) = err {
        return Err(e);
    }
    if !status.success() || !done {
        return Err(format!("the workload {} failed ({status}): {}", setup.kind, stderr.trim()));
    }
    Ok(())
}

/// The images `plan` selects in `rec`, in window order. Between images go only to windows with
/// at least two block events (fewer, and the subset is the flush-point image or one write).
pub fn select(plan: &Plan, rec: &Recording) -> Vec<ImageSpec> {
    let bounds = image::windows(rec);
    let windows = bounds.len();
    let mut rng = wal_rng::Rng::splitmix64(plan.seed);
    let mut specs: Vec<ImageSpec> = match plan.flush_points {
        None => (0..windows).map(|window| ImageSpec { window, subset: None }).collect(),
        Some(n) => {
            let mut w: Vec<usize> = (0..windows).collect();
            rng.shuffle(&mut w);
            w.truncate(n.saturating_sub(1));
            w.push(windows - 1);
            w.sort_unstable();
            w.dedup();
            w.into_iter().map(|window| ImageSpec { window, subset: None }).collect()
        }
    };
    let busy = busy_windows(rec);
    if !busy.is_empty() {
        for _ in 0..plan.between {
            specs.push(ImageSpec {
                window: busy[rng.below(busy.len() as u64) as usize],
                subset: Some(rng.next_u64()),
            });
        }
    }
    specs.sort_unstable();
    specs.dedup();
    specs
}

/// Where resumed runs start: `n` images late in the first run (its second half, where the log is
/// large and has been truncated, purged and reopened): between images in busy windows, the last
/// one a flush point. Seeded.
pub fn resume_origins(rec: &Recording, n: usize, seed: u64) -> Vec<ImageSpec> {
    let windows = image::windows(rec).len();
    let late: Vec<usize> = busy_windows(rec).into_iter().filter(|&w| w >= windows / 2).collect();
    let mut rng = wal_rng::Rng::splitmix64(seed);
    let mut out: Vec<ImageSpec> = (0..n.saturating_sub(1))
        .filter(|_| !late.is_empty())
        .map(|_| ImageSpec {
            window: late[rng.below(late.len() as u64) as usize],
            subset: Some(rng.next_u64()),
        })
        .collect();
    if n > 0 {
        out.push(ImageSpec { window: windows * 3 / 4, subset: None });
    }
    out
}

/// The windows with at least two block events: where a between image differs from the
/// flush-point image by more than one write.
pub fn busy_windows(rec: &Recording) -> Vec<usize> {
    image::windows(rec)
        .iter()
        .enumerate()
        .filter(|(_, &(a, b))| {
            rec.events[a..b].iter().filter(|e| matches!(e, Event::Write { .. } | Event::Zero { .. })).count()
                >= 2
        })
        .map(|(i, _)| i)
        .collect()
}

/// Builds and checks each image of `specs`, in order.
pub fn check_all(setup: &Setup, recorded: &Recorded, specs: &[ImageSpec]) -> Result<Summary, String> {
    let s = &setup.scratch;
    let mut cursor = Cursor::new(&recorded.rec, &recorded.base, &s.join("work.img"), setup.fs.torn_sector())
        .map_err(|e| format!("working copy: {e}"))?;
    let mut summary = Summary::default();
    for &spec in specs {
        let mut required = recorded.prior.clone();
        required.extend(image::required(&recorded.rec, spec.window));
        summary.images += 1;
        summary.between += usize::from(spec.subset.is_some());
        summary.required += required.len();
        match check_one(setup, &mut cursor, spec, &required) {
            Ok(line) => summary.repaired += usize::from(line.ends_with("(after the file system's repair)")),
            Err(why) => summary.failures.push((spec, why)),
        }
    }
    Ok(summary)
}

/// Builds one image, mounts it and runs the checker with the acknowledgements it must honour.
pub fn check_one(
    setup: &Setup,
    cursor: &mut Cursor<'_>,
    spec: ImageSpec,
    required: &[String],
) -> Result<String, String> {
    let s = &setup.scratch;
    let img = s.join("image.img");
    let fail = |what: String| format!("{} {} seed {} {spec}: {what}", setup.fs, setup.kind, setup.seed);
    cursor.build(spec, &img).map_err(|e| fail(format!("building the image: {e}")))?;
    let acks = s.join("acks.txt");
    std::fs::write(&acks, required.iter().map(|l| format!("{l}\n")).collect::<String>())
        .map_err(|e| fail(e.to_string()))?;
    let dev = Loop::attach(&img).map_err(|e| fail(e.to_string()))?;
    let (mnt, repaired) = match Mount::new(setup.fs, &dev.dev, &s.join("check")) {
        Ok(m) => (m, false),
        // What an operator does with a file system that will not mount after a power loss
        // (ext4 with a superblock torn across its 512-byte sectors): repair it, then mount.
        // The log's checks below are the same either way.
        Err(e) => {
            let repair = device::repair(setup.fs, &dev.dev)
                .map_err(|r| fail(format!("the image does not mount ({e}) and its repair failed: {r}")))?;
            let m = Mount::new(setup.fs, &dev.dev, &s.join("check"))
                .map_err(|e2| fail(format!("the image does not mount ({e}), nor after {repair}: {e2}")))?;
            (m, true)
        }
    };
    let out_path = s.join("check.out");
    let out = File::create(&out_path).and_then(|f| Ok((f.try_clone()?, f))).and_then(|(o, e)| {
        Command::new(&setup.workload)
            .args(["check", &setup.kind, "--dir"])
            .arg(mnt.dir.join("wl"))
            .arg("--acks")
            .arg(&acks)
            .stdin(Stdio::null())
            .stdout(o)
            .stderr(e)
            .spawn()
    });
    let status = out.map_err(|e| fail(format!("running the checker: {e}"))).and_then(|mut child| {
        let watchdog = Watchdog::start(child.id(), CHECK_TIMEOUT);
        match watchdog.wait(&mut child) {
            Ok((_, true)) => Err(fail(format!(
                "the checker ran over {CHECK_TIMEOUT:?} and was killed (a hang on this image)"
            ))),
            Ok((st, false)) => Ok(st),
            Err(e) => Err(fail(format!("waiting for the checker: {e}"))),
        }
    });
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let unmounted = mnt.unmount();
    drop(dev);
    let _ = std::fs::remove_file(&img);
    let status = status.map_err(|e| format!("{e}\n{}", text.trim()))?;
    if !status.success() {
        return Err(fail(format!(
            "{} acknowledgements required; checker exited {}:\n{}",
            required.len(),
            status,
            text.trim()
        )));
    }
    unmounted.map_err(|e| fail(format!("unmounting the checked image: {e}")))?;
    let text = text.trim().to_string();
    Ok(if repaired { format!("{text} (after the file system's repair)") } else { text })
}

/// Keeps a recording at `dir` (the base image sparse, the events as text, the written bytes) so
/// that one image can be rebuilt and checked again with `powerloss image`.
pub fn save(setup: &Setup, recorded: &Recorded, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    sparse_copy(&recorded.base, &dir.join("base.img"))?;
    std::fs::write(dir.join("data.bin"), &recorded.rec.data)?;
    let mut ev = format!("fs {}\nkind {}\nseed {}\n", setup.fs, setup.kind, setup.seed);
    for p in &recorded.prior {
        let _ = writeln!(ev, "P {p}");
    }
    for e in &recorded.rec.events {
        let _ = match e {
            Event::Write { offset, len, at } => writeln!(ev, "W {offset} {len} {at}"),
            Event::Zero { offset, len } => writeln!(ev, "Z {offset} {len}"),
            Event::Flush => writeln!(ev, "F"),
            Event::Mark(m) => writeln!(ev, "M {m}"),
        };
    }
    std::fs::write(dir.join("events.txt"), ev)
}

/// Reads back what [`save`] kept: the file system, kind, seed and the recording (its base image
/// stays in `dir`).
pub fn load(dir: &Path) -> Result<(Fs, String, u64, Recorded), String> {
    let bad = |what: &str| format!("{}: {what}", dir.join("events.txt").display());
    let text = std::fs::read_to_string(dir.join("events.txt")).map_err(|e| bad(&e.to_string()))?;
    let data = std::fs::read(dir.join("data.bin"))
        .map_err(|e| format!("{}: {e}", dir.join("data.bin").display()))?;
    let mut lines = text.lines();
    let mut header = |key: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(key))
            .and_then(|l| l.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("no `{key}` line")))
    };
    let fs = Fs::parse(&header("fs")?).ok_or_else(|| bad("unknown file system"))?;
    let kind = header("kind")?;
    let seed = header("seed")?.parse().map_err(|_| bad("bad seed"))?;
    let mut events = Vec::new();
    let mut prior = Vec::new();
    for (n, l) in lines.enumerate() {
        let bad_line = || bad(&format!("event line {}: {l:?}", n + 4));
        let mut f = l.splitn(2, ' ');
        let tag = f.next().unwrap_or("");
        let rest = f.next().unwrap_or("");
        let nums = || {
            rest.split(' ').map(|x| x.parse::<u64>().map_err(|_| bad_line())).collect::<Result<Vec<_>, _>>()
        };
        events.push(match tag {
            "W" => match nums()?[..] {
                [offset, len, at] if at + len <= data.len() as u64 => {
                    Event::Write { offset, len: len as u32, at }
                }
                _ => return Err(bad_line()),
            },
            "Z" => match nums()?[..] {
                [offset, len] => Event::Zero { offset, len },
                _ => return Err(bad_line()),
            },
            "F" => Event::Flush,
            "M" => Event::Mark(rest.to_string()),
            "P" => {
                prior.push(rest.to_string());
                continue;
            }
            _ => return Err(bad_line()),
        });
    }
    Ok((
        fs,
        kind,
        seed,
        Recorded { base: dir.join("base.img"), rec: Recording { events, data }, prior, origin: None },
    ))
}

/// Records, checks the images `plan` selects and, on any failure, keeps the recording under
/// `keep` and names in each failure the command that rebuilds and checks that image.
pub fn campaign(setup: &Setup, plan: &Plan, keep: &Path) -> Result<(Recorded, Summary), String> {
    let recorded = record(setup)?;
    let summary = check_and_keep(setup, &recorded, plan, keep)?;
    Ok((recorded, summary))
}

/// A power loss during recovery: the first run's image `origin` (a between image, say, with a
/// torn tail) is where a second run starts (`setup2`, with `resume`): its open is the recovery,
/// its writes land on what recovery left, and every image of its own recording must honour the
/// first run's acknowledgements that `origin` had to honour, and its own.
pub fn resumed(
    first: &Setup,
    recorded: &Recorded,
    origin: ImageSpec,
    second: &Setup,
    plan: &Plan,
    keep: &Path,
) -> Result<(Recorded, Summary), String> {
    let start = first.scratch.join("resume-from.img");
    let mut cursor = Cursor::new(
        &recorded.rec,
        &recorded.base,
        &first.scratch.join("resume-work.img"),
        first.fs.torn_sector(),
    )
    .map_err(|e| format!("working copy: {e}"))?;
    cursor.build(origin, &start).map_err(|e| format!("building {origin}: {e}"))?;
    let what = format!("resuming from {} {} seed {} {origin}", first.fs, first.kind, first.seed);
    let mut again = match record_from(second, Some(&start)) {
        Ok(r) => r,
        // The image may need the file system's repair to mount (a torn superblock block), as
        // an operator would run it; then the run resumes on the repaired disk.
        Err(e) => match device::repair(first.fs, &start) {
            Ok(_) => {
                record_from(second, Some(&start)).map_err(|e2| format!("{what}: {e}; after repair: {e2}"))?
            }
            Err(_) => return Err(format!("{what}: {e}")),
        },
    };
    let _ = std::fs::remove_file(&start);
    again.prior = image::required(&recorded.rec, origin.window);
    again.origin = Some(origin);
    let summary = check_and_keep(second, &again, plan, keep)?;
    Ok((again, summary))
}

/// Checks the images `plan` selects and, on any failure, keeps the recording under `keep`
/// and names in each failure the command that rebuilds and checks that image.
pub fn check_and_keep(
    setup: &Setup,
    recorded: &Recorded,
    plan: &Plan,
    keep: &Path,
) -> Result<Summary, String> {
    let specs = select(plan, &recorded.rec);
    let mut summary = check_all(setup, recorded, &specs)?;
    if !summary.failures.is_empty() {
        let origin = recorded
            .origin
            .map(|o| format!("-resumed-{}-{}", o.window, o.subset.unwrap_or(0)))
            .unwrap_or_default();
        let dir = keep.join(format!("{}-{}-{}{origin}", setup.fs, setup.kind, setup.seed));
        let kept = save(setup, recorded, &dir);
        for (spec, why) in &mut summary.failures {
            let subset = spec.subset.map(|s| format!(" --subset {s}")).unwrap_or_default();
            match &kept {
                Ok(()) => {
                    let _ = write!(
                        why,
                        "\n  rebuild and check this image: cargo run -p wal-powerloss --bin powerloss -- image --recording {} --window {}{subset}",
                        dir.display(),
                        spec.window
                    );
                }
                Err(e) => {
                    let _ = write!(why, "\n  (the recording could not be kept at {}: {e})", dir.display());
                }
            }
            if let Some(o) = recorded.origin {
                *why = format!("(a run resumed on the first run's {o}) {why}");
            }
        }
    }
    Ok(summary)
}
