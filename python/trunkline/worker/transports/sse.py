"""An incremental Server-Sent Events decoder (WHATWG HTML, "event stream interpretation").

Pure, like h11: bytes in, events out; no I/O, no clock, no reconnection policy. The MCP
Streamable HTTP client feeds it the body of a ``text/event-stream`` response chunk by chunk
and reads ``last_event_id`` / ``last_retry_ms`` to resume after a drop.

Lines are split with bytes methods and each field value is decoded once, so a 64 KiB JSON
``data:`` line costs a few C-level passes, not a Python loop per character. Splitting on
CR/LF before decoding is safe: they are ASCII and never occur inside a UTF-8 sequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SseDecoder", "SseError", "SseEvent"]

_BOM = b"\xef\xbb\xbf"
# CRLF is tried before a lone CR so that the pair is one terminator, not a line plus a blank.
_LINE_END = re.compile(rb"\r\n|\r|\n")
# A reconnection delay with more significant digits than this is nobody's real delay, and
# int() of a hostile run of digits is slow (and capped at 4300 digits since Python 3.11).
# Such values are ignored, as browsers ignore a retry that overflows their integer.
_MAX_RETRY_DIGITS = 18


class SseError(ValueError):
    """The stream broke a limit of the decoder: treat it as hostile and drop it."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str  # the event type, "message" when no (or an empty) `event:` field was given
    data: str  # data lines joined with "\n" (no trailing newline)
    id: str | None  # the last-event-id when this block had an `id:` field, else None
    retry_ms: int | None  # a valid `retry:` seen in this block, else None


class SseDecoder:
    """Decodes one event stream; after ``finish()`` it is ready for the next (reconnected)
    stream and keeps ``last_event_id`` and ``last_retry_ms``. After an ``SseError`` its
    state is unspecified: drop it with the stream."""

    def __init__(self, *, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._last_id: str | None = None  # committed at block ends: safe to resume from
        self._last_retry: int | None = None
        self._new_stream()

    def _new_stream(self) -> None:
        self._head = b""  # the first bytes, held until we know whether they are a BOM
        self._bom_settled = False
        self._tail = bytearray()  # the current unterminated line
        self._after_cr = False  # the last byte seen was a CR: a leading LF is its pair
        # The spec's "last event ID buffer": set by `id:` at once, committed at a blank line.
        self._id_buf = self._last_id
        self._new_block()

    def _new_block(self) -> None:
        self._data: list[bytes] = []
        self._event = b""
        self._id_seen = False
        self._retry: int | None = None
        self._block_bytes = 0  # field-line bytes of this block: what the guard bounds

    @property
    def last_event_id(self) -> str | None:
        """The last-event-id as of the last blank line (None when unset or reset by an empty
        `id:`). An `id:` in a block the stream cut off is not committed: resuming from it
        would skip the event it belongs to."""
        return self._last_id

    @property
    def last_retry_ms(self) -> int | None:
        return self._last_retry

    @property
    def pending_bytes(self) -> int:
        return len(self._head) + len(self._tail) + self._block_bytes

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if not self._bom_settled:
            head = self._head + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._head = head  # a BOM may be split across chunks: wait for the rest
                return []
            self._head, self._bom_settled = b"", True
            chunk = head[len(_BOM) :] if head.startswith(_BOM) else head
        if not chunk:
            return []  # an empty chunk must not forget a pending CR
        if self._after_cr:
            self._after_cr = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]  # the LF of a CRLF split across chunks: not a new line
        has_cr = b"\r" in chunk
        if not has_cr and b"\n" not in chunk:
            self._tail += chunk  # amortised append: a long line in small chunks stays linear
            self._check(len(self._tail) + self._block_bytes)
            return []
        buf = bytes(self._tail) + chunk if self._tail else chunk
        lines = _LINE_END.split(buf) if has_cr else buf.split(b"\n")
        self._after_cr = buf.endswith(b"\r")
        tail = lines.pop()  # after the last terminator: not a line yet
        events: list[SseEvent] = []
        for line in lines:
            if not line:
                self._dispatch(events)
            elif line[0] != 0x3A:  # lines starting with ':' are comments (keep-alives)
                self._field(line)
        self._tail = bytearray(tail)
        self._check(len(self._tail) + self._block_bytes)
        return events

    def finish(self) -> list[SseEvent]:
        """End of stream. The spec discards an event not closed by a blank line, so this
        always returns []; read ``pending_bytes`` first to learn whether one was cut off."""
        self._new_stream()
        return []

    def _check(self, pending: int) -> None:
        if pending > self._max:
            raise SseError(f"event stream holds {pending} undispatched bytes (max {self._max})")

    def _field(self, line: bytes) -> None:
        self._block_bytes += len(line)
        self._check(self._block_bytes)  # per line: a hostile block is stopped as it grows
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]  # exactly one space; a second one belongs to the value
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id":
            if b"\x00" not in value:
                self._id_buf = value.decode("utf-8", "replace") or None
                self._id_seen = True
        elif name == b"retry":
            # bytes.isdigit() is ASCII-only and False for b"", exactly the spec's test.
            digits = value.lstrip(b"0") or b"0"
            if value.isdigit() and len(digits) <= _MAX_RETRY_DIGITS:
                self._retry = self._last_retry = int(digits)
        # any other field name is ignored, as the spec requires

    def _dispatch(self, events: list[SseEvent]) -> None:
        # The id is committed even when no event fires: an `id:`-only block moves the
        # resumption point, as the spec sets the last event ID string before its data check.
        self._last_id = self._id_buf
        if self._data:
            events.append(
                SseEvent(
                    event=self._event.decode("utf-8", "replace") or "message",
                    data=b"\n".join(self._data).decode("utf-8", "replace"),
                    id=self._id_buf if self._id_seen else None,
                    retry_ms=self._retry,
                )
            )
        self._new_block()
