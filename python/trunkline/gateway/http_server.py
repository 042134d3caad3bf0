"""The HTTP/1.1 server under the gateway's face: httptools' parser (llhttp) on asyncio
protocols, in the gateway's loop, each request handed to the face as an ``Exchange``.

Why our own: the face needs a small part of HTTP/1.1 (one JSON body in, one JSON body or
an event stream out, keep-alive), and the general servers cost most where the gateway is
busy. uvicorn, the best of those measured (``benches/http_server_candidates.py``), wrote
each answer in two writes (two system calls), built ASGI dictionaries for every event and
needed a task per request to hear a client go away; here the answer is one write and a
connection that closes tells its exchange itself.

Rules:

1. One request at a time per connection, answered in order, by the connection's own task
   (made once per connection: a task per request cost its creation and registration,
   ~5% of the gateway's instructions per call). Requests pipelined behind it are parsed
   as they come and wait; past ``MAX_PIPELINED`` reading pauses. A handler runs in the
   connection's context, so what it sets in a context variable it resets (``log_context``
   and OpenTelemetry's attach do).
2. A request's handler starts when its head is complete (the body streams into the
   exchange). The connection is kept for the next request only if the client wants it,
   the response is complete, the request's body was read to its end, and the server is
   not draining; else the response says ``connection: close`` and the connection closes
   after it.
3. A malformed request (llhttp's strict parsing: no request smuggling through both
   ``Content-Length`` and ``Transfer-Encoding``, no bare LF) is answered 400, a head over
   ``MAX_HEAD_BYTES`` 431 as soon as it is over (a head that never ends holds no more
   than that), and the connection closed. An ``Upgrade`` is ignored (RFC 9110
   7.8 allows it): the request is answered in HTTP/1.1 and the connection closed after it,
   since llhttp parses nothing after it; one with a body is refused (400), since llhttp
   would take the body for the new protocol's bytes.
4. A keep-alive connection idle for ``keep_alive_s`` is closed (one sweep for all).
5. ``stop_accepting`` closes the listening socket at once. ``stop`` also closes the idle
   connections, lets responses under way finish within the drain deadline (each then
   closes its connection), then cancels what is left and closes every connection. A
   connection's task ends when the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

import httptools

from .._codec import header_map
from .exchange import Exchange, status_line

log = logging.getLogger("trunkline.gateway")

#: How long a keep-alive connection may sit idle (aiohttp's default, kept).
KEEP_ALIVE_S = 75.0
#: Requests parsed and waiting behind the one being answered, before reading pauses.
MAX_PIPELINED = 8
#: The request line and headers together.
MAX_HEAD_BYTES = 64 * 1024

#: Request targets already percent-decoded to paths (a client sends the same one each
#: time; bounded, since the target is the client's to choose).
_PATHS: dict[bytes, str] = {}
_MAX_PATHS = 64

App = Callable[[Exchange], Awaitable[None]]


class Connection(asyncio.Protocol):
    """One client connection: bytes in to exchanges, their answers out."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self.closed = False
        self.last_active = self._loop.time()
        self._url = b""
        self._head_bytes = 0
        self._raw_headers: list[bytes] = []
        self._parsing: Exchange | None = None  # the request whose bytes are arriving
        self._current: Exchange | None = None  # the request being answered
        self._waiting: deque[Exchange] = deque()
        self._paused_reading = False
        self._upgraded = False
        self._writable: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: What the task waits on while there is nothing to answer (set: something is).
        self._wake: asyncio.Future[None] | None = None

    @property
    def idle(self) -> bool:
        return self._current is None and self._parsing is None and not self._waiting

    # -- asyncio's side ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server.connections.add(self)
        task = self._task = self._loop.create_task(self._answer_in_turn())
        self._server.tasks.add(task)
        task.add_done_callback(self._server.tasks.discard)

    def data_received(self, data: bytes) -> None:
        if self.closed or self._upgraded:
            return
        self.last_active = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgraded = True  # rule 3
            if self._parsing is not None:
                self._refuse(400, "protocol upgrades are not served here")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed request: {exc}")

    def eof_received(self) -> bool | None:
        return None  # the client has no more to say: close (a half-open socket helps no one)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server.connections.discard(self)
        for exchange in (self._current, self._parsing, *self._waiting):
            if exchange is not None:
                exchange.lost()
        self._waiting.clear()
        self._wake_writer()
        self._wake_answerer()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    def _wake_writer(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # -- the parser's callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._head_bytes = 0
        self._raw_headers = []

    def on_url(self, url: bytes) -> None:
        if self._counted(len(url)):
            self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        # Kept as they come; their map is made once the head is complete (``header_map``:
        # one call instead of Python's work on each). Counted here, and ``_counted`` is
        # called only past the limit: this runs for every header of every request.
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_HEAD_BYTES or self.closed:
            self._counted(0)  # refused once (431), or already closed: dropped
            return
        raw = self._raw_headers
        raw.append(name)
        raw.append(value)

    def _counted(self, size: int) -> bool:
        """Count ``size`` more bytes of the head: False (and the request refused) once it
        is over the limit, so that a head that never ends is never held whole."""
        self._head_bytes += size
        if self._head_bytes <= MAX_HEAD_BYTES:
            return not self.closed
        if not self.closed:
            self._refuse(431, "the request's head is too large")
        return False

    def on_headers_complete(self) -> None:
        if self.closed:
            return
        parser = self._parser
        headers = header_map(self._raw_headers)
        if parser.should_upgrade() and ("transfer-encoding" in headers
                                        or headers.get("content-length", "0") != "0"):
            # llhttp would take the body for the new protocol's bytes (rule 3).
            self._refuse(400, "an Upgrade with a body is not served here")
            return
        path = _PATHS.get(self._url)
        if path is None:
            try:
                path = unquote(httptools.parse_url(self._url).path.decode("latin-1"))
            except httptools.HttpParserInvalidURLError:
                self._refuse(400, "malformed request target")
                return
            if len(_PATHS) < _MAX_PATHS:
                _PATHS[self._url] = path
        keep_alive = parser.should_keep_alive()
        exchange = Exchange(
            self, parser.get_method().decode("latin-1"), path, headers, keep_alive=keep_alive,
            # HTTP/1.0 keeps a connection only when asked by a Connection header, so kept
            # without one is 1.1 (the version is a string httptools formats on each call).
            chunked_ok=(keep_alive and "connection" not in headers)
            or parser.get_http_version() != "1.0",
            limit=self._server.max_body, internal=self._server.internal)
        self._parsing = exchange
        self._waiting.append(exchange)
        if self._wake is not None:
            self._wake_answerer()
        elif len(self._waiting) > MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()
            self._paused_reading = True

    def on_body(self, body: bytes) -> None:
        if self._parsing is not None:
            self._parsing.received(body)

    def on_message_complete(self) -> None:
        exchange, self._parsing = self._parsing, None
        if exchange is not None:
            exchange.ended()

    # -- answering -------------------------------------------------------------------------

    async def _answer_in_turn(self) -> None:
        """The connection's task: each request in turn, until the connection closes."""
        app = self._server.app
        while not self.closed:
            if not self._waiting:
                self._wake = self._loop.create_future()
                await self._wake
                continue
            exchange = self._current = self._waiting.popleft()
            if self._paused_reading and self._transport is not None:
                self._paused_reading = False
                self._transport.resume_reading()
            exchange.handler = self._task
            try:
                await app(exchange)
            except asyncio.CancelledError:
                if not (exchange.gone and self.closed):
                    raise  # the server is stopping: the task ends cancelled
                return  # the client went away, which cancelled its request (rule 4)
            except Exception:  # noqa: BLE001 - logged; the connection closes below
                log.exception("the gateway's HTTP handler failed")
            finally:
                self._current = None
            if not self.closed and (not exchange.complete or not self.keeps(exchange)):
                self.close()

    def _wake_answerer(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    def keeps(self, exchange: Exchange) -> bool:
        """Whether the connection stays open after this exchange's response (rule 2)."""
        return (exchange.keep_alive and exchange.body_ended and not self._upgraded
                and not self._server.draining)

    def send(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    @property
    def backed_up(self) -> bool:
        """Whether writing is paused (the client is slow to take what was written)."""
        return self._writable is not None

    async def drained(self) -> None:
        """Return once the client has taken what was written, down to the low-water mark."""
        writable = self._writable
        if writable is not None:
            await asyncio.shield(writable)

    def _refuse(self, status: int, reason: str) -> None:
        """Answer a request that cannot be served, if no answer is under way or due (a
        response would be taken for theirs), and close."""
        if self._current is None and not self._waiting:
            body = reason.encode("latin-1", "replace")
            self.send(status_line(status) + b"content-type: text/plain\r\n"
                      b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(body), body))
        self.close()

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self.closed = True
        self._wake_answerer()

    def abort(self) -> None:
        """Close now, dropping what the client has not taken: ``close`` waits for it to
        be read, which a client that does not read never lets happen."""
        if self._transport is not None:
            self._transport.abort()
        self.closed = True
        self._wake_answerer()


class HttpServer:
    """``app`` served on ``sock`` until ``stop``."""

    def __init__(self, app: App, sock: socket.socket, drain_s: float, *,
                 max_body: int = 4 * 1024 * 1024, keep_alive_s: float = KEEP_ALIVE_S,
                 internal: bool = False) -> None:
        """``internal``: ``sock`` is the socket sibling gateway processes pass requests on
        (``siblings``), not one clients reach."""
        self.app = app
        self.max_body = max_body
        self.internal = internal
        self.draining = False
        self.connections: set[Connection] = set()
        #: The connections' tasks (``Connection``: each answers its requests in turn).
        self.tasks: set[asyncio.Task[None]] = set()
        self._sock = sock
        self._drain_s = drain_s
        self._keep_alive_s = keep_alive_s
        self._listener: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: Connection(self), sock=self._sock, backlog=1024)
        self._sweep_later()

    @property
    def idle(self) -> bool:
        """Whether no request is being answered or waiting to be."""
        return all(conn.idle for conn in self.connections)

    def _sweep_later(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(min(self._keep_alive_s, 5.0), self._sweep)

    def _sweep(self) -> None:
        """Close keep-alive connections idle for too long (rule 4)."""
        oldest = asyncio.get_running_loop().time() - self._keep_alive_s
        for conn in [c for c in self.connections if c.idle and c.last_active <= oldest]:
            conn.close()
        self._sweep_later()

    def stop_accepting(self) -> None:
        """Close the listening socket now: a load balancer's next connect fails and goes
        to another replica."""
        if self._listener is not None:
            self._listener.close()

    async def stop(self) -> None:
        if self._listener is None:
            return
        self.stop_accepting()
        self.draining = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in [c for c in self.connections if c.idle]:
            conn.close()
        try:
            if self.tasks:
                _done, late = await asyncio.wait(list(self.tasks), timeout=max(self._drain_s, 0.1))
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late)
        finally:
            for conn in list(self.connections):
                conn.close()
            self._listener = None
            self._sock.close()
            await asyncio.sleep(0)  # let the transports' close callbacks run
