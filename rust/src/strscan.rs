//! Finding the bytes that matter inside a JSON string body: `"` and `\` (and, when
//! checking strictly, raw control characters < 0x20), 16 bytes at a time.
//!
//! Why not only `memchr2`: real tool results are often JSON or code carried as text, where
//! an escape (`\"`, `\n`) comes every few bytes, and `memchr2`'s per-call set-up cost then
//! dominates. A 16-byte SSE2 compare (baseline on x86_64) yields a bit mask of every
//! special byte in the block, so several escapes in one block cost one load. After a few
//! quiet blocks in a row the scan hands the stretch to `memchr2`, whose wide loop is the
//! fastest on long escape-free runs.

/// Offset in `hay` of the first `"` or `\\` (or, if `CTL`, byte < 0x20).
///
/// Blocks of 16 first; when `QUIET` blocks in a row hold nothing special (and control
/// bytes need not be found), the rest goes to `memchr2`.
#[inline]
pub fn find_special<const CTL: bool, const QUIET: usize>(hay: &[u8]) -> Option<usize> {
    let mut blocks = hay.chunks_exact(16);
    for (n, block) in (&mut blocks).enumerate() {
        let m = mask16::<CTL>(block.try_into().expect("16 bytes"));
        if m != 0 {
            return Some(n * 16 + m.trailing_zeros() as usize);
        }
        if !CTL && n + 1 == QUIET {
            let off = (n + 1) * 16;
            return memchr::memchr2(b'"', b'\\', &hay[off..]).map(|i| off + i);
        }
    }
    let tail = blocks.remainder();
    let off = hay.len() - tail.len();
    tail.iter().position(|&b| is_special(b, CTL)).map(|i| off + i)
}

/// Bit `i` set when `block[i]` is `"`, `\\`, or (if `CTL`) below 0x20.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn mask16<const CTL: bool>(block: &[u8; 16]) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; the load reads exactly the 16 bytes of
    // `block`, and `loadu` has no alignment requirement.
    unsafe {
        let v = _mm_loadu_si128(block.as_ptr().cast());
        let mut m =
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)), _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)));
        if CTL {
            // Unsigned v <= 0x1f  <=>  max(v, 0x1f) == 0x1f.
            let lim = _mm_set1_epi8(0x1f);
            m = _mm_or_si128(m, _mm_cmpeq_epi8(_mm_max_epu8(v, lim), lim));
        }
        _mm_movemask_epi8(m) as u32
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn mask16<const CTL: bool>(block: &[u8; 16]) -> u32 {
    let mut m = 0u32;
    for (i, &b) in block.iter().enumerate() {
        m |= u32::from(is_special(b, CTL)) << i;
    }
    m
}

/// Whether `b` is special for a string body.
#[inline(always)]
pub fn is_special(b: u8, ctl: bool) -> bool {
    b == b'"' || b == b'\\' || (ctl && b < 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_marks_exactly_the_special_bytes() {
        let mut block = [b'a'; 16];
        block[..6].copy_from_slice(&[b'"', b'\\', 0, 0x1f, 0x20, 0xff]);
        block[15] = b'\n';
        assert_eq!(mask16::<false>(&block), 0b11);
        assert_eq!(mask16::<true>(&block), 0b1000_0000_0000_1111);
    }

    fn naive(hay: &[u8], ctl: bool) -> Option<usize> {
        hay.iter().position(|&b| is_special(b, ctl))
    }

    #[test]
    fn find_agrees_with_a_plain_loop() {
        let mut hay = vec![b'a'; 150];
        hay.extend_from_slice(&[0xc3, 0xa9, 0xff, 0x80, 0x7f]);
        for special in [b'"', b'\\', b'\n', 0u8, 0x1f, 0x20] {
            for at in 0..hay.len() {
                let mut h = hay.clone();
                h[at] = special;
                for len in [at, at + 1, h.len()] {
                    let h = &h[..len];
                    assert_eq!(find_special::<false, 2>(h), naive(h, false), "{special} at {at} len {len}");
                    assert_eq!(find_special::<false, 100>(h), naive(h, false), "{special} at {at} len {len}");
                    assert_eq!(find_special::<true, 2>(h), naive(h, true), "{special} at {at} len {len}");
                }
            }
        }
    }
}
