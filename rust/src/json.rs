//! A small, allocation-free JSON cursor: the primitives the envelope scanner and the
//! stamper are built from.
//!
//! It never builds a document. It can *decode* a string (the few envelope fields we need as
//! text), *read* an integer, and *skip* any value while checking its structure: balanced
//! brackets, commas and colons in the right places, literals spelled right, the number
//! grammar, valid escapes. Skipping is iterative with an explicit depth counter and a bit
//! stack of container kinds, so hostile nesting can never overflow the native stack.
//!
//! Design choice: when *skipping* a string body we jump from one `"`/`\` to the next
//! (16-byte SSE2 blocks, then `memchr2`; see `strscan`) and do not look at the bytes in
//! between. This is what makes the scan several times cheaper than a decode, and it means a
//! raw control character inside a nested string is not detected here, and a `\u` escape
//! is checked for its four hex digits but not for surrogate pairing. Payloads the codec
//! only forwards are decoded exactly once, later, by the parent (orjson/msgspec), which
//! rejects them. Strings the codec *decodes* (envelope fields) are checked fully, and
//! [`Mode::Strict`] (used when the codec produces output) also rejects raw control
//! characters in every string body, so a line we write can never contain a raw newline.

use std::borrow::Cow;

/// Deeper nesting is an error, never recursion. Counts the top-level container as 1.
pub const MAX_NESTING_DEPTH: usize = 128;

/// After this many 16-byte blocks without a special byte, a string body is assumed to be
/// a long plain stretch and handed to `memchr2` (cheaper than more blocks).
const QUIET_BLOCKS: usize = 8;

/// How thoroughly skipped string bodies are checked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Skip string bodies with memchr2; raw control characters are left to the consumer.
    Fast,
    /// Also reject raw control characters (< 0x20) inside strings.
    Strict,
}

/// A parse failure: what was wrong and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub at: usize,
    pub what: Cow<'static, str>,
}

impl JsonError {
    pub fn new(at: usize, what: impl Into<Cow<'static, str>>) -> Self {
        JsonError { at, what: what.into() }
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.at, self.what)
    }
}

pub type JResult<T> = Result<T, JsonError>;

/// Whether a skipped value was a number with only an integer part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    String,
    Integer,
    Float,
    Bool,
    Null,
    Object,
    Array,
}

impl ValueKind {
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::String => "a string",
            ValueKind::Integer => "an integer",
            ValueKind::Float => "a float",
            ValueKind::Bool => "a boolean",
            ValueKind::Null => "null",
            ValueKind::Object => "an object",
            ValueKind::Array => "an array",
        }
    }
}

/// A cursor over JSON bytes. In [`Mode::Fast`] they must be UTF-8-validated already
/// (callers check with `std::str::from_utf8` first, so slicing between ASCII delimiters
/// always yields valid `str`); [`Mode::Strict`] validates the strings it skips itself.
pub struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    pub mode: Mode,
    /// Whitespace bytes skipped so far: a value skipped while this stayed put holds none,
    /// so it is already compact (what orjson and our own encoders write).
    pub whitespace: usize,
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], mode: Mode) -> Self {
        Cursor { buf, pos: 0, mode, whitespace: 0 }
    }

    #[inline]
    pub fn skip_ws(&mut self) {
        let from = self.pos;
        while let Some(&b) = self.buf.get(self.pos) {
            if !is_ws(b) {
                break;
            }
            self.pos += 1;
        }
        self.whitespace += self.pos - from;
    }

    #[inline]
    /// Up to `n` bytes from the cursor on, unread.
    pub fn ahead(&self, n: usize) -> &'a [u8] {
        &self.buf[self.pos..self.buf.len().min(self.pos + n)]
    }

    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    pub fn err(&self, what: impl Into<Cow<'static, str>>) -> JsonError {
        JsonError::new(self.pos, what)
    }

    pub fn unexpected(&self, wanted: &'static str) -> JsonError {
        match self.peek() {
            None => self.err(format!("unexpected end of input, expected {wanted}")),
            Some(b) if b.is_ascii_graphic() => self.err(format!("unexpected '{}', expected {wanted}", b as char)),
            Some(b) => self.err(format!("unexpected byte 0x{b:02x}, expected {wanted}")),
        }
    }

    /// Skip whitespace, then require byte `b`.
    #[inline]
    pub fn expect(&mut self, b: u8, wanted: &'static str) -> JResult<()> {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    /// Skip the body of a string whose opening quote is at `self.pos - 1`; leaves the
    /// cursor after the closing quote. Returns whether the body contained an escape.
    ///
    /// One 16-byte compare gives a mask of every special byte in a block
    /// ([`crate::strscan::mask16`]); escape-dense text (JSON or code carried as a string)
    /// then costs a few instructions per escape, not a search call each. After a few quiet
    /// blocks in a row the rest of a long plain stretch goes to `memchr2`'s wider loop.
    ///
    /// Strict mode also validates the body as UTF-8, where it needs it: the 64-byte blocks
    /// mark bytes of 0x80 and above, and only a string that has one (or whose short tail,
    /// after the last whole block, has one) is passed to `std::str::from_utf8`. Outside
    /// strings JSON is ASCII, and the structure checks refuse any other byte, so a strict
    /// skip of a whole value validates all of it in the same pass.
    #[inline]
    fn skip_string_body(&mut self) -> JResult<bool> {
        if self.mode == Mode::Strict {
            self.strict_string_body().map(|(escaped, _)| escaped)
        } else {
            self.skip_string_body_with::<false>().map(|(escaped, _, _)| escaped)
        }
    }

    /// The strict skip of a string body: returns whether it held an escape and whether
    /// it is plain ASCII (when not, it has been validated as UTF-8).
    #[inline]
    fn strict_string_body(&mut self) -> JResult<(bool, bool)> {
        let start = self.pos;
        let (escaped, non_ascii, tail) = self.skip_string_body_with::<true>()?;
        let body = &self.buf[start..self.pos - 1];
        let ascii = !non_ascii && self.buf[tail.min(self.pos - 1)..self.pos - 1].is_ascii();
        if !ascii {
            if let Err(e) = std::str::from_utf8(body) {
                self.pos = start + e.valid_up_to();
                return Err(self.err("invalid UTF-8"));
            }
        }
        Ok((escaped, ascii))
    }

    /// The string at the cursor (whitespace allowed before it), as [`Text`]: its
    /// structure and escapes checked strictly whatever the cursor's mode, its UTF-8 and
    /// its escapes' meaning left to [`Text::decode`], so that a caller can first decide
    /// what to do with it from its length and kind.
    pub fn text(&mut self) -> JResult<Text<'a>> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("a string"));
        }
        self.pos += 1;
        let start = self.pos;
        let (escaped, non_ascii, tail) = self.skip_string_body_with::<true>()?;
        let end = self.pos - 1;
        let ascii = !non_ascii && self.buf[tail.min(end)..end].is_ascii();
        Ok(Text { body: &self.buf[start..end], start, escaped, ascii })
    }

    /// The number at the cursor (whitespace allowed before it), checked: its text, and
    /// whether it is a plain integer (no fraction, no exponent).
    pub fn number(&mut self) -> JResult<(&'a str, bool)> {
        self.skip_ws();
        let start = self.pos;
        let integer = self.skip_number()?;
        Ok((std::str::from_utf8(&self.buf[start..self.pos]).expect("the number grammar is ASCII"), integer))
    }

    /// Returns whether the body held an escape, whether a whole block scanned held a byte
    /// of 0x80 or above (strict only; the block holding the end counts whole), and where
    /// the scan by whole blocks stopped (the tail after it was not looked at that way).
    #[inline]
    fn skip_string_body_with<const CTL: bool>(&mut self) -> JResult<(bool, bool, usize)> {
        #[cfg(target_arch = "x86_64")]
        if CTL && crate::strscan::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked just now).
            return unsafe { self.skip_strict_string_blocks_avx2() };
        }
        self.skip_string_blocks::<CTL, crate::strscan::Baseline>()
    }

    /// The strict [`Self::skip_string_blocks`] compiled for AVX2 (the non-strict scan is
    /// slower with it and keeps SSE2).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn skip_strict_string_blocks_avx2(&mut self) -> JResult<(bool, bool, usize)> {
        self.skip_string_blocks::<true, crate::strscan::Avx2>()
    }

    #[inline(always)]
    fn skip_string_blocks<const CTL: bool, L: crate::strscan::Lanes>(&mut self) -> JResult<(bool, bool, usize)> {
        use crate::strscan::escaped_bytes;
        let buf = self.buf;
        let mut escaped = false;
        let mut non_ascii = 0u64;
        // Every byte before `p` has been consumed, except that with `carry` set the byte
        // at `p` is escaped by the backslash before it.
        let mut p = self.pos;
        let mut carry = 0u64;
        let mut quiet = 0usize;
        // 64 bytes at a time: the first quote no backslash escapes ends the string. The
        // escapes before it other than \" and \\ are checked one by one (strictly, only
        // those no letter of `/bfnrt` completes: `\u` or an invalid one; the non-strict
        // scan is slower with that filter); a control byte (strict) hands the block
        // to the 16-byte path, which says exactly what is wrong.
        while let Some(block) = buf.get(p..p + 64) {
            let m = L::block64::<CTL>(block.try_into().expect("64 bytes"));
            non_ascii |= m.non_ascii;
            if m.backslashes == 0 && carry == 0 {
                if m.quotes | m.controls != 0 {
                    break; // the end (or an error) is in this block: the 16-byte path finds it
                }
                p += 64;
                quiet += 1;
                if !CTL && quiet == QUIET_BLOCKS / 4 {
                    quiet = 0;
                    // A long plain stretch: let the wide memchr2 loop find its end.
                    p = memchr::memchr2(b'"', b'\\', &buf[p..]).map_or(buf.len(), |i| p + i);
                }
                continue;
            }
            quiet = 0;
            if carry == 0 && m.quotes | m.controls == 0 && m.backslashes & (m.backslashes << 1 | 1 << 63) == 0 {
                // The usual block of text with escapes: lone backslashes, none at the
                // block's end, no quote, no control byte. Each escapes the byte after it,
                // found with a shift instead of the general count of backslash runs.
                escaped = true;
                let mut to_check = m.backslashes << 1;
                if CTL {
                    to_check &= !L::escape_letters(block.try_into().expect("64 bytes"));
                }
                self.check_escapes(p, to_check)?;
                p += 64;
                continue;
            }
            let carried = carry;
            let escapes = escaped_bytes(m.backslashes, &mut carry);
            let ends = m.quotes & !escapes;
            let before_end = if ends == 0 { !0 } else { (ends & ends.wrapping_neg()) - 1 };
            if m.controls & before_end != 0 {
                carry = carried;
                break;
            }
            escaped |= carried != 0 || m.backslashes & before_end != 0;
            let mut to_check = escapes & !m.quotes & !m.backslashes & before_end;
            if CTL && to_check != 0 {
                to_check &= !L::escape_letters(block.try_into().expect("64 bytes"));
            }
            self.check_escapes(p, to_check)?;
            if ends != 0 {
                self.pos = p + ends.trailing_zeros() as usize + 1;
                return Ok((escaped, non_ascii != 0, self.pos));
            }
            p += 64;
        }
        let tail = p;
        if carry != 0 {
            // The escape the last whole block began: checked, then stepped over.
            escaped = true;
            p = self.special_at(p - 1)?.expect("a backslash starts an escape");
        }
        Ok((self.skip_string_tail::<CTL>(p, escaped)?, non_ascii != 0, tail))
    }

    /// Checks one by one the escapes of the block at `p` whose escaped bytes `to_check`
    /// marks (the backslash is the byte before: the previous block's last, for bit 0).
    #[inline(always)]
    fn check_escapes(&mut self, p: usize, mut to_check: u64) -> JResult<()> {
        while to_check != 0 {
            self.special_at(p + to_check.trailing_zeros() as usize - 1)?;
            to_check &= to_check - 1;
        }
        Ok(())
    }

    /// The 16-byte path: the rest of a string body from `p` (no escape in progress).
    fn skip_string_tail<const CTL: bool>(&mut self, mut p: usize, mut escaped: bool) -> JResult<bool> {
        use crate::strscan::{is_special, mask16};
        let buf = self.buf;
        let mut quiet = 0usize;
        loop {
            let Some(block) = buf.get(p..p + 16) else {
                // Fewer than 16 bytes left: byte by byte.
                match buf[p..].iter().position(|&b| is_special(b, CTL)) {
                    None => {
                        self.pos = buf.len();
                        return Err(self.err("unterminated string"));
                    }
                    Some(i) => {
                        let at = p + i;
                        match self.special_at(at)? {
                            None => {
                                self.pos = at + 1;
                                return Ok(escaped);
                            }
                            Some(next) => {
                                escaped = true;
                                p = next;
                                continue;
                            }
                        }
                    }
                }
            };
            let mut m = mask16::<CTL>(block.try_into().expect("16 bytes"));
            if m == 0 {
                p += 16;
                quiet += 1;
                if !CTL && quiet == QUIET_BLOCKS {
                    quiet = 0;
                    // A long plain stretch: let the wide memchr2 loop find its end.
                    p = memchr::memchr2(b'"', b'\\', &buf[p..]).map_or(buf.len(), |i| p + i);
                }
                continue;
            }
            quiet = 0;
            // Walk the special bytes of this block without reloading it.
            loop {
                let at = p + m.trailing_zeros() as usize;
                match self.special_at(at)? {
                    None => {
                        self.pos = at + 1;
                        return Ok(escaped);
                    }
                    Some(next) => {
                        escaped = true;
                        let shift = next - p;
                        if shift >= 16 {
                            p = next;
                            break;
                        }
                        m &= !0u32 << shift; // drop bits inside the escape just stepped over
                        if m == 0 {
                            p += 16;
                            break;
                        }
                    }
                }
            }
        }
    }

    /// At a special byte inside a string: `None` for the closing quote, `Some(next)` after
    /// a valid escape, an error for a bad escape or a raw control character.
    #[inline(always)]
    fn special_at(&mut self, at: usize) -> JResult<Option<usize>> {
        let buf = self.buf;
        match buf[at] {
            b'"' => Ok(None),
            b'\\' => match buf.get(at + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(Some(at + 2)),
                Some(b'u') if self.hex4(at + 2).is_ok() => Ok(Some(at + 6)),
                None => {
                    self.pos = buf.len();
                    Err(self.err("unterminated string"))
                }
                _ => {
                    self.pos = at;
                    Err(self.err("invalid escape in string"))
                }
            },
            _ => {
                self.pos = at;
                Err(self.err("raw control character in string"))
            }
        }
    }

    fn hex4(&self, at: usize) -> JResult<u16> {
        let digits = self.buf.get(at..at + 4).ok_or_else(|| JsonError::new(at, "truncated \\u escape"))?;
        hex4_value(digits).ok_or_else(|| JsonError::new(at, "invalid \\u escape"))
    }

    /// Decode a string at the cursor (whitespace allowed before it). Borrows from the input
    /// when it holds no escapes. Always checks for raw control characters: decoded strings
    /// are envelope fields and must be exactly right.
    pub fn parse_string(&mut self) -> JResult<Cow<'a, str>> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("a string"));
        }
        self.pos += 1;
        let start = self.pos;
        let saved = self.mode;
        self.mode = Mode::Strict;
        let escaped = self.skip_string_body();
        self.mode = saved;
        let escaped = escaped?;
        let body = &self.buf[start..self.pos - 1];
        if !escaped {
            // SAFETY-free: the buffer was validated as UTF-8 and the quotes are ASCII.
            return Ok(Cow::Borrowed(std::str::from_utf8(body).map_err(|_| JsonError::new(start, "invalid UTF-8"))?));
        }
        unescape(start, body, false).map(|(s, _)| Cow::Owned(s))
    }

    /// Check the number grammar at the cursor; returns whether it was a plain integer.
    fn skip_number(&mut self) -> JResult<bool> {
        let b = self.buf;
        let mut p = self.pos;
        if b.get(p) == Some(&b'-') {
            p += 1;
        }
        match b.get(p) {
            Some(b'0') => p += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(p), Some(b'0'..=b'9')) {
                    p += 1;
                }
            }
            _ => return Err(JsonError::new(p, "invalid number")),
        }
        let mut integer = true;
        if b.get(p) == Some(&b'.') {
            integer = false;
            p += 1;
            if !matches!(b.get(p), Some(b'0'..=b'9')) {
                return Err(JsonError::new(p, "invalid number: digit expected after '.'"));
            }
            while matches!(b.get(p), Some(b'0'..=b'9')) {
                p += 1;
            }
        }
        if matches!(b.get(p), Some(b'e' | b'E')) {
            integer = false;
            p += 1;
            if matches!(b.get(p), Some(b'+' | b'-')) {
                p += 1;
            }
            if !matches!(b.get(p), Some(b'0'..=b'9')) {
                return Err(JsonError::new(p, "invalid number: digit expected in exponent"));
            }
            while matches!(b.get(p), Some(b'0'..=b'9')) {
                p += 1;
            }
        }
        self.pos = p;
        Ok(integer)
    }

    pub fn skip_literal(&mut self, lit: &'static [u8]) -> JResult<()> {
        if self.buf[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// Skip one value (whitespace allowed before it) after checking its structure.
    /// `depth` is the nesting depth of the container holding it (0 at the top level).
    /// Returns the value's kind and its span (without surrounding whitespace).
    pub fn skip_value(&mut self, depth: usize) -> JResult<(ValueKind, usize, usize)> {
        self.skip_ws();
        let start = self.pos;
        let kind = match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                self.skip_string_body()?;
                ValueKind::String
            }
            Some(b'-' | b'0'..=b'9') => {
                if self.skip_number()? {
                    ValueKind::Integer
                } else {
                    ValueKind::Float
                }
            }
            Some(b't') => {
                self.skip_literal(b"true")?;
                ValueKind::Bool
            }
            Some(b'f') => {
                self.skip_literal(b"false")?;
                ValueKind::Bool
            }
            Some(b'n') => {
                self.skip_literal(b"null")?;
                ValueKind::Null
            }
            Some(b'{') => {
                self.skip_container(depth)?;
                ValueKind::Object
            }
            Some(b'[') => {
                self.skip_container(depth)?;
                ValueKind::Array
            }
            _ => return Err(self.unexpected("a value")),
        };
        Ok((kind, start, self.pos))
    }

    /// Skip an object or array starting at the cursor, iteratively. A bit stack records
    /// whether each open container is an object (1) or an array (0).
    fn skip_container(&mut self, base_depth: usize) -> JResult<()> {
        const WORDS: usize = MAX_NESTING_DEPTH.div_ceil(64);
        let mut kinds = [0u64; WORDS];
        let mut open = 0usize; // containers opened by this call and not yet closed
        let is_obj = |kinds: &[u64; WORDS], level: usize| kinds[level / 64] >> (level % 64) & 1 == 1;

        // Invariant at the top of the loop: the cursor is at a value to read.
        'value: loop {
            self.skip_ws();
            match self.peek() {
                Some(c @ (b'{' | b'[')) => {
                    if base_depth + open + 1 > MAX_NESTING_DEPTH {
                        return Err(self.err(format!("nesting deeper than {MAX_NESTING_DEPTH}")));
                    }
                    let level = open;
                    if c == b'{' {
                        kinds[level / 64] |= 1 << (level % 64);
                    } else {
                        kinds[level / 64] &= !(1 << (level % 64));
                    }
                    open += 1;
                    self.pos += 1;
                    self.skip_ws();
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        open -= 1;
                    } else {
                        if c == b'{' {
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                }
                _ => {
                    // A scalar: `skip_value` never recurses for these.
                    self.skip_value(base_depth + open)?;
                }
            }
            // After a complete value: close containers or move to the next element.
            loop {
                if open == 0 {
                    return Ok(());
                }
                let obj = is_obj(&kinds, open - 1);
                self.skip_ws();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if obj {
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if obj => {
                        self.pos += 1;
                        open -= 1;
                    }
                    Some(b']') if !obj => {
                        self.pos += 1;
                        open -= 1;
                    }
                    _ => return Err(self.unexpected(if obj { "',' or '}'" } else { "',' or ']'" })),
                }
            }
        }
    }

    /// `"key" :` inside an object being skipped: the key as written between its quotes
    /// (escapes not decoded) and whether it holds an escape.
    #[inline]
    fn member_key(&mut self) -> JResult<(&'a [u8], bool)> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return Err(self.unexpected("a string key"));
        }
        self.pos += 1;
        let start = self.pos;
        let escaped = self.skip_string_body()?;
        let key = &self.buf[start..self.pos - 1];
        self.expect(b':', "':'")?;
        Ok((key, escaped))
    }

    /// Skip an object whose `{` is at the cursor (after whitespace) exactly as
    /// `skip_value(depth)` would, same checks and same errors at the same bytes, but call
    /// `member(cursor, raw_key, escaped)` with the cursor before each member's value:
    /// `raw_key` is the key as written between its quotes (compare it with
    /// [`raw_str_eq`]), `escaped` whether it holds an escape. The callback must consume
    /// the value, with `skip_value(depth + 1)` to count nesting as skipping does. Keys are
    /// skipped, not decoded: nothing is allocated. Returns the object's span.
    pub fn skip_object<F>(&mut self, depth: usize, mut member: F) -> JResult<(usize, usize)>
    where
        F: FnMut(&mut Cursor<'a>, &'a [u8], bool) -> JResult<()>,
    {
        self.skip_ws();
        let start = self.pos;
        if self.peek() != Some(b'{') {
            return Err(self.unexpected("'{'"));
        }
        if depth + 1 > MAX_NESTING_DEPTH {
            return Err(self.err(format!("nesting deeper than {MAX_NESTING_DEPTH}")));
        }
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok((start, self.pos));
        }
        loop {
            let (key, escaped) = self.member_key()?;
            member(self, key, escaped)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok((start, self.pos));
                }
                _ => return Err(self.unexpected("',' or '}'")),
            }
        }
    }

    /// Parse an integer value that must fit `i64`. The caller has classified it as an
    /// integer with `skip_value`; this converts the span.
    pub fn int_of(&self, start: usize, end: usize) -> Option<i64> {
        std::str::from_utf8(&self.buf[start..end]).ok()?.parse::<i64>().ok()
    }

    /// Iterate the members of an object whose `{` is at the cursor (after whitespace):
    /// calls `member(cursor, decoded_key, raw_key_span)` with the cursor before each value
    /// (the raw span includes the quotes); the callback must consume exactly that value.
    pub fn object<F>(&mut self, mut member: F) -> JResult<()>
    where
        F: FnMut(&mut Cursor<'a>, Cow<'a, str>, (usize, usize)) -> JResult<()>,
    {
        self.expect(b'{', "'{'")?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            let key_at = self.pos;
            let key = self.parse_string()?;
            let key_span = (key_at, self.pos);
            self.expect(b':', "':'")?;
            member(self, key, key_span)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.unexpected("',' or '}'")),
            }
        }
    }

    /// Require that only whitespace is left.
    pub fn end(&mut self) -> JResult<()> {
        self.skip_ws();
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(self.err("trailing data after the top-level value"))
        }
    }
}

/// Copy `body[from..]` to `out` up to the next backslash and return its index, or copy
/// all of it and return None. 16 bytes at a time: escape-dense text (JSON carried as a
/// string escapes a quote every few bytes) would pay a search call's set-up per escape.
/// Inside a checked body the first `"` or `\\` of a block is always a backslash (a
/// quote there is escaped), so the block mask of both serves.
fn copy_to_backslash(body: &[u8], mut from: usize, out: &mut Vec<u8>) -> Option<usize> {
    while let Some(block) = body.get(from..from + 16) {
        let block: &[u8; 16] = block.try_into().expect("16 bytes");
        out.extend_from_slice(block);
        let mask = crate::strscan::mask16::<false>(block);
        if mask != 0 {
            let k = mask.trailing_zeros() as usize;
            out.truncate(out.len() - (16 - k));
            return Some(from + k);
        }
        from += 16;
    }
    let rest = &body[from..];
    match memchr::memchr(b'\\', rest) {
        Some(k) => {
            out.extend_from_slice(&rest[..k]);
            Some(from + k)
        }
        None => {
            out.extend_from_slice(rest);
            None
        }
    }
}

/// A string as [`Cursor::text`] found it: checked but not yet decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text<'a> {
    /// The body between the quotes, as written.
    pub body: &'a [u8],
    /// Where the body starts in the cursor's input (for error positions).
    pub start: usize,
    /// Whether the body holds an escape.
    pub escaped: bool,
    /// Whether the body is plain ASCII (then it is valid UTF-8 as it is).
    pub ascii: bool,
}

impl<'a> Text<'a> {
    /// The string (UTF-8 checked unless ASCII, escapes decoded), and whether it is plain
    /// ASCII (a `\u` escape may make an ASCII body's text other).
    pub fn decode(&self) -> JResult<(Cow<'a, str>, bool)> {
        if !self.ascii {
            if let Err(e) = std::str::from_utf8(self.body) {
                return Err(JsonError::new(self.start + e.valid_up_to(), "invalid UTF-8"));
            }
        }
        if self.escaped {
            return unescape(self.start, self.body, self.ascii).map(|(s, ascii)| (Cow::Owned(s), ascii));
        }
        // SAFETY: the body is ASCII, or was validated as UTF-8 just now.
        Ok((Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(self.body) }), self.ascii))
    }
}

/// The four hex digits at `body[i..]` (`at`: their place in the input, for the error).
fn hex4_at(body: &[u8], i: usize, at: usize) -> JResult<u16> {
    let digits = body.get(i..i + 4).ok_or_else(|| JsonError::new(at, "truncated \\u escape"))?;
    hex4_value(digits).ok_or_else(|| JsonError::new(at, "invalid \\u escape"))
}

/// Decode the escapes of a string body that starts at `start`, which the strict skip
/// has checked (so its runs between escapes are valid UTF-8 as they are). `ascii`:
/// the body is plain ASCII. Returns the text and whether it is plain ASCII (a `\u`
/// escape may make it other).
fn unescape(start: usize, body: &[u8], ascii: bool) -> JResult<(String, bool)> {
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut out_ascii = ascii;
    let mut i = 0;
    while let Some(j) = copy_to_backslash(body, i, &mut out) {
        i = j;
        let at = start + i;
        let escape = body.get(i + 1).copied().unwrap_or(0);
        if let Some(b) = short_escape(escape) {
            out.push(b);
            i += 2;
            continue;
        }
        if escape != b'u' {
            return Err(JsonError::new(at, "invalid escape in string"));
        }
        let hi = hex4_at(body, i + 2, at + 2)?;
        i += 4;
        let c = match hi {
            0xD800..=0xDBFF => {
                // A high surrogate must be followed by an escaped low surrogate.
                if body.get(i + 2) != Some(&b'\\') || body.get(i + 3) != Some(&b'u') {
                    return Err(JsonError::new(at, "unpaired surrogate in \\u escape"));
                }
                let lo = hex4_at(body, i + 4, start + i + 4)?;
                if !(0xDC00..=0xDFFF).contains(&lo) {
                    return Err(JsonError::new(at, "unpaired surrogate in \\u escape"));
                }
                i += 6;
                let cp = 0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
                char::from_u32(cp).ok_or_else(|| JsonError::new(at, "invalid \\u escape"))?
            }
            0xDC00..=0xDFFF => return Err(JsonError::new(at, "unpaired surrogate in \\u escape")),
            _ => char::from_u32(u32::from(hi)).ok_or_else(|| JsonError::new(at, "invalid \\u escape"))?,
        };
        out_ascii &= c.is_ascii();
        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        i += 2;
    }
    // SAFETY: the runs are valid UTF-8 (split from a checked body at ASCII backslashes)
    // and each escape was written as one whole character's UTF-8.
    Ok((unsafe { String::from_utf8_unchecked(out) }, out_ascii))
}


/// The value of four hex digits; None if one is not a hex digit.
fn hex4_value(digits: &[u8]) -> Option<u16> {
    digits.iter().try_fold(0u16, |v, &d| {
        let n = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        Some(v << 4 | u16::from(n))
    })
}

/// The byte a two-character escape `\x` stands for (`\u` has its own rule).
///
/// A table, not a `match`: in escape-dense text the letters vary from one escape to the
/// next, and the jump a `match` compiles to is mispredicted on most of them.
fn short_escape(x: u8) -> Option<u8> {
    const TABLE: [u8; 256] = {
        let mut t = [0u8; 256];
        t[b'"' as usize] = b'"';
        t[b'\\' as usize] = b'\\';
        t[b'/' as usize] = b'/';
        t[b'b' as usize] = 0x08;
        t[b'f' as usize] = 0x0c;
        t[b'n' as usize] = b'\n';
        t[b'r' as usize] = b'\r';
        t[b't' as usize] = b'\t';
        t
    };
    let b = TABLE[usize::from(x)];
    (b != 0).then_some(b)
}

/// Whether a string body as written between its quotes, already checked by a skip (so its
/// escapes are well formed), decodes to exactly `want`, an ASCII text; `escaped` says
/// whether it holds an escape (what skipping it returned). Nothing is allocated: a `\u`
/// escape of a non-ASCII character cannot match, so only ASCII is ever decoded.
pub fn raw_str_eq(raw: &[u8], escaped: bool, want: &str) -> bool {
    debug_assert!(want.is_ascii());
    if !escaped {
        return raw == want.as_bytes();
    }
    let mut want = want.bytes();
    let mut i = 0;
    while i < raw.len() {
        let (byte, width) = match raw[i] {
            b'\\' if raw.get(i + 1) == Some(&b'u') => match raw.get(i + 2..i + 6).and_then(hex4_value) {
                Some(v) if v < 0x80 => (v as u8, 6),
                _ => return false,
            },
            b'\\' => match raw.get(i + 1).copied().and_then(short_escape) {
                Some(b) => (b, 2),
                None => return false,
            },
            b => (b, 1),
        };
        if want.next() != Some(byte) {
            return false;
        }
        i += width;
    }
    want.next().is_none()
}

/// Where encoded bytes go: a growing `Vec`, a [`Length`] that only counts them (to size
/// an output before it exists), or a [`Fill`] of a buffer of that size.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
    fn put_byte(&mut self, byte: u8) {
        self.put(&[byte]);
    }
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    #[inline]
    fn put_byte(&mut self, byte: u8) {
        self.push(byte);
    }
}

/// Counts what would be written.
#[derive(Debug, Default)]
pub struct Length(pub usize);

impl Sink for Length {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }

    #[inline]
    fn put_byte(&mut self, _: u8) {
        self.0 += 1;
    }
}

/// A buffer written front to back and never read, so it may start uninitialized (a new
/// Python `bytes` object's): writing past its end panics.
pub struct Fill<'a> {
    buf: &'a mut [std::mem::MaybeUninit<u8>],
    at: usize,
}

impl<'a> Fill<'a> {
    pub fn new(buf: &'a mut [std::mem::MaybeUninit<u8>]) -> Self {
        Fill { buf, at: 0 }
    }

    /// Whether every byte of the buffer has been written.
    pub fn is_full(&self) -> bool {
        self.at == self.buf.len()
    }
}

impl Sink for Fill<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let dst = &mut self.buf[self.at..self.at + bytes.len()];
        // SAFETY: `dst` is exactly `bytes.len()` long, and `MaybeUninit<u8>` has the
        // layout of `u8`; the two cannot overlap (`bytes` is borrowed shared, `dst` not).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.as_mut_ptr().cast::<u8>(), bytes.len()) };
        self.at += bytes.len();
    }
}

/// Append `s` to `out` as a JSON string literal.
pub fn write_str<S: Sink>(out: &mut S, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put_byte(b'"');
    let bytes = s.as_bytes();
    // Common case first: nothing to escape (a branch-free test the compiler vectorizes).
    if !bytes.iter().fold(false, |acc, &b| acc | (b < 0x20) | (b == b'"') | (b == b'\\')) {
        out.put(bytes);
        out.put_byte(b'"');
        return;
    }
    let mut last = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.put(&bytes[last..i]);
        if esc.is_empty() {
            out.put(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.put(esc);
        }
        last = i + 1;
    }
    out.put(&bytes[last..]);
    out.put_byte(b'"');
}

/// Copy the (already validated) JSON value `src` to `out` without insignificant
/// whitespace. Strings are copied verbatim.
pub fn write_compact<S: Sink>(out: &mut S, src: &[u8]) {
    let mut i = 0;
    while i < src.len() {
        let b = src[i];
        if b == b'"' {
            // Find the closing quote, stepping over escapes.
            let mut j = i + 1;
            loop {
                match memchr::memchr2(b'"', b'\\', &src[j..]) {
                    Some(k) if src[j + k] == b'\\' => j += k + 2,
                    Some(k) => {
                        j += k + 1;
                        break;
                    }
                    None => {
                        j = src.len();
                        break;
                    }
                }
            }
            out.put(&src[i..j]);
            i = j;
        } else {
            // Copy a run of structural bytes/literals up to the next quote or whitespace.
            let mut j = i;
            while j < src.len() && src[j] != b'"' && !is_ws(src[j]) {
                j += 1;
            }
            out.put(&src[i..j]);
            while j < src.len() && is_ws(src[j]) {
                j += 1;
            }
            i = j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip(s: &str) -> JResult<(ValueKind, usize, usize)> {
        let mut c = Cursor::new(s.as_bytes(), Mode::Fast);
        let r = c.skip_value(0)?;
        c.end()?;
        Ok(r)
    }

    /// The 64-byte block path and the 16-byte path alone agree on every string body: where
    /// it ends, whether it held an escape, and which error at which byte.
    #[test]
    fn block_path_agrees_with_the_16_byte_path() {
        let mut next = crate::testing::xorshift(0x2545_f491_4f6c_dd1du64);
        let alphabet: &[&[u8]] = &[
            b"a", b"a", b"a", b"a", b"\"", b"\\", b"\\\\", b"\\\"", b"\\n", b"\\u00e9", b"\\u12", b"\\x",
            b"\x01", b"/", b"\\/", b"0", b"\xc3\xa9",
        ];
        for round in 0..30_000 {
            let len = (next() % 300) as usize;
            let mut body = Vec::with_capacity(len + 8);
            // Mostly plain text with escapes, so that most bodies end past a block or two.
            while body.len() < len {
                let r = next() as usize;
                body.extend_from_slice(if r % 4 != 0 { b"a" } else { alphabet[r / 4 % alphabet.len()] });
            }
            if round % 3 == 0 {
                body.push(b'"');
            }
            for mode in [Mode::Fast, Mode::Strict] {
                let run = |block_path: bool| {
                    let mut c = Cursor::new(&body, mode);
                    let r = match (block_path, mode) {
                        (true, Mode::Strict) => c.skip_string_body_with::<true>().map(|(e, _, _)| e),
                        (true, _) => c.skip_string_body_with::<false>().map(|(e, _, _)| e),
                        (false, Mode::Strict) => c.skip_string_tail::<true>(0, false),
                        (false, _) => c.skip_string_tail::<false>(0, false),
                    };
                    (r.map_err(|e| e.to_string()), c.pos)
                };
                assert_eq!(run(true), run(false), "{mode:?} {:?}", String::from_utf8_lossy(&body));
            }
        }
    }

    #[test]
    fn strict_strings_are_valid_utf8_exactly_when_std_says_so() {
        // Multi-byte characters and broken sequences at every offset: inside whole blocks,
        // across block boundaries, and in the tail after the last whole block.
        let pieces: [&[u8]; 8] =
            [b"a", b"bc", "\u{e9}".as_bytes(), "\u{4e2d}".as_bytes(), "\u{1f600}".as_bytes(), b"\xff", b"\xe4\xb8", b"\xc3("];
        let mut next = crate::testing::xorshift(0x5eed_1234_abcd_0001u64);
        for round in 0..4_000 {
            let len = (next() % 300) as usize;
            let mut body = Vec::with_capacity(len + 8);
            let broken = round % 3 == 0;
            while body.len() < len {
                let r = next() as usize;
                let piece = pieces[r % if broken { 8 } else { 5 }];
                body.extend_from_slice(if r % 7 == 0 { piece } else { b"x" });
            }
            let valid = std::str::from_utf8(&body).is_ok();
            body.extend_from_slice(b"\"  ");
            let mut c = Cursor::new(&body, Mode::Strict);
            let r = c.skip_string_body();
            assert_eq!(r.is_ok(), valid, "{:?} -> {r:?}", String::from_utf8_lossy(&body));
            if let Err(e) = r {
                assert!(e.to_string().contains("invalid UTF-8"), "{e}");
            }
            // The fast mode does not look (its callers validated the whole buffer).
            assert!(Cursor::new(&body, Mode::Fast).skip_string_body().is_ok());
        }
    }

    #[test]
    fn skips_valid_values() {
        for (s, k) in [
            ("{}", ValueKind::Object),
            ("[]", ValueKind::Array),
            (r#" {"a": [1, 2.5e-3, -0, true, false, null, "x\"\\y\u00e9"], "b": {"c": {}}} "#, ValueKind::Object),
            ("[[[[]]], {}, [{}]]", ValueKind::Array),
            ("-12", ValueKind::Integer),
            ("1E+2", ValueKind::Float),
            (r#""\ud83d\ude00""#, ValueKind::String),
        ] {
            assert_eq!(skip(s).unwrap().0, k, "{s}");
        }
    }

    #[test]
    fn rejects_broken_values() {
        for s in [
            "",
            "{",
            "[",
            "[1,]",
            "[1 2]",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{a:1}",
            "[1}",
            "{\"a\":1]",
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            "nul",
            "\"abc",
            "\"\\x\"",
            "\"\\u12\"",
            "[\"a\\",
            "{\"a\":1}}",
            "]",
            "+1",
            ".5",
            "[1]x",
        ] {
            assert!(skip(s).is_err(), "accepted {s:?}");
        }
    }

    #[test]
    fn depth_is_bounded_without_recursion() {
        let ok = "[".repeat(MAX_NESTING_DEPTH) + &"]".repeat(MAX_NESTING_DEPTH);
        assert!(skip(&ok).is_ok());
        let deep = "[".repeat(MAX_NESTING_DEPTH + 1) + &"]".repeat(MAX_NESTING_DEPTH + 1);
        assert!(skip(&deep).unwrap_err().what.contains("nesting"));
        let hostile = "[".repeat(1_000_000);
        assert!(skip(&hostile).is_err());
        let mixed = "{\"a\":[".repeat(100_000);
        assert!(skip(&mixed).is_err());
    }

    #[test]
    fn decodes_strings_with_escapes() {
        let mut c = Cursor::new(br#""a\n\"\u00e9\ud83d\ude00\/""#, Mode::Fast);
        assert_eq!(c.parse_string().unwrap(), "a\n\"é😀/");
        for bad in [r#""\ud83d""#, r#""\ude00""#, r#""\ud83dx""#, "\"a\nb\"", r#""\u00zz""#] {
            let mut c = Cursor::new(bad.as_bytes(), Mode::Fast);
            assert!(c.parse_string().is_err(), "{bad}");
        }
    }

    #[test]
    fn strict_mode_rejects_raw_control_characters() {
        let s = b"{\"a\":\"x\ny\"}";
        assert!(Cursor::new(s, Mode::Fast).skip_value(0).is_ok());
        assert!(Cursor::new(s, Mode::Strict).skip_value(0).is_err());
    }

    /// A random JSON value, mostly objects, for the agreement test below: `{`-heavy so that
    /// mutations hit keys, colons and commas.
    fn random_value(next: &mut impl FnMut() -> u64, depth: usize, out: &mut Vec<u8>) {
        const SCALARS: &[&[u8]] = &[b"1", b"-0.5e3", b"true", b"null", b"\"x\"", b"\"a\\\"}\"", b"\"\\u00e9\""];
        const KEYS: &[&[u8]] = &[b"\"a\"", b"\"name\"", b"\"n\\u0061me\"", b"\"\\\"\"", b"\"\""];
        const WS: &[&[u8]] = &[b"", b"", b" ", b"\n "];
        let r = next() as usize;
        match if depth >= 3 { 2 } else { r % 4 } {
            0 | 1 => {
                out.push(b'{');
                for i in 0..(r / 4) % 4 {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(WS[next() as usize % WS.len()]);
                    out.extend_from_slice(KEYS[next() as usize % KEYS.len()]);
                    out.extend_from_slice(WS[next() as usize % WS.len()]);
                    out.push(b':');
                    random_value(next, depth + 1, out);
                }
                out.push(b'}');
            }
            2 => out.extend_from_slice(SCALARS[r / 4 % SCALARS.len()]),
            _ => {
                out.push(b'[');
                random_value(next, depth + 1, out);
                out.push(b']');
            }
        }
        out.extend_from_slice(WS[next() as usize % WS.len()]);
    }

    /// Walking an object's members with `skip_object`, each value skipped with
    /// `skip_value(depth + 1)`, is `skip_value(depth)`: the same span and whitespace count,
    /// or the same error at the same byte, on random objects, their prefixes and their
    /// mutations, at the top level and next to the nesting limit.
    #[test]
    fn skip_object_agrees_with_skip_value() {
        let mut next = crate::testing::xorshift(0x853c_49e6_748f_ea9bu64);
        let mut compared = 0;
        for _ in 0..20_000 {
            let mut text = b" {".to_vec();
            text.extend_from_slice(br#""k":"#);
            random_value(&mut next, 0, &mut text);
            text.push(b'}');
            for _ in 0..next() % 3 {
                let at = 1 + next() as usize % (text.len() - 1);
                text[at] = b"{}[]\",:\\ 0n"[next() as usize % 11];
            }
            if next() % 4 == 0 {
                text.truncate(1 + next() as usize % text.len());
            }
            if text.get(1) != Some(&b'{') {
                continue;
            }
            for depth in [0, 1, MAX_NESTING_DEPTH - 3, MAX_NESTING_DEPTH - 1, MAX_NESTING_DEPTH] {
                let mut whole = Cursor::new(&text, Mode::Fast);
                let skipped = whole.skip_value(depth).map(|(_, s, e)| (s, e));
                let mut walk = Cursor::new(&text, Mode::Fast);
                let walked = walk.skip_object(depth, |c, _, _| c.skip_value(depth + 1).map(drop));
                let shown = String::from_utf8_lossy(&text);
                assert_eq!(walked, skipped, "depth {depth}: {shown}");
                if skipped.is_ok() {
                    assert_eq!((walk.pos, walk.whitespace), (whole.pos, whole.whitespace), "{shown}");
                }
                compared += 1;
            }
        }
        assert!(compared > 50_000, "too few objects compared: {compared}");
    }

    /// `raw_str_eq` answers what decoding the string and comparing answers, on the keys
    /// and near misses spelled with random escapes (`\u` in either case, `\/`, `\n`, ...),
    /// some with a piece added, dropped or replaced.
    #[test]
    fn raw_str_eq_agrees_with_decoding() {
        let mut next = crate::testing::xorshift(0xda94_2042_e4dd_58b5u64);
        let texts = ["name", "uri", "_meta", "nam", "names", "Name", "n/me", "na\"m\\e", "namé", "n\nme", "😀"];
        let noise = ["a", "\\u0000", "\\u00e9", "é", "\\ud83d\\ude00", "\\t", "\\b", "\\f", "\\r"];
        let mut escaped_matches = 0;
        for _ in 0..50_000 {
            let text = texts[next() as usize % texts.len()];
            let mut pieces: Vec<String> = text
                .chars()
                .map(|c| match (next() % 4, c) {
                    (0, c) if (c as u32) < 0x10000 => format!("\\u{:04x}", c as u32),
                    (1, c) if (c as u32) < 0x10000 => format!("\\u{:04X}", c as u32),
                    (2, '/') => "\\/".into(),
                    (_, '"' | '\\') => format!("\\{c}"),
                    (_, '\n') => "\\n".into(),
                    (_, c) => c.into(),
                })
                .collect();
            let at = next() as usize % (pieces.len() + 1);
            match next() % 6 {
                0 => pieces.insert(at, noise[next() as usize % noise.len()].into()),
                1 if at < pieces.len() => drop(pieces.remove(at)),
                2 if at < pieces.len() => pieces[at] = noise[next() as usize % noise.len()].into(),
                _ => {}
            }
            let raw = pieces.concat();
            let quoted = format!("\"{raw}\"");
            let mut skip = Cursor::new(quoted.as_bytes(), Mode::Fast);
            skip.pos = 1;
            let escaped = skip.skip_string_body().unwrap();
            let decoded = Cursor::new(quoted.as_bytes(), Mode::Fast).parse_string().unwrap();
            let own = decoded.is_ascii().then_some(decoded.as_ref());
            for want in ["name", "uri", "_meta", "", "n"].into_iter().chain(own) {
                assert_eq!(raw_str_eq(raw.as_bytes(), escaped, want), decoded == want, "{quoted} vs {want:?}");
            }
            escaped_matches += usize::from(escaped && ["name", "uri", "_meta"].contains(&decoded.as_ref()));
        }
        assert!(escaped_matches > 5_000, "too few escaped spellings of the keys: {escaped_matches}");
    }

    #[test]
    fn writes_escaped_strings_and_compact_values() {
        let mut out = Vec::new();
        write_str(&mut out, "a\"b\\c\n\u{1}é");
        assert_eq!(out, r#""a\"b\\c\n\u0001é""#.as_bytes());
        let mut out = Vec::new();
        write_compact(&mut out, b"{ \"a b\" :\n [ 1 , \"x \\\" y\" ,\ttrue ] }\r\n");
        assert_eq!(out, br#"{"a b":[1,"x \" y",true]}"#);
    }
}
