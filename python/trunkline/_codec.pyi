"""Type stub for ``trunkline._codec``, the Rust core every byte of MCP traffic passes through.

Bytes in, bytes and small tuples out: the codec never builds Python objects for payloads it
only forwards. Work on large buffers runs with the GIL released.
"""

from typing import Final, Generic, TypeVar

JsonId = int | str
_T = TypeVar("_T")

# Envelope kinds (``Envelope.kind`` / ``Event.kind``).
KIND_INVALID: Final[int]  # not a JSON-RPC 2.0 message; ``reason`` says why
KIND_REQUEST: Final[int]  # method + id
KIND_NOTIFICATION: Final[int]  # method, no id
KIND_RESULT: Final[int]  # id + result
KIND_ERROR: Final[int]  # error (id may be None when the peer could not read ours)
KIND_OVERSIZED: Final[int]  # (Event only) a line longer than max_line_bytes, skipped unbuffered

# Correlation outcomes (``Event.correlation`` / ``Correlator.resolve``).
CORR_NONE: Final[int]  # not a response, or no correlator attached
CORR_MATCHED: Final[int]  # the id was pending; ``token`` is what was registered
CORR_UNKNOWN: Final[int]  # never allocated or registered on this correlator
CORR_STALE: Final[int]  # allocated earlier but already resolved or discarded (a late reply)

DEFAULT_MAX_LINE_BYTES: Final[int]  # 16 MiB
MAX_NESTING_DEPTH: Final[int]  # deeper JSON is classified invalid, never recursed into

class CodecError(ValueError):
    """Raised for invalid arguments (params that are not a JSON object, bad ids, ...)."""

class Envelope:
    """What ``scan`` learns about one line without decoding its payload."""

    kind: int
    id: JsonId | None  # exactly as sent: 1 and "1" differ
    method: str | None
    error_code: int | None
    error_message: str | None
    error_data: bytes | None  # raw JSON bytes of ``error.data``
    result_type: str | None  # ``result.resultType`` when present
    result_span: tuple[int, int] | None  # byte span of the ``result`` value in the line
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

    Ids from ``allocate`` increase monotonically and are never reused. A response resolves its
    id exactly once; later responses with that id are reported CORR_STALE, never dropped
    silently."""

    def __init__(self, first_id: int = 1) -> None: ...
    def allocate(self, token: _T) -> int:
        """Register ``token`` under the next unused integer id and return the id."""
    def register(self, id: JsonId, token: _T) -> None:
        """Register a caller-chosen id. Raises CodecError if it is pending or was used before."""
    def resolve(self, id: JsonId | None) -> tuple[int, _T | None]:
        """(CORR_MATCHED, token) once; then (CORR_STALE, None); (CORR_UNKNOWN, None) otherwise."""
    def discard(self, id: JsonId) -> _T | None:
        """Forget a pending id without a response (timeout, cancel); a later reply is STALE."""
    def drain(self) -> list[tuple[JsonId, _T]]:
        """Hand back every pending (id, token) at once, e.g. on transport loss."""
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
    token: _T | None
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
    @property
    def buffered(self) -> int: ...
    @property
    def correlator(self) -> Correlator[_T] | None: ...

def stamp_request(id: JsonId, method: str, params: bytes | None, meta: bytes) -> bytes:
    """A modern request line (ending in ``\\n``): ``meta`` (a JSON object) becomes
    ``params._meta``. Keys the caller already had in ``params._meta`` are kept unless the stamp
    has them too: the stamp wins. Output is compact: no newline before the terminator."""

def encode_request(id: JsonId, method: str, params: bytes | None) -> bytes:
    """A plain (legacy) request line, no stamping."""

def encode_notification(method: str, params: bytes | None) -> bytes:
    """A notification line (no id)."""

def encode_result(id: JsonId, result: bytes) -> bytes:
    """A response line (legacy branch answers server requests such as ``ping``)."""

def encode_error(id: JsonId | None, code: int, message: str, data: bytes | None = None) -> bytes:
    """An error response line."""
