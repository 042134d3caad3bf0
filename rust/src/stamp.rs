//! Request stamping and the other line encoders.
//!
//! The parent serializes a call's params once; the worker splices the envelope, a fresh id
//! and the precomputed `_meta` object around those bytes. Inputs are checked strictly
//! (UTF-8, full JSON structure, no raw control characters in strings) because the output
//! goes on the wire: a line we write must always be one valid JSON-RPC message. Inputs are
//! also compacted, so pretty-printed params can never smuggle a newline into the framing.

use std::borrow::Cow;

use crate::json::{write_compact, write_str, Cursor, JsonError, Length, Mode, Sink, ValueKind};
use crate::scan::JsonId;

/// A caller error: the arguments cannot become a valid message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CodecError {}

fn bad(what: &str, e: JsonError) -> CodecError {
    CodecError(format!("{what}: {e}"))
}

/// Check that `src` holds exactly one JSON value (whitespace around it allowed) nested
/// under `depth` containers; return its kind, its span, and whether it is compact (no
/// whitespace in it, see [`write_value`]).
fn check_value(src: &[u8], depth: usize, what: &str) -> Result<(ValueKind, usize, usize, bool), CodecError> {
    // The strict cursor validates UTF-8 as it goes (only strings can hold other than ASCII).
    let mut cur = Cursor::new(src, Mode::Strict);
    let (kind, s, e) = cur.skip_value(depth).map_err(|e| bad(what, e))?;
    let compact = cur.whitespace == 0;
    cur.end().map_err(|e| bad(what, e))?;
    Ok((kind, s, e, compact))
}

/// Append a value [`check_value`] or [`members`] checked: as it is when it is compact
/// (one copy: the params a parent serialized with orjson always are), else compacted.
fn write_value<S: Sink>(out: &mut S, value: &[u8], compact: bool) {
    if compact {
        out.put(value);
    } else {
        write_compact(out, value);
    }
}

/// Members of a JSON object: (decoded key, raw key span, value span, value compact), in
/// one pass that also checks the whole value.
type Members<'a> = Vec<(Cow<'a, str>, (usize, usize), (usize, usize), bool)>;

fn members<'a>(src: &'a [u8], depth: usize, what: &str) -> Result<Members<'a>, CodecError> {
    let mut cur = Cursor::new(src, Mode::Strict);
    cur.skip_ws();
    if cur.peek() != Some(b'{') {
        let kind = cur.skip_value(depth).map(|(k, _, _)| k.name()).unwrap_or("invalid JSON");
        return Err(CodecError(format!("{what} must be a JSON object, not {kind}")));
    }
    if depth + 1 > crate::json::MAX_NESTING_DEPTH {
        return Err(CodecError(format!("{what}: nesting too deep")));
    }
    let mut out = Vec::new();
    cur.object(|cur, key, key_span| {
        let before = cur.whitespace;
        let (_, s, e) = cur.skip_value(depth + 1)?;
        out.push((key, key_span, (s, e), cur.whitespace == before));
        Ok(())
    })
    .map_err(|e| bad(what, e))?;
    cur.end().map_err(|e| bad(what, e))?;
    Ok(out)
}

/// The one stamped key a caller's `_meta` may override: the client capabilities of one
/// request. A gateway passes on what its own client declared (narrower than the host's
/// identity), so a server behind it asks only for input that client can give.
pub const CALLER_OVERRIDABLE: &str = "io.modelcontextprotocol/clientCapabilities";

/// The stamp, prepared once per distinct `meta` input: its decoded keys (to drop the
/// caller's duplicates) and its compact members `"k":v` (to splice), whole and one by one.
struct PreparedMeta {
    source: Vec<u8>,
    keys: Vec<String>,
    /// `"k1":v1,"k2":v2` without braces.
    body: Vec<u8>,
    /// `body` without the `CALLER_OVERRIDABLE` member (equal to `body` when it has none).
    body_without_overridable: Vec<u8>,
}

impl PreparedMeta {
    fn new(meta: &[u8]) -> Result<Self, CodecError> {
        let mut keys = Vec::new();
        let mut body = Vec::with_capacity(meta.len());
        let mut without = Vec::with_capacity(meta.len());
        for (k, (ks, ke), (vs, ve), compact) in members(meta, 2, "meta")? {
            let mut member = Vec::with_capacity(ke - ks + ve - vs + 1);
            member.extend_from_slice(&meta[ks..ke]);
            member.push(b':');
            write_value(&mut member, &meta[vs..ve], compact);
            for (target, skip) in [(&mut body, false), (&mut without, k == CALLER_OVERRIDABLE)] {
                if skip {
                    continue;
                }
                if !target.is_empty() {
                    target.push(b',');
                }
                target.extend_from_slice(&member);
            }
            keys.push(k.into_owned());
        }
        Ok(PreparedMeta { source: meta.to_vec(), keys, body, body_without_overridable: without })
    }
}

thread_local! {
    /// The `_meta` bytes change only when the negotiated version or capabilities do, so
    /// the last prepared stamp is kept (per thread) and reused while the bytes are equal.
    static LAST_META: std::cell::RefCell<Option<std::rc::Rc<PreparedMeta>>> = const { std::cell::RefCell::new(None) };
}

fn prepared_meta(meta: &[u8]) -> Result<std::rc::Rc<PreparedMeta>, CodecError> {
    LAST_META.with(|cell| {
        if let Some(p) = cell.borrow().as_ref() {
            if p.source == meta {
                return Ok(p.clone());
            }
        }
        let p = std::rc::Rc::new(PreparedMeta::new(meta)?);
        *cell.borrow_mut() = Some(p.clone());
        Ok(p)
    })
}

fn write_id<S: Sink>(out: &mut S, id: &JsonId) {
    match id {
        JsonId::Int(n) => out.put(decimal(*n, &mut [0; 20])),
        JsonId::Str(s) => write_str(out, s),
    }
}

/// `n` in decimal, written at the end of `buf` (no allocation: a stamped line's id is
/// written twice, once to measure the line).
fn decimal(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

fn head<S: Sink>(out: &mut S, id: Option<&JsonId>) {
    out.put(b"{\"jsonrpc\":\"2.0\"");
    if let Some(id) = id {
        out.put(b",\"id\":");
        write_id(out, id);
    }
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":{...,"_meta":{...}}}\n`.
///
/// `meta` must be a JSON object. If `params` already has `_meta`, the two are merged in
/// place of the caller's `_meta`: the stamp's members come first, then the caller's members
/// whose keys the stamp does not have (the stamp wins every conflict, and all of the
/// caller's duplicates of a stamped key are dropped), except [`CALLER_OVERRIDABLE`]: the
/// caller's first one replaces the stamp's. Without a caller `_meta`, the stamp
/// is appended as the last member of params.
pub fn stamp_request(id: &JsonId, method: &str, params: Option<&[u8]>, meta: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    stamp_request_into(&mut out, id, method, params, meta)?;
    Ok(out)
}

/// Check that `meta` can stamp requests (a JSON object), and prepare it for the next ones.
pub fn check_meta(meta: &[u8]) -> Result<(), CodecError> {
    prepared_meta(meta).map(drop)
}

/// Run `write` against the end of `out`; on error, `out` is left as it was, so a batch of
/// lines in one buffer never holds half a line.
fn append(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>) -> Result<(), CodecError>) -> Result<(), CodecError> {
    let start = out.len();
    let r = write(out);
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// [`stamp_request`] appending to `out` (untouched on error).
pub fn stamp_request_into(
    out: &mut Vec<u8>,
    id: &JsonId,
    method: &str,
    params: Option<&[u8]>,
    meta: &[u8],
) -> Result<(), CodecError> {
    let line = Stamped::new(id, method, params, meta)?;
    out.reserve(64 + method.len() + line.stamp.body.len() + line.params.len());
    line.write(out);
    Ok(())
}

/// A stamped request line, checked and decided before any of it is written: nothing can
/// fail once writing starts, and the exact length is known first
/// ([`Stamped::encoded_len`]), so the line can go straight into its final buffer (a Python
/// `bytes` object: one copy of the params, not two).
pub struct Stamped<'a> {
    stamp: std::rc::Rc<PreparedMeta>,
    id: &'a JsonId,
    method: &'a str,
    params: &'a [u8],
    members: Members<'a>,
    /// The caller's own `_meta`: its index among `members`, and its members.
    caller_meta: Option<(usize, Members<'a>)>,
}

impl<'a> Stamped<'a> {
    pub fn new(id: &'a JsonId, method: &'a str, params: Option<&'a [u8]>, meta: &[u8]) -> Result<Self, CodecError> {
        // `_meta` sits at depth 3 of the message (message, params, _meta).
        let stamp = prepared_meta(meta)?;
        let own = match params {
            Some(p) => members(p, 1, "params")?,
            None => Vec::new(),
        };
        let params = params.unwrap_or_default();
        let mut caller_meta = None;
        for (i, (k, _, (s, e), _)) in own.iter().enumerate() {
            if k == "_meta" {
                if caller_meta.is_some() {
                    return Err(CodecError("params carry \"_meta\" twice".into()));
                }
                caller_meta = Some((i, members(&params[*s..*e], 2, "params._meta")?));
            }
        }
        Ok(Stamped { stamp, id, method, params, members: own, caller_meta })
    }

    /// The line's length in bytes.
    pub fn encoded_len(&self) -> usize {
        let mut n = Length(0);
        self.write(&mut n);
        n.0
    }

    pub fn write<S: Sink>(&self, out: &mut S) {
        let params = self.params;
        head(out, Some(self.id));
        out.put(b",\"method\":");
        write_str(out, self.method);
        out.put(b",\"params\":{");
        for (i, (_, (ks, ke), (s, e), compact)) in self.members.iter().enumerate() {
            if i > 0 {
                out.put_byte(b',');
            }
            match &self.caller_meta {
                Some((at, caller)) if *at == i => self.write_merged_meta(out, &params[*s..*e], caller),
                _ => {
                    out.put(&params[*ks..*ke]);
                    out.put_byte(b':');
                    write_value(out, &params[*s..*e], *compact);
                }
            }
        }
        if self.caller_meta.is_none() {
            if !self.members.is_empty() {
                out.put_byte(b',');
            }
            out.put(b"\"_meta\":{");
            out.put(&self.stamp.body);
            out.put_byte(b'}');
        }
        out.put(b"}}\n");
    }

    /// The stamp's members, then the caller's that it does not have (see
    /// [`stamp_request`]).
    fn write_merged_meta<S: Sink>(&self, out: &mut S, value: &[u8], caller: &Members<'_>) {
        let stamp = &self.stamp;
        let overrides = caller.iter().any(|(ck, _, _, _)| ck == CALLER_OVERRIDABLE);
        let stamped = if overrides { &stamp.body_without_overridable } else { &stamp.body };
        out.put(b"\"_meta\":{");
        out.put(stamped);
        let mut empty = stamped.is_empty();
        let mut overridden = false;
        for (ck, (cks, cke), (cs, ce), compact) in caller {
            let keep = if ck == CALLER_OVERRIDABLE {
                !std::mem::replace(&mut overridden, true) // the caller's first one
            } else {
                !stamp.keys.iter().any(|sk| sk == ck)
            };
            if !keep {
                continue;
            }
            if !std::mem::replace(&mut empty, false) {
                out.put_byte(b',');
            }
            out.put(&value[*cks..*cke]);
            out.put_byte(b':');
            write_value(out, &value[*cs..*ce], *compact);
        }
        out.put_byte(b'}');
    }
}

/// Append `,"params":<params>` for a plain request or notification.
fn plain_params(out: &mut Vec<u8>, params: Option<&[u8]>) -> Result<(), CodecError> {
    if let Some(p) = params {
        let (kind, s, e, compact) = check_value(p, 1, "params")?;
        if !matches!(kind, ValueKind::Object | ValueKind::Array) {
            return Err(CodecError(format!("params must be a JSON object or array, not {}", kind.name())));
        }
        out.extend_from_slice(b",\"params\":");
        write_value(out, &p[s..e], compact);
    }
    Ok(())
}

/// A plain (legacy) request line: no stamping.
pub fn encode_request(id: &JsonId, method: &str, params: Option<&[u8]>) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    encode_request_into(&mut out, id, method, params)?;
    Ok(out)
}

/// [`encode_request`] appending to `out` (untouched on error).
pub fn encode_request_into(
    out: &mut Vec<u8>,
    id: &JsonId,
    method: &str,
    params: Option<&[u8]>,
) -> Result<(), CodecError> {
    out.reserve(48 + method.len() + params.map_or(0, <[u8]>::len));
    append(out, |out| {
        head(out, Some(id));
        out.extend_from_slice(b",\"method\":");
        write_str(out, method);
        plain_params(out, params)?;
        out.extend_from_slice(b"}\n");
        Ok(())
    })
}

/// A notification line (no id).
pub fn encode_notification(method: &str, params: Option<&[u8]>) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(40 + method.len() + params.map_or(0, <[u8]>::len));
    head(&mut out, None);
    out.extend_from_slice(b",\"method\":");
    write_str(&mut out, method);
    plain_params(&mut out, params)?;
    out.extend_from_slice(b"}\n");
    Ok(out)
}

/// A result response line.
pub fn encode_result(id: &JsonId, result: &[u8]) -> Result<Vec<u8>, CodecError> {
    let (_, s, e, compact) = check_value(result, 1, "result")?;
    let mut out = Vec::with_capacity(40 + result.len());
    head(&mut out, Some(id));
    out.extend_from_slice(b",\"result\":");
    write_value(&mut out, &result[s..e], compact);
    out.extend_from_slice(b"}\n");
    Ok(out)
}

/// An error response line; a missing id is written as `null`, as JSON-RPC requires.
pub fn encode_error(id: Option<&JsonId>, code: i64, message: &str, data: Option<&[u8]>) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(64 + message.len() + data.map_or(0, <[u8]>::len));
    head(&mut out, None);
    out.extend_from_slice(b",\"id\":");
    match id {
        Some(id) => write_id(&mut out, id),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    write_str(&mut out, message);
    if let Some(d) = data {
        let (_, s, e, compact) = check_value(d, 2, "data")?;
        out.extend_from_slice(b",\"data\":");
        write_value(&mut out, &d[s..e], compact);
    }
    out.extend_from_slice(b"}}\n");
    Ok(out)
}

/// The span of the value of top-level member `key` in the JSON object `src`: `None` when
/// the object has no such member. The whole input is checked strictly first (UTF-8, full
/// structure, no raw control characters in strings), so the span always holds one valid
/// JSON value, exactly the bytes the sender wrote (no whitespace around it).
///
/// Keys are compared decoded, as any JSON reader would (`"a\u0062"` is the key `ab`).
/// A `key` present twice is an error: readers disagree on which occurrence wins, and a
/// caller that echoes a value "byte for byte" must not pick one silently.
///
/// This is how the MRTR retry carries the server's `requestState` unchanged: the client
/// never decodes and re-encodes it (re-encoding would rewrite escapes such as `\u00e9`
/// or `\/`).
pub fn raw_member(src: &[u8], key: &str) -> Result<Option<(usize, usize)>, CodecError> {
    let mut found: Option<(usize, usize)> = None;
    for (k, _, span, _) in members(src, 0, "json")? {
        if k == key {
            if found.is_some() {
                return Err(CodecError(format!("json: duplicate top-level key {key:?}")));
            }
            found = Some(span);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{scan, Kind};

    const META: &[u8] = br#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;

    fn text(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn stamps_meta_into_params() {
        let out = stamp_request(&JsonId::Int(5), "tools/call", Some(br#"{"name":"x","arguments":{}}"#), META).unwrap();
        let want = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"x","arguments":{{}},"_meta":{}}}}}"#,
            std::str::from_utf8(META).unwrap()
        ) + "\n";
        assert_eq!(text(out.clone()), want);
        let env = scan(&out[..out.len() - 1]);
        assert_eq!(
            (env.kind, env.id, env.method.as_deref()),
            (Kind::Request, Some(JsonId::Int(5)), Some("tools/call"))
        );
    }

    #[test]
    fn no_params_and_empty_params() {
        let a = text(stamp_request(&JsonId::Str("a\"b".into()), "tools/list", None, b"{}").unwrap());
        assert_eq!(a, "{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"method\":\"tools/list\",\"params\":{\"_meta\":{}}}\n");
        let b = text(stamp_request(&JsonId::Int(1), "m", Some(b" { } "), b"{\"k\":1}").unwrap());
        assert_eq!(b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"_meta\":{\"k\":1}}}\n");
    }

    #[test]
    fn the_callers_client_capabilities_replace_the_stamps() {
        let params = br#"{"name":"n","_meta":{"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"progressToken":1}}"#;
        let out = text(stamp_request(&JsonId::Int(3), "tools/call", Some(params), META).unwrap());
        assert_eq!(out.matches("clientCapabilities").count(), 1, "{out}");
        assert!(out.contains(r#""io.modelcontextprotocol/clientCapabilities":{"sampling":{}}"#), "{out}");
        assert!(!out.contains("roots"), "only the caller's first one: {out}");
        assert!(out.contains(r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#), "{out}");
        assert!(out.contains(r#""io.modelcontextprotocol/clientInfo""#), "{out}");
        assert!(out.contains(r#""progressToken":1"#), "{out}");
        // Without the caller's, the stamp's stands.
        let plain = text(stamp_request(&JsonId::Int(4), "tools/call",
                                       Some(br#"{"_meta":{"progressToken":2}}"#), META).unwrap());
        assert!(plain.contains(r#""io.modelcontextprotocol/clientCapabilities":{}"#), "{plain}");
    }

    #[test]
    fn merges_existing_meta_and_stamp_wins() {
        let params = br#"{"_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"old","io.modelcontextprotocol/protocolVersion":"older"},"name":"n"}"#;
        let out = text(stamp_request(&JsonId::Int(2), "tools/call", Some(params), META).unwrap());
        assert!(out.contains(r#""progressToken":7"#), "{out}");
        assert!(!out.contains("old\""), "{out}");
        assert_eq!(out.matches("protocolVersion").count(), 1, "{out}");
        assert_eq!(out.matches("_meta").count(), 1, "{out}");
        assert!(out.ends_with(",\"name\":\"n\"}}\n"), "{out}");
    }

    #[test]
    fn pretty_params_come_out_on_one_line() {
        let params = b"{\n  \"a\": [1,\n 2],\r\n  \"s\": \"keep  spaces\\n\"\n}\n";
        let out = stamp_request(&JsonId::Int(1), "m", Some(params), META).unwrap();
        assert_eq!(memchr::memchr(b'\n', &out), Some(out.len() - 1));
        assert!(text(out).contains(r#""a":[1,2],"s":"keep  spaces\n""#));
    }

    #[test]
    fn compact_members_are_copied_and_the_rest_compacted_member_by_member() {
        // One member written compactly, one with whitespace inside, one with whitespace
        // only before it, and strings whose spaces are content: each comes out compact.
        let params = br#"{"a":{"b":[1,2],"s":"x  y"},"c":{ "d" :1 },"e": [3],"_meta":{"k": "v  w"}}"#;
        let out = text(stamp_request(&JsonId::Int(1), "m", Some(params), META).unwrap());
        assert!(out.contains(r#""a":{"b":[1,2],"s":"x  y"},"c":{"d":1},"e":[3],"#), "{out}");
        assert!(out.contains(r#""k":"v  w"}"#), "{out}");
        assert_eq!(out.matches(" ").count(), 4, "only the strings' own spaces: {out}");
        let compact = text(encode_request(&JsonId::Int(2), "m", Some(br#"{"q":[1,{"r":"s t"}]}"#)).unwrap());
        let spaced = text(encode_request(&JsonId::Int(2), "m", Some(b"{ \"q\": [1, {\"r\": \"s t\"}] }")).unwrap());
        assert_eq!(compact, spaced);
    }

    #[test]
    fn the_measured_length_and_the_filled_buffer_agree_with_the_vec() {
        let cases: [(&[u8], &[u8]); 6] = [
            (br#"{"name":"x","arguments":{}}"#, META),
            (b" { } ", b"{\"k\":1}"),
            (b"{\n  \"a\": [1,\n 2],\r\n  \"s\": \"keep  spaces\\n\"\n}\n", META),
            (br#"{"a":{"b":[1,2]},"c":{ "d" :1 },"_meta":{"k": "v  w","io.modelcontextprotocol/clientCapabilities":{}}}"#, META),
            (br#"{"_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"old"},"name":"n"}"#, META),
            (b"{\"s\":\"\\u00e9\\n\\\"q\\\" caf\xc3\xa9\"}", b"{}"),
        ];
        for (params, meta) in cases {
            for id in [JsonId::Int(-17), JsonId::Str("a\"b\n".into())] {
                let want = stamp_request(&id, "tools/\"call\"", Some(params), meta).unwrap();
                let line = Stamped::new(&id, "tools/\"call\"", Some(params), meta).unwrap();
                assert_eq!(line.encoded_len(), want.len(), "{}", text(want.clone()));
                let mut buf = vec![std::mem::MaybeUninit::new(0xAAu8); want.len()];
                let mut fill = crate::json::Fill::new(&mut buf);
                line.write(&mut fill);
                assert!(fill.is_full());
                let got: Vec<u8> = buf.iter().map(|b| unsafe { b.assume_init() }).collect();
                assert_eq!(got, want);
            }
        }
        let line = Stamped::new(&JsonId::Int(1), "m", None, META).unwrap();
        let mut short = vec![std::mem::MaybeUninit::new(0u8); line.encoded_len() - 1];
        let overflow = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            line.write(&mut crate::json::Fill::new(&mut short));
        }));
        assert!(overflow.is_err(), "a fill never writes past its buffer");
    }

    #[test]
    fn ids_are_written_in_decimal_as_rust_formats_them() {
        for n in [0, 7, -7, 10, 99, -100, 12345, i64::MAX, i64::MIN, i64::MIN + 1] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn refuses_bad_params_and_meta() {
        let id = JsonId::Int(1);
        for p in
            [&b"[1]"[..], b"3", b"{\"a\":}", b"{} {}", b"{\"a\":\"x\ny\"}", b"{\"a\":\"\xff\"}", b"", b"{\"_meta\":1}",
             // Not UTF-8 in a key, in a long string's tail, outside any string.
             b"{\"\xff\":1}", b"{\"a\":\"0123456789012345678901234567890123456789012345678901234567890123456789\xc3(\"}",
             b"{\"a\":1\xc3\xa9}"]
        {
            assert!(stamp_request(&id, "m", Some(p), b"{}").is_err(), "{:?}", String::from_utf8_lossy(p));
        }
        assert!(stamp_request(&id, "m", Some(b"{\"_meta\":{},\"_meta\":{}}"), b"{}").is_err());
        assert!(stamp_request(&id, "m", None, b"[]").is_err());
        assert!(stamp_request(&id, "m", None, b"{\"a\":1").is_err());
    }

    #[test]
    fn other_encoders() {
        let id = JsonId::Int(3);
        assert_eq!(
            text(encode_request(&id, "initialize", Some(b"{ \"a\" : 1 }")).unwrap()),
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"a\":1}}\n"
        );
        assert_eq!(
            text(encode_request(&id, "ping", None).unwrap()),
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n"
        );
        assert_eq!(
            text(encode_notification("notifications/cancelled", Some(b"{}")).unwrap()),
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}\n"
        );
        assert_eq!(text(encode_result(&id, b" {}\n").unwrap()), "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n");
        assert_eq!(
            text(encode_error(None, -32700, "bad\n\"x\"", Some(b"[1, 2]")).unwrap()),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"bad\\n\\\"x\\\"\",\"data\":[1,2]}}\n"
        );
        assert!(encode_result(&id, b"").is_err());
        assert!(encode_request(&id, "m", Some(b"1")).is_err());
        for line in [
            encode_error(Some(&JsonId::Str("q".into())), 1, "m", None).unwrap(),
            encode_result(&JsonId::Str("r".into()), b"{\"resultType\":\"complete\"}").unwrap(),
        ] {
            assert_ne!(scan(&line[..line.len() - 1]).kind, Kind::Invalid);
        }
    }

    #[test]
    fn into_variants_leave_the_buffer_whole_on_error() {
        let mut out = b"prefix\n".to_vec();
        stamp_request_into(&mut out, &JsonId::Int(1), "m", Some(b"{\"a\":1}"), b"{}").unwrap();
        let good = out.len();
        assert!(stamp_request_into(&mut out, &JsonId::Int(2), "m", Some(b"{\"a\":1, \"b\": nope}"), b"{}").is_err());
        assert!(encode_request_into(&mut out, &JsonId::Int(3), "m", Some(b"7")).is_err());
        assert_eq!(out.len(), good);
        encode_request_into(&mut out, &JsonId::Int(4), "m", None).unwrap();
        assert!(text(out)
            .ends_with("\"params\":{\"a\":1,\"_meta\":{}}}\n{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"m\"}\n"));
        assert!(check_meta(b"{\"k\":[1]}").is_ok());
        assert!(check_meta(b"[1]").is_err());
    }

    fn member(src: &str, key: &str) -> Result<Option<String>, CodecError> {
        Ok(raw_member(src.as_bytes(), key)?.map(|(a, b)| src[a..b].to_owned()))
    }

    #[test]
    fn raw_member_returns_exact_value_bytes() {
        let src = r#" { "resultType" : "input_required" , "requestState" : "caf\u00e9\/x\"y" ,
            "inputRequests": {"a": {"method": "roots/list"}}, "n": -1.5e3, "z": [ 1 , 2 ] } "#;
        assert_eq!(member(src, "requestState").unwrap().as_deref(), Some(r#""caf\u00e9\/x\"y""#));
        assert_eq!(member(src, "inputRequests").unwrap().as_deref(), Some(r#"{"a": {"method": "roots/list"}}"#));
        assert_eq!(member(src, "n").unwrap().as_deref(), Some("-1.5e3"));
        assert_eq!(member(src, "z").unwrap().as_deref(), Some("[ 1 , 2 ]"));
        assert_eq!(member(src, "resultType").unwrap().as_deref(), Some(r#""input_required""#));
        assert_eq!(member(src, "missing").unwrap(), None);
        assert_eq!(member("{}", "a").unwrap(), None);
        // Only top-level members count.
        assert_eq!(member(r#"{"x":{"a":1}}"#, "a").unwrap(), None);
    }

    #[test]
    fn raw_member_compares_decoded_keys() {
        assert_eq!(member(r#"{"request\u0053tate":"s"}"#, "requestState").unwrap().as_deref(), Some(r#""s""#));
        assert_eq!(member(r#"{"\u00e9":1}"#, "é").unwrap().as_deref(), Some("1"));
    }

    #[test]
    fn raw_member_rejects_non_objects_bad_json_and_duplicates() {
        for bad in ["", "[]", "\"s\"", "1", "null", "{", r#"{"a":1,}"#, r#"{"a":1} x"#, "{\"a\":\"x\ny\"}"] {
            assert!(raw_member(bad.as_bytes(), "a").is_err(), "accepted {bad:?}");
        }
        assert!(raw_member(b"{\"a\":\"\xff\"}", "a").is_err());
        let e = raw_member(br#"{"a":1,"b":2,"a":3}"#, "a").unwrap_err();
        assert!(e.0.contains("duplicate"), "{e}");
        // A duplicate of another key is not our business.
        assert_eq!(raw_member(br#"{"b":1,"b":2,"a":3}"#, "a").unwrap(), Some((17, 18)));
        let deep = "{\"a\":".to_owned() + &"[".repeat(200) + &"]".repeat(200) + "}";
        assert!(raw_member(deep.as_bytes(), "a").is_err());
    }
}
