//! The parent <-> worker channel: length-prefixed binary frames and the two hot-path
//! frame kinds, handled without Python objects.
//!
//! A frame is `u32 LE length | u8 type | body`, the length counting the type byte and the
//! body. Only two types have a layout known here (the rest is opaque, returned as
//! `(type, body)`):
//!
//! - `SUBMIT` (parent -> worker): `u64 call_id | u32 timeout_ms | u32 credential | u16
//!   method_len | method | params` (all LE; empty params = none). The worker's
//!   [`SubmitStamper`] turns it into a stamped JSON-RPC request line for the server's
//!   stdin. `credential` is the slot of the identity whose credentials the request goes
//!   with (0: the host's own); only a stamper keeping lines apart (HTTP) hands it back.
//! - `RESULT` (worker -> parent): `u64 call_id | i64 request_id | u8 kind | u8 result_type |
//!   payload`; `request_id` is the JSON-RPC id the request went out with (the worker chose
//!   it: the parent's telemetry reports it), the payload is the raw `result` value for a
//!   result and the whole response line for an error. Built by [`crate::decoder::route`],
//!   read by the parent's [`ResultDemux`].
//!
//! Both ends come from one install and trust each other, so a malformed length (or a
//! hot-path frame too short for its fixed head) means the channel is corrupt: it is
//! reported as [`CorruptFrame`], sticky, and the caller tears the worker down. A SUBMIT
//! whose *contents* cannot become a request (bad params, bad method) is not corruption:
//! it is handed back as a `SUBMIT_REJECTED` pseudo-frame so just that one call fails.

use std::ops::Range;

use crate::correlate::{CallCorrelator, Correlation, Token};
use crate::json::Sink;
use crate::scan::JsonId;
use crate::stamp::{self, CodecError};

pub const FRAME_SUBMIT: u8 = 1;
pub const FRAME_RESULT: u8 = 16;
/// Never sent on the channel: the stamper's report of a SUBMIT it could not stamp.
/// Body: `u64 LE call_id | reason (UTF-8)`.
pub const FRAME_SUBMIT_REJECTED: u8 = 255;
/// Never sent on the channel: a run of consecutive SUBMITs, stamped. Body: their request
/// lines, ready for the server, in the order the parent sent them.
pub const FRAME_STAMPED: u8 = 254;
/// Never sent on the channel: one stamped SUBMIT of a credential slot other than 0 (a
/// stamper keeping lines apart only). Body: `u32 LE credential | request line`.
pub const FRAME_STAMPED_FOR: u8 = 253;

/// `RESULT` frame `result_type` codes.
pub const RT_ABSENT: u8 = 0;
pub const RT_COMPLETE: u8 = 1;
pub const RT_INPUT_REQUIRED: u8 = 2;
pub const RT_OTHER: u8 = 3;

/// The largest frame length accepted by default: a maximal JSON-RPC line (the 16 MiB
/// line limit) fits with a wide margin; anything bigger is a broken channel.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 * 1024 * 1024 + 64;

/// Bytes before the body: the length and the type.
pub const HEADER_LEN: usize = 5;
/// `call_id | timeout_ms | credential | method_len`.
pub const SUBMIT_HEAD_LEN: usize = 8 + 4 + 4 + 2;
/// `call_id | request_id | kind | result_type`.
pub const RESULT_HEAD_LEN: usize = 8 + 8 + 1 + 1;

/// The channel can no longer be framed; the worker on the other side must go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptFrame(pub String);

impl std::fmt::Display for CorruptFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "corrupt channel: {}", self.0)
    }
}

impl std::error::Error for CorruptFrame {}

// ---------------------------------------------------------------------------- splitting

/// Where a frame's body lives.
#[derive(Debug, PartialEq, Eq)]
pub enum Body {
    /// Inside the chunk just fed: `chunk[range]`, not copied.
    Chunk(Range<usize>),
    /// A frame that straddled feeds, assembled in the carry buffer and moved out whole
    /// (header included; the body starts at [`HEADER_LEN`]).
    Carried(Vec<u8>),
}

#[derive(Debug, PartialEq, Eq)]
pub struct RawFrame {
    pub kind: u8,
    pub body: Body,
}

impl RawFrame {
    /// The body bytes, given the chunk the frame was split from.
    pub fn body<'a>(&'a self, chunk: &'a [u8]) -> &'a [u8] {
        match &self.body {
            Body::Chunk(r) => &chunk[r.clone()],
            Body::Carried(v) => &v[HEADER_LEN..],
        }
    }
}

/// Chunks of channel bytes in, complete frames out.
///
/// Frames lying wholly inside a chunk are reported as ranges into it. Only the one frame
/// that straddles chunks is copied, once, into the carry buffer (sized for the whole
/// frame as soon as its length is known, so it never regrows), and is moved out when it
/// completes. Nothing is ever shifted or re-copied.
#[derive(Debug)]
pub struct FrameSplitter {
    max_frame: usize,
    carry: Vec<u8>,
    corrupt: Option<CorruptFrame>,
}

impl FrameSplitter {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameSplitter { max_frame: max_frame_bytes, carry: Vec::new(), corrupt: None }
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame
    }

    /// Bytes held for an incomplete frame.
    pub fn buffered(&self) -> usize {
        self.carry.len()
    }

    /// Mark the channel corrupt (also for callers that find a bad frame body); every later
    /// feed fails the same way, so no frame after the damage is ever trusted.
    pub fn poison(&mut self, reason: String) -> CorruptFrame {
        let e = CorruptFrame(reason);
        self.carry = Vec::new();
        self.corrupt = Some(e.clone());
        e
    }

    /// Total frame size (header included) from a length prefix.
    fn frame_size(&mut self, prefix: &[u8]) -> Result<usize, CorruptFrame> {
        let prefix: [u8; 4] = prefix[..4].try_into().expect("4 bytes");
        let len = u32::from_le_bytes(prefix) as usize;
        if len == 0 {
            return Err(self.poison("frame length 0 (a frame holds at least its type byte)".into()));
        }
        if len > self.max_frame {
            return Err(self.poison(format!("frame length {len} exceeds the limit of {} bytes", self.max_frame)));
        }
        Ok(4 + len)
    }

    /// Split `chunk`, appending complete frames to `out`. On error `out` may hold frames
    /// from before the damage; callers that act on frames should check first (see
    /// [`SubmitStamper::feed`]).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<RawFrame>) -> Result<(), CorruptFrame> {
        if let Some(e) = &self.corrupt {
            return Err(e.clone());
        }
        let mut pos = 0;
        if !self.carry.is_empty() {
            if self.carry.len() < 4 {
                let take = (4 - self.carry.len()).min(chunk.len());
                self.carry.extend_from_slice(&chunk[..take]);
                pos = take;
                if self.carry.len() < 4 {
                    return Ok(());
                }
            }
            let prefix: [u8; 4] = self.carry[..4].try_into().expect("4 bytes");
            let size = self.frame_size(&prefix)?;
            self.carry.reserve_exact(size - self.carry.len());
            let take = (size - self.carry.len()).min(chunk.len() - pos);
            self.carry.extend_from_slice(&chunk[pos..pos + take]);
            pos += take;
            if self.carry.len() < size {
                return Ok(());
            }
            let whole = std::mem::take(&mut self.carry);
            out.push(RawFrame { kind: whole[4], body: Body::Carried(whole) });
        }
        while chunk.len() - pos >= 4 {
            let size = self.frame_size(&chunk[pos..pos + 4])?;
            if chunk.len() - pos < size {
                break;
            }
            out.push(RawFrame { kind: chunk[pos + 4], body: Body::Chunk(pos + HEADER_LEN..pos + size) });
            pos += size;
        }
        if pos < chunk.len() {
            let rest = &chunk[pos..];
            if rest.len() >= 4 {
                // Size known (and checked above): allocate for the whole frame at once.
                let size = self.frame_size(rest)?;
                self.carry.reserve_exact(size);
            }
            self.carry.extend_from_slice(rest);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------- encoding

/// Append `len | kind` for a body of `body_len` bytes; false if no u32 length can say it.
fn put_header<S: Sink>(out: &mut S, kind: u8, body_len: usize) -> bool {
    match header(kind, body_len) {
        Some(head) => {
            out.put(&head);
            true
        }
        None => false,
    }
}

/// `len | kind` for a body of `body_len` bytes; None if no u32 length can say it.
fn header(kind: u8, body_len: usize) -> Option<[u8; HEADER_LEN]> {
    let len = u32::try_from(body_len + 1).ok()?.to_le_bytes();
    Some([len[0], len[1], len[2], len[3], kind])
}

/// One whole SUBMIT frame in a new buffer ([`Submit::encoded_len`], [`Submit::write`]).
pub fn encode_submit(
    call_id: u64,
    timeout_ms: u32,
    credential: u32,
    method: &str,
    params: Option<&[u8]>,
    max_frame_bytes: usize,
) -> Result<Vec<u8>, CodecError> {
    let submit = Submit { call_id, timeout_ms, credential, method, params };
    let mut out = Vec::with_capacity(submit.encoded_len(max_frame_bytes)?);
    submit.write(&mut out);
    Ok(out)
}

/// A SUBMIT frame: parsed from a body (borrowing from it), or to be written. Written, it
/// is measured first ([`Submit::encoded_len`]) so that the parent writes it straight into
/// the `bytes` it sends, with no copy between.
#[derive(Debug, PartialEq, Eq)]
pub struct Submit<'a> {
    pub call_id: u64,
    pub timeout_ms: u32,
    /// The credential slot the request goes with (0: the host's own credentials).
    pub credential: u32,
    pub method: &'a str,
    pub params: Option<&'a [u8]>,
}

impl Submit<'_> {
    fn body_len(&self) -> usize {
        SUBMIT_HEAD_LEN + self.method.len() + self.params.map_or(0, <[u8]>::len)
    }

    /// The whole frame's size, or why it cannot be sent. Params are not checked here: the
    /// worker's stamper checks them when it stamps, and rejects just that call.
    /// `max_frame_bytes` is the receiver's limit; a bigger frame is refused here because
    /// there it would read as a corrupt channel.
    pub fn encoded_len(&self, max_frame_bytes: usize) -> Result<usize, CodecError> {
        if u16::try_from(self.method.len()).is_err() {
            return Err(CodecError(format!(
                "method name of {} bytes is too long for a SUBMIT frame",
                self.method.len()
            )));
        }
        let frame_len = self.body_len() + 1;
        if frame_len > max_frame_bytes || u32::try_from(frame_len).is_err() {
            return Err(CodecError(format!(
                "a SUBMIT frame of {frame_len} bytes exceeds the channel limit of {max_frame_bytes} bytes"
            )));
        }
        Ok(HEADER_LEN + self.body_len())
    }

    /// Write the frame; `encoded_len` said it can be.
    pub fn write<S: Sink>(&self, out: &mut S) {
        // The fixed part goes out in one piece (a small frame is mostly head).
        let mut head = [0u8; HEADER_LEN + SUBMIT_HEAD_LEN];
        head[..HEADER_LEN].copy_from_slice(&header(FRAME_SUBMIT, self.body_len()).expect("measured by encoded_len"));
        head[5..13].copy_from_slice(&self.call_id.to_le_bytes());
        head[13..17].copy_from_slice(&self.timeout_ms.to_le_bytes());
        head[17..21].copy_from_slice(&self.credential.to_le_bytes());
        head[21..23].copy_from_slice(&(self.method.len() as u16).to_le_bytes());
        out.put(&head);
        out.put(self.method.as_bytes());
        out.put(self.params.unwrap_or_default());
    }
}

/// The call id of a SUBMIT body, if it is long enough to carry one.
pub fn submit_call_id(body: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(..8)?.try_into().ok()?))
}

/// Parse a SUBMIT body; the error is why the call cannot be sent.
pub fn parse_submit(body: &[u8]) -> Result<Submit<'_>, String> {
    if body.len() < SUBMIT_HEAD_LEN {
        return Err(format!("SUBMIT body of {} bytes is shorter than its {SUBMIT_HEAD_LEN}-byte head", body.len()));
    }
    let call_id = submit_call_id(body).expect("length checked");
    let timeout_ms = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    let credential = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes"));
    let method_len = u16::from_le_bytes(body[16..18].try_into().expect("2 bytes")) as usize;
    let rest = &body[SUBMIT_HEAD_LEN..];
    if method_len > rest.len() {
        return Err(format!("SUBMIT method length {method_len} runs past the frame ({} bytes left)", rest.len()));
    }
    let method = std::str::from_utf8(&rest[..method_len]).map_err(|_| "SUBMIT method is not UTF-8".to_string())?;
    let params = &rest[method_len..];
    Ok(Submit { call_id, timeout_ms, credential, method, params: (!params.is_empty()).then_some(params) })
}

/// The `result_type` code for a response's `result.resultType`.
pub fn result_type_code(result_type: Option<&str>) -> u8 {
    match result_type {
        None => RT_ABSENT,
        Some("complete") => RT_COMPLETE,
        Some("input_required") => RT_INPUT_REQUIRED,
        Some(_) => RT_OTHER,
    }
}

/// Whether a RESULT frame can carry `payload_len` bytes (a frame's length is a u32).
pub fn fits_result_frame(payload_len: usize) -> bool {
    header(FRAME_RESULT, RESULT_HEAD_LEN + payload_len).is_some()
}

/// Append one RESULT frame to `out`; false (and `out` untouched) if the payload is too big
/// for a frame length.
pub fn put_result_frame<S: Sink>(
    out: &mut S,
    call_id: u64,
    request_id: i64,
    kind: u8,
    result_type: u8,
    payload: &[u8],
) -> bool {
    if !put_header(out, FRAME_RESULT, RESULT_HEAD_LEN + payload.len()) {
        return false;
    }
    out.put(&call_id.to_le_bytes());
    out.put(&request_id.to_le_bytes());
    out.put_byte(kind);
    out.put_byte(result_type);
    out.put(payload);
    true
}

/// A RESULT body, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct ResultFrame<'a> {
    pub call_id: u64,
    pub request_id: i64,
    pub kind: u8,
    pub result_type: u8,
    pub payload: &'a [u8],
}

pub fn parse_result(body: &[u8]) -> Option<ResultFrame<'_>> {
    let (head, payload) = body.split_at_checked(RESULT_HEAD_LEN)?;
    Some(ResultFrame {
        call_id: u64::from_le_bytes(head[..8].try_into().ok()?),
        request_id: i64::from_le_bytes(head[8..16].try_into().ok()?),
        kind: head[16],
        result_type: head[17],
        payload,
    })
}

// ---------------------------------------------------------------------------- worker inbound

/// How SUBMIT frames are turned into request lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamping {
    /// Not yet: the era is undecided, SUBMITs are handed back untouched.
    Off,
    /// Legacy era: plain requests.
    Legacy,
    /// Modern era: requests stamped with this `_meta` object.
    Modern(Vec<u8>),
}

/// What the stamper makes of a chunk, in the order of the parent's frames.
#[derive(Debug, PartialEq, Eq)]
pub enum Passed {
    /// A run of consecutive SUBMITs, stamped: `stdin[range]` holds their request lines
    /// (one line per run when the stamper keeps lines apart).
    Stamped(Range<usize>),
    /// One stamped SUBMIT of a credential slot other than 0, when the stamper keeps lines
    /// apart: `stdin[range]` holds its request line.
    StampedFor { range: Range<usize>, credential: u32 },
    /// A frame that is not a SUBMIT (or any frame, before stamping starts).
    Frame(RawFrame),
    /// A SUBMIT whose contents cannot become a request; nothing was registered for it.
    Rejected {
        call_id: u64,
        reason: String,
    },
}

impl Passed {
    /// The Python-visible body of a [`Passed::StampedFor`]: `u32 LE credential | line`.
    pub fn stamped_for_body(credential: u32, line: &[u8]) -> Vec<u8> {
        let mut body = Vec::with_capacity(4 + line.len());
        body.extend_from_slice(&credential.to_le_bytes());
        body.extend_from_slice(line);
        body
    }

    /// The Python-visible `(type, body)` of a rejection: `u64 LE call_id | reason`.
    pub fn rejected_body(call_id: u64, reason: &str) -> Vec<u8> {
        let mut body = Vec::with_capacity(8 + reason.len());
        body.extend_from_slice(&call_id.to_le_bytes());
        body.extend_from_slice(reason.as_bytes());
        body
    }
}

/// The worker's inbound side: channel bytes in, stamped request lines (for the server's
/// stdin) and the remaining frames out.
#[derive(Debug)]
pub struct SubmitStamper {
    splitter: FrameSplitter,
    mode: Stamping,
    /// Each stamped SUBMIT its own run: for a transport that sends every request on its
    /// own (one HTTP exchange each), which would otherwise cut a run apart again, copying
    /// every line. A stdio server takes a run in one write.
    lines_apart: bool,
}

impl SubmitStamper {
    pub fn new(max_frame_bytes: usize) -> Self {
        SubmitStamper { splitter: FrameSplitter::new(max_frame_bytes), mode: Stamping::Off, lines_apart: false }
    }

    /// `new`, handing back every stamped line as a run of its own.
    pub fn lines_apart(max_frame_bytes: usize) -> Self {
        SubmitStamper { lines_apart: true, ..Self::new(max_frame_bytes) }
    }

    pub fn splitter(&self) -> &FrameSplitter {
        &self.splitter
    }

    pub fn mode(&self) -> &Stamping {
        &self.mode
    }

    /// Stamp every later SUBMIT: with `meta` as `_meta` (modern), or plainly (`None`,
    /// legacy). A `meta` that is not a JSON object is refused here, once, rather than
    /// failing every call.
    pub fn start_stamping(&mut self, meta: Option<&[u8]>) -> Result<(), CodecError> {
        self.mode = match meta {
            Some(m) => {
                stamp::check_meta(m)?;
                Stamping::Modern(m.to_vec())
            }
            None => Stamping::Legacy,
        };
        Ok(())
    }

    /// Stamp no more: later SUBMITs are handed back untouched (the connection ended, so
    /// the caller fails them as never sent).
    pub fn stop_stamping(&mut self) {
        self.mode = Stamping::Off;
    }

    /// Split `chunk`; stamp each SUBMIT into `stdin` (registering its call in `corr`).
    /// Returns the frames in the order they came, each run of stamped SUBMITs as one
    /// [`Passed::Stamped`] range of `stdin`, so the caller applies everything in the
    /// parent's order (a cancel before a later request stays before it). Corruption is
    /// detected before anything is registered or written, so on error `corr` and `stdin`
    /// are as they were.
    pub fn feed<T>(
        &mut self,
        chunk: &[u8],
        corr: &mut CallCorrelator<T>,
        stdin: &mut Vec<u8>,
    ) -> Result<Vec<Passed>, CorruptFrame> {
        self.feed_at(chunk, corr, stdin, None)
    }

    /// `feed`, with each stamped call given a deadline of `now_us` plus its SUBMIT's
    /// `timeout_ms` (none when the timeout is 0), so the worker can enforce deadlines on
    /// its own with `CallCorrelator::expire`, whatever happens to the parent.
    pub fn feed_at<T>(
        &mut self,
        chunk: &[u8],
        corr: &mut CallCorrelator<T>,
        stdin: &mut Vec<u8>,
        now_us: Option<u64>,
    ) -> Result<Vec<Passed>, CorruptFrame> {
        let mut frames = Vec::new();
        self.splitter.feed(chunk, &mut frames)?;
        // The parent always writes a whole head; a SUBMIT without even a call id cannot be
        // failed individually, so it counts as corruption (checked before any side effect).
        if let Some(f) = frames.iter().find(|f| f.kind == FRAME_SUBMIT && f.body(chunk).len() < 8) {
            let n = f.body(chunk).len();
            return Err(self.splitter.poison(format!("SUBMIT body of {n} bytes has no call id")));
        }
        let mut passed = Vec::with_capacity(if self.mode == Stamping::Off { frames.len() } else { 1 });
        let mut run = stdin.len();
        for frame in frames {
            if frame.kind != FRAME_SUBMIT || self.mode == Stamping::Off {
                close_run(&mut passed, &mut run, stdin.len());
                passed.push(Passed::Frame(frame));
                continue;
            }
            let body = frame.body(chunk);
            match self.stamp_one(body, corr, stdin, now_us) {
                Ok(0) if self.lines_apart => close_run(&mut passed, &mut run, stdin.len()),
                Ok(credential) if self.lines_apart => {
                    passed.push(Passed::StampedFor { range: run..stdin.len(), credential });
                    run = stdin.len();
                }
                // A run goes to one stdio server, whose credentials are its own: no slot.
                Ok(_) => {}
                Err(reason) => {
                    close_run(&mut passed, &mut run, stdin.len());
                    let call_id = submit_call_id(body).expect("checked above");
                    passed.push(Passed::Rejected { call_id, reason });
                }
            }
        }
        close_run(&mut passed, &mut run, stdin.len());
        Ok(passed)
    }

    /// Stamp one SUBMIT body, returning its credential slot; on error nothing is
    /// registered and `stdin` is unchanged. (Every SUBMIT gets a fresh id from `corr`,
    /// whose bound ends a worker's block.)
    fn stamp_one<T>(
        &self,
        body: &[u8],
        corr: &mut CallCorrelator<T>,
        stdin: &mut Vec<u8>,
        now_us: Option<u64>,
    ) -> Result<u32, String> {
        let sub = parse_submit(body)?;
        let deadline = match (now_us, sub.timeout_ms) {
            (Some(now), ms) if ms > 0 => Some(now.saturating_add(u64::from(ms) * 1000)),
            _ => None,
        };
        if corr.call_pending(sub.call_id) {
            return Err(format!("call id {} is already pending", sub.call_id));
        }
        // The line is written with the id `allocate_call` is about to hand out, and the
        // call registered only once the line is good: a rejected call leaves no entry and
        // consumes no id.
        let before = stdin.len();
        let id = JsonId::Int(corr.next_id());
        match &self.mode {
            Stamping::Modern(meta) => stamp::stamp_request_into(stdin, &id, sub.method, sub.params, meta),
            Stamping::Legacy => stamp::encode_request_into(stdin, &id, sub.method, sub.params),
            Stamping::Off => unreachable!("only called while stamping"),
        }
        .map_err(|e| e.0)?;
        match corr.allocate_call(sub.call_id, deadline) {
            Ok(got) => {
                debug_assert_eq!(JsonId::Int(got), id);
                Ok(sub.credential)
            }
            Err(e) => {
                stdin.truncate(before);
                Err(e.0)
            }
        }
    }
}

/// End the run of stamped lines that began at `stdin[*start]`, if it holds any.
fn close_run(passed: &mut Vec<Passed>, start: &mut usize, end: usize) {
    if end > *start {
        passed.push(Passed::Stamped(*start..end));
    }
    *start = end;
}

// ---------------------------------------------------------------------------- parent inbound

/// What the parent's demux makes of one frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Demuxed<T> {
    /// A RESULT for a pending call: its token, the JSON-RPC id its request went out with,
    /// and the frame (payload at `body[RESULT_HEAD_LEN..]`).
    Resolved { token: Token<T>, request_id: i64, kind: u8, result_type: u8, frame: RawFrame },
    /// Any other frame type.
    Other(RawFrame),
}

/// The parent's inbound side: RESULT frames resolve the calls' tokens; other frames pass.
#[derive(Debug)]
pub struct ResultDemux {
    splitter: FrameSplitter,
    /// RESULTs for calls already resolved or discarded (a reply after the caller gave up).
    pub stale: u64,
    /// RESULTs for call ids never allocated.
    pub unknown: u64,
}

impl ResultDemux {
    pub fn new(max_frame_bytes: usize) -> Self {
        ResultDemux { splitter: FrameSplitter::new(max_frame_bytes), stale: 0, unknown: 0 }
    }

    pub fn splitter(&self) -> &FrameSplitter {
        &self.splitter
    }

    /// Split `chunk` and resolve its RESULT frames. A RESULT too short for its head is
    /// corruption, detected before any token is taken out of `corr` (so a caller that
    /// drains `corr` after killing the worker fails every call).
    pub fn feed<T>(&mut self, chunk: &[u8], corr: &mut CallCorrelator<T>) -> Result<Vec<Demuxed<T>>, CorruptFrame> {
        let mut frames = Vec::new();
        self.splitter.feed(chunk, &mut frames)?;
        if let Some(f) = frames.iter().find(|f| f.kind == FRAME_RESULT && f.body(chunk).len() < RESULT_HEAD_LEN) {
            let n = f.body(chunk).len();
            return Err(self.splitter.poison(format!("RESULT body of {n} bytes is shorter than its head")));
        }
        let mut out = Vec::with_capacity(frames.len());
        for frame in frames {
            if frame.kind != FRAME_RESULT {
                out.push(Demuxed::Other(frame));
                continue;
            }
            let r = parse_result(frame.body(chunk)).expect("length checked");
            // Call ids are the correlator's own (positive i64) ids; anything above i64::MAX
            // was never handed out.
            let id = i64::try_from(r.call_id).ok().map(JsonId::Int);
            match corr.resolve(id.as_ref()) {
                (Correlation::Matched, Some(token)) => {
                    let (request_id, kind, result_type) = (r.request_id, r.kind, r.result_type);
                    out.push(Demuxed::Resolved { token, request_id, kind, result_type, frame });
                }
                (Correlation::Stale, _) => self.stale += 1,
                _ => self.unknown += 1,
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(put_header(&mut out, kind, body.len()));
        out.extend_from_slice(body);
        out
    }

    /// Split `stream` fed in pieces of `step` bytes; (type, body) pairs.
    fn split_in(stream: &[u8], step: usize) -> Vec<(u8, Vec<u8>)> {
        let mut s = FrameSplitter::new(1024);
        let mut got = Vec::new();
        for chunk in stream.chunks(step) {
            let mut out = Vec::new();
            s.feed(chunk, &mut out).unwrap();
            got.extend(out.iter().map(|f| (f.kind, f.body(chunk).to_vec())));
        }
        assert_eq!(s.buffered(), 0);
        got
    }

    #[test]
    fn every_chunking_yields_the_same_frames() {
        let want: Vec<(u8, Vec<u8>)> =
            vec![(1, b"hello".to_vec()), (16, vec![]), (3, vec![7; 300]), (200, b"x".to_vec()), (2, vec![0; 9])];
        let stream: Vec<u8> = want.iter().flat_map(|(k, b)| frame(*k, b)).collect();
        for step in 1..=stream.len() {
            assert_eq!(split_in(&stream, step), want, "step {step}");
        }
    }

    #[test]
    fn whole_frames_are_not_copied_and_partials_are_carried() {
        let mut s = FrameSplitter::new(64);
        let stream = [frame(4, b"abc"), frame(5, b"defgh")].concat();
        let mut out = Vec::new();
        s.feed(&stream[..12], &mut out).unwrap();
        assert_eq!(out, vec![RawFrame { kind: 4, body: Body::Chunk(5..8) }]);
        assert_eq!(s.buffered(), 4);
        assert!(s.carry.capacity() >= 10, "reserved for the whole frame once its length was seen");
        out.clear();
        s.feed(&stream[12..], &mut out).unwrap();
        assert!(matches!(&out[..], [RawFrame { kind: 5, body: Body::Carried(_) }]));
        assert_eq!(out[0].body(&stream[12..]), b"defgh");
        assert_eq!(s.buffered(), 0);
    }

    #[test]
    fn bad_lengths_are_corruption_and_sticky() {
        let mut s = FrameSplitter::new(8);
        let mut out = Vec::new();
        assert!(s.feed(&frame(1, b"1234567"), &mut out).is_ok());
        let e = s.feed(&frame(1, b"12345678"), &mut out).unwrap_err();
        assert!(e.0.contains("exceeds"), "{e}");
        assert!(s.feed(&frame(1, b""), &mut out).is_err(), "sticky");

        let mut s = FrameSplitter::new(8);
        assert!(s.feed(&[0, 0], &mut out).is_ok());
        assert!(s.feed(&[0, 0, 1], &mut out).unwrap_err().0.contains("length 0"));
    }

    #[test]
    fn submit_round_trip() {
        let f = encode_submit(u64::MAX - 1, 1500, 0, "tools/call", Some(b"{\"a\":1}"), DEFAULT_MAX_FRAME_BYTES).unwrap();
        assert_eq!(u32::from_le_bytes(f[..4].try_into().unwrap()) as usize, f.len() - 4);
        assert_eq!(f[4], FRAME_SUBMIT);
        let sub = parse_submit(&f[HEADER_LEN..]).unwrap();
        assert_eq!(
            sub,
            Submit {
                call_id: u64::MAX - 1,
                timeout_ms: 1500,
                credential: 0,
                method: "tools/call",
                params: Some(b"{\"a\":1}")
            }
        );
        let f = encode_submit(1, 0, 0, "", None, DEFAULT_MAX_FRAME_BYTES).unwrap();
        assert_eq!(f.len(), HEADER_LEN + SUBMIT_HEAD_LEN);
        assert_eq!(parse_submit(&f[HEADER_LEN..]).unwrap().params, None);

        assert!(encode_submit(1, 0, 0, &"m".repeat(70_000), None, DEFAULT_MAX_FRAME_BYTES).is_err());
        assert!(encode_submit(1, 0, 0, "m", Some(&[b' '; 100]), 64).is_err());
        assert!(parse_submit(&f[HEADER_LEN..f.len() - 1]).is_err());
        let mut bad = f[HEADER_LEN..].to_vec();
        bad[16] = 5; // method length past the end
        assert!(parse_submit(&bad).unwrap_err().contains("past"));
    }

    #[test]
    fn submit_carries_its_credential_slot_after_the_timeout() {
        let f = encode_submit(7, 9, u32::MAX - 2, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap();
        assert_eq!(f.len(), HEADER_LEN + SUBMIT_HEAD_LEN + 4);
        assert_eq!(u32::from_le_bytes(f[13..17].try_into().unwrap()), 9);
        assert_eq!(u32::from_le_bytes(f[17..21].try_into().unwrap()), u32::MAX - 2);
        assert_eq!(u16::from_le_bytes(f[21..23].try_into().unwrap()), 4);
        assert_eq!(&f[23..], b"ping");
        let sub = parse_submit(&f[HEADER_LEN..]).unwrap();
        assert_eq!((sub.call_id, sub.timeout_ms, sub.credential, sub.method), (7, 9, u32::MAX - 2, "ping"));
    }

    #[test]
    fn a_stamper_keeping_lines_apart_hands_back_each_lines_slot() {
        let mut st = SubmitStamper::lines_apart(DEFAULT_MAX_FRAME_BYTES);
        st.start_stamping(None).unwrap();
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let stream = [
            encode_submit(1, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(2, 1, 5, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(2, 1, 5, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(4, 1, 6, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(5, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
        ]
        .concat();
        let mut stdin = Vec::new();
        let passed = st.feed(&stream, &mut corr, &mut stdin).unwrap();
        let one = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n".len();
        assert_eq!(passed.len(), 5);
        assert_eq!(passed[0], Passed::Stamped(0..one));
        assert_eq!(passed[1], Passed::StampedFor { range: one..2 * one, credential: 5 });
        assert!(matches!(&passed[2], Passed::Rejected { call_id: 2, reason } if reason.contains("pending")));
        assert_eq!(passed[3], Passed::StampedFor { range: 2 * one..3 * one, credential: 6 });
        assert_eq!(passed[4], Passed::Stamped(3 * one..4 * one));
        assert_eq!(Passed::stamped_for_body(6, b"x"), [6, 0, 0, 0, b'x']);
    }

    #[test]
    fn a_stamper_keeping_runs_ignores_the_slot() {
        let mut st = SubmitStamper::new(DEFAULT_MAX_FRAME_BYTES);
        st.start_stamping(None).unwrap();
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let stream = [
            encode_submit(1, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(2, 1, 5, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
        ]
        .concat();
        let mut stdin = Vec::new();
        let passed = st.feed(&stream, &mut corr, &mut stdin).unwrap();
        assert_eq!(passed, vec![Passed::Stamped(0..stdin.len())]);
    }

    const META: &[u8] = br#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;

    #[test]
    fn stamper_passes_everything_until_stamping_starts() {
        let mut st = SubmitStamper::new(DEFAULT_MAX_FRAME_BYTES);
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let mut stdin = Vec::new();
        let sub = encode_submit(9, 100, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap();
        let passed = st.feed(&sub, &mut corr, &mut stdin).unwrap();
        assert!(matches!(&passed[..], [Passed::Frame(RawFrame { kind: FRAME_SUBMIT, .. })]));
        assert!(stdin.is_empty() && corr.is_empty());
        assert!(st.start_stamping(Some(b"[]")).is_err(), "meta must be an object");
        assert_eq!(st.mode(), &Stamping::Off);
    }

    #[test]
    fn stamper_stamps_registers_and_rejects() {
        let mut st = SubmitStamper::new(DEFAULT_MAX_FRAME_BYTES);
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        corr.allocate((), None).unwrap(); // a probe took id 1
        st.start_stamping(Some(META)).unwrap();
        let stream = [
            encode_submit(70, 100, 0, "tools/call", Some(b"{\"name\":\"x\"}"), DEFAULT_MAX_FRAME_BYTES).unwrap(),
            frame(2, &70u64.to_le_bytes()),
            encode_submit(71, 100, 0, "tools/call", Some(b"[1]"), DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(72, 100, 0, "tools/list", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(70, 100, 0, "tools/list", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
        ]
        .concat();
        let mut stdin = Vec::new();
        let passed = st.feed(&stream, &mut corr, &mut stdin).unwrap();
        let text = String::from_utf8(stdin).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                "\n"
            )
        );
        // In the parent's order: the cancel stays between the two requests around it.
        assert_eq!(passed.len(), 5);
        let first = text.find('\n').unwrap() + 1;
        assert_eq!(passed[0], Passed::Stamped(0..first));
        assert!(matches!(&passed[1], Passed::Frame(RawFrame { kind: 2, .. })));
        assert!(matches!(&passed[2], Passed::Rejected { call_id: 71, reason } if reason.contains("object")));
        assert_eq!(passed[3], Passed::Stamped(first..text.len()));
        assert!(matches!(&passed[4], Passed::Rejected { call_id: 70, reason } if reason.contains("pending")));
        assert_eq!((corr.len(), corr.calls_pending(), corr.next_id()), (3, 2, 4));
        assert_eq!(corr.discard_call(72), Some(3));

        st.start_stamping(None).unwrap();
        let mut stdin = Vec::new();
        let sub = encode_submit(80, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap();
        assert_eq!(st.feed(&sub, &mut corr, &mut stdin).unwrap(), vec![Passed::Stamped(0..stdin.len())]);
        assert_eq!(stdin, b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n");
    }

    #[test]
    fn stamper_keeps_lines_apart_when_asked() {
        let mut st = SubmitStamper::lines_apart(DEFAULT_MAX_FRAME_BYTES);
        st.start_stamping(Some(META)).unwrap();
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let stream = [
            encode_submit(1, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(2, 1, 0, "tools/call", Some(b"[1]"), DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(3, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
            encode_submit(4, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(),
        ]
        .concat();
        let mut stdin = Vec::new();
        let passed = st.feed(&stream, &mut corr, &mut stdin).unwrap();
        let line = |id: u8| {
            let meta = std::str::from_utf8(META).unwrap();
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\",\"params\":{{\"_meta\":{meta}}}}}\n")
        };
        let one = line(1).len();
        assert_eq!(passed.len(), 4);
        assert_eq!(passed[0], Passed::Stamped(0..one));
        assert!(matches!(&passed[1], Passed::Rejected { call_id: 2, .. }));
        assert_eq!(passed[2], Passed::Stamped(one..2 * one));
        assert_eq!(passed[3], Passed::Stamped(2 * one..3 * one));
        assert_eq!(String::from_utf8(stdin).unwrap(), [line(1), line(2), line(3)].concat());
    }

    #[test]
    fn stamper_corruption_has_no_side_effects() {
        let mut st = SubmitStamper::new(DEFAULT_MAX_FRAME_BYTES);
        st.start_stamping(None).unwrap();
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let mut stdin = Vec::new();
        let stream =
            [encode_submit(1, 1, 0, "ping", None, DEFAULT_MAX_FRAME_BYTES).unwrap(), frame(FRAME_SUBMIT, b"short")]
                .concat();
        assert!(st.feed(&stream, &mut corr, &mut stdin).is_err());
        assert!(corr.is_empty() && stdin.is_empty());
        assert!(st.feed(b"", &mut corr, &mut stdin).is_err(), "sticky");
    }

    #[test]
    fn demux_resolves_counts_and_passes() {
        let mut corr = CallCorrelator::new(1);
        let a = corr.allocate("a", None).unwrap() as u64;
        let b = corr.allocate("b", None).unwrap() as u64;
        assert!(corr.discard(&JsonId::Int(b as i64)).is_some());
        let mut stream = Vec::new();
        assert!(put_result_frame(&mut stream, a, 41, 3, RT_COMPLETE, b"{\"x\":1}"));
        assert!(put_result_frame(&mut stream, b, 42, 3, RT_ABSENT, b"{}"));
        assert!(put_result_frame(&mut stream, 99, 43, 4, RT_ABSENT, b"{}"));
        assert!(put_result_frame(&mut stream, u64::MAX, -1, 4, RT_ABSENT, b"{}"));
        stream.extend(frame(18, b"{\"state\":\"ready\"}"));
        let mut d = ResultDemux::new(DEFAULT_MAX_FRAME_BYTES);
        // Byte by byte: the RESULT frames straddle every feed.
        let mut got = Vec::new();
        for i in 0..stream.len() {
            let chunk = &stream[i..=i];
            for x in d.feed(chunk, &mut corr).unwrap() {
                got.push(match x {
                    Demuxed::Resolved { token, request_id, kind, result_type, frame } => {
                        (Some(token), request_id, kind, result_type, frame.body(chunk)[RESULT_HEAD_LEN..].to_vec())
                    }
                    Demuxed::Other(f) => (None, 0, f.kind, 0, f.body(chunk).to_vec()),
                });
            }
        }
        assert_eq!(
            got,
            vec![
                (Some(Token::Object("a")), 41, 3, RT_COMPLETE, b"{\"x\":1}".to_vec()),
                (None, 0, 18, 0, b"{\"state\":\"ready\"}".to_vec()),
            ]
        );
        assert_eq!((d.stale, d.unknown), (1, 2));
    }

    #[test]
    fn demux_short_result_is_corruption_before_resolving() {
        let mut corr = CallCorrelator::new(1);
        let a = corr.allocate("a", None).unwrap() as u64;
        let mut stream = Vec::new();
        put_result_frame(&mut stream, a, 1, 3, RT_ABSENT, b"1");
        stream.extend(frame(FRAME_RESULT, b"tiny"));
        let mut d = ResultDemux::new(DEFAULT_MAX_FRAME_BYTES);
        assert!(d.feed(&stream, &mut corr).is_err());
        assert_eq!(corr.len(), 1, "nothing resolved from a corrupt chunk");
    }

    #[test]
    fn result_type_codes() {
        assert_eq!(result_type_code(None), RT_ABSENT);
        assert_eq!(result_type_code(Some("complete")), RT_COMPLETE);
        assert_eq!(result_type_code(Some("input_required")), RT_INPUT_REQUIRED);
        assert_eq!(result_type_code(Some("Complete")), RT_OTHER);
    }

    #[test]
    fn stamped_calls_carry_their_submit_deadline() {
        let mut corr: CallCorrelator<()> = CallCorrelator::new(1);
        let mut st = SubmitStamper::new(DEFAULT_MAX_FRAME_BYTES);
        st.start_stamping(None).unwrap();
        let mut stream = encode_submit(7, 1500, 0, "tools/list", None, DEFAULT_MAX_FRAME_BYTES).unwrap();
        stream.extend(encode_submit(8, 0, 0, "tools/list", None, DEFAULT_MAX_FRAME_BYTES).unwrap());
        let mut stdin = Vec::new();
        let passed = st.feed_at(&stream, &mut corr, &mut stdin, Some(1_000_000)).unwrap();
        assert!(matches!(&passed[..], [Passed::Stamped(_)]));
        assert_eq!(corr.next_deadline(), Some(2_500_000), "now + 1500 ms");
        assert_eq!(corr.deadlines_pending(), 1, "timeout 0 means no deadline");
        let expired = corr.expire(2_500_000);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].1, Token::Call(7));
    }
}
