//! The campaign's summary: `key: value` lines after `#` comment lines, printed at the end of
//! every run and written to a file on request. docs/fault-campaign.md quotes the committed
//! run's figures in a table whose rows are `` | `key` | value | `` (in its [`SECTION`]);
//! [`docs_differ`] lists every quoted figure that is not the one in the summary, so the docs
//! cannot drift from the run.

use std::collections::BTreeMap;
use std::fmt::Display;

/// The summary's figures, in the order they were put.
#[derive(Debug, Default)]
pub struct Summary {
    pub figures: Vec<(String, String)>,
}

impl Summary {
    pub fn put(&mut self, key: &str, value: impl Display) {
        let v = value.to_string().replace('\n', " ");
        match self.figures.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.figures.push((key.to_string(), v)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.figures.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The file's text: `header` as comment lines, then the figures.
    pub fn render(&self, header: &[String]) -> String {
        let mut s = String::new();
        for h in header {
            s.push_str(&format!("# {h}\n"));
        }
        for (k, v) in &self.figures {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s
    }
}

/// A summary file's figures. A line that is neither a comment nor `key: value`, or a key given
/// twice, is an error naming its line.
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once(": ") else {
            return Err(format!("line {}: not `key: value`: {line:?}", n + 1));
        };
        if out.insert(k.trim().to_string(), v.trim().to_string()).is_some() {
            return Err(format!("line {}: {k} given twice", n + 1));
        }
    }
    Ok(out)
}

/// The heading of the docs' section that quotes the committed summary.
pub const SECTION: &str = "## The committed run";

/// The figures a Markdown text quotes: in its [`SECTION`], table rows whose first cell is one
/// key in backticks (`` | `faults.total` | 412 | ``), with their line numbers.
pub fn quoted(md: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for (n, line) in md.lines().enumerate() {
        if line.starts_with("## ") {
            inside = line.trim() == SECTION;
            continue;
        }
        if !inside {
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if let [key, value, ..] = cells.as_slice() {
            let key = key.strip_prefix('`').and_then(|k| k.strip_suffix('`'));
            if let Some(k) = key.filter(|k| !k.contains(['`', ' '])) {
                out.push((n + 1, k.to_string(), value.trim_matches('`').to_string()));
            }
        }
    }
    out
}

/// Every figure the docs quote that the summary does not have, or has with another value.
pub fn docs_differ(md: &str, summary: &BTreeMap<String, String>) -> Vec<String> {
    quoted(md)
        .into_iter()
        .filter_map(|(line, k, v)| match summary.get(&k) {
            Some(s) if *s == v => None,
            Some(s) => Some(format!("line {line}: `{k}` is {v:?} in the docs, {s:?} in the summary")),
            None => Some(format!("line {line}: `{k}` is not in the summary")),
        })
        .collect()
}
