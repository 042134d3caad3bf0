//! Newline framing: read buffers of any size in, complete lines out.
//!
//! The splitter looks at every input byte exactly once. `memchr` finds the newlines of a
//! whole chunk; bytes after the last newline are appended to one growable carry buffer and
//! are never searched again (they are known to hold no newline). Lines that lie wholly
//! inside a chunk are reported as ranges into that chunk, so the caller can slice them
//! without a copy; only a line that straddles chunks is assembled in the carry buffer.
//!
//! Memory is bounded: once a partial line grows past `max_line_bytes` (+1 for a possible
//! `\r` that would be stripped) the carry is dropped and the splitter only counts bytes
//! until the next newline, then reports the line as [`Frame::Oversized`]. Meanwhile a
//! [`Skim`] follows the discarded bytes for the line's top-level `id`, so the request the
//! line answers can be failed at once instead of waiting for its deadline.

use std::ops::Range;

use crate::skim::{Skim, Skimmed};

/// 16 MiB: large enough for any sane MCP message, small enough to bound a hostile peer.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One framing result. Line contents never include the `\n` nor a stripped `\r`.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line lying inside the chunk just fed: `chunk[range]`.
    Chunk(Range<usize>),
    /// A complete line assembled from earlier chunks plus the head of this one.
    Owned(Vec<u8>),
    /// A line longer than the limit; it was skipped. Carries its length in bytes and
    /// what the skim learned of it.
    Oversized(usize, Skimmed),
}

impl Frame {
    /// The line bytes, given the chunk the frame was produced from (empty when oversized).
    pub fn bytes<'a>(&'a self, chunk: &'a [u8]) -> &'a [u8] {
        match self {
            Frame::Chunk(r) => &chunk[r.clone()],
            Frame::Owned(v) => v,
            Frame::Oversized(..) => &[],
        }
    }
}

#[derive(Debug)]
pub struct LineSplitter {
    max_line: usize,
    /// The partial line carried over from earlier chunks (contains no `\n`).
    carry: Vec<u8>,
    /// `Some(n)` while discarding an oversized line: `n` bytes of it seen so far.
    skipping: Option<usize>,
    /// Follows the line being discarded (set while `skipping` is).
    skim: Skim,
    /// Whether the last byte seen while skipping was `\r` (it is not part of the size).
    skip_last_cr: bool,
}

/// Length of a line once one trailing `\r` is removed.
#[inline]
fn strip_cr(line: &[u8]) -> &[u8] {
    match line.split_last() {
        Some((b'\r', rest)) => rest,
        _ => line,
    }
}

impl LineSplitter {
    pub fn new(max_line_bytes: usize) -> Self {
        LineSplitter {
            max_line: max_line_bytes,
            carry: Vec::new(),
            skipping: None,
            skim: Skim::new(),
            skip_last_cr: false,
        }
    }

    pub fn max_line_bytes(&self) -> usize {
        self.max_line
    }

    /// Bytes held for the incomplete line (bounded by `max_line_bytes + 1`).
    pub fn buffered(&self) -> usize {
        self.carry.len()
    }

    /// Split `chunk`, appending complete lines to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Frame>) {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', chunk) {
            self.end_line(chunk, start, nl, out);
            start = nl + 1;
        }
        self.hold_tail(&chunk[start..]);
    }

    /// End of stream: an unterminated tail becomes the last line.
    pub fn finish(&mut self, out: &mut Vec<Frame>) {
        if let Some(seen) = self.skipping.take() {
            let size = if self.skip_last_cr { seen - 1 } else { seen };
            self.skip_last_cr = false;
            out.push(Frame::Oversized(size, std::mem::take(&mut self.skim).finish()));
        } else if !self.carry.is_empty() {
            let mut line = std::mem::take(&mut self.carry);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.push_owned(line, out);
        }
    }

    /// A newline at `chunk[nl]` ends the line that began at `chunk[start]` (plus any carry).
    fn end_line(&mut self, chunk: &[u8], start: usize, nl: usize, out: &mut Vec<Frame>) {
        let head = &chunk[start..nl];
        if let Some(seen) = self.skipping.take() {
            // The tail of an oversized line: count it, never store it.
            let last_cr = head.last().map_or(self.skip_last_cr, |&b| b == b'\r');
            let total = seen + head.len() - usize::from(last_cr);
            self.skip_last_cr = false;
            self.skim.feed(head);
            out.push(Frame::Oversized(total, std::mem::take(&mut self.skim).finish()));
        } else if self.carry.is_empty() {
            let line = strip_cr(head);
            if line.len() > self.max_line {
                out.push(Frame::Oversized(line.len(), skimmed(&[line])));
            } else if !line.is_empty() {
                out.push(Frame::Chunk(start..start + line.len()));
            }
        } else {
            // Decide on the size before copying, so an oversized line is never assembled.
            let last_cr = head.last().map_or(self.carry.last() == Some(&b'\r'), |&b| b == b'\r');
            let len = self.carry.len() + head.len() - usize::from(last_cr);
            if len > self.max_line {
                let found = skimmed(&[&self.carry, head]);
                self.carry.clear();
                out.push(Frame::Oversized(len, found));
            } else {
                let mut line = std::mem::take(&mut self.carry);
                line.extend_from_slice(head);
                line.truncate(len);
                self.push_owned(line, out);
            }
        }
    }

    fn push_owned(&mut self, line: Vec<u8>, out: &mut Vec<Frame>) {
        if line.len() > self.max_line {
            out.push(Frame::Oversized(line.len(), skimmed(&[&line])));
        } else if !line.is_empty() {
            out.push(Frame::Owned(line));
        }
    }

    /// Keep the bytes after the last newline for the next feed, or count them if the line
    /// is already too long to keep.
    fn hold_tail(&mut self, tail: &[u8]) {
        if tail.is_empty() {
            return;
        }
        if let Some(seen) = self.skipping.as_mut() {
            *seen += tail.len();
            self.skip_last_cr = tail.last() == Some(&b'\r');
            self.skim.feed(tail);
            return;
        }
        let total = self.carry.len() + tail.len();
        // `+ 1`: a trailing `\r` is not part of the line, so max+1 bytes may still fit.
        if total > self.max_line.saturating_add(1) {
            self.skim = Skim::new();
            self.skim.feed(&self.carry);
            self.skim.feed(tail);
            self.carry.clear();
            // Release a large carry allocation: we are no longer going to need it.
            if self.carry.capacity() > 1 << 20 {
                self.carry = Vec::new();
            }
            self.skipping = Some(total);
            self.skip_last_cr = tail.last() == Some(&b'\r');
        } else {
            self.carry.extend_from_slice(tail);
        }
    }
}

/// What a skim learns from a line held in pieces.
fn skimmed(pieces: &[&[u8]]) -> Skimmed {
    let mut skim = Skim::new();
    for p in pieces {
        skim.feed(p);
    }
    skim.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `chunks` and return each frame as owned bytes (`Err(size)` for oversized).
    fn run(max: usize, chunks: &[&[u8]]) -> Vec<Result<Vec<u8>, usize>> {
        let mut s = LineSplitter::new(max);
        let mut res = Vec::new();
        for c in chunks {
            let mut out = Vec::new();
            s.feed(c, &mut out);
            assert!(s.buffered() <= max + 1);
            for f in &out {
                res.push(match f {
                    Frame::Oversized(n, _) => Err(*n),
                    f => Ok(f.bytes(c).to_vec()),
                });
            }
        }
        let mut out = Vec::new();
        s.finish(&mut out);
        for f in out {
            res.push(match f {
                Frame::Oversized(n, _) => Err(n),
                Frame::Owned(v) => Ok(v),
                Frame::Chunk(_) => unreachable!("finish never refers to a chunk"),
            });
        }
        res
    }

    /// Every way of cutting `data` into two or three pieces gives the same frames.
    fn all_cuts_agree(max: usize, data: &[u8]) -> Vec<Result<Vec<u8>, usize>> {
        let whole = run(max, &[data]);
        for i in 0..=data.len() {
            assert_eq!(run(max, &[&data[..i], &data[i..]]), whole, "cut at {i}");
            for j in i..=data.len() {
                assert_eq!(run(max, &[&data[..i], &data[i..j], &data[j..]]), whole, "cuts {i},{j}");
            }
        }
        let bytes: Vec<&[u8]> = data.chunks(1).collect();
        assert_eq!(run(max, &bytes), whole, "byte by byte");
        whole
    }

    #[test]
    fn splits_strips_cr_and_skips_blank_lines() {
        let got = all_cuts_agree(100, b"a\r\n\nbc\n\r\n\r\rd\nlast\r");
        let want: Vec<Result<Vec<u8>, usize>> =
            vec![Ok(b"a".to_vec()), Ok(b"bc".to_vec()), Ok(b"\r\rd".to_vec()), Ok(b"last".to_vec())];
        assert_eq!(got, want);
    }

    #[test]
    fn oversized_lines_are_reported_with_their_size_and_skipped() {
        let got = all_cuts_agree(4, b"abcd\nabcde\nab\r\nabcd\r\nabcdefgh\r\nxy\nabcdefg");
        let want: Vec<Result<Vec<u8>, usize>> = vec![
            Ok(b"abcd".to_vec()),
            Err(5),
            Ok(b"ab".to_vec()),
            Ok(b"abcd".to_vec()),
            Err(8),
            Ok(b"xy".to_vec()),
            Err(7),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn memory_stays_bounded_for_an_endless_line() {
        let mut s = LineSplitter::new(1024);
        let block = vec![b'x'; 4096];
        let mut out = Vec::new();
        for _ in 0..1000 {
            s.feed(&block, &mut out);
            assert!(s.buffered() <= 1025);
        }
        assert!(out.is_empty());
        s.feed(b"\nok\n", &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], Frame::Oversized(4096 * 1000, Skimmed::default()));
        assert_eq!(out[1].bytes(b"\nok\n"), b"ok");
    }

    #[test]
    fn lines_inside_a_chunk_are_not_copied() {
        let mut s = LineSplitter::new(100);
        let mut out = Vec::new();
        s.feed(b"par", &mut out);
        s.feed(b"tial\nwhole\nnext", &mut out);
        assert_eq!(out, vec![Frame::Owned(b"partial".to_vec()), Frame::Chunk(5..10)]);
        assert_eq!(s.buffered(), 4);
    }

    #[test]
    fn limit_counts_line_without_its_cr() {
        // Exactly max bytes followed by \r\n fits, even when the \r arrives alone.
        assert_eq!(run(3, &[b"abc", b"\r", b"\n"]), vec![Ok(b"abc".to_vec())]);
        assert_eq!(run(3, &[b"abc\r", b"d\n"]), vec![Err(5)]);
    }
}
