//! Buffered writes handed to the kernel in pieces of at most [`WRITE_PIECE`] bytes, each
//! ending on a multiple of it in the file.
//!
//! Why: ext4 (Linux 6.16 and later) caches a file in large folios, and a buffered write asks
//! for a folio as large as the write (up to 2 MiB); such memory comes from the page
//! allocator's large free blocks. On the virtual machines this project is measured on, the
//! guest's free memory is backed by the host again on first touch, and copying a write into
//! new page-cache memory cost 2.2-3.4 CPU seconds per GiB against 0.2-0.3 for memory the guest
//! had just used (a C loop of 1 MiB `pwrite`s; docs/performance-journal.md, 2026-12-07, "new
//! memory"). In pieces of 16 KiB the copies get small folios, taken first from small free
//! blocks, which had stayed backed: the engine's 1 GiB bulk load of 1 KiB entries went from
//! 2.6-3.8 to 1.4-2.5 CPU seconds per GiB on its own, and from 1.31-1.34 to 1.06-1.14 with
//! the page-cache budget (`Options::cached_log_bytes`), which removes most of the rest. What
//! it costs where memory is not taken back: one `pwrite` per 16 KiB (0.26 against 0.19 CPU
//! seconds per GiB for 1 MiB writes), and a warm replay of what was written about 5% slower
//! (small folios map a page at a time). The bytes, their order and what reaches the disk are
//! the same; only the system calls are smaller.

use std::io;

/// The most a single `pwrite` of a batch or of zeros covers; pieces end on multiples of it.
pub const WRITE_PIECE: u64 = 16 << 10;

/// Writes `data` at `offset` with `pwrite` calls of at most [`WRITE_PIECE`] bytes, each
/// ending on a multiple of it (the first may be shorter, from an unaligned `offset`), in
/// order, retrying an interrupted call. Returns the bytes written, all of `data` unless a call
/// wrote less than asked or failed after earlier pieces were written (a short write, as
/// `pwrite`'s: the caller's next attempt reports the failure); the error if the first piece
/// failed.
pub fn write_in_pieces(
    offset: u64,
    data: &[u8],
    mut pwrite: impl FnMut(&[u8], u64) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut done = 0usize;
    while done < data.len() {
        let at = offset + done as u64;
        let room = (WRITE_PIECE - at % WRITE_PIECE) as usize;
        let end = done.saturating_add(room).min(data.len());
        let piece = data.get(done..end).unwrap_or_default();
        match pwrite(piece, at) {
            Ok(n) => {
                done += n.min(piece.len());
                if n < piece.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::{write_in_pieces, WRITE_PIECE};
    use std::io;

    const P: u64 = WRITE_PIECE;

    /// The (offset, length) of every call `write_in_pieces` makes for `len` bytes at `offset`.
    fn calls(offset: u64, len: usize) -> (usize, Vec<(u64, usize)>) {
        let data = vec![7u8; len];
        let mut seen = Vec::new();
        let n = write_in_pieces(offset, &data, |b, at| {
            seen.push((at, b.len()));
            Ok(b.len())
        })
        .unwrap();
        (n, seen)
    }

    #[test]
    fn pieces_cover_the_write_in_order_and_end_on_multiples_of_the_piece() {
        for (offset, len) in
            [(0, 1), (0, P as usize), (100, 3 * P as usize), (P - 1, 2), (5 * P + 17, 1 << 20)]
        {
            let (n, seen) = calls(offset, len);
            assert_eq!(n, len, "{offset} {len}");
            let mut at = offset;
            for (i, &(o, l)) in seen.iter().enumerate() {
                assert_eq!(o, at, "piece {i} of {offset}+{len} is not where the last one ended");
                assert!(l as u64 <= P && l > 0, "piece {i} of {offset}+{len}: {l} bytes");
                at += l as u64;
                let last = i + 1 == seen.len();
                assert!(last || at % P == 0, "piece {i} of {offset}+{len} ends at {at}, inside a piece");
            }
            assert_eq!(at, offset + len as u64, "{offset}+{len} not covered");
        }
        // An aligned megabyte is exactly 64 pieces; an unaligned one 65.
        assert_eq!(calls(0, 1 << 20).1.len(), 64);
        assert_eq!(calls(1, 1 << 20).1.len(), 65);
        assert_eq!(calls(0, 0), (0, vec![]));
    }

    #[test]
    fn the_bytes_of_each_piece_are_the_bytes_at_its_offset() {
        let data: Vec<u8> = (0..(3 * P as usize + 999)).map(|i| (i * 31 % 251) as u8).collect();
        let offset = 4321;
        let mut file = vec![0u8; offset + data.len()];
        let n = write_in_pieces(offset as u64, &data, |b, at| {
            file[at as usize..at as usize + b.len()].copy_from_slice(b);
            Ok(b.len())
        })
        .unwrap();
        assert_eq!(n, data.len());
        assert_eq!(&file[offset..], &data[..]);
        assert!(file[..offset].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_short_call_stops_and_reports_what_was_written() {
        let data = vec![1u8; 4 * P as usize];
        let mut calls = 0;
        let n = write_in_pieces(0, &data, |b, _| {
            calls += 1;
            Ok(if calls == 2 { 10 } else { b.len() })
        })
        .unwrap();
        assert_eq!((n, calls), (P as usize + 10, 2));
    }

    #[test]
    fn a_failure_after_progress_is_a_short_write_and_before_it_the_error() {
        let data = vec![1u8; 4 * P as usize];
        let mut calls = 0;
        let n = write_in_pieces(0, &data, |b, _| {
            calls += 1;
            if calls == 3 {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            } else {
                Ok(b.len())
            }
        })
        .unwrap();
        assert_eq!((n, calls), (2 * P as usize, 3));
        let e = write_in_pieces(0, &data, |_, _| Err(io::Error::from_raw_os_error(libc::EIO))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn an_interrupted_call_is_made_again() {
        let data = vec![1u8; 2 * P as usize];
        let mut seen = Vec::new();
        let mut interrupted = false;
        let n = write_in_pieces(0, &data, |b, at| {
            if at == P && !interrupted {
                interrupted = true;
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            seen.push(at);
            Ok(b.len())
        })
        .unwrap();
        assert_eq!(n, data.len());
        assert_eq!(seen, vec![0, P]);
    }
}
