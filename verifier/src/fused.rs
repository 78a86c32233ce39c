//! The CRC verdict and the state verdict in one pass over the log ([`verify_with_state`]):
//! the CRC scan hands each record it walks to the state check's replay-and-compare core, which
//! falls back to a separate replay (`state.rs`) whenever the one pass could differ from it.

use crate::state::{
    check_state, conclude, StateMachineSpec, StateOptions, StateReport, DEFAULT_DEDUPE_WINDOW, RAFT_META_KEYS,
};
use std::path::Path;
use wal::{CrcVerdict, Lsn};
use wal_state::{recorded_dedupe_window, Applier, Replayer, StateMachine, DEDUPE_WINDOW_META_KEY};

/// The replay fed from the CRC scan's own walk (see [`verify_with_state`]): valid while the
/// records it saw are exactly what a replay of the log would yield.
struct Fused<S> {
    fresh: fn() -> S,
    /// The dedupe window recorded so far (the default until a record sets it).
    window: u64,
    /// Created at the first entry or checkpoint, with the window in force then.
    replayer: Option<Replayer<S>>,
    /// Why a separate replay is needed after all.
    abandoned: bool,
}

impl<S: StateMachine> Fused<S> {
    fn feed(&mut self, r: &wal::scan::Rec<'_>) {
        use wal::format::Kind;
        if self.abandoned {
            return;
        }
        match r.kind {
            Kind::Entry | Kind::Checkpoint => {
                let (fresh, window) = (self.fresh, self.window);
                let rep = self.replayer.get_or_insert_with(|| Replayer::new(Applier::new(fresh(), window)));
                if rep.report().stopped() {
                    return;
                }
                let (lsn, epoch) = (Lsn(r.lsn), wal::Epoch(r.epoch));
                if r.kind == Kind::Entry {
                    rep.entry(lsn, epoch, r.payload);
                } else if let Some(cp) = wal::Checkpoint::from_record_payload(r.payload) {
                    rep.checkpoint(lsn, &cp);
                } else {
                    self.abandoned = true;
                }
            }
            Kind::Meta => match wal::scan::parse_meta(r.payload) {
                Ok((key, value)) if key == DEDUPE_WINDOW_META_KEY => {
                    let w = recorded_dedupe_window(Some(value)).unwrap_or(DEFAULT_DEDUPE_WINDOW);
                    // A window changed after entries were applied under the old one: a replay
                    // uses the last value for every entry.
                    self.abandoned |= self.replayer.is_some() && w != self.window;
                    self.window = w;
                }
                // A Raft log: the separate check says so (`check_state`).
                Ok((key, _)) if RAFT_META_KEYS.contains(&key) => self.abandoned = true,
                Ok(_) => {}
                Err(_) => self.abandoned = true,
            },
            // Cuts make earlier records dead: only a replay knows which.
            Kind::Truncate | Kind::Reset => self.abandoned = true,
            _ => {}
        }
    }
}

/// [`crate::verify`] followed by [`check_state`], in one pass over the log when that gives the
/// same report: the CRC scan hands each record it walks to the replay-and-compare core, which
/// is the work a separate replay would do over the same records in the same order. That holds
/// when the log is undamaged (CRC verdict OK), not live, nothing was cut (no `Truncate` or
/// `Reset` record) or purged, the dedupe window did not change under applied entries, and
/// neither `--base` nor `--state` is given; otherwise the pass's replay is dropped and
/// [`check_state`] runs as usual. A quick check (`opts.quick`) replays nothing.
pub fn verify_with_state<S: StateMachine>(
    dir: &Path,
    quick: bool,
    opts: &StateOptions,
    spec: &StateMachineSpec<S>,
    progress: &mut dyn FnMut(crate::Progress),
) -> crate::Report {
    let vopts = crate::VerifyOptions { quick };
    if quick {
        return crate::verify(dir, &vopts, progress);
    }
    let mut fused =
        Fused { fresh: spec.fresh, window: DEFAULT_DEDUPE_WINDOW, replayer: None, abandoned: false };
    let plain = opts.base.is_none() && opts.state.is_none();
    let mut report = if plain {
        crate::verify_visiting(dir, &vopts, progress, &mut |r| fused.feed(r))
    } else {
        crate::verify(dir, &vopts, progress)
    };
    if report.io_error.is_some() || report.no_log.is_some() {
        return report;
    }
    let usable = plain
        && !fused.abandoned
        && report.crc == CrcVerdict::Ok
        && !report.live
        && report.live_tail.is_none()
        && report.stats.floor_segment.is_none_or(|f| f <= 1);
    report.state = Some(match fused.replayer.filter(|_| usable) {
        Some(replayer) => {
            let mut r = StateReport::not_checked(spec.name, "");
            r.dedupe_window = fused.window;
            r.single_pass = true;
            conclude(r, replayer, None, None, opts, spec)
        }
        None => check_state(dir, report.crc, opts, spec),
    });
    report
}
