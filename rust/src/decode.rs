//! Decoding a whole JSON value, in one strict pass, into values a [`Builder`] makes.
//!
//! Why, when orjson decodes for the rest of the package: a tool's result is mostly one
//! long string, and orjson reads strings a byte at a time (for 64 KiB of text, a third of
//! the parent's time per call). The strict cursor finds a string's end 64 bytes at a
//! time and knows whether the string is plain ASCII, so a builder can make it with one
//! copy and no second decode.
//!
//! Rules:
//! 1. The input is checked exactly as strictly as a line the codec writes: UTF-8, the
//!    JSON grammar, no raw control characters in strings, no unpaired surrogate escapes
//!    (a Python string holding one could not be encoded again), nesting at most
//!    [`MAX_NESTING_DEPTH`] (the worker's scan already refuses deeper results).
//! 2. Whitespace may surround the value; anything else after it is an error.
//! 3. Of a repeated object key the last value wins (as in `json` and orjson).
//! 4. Integers that do not fit `i64` go to the builder as their digits, so that nothing
//!    is rounded; other numbers are parsed as `f64` (correctly rounded, as Python's
//!    `float` does).

use crate::json::{Cursor, JsonError, Mode, Text, MAX_NESTING_DEPTH};

/// How many bytes of a string [`Builder::looks_ahead`] is shown.
pub const LOOK_AHEAD: usize = 1024;

/// Makes the decoded values. `Error` carries both the builder's own failures and the
/// decoder's (a [`JsonError`]).
pub trait Builder {
    type Value;
    type List;
    type Dict;
    type Error: From<JsonError>;

    fn null(&mut self) -> Result<Self::Value, Self::Error>;
    fn boolean(&mut self, value: bool) -> Result<Self::Value, Self::Error>;
    fn int(&mut self, value: i64) -> Result<Self::Value, Self::Error>;
    /// An integer outside `i64`: its digits (with the sign).
    fn big_int(&mut self, digits: &str) -> Result<Self::Value, Self::Error>;
    fn float(&mut self, value: f64) -> Result<Self::Value, Self::Error>;
    /// Called before a string value is read, with up to [`LOOK_AHEAD`] bytes of what
    /// follows its opening quote (a builder may refuse to go on from what they show).
    fn looks_ahead(&mut self, _upcoming: &[u8]) -> Result<(), Self::Error> {
        Ok(())
    }
    fn string(&mut self, text: Text<'_>) -> Result<Self::Value, Self::Error>;
    /// An object's key (a builder may make keys differently from other strings).
    fn key(&mut self, text: Text<'_>) -> Result<Self::Value, Self::Error>;
    fn list(&mut self) -> Result<Self::List, Self::Error>;
    fn push(&mut self, list: &mut Self::List, item: Self::Value) -> Result<(), Self::Error>;
    fn end_list(&mut self, list: Self::List) -> Result<Self::Value, Self::Error>;
    fn dict(&mut self) -> Result<Self::Dict, Self::Error>;
    fn insert(&mut self, dict: &mut Self::Dict, key: Self::Value, value: Self::Value) -> Result<(), Self::Error>;
    fn end_dict(&mut self, dict: Self::Dict) -> Result<Self::Value, Self::Error>;
}

/// Decode the one JSON value `buf` holds.
pub fn decode<B: Builder>(buf: &[u8], builder: &mut B) -> Result<B::Value, B::Error> {
    let mut cur = Cursor::new(buf, Mode::Strict);
    let value = value(&mut cur, builder, 0)?;
    cur.end()?;
    Ok(value)
}

/// The value at the cursor; `depth` counts the containers around it.
fn value<B: Builder>(cur: &mut Cursor<'_>, b: &mut B, depth: usize) -> Result<B::Value, B::Error> {
    cur.skip_ws();
    match cur.peek() {
        Some(b'"') => {
            b.looks_ahead(cur.ahead(LOOK_AHEAD + 1).get(1..).unwrap_or_default())?;
            let text = cur.text()?;
            b.string(text)
        }
        Some(b'-' | b'0'..=b'9') => {
            let (digits, integer) = cur.number()?;
            if !integer {
                return b.float(digits.parse().map_err(|_| cur.err("invalid number"))?);
            }
            match digits.parse::<i64>() {
                Ok(n) => b.int(n),
                Err(_) => b.big_int(digits),
            }
        }
        Some(b'{') => {
            let depth = nested(cur, depth)?;
            let mut dict = b.dict()?;
            let mut more = opened(cur, b'{', b'}')?;
            while more {
                let text = cur.text()?;
                let key = b.key(text)?;
                cur.expect(b':', "':'")?;
                let item = value(cur, b, depth)?;
                b.insert(&mut dict, key, item)?;
                more = next_or_closed(cur, b'}')?;
            }
            b.end_dict(dict)
        }
        Some(b'[') => {
            let depth = nested(cur, depth)?;
            let mut list = b.list()?;
            let mut more = opened(cur, b'[', b']')?;
            while more {
                let item = value(cur, b, depth)?;
                b.push(&mut list, item)?;
                more = next_or_closed(cur, b']')?;
            }
            b.end_list(list)
        }
        Some(b't') => {
            cur.skip_literal(b"true")?;
            b.boolean(true)
        }
        Some(b'f') => {
            cur.skip_literal(b"false")?;
            b.boolean(false)
        }
        Some(b'n') => {
            cur.skip_literal(b"null")?;
            b.null()
        }
        _ => Err(cur.unexpected("a value").into()),
    }
}

/// Consume a container's opening byte; false when it closes at once (it is empty).
fn opened(cur: &mut Cursor<'_>, open: u8, close: u8) -> Result<bool, JsonError> {
    cur.expect(open, if open == b'{' { "'{'" } else { "'['" })?;
    cur.skip_ws();
    if cur.peek() == Some(close) {
        cur.expect(close, "the container's end")?;
        return Ok(false);
    }
    Ok(true)
}

/// After a member or an item: consume `,` (true: another follows) or `close` (false).
fn next_or_closed(cur: &mut Cursor<'_>, close: u8) -> Result<bool, JsonError> {
    cur.skip_ws();
    match cur.peek() {
        Some(b',') => cur.expect(b',', "','").map(|()| true),
        Some(c) if c == close => cur.expect(close, "the container's end").map(|()| false),
        _ => Err(cur.unexpected(if close == b'}' { "',' or '}'" } else { "',' or ']'" })),
    }
}

/// The depth inside a container opened at the cursor, if it is allowed.
fn nested(cur: &Cursor<'_>, depth: usize) -> Result<usize, JsonError> {
    if depth + 1 > MAX_NESTING_DEPTH {
        return Err(cur.err(format!("nesting deeper than {MAX_NESTING_DEPTH}")));
    }
    Ok(depth + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A builder that writes the value back as canonical text, so that a decode can be
    /// compared with what was meant: strings carry `a:` when the decoder said ASCII.
    struct Echo;

    impl Builder for Echo {
        type Value = String;
        type List = Vec<String>;
        type Dict = Vec<(String, String)>;
        type Error = JsonError;

        fn null(&mut self) -> Result<String, JsonError> {
            Ok("null".into())
        }
        fn boolean(&mut self, value: bool) -> Result<String, JsonError> {
            Ok(value.to_string())
        }
        fn int(&mut self, value: i64) -> Result<String, JsonError> {
            Ok(format!("i{value}"))
        }
        fn big_int(&mut self, digits: &str) -> Result<String, JsonError> {
            Ok(format!("big{digits}"))
        }
        fn float(&mut self, value: f64) -> Result<String, JsonError> {
            Ok(format!("f{value:?}"))
        }
        fn string(&mut self, text: Text<'_>) -> Result<String, JsonError> {
            let (s, ascii) = text.decode()?;
            let kind = match (text.escaped, ascii) {
                (false, true) => "a",
                (false, false) => "u",
                (true, true) => "da",
                (true, false) => "d",
            };
            Ok(format!("{kind}:{s}"))
        }
        fn key(&mut self, text: Text<'_>) -> Result<String, JsonError> {
            Ok(text.decode()?.0.into_owned())
        }
        fn list(&mut self) -> Result<Vec<String>, JsonError> {
            Ok(Vec::new())
        }
        fn push(&mut self, list: &mut Vec<String>, item: String) -> Result<(), JsonError> {
            list.push(item);
            Ok(())
        }
        fn end_list(&mut self, list: Vec<String>) -> Result<String, JsonError> {
            Ok(format!("[{}]", list.join(",")))
        }
        fn dict(&mut self) -> Result<Vec<(String, String)>, JsonError> {
            Ok(Vec::new())
        }
        fn insert(&mut self, dict: &mut Vec<(String, String)>, key: String, value: String) -> Result<(), JsonError> {
            dict.retain(|(k, _)| *k != key); // the last one wins
            dict.push((key, value));
            Ok(())
        }
        fn end_dict(&mut self, dict: Vec<(String, String)>) -> Result<String, JsonError> {
            Ok(format!("{{{}}}", dict.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")))
        }
    }

    fn dec(src: &[u8]) -> Result<String, JsonError> {
        decode(src, &mut Echo)
    }

    #[test]
    fn decodes_every_kind_of_value() {
        assert_eq!(
            dec(br#" {"a": [1, -2, 3.5, 1e2, true, false, null], "s": "x\ny", "e": {}, "l": []} "#).unwrap(),
            "{a=[i1,i-2,f3.5,f100.0,true,false,null],s=da:x\ny,e={},l=[]}"
        );
        assert_eq!(dec(b"\"plain\"").unwrap(), "a:plain");
        assert_eq!(dec("\"caf\u{e9}\"".as_bytes()).unwrap(), "u:caf\u{e9}");
        assert_eq!(dec(br#""\ud83d\ude00 \u00e9""#).unwrap(), "d:\u{1f600} \u{e9}");
        assert_eq!(dec(br#""tab\there \u0041\/""#).unwrap(), "da:tab\there A/");
        assert_eq!(dec("\"\\n caf\u{e9}\"".as_bytes()).unwrap(), "d:\n caf\u{e9}");
        assert_eq!(dec(b"-0").unwrap(), "i0");
        assert_eq!(dec(b"9223372036854775807").unwrap(), "i9223372036854775807");
        assert_eq!(dec(b"-9223372036854775809").unwrap(), "big-9223372036854775809");
        assert_eq!(dec(b"123456789012345678901234567890").unwrap(), "big123456789012345678901234567890");
        assert_eq!(dec(br#"{"k":1,"k":2}"#).unwrap(), "{k=i2}");
    }

    #[test]
    fn long_strings_say_whether_they_are_ascii() {
        let ascii = format!("\"{}\"", "word ".repeat(20_000));
        assert!(dec(ascii.as_bytes()).unwrap().starts_with("a:word "));
        // One non-ASCII character far from the start, in a whole block and in the tail.
        for at in [70, 99_990] {
            let mut text = "x".repeat(100_000);
            text.replace_range(at..at + 1, "\u{e9}");
            let got = dec(format!("\"{text}\"").as_bytes()).unwrap();
            assert!(got.starts_with("u:") && got.contains('\u{e9}'), "at {at}");
        }
    }

    #[test]
    fn refuses_what_is_not_one_strict_json_value() {
        let bad: &[&[u8]] = &[
            b"", b" ", b"{", b"[1,]", b"{\"a\":1,}", b"{\"a\" 1}", b"{1:2}", b"01", b"1.", b"-", b"1e",
            b"tru", b"nul", b"NaN", b"Infinity", b"\"a", b"\"\\x\"", b"\"\x01\"", b"\"\xff\"",
            b"\"\\ud800\"", b"\"\\udc00\"", b"1 2", b"{} x", b"[1] ]",
        ];
        for src in bad {
            assert!(dec(src).is_err(), "{:?}", String::from_utf8_lossy(src));
        }
        let deep = format!("{}{}", "[".repeat(MAX_NESTING_DEPTH + 1), "]".repeat(MAX_NESTING_DEPTH + 1));
        assert!(dec(deep.as_bytes()).unwrap_err().to_string().contains("nesting"));
        let ok = format!("{}{}", "[".repeat(MAX_NESTING_DEPTH), "]".repeat(MAX_NESTING_DEPTH));
        assert!(dec(ok.as_bytes()).is_ok());
    }
}
