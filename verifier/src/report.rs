//! The verification report: verdict words, exit codes, human and JSON renderings.

use anstyle::{AnsiColor, Style};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use wal::{CrcVerdict, Damage};

pub use crate::exit::{EXIT_INCOMPLETE_CREATE, EXIT_IO_ERROR, EXIT_NOT_COMPARED, EXIT_USAGE};

/// What a directory holds when it holds no log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoLog {
    /// Neither `wal.meta` nor a segment file: not a log directory (a usage error).
    Absent,
    /// Blank segments without `wal.meta`: a creation interrupted before it finished.
    InterruptedCreation,
}

/// What a scan counted (records as walked; a quick check walks none). Its JSON (the report's
/// `stats`, the top level of `walcheck stat --json`) is these fields under these names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub segments: usize,
    pub sealed: usize,
    pub spares: usize,
    /// Segment files below the purge floor (left by an interrupted purge).
    pub leftovers: usize,
    pub floor_segment: Option<u64>,
    pub bytes: u64,
    pub records: u64,
    pub entries: u64,
    pub payload_bytes: u64,
    pub batches: u64,
    pub max_batch_records: u32,
    pub checkpoints: u64,
    pub last_checkpoint_lsn: Option<u64>,
    pub truncations: u64,
    pub resets: u64,
    pub epoch_changes: u64,
    pub metas: u64,
    /// Smallest and largest entry LSN written (cut entries included).
    pub min_lsn: Option<u64>,
    pub max_lsn: Option<u64>,
    pub next_lsn: Option<u64>,
    pub min_epoch: Option<u64>,
    pub max_epoch: Option<u64>,
    /// The writer epoch in force at the end.
    pub epoch: Option<u64>,
}

/// The outcome of a verification.
#[derive(Clone, Debug)]
pub struct Report {
    pub dir: PathBuf,
    pub quick: bool,
    pub crc: CrcVerdict,
    pub damage: Option<Damage>,
    /// The log could not be read: what failed, with the file.
    pub io_error: Option<String>,
    /// The directory holds no log (then `io_error` is `None`).
    pub no_log: Option<NoLog>,
    /// A writer held the lock while we read.
    pub live: bool,
    /// On a live log: the unattested tail that is being written, not judged.
    pub live_tail: Option<Damage>,
    pub stats: Stats,
    /// The state verdict, when the log was replayed (walcheck part 2).
    pub state: Option<crate::state::StateReport>,
    /// Spares (segment, bytes) shorter than any segment or of no segment's length: a
    /// preparation a crash cut short (the file created, its zeros not yet all there). They hold
    /// nothing and a writer replaces them, so the verdict does not change; they are named.
    pub unfinished_spares: Vec<(u64, u64)>,
}

impl Report {
    pub(crate) fn new(dir: &Path, quick: bool) -> Report {
        Report {
            dir: dir.to_path_buf(),
            quick,
            crc: CrcVerdict::Ok,
            damage: None,
            io_error: None,
            no_log: None,
            live: false,
            live_tail: None,
            stats: Stats::default(),
            state: None,
            unfinished_spares: Vec::new(),
        }
    }

    /// The CRC verdict word (IO_ERROR when the log could not be read, INCOMPLETE_CREATE for an
    /// interrupted creation, NO_LOG for a directory without one).
    pub fn crc_word(&self) -> &'static str {
        if self.io_error.is_some() {
            "IO_ERROR"
        } else if let Some(n) = self.no_log {
            match n {
                NoLog::Absent => "NO_LOG",
                NoLog::InterruptedCreation => "INCOMPLETE_CREATE",
            }
        } else {
            self.crc.as_str()
        }
    }

    /// The state verdict word: NOT_CHECKED unless the log was replayed (CLEAN is never claimed
    /// for a check that did not replay).
    pub fn state_word(&self) -> &'static str {
        self.state.as_ref().map_or("NOT_CHECKED", |s| s.verdict.word())
    }

    /// walcheck's exit code: the most severe of the verdicts.
    pub fn exit_code(&self) -> i32 {
        let state = self.state.as_ref().map_or(0, |s| s.verdict.exit_code());
        if self.io_error.is_some() {
            return EXIT_IO_ERROR.max(self.crc.exit_code()).max(state);
        }
        match self.no_log {
            Some(NoLog::Absent) => return EXIT_USAGE,
            Some(NoLog::InterruptedCreation) => return EXIT_INCOMPLETE_CREATE,
            None => {}
        }
        self.crc.exit_code().max(state)
    }

    /// The JSON shape of the report (`walcheck verify --json`), borrowing from it.
    pub fn json_view(&self) -> ReportJson<'_> {
        ReportJson {
            dir: self.dir.display().to_string(),
            check: if self.quick { "quick" } else { "full" },
            crc: self.crc_word(),
            state: self.state_word(),
            exit_code: self.exit_code(),
            live: self.live,
            damage: self.damage.as_ref(),
            live_tail: self.live_tail.as_ref(),
            io_error: self.io_error.as_deref(),
            no_log: self.no_log.map(no_log_text),
            state_detail: self.state.as_ref().map(|s| s.json_view()),
            unfinished_spares: self
                .unfinished_spares
                .iter()
                .map(|&(segment, bytes)| SpareJson { segment, bytes })
                .collect(),
            stats: &self.stats,
        }
    }

    /// [`Report::json_view`] as a JSON value (its objects' keys sorted, as printed).
    pub fn to_json(&self) -> Value {
        crate::to_value(&self.json_view())
    }

    /// The human rendering; `color` styles the verdict words ([`verdict_style`]).
    pub fn to_text(&self, color: bool) -> String {
        let paint = |word: &str| -> String {
            if !color {
                return word.to_string();
            }
            let style = verdict_style(word);
            format!("{style}{word}{style:#}")
        };
        let mut out = format!(
            "{}  CRC {}  STATE {}{}\n",
            self.dir.display(),
            paint(self.crc_word()),
            paint(self.state_word()),
            if self.quick { "  (quick: headers and footers only)" } else { "" }
        );
        if let Some(d) = &self.damage {
            out += &format!("  {}\n", describe(d));
        }
        if let Some(e) = &self.io_error {
            out += &format!("  could not read the log: {e}\n");
        }
        if let Some(n) = self.no_log {
            out += &format!("  {}\n", no_log_text(n));
        }
        if let Some(st) = &self.state {
            out += &format!("  {} {}\n", st.verdict.word(), st.summary());
            for d in st.state.iter().flat_map(|c| &c.differences) {
                out += &format!("    {d}\n");
            }
        }
        if self.live {
            out += "  a writer holds this log (live): its unattested last batch is not judged\n";
        }
        if let Some(d) = &self.live_tail {
            out += &format!(
                "  live tail from segment {} offset {} (LSN {}) not checked\n",
                d.segment, d.offset, d.lsn
            );
        }
        for &(seq, bytes) in &self.unfinished_spares {
            out += &format!(
                "  spare {}: {bytes} bytes, not a segment's length: a spare whose preparation a crash cut short (created, not yet filled); it holds nothing, and a writer replaces it\n",
                wal::format::segment_file_name(seq)
            );
        }
        let s = &self.stats;
        out += &format!(
            "  {} segments ({} sealed, {} spare), {} records, {} entries, LSN {}..{} walked, next {}, epoch {}\n",
            s.segments,
            s.sealed,
            s.spares,
            s.records,
            s.entries,
            opt(s.min_lsn),
            opt(s.max_lsn),
            opt(s.next_lsn),
            opt(s.epoch)
        );
        out
    }
}

/// The style of a verdict word in the text report: green for good news (OK, CLEAN), dim for
/// NOT_CHECKED, bold magenta for UNSUPPORTED_VERSION (this build is too old), yellow for what a
/// crash explains or a repair handles (TORN_TAIL, CORRUPT_TAIL, INCOMPLETE_CREATE), bold red for
/// the rest (CORRUPT, DIVERGENT, IO_ERROR, ...).
pub fn verdict_style(word: &str) -> Style {
    match word {
        "OK" | "CLEAN" => AnsiColor::Green.on_default(),
        "NOT_CHECKED" => Style::new().dimmed(),
        "UNSUPPORTED_VERSION" => AnsiColor::Magenta.on_default().bold(),
        "TORN_TAIL" | "CORRUPT_TAIL" | "INCOMPLETE_CREATE" => AnsiColor::Yellow.on_default(),
        _ => AnsiColor::Red.on_default().bold(),
    }
}

/// What a directory without a log holds, for humans.
pub fn no_log_text(n: NoLog) -> &'static str {
    match n {
        NoLog::Absent => "no log here: neither wal.meta nor a segment file",
        NoLog::InterruptedCreation => {
            "an interrupted creation: blank segment file(s) and no wal.meta; nothing was acknowledged in it (a writer opening with `create` starts the log anew)"
        }
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |x| x.to_string())
}

/// One line saying what and where.
pub fn describe(d: &Damage) -> String {
    format!(
        "{} at segment {} offset {} (LSN {}, record {}): {}",
        d.verdict, d.segment, d.offset, d.lsn, d.seq, d.kind
    )
}

/// The JSON of a [`Report`]: one object, every key always present (`null` when there is
/// nothing to say).
#[derive(Debug, Serialize)]
pub struct ReportJson<'a> {
    pub dir: String,
    /// `quick` or `full`.
    pub check: &'static str,
    pub crc: &'static str,
    pub state: &'static str,
    pub exit_code: i32,
    pub live: bool,
    /// The verdict and the kind as words, and where (wal-format's `serde` feature).
    pub damage: Option<&'a Damage>,
    pub live_tail: Option<&'a Damage>,
    pub io_error: Option<&'a str>,
    pub no_log: Option<&'static str>,
    pub state_detail: Option<crate::state::StateJson<'a>>,
    pub unfinished_spares: Vec<SpareJson>,
    pub stats: &'a Stats,
}

/// A spare whose preparation a crash cut short: its segment sequence and length.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SpareJson {
    pub segment: u64,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_words_are_coloured_only_when_asked() {
        let r = Report::new(Path::new("d"), false);
        let text = r.to_text(true);
        assert!(text.starts_with("d  CRC \x1b[32mOK\x1b[0m  STATE \x1b[2mNOT_CHECKED\x1b[0m\n"), "{text:?}");
        assert!(!r.to_text(false).contains('\x1b'));
        assert_eq!(verdict_style("CLEAN"), AnsiColor::Green.on_default());
        assert_eq!(verdict_style("UNSUPPORTED_VERSION"), AnsiColor::Magenta.on_default().bold());
        for w in ["TORN_TAIL", "CORRUPT_TAIL", "INCOMPLETE_CREATE"] {
            assert_eq!(verdict_style(w), AnsiColor::Yellow.on_default(), "{w}");
        }
        for w in ["CORRUPT", "DIVERGENT", "IO_ERROR", "NO_LOG"] {
            assert_eq!(verdict_style(w), AnsiColor::Red.on_default().bold(), "{w}");
        }
    }
}
