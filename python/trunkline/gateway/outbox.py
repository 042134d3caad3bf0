"""What waits for one stream's reader: ``Outbox``, a bounded line of messages (pure), and
``StreamWriter``, which writes one to a stream at the reader's pace.

Every stream the gateway writes to a client (a call's SSE stream, a modern listen stream,
a legacy session's GET stream, the stdio face's stdout) is read at the client's pace, and
one client that reads slowly, or not at all, must not make the gateway hold without
bound what the servers behind send meanwhile. The socket or pipe, and its transport up to
the high-water mark, hold what the reader has not taken; behind them, the outbox.

Rules:

1. Messages leave in the order they came. While the reader keeps up, each goes as it
   came.
2. The reader is *behind* while a write waits for it (its socket or pipe takes no more)
   or ``backlog`` messages wait. Then:

   a. a progress notification takes the place of the one of the same token still
      waiting: the latest value, in the earlier one's place in line, never two per
      token;
   b. a list change or a resource update the same as one still waiting is not queued
      again: the one waiting says it;
   c. a log message that finds ``backlog`` messages waiting is dropped, and counted in
      one notice (``N log messages dropped``) that waits in the place of the first
      dropped: the reader learns that it missed some, and how many;
   d. anything else waits, whatever the backlog: a call's answer and a server's question
      for the client are never dropped. Each is bounded by what it belongs to (one
      answer per call; the stdio face reads no new request while its reader is behind).

   So at most ``backlog`` messages wait, plus one per progress token, list and resource
   of the stream, one notice, and answers to requests already under way.
3. A reader that takes nothing for ``stream_behind_s`` while a write waits for it and
   more waits behind it (or the stream is to end after it) has its stream ended
   (``StreamWriter``'s ``end``, with the reason). How is the face's: over HTTP the
   connection is dropped, which cancels a call as the client's going away does, and
   ends a listen or GET stream with its subscriptions; the stdio face reads no new
   request while its client is behind instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from ..protocol.listen import LIST_CHANGED, RESOURCE_UPDATED, SUBSCRIPTION_ID
from . import protocol as p
from .event_streams import sse
from .exchange import Exchange
from .limits import Limits

log = logging.getLogger("trunkline.gateway")

PROGRESS = "notifications/progress"
LOG = "notifications/message"

#: The kind of a log message (rule 2c); a notice of dropped ones is its own slot.
_LOG = ("log",)


class _Waiting:
    """One place in line: a message, the key it coalesces by (rule 2a, 2b), or the notice
    of dropped log messages (``dropped``)."""

    __slots__ = ("message", "key", "dropped")

    def __init__(self, message: p.Message | None, key: Any, dropped: int = 0) -> None:
        self.message = message
        self.key = key
        self.dropped = dropped


def _key(message: p.Message) -> Any:
    """What ``message`` coalesces by: a progress token, a list change or resource update
    (on its listen stream), ``_LOG``; None: it is never coalesced or dropped."""
    if isinstance(message, bytes):
        return None  # an answer, passed on as it came
    method = message.get("method")
    if method is None:
        return None  # an answer
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    if method == PROGRESS:
        token = params.get("progressToken")
        return (PROGRESS, token) if isinstance(token, (str, int)) else None
    if method == LOG:
        return _LOG
    if method == RESOURCE_UPDATED or method in LIST_CHANGED:
        meta = params.get("_meta")
        stream = meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        uri = params.get("uri")
        if isinstance(stream, (str, int, type(None))) and isinstance(uri, (str, type(None))):
            return (method, uri, stream)
    return None


def dropped_notice(count: int) -> dict[str, Any]:
    """The log message that stands for ``count`` dropped ones (rule 2c)."""
    return p.notification(LOG, {
        "level": "warning", "logger": "trunkline",
        "data": f"{count} log message{'s' if count != 1 else ''} dropped: this stream's "
                "reader was behind"})


class Outbox:
    """The messages waiting for one stream's reader (rules 1 and 2)."""

    __slots__ = ("backlog", "coalesced", "dropped", "_line", "_keys", "_notice")

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        #: Messages that took the place of one waiting (rule 2a, 2b), and log messages
        #: dropped (rule 2c), in the outbox's life.
        self.coalesced = 0
        self.dropped = 0
        self._line: deque[_Waiting] = deque()
        #: The place in line of each key waiting.
        self._keys: dict[Any, _Waiting] = {}
        self._notice: _Waiting | None = None

    def __len__(self) -> int:
        return len(self._line)

    def put(self, message: p.Message, *, behind: bool = False) -> None:
        """Queue ``message``; ``behind``: a write is waiting for the reader."""
        line = self._line
        full = len(line) >= self.backlog
        key = _key(message)
        if key is _LOG:
            if full:
                self._drop_log()
                return
            key = None
        elif key is not None and (behind or full):
            waiting = self._keys.get(key)
            if waiting is not None:
                waiting.message = message
                self.coalesced += 1
                return
        place = _Waiting(message, key)
        line.append(place)
        if key is not None:
            self._keys[key] = place

    def _drop_log(self) -> None:
        self.dropped += 1
        notice = self._notice
        if notice is None:
            notice = self._notice = _Waiting(None, None)
            self._line.append(notice)
        notice.dropped += 1

    def take(self) -> p.Message | None:
        """The next message for the reader, or None when none waits."""
        if not self._line:
            return None
        place = self._line.popleft()
        if place.key is not None and self._keys.get(place.key) is place:
            del self._keys[place.key]
        if place is self._notice:
            self._notice = None
            return dropped_notice(place.dropped)
        return place.message


Write = Callable[[p.Message], Awaitable[None]]


class StreamWriter:
    """Writes an ``Outbox`` to one stream, a message at a time (``write``, the face's:
    it waits while the reader is slow to take what was written), until ``close``; ends
    the stream (``end(reason)``) when a write waits ``behind_s`` for the reader while
    more waits behind it, or after ``close`` (rule 3). ``put`` never waits; after the
    end it drops what it is given (nobody will read it)."""

    __slots__ = ("outbox", "_write", "_end", "_behind_s", "_loop", "_writing", "_written",
                 "_closing", "_done", "_wake", "_timer")

    def __init__(self, write: Write, end: Callable[[str], None], *, backlog: int,
                 behind_s: float) -> None:
        self.outbox = Outbox(backlog)
        self._write = write
        self._end = end
        self._behind_s = behind_s
        self._loop = asyncio.get_running_loop()
        self._writing = False
        self._written = 0
        self._closing = False
        #: Written to the end, or ended: nothing more is queued.
        self._done = False
        self._wake: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def put(self, message: p.Message) -> None:
        if self._done:
            return
        # A write that waits is the only way ``put`` can find one under way: a write the
        # reader takes at once is over before anything else runs.
        self.outbox.put(message, behind=self._writing)
        if self._writing:
            self._watch()
        else:
            self._wake_writer()

    def close(self) -> None:
        """Nothing more comes: ``run`` returns once what waits is written."""
        self._closing = True
        if self._writing:
            self._watch()
        self._wake_writer()

    async def run(self) -> None:
        """Write what comes, until ``close`` and the outbox is empty."""
        outbox = self.outbox
        try:
            while True:
                message = outbox.take()
                if message is None:
                    if self._closing:
                        return
                    self._wake = self._loop.create_future()
                    await self._wake
                    continue
                if self._closing or outbox:
                    self._watch()  # the reader is to take more than this one
                self._writing = True
                try:
                    await self._write(message)
                finally:
                    self._writing = False
                self._written += 1
                if self._done:
                    return  # ended (rule 3): nothing more reaches the reader
        finally:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _wake_writer(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _watch(self) -> None:
        if self._timer is None and not self._done:
            self._timer = self._loop.call_later(self._behind_s, self._check, self._written)

    def _check(self, written: int) -> None:
        self._timer = None
        if self._done or not self._writing:
            return  # not behind now; a write that waits again starts the watch again
        if self._written != written:
            self._watch()  # it took something meanwhile: slow, not stopped
            return
        self._done = True
        self._end(f"its reader took nothing for {self._behind_s:g} s "
                  f"(limit stream_behind_s) with {len(self.outbox)} message(s) waiting")


__all__ = ["Outbox", "StreamWriter", "dropped_notice"]


def client_stream(http: Exchange, limits: Limits, what: str,
                  write: Write | None = None
                  ) -> StreamWriter:
    """The writer of one of the gateway's streams to an HTTP client, with its bounds:
    ``write`` (else each message as an SSE event without an id); a reader that stays
    behind has the connection dropped (the handler cancelled, as by the client's going
    away) and the reason logged (rule 3)."""

    def end(reason: str) -> None:
        log.warning("%s ended: %s; its connection is dropped", what, reason)
        http.abort()
    return StreamWriter(write or (lambda message: http.write(sse(message))), end,
                        backlog=limits.stream_backlog, behind_s=limits.stream_behind_s)
