//! Integers beyond 64 bits in a JSON document: where the first one is.
//!
//! A decoder that keeps integers in 64 bits (orjson, the gateway's decoder of a client's
//! request) reads one outside `[-2^63, 2^64)` as the nearest float, without a word, and
//! an encoder writes that float on. The gateway refuses such a request instead, naming
//! the integer; this finds it.
//!
//! Every request body is checked, so a body without such an integer must cost next to
//! nothing. Every such integer is a run of at least [`WIDE_DIGITS`] digits (`-2^63 - 1`
//! has 19): the body is searched for such a run 64 bytes at a time, a mask of its digits
//! per block (SSE2 compares on x86_64), the run found with a few shifts of the mask and
//! carried across blocks, with no branch per digit (a body of numbers costs what a body
//! of prose does). Only a body with such a run is searched again, between its strings
//! (found with `memchr`, their bodies skipped with `memchr2`), and a run found there is an
//! integer unless a `.`, an exponent or a fraction's digits touch it. Nothing recurses or
//! allocates, and every pass is linear in the body's length.

/// The fewest digits an integer outside `[-2^63, 2^64)` has.
pub const WIDE_DIGITS: usize = 19;

/// Whether `buf` holds [`WIDE_DIGITS`] ASCII digits in a row.
pub fn has_digit_run(buf: &[u8]) -> bool {
    digit_run(buf).is_some()
}

/// Bit `i` set when `block[i]` is an ASCII digit.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn digits64(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; each load reads 16 of the 64 bytes of
    // `block`, and `loadu` has no alignment requirement.
    unsafe {
        let (below, above) = (_mm_set1_epi8(b'0' as i8 - 1), _mm_set1_epi8(b'9' as i8 + 1));
        let mut mask = 0u64;
        for i in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * i).cast());
            // Signed compares: a byte of 0x80 or more is below '0'.
            let digit = _mm_and_si128(_mm_cmpgt_epi8(v, below), _mm_cmplt_epi8(v, above));
            mask |= u64::from(_mm_movemask_epi8(digit) as u16) << (16 * i);
        }
        mask
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn digits64(block: &[u8; 64]) -> u64 {
    block.iter().enumerate().fold(0, |mask, (i, b)| mask | u64::from(b.is_ascii_digit()) << i)
}

/// Bit `i` set when bits `i .. i + WIDE_DIGITS` of `mask` are all set: a run of that
/// many digits starts at byte `i` (and ends within the block).
#[inline(always)]
fn run_starts(mask: u64) -> u64 {
    let two = mask & (mask >> 1);
    let four = two & (two >> 2);
    let eight = four & (four >> 4);
    let sixteen = eight & (eight >> 8);
    sixteen & (sixteen >> (WIDE_DIGITS - 16))
}

/// The first maximal run of at least [`WIDE_DIGITS`] ASCII digits in `buf`, as the range
/// of its bytes.
fn digit_run(buf: &[u8]) -> Option<std::ops::Range<usize>> {
    let mut behind = 0; // digits in a row just before `base`
    let mut base = 0;
    let start = loop {
        let Some(block) = buf.get(base..base + 64) else {
            // The last, short block, byte by byte.
            let mut run = behind;
            let tail = buf[base..].iter().position(|b| {
                run = if b.is_ascii_digit() { run + 1 } else { 0 };
                run >= WIDE_DIGITS
            })?;
            break base + tail + 1 - run;
        };
        let mask = digits64(block.try_into().expect("64 bytes"));
        if mask == 0 {
            // Most blocks of most bodies.
            behind = 0;
            base += 64;
            continue;
        }
        if behind + mask.trailing_ones() as usize >= WIDE_DIGITS {
            break base - behind;
        }
        let starts = run_starts(mask);
        if starts != 0 {
            break base + starts.trailing_zeros() as usize;
        }
        behind = if mask == u64::MAX { behind + 64 } else { mask.leading_ones() as usize };
        base += 64;
    };
    let end = buf[start..].iter().position(|b| !b.is_ascii_digit()).map_or(buf.len(), |k| start + k);
    Some(start..end)
}

/// The byte offset of the first integer outside `[-2^63, 2^64)` in the JSON text `buf`
/// (where its sign or first digit is), or None. Digits inside strings, fractions and
/// exponents are no integer. `buf` is meant to be a document a decoder accepted; anything
/// else gives some answer, never a panic.
pub fn first_wide_integer(buf: &[u8]) -> Option<usize> {
    if !has_digit_run(buf) {
        return None; // most bodies
    }
    let mut from = 0;
    while from < buf.len() {
        let quote = memchr::memchr(b'"', &buf[from..]).map_or(buf.len(), |k| from + k);
        if let Some(at) = wide_between_strings(buf, from, quote) {
            return Some(at);
        }
        from = after_string(buf, quote + 1);
    }
    None
}

/// The first wide integer in `buf[from..to]`, a stretch outside any string.
fn wide_between_strings(buf: &[u8], from: usize, to: usize) -> Option<usize> {
    let mut at = from;
    while let Some(run) = digit_run(&buf[at..to]) {
        let (start, end) = (at + run.start, at + run.end);
        let before = |k: usize| start.checked_sub(k).map(|i| buf[i]);
        let signed = before(1) == Some(b'-');
        // A fraction's or an exponent's digits, or an integer part a fraction or an
        // exponent follows: part of a float.
        let in_float = matches!(before(1), Some(b'.' | b'e' | b'E' | b'+'))
            || (signed && matches!(before(2), Some(b'e' | b'E')))
            || matches!(buf.get(end), Some(b'.' | b'e' | b'E'));
        if !in_float && is_wide(&buf[start..end], signed) {
            return Some(start - usize::from(signed));
        }
        at = end;
    }
    None
}

/// The offset after the string whose body starts at `from` (after its closing quote).
fn after_string(buf: &[u8], mut from: usize) -> usize {
    loop {
        match memchr::memchr2(b'"', b'\\', &buf[from.min(buf.len())..]) {
            None => return buf.len(),
            Some(k) if buf[from + k] == b'\\' => from += k + 2, // the escaped byte, whatever it is
            Some(k) => return from + k + 1,
        }
    }
}

/// Whether the magnitude `digits` (ASCII, no sign) with its sign lies outside
/// `[-2^63, 2^64)`.
fn is_wide(digits: &[u8], negative: bool) -> bool {
    if digits.len() < WIDE_DIGITS {
        return false;
    }
    if digits.len() > 20 {
        return true;
    }
    let magnitude = digits.iter().fold(0u128, |n, d| n * 10 + u128::from(d - b'0'));
    if negative {
        magnitude > 1u128 << 63
    } else {
        magnitude > u128::from(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first maximal run of `WIDE_DIGITS` digits or more, found the obvious way.
    fn digit_run_slowly(buf: &[u8]) -> Option<std::ops::Range<usize>> {
        let mut start = 0;
        for digits in buf.split(|b| !b.is_ascii_digit()) {
            if digits.len() >= WIDE_DIGITS {
                return Some(start..start + digits.len());
            }
            start += digits.len() + 1;
        }
        None
    }

    /// The obvious walk, token by token, for the randomized comparison.
    fn first_wide_integer_slowly(buf: &[u8]) -> Option<usize> {
        let mut at = 0;
        while at < buf.len() {
            match buf[at] {
                b'"' => at = after_string(buf, at + 1),
                b'-' | b'0'..=b'9' => {
                    let start = at;
                    let negative = buf[at] == b'-';
                    at += usize::from(negative);
                    let digits_from = at;
                    while at < buf.len() && buf[at].is_ascii_digit() {
                        at += 1;
                    }
                    let integer = !matches!(buf.get(at), Some(b'.' | b'e' | b'E'));
                    if integer && is_wide(&buf[digits_from..at], negative) {
                        return Some(start);
                    }
                    while at < buf.len() && matches!(buf[at], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                        at += 1;
                    }
                }
                _ => at += 1,
            }
        }
        None
    }

    #[test]
    fn wide_integers_are_told_from_strings_and_floats() {
        /// Digits of the lengths around the bounds, often led by 1 or 9 (near 2^64 and 2^63).
        fn digits(next: &mut dyn FnMut() -> u64) -> String {
            let n = [1, 5, 18, 19, 20, 21, 30][(next() % 7) as usize];
            let mut d: String = (0..n).map(|_| char::from(b'0' + (next() % 10) as u8)).collect();
            if next() % 3 == 0 {
                d.replace_range(..1, if next() % 2 == 0 { "1" } else { "9" });
            }
            d
        }
        let mut next = crate::testing::xorshift(0x5be0_cd19_137e_2179u64);
        let mut found = 0;
        for _ in 0..20_000 {
            let mut doc = String::from("[");
            for i in 0..(next() % 6) {
                if i > 0 {
                    doc.push(',');
                }
                let d = digits(&mut next);
                let sign = if next() % 2 == 0 { "-" } else { "" };
                doc += &match next() % 6 {
                    0 => format!("\"{d}\\\"{d}\""),
                    1 => format!("{sign}{d}.{}", digits(&mut next)),
                    2 => format!("{sign}{d}e{sign}{}", digits(&mut next)),
                    3 => format!("{{\"{d}\":{sign}{d}}}"),
                    _ => format!("{sign}{d}"),
                };
            }
            doc.push(']');
            let want = first_wide_integer_slowly(doc.as_bytes());
            found += usize::from(want.is_some());
            assert_eq!(first_wide_integer(doc.as_bytes()), want, "{doc}");
        }
        assert!(found > 3_000, "too few wide integers: {found}");
    }

    #[test]
    fn digit_runs_are_found_wherever_they_lie() {
        let mut next = crate::testing::xorshift(0x3c6e_f372_fe94_f82bu64);
        for round in 0..20_000 {
            // Runs across block boundaries, whole blocks of digits, short tails.
            let len = (next() % if round % 2 == 0 { 90 } else { 300 }) as usize;
            let density = next() % 8; // from no digits to only digits
            let other = b"a.e-\"/:\xff"; // around the digits, and the bytes next to '0' and '9'
            let buf: Vec<u8> = (0..len)
                .map(|_| if next() % 8 < density { b'0' + (next() % 10) as u8 } else { other[(next() % 8) as usize] })
                .collect();
            assert_eq!(digit_run(&buf), digit_run_slowly(&buf), "{buf:?}");
        }
    }

    #[test]
    fn the_64_bit_range_is_kept() {
        for fits in [
            "0",
            "-0",
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            "1000000000000000000",
            "-999999999999999999",
        ] {
            let doc = format!(r#"{{"a":{fits}}}"#);
            assert_eq!(first_wide_integer(doc.as_bytes()), None, "{fits}");
        }
        for wide in [
            "18446744073709551616",
            "-9223372036854775809",
            "-18446744073709551615",
            "99999999999999999999",
            "100000000000000000000000000000",
            "-100000000000000000000000000000",
        ] {
            let doc = format!(r#"{{"a":{wide}}}"#);
            assert_eq!(first_wide_integer(doc.as_bytes()), Some(5), "{wide}");
        }
    }

    #[test]
    fn only_integers_count() {
        let many = "1".repeat(40);
        for doc in [
            format!(r#"{{"s":"{many}"}}"#),
            format!(r#"{{"s":"\"{many}\\"}}"#),
            format!(r#"{{"{many}":1}}"#),
            format!(r#"{{"f":1.{many}}}"#),
            format!(r#"{{"f":{many}.5}}"#),
            format!(r#"{{"f":{many}e3}}"#),
            format!(r#"{{"f":1e{many}}}"#),
            format!(r#"{{"f":-{many}E-2}}"#),
            format!(r#"{{"f":1E+{many}}}"#),
            format!(r#"{{"f":1e-{many}}}"#),
            format!(r#"[0.{many},-0.00{many}]"#),
            "1e30".into(),
        ] {
            assert_eq!(first_wide_integer(doc.as_bytes()), None, "{doc}");
        }
        let doc = format!(r#"{{"s":"a\"{many}","n":[1.5,{many},2]}}"#);
        assert_eq!(first_wide_integer(doc.as_bytes()), doc.find(&format!(",{many}")).map(|i| i + 1));
    }

    #[test]
    fn never_panics_on_what_is_not_json() {
        for doc in [&b"\""[..], b"\\", b"\"\\", b"-", b"--1", b"1111111111111111111111\""] {
            let _ = first_wide_integer(doc);
        }
        assert_eq!(first_wide_integer(b"x-11111111111111111111111"), Some(1));
    }
}
