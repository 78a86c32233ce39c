//! Log contents shown on a terminal: a payload is whatever a client wrote, and raw control
//! bytes (ESC sequences, NUL, line ends) would redraw or split an operator's screen and the
//! one-record-per-line output that scripts read. Printable ASCII is shown as is; every other
//! byte is escaped, so the text is unambiguous and reversible.

/// `bytes` as printable ASCII: `\\` for a backslash, `\n`, `\r`, `\t`, and `\xNN` for every
/// other byte outside 0x20..=0x7e (UTF-8 included: a payload's bytes, not its characters).
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(char::from(b)),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::escape_bytes;

    #[test]
    fn control_bytes_and_non_ascii_are_escaped() {
        assert_eq!(escape_bytes(b"ab c"), "ab c");
        assert_eq!(escape_bytes(b"\x1b[2J\0\n\r\t\\\x7f\xc3\xa9"), r"\x1b[2J\x00\n\r\t\\\x7f\xc3\xa9");
    }
}
