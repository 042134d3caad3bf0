//! The pure half of the batch API: one read buffer in, every complete line split and
//! scanned ([`feed`], [`finish`]), then correlated ([`route`]). Tokens are only moved, never
//! created or dropped, so all of it may run with the interpreter detached; Python objects
//! are built afterwards, in [`crate::py`].
//!
//! [`route`] is also the worker's reply path: a response to a forwarded call becomes a
//! RESULT frame instead of an event, written with the others of its read into one output
//! of exactly their size ([`Forwarded`]): the reply's one copy in the worker.

use std::ops::Range;

use crate::correlate::{CallCorrelator, Correlation, Token};
use crate::frames::{fits_result_frame, put_result_frame, result_type_code, HEADER_LEN, RESULT_HEAD_LEN};
use crate::json::Sink;
use crate::scan::{scan, Envelope, JsonId, Kind};
use crate::splitter::{Frame, LineSplitter};

/// One line of a read buffer and what the scan found (`None` for an oversized line).
#[derive(Debug)]
pub struct Scanned {
    pub frame: Frame,
    pub env: Option<Envelope>,
}

fn scan_frames(frames: Vec<Frame>, chunk: &[u8]) -> Vec<Scanned> {
    frames
        .into_iter()
        .map(|frame| {
            let env = match &frame {
                Frame::Oversized(..) => None,
                f => Some(scan(f.bytes(chunk))),
            };
            Scanned { frame, env }
        })
        .collect()
}

/// Split `chunk` and scan every complete line.
pub fn feed(splitter: &mut LineSplitter, chunk: &[u8]) -> Vec<Scanned> {
    let mut frames = Vec::new();
    splitter.feed(chunk, &mut frames);
    scan_frames(frames, chunk)
}

/// End of stream: scan the unterminated tail, if any.
pub fn finish(splitter: &mut LineSplitter) -> Vec<Scanned> {
    let mut frames = Vec::new();
    splitter.finish(&mut frames);
    scan_frames(frames, &[])
}

/// A line that stays an event, with what correlation found.
#[derive(Debug)]
pub struct Routed<T> {
    pub scanned: Scanned,
    pub correlation: Correlation,
    pub token: Option<Token<T>>,
}

/// The id a line answers, if it is a response: scanned, or skimmed from an oversized
/// line or an invalid one that reads as an answer (either then stays an event, its
/// request to be failed by the caller).
fn response_id(s: &Scanned) -> Option<Option<&JsonId>> {
    match (&s.env, &s.frame) {
        (Some(env), _) if matches!(env.kind, Kind::Result | Kind::Error) => Some(env.id.as_ref()),
        (Some(env), _) if env.kind == Kind::Invalid && env.id.is_some() => Some(env.id.as_ref()),
        (None, Frame::Oversized(_, skimmed)) if !skimmed.has_method && skimmed.id.is_some() => {
            Some(skimmed.id.as_ref())
        }
        _ => None,
    }
}

/// Replies to forwarded calls, held (each line where it lies: in the read buffer or owned)
/// until they are written as RESULT frames into an output of their exact size
/// ([`Forwarded::encoded_len`]): building them in a growing buffer first would copy every
/// reply twice, and at 64 KiB a reply's copies cost more than its scan.
#[derive(Debug, Default)]
pub struct Forwarded {
    replies: Vec<ForwardedReply>,
}

#[derive(Debug)]
struct ForwardedReply {
    frame: Frame,
    /// The payload within the line: the `result` value, or the whole line for an error.
    payload: Range<usize>,
    call_id: u64,
    request_id: i64,
    kind: u8,
    result_type: u8,
}

impl Forwarded {
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }

    /// The size of all the RESULT frames together.
    pub fn encoded_len(&self) -> usize {
        self.replies.iter().map(|r| HEADER_LEN + RESULT_HEAD_LEN + r.payload.len()).sum()
    }

    /// Write the RESULT frames, in the order their replies came, into `out`. `chunk` is the
    /// read buffer the replies were routed from.
    pub fn write<S: Sink>(&self, chunk: &[u8], out: &mut S) {
        for r in &self.replies {
            let payload = &r.frame.bytes(chunk)[r.payload.clone()];
            let written = put_result_frame(out, r.call_id, r.request_id, r.kind, r.result_type, payload);
            debug_assert!(written, "sized when it was kept");
        }
    }
}

/// Correlate every response in `scanned` (lines of `chunk`, or owned), and every invalid
/// line that carries the id it answers.
///
/// With `forward`, a response whose id was pending for a forwarded call is not returned:
/// it is kept in `forward`, to become a RESULT frame (payload: the `result` value's bytes,
/// or the whole line for an error). Everything else is returned in order, exactly as
/// without `forward` (an invalid answer to a forwarded call too: an event with the call
/// id as its token, for the caller to fail the call with the reason). (A payload too big
/// for a frame length, over 4 GiB, cannot happen under any sane line limit; it would stay
/// an event carrying the call id as its token.)
pub fn route<T>(
    scanned: Vec<Scanned>,
    chunk: &[u8],
    mut corr: Option<&mut CallCorrelator<T>>,
    mut forward: Option<&mut Forwarded>,
) -> Vec<Routed<T>> {
    let mut out = Vec::with_capacity(scanned.len());
    for s in scanned {
        let (correlation, token) = match (&mut corr, response_id(&s)) {
            (Some(c), Some(id)) => c.resolve(id),
            _ => (Correlation::None, None),
        };
        // Only a response becomes a RESULT frame: a malformed answer (an invalid line with
        // the id it answers) stays an event, for the caller to fail its call with the reason.
        let response = s.env.as_ref().filter(|env| env.kind != Kind::Invalid);
        if let (Some(Token::Call(call_id)), Some(fwd), Some(env)) = (&token, &mut forward, response) {
            let line_len = s.frame.bytes(chunk).len();
            let payload = match (env.kind, env.result_span) {
                (Kind::Result, Some((a, b))) => a..b,
                _ => 0..line_len,
            };
            if fits_result_frame(payload.len()) {
                // A forwarded call's id is always one the correlator allocated: an integer.
                let request_id = match &env.id {
                    Some(JsonId::Int(n)) => *n,
                    _ => -1,
                };
                let reply = ForwardedReply {
                    call_id: *call_id,
                    request_id,
                    kind: env.kind as u8,
                    result_type: result_type_code(env.result_type.as_deref()),
                    payload,
                    frame: s.frame,
                };
                fwd.replies.push(reply);
                continue;
            }
        }
        out.push(Routed { scanned: s, correlation, token });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{parse_result, FrameSplitter, DEFAULT_MAX_FRAME_BYTES, RT_ABSENT, RT_INPUT_REQUIRED};
    use crate::scan::JsonId;

    #[test]
    fn a_buffer_of_mixed_lines() {
        let mut s = LineSplitter::new(64);
        let first = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"met";
        let out = feed(&mut s, first);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].env.as_ref().unwrap().id, Some(JsonId::Int(1)));
        let second = b"hod\":\"m\"}\r\nnot json\n".to_vec();
        let mut second = second;
        second.extend(std::iter::repeat(b'x').take(100));
        second.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":\"t\",\"error\":{\"code\":1}}");
        let out = feed(&mut s, &second);
        let kinds: Vec<Option<Kind>> = out.iter().map(|x| x.env.as_ref().map(|e| e.kind)).collect();
        assert_eq!(kinds, vec![Some(Kind::Notification), Some(Kind::Invalid), None]);
        assert!(matches!(out[2].frame, Frame::Oversized(100, _)));
        let tail = finish(&mut s);
        assert_eq!(tail.len(), 1);
        let env = tail[0].env.as_ref().unwrap();
        assert_eq!((env.kind, env.id.clone()), (Kind::Error, Some(JsonId::Str("t".into()))));
    }

    #[test]
    fn forwarded_replies_become_result_frames() {
        let mut corr = CallCorrelator::new(1);
        let obj = corr.allocate("future", None).unwrap();
        let fwd = corr.allocate_call(500, None).unwrap();
        let err = corr.allocate_call(501, None).unwrap();
        let gone = corr.allocate_call(502, None).unwrap();
        corr.discard_call(502);
        let result = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{fwd},\"result\":{{\"resultType\":\"input_required\",\"x\":[1, 2]}}}}"
        );
        let error = format!("{{\"jsonrpc\":\"2.0\",\"id\":{err},\"error\":{{\"code\":-1,\"message\":\"no\"}}}}");
        let text = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{obj},\"result\":{{}}}}\n{result}\r\n{{\"jsonrpc\":\"2.0\",\"method\":\"n\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{gone},\"result\":{{}}}}\n{error}"
        );
        let stream = text.as_bytes();
        // Split in two so the error reply straddles the feeds and comes out of `finish`.
        let mut s = LineSplitter::new(1 << 20);
        let mut frames = Vec::new();
        let mut events = Vec::new();
        for (piece, done) in [(&stream[..stream.len() - 10], false), (&stream[stream.len() - 10..], true)] {
            let mut scanned = feed(&mut s, piece);
            if done {
                scanned.extend(finish(&mut s));
            }
            let mut fwd = Forwarded::default();
            events.extend(
                route(scanned, piece, Some(&mut corr), Some(&mut fwd))
                    .into_iter()
                    .map(|r| (r.scanned.env.unwrap().kind, r.correlation, r.token)),
            );
            let before = frames.len();
            fwd.write(piece, &mut frames);
            assert_eq!(frames.len() - before, fwd.encoded_len(), "sized exactly");
        }
        assert_eq!(
            events,
            vec![
                (Kind::Result, Correlation::Matched, Some(Token::Object("future"))),
                (Kind::Notification, Correlation::None, None),
                (Kind::Result, Correlation::Stale, None),
            ]
        );
        let mut fs = FrameSplitter::new(DEFAULT_MAX_FRAME_BYTES);
        let mut raw = Vec::new();
        fs.feed(&frames, &mut raw).unwrap();
        let got: Vec<_> = raw
            .iter()
            .map(|f| {
                let r = parse_result(f.body(&frames)).unwrap();
                (f.kind, r.call_id, r.request_id, r.kind, r.result_type, r.payload.to_vec())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    16,
                    500,
                    fwd,
                    Kind::Result as u8,
                    RT_INPUT_REQUIRED,
                    b"{\"resultType\":\"input_required\",\"x\":[1, 2]}".to_vec()
                ),
                (16, 501, err, Kind::Error as u8, RT_ABSENT, error.into_bytes()),
            ]
        );
        assert!(corr.is_empty() && corr.calls_pending() == 0);
    }

    #[test]
    fn an_oversized_reply_resolves_its_request_and_stays_an_event() {
        let mut corr = CallCorrelator::new(1);
        let fwd = corr.allocate_call(77, None).unwrap();
        let obj = corr.allocate("future", None).unwrap();
        let big = "y".repeat(200);
        let text = format!(
            "{{\"result\":{{\"t\":\"{big}\"}},\"jsonrpc\":\"2.0\",\"id\":{fwd}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{obj},\"method\":\"x\",\"params\":{{\"t\":\"{big}\"}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{obj},\"error\":{{\"code\":1,\"message\":\"{big}\"}}}}\n"
        );
        let mut s = LineSplitter::new(100);
        let mut fwd = Forwarded::default();
        let routed = route(feed(&mut s, text.as_bytes()), text.as_bytes(), Some(&mut corr), Some(&mut fwd));
        assert!(fwd.is_empty(), "an oversized reply is never forwarded");
        let got: Vec<_> = routed.iter().map(|r| (r.correlation, r.token.clone())).collect();
        assert_eq!(
            got,
            vec![
                (Correlation::Matched, Some(Token::Call(77))),
                (Correlation::None, None), // a request of the server's: not an answer
                (Correlation::Matched, Some(Token::Object("future"))),
            ]
        );
        assert!(corr.is_empty());
    }

    #[test]
    fn a_malformed_answer_resolves_its_request_and_stays_an_event() {
        let mut corr = CallCorrelator::new(1);
        let both = corr.allocate_call(10, None).unwrap();
        let fine = corr.allocate_call(11, None).unwrap();
        let deep = corr.allocate_call(12, None).unwrap();
        let obj = corr.allocate("future", None).unwrap();
        let gone = corr.allocate_call(13, None).unwrap();
        corr.discard_call(13);
        let mut text = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{both},\"result\":{{}},\"error\":{{\"code\":1,\"message\":\"m\"}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{fine},\"result\":{{\"ok\":true}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{deep},\"result\":{}{}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{gone},\"result\":{{}},\"error\":{{\"code\":1}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":{obj},\"method\":\"m\",\"result\":{{}}}}\n",
            "[".repeat(200),
            "]".repeat(200),
        )
        .into_bytes();
        text.extend_from_slice(format!("{{\"jsonrpc\":\"2.0\",\"id\":{obj},\"result\":\"").as_bytes());
        text.extend_from_slice(b"\xff\"}\n");
        let mut s = LineSplitter::new(1 << 20);
        let mut fwd = Forwarded::default();
        let routed = route(feed(&mut s, &text), &text, Some(&mut corr), Some(&mut fwd));
        let got: Vec<_> = routed
            .iter()
            .map(|r| {
                let env = r.scanned.env.as_ref().unwrap();
                (env.kind, env.id.clone(), r.correlation, r.token.clone())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (Kind::Invalid, Some(JsonId::Int(both)), Correlation::Matched, Some(Token::Call(10))),
                (Kind::Invalid, Some(JsonId::Int(deep)), Correlation::Matched, Some(Token::Call(12))),
                (Kind::Invalid, Some(JsonId::Int(gone)), Correlation::Stale, None),
                // A request of the server's (with a result it must not carry): not an answer.
                (Kind::Invalid, None, Correlation::None, None),
                (Kind::Invalid, Some(JsonId::Int(obj)), Correlation::Matched, Some(Token::Object("future"))),
            ]
        );
        // The well-formed answer among them still became a RESULT frame.
        let mut frames = Vec::new();
        fwd.write(&text, &mut frames);
        let mut fs = FrameSplitter::new(DEFAULT_MAX_FRAME_BYTES);
        let mut raw = Vec::new();
        fs.feed(&frames, &mut raw).unwrap();
        let results: Vec<_> = raw.iter().map(|f| parse_result(f.body(&frames)).unwrap().call_id).collect();
        assert_eq!(results, vec![11]);
        assert!(corr.is_empty() && corr.calls_pending() == 0);
    }

    #[test]
    fn without_forward_calls_stay_events() {
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let id = corr.allocate_call(9, None).unwrap();
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":1}}\n");
        let mut s = LineSplitter::new(1024);
        let routed = route(feed(&mut s, line.as_bytes()), line.as_bytes(), Some(&mut corr), None);
        assert_eq!(routed.len(), 1);
        assert_eq!((routed[0].correlation, &routed[0].token), (Correlation::Matched, &Some(Token::Call(9))));
        assert_eq!(routed[0].scanned.env.as_ref().unwrap().id, Some(JsonId::Int(id)));
    }
}
