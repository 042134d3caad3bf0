//! Envelope scan: classify one JSON-RPC line and pull out the routing fields without
//! decoding the payload.
//!
//! Only top-level members are looked at closely: `jsonrpc`, `id` and `method` are fully
//! validated and decoded; inside `error` we decode `code` and `message` and record the span
//! of `data`; inside `result` we decode `resultType` and record the span of the whole
//! value; inside an object `params` we record its span and the spans of `_meta`, `name` and
//! `uri`, what the HTTP transport reads for its headers (keys compared decoded, without
//! allocating; a member given twice is recorded at its last occurrence, the one decoders
//! keep). Everything else (the rest of params and of the result) is skipped with the
//! structural checker of [`crate::json`], which jumps over string bodies with `memchr2`;
//! params members are skipped by the same calls that skip a whole params, so the scan
//! accepts and rejects exactly the same lines either way. See that module for the one
//! check deliberately left to the later full decode (raw control characters inside nested
//! strings).
//!
//! The scan never panics and never recurses: any input bytes produce an [`Envelope`], with
//! `Kind::Invalid` and a human-readable reason when the line is not a JSON-RPC 2.0 message.
//! An invalid line that carries a usable top-level `id` and no `method` (a response gone
//! wrong: `result` with `error`, bytes that are not UTF-8, nesting past
//! [`MAX_NESTING_DEPTH`](crate::json::MAX_NESTING_DEPTH), a bad `error` member) keeps that
//! id, found by [`crate::skim`] after the scan failed, so the request it answers can be
//! failed at once with the reason instead of waiting for its deadline. A well-formed line
//! never pays for this.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::json::{raw_str_eq, Cursor, JsonError, Mode, ValueKind};
use crate::skim::Skim;

/// What a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Invalid = 0,
    Request = 1,
    Notification = 2,
    Result = 3,
    Error = 4,
    /// Produced by the stream decoder only, for lines over the size limit.
    Oversized = 5,
}

/// A JSON-RPC id exactly as sent. `Int(1)` and `Str("1")` are different ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JsonId {
    Int(i64),
    Str(String),
}

pub type Span = (usize, usize);

/// Where an object `params` is in the line, and the members of it that name what a
/// request is about: `_meta` (the protocol version, the progress token), `name` (a tool or
/// prompt) and `uri` (a resource). Each span is the whole value, quotes included; a member
/// given twice is its last occurrence, the one a decoder keeps (orjson, Python's `json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamsSpans {
    pub span: Span,
    pub meta: Option<Span>,
    pub name: Option<Span>,
    pub uri: Option<Span>,
}

/// Everything the scan learns about a line. Spans are byte offsets into the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub kind: Kind,
    pub id: Option<JsonId>,
    pub method: Option<String>,
    pub error_code: Option<i64>,
    pub error_message: Option<String>,
    pub error_data: Option<Span>,
    pub result_type: Option<String>,
    pub result_span: Option<Span>,
    /// Requests and notifications whose `params` is an object only.
    pub params: Option<ParamsSpans>,
    /// Why the line is `Kind::Invalid` (None otherwise).
    pub reason: Option<String>,
}

impl Envelope {
    pub fn invalid(reason: impl Into<String>) -> Self {
        Envelope {
            kind: Kind::Invalid,
            id: None,
            method: None,
            error_code: None,
            error_message: None,
            error_data: None,
            result_type: None,
            result_span: None,
            params: None,
            reason: Some(reason.into()),
        }
    }
}

/// The `id` member as found, before we know what kind of message it belongs to.
enum IdField {
    Absent,
    Null,
    Value(JsonId),
    /// Present but unusable (wrong type, out of range): the reason.
    Bad(String),
}

/// Top-level keys are few; a linear scan of a short list beats hashing until a hostile
/// line sends thousands of them, then we switch to a set.
struct SeenKeys<'a> {
    list: Vec<Cow<'a, str>>,
    set: Option<HashSet<Cow<'a, str>>>,
}

impl<'a> SeenKeys<'a> {
    fn new() -> Self {
        SeenKeys { list: Vec::new(), set: None }
    }

    /// Record `key`; false if it was already there.
    fn insert(&mut self, key: Cow<'a, str>) -> bool {
        if let Some(set) = self.set.as_mut() {
            return set.insert(key);
        }
        if self.list.contains(&key) {
            return false;
        }
        self.list.push(key);
        if self.list.len() > 16 {
            self.set = Some(self.list.drain(..).collect());
        }
        true
    }
}

/// Classify one line (without its newline). An invalid line's `id` is the one it answers,
/// when it reads as an answer (see the module's documentation).
pub fn scan(line: &[u8]) -> Envelope {
    match scan_inner(line) {
        Ok(env) => env,
        Err(e) => {
            let mut env = Envelope::invalid(e);
            env.id = answered_id(line);
            env
        }
    }
}

/// The top-level `id` of a line that is no request or notification (it has no top-level
/// `method`), followed byte by byte however broken the rest is: never recursing, keeping
/// a few bytes only, whatever the nesting or the encoding.
fn answered_id(line: &[u8]) -> Option<JsonId> {
    let mut skim = Skim::new();
    skim.feed(line);
    let found = skim.finish();
    if found.has_method {
        None
    } else {
        found.id
    }
}

fn json_err(e: JsonError) -> String {
    e.to_string()
}

fn scan_inner(line: &[u8]) -> Result<Envelope, String> {
    if let Err(e) = std::str::from_utf8(line) {
        return Err(format!("invalid UTF-8 at byte {}", e.valid_up_to()));
    }
    let mut cur = Cursor::new(line, Mode::Fast);
    cur.skip_ws();
    match cur.peek() {
        Some(b'{') => {}
        Some(b'[') => return Err("batch arrays are not supported (one message per line)".into()),
        None => return Err("empty line".into()),
        Some(_) => return Err("top-level value is not a JSON object".into()),
    }

    let mut jsonrpc_ok: Option<bool> = None;
    let mut id = IdField::Absent;
    let mut method: Option<Result<String, String>> = None;
    let mut params: Option<ParamsSpans> = None;
    let mut params_bad: Option<&'static str> = None;
    let mut result: Option<(Span, Result<Option<String>, String>)> = None;
    let mut error: Option<ErrorFields> = None;
    let mut seen = SeenKeys::new();
    let mut semantic: Option<String> = None; // first semantic problem, reported if JSON is fine

    cur.object(|cur, key, (key_at, _)| {
        if !seen.insert(key.clone()) {
            semantic.get_or_insert_with(|| format!("duplicate top-level key {key:?} at byte {key_at}"));
        }
        match key.as_ref() {
            "jsonrpc" => {
                cur.skip_ws();
                if cur.peek() == Some(b'"') {
                    jsonrpc_ok = Some(cur.parse_string()? == "2.0");
                } else {
                    cur.skip_value(1)?;
                    jsonrpc_ok = Some(false);
                }
            }
            "id" => id = parse_id(cur)?,
            "method" => {
                cur.skip_ws();
                method = Some(if cur.peek() == Some(b'"') {
                    Ok(cur.parse_string()?.into_owned())
                } else {
                    let (k, _, _) = cur.skip_value(1)?;
                    Err(format!("method is {}, not a string", k.name()))
                });
            }
            "params" => {
                cur.skip_ws();
                if cur.peek() == Some(b'{') {
                    params = Some(scan_params(cur)?);
                } else {
                    let (k, _, _) = cur.skip_value(1)?;
                    if k != ValueKind::Array {
                        params_bad = Some("params must be an object or an array");
                    }
                }
            }
            "result" => result = Some(scan_result(cur)?),
            "error" => error = Some(scan_error(cur)?),
            _ => {
                cur.skip_value(1)?;
            }
        }
        Ok(())
    })
    .map_err(json_err)?;
    cur.end().map_err(json_err)?;

    if let Some(reason) = semantic {
        return Err(reason);
    }
    match jsonrpc_ok {
        None => return Err("missing \"jsonrpc\": \"2.0\"".into()),
        Some(false) => return Err("\"jsonrpc\" is not \"2.0\"".into()),
        Some(true) => {}
    }
    if let IdField::Bad(reason) = id {
        return Err(reason);
    }
    if let Some(reason) = params_bad {
        return Err(reason.into());
    }

    let mut env = Envelope::invalid("");
    env.reason = None;
    match (method, result, error) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err("a message with \"method\" must not carry \"result\" or \"error\"".into())
        }
        (_, Some(_), Some(_)) => return Err("a response must not carry both \"result\" and \"error\"".into()),
        (Some(m), None, None) => {
            env.method = Some(m?);
            env.params = params;
            match id {
                IdField::Absent => env.kind = Kind::Notification,
                IdField::Null => return Err("a request id must not be null".into()),
                IdField::Value(v) => {
                    env.kind = Kind::Request;
                    env.id = Some(v);
                }
                IdField::Bad(_) => unreachable!("handled above"),
            }
        }
        (None, Some((span, result_type)), None) => {
            env.kind = Kind::Result;
            env.result_span = Some(span);
            env.result_type = result_type?;
            match id {
                IdField::Value(v) => env.id = Some(v),
                IdField::Absent => return Err("a result response must carry an id".into()),
                IdField::Null => return Err("a result response must not have a null id".into()),
                IdField::Bad(_) => unreachable!("handled above"),
            }
        }
        (None, None, Some(err)) => {
            let err = err.check()?;
            env.kind = Kind::Error;
            env.error_code = Some(err.code);
            env.error_message = err.message;
            env.error_data = err.data;
            // A peer that could not read our id answers with a null (or no) id.
            if let IdField::Value(v) = id {
                env.id = Some(v);
            }
        }
        (None, None, None) => return Err("neither \"method\", \"result\" nor \"error\"".into()),
    }
    Ok(env)
}

/// A standalone JSON-RPC id value (`7`, `"abc"`) read the way `scan` reads one inside a
/// line; None for anything that is not a usable id.
pub fn id_value(raw: &[u8]) -> Option<JsonId> {
    std::str::from_utf8(raw).ok()?;
    let mut cur = Cursor::new(raw, Mode::Fast);
    match parse_id(&mut cur) {
        Ok(IdField::Value(id)) if cur.end().is_ok() => Some(id),
        _ => None,
    }
}

fn parse_id(cur: &mut Cursor<'_>) -> Result<IdField, JsonError> {
    cur.skip_ws();
    if cur.peek() == Some(b'"') {
        return Ok(IdField::Value(JsonId::Str(cur.parse_string()?.into_owned())));
    }
    let (kind, start, end) = cur.skip_value(1)?;
    Ok(match kind {
        ValueKind::Null => IdField::Null,
        ValueKind::Integer => match cur.int_of(start, end) {
            Some(n) => IdField::Value(JsonId::Int(n)),
            None => IdField::Bad("id is an integer outside the 64-bit range".into()),
        },
        other => IdField::Bad(format!("id is {}; it must be a string or an integer", other.name())),
    })
}

/// `result`: record its span and, if it is an object, its top-level `resultType`
/// (`Err(reason)` when that member is unusable: not a string, or given twice).
fn scan_result(cur: &mut Cursor<'_>) -> Result<(Span, Result<Option<String>, String>), JsonError> {
    cur.skip_ws();
    if cur.peek() != Some(b'{') {
        let (_, s, e) = cur.skip_value(1)?;
        return Ok(((s, e), Ok(None)));
    }
    let start = cur.pos;
    let mut result_type: Option<String> = None;
    let mut problem: Option<String> = None;
    cur.object(|cur, key, (key_at, _)| {
        if key == "resultType" {
            cur.skip_ws();
            if cur.peek() != Some(b'"') {
                let (k, _, _) = cur.skip_value(2)?;
                problem.get_or_insert_with(|| format!("result.resultType is {}, not a string", k.name()));
                return Ok(());
            }
            let v = cur.parse_string()?.into_owned();
            if result_type.replace(v).is_some() {
                problem.get_or_insert_with(|| format!("duplicate key \"resultType\" in result at byte {key_at}"));
            }
        } else {
            cur.skip_value(2)?;
        }
        Ok(())
    })?;
    let span = (start, cur.pos);
    Ok((span, problem.map_or(Ok(result_type), Err)))
}

/// An object `params`: its span and those of its `_meta`, `name` and `uri` members. Each
/// member is skipped by the very call that would skip it inside a skipped `params`.
fn scan_params(cur: &mut Cursor<'_>) -> Result<ParamsSpans, JsonError> {
    let (mut meta, mut name, mut uri) = (None, None, None);
    let span = cur.skip_object(1, |cur, key, escaped| {
        let (_, start, end) = cur.skip_value(2)?;
        let slot = if raw_str_eq(key, escaped, "_meta") {
            &mut meta
        } else if raw_str_eq(key, escaped, "name") {
            &mut name
        } else if raw_str_eq(key, escaped, "uri") {
            &mut uri
        } else {
            return Ok(());
        };
        *slot = Some((start, end));
        Ok(())
    })?;
    Ok(ParamsSpans { span, meta, name, uri })
}

/// The members of `error`, checked for type once the whole line is known to be JSON.
struct ErrorFields {
    code: Option<Result<i64, String>>,
    message: Option<Result<String, String>>,
    data: Option<Span>,
    problem: Option<String>,
}

struct CheckedError {
    code: i64,
    message: Option<String>,
    data: Option<Span>,
}

impl ErrorFields {
    fn check(self) -> Result<CheckedError, String> {
        if let Some(p) = self.problem {
            return Err(p);
        }
        let code = match self.code {
            None => return Err("error.code is missing".into()),
            Some(c) => c?,
        };
        let message = self.message.transpose()?;
        Ok(CheckedError { code, message, data: self.data })
    }
}

fn scan_error(cur: &mut Cursor<'_>) -> Result<ErrorFields, JsonError> {
    let mut f = ErrorFields { code: None, message: None, data: None, problem: None };
    cur.skip_ws();
    if cur.peek() != Some(b'{') {
        let (k, _, _) = cur.skip_value(1)?;
        f.problem = Some(format!("error is {}, not an object", k.name()));
        return Ok(f);
    }
    cur.object(|cur, key, (key_at, _)| {
        let fresh = match key.as_ref() {
            "code" => {
                let (k, s, e) = cur.skip_value(2)?;
                let v = match k {
                    ValueKind::Integer => {
                        cur.int_of(s, e).ok_or_else(|| "error.code is outside the 64-bit range".to_string())
                    }
                    other => Err(format!("error.code is {}, not an integer", other.name())),
                };
                f.code.replace(v).is_none()
            }
            "message" => {
                cur.skip_ws();
                let v = if cur.peek() == Some(b'"') {
                    Ok(cur.parse_string()?.into_owned())
                } else {
                    let (k, _, _) = cur.skip_value(2)?;
                    Err(format!("error.message is {}, not a string", k.name()))
                };
                f.message.replace(v).is_none()
            }
            "data" => {
                let (_, s, e) = cur.skip_value(2)?;
                f.data.replace((s, e)).is_none()
            }
            _ => {
                cur.skip_value(2)?;
                true
            }
        };
        if !fresh {
            f.problem.get_or_insert_with(|| format!("duplicate key {key:?} in error at byte {key_at}"));
        }
        Ok(())
    })?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::MAX_NESTING_DEPTH;

    fn s(line: &str) -> Envelope {
        scan(line.as_bytes())
    }

    fn invalid(line: &[u8]) -> String {
        let e = scan(line);
        assert_eq!(e.kind, Kind::Invalid, "{:?} -> {e:?}", String::from_utf8_lossy(line));
        e.reason.unwrap()
    }

    #[test]
    fn classifies_the_four_kinds() {
        let e = s(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":[1,{"b":"}"}]}}"#);
        assert_eq!((e.kind, e.id, e.method.as_deref()), (Kind::Request, Some(JsonId::Int(7)), Some("tools/call")));

        let e = s(r#"{"method":"notifications/progress","jsonrpc":"2.0","params":{}}"#);
        assert_eq!((e.kind, e.id), (Kind::Notification, None));

        let line = r#" {"jsonrpc":"2.0","id":"1","result":{"content":[{"type":"text","text":"a\"}b"}],"resultType":"complete"}} "#;
        let e = s(line);
        assert_eq!(e.kind, Kind::Result);
        assert_eq!(e.id, Some(JsonId::Str("1".into())));
        assert_eq!(e.result_type.as_deref(), Some("complete"));
        let (a, b) = e.result_span.unwrap();
        assert!(line[a..b].starts_with("{\"content\"") && line[a..b].ends_with("\"complete\"}"));

        let line = r#"{"jsonrpc":"2.0","id":-3,"error":{"code":-32602,"message":"bad \u00e9","data":{"uri": "x"}}}"#;
        let e = s(line);
        assert_eq!((e.kind, e.id.clone(), e.error_code), (Kind::Error, Some(JsonId::Int(-3)), Some(-32602)));
        assert_eq!(e.error_message.as_deref(), Some("bad é"));
        let (a, b) = e.error_data.unwrap();
        assert_eq!(&line[a..b], r#"{"uri": "x"}"#);
    }

    #[test]
    fn error_without_usable_id_is_still_an_error() {
        for line in [
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#,
        ] {
            let e = s(line);
            assert_eq!((e.kind, e.id, e.error_code), (Kind::Error, None, Some(-32700)));
        }
    }

    #[test]
    fn escaped_keys_and_ids_are_decoded() {
        let e = s(r#"{"\u006asonrpc":"2.0","\u0069d":"a\ud83d\ude00","\u006dethod":"x\/y"}"#);
        assert_eq!(e.kind, Kind::Request);
        assert_eq!(e.id, Some(JsonId::Str("a😀".into())));
        assert_eq!(e.method.as_deref(), Some("x/y"));
    }

    #[test]
    fn id_extremes() {
        let e = s(r#"{"jsonrpc":"2.0","id":9223372036854775807,"result":{}}"#);
        assert_eq!(e.id, Some(JsonId::Int(i64::MAX)));
        let e = s(r#"{"jsonrpc":"2.0","id":-9223372036854775808,"result":{}}"#);
        assert_eq!(e.id, Some(JsonId::Int(i64::MIN)));
        invalid(br#"{"jsonrpc":"2.0","id":9223372036854775808,"result":{}}"#);
    }

    #[test]
    fn invalid_lines_have_reasons() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty"),
            (b"   ", "empty"),
            (b"{", "end of input"),
            (br#"{"jsonrpc":"2.0","id":1,"result":{}"#, "end of input"),
            (br#"[{"jsonrpc":"2.0","method":"a"}]"#, "batch"),
            (b"42", "not a JSON object"),
            (br#"{}"#, "jsonrpc"),
            (br#"{"jsonrpc":"1.0","method":"a"}"#, "not \"2.0\""),
            (br#"{"jsonrpc":2.0,"method":"a"}"#, "not \"2.0\""),
            (br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#, "both"),
            (br#"{"jsonrpc":"2.0","id":1}"#, "neither"),
            (br#"{"jsonrpc":"2.0","id":1,"method":"a","id":2}"#, "duplicate"),
            (br#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"a"}"#, "duplicate"),
            (br#"{"jsonrpc":"2.0","id":null,"method":"a"}"#, "null"),
            (br#"{"jsonrpc":"2.0","id":null,"result":{}}"#, "null"),
            (br#"{"jsonrpc":"2.0","result":{}}"#, "must carry an id"),
            (br#"{"jsonrpc":"2.0","id":1.0,"result":{}}"#, "float"),
            (br#"{"jsonrpc":"2.0","id":1e3,"method":"a"}"#, "float"),
            (br#"{"jsonrpc":"2.0","id":true,"method":"a"}"#, "boolean"),
            (br#"{"jsonrpc":"2.0","id":{},"method":"a"}"#, "object"),
            (br#"{"jsonrpc":"2.0","id":[1],"method":"a"}"#, "array"),
            (br#"{"jsonrpc":"2.0","id":1.5,"error":{"code":1,"message":"m"}}"#, "float"),
            (br#"{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}"#, "not an integer"),
            (br#"{"jsonrpc":"2.0","id":1,"error":{"code":"1","message":"m"}}"#, "not an integer"),
            (br#"{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}"#, "missing"),
            (br#"{"jsonrpc":"2.0","id":1,"error":"boom"}"#, "not an object"),
            (br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":2}}"#, "not a string"),
            (br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"code":2}}"#, "duplicate"),
            (br#"{"jsonrpc":"2.0","id":1,"method":5}"#, "not a string"),
            (br#"{"jsonrpc":"2.0","id":1,"method":"a","params":3}"#, "params"),
            (br#"{"jsonrpc":"2.0","id":1,"method":"a","result":{}}"#, "must not carry"),
            (br#"{"jsonrpc":"2.0","id":1,"result":{}} x"#, "trailing"),
            (br#"{"jsonrpc":"2.0","id":1,"result":{}}{}"#, "trailing"),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"\xff\"}}", "UTF-8"),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\0", "trailing"),
            (b"{\"jsonrpc\":\"2.0\",\"method\":\"a\0\"}", "control"),
            (br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":1}}"#, "resultType"),
            (br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"a","resultType":"b"}}"#, "duplicate"),
        ];
        for (line, want) in cases {
            let reason = invalid(line);
            assert!(reason.contains(want), "{:?}: reason {reason:?} lacks {want:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn a_malformed_answer_keeps_the_id_it_answers() {
        let deep = |levels: usize| {
            let mut line = br#"{"jsonrpc":"2.0","id":7,"result":{"deep":"#.to_vec();
            line.extend(std::iter::repeat(b'[').take(levels));
            line.extend(std::iter::repeat(b']').take(levels));
            line.extend_from_slice(b"}}");
            line
        };
        let cases: Vec<(Vec<u8>, Option<JsonId>, &str)> = vec![
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{},"error":{"code":-32603,"message":"m"}}"#.to_vec(),
                Some(JsonId::Int(7)),
                "both",
            ),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":\"k\",\"result\":{\"t\":\"\xff\"}}".to_vec(),
                Some(JsonId::Str("k".into())),
                "UTF-8",
            ),
            (deep(200), Some(JsonId::Int(7)), "nesting deeper than 128"),
            (deep(100_000), Some(JsonId::Int(7)), "nesting deeper than 128"),
            (br#"{"jsonrpc":"2.0","id":7,"error":{"code":"x","message":"m"}}"#.to_vec(), Some(JsonId::Int(7)), "code"),
            (br#"{"jsonrpc":"2.0","id":7}"#.to_vec(), Some(JsonId::Int(7)), "neither"),
            (br#"{"jsonrpc":"1.0","id":7,"result":{}}"#.to_vec(), Some(JsonId::Int(7)), "2.0"),
            // Cut short, but the id was whole before the cut.
            (br#"{"jsonrpc":"2.0","id":7,"result":{"resultTy"#.to_vec(), Some(JsonId::Int(7)), "unterminated"),
            // Written after the payload, as the TypeScript SDK writes it.
            (
                br#"{"result":{"id":1},"error":{"code":1,"message":"m"},"jsonrpc":"2.0","id":"last"}"#.to_vec(),
                Some(JsonId::Str("last".into())),
                "both",
            ),
            // No id to keep: a request or notification (its id is the server's own), an
            // unusable or absent id, a batch, no JSON at all.
            (br#"{"jsonrpc":"2.0","id":7,"method":"m","result":{}}"#.to_vec(), None, "must not carry"),
            (br#"{"jsonrpc":"2.0","id":7,"method":"m","params":3}"#.to_vec(), None, "params"),
            (br#"{"jsonrpc":"2.0","id":7.5,"result":{}}"#.to_vec(), None, "float"),
            (br#"{"jsonrpc":"2.0","id":7,"id":8,"result":{}}"#.to_vec(), None, "duplicate"),
            (br#"{"jsonrpc":"2.0","id":null,"result":{}}"#.to_vec(), None, "null"),
            (br#"{"jsonrpc":"2.0","result":{},"error":{"code":1}}"#.to_vec(), None, "both"),
            (br#"[{"jsonrpc":"2.0","id":7,"result":{}}]"#.to_vec(), None, "batch"),
            (b"id: 7".to_vec(), None, "not a JSON object"),
        ];
        for (line, id, reason) in cases {
            let env = scan(&line);
            let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
            assert_eq!((env.kind, env.id), (Kind::Invalid, id), "{shown}");
            let why = env.reason.unwrap();
            assert!(why.contains(reason), "{shown}: reason {why:?} lacks {reason:?}");
        }
    }

    /// The text of each span of `p` in `line`, for readable assertions.
    fn spans(line: &str, p: ParamsSpans) -> [Option<&str>; 4] {
        [Some(p.span), p.meta, p.name, p.uri].map(|s| s.map(|(a, b)| &line[a..b]))
    }

    #[test]
    fn params_members_are_found_by_their_decoded_keys() {
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","name":"top","_meta":{},"params":{"name":"echo","arguments":{"name":"inner","uri":"x","_meta":1},"_meta":{"progressToken":"t\"}"}}}"#;
        let p = s(line).params.unwrap();
        assert_eq!(
            spans(line, p),
            [
                Some(
                    r#"{"name":"echo","arguments":{"name":"inner","uri":"x","_meta":1},"_meta":{"progressToken":"t\"}"}}"#
                ),
                Some(r#"{"progressToken":"t\"}"}"#),
                Some(r#""echo""#),
                None
            ]
        );

        let line = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\",\"params\" : { \"uri\" :\n \"file:///a\" , \"name\":5 } }";
        let object = &line[line.find("{ \"uri\"").unwrap()..line.len() - 2];
        assert_eq!(spans(line, s(line).params.unwrap()), [Some(object), None, Some("5"), Some(r#""file:///a""#)]);

        // Escaped spellings are the same keys; near misses are not; a repeated member is
        // its last occurrence, as orjson and Python's json keep it.
        let line = r#"{"jsonrpc":"2.0","id":2,"method":"m","params":{"n\u0061me":"a","\u005Fmeta":{},"ur\u0069":"u","nam\u00e9":1,"name\u0000":2,"Name":3,"nam":4,"names":5,"n\/ame":6,"\u006eame":"b"}}"#;
        let p = s(line).params.unwrap();
        assert_eq!(spans(line, p)[1..], [Some("{}"), Some(r#""b""#), Some(r#""u""#)]);

        let line = r#"{"jsonrpc":"2.0","id":3,"method":"m","params":{}}"#;
        assert_eq!(s(line).params.map(|p| spans(line, p)), Some([Some("{}"), None, None, None]));
    }

    #[test]
    fn only_object_params_of_requests_and_notifications_have_spans() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[{"name":"x"}]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1},"params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"x"},"params":{}}"#,
        ] {
            assert_eq!(s(line).params, None, "{line}");
        }
    }

    #[test]
    fn nesting_inside_params_counts_as_when_params_was_skipped_whole() {
        // The top-level object is depth 1, params 2: 126 arrays inside reach the limit.
        let line = |arrays: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"name":{}{}}}}}"#,
                "[".repeat(arrays),
                "]".repeat(arrays)
            )
        };
        assert!(s(&line(MAX_NESTING_DEPTH - 2)).params.is_some());
        assert!(s(&line(MAX_NESTING_DEPTH - 1)).reason.unwrap().contains("nesting"));
    }

    /// Random object params whose keys are drawn from spellings of `_meta`, `name`, `uri`
    /// (plain and escaped), near misses and others, repeated at will, with values that hold
    /// those keys themselves, in lines whose other members come in random order: each span
    /// is that of the last member whose key decodes to the name, or None.
    #[test]
    fn params_spans_agree_with_where_members_were_written() {
        let keys: &[(&str, &str)] = &[
            ("name", "name"),
            ("n\\u0061me", "name"),
            ("\\u006Eame", "name"),
            ("_meta", "_meta"),
            ("\\u005fmeta", "_meta"),
            ("uri", "uri"),
            ("ur\\u0069", "uri"),
            ("arguments", "arguments"),
            ("nam", "nam"),
            ("names", "names"),
            ("Name", "Name"),
            ("nam\\u00e9", "namé"),
            ("\\/uri", "/uri"),
            ("_meta\\n", "_meta\n"),
        ];
        let values = [
            "1",
            "\"x\"",
            "\"a\\\"}b\"",
            "{\"name\":\"inner\",\"uri\":[1,{\"_meta\":{}}]}",
            "[]",
            "null",
            "-2.5e3",
            "{}",
            "\"\\u00e9\\\\\"",
        ];
        let ws = ["", "", " ", "\n\t "];
        let mut next = crate::testing::xorshift(0x6a09_e667_f3bc_c908u64);
        let mut pick = |n: usize| next() as usize % n;
        let mut found = [0usize; 3];
        for round in 0..20_000 {
            let mut params = String::from("{");
            let mut want: [Option<Span>; 3] = [None; 3];
            for i in 0..pick(8) {
                if i > 0 {
                    params.push(',');
                }
                let (raw, key) = keys[pick(keys.len())];
                params += &format!("{}\"{raw}\"{}:{}", ws[pick(4)], ws[pick(4)], ws[pick(4)]);
                let start = params.len();
                params += values[pick(values.len())];
                if let Some(slot) = ["_meta", "name", "uri"].iter().position(|k| *k == key) {
                    want[slot] = Some((start, params.len()));
                }
                params += ws[pick(4)];
            }
            params.push('}');

            let mut members = vec![
                "\"jsonrpc\":\"2.0\"".to_string(),
                "\"method\":\"tools/call\"".into(),
                "\"name\":\"top\"".into(),
                "\"_meta\":{\"uri\":1}".into(),
            ];
            if round % 3 != 0 {
                members.push(format!("\"id\":{round}"));
            }
            let at = pick(members.len() + 1);
            members.insert(at, format!("\"params\":{}", ws[pick(4)]));
            for i in (1..members.len()).rev() {
                members.swap(i, pick(i + 1));
            }
            let mut line = String::from("{");
            for member in &members {
                if line.len() > 1 {
                    line.push(',');
                }
                if member.starts_with("\"params\"") {
                    line += member;
                    let offset = line.len();
                    line += &params;
                    for (slot, w) in want.iter_mut().enumerate() {
                        *w = w.map(|(a, b)| (a + offset, b + offset));
                        found[slot] += usize::from(w.is_some());
                    }
                    line += ws[pick(4)];
                } else {
                    line += member;
                }
            }
            line.push('}');
            let env = s(&line);
            assert!(matches!(env.kind, Kind::Request | Kind::Notification), "{line}: {:?}", env.reason);
            let p = env.params.expect("object params");
            assert_eq!(&line[p.span.0..p.span.1], params, "{line}");
            assert_eq!([p.meta, p.name, p.uri], want, "{line}");
        }
        assert!(found.iter().all(|&n| n > 3_000), "too few members of each name: {found:?}");
    }

    #[test]
    fn deep_nesting_is_invalid_not_a_crash() {
        let mut line = br#"{"jsonrpc":"2.0","id":1,"result":"#.to_vec();
        line.extend(std::iter::repeat(b'[').take(100_000));
        assert!(invalid(&line).contains("nesting"));
        let bare = vec![b'['; 100_000];
        invalid(&bare);
        // Depth just inside the limit is fine (top-level object = 1, result = 2).
        let mut ok = br#"{"jsonrpc":"2.0","id":1,"result":"#.to_vec();
        ok.extend(std::iter::repeat(b'[').take(127));
        ok.extend(std::iter::repeat(b']').take(127));
        ok.push(b'}');
        assert_eq!(scan(&ok).kind, Kind::Result);
    }

    #[test]
    fn never_panics_on_prefixes_and_mutations() {
        let base = br#"{"jsonrpc":"2.0","id":"x\"y","result":{"resultType":"complete","a":[1,-2.5e3,true,null,{"b":"\u00e9\\"}]},"extra":{}}"#;
        for i in 0..=base.len() {
            let _ = scan(&base[..i]);
            for b in [b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', 0xff, 0] {
                let mut m = base.to_vec();
                if i < m.len() {
                    m[i] = b;
                    let _ = scan(&m);
                }
            }
        }
        assert_eq!(scan(base).kind, Kind::Result);
    }
}
