"""One HTTP exchange of the gateway's face: the request's head and body, one response
(whole, or an event stream), and the client going away.

The connection (``http_server``) parses; an ``Exchange`` is what a handler sees of one
request on it, and how it answers.

Rules:

1. Headers are looked up by lower-case name; of a repeated header the first value counts;
   a value is without the whitespace around it (RFC 9110 5.5: it is not part of the
   value; the parser keeps what trails it). The path is percent-decoded;
   the query (``query``) is kept as sent.
2. The body is kept as it arrives, up to the server's limit; past it the rest is counted
   and dropped, and ``body`` answers ``None`` as soon as it is past (the caller answers
   413; the connection closes after it, lingering so that a client still sending reads
   it). A client that asked ``Expect: 100-continue`` is told to go on when the body is
   first read.
3. One response per exchange: ``respond`` (status, body, headers: one write), or
   ``open_stream``, then ``write``\\ s, then ``close_stream`` (chunked; on HTTP/1.0, the
   stream ends with the connection).
4. ``cancel_when_gone`` (called once the body is read) makes the client's going away before
   the response is complete cancel the task handling the exchange: closing the exchange
   is how a 2026-07-28 client cancels its request, and how a stream's reader says it is
   done. ``gone`` then says why the task was cancelled. (A handler is not told by failing
   writes: a write to a client that has gone is dropped.)
5. A write waits while the client reads slower than the gateway writes (the transport's
   high-water mark), so a slow reader holds at most that much of the gateway's memory.
6. ``abort`` drops the connection at once, with what the client has not taken (a reader
   that stays behind, ``outbox``): as the client's going away would, it cancels the
   handler once ``cancel_when_gone`` was called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Protocol

JSON = b"application/json"

_STATUS_LINES: dict[int, bytes] = {
    int(status): f"HTTP/1.1 {int(status)} {status.phrase}\r\n".encode("latin-1")
    for status in HTTPStatus
}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d Unknown\r\n" % status


class Wire(Protocol):
    """What an exchange needs of its connection (``http_server.Connection``)."""

    def send(self, data: bytes) -> None: ...

    async def drained(self) -> None: ...

    @property
    def unsent(self) -> int: ...

    @property
    def backed_up(self) -> bool: ...

    def keeps(self, exchange: Exchange) -> bool: ...

    def abort(self) -> None: ...

    #: The address the client connected from, as connections are counted per peer
    #: (``http_server.peer_key``); None when it has none (a Unix socket).
    peer: str | None


class Disconnected(Exception):
    """The client went away before its request's body was read."""


def _encoded(headers: Mapping[str, str]) -> bytes:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")


class Exchange:
    """One request and its response."""

    __slots__ = ("method", "path", "query", "headers", "gone", "identity", "keep_alive", "handler",
                 "internal", "_conn", "_chunked", "_started", "_complete", "_armed", "_lost",
                 "_chunks", "_size", "_limit", "_ended", "_arrived", "_continue_sent")

    def __init__(self, conn: Wire, method: str, path: str, headers: dict[str, str], *,
                 keep_alive: bool, chunked_ok: bool, limit: int, internal: bool = False
                 ) -> None:
        self.method = method
        self.path = path
        #: The request target's query, as sent (not decoded); "" when it has none.
        self.query = ""
        self.headers = headers
        #: Passed on by a sibling gateway process (``siblings``), not from a client.
        self.internal = internal
        self.gone = False
        #: Who the request's access token or API key speaks for (``policy.Identity``),
        #: once checked; None: it showed neither.
        self.identity: Any = None
        #: Whether the client would keep the connection for another request.
        self.keep_alive = keep_alive
        #: The task the connection runs the handler in (set by the connection): the one
        #: ``cancel_when_gone`` arms. Kept rather than looked up: ``asyncio.current_task()``
        #: costs a ``getpid()`` system call on Python 3.11 (~4% of the gateway's CPU at 64
        #: requests in flight).
        self.handler: asyncio.Task[Any] | None = None
        self._conn = conn
        self._chunked = chunked_ok
        self._started = self._complete = self._lost = self._ended = False
        self._continue_sent = False
        #: Whether the client's going away cancels ``handler`` (``cancel_when_gone``).
        self._armed = False
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = limit
        self._arrived: asyncio.Future[None] | None = None

    # -- what the connection tells it ----------------------------------------------------

    def received(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= self._limit:
            self._chunks.append(chunk)
        else:  # past it: counted, dropped, and a reader waiting told (rule 2)
            self._wake()

    def ended(self) -> None:
        self._ended = True
        self._wake()

    def lost(self) -> None:
        """The connection closed (the client went away, or the server closed it)."""
        self._lost = True
        self._wake()
        if self._armed and self.handler is not None and not self._complete:
            self.gone = True
            self.handler.cancel()

    def _wake(self) -> None:
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    @property
    def connection(self) -> Wire:
        """The connection the request came on (what a modern client is known by, until
        identities: ``admission``)."""
        return self._conn

    @property
    def body_ended(self) -> bool:
        return self._ended

    @property
    def complete(self) -> bool:
        """Whether the whole response has been written."""
        return self._complete

    # -- the handler's side ----------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether a response has begun (a handler's failure can no longer be a status)."""
        return self._started

    @property
    def received_bytes(self) -> int:
        """The body's bytes so far."""
        return self._size

    @property
    def awaits_continue(self) -> bool:
        """Whether the client waits to be told to send its body (``Expect: 100-continue``)."""
        return not self._continue_sent and \
            self.headers.get("expect", "").lower() == "100-continue"

    def content_length(self) -> int | None:
        raw = self.headers.get("content-length")
        return int(raw) if raw is not None and raw.isdigit() else None

    async def body(self, limit: int) -> bytes | None:
        """The whole body, or None if it is longer than ``limit`` bytes (``ended_body`` once
        it has all arrived, as it usually has: no coroutine for that). Past the server's
        limit it is None at once, the rest unread (rule 2)."""
        if not self._ended and self.awaits_continue:
            self._continue_sent = True
            self._conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        while not self._ended and self._size <= self._limit:
            if self._lost:
                raise Disconnected
            self._arrived = asyncio.get_running_loop().create_future()
            await self._arrived
        return self.ended_body(limit)

    def ended_body(self, limit: int) -> bytes | None:
        """``body`` once it has ended (``body_ended``) or gone past the server's limit."""
        if self._size > min(limit, self._limit):
            return None
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)

    def cancel_when_gone(self) -> None:
        """From now on the client's going away cancels the task handling the exchange
        (rule 4)."""
        if self._armed:
            return
        self._armed = True
        if self._lost and not self._complete:
            self.lost()

    def _head_end(self) -> bytes:
        return b"\r\n" if self._conn.keeps(self) else b"connection: close\r\n\r\n"

    def respond(self, status: int, body: bytes = b"", headers: Mapping[str, str] = {},
                content_type: bytes | None = JSON) -> None:
        """The whole response, in one write; await ``drained()`` after it if
        ``backed_up`` (not a coroutine itself: most responses never wait)."""
        self._started = self._complete = True
        head = [status_line(status), b"content-length: %d\r\n" % len(body),
                _encoded(headers) if headers else b""]
        if content_type is not None and body:
            head.append(b"content-type: " + content_type + b"\r\n")
        head.append(self._head_end())
        head.append(body)
        self._conn.send(b"".join(head))  # one write: head and body (rule 3)

    @property
    def written_out(self) -> bool:
        """Whether everything written so far was handed to the system, the client still
        connected (what a server can know of delivery)."""
        return not self._lost and self._conn.unsent == 0

    @property
    def backed_up(self) -> bool:
        """Whether the client has not yet taken what was written (await ``drained``)."""
        return self._conn.backed_up

    async def drained(self) -> None:
        await self._conn.drained()

    async def open_stream(self, headers: Mapping[str, str], first: bytes = b"") -> None:
        """The stream's head, and ``first`` (its first bytes, if they are ready) in the
        same write."""
        self._started = True
        if not self._chunked:  # HTTP/1.0: the end of the stream is the end of the connection
            self.keep_alive = False
        framing = b"transfer-encoding: chunked\r\n" if self._chunked else b""
        self._conn.send(status_line(200) + _encoded(headers) + framing + self._head_end()
                        + self._framed(first))
        await self._conn.drained()

    async def write(self, chunk: bytes) -> None:
        if not chunk:  # an empty chunk would end a chunked body
            return
        self._conn.send(self._framed(chunk))
        await self._conn.drained()

    async def close_stream(self, last: bytes = b"") -> None:
        """The stream's end, after ``last`` (its last bytes) in the same write; once."""
        if self._complete:
            return
        self._complete = True
        end = self._framed(last) + b"0\r\n\r\n" if self._chunked else last
        if end:
            self._conn.send(end)
        await self._conn.drained()

    def _framed(self, chunk: bytes) -> bytes:
        """``chunk`` as the body carries it (a chunk of its own when chunked; none for no
        bytes, which would end a chunked body)."""
        if not chunk or not self._chunked:
            return chunk
        return b"%x\r\n%b\r\n" % (len(chunk), chunk)

    def abort(self) -> None:
        """Drop the connection now, with whatever the client has not taken (rule 6)."""
        self._conn.abort()

    def close(self) -> None:
        """The handler is done with the exchange: stop listening for the client's going
        away."""
        self._armed = False
        self.handler = None
