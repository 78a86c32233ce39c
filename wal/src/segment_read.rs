//! A segment file's bytes read a window at a time, for classifying damage found by a windowed
//! full scan: classifying reads the damaged record, the sector it starts in and (for a later
//! frame that attests it) the rest of the file, each through one buffer of about a window, so a
//! damaged segment costs a window of memory, not its length.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::classify::SegmentBytes;
use crate::scan::Window;
use crate::storage::{FileId, Reader};

/// Reads are aligned to this many bytes of the file.
pub(crate) const READ_ALIGN: usize = 4096;

/// Segment file `file` of `storage`, read on demand into `buf`.
pub(crate) struct SegmentReader<'s> {
    storage: &'s dyn Reader,
    file: FileId,
    file_len: usize,
    written: usize,
    window: usize,
    buf: &'s mut Vec<u8>,
    /// The file's bytes `base..base + held` are at the front of `buf`.
    base: usize,
    held: usize,
}

impl<'s> SegmentReader<'s> {
    /// Nothing is read past the file's written end ([`Reader::written_end`]): every byte
    /// there is zero.
    pub(crate) fn new(
        storage: &'s dyn Reader,
        file: FileId,
        window: usize,
        buf: &'s mut Vec<u8>,
    ) -> std::io::Result<Self> {
        let file_len = usize::try_from(storage.len(file)?).unwrap_or(usize::MAX);
        let written = usize::try_from(storage.written_end(file)?).unwrap_or(usize::MAX).min(file_len);
        let window = window.next_multiple_of(READ_ALIGN).max(READ_ALIGN);
        Ok(SegmentReader { storage, file, file_len, written, window, buf, base: 0, held: 0 })
    }
}

impl SegmentBytes for SegmentReader<'_> {
    fn file_len(&self) -> usize {
        self.file_len
    }

    fn written(&self) -> usize {
        self.written
    }

    /// An error when the file ended before its length said (it changed under the scan): the
    /// caller judges the segment another way.
    fn window(&mut self, from: usize, to: usize) -> std::io::Result<Window<'_>> {
        let to = to.min(self.file_len);
        if from < self.base || to > self.base + self.held {
            let at = from.min(self.file_len) / READ_ALIGN * READ_ALIGN;
            let len = self.window.max(to.saturating_sub(at)).min(self.file_len - at);
            if self.buf.len() < len {
                self.buf.resize(len, 0);
            }
            let read = self.written.clamp(at, at + len) - at;
            let (head, tail) = self.buf.split_at_mut(read);
            let n = self.storage.read_at(self.file, at as u64, head)?;
            if n != read {
                return Err(std::io::Error::other("the segment changed length during the scan"));
            }
            tail.get_mut(..len - read).unwrap_or_default().fill(0);
            (self.base, self.held) = (at, len);
        }
        let bytes = self.buf.get(..self.held).unwrap_or_default();
        Ok(Window::new(bytes, self.base as u64, self.file_len as u64, None))
    }
}
