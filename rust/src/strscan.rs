//! Finding the bytes that matter inside a JSON string body: `"` and `\` (and, when
//! checking strictly, raw control characters < 0x20), 16 or 64 bytes at a time; the strict
//! pass's 64-byte blocks with AVX2 when the CPU has it (chosen at run time: a wheel built
//! here runs anywhere).
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

/// The special bytes of one 64-byte block, one bit per byte: quotes, backslashes, and
/// (if `CTL`, the strict check) bytes below 0x20 and bytes of 0x80 and above (the ones
/// that need UTF-8 validation; a block without any is ASCII and valid as it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block64 {
    pub quotes: u64,
    pub backslashes: u64,
    pub controls: u64,
    pub non_ascii: u64,
}

impl Block64 {
    const QUIET: Block64 = Block64 { quotes: 0, backslashes: 0, controls: 0, non_ascii: 0 };
}

/// How a 64-byte block is examined: the instructions are chosen once per string scan
/// (`json`'s cursor picks [`Avx2`] for the strict scan when the CPU has it), and the loop
/// over the blocks is compiled once for each. Both first ask whether the block holds any special byte at all
/// (one mask for the whole block) and build the four masks only when it does: most
/// blocks of long text hold none.
pub trait Lanes {
    fn block64<const CTL: bool>(block: &[u8; 64]) -> Block64;
    /// Bit `i` set when `block[i]` is one of `/ b f n r t`: with `"` and `\\` (marked by
    /// [`Lanes::block64`]), the letters that complete a two-byte escape. The strict pass
    /// asks it of a block that holds escapes, so that only `\\u` and invalid escapes are
    /// checked one by one (ordinary text escapes a newline every line, and a byte-by-byte
    /// check of each, a mispredicted branch apiece, costs about a third of a strict scan).
    fn escape_letters(block: &[u8; 64]) -> u64;
}

/// 16 bytes per instruction: SSE2, part of the x86_64 baseline (or plain code elsewhere).
pub struct Baseline;

impl Lanes for Baseline {
    #[inline(always)]
    fn block64<const CTL: bool>(block: &[u8; 64]) -> Block64 {
        block64::<CTL>(block)
    }

    #[inline(always)]
    fn escape_letters(block: &[u8; 64]) -> u64 {
        escape_letters(block)
    }
}

/// 32 bytes per instruction, for CPUs with AVX2.
#[cfg(target_arch = "x86_64")]
pub struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    #[inline(always)]
    fn block64<const CTL: bool>(block: &[u8; 64]) -> Block64 {
        // SAFETY: `Avx2` is only used inside functions compiled for AVX2, which run only
        // after `has_avx2` said the CPU has it.
        unsafe { block64_avx2::<CTL>(block) }
    }

    #[inline(always)]
    fn escape_letters(block: &[u8; 64]) -> u64 {
        // SAFETY: as above.
        unsafe { escape_letters_avx2(block) }
    }
}

/// The letters a two-byte escape may end with, other than `"` and `\\`.
const ESCAPE_LETTERS: [u8; 6] = [b'/', b'b', b'f', b'n', b'r', b't'];

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn escape_letters_avx2(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    // Each byte classified by its two nibbles, one table lookup apiece (`vpshufb`): a
    // letter's high nibble selects one bit (0x2_ -> 1, 0x6_ -> 2, 0x7_ -> 4) and its low
    // nibble the bits of the high nibbles it completes a letter with (`/` 0x2f, `b` 0x62,
    // `f` 0x66, `n` 0x6e, `r` 0x72, `t` 0x74); a byte is a letter when the two share a
    // bit: eight operations per 32 bytes, against twelve for six compares, their ORs and
    // the mask.
    let high_table = _mm256_setr_epi8(
        0, 0, 1, 0, 0, 0, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, //
        0, 0, 1, 0, 0, 0, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0,
    );
    let low_table = _mm256_setr_epi8(
        0, 0, 6, 0, 4, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 1, //
        0, 0, 6, 0, 4, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 1,
    );
    let nibble = _mm256_set1_epi8(0x0f);
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        // SAFETY: the load reads 32 bytes inside `block`; `loadu` has no alignment
        // requirement.
        let v = unsafe { _mm256_loadu_si256(block.as_ptr().add(32 * i).cast()) };
        let high = _mm256_shuffle_epi8(high_table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
        let low = _mm256_shuffle_epi8(low_table, _mm256_and_si256(v, nibble));
        let none = _mm256_cmpeq_epi8(_mm256_and_si256(high, low), _mm256_setzero_si256());
        *half = u64::from(!(_mm256_movemask_epi8(none) as u32));
    }
    halves[0] | halves[1] << 32
}

/// Whether this CPU has AVX2 (the standard library detects it once and caches it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn block64_avx2<const CTL: bool>(block: &[u8; 64]) -> Block64 {
    use std::arch::x86_64::*;
    // SAFETY: each load reads 32 bytes inside `block`; `loadu` has no alignment
    // requirement.
    let (lo, hi) = unsafe {
        (_mm256_loadu_si256(block.as_ptr().cast()), _mm256_loadu_si256(block.as_ptr().add(32).cast()))
    };
    let (q, b, lim) = (_mm256_set1_epi8(b'"' as i8), _mm256_set1_epi8(b'\\' as i8), _mm256_set1_epi8(0x1f));
    let (qlo, qhi) = (_mm256_cmpeq_epi8(lo, q), _mm256_cmpeq_epi8(hi, q));
    let (blo, bhi) = (_mm256_cmpeq_epi8(lo, b), _mm256_cmpeq_epi8(hi, b));
    // Unsigned v <= 0x1f  <=>  max(v, 0x1f) == 0x1f; the sign bits are the bytes >= 0x80.
    let (clo, chi) = if CTL {
        (_mm256_cmpeq_epi8(_mm256_max_epu8(lo, lim), lim), _mm256_cmpeq_epi8(_mm256_max_epu8(hi, lim), lim))
    } else {
        (_mm256_setzero_si256(), _mm256_setzero_si256())
    };
    let mut any = _mm256_or_si256(_mm256_or_si256(qlo, qhi), _mm256_or_si256(blo, bhi));
    if CTL {
        any = _mm256_or_si256(any, _mm256_or_si256(_mm256_or_si256(clo, chi), _mm256_or_si256(lo, hi)));
    }
    if _mm256_movemask_epi8(any) == 0 {
        return Block64::QUIET;
    }
    let pair = |l: __m256i, h: __m256i| -> u64 {
        u64::from(_mm256_movemask_epi8(l) as u32) | u64::from(_mm256_movemask_epi8(h) as u32) << 32
    };
    Block64 {
        quotes: pair(qlo, qhi),
        backslashes: pair(blo, bhi),
        controls: if CTL { pair(clo, chi) } else { 0 },
        non_ascii: if CTL { pair(lo, hi) } else { 0 },
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn block64<const CTL: bool>(block: &[u8; 64]) -> Block64 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; each load reads 16 bytes inside
    // `block`, and `loadu` has no alignment requirement.
    unsafe {
        let (q, b, lim) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8), _mm_set1_epi8(0x1f));
        let mut v = [_mm_setzero_si128(); 4];
        let (mut qs, mut bs, mut cs) = ([_mm_setzero_si128(); 4], [_mm_setzero_si128(); 4], [_mm_setzero_si128(); 4]);
        let mut any = _mm_setzero_si128();
        for i in 0..4 {
            v[i] = _mm_loadu_si128(block.as_ptr().add(16 * i).cast());
            qs[i] = _mm_cmpeq_epi8(v[i], q);
            bs[i] = _mm_cmpeq_epi8(v[i], b);
            any = _mm_or_si128(any, _mm_or_si128(qs[i], bs[i]));
            if CTL {
                cs[i] = _mm_cmpeq_epi8(_mm_max_epu8(v[i], lim), lim);
                any = _mm_or_si128(any, _mm_or_si128(cs[i], v[i]));
            }
        }
        if _mm_movemask_epi8(any) == 0 {
            return Block64::QUIET;
        }
        let (mut quotes, mut backslashes, mut controls, mut non_ascii) = (0u64, 0u64, 0u64, 0u64);
        for i in 0..4 {
            quotes |= u64::from(_mm_movemask_epi8(qs[i]) as u16) << (16 * i);
            backslashes |= u64::from(_mm_movemask_epi8(bs[i]) as u16) << (16 * i);
            if CTL {
                controls |= u64::from(_mm_movemask_epi8(cs[i]) as u16) << (16 * i);
                non_ascii |= u64::from(_mm_movemask_epi8(v[i]) as u16) << (16 * i);
            }
        }
        Block64 { quotes, backslashes, controls, non_ascii }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn block64<const CTL: bool>(block: &[u8; 64]) -> Block64 {
    let (mut quotes, mut backslashes, mut controls, mut non_ascii) = (0u64, 0u64, 0u64, 0u64);
    for (i, &b) in block.iter().enumerate() {
        quotes |= u64::from(b == b'"') << i;
        backslashes |= u64::from(b == b'\\') << i;
        controls |= u64::from(CTL && b < 0x20) << i;
        non_ascii |= u64::from(CTL && b >= 0x80) << i;
    }
    Block64 { quotes, backslashes, controls, non_ascii }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn escape_letters(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    let mut bits = 0u64;
    for i in 0..4 {
        // SAFETY: SSE2 is part of the x86_64 baseline; the load reads 16 bytes inside
        // `block`, and `loadu` has no alignment requirement.
        let m = unsafe {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * i).cast());
            let mut m = _mm_setzero_si128();
            for letter in ESCAPE_LETTERS {
                m = _mm_or_si128(m, _mm_cmpeq_epi8(v, _mm_set1_epi8(letter as i8)));
            }
            _mm_movemask_epi8(m) as u16
        };
        bits |= u64::from(m) << (16 * i);
    }
    bits
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn escape_letters(block: &[u8; 64]) -> u64 {
    let mut bits = 0u64;
    for (i, b) in block.iter().enumerate() {
        bits |= u64::from(ESCAPE_LETTERS.contains(b)) << i;
    }
    bits
}

const EVEN_BITS: u64 = 0x5555_5555_5555_5555;

/// The bytes of a block that follow an odd run of backslashes: those a backslash escapes,
/// other than backslashes themselves (inside a run every other one is escaped, which
/// needs no check), found for the whole block at once. `carry` is 1 when the block's
/// first byte is escaped by the previous block's last backslash, and is set for the
/// next block.
///
/// How: adding a run's start bit to the backslash mask carries through the run and
/// lands on the byte after it; the run is odd exactly when that byte's position has the
/// other parity than the start's, so runs starting on even and on odd bits are added
/// separately. A carry out of the top bit is an odd run that started on an odd bit and
/// reached the block's end. (A bit-parallel technique described by simdjson's authors;
/// this is our own statement of it.)
#[inline(always)]
pub fn escaped_bytes(backslashes: u64, carry: &mut u64) -> u64 {
    let runs = backslashes & !*carry; // a backslash the previous block escaped starts nothing
    let starts = runs & !(runs << 1);
    let after_even = (starts & EVEN_BITS).wrapping_add(runs) & !runs;
    let (sum, overflow) = (starts & !EVEN_BITS).overflowing_add(runs);
    let after_odd = sum & !runs;
    let escaped = (after_even & !EVEN_BITS) | (after_odd & EVEN_BITS) | *carry;
    *carry = u64::from(overflow);
    escaped
}

/// Whether `b` is special for a string body.
#[inline(always)]
pub fn is_special(b: u8, ctl: bool) -> bool {
    b == b'"' || b == b'\\' || (ctl && b < 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-by-byte definition `escaped_bytes` must agree with.
    fn escaped_naive(block: &[u8; 64], carry_in: bool) -> (u64, bool) {
        let (mut escaped, mut pending) = (0u64, carry_in);
        for (i, &b) in block.iter().enumerate() {
            if pending {
                if b != b'\\' {
                    escaped |= 1 << i;
                }
                pending = false;
            } else if b == b'\\' {
                pending = true;
            }
        }
        (escaped | u64::from(carry_in), pending)
    }

    #[test]
    fn escaped_bytes_agrees_with_the_byte_by_byte_definition() {
        let mut next = crate::testing::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..20_000 {
            let mut block = [b'a'; 64];
            // Dense, sparse and all-backslash blocks, with runs crossing the ends.
            let density = [2, 3, 8, 64][round % 4];
            for b in block.iter_mut() {
                let r = next();
                if r % density == 0 {
                    *b = b'\\';
                } else if r % 7 == 1 {
                    *b = b'"';
                }
            }
            if round % 97 == 0 {
                block = [b'\\'; 64];
            }
            for carry_in in [false, true] {
                let mut carry = u64::from(carry_in);
                let got = escaped_bytes(block64::<false>(&block).backslashes, &mut carry);
                let (want, want_carry) = escaped_naive(&block, carry_in);
                assert_eq!((got, carry == 1), (want, want_carry), "{:?} carry {carry_in}", String::from_utf8_lossy(&block));
            }
        }
    }

    #[test]
    fn block64_marks_exactly_the_special_bytes() {
        let mut block = [b'a'; 64];
        block[0] = b'"';
        block[17] = b'\\';
        block[40] = 0x1f;
        block[63] = b'"';
        block[62] = 0x20;
        block[30] = 0x80;
        block[31] = 0xff;
        block[32] = 0x7f;
        let strict = block64::<true>(&block);
        assert_eq!(
            strict,
            Block64 { quotes: 1 | 1 << 63, backslashes: 1 << 17, controls: 1 << 40, non_ascii: 3 << 30 }
        );
        let fast = block64::<false>(&block);
        assert_eq!((fast.controls, fast.non_ascii), (0, 0));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_blocks_agree_with_the_baseline() {
        if !has_avx2() {
            return; // nothing to compare on this CPU (the baseline is tested above)
        }
        let mut next = crate::testing::xorshift(0x1234_5678_9abc_def1u64);
        let alphabet = [b'a', b' ', b'"', b'\\', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xc3, 0xff, b'n'];
        for round in 0..20_000 {
            let mut block = [b'a'; 64];
            let density = [1, 4, 16, 64, 1000][round % 5];
            for b in block.iter_mut() {
                let r = next();
                if r % density == 0 {
                    *b = alphabet[(r >> 8) as usize % alphabet.len()];
                }
            }
            assert_eq!(Avx2::block64::<true>(&block), Baseline::block64::<true>(&block));
            assert_eq!(Avx2::block64::<false>(&block), Baseline::block64::<false>(&block));
        }
    }

    #[test]
    fn escape_letters_mark_exactly_the_letters() {
        let mut next = crate::testing::xorshift(0x0bad_cafe_f00d_u64);
        for _ in 0..20_000 {
            let mut block = [0u8; 64];
            for b in block.iter_mut() {
                *b = (next() >> 7) as u8;
                if *b & 1 == 0 {
                    *b = b"/bfnrtuaB\\\"0"[(*b as usize >> 1) % 11];
                }
            }
            let want = block.iter().enumerate().fold(0u64, |m, (i, b)| m | u64::from(b"/bfnrt".contains(b)) << i);
            assert_eq!(Baseline::escape_letters(&block), want);
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                assert_eq!(Avx2::escape_letters(&block), want);
            }
        }
    }

    #[test]
    fn mask_marks_exactly_the_special_bytes() {
        let mut block = [b'a'; 16];
        block[..6].copy_from_slice(&[b'"', b'\\', 0, 0x1f, 0x20, 0xff]);
        block[15] = b'\n';
        assert_eq!(mask16::<false>(&block), 0b11);
        assert_eq!(mask16::<true>(&block), 0b1000_0000_0000_1111);
    }
}
