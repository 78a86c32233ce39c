//! Little-endian reading of untrusted bytes: every read checks what is left before it slices,
//! and nothing is allocated from a declared length until the bytes it declares are known to be
//! there, so a hostile length costs an error, never a panic or a large allocation.

use crate::{MAX_NAME_LEN, MAX_PROPS_LEN};

/// A cursor over untrusted bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    /// The offset of the next byte to read.
    pub(crate) fn at(&self) -> usize {
        self.at
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at == self.buf.len()
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let left = self.buf.len() - self.at;
        if n > left {
            return Err(format!("{what}: {n} bytes needed at offset {}, {left} left", self.at));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        self.take(n, what)
    }

    /// A name: u32 length, then that many bytes of UTF-8 obeying [`check_name`].
    pub(crate) fn name(&mut self) -> Result<&'a str, String> {
        let at = self.at;
        let len = self.u32("name length")? as usize;
        if len > MAX_NAME_LEN {
            return Err(format!("name length {len} at offset {at} exceeds {MAX_NAME_LEN}"));
        }
        let raw = self.take(len, "name")?;
        let name = std::str::from_utf8(raw).map_err(|e| format!("name at offset {at} is not UTF-8: {e}"))?;
        check_name(name).map_err(|e| format!("name at offset {at}: {e}"))?;
        Ok(name)
    }

    /// Properties: u32 length, then that many opaque bytes.
    pub(crate) fn props(&mut self) -> Result<&'a [u8], String> {
        let at = self.at;
        let len = self.u32("properties length")? as usize;
        if len > MAX_PROPS_LEN {
            return Err(format!("properties length {len} at offset {at} exceeds {MAX_PROPS_LEN}"));
        }
        self.take(len, "properties")
    }

    /// Requires that every byte was read.
    pub(crate) fn finish(&self, what: &str) -> Result<(), String> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes after the {what} at offset {}", self.buf.len() - self.at, self.at))
        }
    }
}

/// The rules for an entity name: 1 to [`MAX_NAME_LEN`] bytes of UTF-8 (the type already
/// guarantees UTF-8), no NUL and no other control character.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an empty name".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("a name of {} bytes (at most {MAX_NAME_LEN})", name.len()));
    }
    // ASCII names (the common case) are checked byte by byte; others char by char, for the
    // C1 controls.
    let control = if name.is_ascii() {
        name.bytes().any(|b| b.is_ascii_control())
    } else {
        name.chars().any(char::is_control)
    };
    if control {
        return Err(format!("a control character in the name {name:?}"));
    }
    Ok(())
}

/// Appends a u32 length (saturated: an oversized field then fails to decode) and the bytes.
pub(crate) fn put_len_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(b);
}
