"""The gateway over stdio: one client, the process's stdin and stdout.

One JSON-RPC message per line in each direction (MCP 2026-07-28, basic/transports: stdio):
lines are split by the codec, a line over the size limit is refused with an error and
never buffered, anything that is not JSON is answered with a parse error, and everything
written in one loop tick leaves in one write. Nothing but protocol messages ever reaches
stdout (logs go to stderr). The session ends at EOF: calls still in flight are cancelled,
since nobody is left to read their answers.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson

from .._codec import LineSplitter, OversizedLine, wide_integer_at
from ..loop.batching import TickBatcher
from ..loop.tasks import TaskScope
from . import protocol as p
from .answers import Answerer, Send
from .session import ClientSession


async def serve_stdio(answerer: Answerer, *, max_line_bytes: int) -> None:
    """Serve one client on stdin/stdout until it closes stdin."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out_transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    out = TickBatcher(loop)
    out.attach(out_transport)  # type: ignore[arg-type]

    def send(message: dict[str, Any]) -> None:
        out.push(orjson.dumps(message) + b"\n")

    splitter = LineSplitter(max_line_bytes)
    try:
        async with TaskScope("stdio client") as scope:
            session = ClientSession(answerer, send, scope)
            try:
                while chunk := await reader.read(1 << 16):
                    for line in splitter.feed(chunk):
                        _receive(session, send, line, max_line_bytes)
                for line in splitter.finish():
                    _receive(session, send, line, max_line_bytes)
            finally:
                session.close()
    finally:
        out.flush()
        out_transport.close()


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
