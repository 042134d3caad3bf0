//! Following a line that is too long to keep: its top-level `id`, and whether it is a
//! response, learned on the fly while its bytes are discarded.
//!
//! The splitter never buffers a line over the limit. Without its `id`, though, the request
//! it answers would wait for its own deadline. [`Skim`] is fed the line's bytes in pieces,
//! as they pass, and tracks just enough JSON structure to find the members of the
//! top-level object: its nesting depth, whether it is inside a string (and an escape),
//! and, at depth 1, the current key. It keeps at most [`MAX_KEY`] bytes of a key and
//! [`MAX_ID`] bytes of the `id` value, whatever the line's size, and never validates the
//! rest: a line that is not well-formed simply yields no id. Serializers put `id` before
//! or after the payload (the TypeScript SDK writes `{"result": ..., "jsonrpc", "id"}`), so
//! the whole line is followed, not only its head. The scanner follows a line it found
//! invalid the same way, for the id a malformed answer carries ([`crate::scan`]); an `id`
//! given twice is none.

use crate::json::{Cursor, Mode};
use crate::scan::{self, JsonId};

/// Longest key kept (raw, quotes and escapes included); longer keys are none we need.
pub const MAX_KEY: usize = 64;
/// Longest `id` value kept (raw); a longer one is not an id we could have sent.
pub const MAX_ID: usize = 256;

/// What was learned about an oversized line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skimmed {
    /// The top-level `id`, when it was a usable id (a string or a 64-bit integer).
    pub id: Option<JsonId>,
    /// Whether the line has a top-level `method` (a request or notification, so its `id`
    /// names a request of the server's, not one of ours).
    pub has_method: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// Between members of the top-level object: the next string is a key.
    Key,
    /// Inside a key string.
    InKey,
    /// After a key, before its `:`.
    Colon,
    /// Inside the value of a member we do not keep.
    Skip,
    /// Inside the value of `id`, kept.
    Id,
}

/// Streaming state for one line.
#[derive(Debug, Clone)]
pub struct Skim {
    depth: usize,
    in_string: bool,
    escaped: bool,
    member: Member,
    key: Vec<u8>,
    id: Vec<u8>,
    /// The line is not a JSON object (or broke in a way that makes its members unknowable).
    lost: bool,
    /// The top-level object gave `id` more than once: no id of it can be trusted.
    ids_seen: u8,
    out: Skimmed,
}

impl Default for Skim {
    fn default() -> Self {
        Skim::new()
    }
}

impl Skim {
    pub fn new() -> Self {
        Skim {
            depth: 0,
            in_string: false,
            escaped: false,
            member: Member::Skip,
            key: Vec::new(),
            id: Vec::new(),
            lost: false,
            ids_seen: 0,
            out: Skimmed::default(),
        }
    }

    /// Follow the next piece of the line.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.lost {
                return;
            }
            self.step(b);
        }
    }

    /// The line ended: what was learned. An `id` still being read (a value at the very
    /// end, without a closing brace) is not trusted, nor one of several.
    pub fn finish(mut self) -> Skimmed {
        if self.ids_seen > 1 {
            self.out.id = None;
        }
        self.out
    }

    fn keep(buf: &mut Vec<u8>, limit: usize, b: u8) -> bool {
        if buf.len() >= limit {
            return false;
        }
        buf.push(b);
        true
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            match self.member {
                Member::InKey => {
                    // An over-long key is kept truncated: it can no longer equal "id".
                    Self::keep(&mut self.key, MAX_KEY, b);
                    if !self.in_string {
                        self.member = Member::Colon;
                    }
                }
                // An over-long id is no id to correlate: the rest of it is skipped.
                Member::Id if self.depth == 1 && !Self::keep(&mut self.id, MAX_ID, b) => {
                    self.member = Member::Skip;
                }
                _ => {}
            }
            return;
        }
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => {}
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.member == Member::Key {
                    self.member = Member::InKey;
                    self.key.clear();
                    self.key.push(b);
                } else if self.depth == 1
                    && self.member == Member::Id
                    && !Self::keep(&mut self.id, MAX_ID, b)
                {
                    self.member = Member::Skip;
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && b == b'[' {
                    self.lost = true; // a batch: no single id to find
                    return;
                }
                if self.depth == 1 && self.member == Member::Id {
                    self.member = Member::Skip; // an object or array is no id
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.member = Member::Key;
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.end_member();
                }
                if self.depth == 0 {
                    self.lost = true;
                    return;
                }
                self.depth -= 1;
            }
            b':' if self.depth == 1 && self.member == Member::Colon => {
                self.member = match decoded_key(&self.key).as_deref() {
                    Some("id") => {
                        self.ids_seen = self.ids_seen.saturating_add(1);
                        self.id.clear();
                        Member::Id
                    }
                    Some("method") => {
                        self.out.has_method = true;
                        Member::Skip
                    }
                    _ => Member::Skip,
                };
            }
            b',' if self.depth == 1 => {
                self.end_member();
                self.member = Member::Key;
            }
            _ => {
                if self.depth == 0 {
                    self.lost = true; // not an object
                } else if self.depth == 1 && self.member == Member::Id && !Self::keep(&mut self.id, MAX_ID, b) {
                    self.member = Member::Skip;
                }
            }
        }
    }

    fn end_member(&mut self) {
        if self.member == Member::Id {
            self.out.id = scan::id_value(&self.id);
            self.member = Member::Skip;
        }
    }
}

/// A raw key (with its quotes) as text, escapes decoded; None if it is not a string.
fn decoded_key(raw: &[u8]) -> Option<String> {
    let mut cur = Cursor::new(raw, Mode::Fast);
    cur.parse_string().ok().map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skim_in_pieces(line: &[u8], piece: usize) -> Skimmed {
        let mut s = Skim::new();
        for chunk in line.chunks(piece.max(1)) {
            s.feed(chunk);
        }
        s.finish()
    }

    fn every_split(line: &[u8]) -> Skimmed {
        let whole = skim_in_pieces(line, line.len());
        for piece in 1..line.len().min(40) {
            assert_eq!(skim_in_pieces(line, piece), whole, "pieces of {piece}");
        }
        whole
    }

    #[test]
    fn id_before_or_after_the_payload() {
        let big = "x".repeat(5000);
        let before = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"text":"{big}"}}}}"#);
        let after = format!(r#"{{"result":{{"a":[1,{{"id":9}}],"t":"{big}"}},"jsonrpc":"2.0","id":"k\"1"}}"#);
        assert_eq!(every_split(before.as_bytes()), Skimmed { id: Some(JsonId::Int(7)), has_method: false });
        assert_eq!(every_split(after.as_bytes()), Skimmed { id: Some(JsonId::Str("k\"1".into())), has_method: false });
    }

    #[test]
    fn nested_ids_and_strings_that_look_like_structure_do_not_count() {
        let line = br#"{"result":{"id":1,"s":"}, \"id\": 2, {"},"x":"\\","jsonrpc":"2.0","id":3}"#;
        assert_eq!(every_split(line).id, Some(JsonId::Int(3)));
    }

    #[test]
    fn requests_are_told_apart_and_escaped_keys_are_decoded() {
        let line = br#"{"jsonrpc":"2.0","\u0069d":4,"method":"sampling/createMessage","params":{}}"#;
        assert_eq!(every_split(line), Skimmed { id: Some(JsonId::Int(4)), has_method: true });
    }

    #[test]
    fn no_usable_id() {
        for line in [
            &br#"{"jsonrpc":"2.0","id":null,"error":{}}"#[..],
            br#"{"jsonrpc":"2.0","id":1.5,"result":1}"#,
            br#"{"jsonrpc":"2.0","id":[1],"result":1}"#,
            br#"[{"jsonrpc":"2.0","id":1,"result":1}]"#,
            br#"not json at all, "id": 1"#,
            br#"{"jsonrpc":"2.0","result":1,"id":12"#, // cut before the object closed
            br#"{"jsonrpc":"2.0","id":1,"result":1,"id":2}"#, // which one?
            br#"{"jsonrpc":"2.0","id":1,"result":1,"\u0069d":1}"#,
        ] {
            assert_eq!(every_split(line).id, None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn memory_is_bounded_by_the_kept_parts() {
        let mut s = Skim::new();
        s.feed(b"{\"");
        s.feed(&vec![b'k'; 100_000]);
        s.feed(b"\":1,\"id\":\"");
        s.feed(&vec![b'v'; 100_000]);
        s.feed(b"\"}");
        assert!(s.key.capacity() <= 4 * MAX_KEY && s.id.capacity() <= 4 * MAX_ID);
        assert_eq!(s.finish().id, None, "an over-long id is no id of ours");
    }
}
