//! The header lines of an HTTP/1.1 request's head, as the gateway's server looks them up.
//!
//! httptools (llhttp) parses the head and hands each header over as a raw name and value;
//! the server keeps them in arrival order and makes its map of them here, in one call per
//! request (in Python it costs about 5 µs a request of seven headers, more than the
//! parse itself).
//!
//! Rules:
//!
//! 1. A name is looked up in lower case. Names are tokens (llhttp refuses any other
//!    byte), so lowering is ASCII-only; a byte outside ASCII is left as it is.
//! 2. A value is without the spaces and tabs around it (RFC 9110 5.5: they are not part of
//!    it; llhttp keeps the trailing ones).
//! 3. Of a repeated header the first value counts (the caller keeps the first it sees).
//! 4. Bytes are Latin-1 (RFC 9110 5.5: a value's octets outside ASCII are opaque), so each
//!    byte is one character and nothing can fail to decode (the binding, `py`, has
//!    CPython decode them).

/// `name` in lower case (rule 1), borrowed when it is already.
pub fn lower_name(name: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if name.iter().any(u8::is_ascii_uppercase) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// `value` without the spaces and tabs around it (rule 2).
pub fn trimmed_value(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &value[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowered_and_borrowed_when_already_lower() {
        assert_eq!(&*lower_name(b"Mcp-Method"), b"mcp-method");
        assert!(matches!(lower_name(b"content-type"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(&*lower_name(b"X-\xc3\x89"), b"x-\xc3\x89"); // not ASCII: left as is
    }

    #[test]
    fn values_lose_the_whitespace_around_them_only() {
        assert_eq!(trimmed_value(b"  tools/call \t"), b"tools/call");
        assert_eq!(trimmed_value(b"a b"), b"a b");
        assert_eq!(trimmed_value(b" \t "), b"");
        assert_eq!(trimmed_value(b""), b"");
    }
}
