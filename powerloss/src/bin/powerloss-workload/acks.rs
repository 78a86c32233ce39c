//! The acknowledgement lines, the payloads they stand for, and the one place that prints them.
//!
//! Every line is `ack <kind> key=value...`. The driver stores the lines it read before a flush
//! and hands them back to `check`, which rebuilds what the image must hold from them alone (no
//! seed argument): so every line carries what its check needs.
//!
//! | line | printed | meaning for the checker |
//! |---|---|---|
//! | `ack entry lsn=L gen=G seed=S` | after the sync that made L durable | L holds `content(S, L, G)` |
//! | `ack cut-begin after=A` | *before* `truncate_after(A)` is issued | entries > A may vanish from here on |
//! | `ack cut after=A gen=G` | after the truncation is durable | no entry > A with a generation < G survives |
//! | `ack epoch epoch=E` | after `advance_epoch(E)` and its sync | the log's epoch is >= E |
//! | `ack purge-begin below=B` | *before* `purge_before(B)` is issued | entries < B may vanish from here on |
//! | `ack purge below=B` | after the purge returned (meta durable, files gone) | the same, for the record |
//! | `ack cmd lsn=L i=I seed=S` | after the pipeline's promise resolved (durable, applied) | entity L is command I's |
//! | `ack raft index=X i=I seed=S` | after the client got `Committed { index: X }` | entity X is command I's |
//!
//! Why the `-begin` lines: a truncation or a purge can reach the disk before the workload
//! learns that it did, so an image may lack entries acknowledged earlier although the
//! operation that removed them was never acknowledged. The workload announces such an
//! operation before it issues it; the announcement is in every ack file whose image can hold
//! the operation's effect (with `--handshake`, the driver records it before the first byte of
//! the operation is written). Nothing else a workload does can remove an acknowledged entry.
//!
//! Generations: the entries appended after the n-th truncation are generation n, so a rewritten
//! LSN has other bytes than the entry it replaced and a resurrected old entry is told apart.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Mutex;

/// One acknowledgement (see the module docs for the semantics of each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ack {
    Entry { lsn: u64, gen: u64, seed: u64 },
    CutBegin { after: u64 },
    Cut { after: u64, gen: u64 },
    Epoch { epoch: u64 },
    PurgeBegin { below: u64 },
    Purge { below: u64 },
    Cmd { lsn: u64, i: u64, seed: u64 },
    Raft { index: u64, i: u64, seed: u64 },
}

impl std::fmt::Display for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ack::Entry { lsn, gen, seed } => write!(f, "ack entry lsn={lsn} gen={gen} seed={seed}"),
            Ack::CutBegin { after } => write!(f, "ack cut-begin after={after}"),
            Ack::Cut { after, gen } => write!(f, "ack cut after={after} gen={gen}"),
            Ack::Epoch { epoch } => write!(f, "ack epoch epoch={epoch}"),
            Ack::PurgeBegin { below } => write!(f, "ack purge-begin below={below}"),
            Ack::Purge { below } => write!(f, "ack purge below={below}"),
            Ack::Cmd { lsn, i, seed } => write!(f, "ack cmd lsn={lsn} i={i} seed={seed}"),
            Ack::Raft { index, i, seed } => write!(f, "ack raft index={index} i={i} seed={seed}"),
        }
    }
}

impl Ack {
    /// Parses one line as printed; `Err` says what is wrong with it.
    pub fn parse(line: &str) -> Result<Ack, String> {
        let mut words = line.split_whitespace();
        if words.next() != Some("ack") {
            return Err(format!("not an ack line: {line:?}"));
        }
        let kind = words.next().ok_or_else(|| format!("no kind in {line:?}"))?;
        let mut kv = BTreeMap::new();
        for w in words {
            let (k, v) = w.split_once('=').ok_or_else(|| format!("{w:?} is not key=value in {line:?}"))?;
            let v: u64 = v.parse().map_err(|_| format!("{k}={v:?} is not a number in {line:?}"))?;
            kv.insert(k, v);
        }
        let mut get = |k: &str| kv.remove(k).ok_or_else(|| format!("{k}= missing in {line:?}"));
        let ack = match kind {
            "entry" => Ack::Entry { lsn: get("lsn")?, gen: get("gen")?, seed: get("seed")? },
            "cut-begin" => Ack::CutBegin { after: get("after")? },
            "cut" => Ack::Cut { after: get("after")?, gen: get("gen")? },
            "epoch" => Ack::Epoch { epoch: get("epoch")? },
            "purge-begin" => Ack::PurgeBegin { below: get("below")? },
            "purge" => Ack::Purge { below: get("below")? },
            "cmd" => Ack::Cmd { lsn: get("lsn")?, i: get("i")?, seed: get("seed")? },
            "raft" => Ack::Raft { index: get("index")?, i: get("i")?, seed: get("seed")? },
            other => return Err(format!("unknown ack kind {other:?} in {line:?}")),
        };
        match kv.keys().next() {
            Some(extra) => Err(format!("unknown key {extra:?} in {line:?}")),
            None => Ok(ack),
        }
    }
}

/// Reads an ack file: every non-blank line must parse.
pub fn read_file(path: &std::path::Path) -> Result<Vec<Ack>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).map(Ack::parse).collect()
}

/// Prints acknowledgements, one at a time across threads. With the handshake, the printing
/// thread waits for one line on stdin while it still holds the lock, so no thread prints (and
/// the printing thread does no engine I/O) before the driver answered.
///
/// With a marks file (`--marks`, the recorder's `marks` file on its FUSE mount), each line is
/// first written there, one `write` per line, by the acknowledging thread itself before it
/// queues for the lock: the recorder logs it in the same sequence as the block writes and
/// flushes, so the mark trails the acknowledgement by one system call, not by a turn at the lock
/// while other threads' syncs go on (which would let an acknowledgement given too early land in
/// a later window and escape the images between).
#[derive(Debug)]
pub struct Acker {
    handshake: bool,
    marks: Option<std::fs::File>,
    lock: Mutex<()>,
}

impl Acker {
    pub fn new(handshake: bool, marks: Option<std::fs::File>) -> Acker {
        Acker { handshake, marks, lock: Mutex::new(()) }
    }

    pub fn say(&self, ack: &Ack) -> Result<(), String> {
        if let Some(mut m) = self.marks.as_ref() {
            m.write_all(format!("{ack}\n").as_bytes()).map_err(|e| format!("writing a mark: {e}"))?;
        }
        let _turn = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = std::io::stdout().lock();
        writeln!(out, "{ack}").and_then(|_| out.flush()).map_err(|e| format!("printing an ack: {e}"))?;
        if self.handshake {
            let mut answer = String::new();
            match std::io::stdin().lock().read_line(&mut answer) {
                Ok(0) => return Err("handshake: stdin closed before the answer".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("handshake: reading stdin: {e}")),
            }
        }
        Ok(())
    }
}

/// The workloads' generator: every choice of a workload comes from its seed.
pub use wal_rng::Rng;

/// The generator for a workload's `seed` (splitmix64, the sequences its seeds were run with).
pub fn seeded(seed: u64) -> Rng {
    Rng::splitmix64(seed ^ 0x5EED_F0F0_11AB_1E00)
}

/// splitmix64's finalizer, as a hash of content keys.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const HEADER: usize = 24;

/// Deterministic bytes for (seed, key, gen), `min..min + spread` long.
pub fn bytes(seed: u64, key: u64, gen: u64, min: usize, spread: u64) -> Vec<u8> {
    let h = mix(seed ^ mix(key ^ mix(gen.wrapping_add(0xC0FFEE))));
    let len = min + (h % spread.max(1)) as usize;
    (0..len).map(|i| (mix(h.wrapping_add(i as u64 / 8)) >> ((i % 8) * 8)) as u8).collect()
}

/// The payload of a plain-log entry: seed, LSN and generation first (so a found payload says
/// what it claims to be), then 0 to 999 bytes that depend on all three.
pub fn content(seed: u64, lsn: u64, gen: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(HEADER + 1000);
    p.extend_from_slice(&seed.to_le_bytes());
    p.extend_from_slice(&lsn.to_le_bytes());
    p.extend_from_slice(&gen.to_le_bytes());
    p.extend(bytes(seed, lsn, gen, 0, 1000));
    p
}

/// What a payload claims to be (seed, LSN, generation), if it is exactly `content` of that.
pub fn decode(payload: &[u8]) -> Option<(u64, u64, u64)> {
    let word =
        |i: usize| payload.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let (seed, lsn, gen) = (word(0)?, word(1)?, word(2)?);
    (content(seed, lsn, gen) == payload).then_some((seed, lsn, gen))
}

/// The catalog command number `i` of a seeded run (pipeline and Raft): a metalake whose name
/// and properties are functions of (seed, i).
pub fn command(seed: u64, i: u64) -> catalog::Command {
    catalog::Command::Create {
        parent: None,
        kind: catalog::EntityKind::Metalake,
        name: command_name(seed, i),
        props: bytes(seed, i, u64::MAX, 16, 600),
    }
}

pub fn command_name(seed: u64, i: u64) -> String {
    format!("s{seed}-c{i}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let all = [
            Ack::Entry { lsn: 1, gen: 2, seed: 3 },
            Ack::CutBegin { after: 4 },
            Ack::Cut { after: 4, gen: 1 },
            Ack::Epoch { epoch: 9 },
            Ack::PurgeBegin { below: 7 },
            Ack::Purge { below: 7 },
            Ack::Cmd { lsn: 5, i: 6, seed: 7 },
            Ack::Raft { index: 5, i: 6, seed: 7 },
        ];
        for a in all {
            assert_eq!(Ack::parse(&a.to_string()), Ok(a));
        }
        assert!(Ack::parse("ack entry lsn=1 gen=2").is_err());
        assert!(Ack::parse("ack entry lsn=1 gen=2 seed=3 x=1").is_err());
        assert!(Ack::parse("ack nothing").is_err());
        assert!(Ack::parse("done").is_err());
    }

    #[test]
    fn payloads_say_what_they_are() {
        let p = content(7, 42, 3);
        assert_eq!(decode(&p), Some((7, 42, 3)));
        let mut q = p.clone();
        if let Some(b) = q.last_mut() {
            *b ^= 1;
        }
        assert!(p.len() == HEADER || decode(&q).is_none());
        assert_ne!(content(7, 42, 3), content(7, 42, 4));
    }
}
