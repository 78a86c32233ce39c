//! How large a client's write may be, and the answers that say so.
//!
//! A write's command travels as the raw tail of a `Msg::Write` frame, after a JSON head of
//! about 50 bytes (its request id), so the frame limit (`--max-frame-bytes`) bounds it twice:
//!
//! 1. **Its request frame** must fit the limit of each node it reaches: the node the client
//!    sends it to, and the leader a follower forwards it to. A node reads the length field of
//!    a longer frame but not its body and answers `Reply::TooLarge` (see [`super::frame`]); the
//!    client, or the follower that forwarded it, makes that answer [`refused`]: `Rejected`,
//!    not worth retrying, naming both sizes. Nothing was read, so nothing was appended.
//! 2. **The log entry it becomes** must fit one append-entries frame by itself
//!    ([`super::append::max_entry_data`]): entries are replicated in log order, so an entry no
//!    frame can carry would never reach a follower, never commit, and hold back every entry
//!    after it. A node checks this before proposing ([`check`]) and answers `Rejected`.
//!
//! The second is the tighter (an append-entries head and an entry header, a few hundred bytes
//! at most, against the write's head), so the largest command a cluster takes is
//! [`max_command_len`] of its limit: 15,852 bytes with 16 KiB frames, almost all of the frame
//! (the catalog's own bound, 1 MiB of properties, is far below the default 64 MiB). Before
//! commands travelled as raw bytes, a JSON array of numbers took up to four bytes a byte and
//! the bound was about a quarter of the frame. A client applies both checks to its own limit
//! before sending (`Client::max_frame`: the protocol maximum by default), so a client given the
//! cluster's limit refuses an oversized write without sending anything.
//!
//! Every node of a cluster must use one limit. Should a leader's be smaller than a follower's,
//! a write the follower took and forwarded is answered `TooLarge` by the leader, and the
//! follower answers its client `Rejected`: correct, since the leader read nothing. Should it
//! be larger, the leader can append an entry that a follower cannot receive; that follower
//! stops catching up, and the replication error is logged with both sizes.

use crate::net::append::max_entry_data;
use crate::net::frame::{frame_len, TooLarge};
use crate::net::wire::{Msg, WriteReply};
use wal_state::ENVELOPE_LEN;

/// The largest command (in the catalog's encoding) whose log entry an append-entries frame of
/// `max_frame` bytes carries alone: the apply seam's envelope goes in front of it.
pub fn max_command_len(max_frame: usize) -> usize {
    max_entry_data(max_frame).saturating_sub(ENVELOPE_LEN)
}

/// The length field of the `Msg::Write` frame that carries a `command_len`-byte command.
pub fn request_len(request_id: u64, forwarded: bool, command_len: usize) -> usize {
    let head = serde_json::to_vec(&Msg::Write { request_id, forwarded }).map_or(usize::MAX / 2, |j| j.len());
    frame_len(head, command_len)
}

/// The answer to a write whose frame was over `whose` frame limit (`t`): never appended, and
/// no retry can change that.
pub fn refused(t: TooLarge, whose: &str) -> WriteReply {
    WriteReply::Rejected { why: refused_why(t, whose), retry: false }
}

/// The reason [`refused`] gives.
pub fn refused_why(t: TooLarge, whose: &str) -> String {
    format!("nothing was appended: the request is {} bytes, {whose} frame limit is {} bytes", t.len, t.max)
}

/// The refusal of a write of a `command_len`-byte command that frames of `max_frame` bytes
/// (`whose` limit, as the answer says) cannot carry, either as its request or as the log entry
/// it would become; `None` when they can.
pub fn check(
    command_len: usize,
    request_id: u64,
    forwarded: bool,
    max_frame: usize,
    whose: &str,
) -> Option<WriteReply> {
    let len = request_len(request_id, forwarded, command_len);
    if len > max_frame {
        return Some(refused(TooLarge { len: len as u64, max: max_frame as u64 }, whose));
    }
    let most = max_command_len(max_frame);
    (command_len > most).then(|| WriteReply::Rejected {
        why: format!(
            "nothing was appended: the command is {command_len} bytes, and with {whose} frame limit of {max_frame} bytes a log entry holds at most {most} (an entry must fit one append-entries frame to reach a follower)"
        ),
        retry: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(r: Option<WriteReply>) -> String {
        match r {
            Some(WriteReply::Rejected { why, retry: false }) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_write_is_refused_exactly_past_the_largest_command_an_entry_holds() {
        let max = 16 << 10;
        let most = max_command_len(max);
        // The figure the module docs quote, and the raw bytes' gain over JSON numbers.
        assert_eq!(most, 15_852);
        assert!(max_command_len(crate::net::frame::MAX_FRAME_LEN) > (64 << 20) - 600);
        let id = u64::MAX;
        assert!(check(most, id, false, max, "this node's").is_none());
        assert!(request_len(id, false, most) < max, "the entry, not the request, is the bound");
        let w = why(check(most + 1, id, false, max, "this node's"));
        assert!(w.contains(&format!("the command is {} bytes", most + 1)), "{w}");
        assert!(w.contains(&format!("frame limit of {max} bytes a log entry holds at most {most}")), "{w}");
        // Past the frame itself: the request's size is named.
        let big = max;
        let len = request_len(id, false, big);
        let w = why(check(big, id, false, max, "this client's"));
        assert_eq!(
            w,
            format!(
                "nothing was appended: the request is {len} bytes, this client's frame limit is {max} bytes"
            )
        );
        // A forwarded write is no larger than the client's: `true` is shorter than `false`.
        assert!(request_len(id, true, big) <= len);
    }

    /// docs/replication.md quotes the largest command a 16 KiB frame takes, twice (the node
    /// binary's paragraph and `tests/raft/oversized_write.rs`'s row): it must be this one.
    #[test]
    fn the_docs_quote_the_largest_command_of_16_kib_frames() {
        let most = max_command_len(16 << 10).to_string();
        let (head, tail) = most.split_at(most.len() - 3);
        let figure = format!("{head},{tail}");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/replication.md");
        let text = std::fs::read_to_string(path).unwrap();
        let doc = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for quote in [
            format!("({figure} bytes of command with 16 KiB frames;"),
            format!("the largest command taken ({figure} bytes) is Committed"),
        ] {
            assert!(doc.contains(&quote), "docs/replication.md does not say {quote:?}");
        }
    }
}
