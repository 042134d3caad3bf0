"""Type stub for ``trunkline._codec``, the Rust core every byte of MCP traffic passes through.

Bytes in, bytes and small tuples out: the codec never builds Python objects for payloads it
only forwards. Work on large buffers runs with the GIL released.
"""

from typing import Any, Final, Generic, TypeAlias, TypeVar

JsonId: TypeAlias = int | str
_T = TypeVar("_T")

VERSION: Final[str]  # the package version (Cargo.toml's, also the distribution's)

# Envelope kinds (``Envelope.kind`` / ``Event.kind``).
# not a JSON-RPC 2.0 message; ``reason`` says why. ``id`` is the top-level id it carries
# when it has no method (an answer gone wrong: ``result`` with ``error``, bytes that are not
# UTF-8, nesting past MAX_NESTING_DEPTH), and an Event's is correlated like a reply's.
KIND_INVALID: Final[int]
KIND_REQUEST: Final[int]  # method + id
KIND_NOTIFICATION: Final[int]  # method, no id
KIND_RESULT: Final[int]  # id + result
KIND_ERROR: Final[int]  # error (id may be None when the peer could not read ours)
# (Event only) a line longer than max_line_bytes, skipped unbuffered; ``id`` is its top-level
# id when the skim found one, and a response's id is correlated like any other reply.
KIND_OVERSIZED: Final[int]

# Correlation outcomes (``Event.correlation`` / ``Correlator.resolve``).
CORR_NONE: Final[int]  # not a response, or no correlator attached
CORR_MATCHED: Final[int]  # the id was pending; ``token`` is what was registered
CORR_UNKNOWN: Final[int]  # never allocated or registered on this correlator
CORR_STALE: Final[int]  # allocated earlier but already resolved or discarded (a late reply)

DEFAULT_MAX_LINE_BYTES: Final[int]  # 16 MiB
MAX_NESTING_DEPTH: Final[int]  # deeper JSON is classified invalid, never recursed into

# Parent <-> worker channel frames: ``u32 LE length | u8 type | body``, the length counting
# the type byte and the body. Other frame types are opaque here: returned as (type, body).
# 1, parent -> worker: ``u64 call_id | u32 timeout_ms | u32 credential | u16 method_len |
# method | params``; ``credential``: the slot whose credentials the request goes with (0:
# the host's own)
FRAME_SUBMIT: Final[int]
# 16, worker -> parent: ``u64 call_id | i64 request_id | u8 kind | u8 result_type | payload``
FRAME_RESULT: Final[int]
# 255: never on the wire. ``SubmitStamper.feed`` reports a SUBMIT it could not stamp (params
# not a JSON object, truncated head, method not UTF-8, call id already pending) as this
# pseudo-frame, body ``u64 LE call_id | reason (UTF-8)``, so the worker fails just that call.
# Nothing was registered or written for it.
FRAME_SUBMIT_REJECTED: Final[int]
# 254: never on the wire. ``SubmitStamper.feed`` returns each run of consecutive SUBMITs it
# stamped as this pseudo-frame, its body the request lines ready for the server.
FRAME_STAMPED: Final[int]
# 253: never on the wire. A stamper keeping lines apart returns a stamped SUBMIT of a
# credential slot other than 0 as this pseudo-frame, body ``u32 LE credential | line``.
FRAME_STAMPED_FOR: Final[int]

# RESULT frame ``result_type`` codes, from the response's ``result.resultType``.
RT_ABSENT: Final[int]  # no resultType (and every error)
RT_COMPLETE: Final[int]  # "complete"
RT_INPUT_REQUIRED: Final[int]  # "input_required"
RT_OTHER: Final[int]  # any other value

DEFAULT_MAX_FRAME_BYTES: Final[int]  # 64 MiB + 64: largest frame length accepted by default

class CodecError(ValueError):
    """Raised for invalid arguments (params that are not a JSON object, bad ids, ...)."""

class Envelope:
    """What ``scan`` learns about one line without decoding its payload.

    For a request or notification whose ``params`` is an object, ``params_span`` is that
    object's byte span and ``meta_span``, ``name_span``, ``uri_span`` the spans of its
    ``_meta``, ``name`` and ``uri`` values (any JSON type, quotes included; None when
    absent): ``orjson.loads(line[a:b])`` is what ``orjson.loads(line)["params"][key]`` would
    give, a repeated key included (its last occurrence) and escaped keys too (``"n\\u0061me"``
    is ``name``). Every other line has None for all four."""

    kind: int
    id: JsonId | None  # exactly as sent: 1 and "1" differ (KIND_INVALID: see there)
    method: str | None
    error_code: int | None
    error_message: str | None
    error_data: bytes | None  # raw JSON bytes of ``error.data``
    result_type: str | None  # ``result.resultType`` when present
    result_span: tuple[int, int] | None  # byte span of the ``result`` value in the line
    params_span: tuple[int, int] | None  # byte span of an object ``params`` (see above)
    meta_span: tuple[int, int] | None  # byte span of ``params._meta``
    name_span: tuple[int, int] | None  # byte span of ``params.name``
    uri_span: tuple[int, int] | None  # byte span of ``params.uri``
    reason: str | None  # why the line is invalid (KIND_INVALID only)

def scan(line: bytes) -> Envelope:
    """Classify one line (no trailing newline). Never raises for any input bytes."""

class LineSplitter:
    """Chunks of any size in, complete lines out. ``\\n`` ends a line; one trailing ``\\r`` is
    stripped; blank lines are skipped. A line longer than ``max_line_bytes`` is never buffered
    whole: it is reported as an ``OversizedLine`` once its end is seen (or at ``finish``)."""

    def __init__(self, max_line_bytes: int = ...) -> None: ...
    def feed(self, chunk: bytes) -> list[bytes | OversizedLine]: ...
    def finish(self) -> list[bytes | OversizedLine]:
        """End of stream: an unterminated tail is returned as a last line."""
    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete line (bounded by max_line_bytes)."""

class OversizedLine:
    size: int  # full length of the skipped line in bytes (without its ``\r\n``)
    def __init__(self, size: int) -> None: ...

class Correlator(Generic[_T]):
    """Pending request ids -> opaque tokens, for one transport lifetime.

    Ids from ``allocate`` increase monotonically and are never reused; with a ``limit``
    they stay below it (a block of ids for one transport lifetime), and allocating past it
    raises CodecError. A response resolves its id exactly once; later responses with that
    id are reported CORR_STALE, never dropped silently."""

    def __init__(self, first_id: int = 1, limit: int | None = None) -> None: ...
    @property
    def ids_left(self) -> int:
        """How many more ids ``allocate`` and ``allocate_call`` can hand out."""
    def allocate(self, token: _T, deadline: float | None = None) -> int:
        """Register ``token`` under the next unused integer id and return the id. With a
        ``deadline`` (seconds on the caller's clock), ``expire`` hands it back once due."""
    def register(self, id: JsonId, token: _T) -> None:
        """Register a caller-chosen id. Raises CodecError if it is pending or was used before."""
    def resolve(self, id: JsonId | None) -> tuple[int, _T | int | None]:
        """(CORR_MATCHED, token) once; then (CORR_STALE, None); (CORR_UNKNOWN, None) otherwise.
        The token of a forwarded call (``allocate_call``) is its call id."""
    def discard(self, id: JsonId) -> _T | int | None:
        """Forget a pending id without a response (timeout, cancel); a later reply is STALE."""
    def drain(self) -> list[tuple[JsonId, _T | int]]:
        """Hand back every pending (id, token) at once, e.g. on transport loss. For a
        forwarded call the token is its call id (an int)."""
    def allocate_call(self, call_id: int, deadline: float | None = None) -> int:
        """Register a call forwarded for the parent under the next integer id (the same
        sequence as ``allocate``) and return that id. The call id is kept natively (no Python
        object): when its reply is routed by ``StreamDecoder.feed_forward`` it becomes a
        RESULT frame; anywhere else (``resolve``, ``discard``, ``drain``, ``Event.token``) the
        token reads as the int call id. Raises CodecError while ``call_id`` is pending."""
    def discard_call(self, call_id: int) -> int | None:
        """Forget a pending forwarded call (cancel, timeout) and return its JSON-RPC id, or
        None if it was not pending. A later reply to that id is CORR_STALE."""
    def next_deadline(self) -> float | None:
        """The earliest deadline among pending entries, or None: one timer for all calls."""
    def expire(self, now: float) -> list[tuple[JsonId, _T | int]]:
        """Remove and return every pending (id, token) whose deadline is at or before
        ``now``, earliest first; a later reply to one of them is CORR_STALE."""
    def __len__(self) -> int: ...
    def __contains__(self, id: object) -> bool: ...

class Event(Generic[_T]):
    """One line of a read buffer, split, scanned and correlated."""

    kind: int
    id: JsonId | None
    method: str | None
    error_code: int | None
    error_message: str | None
    error_data: bytes | None
    result_type: str | None
    reason: str | None
    line: bytes  # the whole line (empty for KIND_OVERSIZED)
    size: int  # length of the line in bytes (the skipped size for KIND_OVERSIZED)
    correlation: int
    token: _T | None  # a forwarded call's int call id when plain ``feed`` resolves its reply
    @property
    def result(self) -> bytes | None:
        """Raw bytes of the ``result`` value (KIND_RESULT only)."""

class StreamDecoder(Generic[_T]):
    """The batch API: one call per read buffer splits, scans and correlates every complete line."""

    def __init__(
        self, correlator: Correlator[_T] | None = None, max_line_bytes: int = ...
    ) -> None: ...
    def feed(self, chunk: bytes) -> list[Event[_T]]: ...
    def finish(self) -> list[Event[_T]]: ...
    def feed_forward(self, chunk: bytes) -> tuple[bytes, list[Event[_T]]]:
        """``feed`` for a worker: every response (KIND_RESULT or KIND_ERROR) that resolves
        CORR_MATCHED to a forwarded call (``Correlator.allocate_call``) is appended to the
        returned bytes as a whole RESULT frame, ``u64 call_id | i64 request_id | u8 kind | u8
        result_type | payload`` (``request_id``: the id the request went out with), where
        payload is the raw ``result`` value for a result and the whole line (without its
        newline) for an error; no Python object is made for it. Every other line
        comes back as an Event exactly as ``feed`` returns it, in order: a malformed answer
        to a forwarded call too (KIND_INVALID, CORR_MATCHED, its call id as the token), for
        the worker to fail the call with the reason. The bytes are empty when no forwarded
        call was answered."""
    def finish_forward(self) -> tuple[bytes, list[Event[_T]]]:
        """``finish`` with the routing of ``feed_forward``."""
    @property
    def buffered(self) -> int: ...
    @property
    def correlator(self) -> Correlator[_T] | None: ...

class FrameSplitter:
    """Channel bytes in, complete ``(type, body)`` frames out; partial frames are carried
    across feeds (a frame is copied at most once, only when it straddles chunks)."""

    def __init__(self, max_frame_bytes: int = ...) -> None: ...
    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """Every frame completed by ``chunk``. A length of 0 or over ``max_frame_bytes``
        raises CodecError: the channel is corrupt (the caller kills the worker), and every
        later ``feed`` raises too."""
    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""

def encode_submit(
    call_id: int, timeout_ms: int, method: str, params: bytes | None, max_frame_bytes: int = ...,
    *, credential: int = 0,
) -> bytes:
    """One whole SUBMIT frame (header included). ``params`` (serialized JSON, None = none) is
    not checked here: the worker's stamper checks it and rejects just that call.
    ``credential`` (a u32; OverflowError beyond) is the slot of the identity whose
    credentials the request goes with, 0 the host's own. Raises
    CodecError for a method name over 65535 bytes, a negative ``timeout_ms``, or a frame
    larger than ``max_frame_bytes`` (the receiver would take it for corruption).
    ``timeout_ms`` above 2**32-1 saturates."""

class SubmitStamper:
    """The worker's inbound side: channel bytes -> request lines for the server's stdin.

    Shares ``correlator`` with the worker's StreamDecoder: each stamped SUBMIT is registered
    with ``correlator.allocate_call(call_id)``, so its reply is routed by ``feed_forward``."""

    def __init__(self, correlator: Correlator[Any], max_frame_bytes: int = ..., *,
                 lines_apart: bool = False) -> None:
        """``lines_apart``: every stamped SUBMIT comes back as a ``FRAME_STAMPED`` of its
        own (for a transport that sends each request on its own), not one per run, or as a
        ``FRAME_STAMPED_FOR`` carrying its credential slot when that is not 0. Without it
        the slot is ignored (a stdio server's credentials are its own)."""
    def start_stamping(self, meta: bytes | None) -> None:
        """From now on SUBMIT frames become requests: stamped with ``meta`` (a JSON object)
        as ``params._meta`` (modern), or plain when ``meta`` is None (legacy). Until the first
        call, SUBMIT frames are returned untouched among the other frames. Raises CodecError
        if ``meta`` is not a JSON object. May be called again (a new verdict)."""
    def stop_stamping(self) -> None:
        """Stamp no more: later SUBMIT frames come back untouched, as before the first
        ``start_stamping`` (the connection ended; the caller fails them as never sent)."""
    def feed(self, chunk: bytes, now: float | None = None) -> list[tuple[int, bytes]]:
        """Every frame of ``chunk`` as (type, body), in the order the parent sent them, with
        each run of consecutive SUBMITs stamped into one ``(FRAME_STAMPED, request lines)``.

        A SUBMIT that cannot be stamped comes back as ``(FRAME_SUBMIT_REJECTED, u64 call_id |
        reason)``, nothing registered for it. A corrupt channel (bad frame length, a SUBMIT
        too short to hold its call id) raises CodecError before anything is registered or
        written; every later ``feed`` raises too."""
    @property
    def stamping(self) -> bool:
        """Whether ``start_stamping`` was called."""
    @property
    def buffered(self) -> int: ...
    @property
    def correlator(self) -> Correlator[Any]: ...

class ResultDemux(Generic[_T]):
    """The parent's inbound side: RESULT frames resolve the futures of their calls.

    The parent allocates call ids with ``correlator.allocate(token)``, so a RESULT's call id
    is the correlator's id."""

    def __init__(self, correlator: Correlator[_T], max_frame_bytes: int = ...) -> None: ...
    def feed(
        self, chunk: bytes
    ) -> tuple[list[tuple[_T, int, int, bytes, int]], list[tuple[int, bytes]]]:
        """([(token, kind, result_type, payload, request_id)] for RESULTs of pending calls,
        [(type, body)] for every other frame); ``request_id`` is the JSON-RPC id the worker
        sent the request with. A RESULT for a call already resolved or discarded counts in
        ``stale``, for an id never allocated in ``unknown``; both are dropped. A corrupt chunk
        (bad frame length, a RESULT shorter than its head) raises CodecError before any token
        is resolved, so draining the correlator afterwards fails every call."""
    @property
    def stale(self) -> int: ...
    @property
    def unknown(self) -> int: ...
    @property
    def buffered(self) -> int: ...
    @property
    def correlator(self) -> Correlator[_T]: ...

def loads_text(data: bytes, declined: Any) -> Any:
    """The one JSON value in ``data``, checked strictly (``CodecError`` names the byte at
    fault), or ``declined`` (returned as it is) when ``data`` is not mostly long ASCII
    text, the kind of document this decoder makes faster than orjson: one whose strings
    look escape-dense or mostly non-ASCII, has a long non-ASCII string, or holds more than
    32 + 1 per KiB values. Nesting deeper than ``MAX_NESTING_DEPTH``, unpaired surrogate
    escapes and raw control characters are errors; of a repeated key the last wins;
    integers outside 64 bits are exact Python ints."""

def stamp_request(id: JsonId, method: str, params: bytes | None, meta: bytes) -> bytes:
    """A modern request line (ending in ``\\n``): ``meta`` (a JSON object) becomes
    ``params._meta``. Keys the caller already had in ``params._meta`` are kept unless the stamp
    has them too: the stamp wins, except for ``io.modelcontextprotocol/clientCapabilities``,
    where the caller's (first) one replaces the stamp's (one request's own capabilities, e.g.
    a gateway's client's). Output is compact: no newline before the terminator."""

def encode_request(id: JsonId, method: str, params: bytes | None) -> bytes:
    """A plain (legacy) request line, no stamping."""

def encode_notification(method: str, params: bytes | None) -> bytes:
    """A notification line (no id)."""

def encode_result(id: JsonId, result: bytes) -> bytes:
    """A response line (legacy branch answers server requests such as ``ping``)."""

def encode_error(id: JsonId | None, code: int, message: str, data: bytes | None = None) -> bytes:
    """An error response line."""

def raw_member(json: bytes, key: str) -> bytes | None:
    """The exact raw bytes of the value of top-level member ``key`` of the JSON object
    ``json`` (no whitespace around it), or None when the object has no such member.

    Keys are compared decoded (``"a\\u0062"`` is the key ``ab``). Nothing is decoded or
    re-encoded on the way out, so escapes such as ``\\u00e9`` or ``\\/`` survive: this is
    how an MRTR retry echoes the server's ``requestState`` byte for byte. Raises CodecError
    when ``json`` is not one valid JSON object (checked strictly, like stamp inputs) or
    holds ``key`` twice (readers disagree on which occurrence wins)."""

def wide_integer_at(data: bytes) -> int | None:
    """The byte offset of the first integer outside ``[-2**63, 2**64)`` in the JSON text
    ``data`` (its sign or first digit), which orjson would read as a float; None when there
    is none (digits in strings, fractions and exponents are no integer). A document without
    19 digits in a row costs one pass of 64-byte compares."""

def header_map(raw: list[bytes]) -> dict[str, str]:
    """An HTTP request's headers as its server looks them up, from ``[name, value, name,
    value, ...]`` in arrival order: names in lower case (ASCII), values without the spaces
    and tabs around them, both read as Latin-1; of a repeated header the first value
    counts. ``ValueError`` for a list of odd length, ``TypeError`` for an item that is not
    ``bytes``."""
