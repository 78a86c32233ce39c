//! The entry envelope (FORMAT.md section 10.1): the 16 bytes the pipeline puts in front of the
//! state machine's own bytes in every entry it logs, so replay knows an entry's kind and request
//! id without asking the state machine.
//!
//! ```text
//! 0  u8      envelope version (1)
//! 1  u8      kind: 1 = command, 2 = fact
//! 2  [6]     reserved, zero
//! 8  u64 LE  request id (0 = none)
//! 16 ...     the state machine's bytes
//! ```

/// Bytes in front of the state machine's bytes.
pub const ENVELOPE_LEN: usize = 16;
/// The envelope layout version this build writes and reads.
pub const ENVELOPE_VERSION: u8 = 1;

/// Commands are waited for (the caller gets the apply outcome); facts are reported events the
/// caller does not wait for. Both are applied only after commit, through the same seam.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A request the caller waits on for the apply outcome (envelope kind byte 1).
    Command,
    /// An event reported to the controller, not waited on (envelope kind byte 2).
    Fact,
}

/// A decoded envelope, borrowing the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// A command or a fact.
    pub kind: EntryKind,
    /// The request id, `None` when the envelope holds 0.
    pub request_id: Option<u64>,
    /// The state machine's bytes after the envelope.
    pub body: &'a [u8],
}

impl<'a> Envelope<'a> {
    /// Writes the envelope and `body` into `out` (cleared first).
    pub fn encode_into(kind: EntryKind, request_id: Option<u64>, body: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(ENVELOPE_LEN + body.len());
        out.push(ENVELOPE_VERSION);
        out.push(match kind {
            EntryKind::Command => 1,
            EntryKind::Fact => 2,
        });
        out.extend_from_slice(&[0; 6]);
        out.extend_from_slice(&request_id.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(body);
    }

    /// The envelope and `body` as a new buffer.
    pub fn encode(kind: EntryKind, request_id: Option<u64>, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        Envelope::encode_into(kind, request_id, body, &mut v);
        v
    }

    /// Decodes an entry's payload; the error names what is wrong.
    pub fn decode(payload_untrusted: &'a [u8]) -> Result<Envelope<'a>, String> {
        let Some((head, body)) = payload_untrusted.split_first_chunk::<ENVELOPE_LEN>() else {
            return Err(format!(
                "entry of {} bytes is shorter than the {ENVELOPE_LEN}-byte envelope",
                payload_untrusted.len()
            ));
        };
        if head[0] != ENVELOPE_VERSION {
            return Err(format!("unknown envelope version {}", head[0]));
        }
        let kind = match head[1] {
            1 => EntryKind::Command,
            2 => EntryKind::Fact,
            k => return Err(format!("unknown entry kind {k} in the envelope")),
        };
        if head[2..8].iter().any(|&b| b != 0) {
            return Err("non-zero reserved envelope bytes".into());
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&head[8..16]);
        let id = u64::from_le_bytes(id);
        Ok(Envelope { kind, request_id: (id != 0).then_some(id), body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let p = Envelope::encode(EntryKind::Fact, Some(42), b"job 7 started");
        let e = Envelope::decode(&p).unwrap();
        assert_eq!((e.kind, e.request_id, e.body), (EntryKind::Fact, Some(42), &b"job 7 started"[..]));
        let p = Envelope::encode(EntryKind::Command, None, b"");
        assert_eq!(Envelope::decode(&p).unwrap().request_id, None);
        assert!(Envelope::decode(&p[..15]).unwrap_err().contains("shorter"));
        let mut bad = p.clone();
        bad[0] = 2;
        assert!(Envelope::decode(&bad).unwrap_err().contains("version"));
        let mut bad = p.clone();
        bad[1] = 9;
        assert!(Envelope::decode(&bad).unwrap_err().contains("kind"));
        let mut bad = p;
        bad[5] = 1;
        assert!(Envelope::decode(&bad).unwrap_err().contains("reserved"));
    }
}
