//! An append-entries RPC on the wire: a small JSON head (the leader's vote, the previous and
//! committed log ids, each entry's length) and the entries as raw bytes in the frame's tail,
//! each in the log's own entry encoding (`codec::encode_entry`: a log id header, then the
//! command bytes unchanged). JSON would carry a command as an array of numbers, up to four
//! bytes per byte.
//!
//! A batch is bounded in bytes as well as in entries (openraft bounds only the count,
//! `max_payload_entries`): the sender puts in the longest prefix of the entries that fits one
//! frame and, when the follower accepts it, answers openraft `PartialSuccess` with the last
//! log id sent; openraft sends the rest in the next RPC. An entry that does not fit a frame
//! even alone cannot be replicated: that is an error naming its index, never a silent retry.
//! Such an entry is never made from a client's write: a node refuses a command whose entry
//! would exceed [`max_entry_data`] before proposing it ([`crate::net::limit`]).

use crate::codec::{decode_entry, encode_entry};
use crate::net::frame::frame_len;
use crate::{Entry, LogId, Request, TypeConfig, Vote};
use openraft::entry::RaftEntry;
use openraft::raft::AppendEntriesRequest;
use openraft::vote::RaftLeaderIdExt;
use openraft::RaftTypeConfig;
use serde::{Deserialize, Serialize};
use std::io;

/// Room for the message enum's JSON around the head (`{"AppendEntries":` and `}`, 18 bytes),
/// rounded up.
pub const WRAP: usize = 32;

/// Room for one entry's length in the head's `lens` (`4294967295,`).
const LEN_JSON: usize = 11;

/// The JSON part of an append-entries frame; the entries follow as its raw tail.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AppendHead {
    pub vote: Vote,
    pub prev_log_id: Option<LogId>,
    pub leader_commit: Option<LogId>,
    /// The length of each entry in the tail, in order.
    pub lens: Vec<u32>,
}

/// What to send for one openraft append-entries request.
#[derive(Debug)]
pub struct Outgoing {
    pub head: AppendHead,
    pub tail: Vec<u8>,
    /// Fewer entries than asked: the last log id sent (the answer to a success is then
    /// `PartialSuccess` of it).
    pub partial: Option<LogId>,
}

/// Encodes `rpc` into at most `max_frame` bytes, with as many of its entries (from the first)
/// as fit; `wrap` is the size the message enum adds around the head's JSON.
pub fn encode(rpc: &AppendEntriesRequest<TypeConfig>, max_frame: usize, wrap: usize) -> io::Result<Outgoing> {
    let mut head = AppendHead {
        vote: rpc.vote,
        prev_log_id: rpc.prev_log_id,
        leader_commit: rpc.leader_commit,
        lens: Vec::with_capacity(rpc.entries.len()),
    };
    let mut tail = Vec::new();
    let fixed = serde_json::to_vec(&head).map_err(io::Error::other)?.len() + wrap;
    for e in &rpc.entries {
        let bytes = encode_entry(e)?;
        let lens_json = LEN_JSON * (head.lens.len() + 1);
        if frame_len(fixed + lens_json, tail.len() + bytes.len()) > max_frame {
            if head.lens.is_empty() {
                return Err(io::Error::other(format!(
                    "the entry at index {} ({} bytes) does not fit a frame of {max_frame} bytes",
                    e.log_id.index,
                    bytes.len()
                )));
            }
            break;
        }
        head.lens.push(u32::try_from(bytes.len()).map_err(io::Error::other)?);
        tail.extend_from_slice(&bytes);
    }
    let sent = head.lens.len();
    let partial = (sent < rpc.entries.len()).then(|| rpc.entries[sent - 1].log_id);
    Ok(Outgoing { head, tail, partial })
}

/// The most bytes of application data (a [`Request::Command`]: the apply seam's envelope and
/// the command) one entry may hold and still be sent alone in an append-entries frame of
/// `max_frame` bytes by [`encode`] with [`WRAP`], whatever its log id and the RPC's vote and
/// log ids: the head and the entry's own header are sized for the widest values (every
/// number at `u64::MAX`). 0 when not even an empty entry fits.
pub fn max_entry_data(max_frame: usize) -> usize {
    let widest =
        LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(u64::MAX, u64::MAX), u64::MAX);
    let head = |vote| {
        let h = AppendHead { vote, prev_log_id: Some(widest), leader_commit: Some(widest), lens: Vec::new() };
        serde_json::to_vec(&h).map_or(usize::MAX / 4, |j| j.len())
    };
    let fixed = head(Vote::new_committed(u64::MAX, u64::MAX)).max(head(Vote::new(u64::MAX, u64::MAX))) + WRAP;
    let empty = encode_entry(&Entry::new_normal(widest, Request::Command(Vec::new())))
        .map_or(usize::MAX / 4, |b| b.len());
    max_frame.saturating_sub(frame_len(fixed + LEN_JSON, empty))
}

/// Rebuilds the request from a received head and tail.
pub fn decode(head: AppendHead, tail_untrusted: &[u8]) -> io::Result<AppendEntriesRequest<TypeConfig>> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let total: u64 = head.lens.iter().map(|l| u64::from(*l)).sum();
    if total != tail_untrusted.len() as u64 {
        return Err(bad(format!(
            "append-entries lengths add up to {total} bytes, the frame holds {}",
            tail_untrusted.len()
        )));
    }
    let first = head.prev_log_id.map_or(0, |p| p.index + 1);
    let mut entries = Vec::with_capacity(head.lens.len());
    let mut at = 0usize;
    for (i, len) in head.lens.iter().enumerate() {
        let end = at + *len as usize;
        entries.push(decode_entry(first + i as u64, &tail_untrusted[at..end])?);
        at = end;
    }
    Ok(AppendEntriesRequest {
        vote: head.vote,
        prev_log_id: head.prev_log_id,
        entries,
        leader_commit: head.leader_commit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lid(index: u64) -> LogId {
        LogId::new(<TypeConfig as RaftTypeConfig>::LeaderId::new_committed(2, 1), index)
    }

    fn rpc(n: u64, body: usize) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(2, 1),
            prev_log_id: Some(lid(9)),
            entries: (10..10 + n)
                .map(|i| Entry::new_normal(lid(i), Request::Command(vec![i as u8; body])))
                .collect(),
            leader_commit: Some(lid(9)),
        }
    }

    #[test]
    fn entries_travel_raw_and_come_back_the_same() {
        let r = rpc(3, 100);
        let out = encode(&r, 1 << 20, 64).unwrap();
        assert_eq!(out.partial, None);
        // Raw: the tail is the entries' bytes plus a small header each, not JSON numbers.
        assert!(out.tail.len() < 3 * (100 + 100), "{} bytes", out.tail.len());
        let back = decode(out.head, &out.tail).unwrap();
        assert_eq!(
            (back.vote, back.prev_log_id, back.leader_commit),
            (r.vote, r.prev_log_id, r.leader_commit)
        );
        assert_eq!(back.entries, r.entries);
    }

    #[test]
    fn a_batch_larger_than_a_frame_is_cut_to_the_prefix_that_fits() {
        let r = rpc(100, 1000);
        let out = encode(&r, 16 << 10, 64).unwrap();
        let sent = out.head.lens.len();
        assert!((10..100).contains(&sent), "{sent} entries sent");
        assert_eq!(out.partial, Some(lid(9 + sent as u64)));
        let json = serde_json::to_vec(&out.head).unwrap().len();
        assert!(frame_len(json + 64, out.tail.len()) <= 16 << 10);
        let back = decode(out.head, &out.tail).unwrap();
        assert_eq!(back.entries, r.entries[..sent]);
        // One entry alone larger than a frame: an error naming it.
        let err = encode(&rpc(1, 20 << 10), 16 << 10, 64).unwrap_err();
        assert!(err.to_string().contains("index 10"), "{err}");
    }

    #[test]
    fn lengths_that_do_not_match_the_tail_are_an_error() {
        let out = encode(&rpc(2, 10), 1 << 20, 64).unwrap();
        assert!(decode(out.head.clone(), &out.tail[1..]).is_err());
        let mut head = out.head;
        head.lens[0] += 1;
        head.lens[1] -= 1;
        assert!(decode(head, &out.tail).is_err(), "a cut in the wrong place does not decode");
    }
}
