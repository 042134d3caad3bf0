"""A legacy client's call streams, resumable (MCP 2025-11-25, basic/transports: "Resumability
and Redelivery"; SEP-1699).

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
  process does not hold (another replica's, or expired), is not found;
- a stream is kept ``KEEP_S`` after its answer, and holds at most ``MAX_EVENTS`` events
  (beyond, the oldest go, and a resumption from before them is not found).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import orjson

#: The client's wait before reconnecting, sent as the stream's ``retry``.
RETRY_MS = 1000
#: How long a finished stream can still be resumed, and how many events one keeps.
KEEP_S = 60.0
MAX_EVENTS = 1024
#: How many streams one gateway process holds at once (running or kept).
MAX_STREAMS = 65536


class ReplayableStream:
    """One call's SSE events, in order, each with its id, for as long as it is kept."""

    def __init__(self, stream_id: str, session: str) -> None:
        self.id = stream_id
        self.session = session
        self._events: list[bytes] = [
            f"id: {stream_id}-0\nretry: {RETRY_MS}\ndata: \n\n".encode()]
        self._first = 0  # the number of the first event still kept
        self._grew = asyncio.Event()
        self.finished = False

    def add(self, message: dict[str, Any]) -> None:
        number = self._first + len(self._events)
        self._events.append(f"id: {self.id}-{number}\nevent: message\ndata: ".encode()
                            + orjson.dumps(message) + b"\n\n")
        if len(self._events) > MAX_EVENTS:
            del self._events[0]
            self._first += 1
        self._wake()

    def finish(self) -> None:
        self.finished = True
        self._wake()

    def holds(self, after: int) -> bool:
        """Whether every event after number ``after`` is still kept."""
        return self._first <= after + 1 <= self._first + len(self._events)

    async def follow(self, after: int = -1) -> AsyncIterator[bytes]:
        """The events after number ``after``, then each new one, until the stream is
        finished."""
        sent = after
        while True:
            start = sent + 1 - self._first
            if start < 0:
                return  # the events were dropped while this reader was behind
            for event in self._events[start:]:
                sent += 1
                yield event
            if self.finished:
                return
            self._grew.clear()
            await self._grew.wait()

    def _wake(self) -> None:
        self._grew.set()


class StreamStore:
    """The resumable streams of one gateway process."""

    def __init__(self) -> None:
        self._streams: dict[str, ReplayableStream] = {}
        self._expiries: set[asyncio.TimerHandle] = set()

    def open(self, session: str) -> ReplayableStream | None:
        """A new stream for ``session``; None when the process holds too many."""
        if len(self._streams) >= MAX_STREAMS:
            return None
        stream = ReplayableStream(secrets.token_urlsafe(12), session)
        self._streams[stream.id] = stream
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
        """The stream's answer was added: keep it ``KEEP_S`` more for late resumptions."""
        stream.finish()
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def expire() -> None:
            self._expiries.discard(handle)
            self._streams.pop(stream.id, None)
        handle = loop.call_later(KEEP_S, expire)
        self._expiries.add(handle)

    def close(self) -> None:
        for handle in self._expiries:
            handle.cancel()
        self._expiries.clear()
        for stream in self._streams.values():
            stream.finish()
        self._streams.clear()
