"""The gateway over stdio: one client, the process's stdin and stdout.

One JSON-RPC message per line in each direction (MCP 2026-07-28, basic/transports: stdio):
lines are split by the codec, a line over the size limit is refused with an error and
never buffered, anything that is not JSON is answered with a parse error, and everything
written in one loop tick leaves in one write. Nothing but protocol messages ever reaches
stdout (logs go to stderr). The session ends at EOF: calls still in flight are cancelled,
since nobody is left to read their answers.

A client that reads its stdout slower than the gateway writes (or not at all) holds what
the pipe and its transport take, then an ``Outbox`` (progress coalesced, log messages
dropped past ``Limits.stream_backlog``), and meanwhile no new request of it is read: the
gateway holds the backlog and the answers of the calls already under way, no more. It is
not ended for being behind: it is the face's one client, and what it holds is bounded.

Stdin and stdout are usually pipes (or sockets, or a terminal), which the loop watches.
Either may also be a file or ``/dev/null`` (``serve --stdio < requests.jsonl``), which no
loop can watch (uvloop aborts the process on one): stdin is then read in a thread, and
stdout written at once, since a file always takes what is written.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any, cast

import orjson

from .._codec import LineSplitter, OversizedLine, wide_integer_at
from ..loop.batching import TickBatcher
from ..loop.tasks import TaskScope
from . import protocol as p
from .answers import Answerer, Send
from .outbox import Outbox
from .session import ClientSession


class Stdout(asyncio.Protocol):
    """The gateway's side of its stdout pipe: messages out, a line each, in one write per
    tick while the pipe takes them, else waiting in an ``Outbox`` until it does."""

    def __init__(self, backlog: int) -> None:
        self.outbox = Outbox(backlog)
        self._batcher = TickBatcher(asyncio.get_running_loop())
        self._transport: asyncio.WriteTransport | None = None
        #: The pipe takes no more (its transport is over the high-water mark).
        self.paused = False
        self._resumed: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # connect_write_pipe's transport writes (its protocol is told only BaseTransport).
        self._transport = cast("asyncio.WriteTransport", transport)
        self._batcher.attach(self._transport)

    def send(self, message: p.Message) -> None:
        if self.paused:  # (messages wait only while it is: ``resume_writing``)
            self.outbox.put(message, behind=True)
        else:
            self._batcher.push(p.encoded(message) + b"\n")

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        """The pipe took what it held: what waits goes, until it is full again."""
        self.paused = False
        transport = self._transport
        while not self.paused and transport is not None and not transport.is_closing():
            message = self.outbox.take()
            if message is None:
                break
            transport.write(p.encoded(message) + b"\n")
        if not self.paused:
            resumed, self._resumed = self._resumed, None
            if resumed is not None and not resumed.done():
                resumed.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.paused = False  # nobody reads any more: nothing to wait for
        resumed, self._resumed = self._resumed, None
        if resumed is not None and not resumed.done():
            resumed.set_result(None)

    async def writable(self) -> None:
        """Return once the pipe takes more (at once if it does)."""
        while self.paused:
            if self._resumed is None:
                self._resumed = asyncio.get_running_loop().create_future()
            await self._resumed

    def close(self) -> None:
        """Write what is queued and what waits (the client may still read it), then
        close."""
        self._batcher.flush()
        transport = self._transport
        if transport is None:
            return
        while (message := self.outbox.take()) is not None and not transport.is_closing():
            transport.write(p.encoded(message) + b"\n")
        transport.close()


class FileTransport(asyncio.WriteTransport):
    """Stdout when it is a file or ``/dev/null``: written at once (a file takes all)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def get_write_buffer_size(self) -> int:
        return 0


def _watchable(fd: int) -> bool:
    """Whether the loop can watch ``fd``: a pipe, a socket or a terminal."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode)
                                                          and os.isatty(fd))


async def _stdin_reads() -> Callable[[int], Awaitable[bytes]]:
    """What reads the next chunk of stdin (b"" at its end)."""
    loop = asyncio.get_running_loop()
    if not _watchable(sys.stdin.fileno()):
        fd = sys.stdin.fileno()
        return lambda n: loop.run_in_executor(None, os.read, fd, n)
    reader = asyncio.StreamReader(limit=1 << 16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader.read


async def _stdout(backlog: int) -> Stdout:
    loop = asyncio.get_running_loop()
    if not _watchable(sys.stdout.fileno()):
        out = Stdout(backlog)
        out.connection_made(FileTransport(sys.stdout.fileno()))
        return out
    _, protocol = await loop.connect_write_pipe(lambda: Stdout(backlog), sys.stdout)
    return protocol


async def serve_stdio(answerer: Answerer, *, max_line_bytes: int) -> None:
    """Serve one client on stdin/stdout until it closes stdin."""
    read = await _stdin_reads()
    out = await _stdout(answerer.limits.stream_backlog)
    send = out.send
    splitter = LineSplitter(max_line_bytes)
    try:
        async with TaskScope("stdio client") as scope:
            session = ClientSession(answerer, send, scope)
            try:
                while True:
                    if out.paused:  # the client is behind in reading: read no more of it
                        await out.writable()
                    chunk = await read(1 << 16)
                    if not chunk:
                        break
                    for line in splitter.feed(chunk):
                        _receive(session, send, line, max_line_bytes)
                for line in splitter.finish():
                    _receive(session, send, line, max_line_bytes)
            finally:
                session.close()
    finally:
        out.close()


def _receive(session: ClientSession, send: Send, line: bytes | OversizedLine,
             limit: int) -> None:
    if isinstance(line, OversizedLine):
        send(p.error_response(None, p.error(
            p.INVALID_REQUEST, f"a message of {line.size} bytes, over the limit of {limit}")))
        return
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        send(p.error_response(None, p.error(p.PARSE_ERROR, f"Parse error: {exc}")))
        return
    if wide_integer_at(line) is not None:  # orjson made it a float: refused, not rounded
        session.refuse(message, p.wide_integer(message, line))
        return
    session.receive(message)
