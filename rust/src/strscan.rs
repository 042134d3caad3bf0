//! Finding the bytes that matter inside a JSON string body: `"` and `\` (and, when
//! checking strictly, raw control characters < 0x20), 16 bytes at a time.
//!
//! Why not only `memchr2`: real tool results are often JSON or code carried as text, where
//! an escape (`\"`, `\n`) comes every few bytes, and `memchr2`'s per-call set-up cost then
//! dominates. A 16-byte SSE2 compare (baseline on x86_64) yields a bit mask of every
//! special byte in the block, so several escapes in one block cost one load. After a few
//! quiet blocks in a row the scan hands the stretch to `memchr2`, whose wide loop is the
//! fastest on long escape-free runs.

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
}
