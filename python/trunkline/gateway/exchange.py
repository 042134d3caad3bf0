"""One HTTP exchange of the gateway's face, over ASGI: the request's head and body, one
response (whole, or an event stream), and the client going away.

Rules:

1. Headers are looked up by lower-case name; of a repeated header the first value counts;
   a value is without the whitespace around it (RFC 9110 5.5: it is not part of the
   value; the server's parser keeps what trails it).
2. The body is read once, up to a limit; past it reading stops (the caller answers 413).
3. One response per exchange: ``respond`` (status, body, headers), or ``open_stream``, then
   ``write``\\ s, then ``close_stream``.
4. ``cancel_when_gone`` (called once the body is read) makes the client's going away before
   the response is complete cancel the task handling the exchange: closing the exchange
   is how a 2026-07-28 client cancels its request, and how a stream's reader says it is
   done. ``gone`` then says why the task was cancelled. (The server does not tell a
   handler by failing its writes: a write to a client that has gone is dropped.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

JSON = b"application/json"


class Disconnected(Exception):
    """The client went away before its request's body was read."""


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers.items()]


class Exchange:
    """One request and its response."""

    __slots__ = ("method", "path", "headers", "gone", "identity", "_receive", "_send", "_started",
                 "_complete", "_watcher")

    def __init__(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        # Reversed, so that of a repeated header the first value is the one left.
        self.headers: dict[str, str] = {
            name.decode("latin-1"): value.decode("latin-1").strip(" \t")
            for name, value in reversed(scope["headers"])}
        self.gone = False
        #: Who the request's access token speaks for (``bearer.Identity``), once checked.
        self.identity: Any = None
        self._receive, self._send = receive, send
        self._started = self._complete = False
        self._watcher: asyncio.Future[dict[str, Any]] | None = None

    @property
    def started(self) -> bool:
        """Whether a response has begun (a handler's failure can no longer be a status)."""
        return self._started

    def content_length(self) -> int | None:
        raw = self.headers.get("content-length")
        return int(raw) if raw is not None and raw.isdigit() else None

    async def body(self, limit: int) -> bytes | None:
        """The whole body, or None if it is longer than ``limit`` bytes."""
        event = await self._receive()
        if event["type"] != "http.request":
            raise Disconnected
        chunk: bytes = event.get("body", b"")
        if not event.get("more_body"):
            return chunk if len(chunk) <= limit else None
        chunks, size = [chunk], len(chunk)
        while size <= limit:
            event = await self._receive()
            if event["type"] != "http.request":
                raise Disconnected
            chunk = event.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not event.get("more_body"):
                return b"".join(chunks) if size <= limit else None
        return None

    def cancel_when_gone(self) -> None:
        """From now on the client's going away cancels the current task (rule 4)."""
        if self._watcher is not None:
            return
        task = asyncio.current_task()
        assert task is not None

        def heard(watcher: asyncio.Future[dict[str, Any]]) -> None:
            if watcher.cancelled() or watcher.exception() is not None or self._complete:
                return
            if watcher.result().get("type") == "http.disconnect":
                self.gone = True
                task.cancel()
        self._watcher = asyncio.ensure_future(self._receive())
        self._watcher.add_done_callback(heard)

    async def respond(self, status: int, body: bytes = b"", headers: Mapping[str, str] = {},
                      content_type: bytes | None = JSON) -> None:
        self._started = self._complete = True
        head = [(b"content-length", b"%d" % len(body)), *_encoded(headers)]
        if content_type is not None and body:
            head.append((b"content-type", content_type))
        await self._send({"type": "http.response.start", "status": status, "headers": head})
        await self._send({"type": "http.response.body", "body": body})

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        self._started = True
        await self._send({"type": "http.response.start", "status": 200,
                          "headers": _encoded(headers)})

    async def write(self, chunk: bytes) -> None:
        await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def close_stream(self) -> None:
        self._complete = True
        await self._send({"type": "http.response.body", "body": b""})

    def close(self) -> None:
        """The exchange is over: stop listening for the client's going away."""
        self._complete = True
        if self._watcher is not None:
            self._watcher.cancel()
