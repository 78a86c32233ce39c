//! A small key-value state machine for the state and pipeline tests: `put k v`, `del k`
//! (deleting a missing key is a domain refusal), `panic` (panics in apply).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use wal_state::{Committed, Outcome, SetDigest, StateMachine};

/// `put k v` / `del k`; deleting a missing key is a domain refusal.
#[derive(Debug, Default)]
pub struct Kv {
    pub map: BTreeMap<String, String>,
    digest: SetDigest,
}

/// Makes `Kv` non-deterministic on purpose (for the DIVERGENT tests); one flag per test binary,
/// so the tests that set it take a lock.
pub static SKEW: AtomicBool = AtomicBool::new(false);
pub static SKEW_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn canon(k: &str, v: &str) -> Vec<u8> {
    [k.as_bytes(), b"\0", v.as_bytes()].concat()
}

impl StateMachine for Kv {
    const VERSION: u32 = 3;

    fn apply(&mut self, e: &Committed<'_>) -> Outcome {
        let text = std::str::from_utf8(e.body).unwrap_or("");
        let mut parts = text.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("put"), Some(k), Some(v)) => {
                let mut v = v.to_string();
                if SKEW.load(Ordering::Relaxed) {
                    v.push('!');
                }
                if let Some(old) = self.map.insert(k.to_string(), v.clone()) {
                    self.digest.remove(&canon(k, &old));
                }
                self.digest.insert(&canon(k, &v));
                Outcome::Done(Vec::new())
            }
            (Some("del"), Some(k), None) => match self.map.remove(k) {
                Some(old) => {
                    self.digest.remove(&canon(k, &old));
                    Outcome::Done(old.into_bytes())
                }
                None => Outcome::Refused(format!("no key {k}")),
            },
            (Some("panic"), _, _) => panic!("apply was told to panic"),
            _ => Outcome::Refused("not a command".into()),
        }
    }

    fn digest(&self) -> SetDigest {
        self.digest
    }

    fn export(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for (k, v) in &self.map {
            writeln!(out, "{k} {v}")?;
        }
        Ok(())
    }

    fn import(input: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(input).map_err(|e| e.to_string())?;
        let mut kv = Kv::default();
        for line in text.lines() {
            let (k, v) = line.split_once(' ').ok_or("a line without a value")?;
            kv.digest.insert(&canon(k, v));
            kv.map.insert(k.into(), v.into());
        }
        Ok(kv)
    }
}
