"""A legacy client's call streams, resumable (MCP 2025-11-25, basic/transports: "Resumability
and Redelivery"; SEP-1699), in a store bounded by bytes.

The rules, for a legacy session's ``tools/call`` answered as an SSE stream:

- the stream opens with a priming event: an event id, an empty ``data`` and a ``retry``
  (how long the client waits before it reconnects), so a client that loses the connection
  can come back even before the first message;
- every event carries an id ``<stream>-<n>``: ``<stream>`` unguessable and unique to this
  gateway process, ``<n>`` counting from 0 (the priming event);
- the call is not the connection's: a client that disconnects has not cancelled (it sends
  ``notifications/cancelled`` for that), so the call runs on and its events are kept;
- a GET of the same session with ``Last-Event-ID`` replays the events after that one, on
  that stream only, then follows it until its answer; another session's id, or one this
  process does not hold (another replica's, delivered, evicted or expired), is not found;
- a stream whose answer was written out to its client in full is not kept: nothing is
  left to redeliver. A finished stream not delivered is kept ``KEEP_S`` after its answer;
- the store is bounded by bytes (each stream's events, and ``STREAM_OVERHEAD`` for the
  stream itself), per session (``session_kept_bytes``) and in all (``kept_bytes``): when
  a bound is passed, the finished streams kept longest go first (the session's own for
  its bound; anyone's for the total). A running call's stream is never evicted, and a new
  call is never refused: while running streams alone pass a bound, a stream that
  finishes goes at once (its answer reaches the connection it runs on, if any, and is not
  kept for a later one);
- one stream holds at most ``MAX_EVENTS`` events and at most ``session_kept_bytes``
  bytes of them (beyond, its oldest go, and a resumption from before them is not found;
  the newest event always stays).

Pure bookkeeping, but for the followers' wake-up: ``sweep`` (called by the owner's one
periodic sweep, ``legacy_sessions``) drops what is past its keeping; no timer per stream.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator

from .limits import Limits
from .protocol import Message, encoded

#: The client's wait before reconnecting, sent as the stream's ``retry``.
RETRY_MS = 1000
#: How long a finished stream not delivered can still be resumed, and how many events one
#: keeps.
KEEP_S = 60.0
MAX_EVENTS = 1024
#: What a kept stream costs besides its events (its object and index entries), counted
#: with them against the bounds.
STREAM_OVERHEAD = 512

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


def sse(message: Message) -> bytes:
    """One message as an SSE event without an id (a stream that is not resumable)."""
    return b"event: message\ndata: " + encoded(message) + b"\n\n"


class ReplayableStream:
    """One call's SSE events, in order, each with its id, for as long as it is kept."""

    __slots__ = ("id", "session", "finished", "kept", "size", "kept_until", "_events",
                 "_first", "_grew", "_store")

    def __init__(self, stream_id: str, session: str, store: StreamStore) -> None:
        self.id = stream_id
        self.session = session
        self.finished = False
        #: Whether the store still holds it (resumable); a follower may outlive that.
        self.kept = True
        self._events: list[bytes] = [
            f"id: {stream_id}-0\nretry: {RETRY_MS}\ndata: \n\n".encode()]
        #: What it counts against the store's bounds.
        self.size = STREAM_OVERHEAD + len(self._events[0])
        #: When a finished stream stops being kept (``time.monotonic``).
        self.kept_until = 0.0
        self._first = 0  # the number of the first event still kept
        self._grew = asyncio.Event()
        self._store = store

    @property
    def last(self) -> int:
        """The number of the newest event."""
        return self._first + len(self._events) - 1

    def add(self, message: Message) -> None:
        event = (f"id: {self.id}-{self._first + len(self._events)}\nevent: message\ndata: "
                 .encode() + encoded(message) + b"\n\n")
        self._events.append(event)
        grown = len(event)
        cap = self._store.session_kept_bytes
        while len(self._events) > 1 and (len(self._events) > MAX_EVENTS
                                         or self.size + grown > cap):
            grown -= len(self._events[0])
            del self._events[0]
            self._first += 1
        self.size += grown
        self._store._resized(self, grown)
        self._grew.set()

    def finish(self) -> None:
        self.finished = True
        self._grew.set()

    def holds(self, after: int) -> bool:
        """Whether every event after number ``after`` is still kept."""
        return self._first <= after + 1 <= self._first + len(self._events)

    async def follow(self, after: int = -1) -> AsyncIterator[tuple[int, bytes]]:
        """The events after number ``after``, then the new ones as they come, until the
        stream is finished: each time, every event there is, as one chunk (one write to
        the client), with the number of its last."""
        sent = after
        while True:
            start = sent + 1 - self._first
            if start < 0:
                return  # the events were dropped while this reader was behind
            events = self._events[start:]
            if events:
                sent += len(events)
                yield sent, events[0] if len(events) == 1 else b"".join(events)
            if self.finished:
                return
            self._grew.clear()
            await self._grew.wait()


class _SessionStreams:
    """One session's streams in the store, and the bytes they count."""

    __slots__ = ("size", "streams", "finished")

    def __init__(self) -> None:
        self.size = 0
        self.streams: dict[str, ReplayableStream] = {}
        #: Its finished streams, kept longest first.
        self.finished: OrderedDict[str, ReplayableStream] = OrderedDict()


class StreamStore:
    """The resumable streams of one gateway process, bounded by bytes."""

    def __init__(self, *, kept_bytes: int = Limits.kept_bytes,
                 session_kept_bytes: int = Limits.session_kept_bytes,
                 keep_s: float = KEEP_S) -> None:
        self.kept_bytes = kept_bytes
        self.session_kept_bytes = session_kept_bytes
        self.keep_s = keep_s
        #: The bytes the streams held count (running and finished).
        self.size = 0
        #: Finished streams dropped for the bounds before their time (not delivered).
        self.evicted = 0
        self._streams: dict[str, ReplayableStream] = {}
        #: Finished streams, kept longest first.
        self._finished: OrderedDict[str, ReplayableStream] = OrderedDict()
        self._sessions: dict[str, _SessionStreams] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def size_of(self, session: str) -> int:
        held = self._sessions.get(session)
        return 0 if held is None else held.size

    def open(self, session: str) -> ReplayableStream:
        """A new stream for ``session`` (never refused: finished streams make room)."""
        stream = ReplayableStream(secrets.token_urlsafe(12), session, self)
        self._streams[stream.id] = stream
        held = self._sessions.get(session)
        if held is None:
            held = self._sessions[session] = _SessionStreams()
        held.streams[stream.id] = stream
        self._resized(stream, stream.size)
        return stream

    def resume(self, last_event_id: str, session: str) -> tuple[ReplayableStream, int] | None:
        """The stream ``last_event_id`` belongs to and the number of that event, if this
        process keeps it for ``session`` and still holds every event after it."""
        stream_id, _, number = last_event_id.rpartition("-")
        stream = self._streams.get(stream_id)
        if stream is None or stream.session != session or not number.isdigit():
            return None
        after = int(number)
        return (stream, after) if stream.holds(after) else None

    def finished(self, stream: ReplayableStream) -> None:
        """The stream's answer was added (or its call ended without one): kept ``keep_s``
        for a resumption, within the bounds."""
        stream.finish()
        if not stream.kept:
            return
        stream.kept_until = time.monotonic() + self.keep_s
        self._finished[stream.id] = stream
        held = self._sessions[stream.session]
        held.finished[stream.id] = stream
        self._evict(held)

    def delivered(self, stream: ReplayableStream) -> None:
        """The finished stream was written out to its client in full: not kept."""
        if stream.kept:
            self._forget(stream)

    def drop_session(self, session: str) -> None:
        """Every stream of ``session`` goes (it ended); their followers stop."""
        held = self._sessions.get(session)
        for stream in list(held.streams.values()) if held is not None else ():
            self._forget(stream)
            stream.finish()

    def sweep(self, now: float) -> None:
        """Drop the finished streams kept their time (``now``: ``time.monotonic``)."""
        while self._finished:
            stream = next(iter(self._finished.values()))
            if stream.kept_until > now:
                return
            self._forget(stream)

    def close(self) -> None:
        for stream in self._streams.values():
            stream.kept = False
            stream.finish()
        self._streams.clear()
        self._finished.clear()
        self._sessions.clear()
        self.size = 0

    def _resized(self, stream: ReplayableStream, grown: int) -> None:
        if not stream.kept:
            return
        held = self._sessions[stream.session]
        held.size += grown
        self.size += grown
        if grown > 0:
            self._evict(held)

    def _evict(self, held: _SessionStreams) -> None:
        """The finished streams kept longest, until the bounds hold again (or none is
        left to go: running streams stay)."""
        while held.size > self.session_kept_bytes and held.finished:
            self._forget(next(iter(held.finished.values())), evicted=True)
        while self.size > self.kept_bytes and self._finished:
            self._forget(next(iter(self._finished.values())), evicted=True)

    def _forget(self, stream: ReplayableStream, evicted: bool = False) -> None:
        stream.kept = False
        del self._streams[stream.id]
        self._finished.pop(stream.id, None)
        held = self._sessions[stream.session]
        del held.streams[stream.id]
        held.finished.pop(stream.id, None)
        held.size -= stream.size
        self.size -= stream.size
        if not held.streams:
            del self._sessions[stream.session]
        if evicted:
            self.evicted += 1
