//! PyO3 bindings: the surface described by `python/trunkline/_codec.pyi`.
//!
//! Rules kept here: bytes in, bytes out; payload bytes are sliced lazily (an `Event` keeps
//! a reference to the read buffer and a span, and copies only when `.line` / `.result` is
//! asked for); work on large buffers runs with the thread detached from the interpreter
//! (`py.detach`), and Python objects are built only afterwards.
//!
//! Memory note: an `Event` whose line lay inside a read buffer keeps that whole buffer
//! alive until the event is dropped. Workers forward and drop events promptly, so this
//! trades a bounded retention for one copy less per line.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::intern;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::correlate::{CallCorrelator, Correlation, Token};
use crate::decoder::{self, Routed, Scanned};
use crate::frames::{self, CorruptFrame, Demuxed, Passed, DEFAULT_MAX_FRAME_BYTES, RESULT_HEAD_LEN};
use crate::http_head;
use crate::json::{Fill, MAX_NESTING_DEPTH};
use crate::py_json;
use crate::scan::{self as scanner, JsonId, Kind, Span};
use crate::splitter::{self, Frame, DEFAULT_MAX_LINE_BYTES};
use crate::stamp;
use crate::wide_int;

create_exception!(
    trunkline._codec,
    CodecError,
    PyValueError,
    "Raised for invalid arguments (params that are not a JSON object, bad ids, ...)."
);

/// Buffers at least this large are split and scanned with the thread detached, so other
/// Python threads run meanwhile; below it the detach/attach round trip costs more than it
/// frees.
const DETACH_THRESHOLD: usize = 64 * 1024;

fn codec_err(e: stamp::CodecError) -> PyErr {
    CodecError::new_err(e.0)
}

fn corrupt_err(e: CorruptFrame) -> PyErr {
    CodecError::new_err(e.to_string())
}

/// What Python sees of a correlator token: the object itself, or a forwarded call's id.
/// Deadlines cross the boundary as float seconds on the caller's clock (the event loop's
/// `time()`), and are kept as whole microseconds: ordered, exact, and fine-grained enough
/// for request timeouts. Negative or NaN values mean "already due".
fn deadline_us(seconds: f64) -> u64 {
    if seconds.is_nan() || seconds <= 0.0 {
        0
    } else {
        (seconds * 1e6).min(u64::MAX as f64) as u64
    }
}

fn token_to_py(py: Python<'_>, token: Token<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    Ok(match token {
        Token::Object(obj) => obj,
        Token::Call(call_id) => call_id.into_pyobject(py)?.into_any().unbind(),
    })
}

/// A `(type, body)` tuple for a channel frame.
fn frame_tuple<'py>(py: Python<'py>, kind: u8, body: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
    (kind, PyBytes::new(py, body)).into_pyobject(py)
}

/// A Python `int | str` as a JSON-RPC id. `bool` is refused even though it subclasses
/// `int`: `True` is not the id `1`.
fn id_from_py(obj: &Bound<'_, PyAny>) -> PyResult<JsonId> {
    if obj.is_instance_of::<PyBool>() {
        return Err(CodecError::new_err("a JSON-RPC id must be an int or a str, not bool"));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj
            .extract::<i64>()
            .map(JsonId::Int)
            .map_err(|_| CodecError::new_err("an integer JSON-RPC id must fit in 64 bits"));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(JsonId::Str(s.to_str()?.to_owned()));
    }
    Err(CodecError::new_err(format!("a JSON-RPC id must be an int or a str, not {}", obj.get_type().name()?)))
}

fn id_to_py(py: Python<'_>, id: &Option<JsonId>) -> PyResult<Py<PyAny>> {
    Ok(match id {
        None => py.None(),
        Some(JsonId::Int(n)) => n.into_pyobject(py)?.into_any().unbind(),
        Some(JsonId::Str(s)) => PyString::new(py, s).into_any().unbind(),
    })
}

/// Python-looking text for reprs: `None`, `7`, `"abc"`.
fn show_id(id: &Option<JsonId>) -> String {
    match id {
        None => "None".into(),
        Some(JsonId::Int(n)) => n.to_string(),
        Some(JsonId::Str(s)) => format!("{s:?}"),
    }
}

fn show_str(s: &Option<String>) -> String {
    s.as_ref().map_or_else(|| "None".into(), |s| format!("{s:?}"))
}

fn slice<'py>(py: Python<'py>, src: &Py<PyBytes>, span: Option<Span>) -> Option<Bound<'py, PyBytes>> {
    span.map(|(a, b)| PyBytes::new(py, &src.bind(py).as_bytes()[a..b]))
}

/// `Envelope` and `Event` expose the same scanned envelope fields; this writes those
/// getters once and the class's own methods after them, in the one `#[pymethods]` block
/// PyO3 allows per class.
macro_rules! envelope_pymethods {
    ($ty:ident, $($own:tt)*) => {
        #[pymethods]
        impl $ty {
            #[getter]
            fn kind(&self) -> u8 {
                self.env.kind as u8
            }
            #[getter]
            fn id(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                id_to_py(py, &self.env.id)
            }
            #[getter]
            fn method(&self) -> Option<&str> {
                self.env.method.as_deref()
            }
            #[getter]
            fn error_code(&self) -> Option<i64> {
                self.env.error_code
            }
            #[getter]
            fn error_message(&self) -> Option<&str> {
                self.env.error_message.as_deref()
            }
            #[getter]
            fn result_type(&self) -> Option<&str> {
                self.env.result_type.as_deref()
            }
            #[getter]
            fn reason(&self) -> Option<&str> {
                self.env.reason.as_deref()
            }
            $($own)*
        }
    };
}

// ---------------------------------------------------------------------------- scan

/// What `scan` learns about one line without decoding its payload.
#[pyclass(frozen, module = "trunkline._codec", name = "Envelope")]
pub struct PyEnvelope {
    env: scanner::Envelope,
    line: Py<PyBytes>,
}

envelope_pymethods! { PyEnvelope,
    #[getter]
    fn error_data<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        slice(py, &self.line, self.env.error_data)
    }
    #[getter]
    fn result_span(&self) -> Option<(usize, usize)> {
        self.env.result_span
    }
    #[getter]
    fn params_span(&self) -> Option<(usize, usize)> {
        self.env.params.map(|p| p.span)
    }
    #[getter]
    fn meta_span(&self) -> Option<(usize, usize)> {
        self.env.params.and_then(|p| p.meta)
    }
    #[getter]
    fn name_span(&self) -> Option<(usize, usize)> {
        self.env.params.and_then(|p| p.name)
    }
    #[getter]
    fn uri_span(&self) -> Option<(usize, usize)> {
        self.env.params.and_then(|p| p.uri)
    }
    fn __repr__(&self) -> String {
        format!(
            "Envelope(kind={}, id={}, method={}, reason={})",
            self.env.kind as u8,
            show_id(&self.env.id),
            show_str(&self.env.method),
            show_str(&self.env.reason)
        )
    }
}

/// Classify one line (no trailing newline). Never raises for any input bytes.
#[pyfunction]
fn scan(py: Python<'_>, line: Bound<'_, PyBytes>) -> PyEnvelope {
    let bytes = line.as_bytes();
    let env = if bytes.len() >= DETACH_THRESHOLD { py.detach(|| scanner::scan(bytes)) } else { scanner::scan(bytes) };
    PyEnvelope { env, line: line.unbind() }
}

// ---------------------------------------------------------------------------- splitter

/// A line longer than the limit; skipped, never buffered whole.
#[pyclass(frozen, module = "trunkline._codec", name = "OversizedLine")]
pub struct PyOversizedLine {
    #[pyo3(get)]
    size: usize,
}

#[pymethods]
impl PyOversizedLine {
    #[new]
    fn new(size: usize) -> Self {
        PyOversizedLine { size }
    }
    fn __repr__(&self) -> String {
        format!("OversizedLine(size={})", self.size)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyOversizedLine>().is_ok_and(|o| o.get().size == self.size)
    }
    fn __hash__(&self) -> u64 {
        self.size as u64
    }
}

/// A size limit argument (`max_line_bytes`, `max_frame_bytes`): zero would refuse everything.
fn positive(name: &str, value: usize) -> PyResult<usize> {
    if value == 0 {
        return Err(CodecError::new_err(format!("{name} must be positive")));
    }
    Ok(value)
}

fn check_max(max_line_bytes: usize) -> PyResult<usize> {
    positive("max_line_bytes", max_line_bytes)
}

#[pyclass(module = "trunkline._codec", name = "LineSplitter")]
pub struct PyLineSplitter {
    inner: splitter::LineSplitter,
}

impl PyLineSplitter {
    fn frames_to_list<'py>(py: Python<'py>, frames: Vec<Frame>, chunk: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for f in frames {
            match f {
                Frame::Oversized(size, _) => list.append(Bound::new(py, PyOversizedLine { size })?)?,
                f => list.append(PyBytes::new(py, f.bytes(chunk)))?,
            }
        }
        Ok(list)
    }
}

#[pymethods]
impl PyLineSplitter {
    #[new]
    #[pyo3(signature = (max_line_bytes = DEFAULT_MAX_LINE_BYTES))]
    fn new(max_line_bytes: usize) -> PyResult<Self> {
        Ok(PyLineSplitter { inner: splitter::LineSplitter::new(check_max(max_line_bytes)?) })
    }

    fn feed<'py>(&mut self, py: Python<'py>, chunk: Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyList>> {
        let bytes = chunk.as_bytes();
        let mut frames = Vec::new();
        if bytes.len() >= DETACH_THRESHOLD {
            let inner = &mut self.inner;
            py.detach(|| inner.feed(bytes, &mut frames));
        } else {
            self.inner.feed(bytes, &mut frames);
        }
        Self::frames_to_list(py, frames, bytes)
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut frames = Vec::new();
        self.inner.finish(&mut frames);
        Self::frames_to_list(py, frames, &[])
    }

    #[getter]
    fn buffered(&self) -> usize {
        self.inner.buffered()
    }
}

// ---------------------------------------------------------------------------- correlator

/// Pending request ids -> opaque tokens, for one transport lifetime. Forwarded calls
/// (`allocate_call`) are kept natively, so routing their replies needs no Python object.
#[pyclass(generic, module = "trunkline._codec", name = "Correlator")]
pub struct PyCorrelator {
    inner: CallCorrelator<Py<PyAny>>,
}

#[pymethods]
impl PyCorrelator {
    #[new]
    #[pyo3(signature = (first_id = 1, limit = None))]
    fn new(first_id: i64, limit: Option<i64>) -> PyResult<Self> {
        let mut inner = CallCorrelator::new(first_id);
        if let Some(limit) = limit {
            if limit <= first_id {
                return Err(CodecError::new_err(format!("limit {limit} leaves no id after {first_id}")));
            }
            inner.set_limit(limit);
        }
        Ok(PyCorrelator { inner })
    }

    /// How many more ids `allocate` and `allocate_call` can hand out.
    #[getter]
    fn ids_left(&self) -> i64 {
        self.inner.ids_left()
    }

    #[pyo3(signature = (token, deadline = None))]
    fn allocate(&mut self, token: Py<PyAny>, deadline: Option<f64>) -> PyResult<i64> {
        self.inner.allocate(token, deadline.map(deadline_us)).map_err(codec_err)
    }

    fn register(&mut self, id: &Bound<'_, PyAny>, token: Py<PyAny>) -> PyResult<()> {
        self.inner.register(id_from_py(id)?, token).map_err(codec_err)
    }

    #[pyo3(signature = (call_id, deadline = None))]
    fn allocate_call(&mut self, call_id: u64, deadline: Option<f64>) -> PyResult<i64> {
        self.inner.allocate_call(call_id, deadline.map(deadline_us)).map_err(codec_err)
    }

    /// The earliest pending deadline, in the seconds the deadlines were given in.
    fn next_deadline(&mut self) -> Option<f64> {
        self.inner.next_deadline().map(|us| us as f64 / 1e6)
    }

    /// Remove and return every (id, token) whose deadline is at or before `now`.
    fn expire<'py>(&mut self, py: Python<'py>, now: f64) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for (id, token) in self.inner.expire(deadline_us(now)) {
            let id = id_to_py(py, &Some(id))?;
            list.append(PyTuple::new(py, [id, token_to_py(py, token)?])?)?;
        }
        Ok(list)
    }

    fn discard_call(&mut self, call_id: u64) -> Option<i64> {
        self.inner.discard_call(call_id)
    }

    fn resolve(&mut self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<(u8, Py<PyAny>)> {
        let id = if id.is_none() { None } else { Some(id_from_py(id)?) };
        let (c, token) = self.inner.resolve(id.as_ref());
        let token = match token {
            Some(t) => token_to_py(py, t)?,
            None => py.None(),
        };
        Ok((c as u8, token))
    }

    fn discard(&mut self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.inner.discard(&id_from_py(id)?).map(|t| token_to_py(py, t)).transpose()
    }

    fn drain<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for (id, token) in self.inner.drain() {
            let id = id_to_py(py, &Some(id))?;
            list.append(PyTuple::new(py, [id, token_to_py(py, token)?])?)?;
        }
        Ok(list)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, id: &Bound<'_, PyAny>) -> bool {
        // Anything that is not a valid id is simply not pending.
        id_from_py(id).is_ok_and(|id| self.inner.contains(&id))
    }

    fn __repr__(&self) -> String {
        format!("Correlator(pending={})", self.inner.len())
    }
}

// ---------------------------------------------------------------------------- stream decoder

/// One line of a read buffer, split, scanned and correlated.
#[pyclass(frozen, generic, module = "trunkline._codec", name = "Event")]
pub struct PyEvent {
    env: scanner::Envelope,
    /// The buffer the line lives in (the read chunk, or a line assembled across chunks).
    source: Option<Py<PyBytes>>,
    span: Span,
    size: usize,
    correlation: u8,
    token: Option<Py<PyAny>>,
}

envelope_pymethods! { PyEvent,
    #[getter]
    fn error_data<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let src = self.source.as_ref()?;
        slice(py, src, self.env.error_data.map(|(a, b)| (self.span.0 + a, self.span.0 + b)))
    }
    /// The whole line; the very buffer object when the line filled it, else a copy.
    #[getter]
    fn line<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        match &self.source {
            None => PyBytes::new(py, b""),
            Some(src) => {
                let src = src.bind(py);
                if self.span == (0, src.as_bytes().len()) {
                    src.clone()
                } else {
                    PyBytes::new(py, &src.as_bytes()[self.span.0..self.span.1])
                }
            }
        }
    }
    #[getter]
    fn size(&self) -> usize {
        self.size
    }
    #[getter]
    fn correlation(&self) -> u8 {
        self.correlation
    }
    #[getter]
    fn token(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.token.as_ref().map(|t| t.clone_ref(py))
    }
    /// Raw bytes of the `result` value (KIND_RESULT only), sliced on demand.
    #[getter]
    fn result<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let src = self.source.as_ref()?;
        slice(py, src, self.env.result_span.map(|(a, b)| (self.span.0 + a, self.span.0 + b)))
    }
    fn __repr__(&self) -> String {
        format!(
            "Event(kind={}, id={}, method={}, size={}, correlation={}, reason={})",
            self.env.kind as u8,
            show_id(&self.env.id),
            show_str(&self.env.method),
            self.size,
            self.correlation,
            show_str(&self.env.reason)
        )
    }
}

/// The batch API: one call per read buffer splits, scans and correlates every line.
#[pyclass(generic, module = "trunkline._codec", name = "StreamDecoder")]
pub struct PyStreamDecoder {
    splitter: splitter::LineSplitter,
    correlator: Option<Py<PyCorrelator>>,
}

impl PyStreamDecoder {
    /// Split, scan and correlate one read buffer (`None`: the end-of-stream tail), with
    /// the thread detached for big buffers. With `forward`, replies to forwarded calls are
    /// kept there, to become RESULT frames, instead of becoming events.
    fn decode<'py>(
        &mut self,
        py: Python<'py>,
        chunk: Option<&Bound<'py, PyBytes>>,
        forward: Option<&mut decoder::Forwarded>,
    ) -> PyResult<Bound<'py, PyList>> {
        // The correlator stays borrowed while detached: routing only moves tokens, and
        // another thread touching it meanwhile gets the usual "already borrowed" error
        // instead of a race.
        let mut guard = match &self.correlator {
            Some(c) => Some(c.bind(py).try_borrow_mut()?),
            None => None,
        };
        let corr = guard.as_deref_mut().map(|c| &mut c.inner);
        let at_end = chunk.is_none();
        let bytes: &[u8] = chunk.map_or(&[], |c| c.as_bytes());
        let splitter = &mut self.splitter;
        let work = move || {
            let scanned = if at_end { decoder::finish(splitter) } else { decoder::feed(splitter, bytes) };
            decoder::route(scanned, bytes, corr, forward)
        };
        let routed = if bytes.len() >= DETACH_THRESHOLD { py.detach(work) } else { work() };
        drop(guard);
        Self::events(py, routed, chunk)
    }

    /// The forwarded replies of one read as RESULT frames, written straight into the
    /// `bytes` object that carries them to the parent.
    fn frames<'py>(py: Python<'py>, forwarded: &decoder::Forwarded, chunk: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        if forwarded.is_empty() {
            // Most reads of small replies end mid-line or carry none: no new object (and
            // CPython's empty `bytes` is a shared one, not to be written through).
            return Ok(PyBytes::new(py, b""));
        }
        bytes_written(py, forwarded.encoded_len(), |fill| forwarded.write(chunk, fill))
    }

    /// Build the events (GIL held): wrap carried lines in bytes, hand tokens to Python.
    fn events<'py>(
        py: Python<'py>,
        routed: Vec<Routed<Py<PyAny>>>,
        chunk: Option<&Bound<'py, PyBytes>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for Routed { scanned: Scanned { frame, env }, correlation, token } in routed {
            let (source, span, size, env) = match (frame, env) {
                (frame, None) => {
                    // Only oversized lines go unscanned; their id is what the skim found.
                    let mut env = scanner::Envelope::invalid("");
                    env.kind = Kind::Oversized;
                    env.reason = None;
                    let size = match frame {
                        Frame::Oversized(size, skimmed) => {
                            env.id = skimmed.id;
                            size
                        }
                        _ => 0,
                    };
                    (None, (0, 0), size, env)
                }
                (Frame::Chunk(r), Some(env)) => {
                    let chunk = chunk.expect("chunk frames come from a chunk");
                    (Some(chunk.clone().unbind()), (r.start, r.end), r.len(), env)
                }
                (Frame::Oversized(size, _), Some(env)) => (None, (0, 0), size, env),
                (Frame::Owned(v), Some(env)) => (Some(PyBytes::new(py, &v).unbind()), (0, v.len()), v.len(), env),
            };
            let token = token.map(|t| token_to_py(py, t)).transpose()?;
            let correlation = correlation as u8;
            list.append(Bound::new(py, PyEvent { env, source, span, size, correlation, token })?)?;
        }
        Ok(list)
    }
}

#[pymethods]
impl PyStreamDecoder {
    #[new]
    #[pyo3(signature = (correlator = None, max_line_bytes = DEFAULT_MAX_LINE_BYTES))]
    fn new(correlator: Option<Py<PyCorrelator>>, max_line_bytes: usize) -> PyResult<Self> {
        Ok(PyStreamDecoder { splitter: splitter::LineSplitter::new(check_max(max_line_bytes)?), correlator })
    }

    fn feed<'py>(&mut self, py: Python<'py>, chunk: Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyList>> {
        self.decode(py, Some(&chunk), None)
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.decode(py, None, None)
    }

    /// `feed`, with replies to forwarded calls returned as RESULT frames (one bytes object).
    fn feed_forward<'py>(
        &mut self,
        py: Python<'py>,
        chunk: Bound<'py, PyBytes>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyList>)> {
        let mut forwarded = decoder::Forwarded::default();
        let events = self.decode(py, Some(&chunk), Some(&mut forwarded))?;
        Ok((Self::frames(py, &forwarded, chunk.as_bytes())?, events))
    }

    /// `finish`, with replies to forwarded calls returned as RESULT frames.
    fn finish_forward<'py>(&mut self, py: Python<'py>) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyList>)> {
        let mut forwarded = decoder::Forwarded::default();
        let events = self.decode(py, None, Some(&mut forwarded))?;
        Ok((Self::frames(py, &forwarded, &[])?, events))
    }

    #[getter]
    fn buffered(&self) -> usize {
        self.splitter.buffered()
    }

    #[getter]
    fn correlator(&self, py: Python<'_>) -> Option<Py<PyCorrelator>> {
        self.correlator.as_ref().map(|c| c.clone_ref(py))
    }
}

// ---------------------------------------------------------------------------- channel frames

fn check_max_frame(max_frame_bytes: usize) -> PyResult<usize> {
    positive("max_frame_bytes", max_frame_bytes)
}

/// Channel bytes in, complete `(type, body)` frames out.
#[pyclass(module = "trunkline._codec", name = "FrameSplitter")]
pub struct PyFrameSplitter {
    inner: frames::FrameSplitter,
}

#[pymethods]
impl PyFrameSplitter {
    #[new]
    #[pyo3(signature = (max_frame_bytes = DEFAULT_MAX_FRAME_BYTES))]
    fn new(max_frame_bytes: usize) -> PyResult<Self> {
        Ok(PyFrameSplitter { inner: frames::FrameSplitter::new(check_max_frame(max_frame_bytes)?) })
    }

    fn feed<'py>(&mut self, py: Python<'py>, chunk: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        self.inner.feed(chunk, &mut out).map_err(corrupt_err)?;
        let list = PyList::empty(py);
        for f in &out {
            list.append(frame_tuple(py, f.kind, f.body(chunk))?)?;
        }
        Ok(list)
    }

    #[getter]
    fn buffered(&self) -> usize {
        self.inner.buffered()
    }
}

/// One whole SUBMIT frame.
#[pyfunction]
#[pyo3(signature = (call_id, timeout_ms, method, params, max_frame_bytes = DEFAULT_MAX_FRAME_BYTES, *, credential = 0))]
fn encode_submit<'py>(
    py: Python<'py>,
    call_id: u64,
    timeout_ms: i64,
    method: &str,
    params: Option<&[u8]>,
    max_frame_bytes: usize,
    credential: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    if timeout_ms < 0 {
        return Err(CodecError::new_err(format!("timeout_ms must not be negative, not {timeout_ms}")));
    }
    // Beyond ~49 days a deadline is "never" in practice; saturate rather than refuse.
    let timeout_ms = u32::try_from(timeout_ms).unwrap_or(u32::MAX);
    let submit = frames::Submit { call_id, timeout_ms, credential, method, params };
    let len = submit.encoded_len(max_frame_bytes).map_err(codec_err)?;
    bytes_written(py, len, |fill| submit.write(fill))
}

/// The worker's inbound side: SUBMIT frames -> stamped request lines.
#[pyclass(module = "trunkline._codec", name = "SubmitStamper")]
pub struct PySubmitStamper {
    inner: frames::SubmitStamper,
    correlator: Py<PyCorrelator>,
}

#[pymethods]
impl PySubmitStamper {
    #[new]
    #[pyo3(signature = (correlator, max_frame_bytes = DEFAULT_MAX_FRAME_BYTES, *, lines_apart = false))]
    fn new(correlator: Py<PyCorrelator>, max_frame_bytes: usize, lines_apart: bool) -> PyResult<Self> {
        let max = check_max_frame(max_frame_bytes)?;
        let inner =
            if lines_apart { frames::SubmitStamper::lines_apart(max) } else { frames::SubmitStamper::new(max) };
        Ok(PySubmitStamper { inner, correlator })
    }

    fn start_stamping(&mut self, meta: Option<&[u8]>) -> PyResult<()> {
        self.inner.start_stamping(meta).map_err(codec_err)
    }

    fn stop_stamping(&mut self) {
        self.inner.stop_stamping();
    }

    /// With ``now`` (seconds on the caller's clock), each stamped call gets the deadline
    /// ``now + timeout_ms`` from its SUBMIT frame, for ``Correlator.expire``.
    #[pyo3(signature = (chunk, now = None))]
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        chunk: Bound<'py, PyBytes>,
        now: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let bytes = chunk.as_bytes();
        let mut stdin = Vec::new();
        let now_us = now.map(deadline_us);
        let passed = {
            // Held across the detach, as in `StreamDecoder`: stamping only inserts ids.
            let mut guard = self.correlator.bind(py).try_borrow_mut()?;
            let corr = &mut guard.inner;
            let inner = &mut self.inner;
            let stdin = &mut stdin;
            let mut work = move || inner.feed_at(bytes, corr, stdin, now_us);
            if bytes.len() >= DETACH_THRESHOLD {
                py.detach(work)
            } else {
                work()
            }
        }
        .map_err(corrupt_err)?;
        let ordered = PyList::empty(py);
        for p in passed {
            match p {
                Passed::Stamped(range) => ordered.append(frame_tuple(py, frames::FRAME_STAMPED, &stdin[range])?)?,
                Passed::StampedFor { range, credential } => ordered.append(frame_tuple(
                    py,
                    frames::FRAME_STAMPED_FOR,
                    &Passed::stamped_for_body(credential, &stdin[range]),
                )?)?,
                Passed::Frame(f) => ordered.append(frame_tuple(py, f.kind, f.body(bytes))?)?,
                Passed::Rejected { call_id, reason } => ordered.append(frame_tuple(
                    py,
                    frames::FRAME_SUBMIT_REJECTED,
                    &Passed::rejected_body(call_id, &reason),
                )?)?,
            }
        }
        Ok(ordered)
    }

    /// Whether SUBMIT frames are being stamped (`start_stamping` was called).
    #[getter]
    fn stamping(&self) -> bool {
        *self.inner.mode() != frames::Stamping::Off
    }

    #[getter]
    fn buffered(&self) -> usize {
        self.inner.splitter().buffered()
    }

    #[getter]
    fn correlator(&self, py: Python<'_>) -> Py<PyCorrelator> {
        self.correlator.clone_ref(py)
    }
}

/// The parent's inbound side: RESULT frames resolve the calls' tokens.
#[pyclass(module = "trunkline._codec", name = "ResultDemux")]
pub struct PyResultDemux {
    inner: frames::ResultDemux,
    correlator: Py<PyCorrelator>,
}

#[pymethods]
impl PyResultDemux {
    #[new]
    #[pyo3(signature = (correlator, max_frame_bytes = DEFAULT_MAX_FRAME_BYTES))]
    fn new(correlator: Py<PyCorrelator>, max_frame_bytes: usize) -> PyResult<Self> {
        Ok(PyResultDemux { inner: frames::ResultDemux::new(check_max_frame(max_frame_bytes)?), correlator })
    }

    #[allow(clippy::type_complexity)]
    fn feed<'py>(&mut self, py: Python<'py>, chunk: &[u8]) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let demuxed = {
            let mut guard = self.correlator.bind(py).try_borrow_mut()?;
            self.inner.feed(chunk, &mut guard.inner)
        }
        .map_err(corrupt_err)?;
        let resolved = PyList::empty(py);
        let others = PyList::empty(py);
        for d in demuxed {
            match d {
                Demuxed::Resolved { token, request_id, kind, result_type, frame } => {
                    let payload = PyBytes::new(py, &frame.body(chunk)[RESULT_HEAD_LEN..]);
                    resolved.append((token_to_py(py, token)?, kind, result_type, payload, request_id))?;
                }
                Demuxed::Other(f) => others.append(frame_tuple(py, f.kind, f.body(chunk))?)?,
            }
        }
        Ok((resolved, others))
    }

    /// RESULT frames for calls already resolved or discarded, dropped.
    #[getter]
    fn stale(&self) -> u64 {
        self.inner.stale
    }

    /// RESULT frames for call ids never allocated, dropped.
    #[getter]
    fn unknown(&self) -> u64 {
        self.inner.unknown
    }

    #[getter]
    fn buffered(&self) -> usize {
        self.inner.splitter().buffered()
    }

    #[getter]
    fn correlator(&self, py: Python<'_>) -> Py<PyCorrelator> {
        self.correlator.clone_ref(py)
    }
}

// ---------------------------------------------------------------------------- encoders

fn bytes_out(py: Python<'_>, r: Result<Vec<u8>, stamp::CodecError>) -> PyResult<Bound<'_, PyBytes>> {
    r.map(|v| PyBytes::new(py, &v)).map_err(codec_err)
}

/// A modern request line with `meta` spliced in as `params._meta`.
#[pyfunction]
#[pyo3(signature = (id, method, params, meta))]
fn stamp_request<'py>(
    py: Python<'py>,
    id: &Bound<'py, PyAny>,
    method: &str,
    params: Option<&[u8]>,
    meta: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let id = id_from_py(id)?;
    let line = stamp::Stamped::new(&id, method, params, meta).map_err(codec_err)?;
    bytes_written(py, line.encoded_len(), |out| line.write(out))
}

/// A new `bytes` object of exactly `len` bytes that `write` fills in place: the one copy
/// of its contents (`PyBytes::new` would add a second, from a Rust buffer, and
/// `PyBytes::new_with` a zeroing pass).
fn bytes_written<'py>(py: Python<'py>, len: usize, write: impl FnOnce(&mut Fill<'_>)) -> PyResult<Bound<'py, PyBytes>> {
    let size = pyo3::ffi::Py_ssize_t::try_from(len).map_err(|_| PyValueError::new_err("line too long"))?;
    // SAFETY: a NULL source asks CPython for an uninitialized `bytes` of `size` bytes, owned
    // here (or NULL with an exception set); nothing reads it before `write` fills it.
    let bytes =
        unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size))? };
    // SAFETY: the object is a `bytes` of `len` bytes that no one else holds yet, so its
    // buffer may be written through this slice; `MaybeUninit` makes no claim on its contents.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(
            pyo3::ffi::PyBytes_AsString(bytes.as_ptr()).cast::<std::mem::MaybeUninit<u8>>(),
            len,
        )
    };
    let mut fill = Fill::new(buf);
    write(&mut fill);
    // A short write would leave bytes no one wrote: refuse it (a bug, never input).
    assert!(fill.is_full(), "the line was shorter than measured");
    // SAFETY: `PyBytes_FromStringAndSize` returned a `bytes` object.
    Ok(unsafe { bytes.cast_into_unchecked() })
}

/// The one JSON value in ``data``, checked strictly (``CodecError`` says what is wrong and
/// at which byte), or ``declined`` when orjson would decode the document faster.
#[pyfunction]
fn loads_text<'py>(py: Python<'py>, data: Bound<'py, PyBytes>, declined: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match py_json::objects(py, data.as_bytes()) {
        Ok(value) => Ok(value),
        Err(py_json::Failed::Declined) => Ok(declined),
        Err(py_json::Failed::Json(e)) => Err(CodecError::new_err(e.to_string())),
        Err(py_json::Failed::Python(e)) => Err(e),
    }
}

/// A plain (legacy) request line, no stamping.
#[pyfunction]
#[pyo3(signature = (id, method, params))]
fn encode_request<'py>(
    py: Python<'py>,
    id: &Bound<'py, PyAny>,
    method: &str,
    params: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let id = id_from_py(id)?;
    bytes_out(py, stamp::encode_request(&id, method, params))
}

/// A notification line (no id).
#[pyfunction]
#[pyo3(signature = (method, params))]
fn encode_notification<'py>(py: Python<'py>, method: &str, params: Option<&[u8]>) -> PyResult<Bound<'py, PyBytes>> {
    bytes_out(py, stamp::encode_notification(method, params))
}

/// A result response line.
#[pyfunction]
fn encode_result<'py>(py: Python<'py>, id: &Bound<'py, PyAny>, result: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let id = id_from_py(id)?;
    bytes_out(py, stamp::encode_result(&id, result))
}

/// An error response line (`id=None` is written as `null`).
#[pyfunction]
#[pyo3(signature = (id, code, message, data = None))]
fn encode_error<'py>(
    py: Python<'py>,
    id: &Bound<'py, PyAny>,
    code: i64,
    message: &str,
    data: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let id = if id.is_none() { None } else { Some(id_from_py(id)?) };
    bytes_out(py, stamp::encode_error(id.as_ref(), code, message, data))
}

/// The exact raw bytes of the value of top-level member `key` of the JSON object `json`,
/// or None when absent. Raises CodecError when `json` is not one valid JSON object or
/// holds `key` twice.
#[pyfunction]
fn raw_member<'py>(py: Python<'py>, json: &[u8], key: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let span = stamp::raw_member(json, key).map_err(codec_err)?;
    Ok(span.map(|(a, b)| PyBytes::new(py, &json[a..b])))
}

/// The byte offset of the first integer outside `[-2^63, 2^64)` in the JSON text `data`,
/// or None (see `wide_int`).
#[pyfunction]
fn wide_integer_at(data: &[u8]) -> Option<usize> {
    wide_int::first_wide_integer(data)
}

// ---------------------------------------------------------------------------- HTTP heads

/// The map an HTTP request's headers are looked up in (`http_head`'s rules): ``raw`` holds
/// their names and values in arrival order, ``[name, value, name, value, ...]``.
#[pyfunction]
fn header_map<'py>(py: Python<'py>, raw: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyDict>> {
    if raw.len() % 2 != 0 {
        return Err(PyValueError::new_err("header names and values come in pairs"));
    }
    let map = PyDict::new(py);
    for pair in 0..raw.len() / 2 {
        let name = raw.get_item(2 * pair)?;
        let key = header_name(py, &http_head::lower_name(name.cast::<PyBytes>()?.as_bytes()))?;
        if !map.contains(&key)? {
            let value = raw.get_item(2 * pair + 1)?;
            map.set_item(key, latin1(py, http_head::trimmed_value(value.cast::<PyBytes>()?.as_bytes()))?)?;
        }
    }
    Ok(map)
}

/// A lower-case header name as a `str`: the names MCP clients send are interned (made once),
/// any other is decoded.
fn header_name<'py>(py: Python<'py>, lower: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let known = match lower {
        b"host" => intern!(py, "host"),
        b"content-type" => intern!(py, "content-type"),
        b"content-length" => intern!(py, "content-length"),
        b"accept" => intern!(py, "accept"),
        b"accept-encoding" => intern!(py, "accept-encoding"),
        b"user-agent" => intern!(py, "user-agent"),
        b"connection" => intern!(py, "connection"),
        b"authorization" => intern!(py, "authorization"),
        b"origin" => intern!(py, "origin"),
        b"mcp-protocol-version" => intern!(py, "mcp-protocol-version"),
        b"mcp-method" => intern!(py, "mcp-method"),
        b"mcp-name" => intern!(py, "mcp-name"),
        b"mcp-session-id" => intern!(py, "mcp-session-id"),
        b"last-event-id" => intern!(py, "last-event-id"),
        b"traceparent" => intern!(py, "traceparent"),
        b"tracestate" => intern!(py, "tracestate"),
        b"transfer-encoding" => intern!(py, "transfer-encoding"),
        b"expect" => intern!(py, "expect"),
        _ => return latin1(py, lower),
    };
    Ok(known.clone())
}

/// `bytes` as Latin-1 text, decoded by CPython (one byte, one character: cannot fail).
fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let len = pyo3::ffi::Py_ssize_t::try_from(bytes.len()).map_err(|_| PyValueError::new_err("header too long"))?;
    // SAFETY: the pointer and length describe `bytes`, which outlives the call; CPython
    // returns a new `str` (owned here) or NULL with an exception set.
    let text = unsafe {
        Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyUnicode_DecodeLatin1(bytes.as_ptr().cast(), len, std::ptr::null()))?
    };
    // SAFETY: `PyUnicode_DecodeLatin1` returned a `str`.
    Ok(unsafe { text.cast_into_unchecked() })
}

// ---------------------------------------------------------------------------- module

#[pymodule]
fn _codec(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add("KIND_INVALID", Kind::Invalid as u8)?;
    m.add("KIND_REQUEST", Kind::Request as u8)?;
    m.add("KIND_NOTIFICATION", Kind::Notification as u8)?;
    m.add("KIND_RESULT", Kind::Result as u8)?;
    m.add("KIND_ERROR", Kind::Error as u8)?;
    m.add("KIND_OVERSIZED", Kind::Oversized as u8)?;
    m.add("CORR_NONE", Correlation::None as u8)?;
    m.add("CORR_MATCHED", Correlation::Matched as u8)?;
    m.add("CORR_UNKNOWN", Correlation::Unknown as u8)?;
    m.add("CORR_STALE", Correlation::Stale as u8)?;
    m.add("DEFAULT_MAX_LINE_BYTES", DEFAULT_MAX_LINE_BYTES)?;
    m.add("FRAME_SUBMIT", frames::FRAME_SUBMIT)?;
    m.add("FRAME_RESULT", frames::FRAME_RESULT)?;
    m.add("FRAME_SUBMIT_REJECTED", frames::FRAME_SUBMIT_REJECTED)?;
    m.add("FRAME_STAMPED", frames::FRAME_STAMPED)?;
    m.add("FRAME_STAMPED_FOR", frames::FRAME_STAMPED_FOR)?;
    m.add("RT_ABSENT", frames::RT_ABSENT)?;
    m.add("RT_COMPLETE", frames::RT_COMPLETE)?;
    m.add("RT_INPUT_REQUIRED", frames::RT_INPUT_REQUIRED)?;
    m.add("RT_OTHER", frames::RT_OTHER)?;
    m.add("DEFAULT_MAX_FRAME_BYTES", DEFAULT_MAX_FRAME_BYTES)?;
    m.add("MAX_NESTING_DEPTH", MAX_NESTING_DEPTH)?;
    m.add("CodecError", py.get_type::<CodecError>())?;
    m.add_class::<PyEnvelope>()?;
    m.add_class::<PyOversizedLine>()?;
    m.add_class::<PyLineSplitter>()?;
    m.add_class::<PyCorrelator>()?;
    m.add_class::<PyEvent>()?;
    m.add_class::<PyStreamDecoder>()?;
    m.add_class::<PyFrameSplitter>()?;
    m.add_class::<PySubmitStamper>()?;
    m.add_class::<PyResultDemux>()?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_function(wrap_pyfunction!(header_map, m)?)?;
    m.add_function(wrap_pyfunction!(loads_text, m)?)?;
    m.add_function(wrap_pyfunction!(stamp_request, m)?)?;
    m.add_function(wrap_pyfunction!(encode_request, m)?)?;
    m.add_function(wrap_pyfunction!(encode_notification, m)?)?;
    m.add_function(wrap_pyfunction!(encode_result, m)?)?;
    m.add_function(wrap_pyfunction!(encode_error, m)?)?;
    m.add_function(wrap_pyfunction!(encode_submit, m)?)?;
    m.add_function(wrap_pyfunction!(raw_member, m)?)?;
    m.add_function(wrap_pyfunction!(wide_integer_at, m)?)?;
    Ok(())
}
