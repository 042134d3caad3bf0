"""A request answered from behind the gateway on one HTTP exchange: as JSON when its
answer comes alone, as an SSE stream when the client accepts one and something (progress,
a log message, a legacy client's input request) comes before the answer.

Closing the exchange cancels the request (2026-07-28). A writer task exists only once a
stream has to open, and it waits for its reader in an ``outbox`` (bounded; a reader that
takes nothing for ``Limits.stream_behind_s`` has its connection dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from . import protocol as p
from .event_streams import SSE_HEADERS
from .event_streams import sse as _sse
from .exchange import Exchange
from .limits import Limits
from .outbox import StreamWriter, Write, client_stream
from .replies import HttpReply, answer

#: ``answer(notify)``: the request's work, its messages before the answer to ``notify``.
Answering = Callable[[Callable[[dict[str, Any]], None]], Awaitable[p.Message]]


def _dropped(_note: dict[str, Any]) -> None:
    """Where a call's notifications go when its client takes JSON only (they would come
    before the answer, and a JSON answer has no room for them)."""


def stream_writer(http: Exchange, limits: Limits, what: str,
                  write: Write | None = None) -> StreamWriter:
    return client_stream(http, limits, what, write or (lambda message: http.write(_sse(message))))


def relayed(http: Exchange, limits: Limits, work: Answering
            ) -> Awaitable[HttpReply | p.Message | None]:
    """``work``'s answer, in the handler's task. For a client that accepts JSON only this
    is ``work``'s own coroutine, whose message the handler answers with (no frame of this
    one waits with the call)."""
    # The client closing the exchange is the cancellation (2026-07-28).
    http.cancel_when_gone()
    if "text/event-stream" not in http.headers.get("accept", ""):
        return work(_dropped)
    return _streamed(http, limits, work)


async def _streamed(http: Exchange, limits: Limits, work: Answering) -> HttpReply | None:
    stream = _LazyStream(http, limits)
    try:
        message = await work(stream.add)
        if not stream.opened:
            # Nothing came before the answer: plain JSON, whose status can still say
            # what an error is (-32021 is 400, an overload 429).
            return answer(message)
        await stream.finish(message)
    finally:
        await stream.aclose()
    return None


class _LazyStream:
    """A call's messages before its answer, as SSE events: the stream opens, and a task
    writes them in order (``outbox``: bounded toward a slow reader), only once the first
    one comes (most answers come alone, and go out as JSON)."""

    __slots__ = ("_http", "_limits", "_writer", "_task")

    def __init__(self, http: Exchange, limits: Limits) -> None:
        self._http = http
        self._limits = limits
        self._writer: StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def opened(self) -> bool:
        return self._writer is not None

    def add(self, message: dict[str, Any]) -> None:
        if self._writer is None:
            self._writer = stream_writer(self._http, self._limits, "a call's stream",
                                         self._write)
            self._task = asyncio.ensure_future(self._writer.run())
        self._writer.put(message)

    async def _write(self, message: p.Message) -> None:
        if not self._http.started:
            await self._http.open_stream(SSE_HEADERS)
        await self._http.write(_sse(message))

    async def finish(self, answer: p.Message) -> None:
        """The messages that came, then the answer, last."""
        assert self._writer is not None and self._task is not None
        self._writer.put(answer)
        self._writer.close()
        await self._task

    async def aclose(self) -> None:
        """The request ended (or was cancelled): nothing more is written for it, and the
        writer does not outlive it."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            # Waited for, not awaited: its CancelledError is not this task's to swallow.
            await asyncio.wait([self._task])


__all__ = ["Answering", "relayed", "stream_writer"]
