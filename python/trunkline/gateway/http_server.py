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
   ``Content-Length`` and ``Transfer-Encoding``, no bare LF, a chunk size that is not
   one) is answered 400, a transfer coding other than ``chunked`` alone 501 (RFC 9112
   6.1: the gateway decodes none), a head over ``MAX_HEAD_BYTES`` 431 as soon as it is
   over (a head that never ends holds no more than that), and the connection closed. Such
   an answer is written only when it is the one the client waits for next (a response
   under way or due for an earlier request would be taken for it: then the connection
   just closes). An ``Upgrade`` is ignored (RFC 9110 7.8 allows it): the request is
   answered in HTTP/1.1 and the connection closed after it, since llhttp parses nothing
   after it; one with a body is refused (400), since llhttp would take the body for the
   new protocol's bytes.
4. A keep-alive connection idle for ``keep_alive_s`` is closed (one sweep for all, which
   also keeps the deadlines of rule 6).
5. ``stop_accepting`` closes the listening socket at once. ``stop`` also closes the idle
   connections, lets responses under way finish within the drain deadline (each then
   closes its connection), then cancels what is left and closes every connection. A
   connection's task ends when the connection closes.
6. What one client can hold (``Limits``): a request's head must be complete within
   ``head_timeout_s`` of its first byte (a new connection's first, of the connection),
   and its body must come at ``body_min_bytes_per_s`` at least, over each
   ``body_window_s`` once its head is in; else it is answered 408 and the connection
   closed (a new connection that sent nothing is closed without an answer). Connections
   are bounded in all (``connections``) and from one peer address (``peer_connections``;
   an IPv6 peer by its /64), and none is taken that would leave fewer than
   ``spare_descriptors`` of the process's file descriptors (``RLIMIT_NOFILE``) free, so
   that health checks, the servers behind and the connections already served keep
   working. A connection beyond a bound is answered 503 with ``Retry-After`` as soon as it
   is accepted, its request unread, and closed; when the gateway as a whole is full, the
   oldest connections serving no request (idle, a head still arriving, or lingering)
   are closed first to make room, and only when there is none is the new one refused.
   Accepting never pauses: a connection left in the kernel's backlog would look open to
   its client and hang, and the backlog would fill with whoever connects fastest.
7. A connection closed while its client may still be sending (an answer before the
   request's body ended, or a refusal) is closed lingering: the answer is written, the
   write side shut, and what still comes is read and dropped until the client closes
   its side, ``LINGER_BYTES`` or ``LINGER_S``, so that a client still sending reads the
   answer rather than a reset.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import resource
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import httptools

from .._codec import header_map
from .exchange import Exchange, status_line
from .limits import Limits

log = logging.getLogger("trunkline.gateway")

#: How long a keep-alive connection may sit idle (aiohttp's default, kept).
KEEP_ALIVE_S = 75.0
#: Requests parsed and waiting behind the one being answered, before reading pauses.
MAX_PIPELINED = 8
#: The request line and headers together.
MAX_HEAD_BYTES = 64 * 1024
#: The span over which a body's rate is measured (rule 6): a pause shorter than this, as a
#: congested link has, costs a client nothing.
BODY_WINDOW_S = 5.0
#: A closing connection's reading on (rule 7): at most this long, at most this many bytes.
LINGER_S = 5.0
LINGER_BYTES = 16 * 1024 * 1024
#: Connections looked at, oldest first, for one to close when the gateway is full.
_RECLAIM_SCAN = 256
#: A refused connection's ``Retry-After``: connections end all the time.
_REFUSED_RETRY_AFTER_S = 1

#: Request targets already percent-decoded to paths (a client sends the same one each
#: time; bounded, since the target is the client's to choose).
_PATHS: dict[bytes, str] = {}
_MAX_PATHS = 64

App = Callable[[Exchange], Awaitable[None]]


def _plain(status: int, reason: str, *headers: bytes) -> bytes:
    """A whole text response that ends its connection."""
    body = reason.encode("latin-1", "replace")
    return (status_line(status) + b"".join(headers) + b"content-type: text/plain\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(body), body))


def peer_key(peername: Any) -> str | None:
    """What connections are counted by per peer (rule 6): an IPv4 address, an IPv6
    address's /64 (one host's share of addresses), or None (a Unix socket: a sibling
    gateway process, not a client)."""
    if not isinstance(peername, tuple) or not peername:
        return None
    host = str(peername[0])
    if ":" not in host:
        return host
    if host.startswith("::ffff:") and "." in host:  # IPv4, on a dual-stack socket
        return host[7:]
    try:
        return ipaddress.IPv6Address(host.partition("%")[0]).exploded[:19]
    except ValueError:
        return host


class Descriptors:
    """The process's open file descriptors against its ``RLIMIT_NOFILE``: counted at each
    sweep (``measure``); between, the connections opened and closed since are added."""

    def __init__(self) -> None:
        self._open: int | None = None
        self._connections = 0

    def measure(self, connections: int) -> None:
        """Count them now, with ``connections`` open."""
        self._open, self._connections = _open_descriptors(), connections

    def free(self, connections: int) -> int | None:
        """How many are free with ``connections`` open (None: not known here)."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if self._open is None or soft == resource.RLIM_INFINITY:
            return None
        return soft - (self._open + connections - self._connections)


def _open_descriptors() -> int | None:
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # less the one the listing itself opened
        except OSError:
            continue
    return None


class Connection(asyncio.Protocol):
    """One client connection: bytes in to exchanges, their answers out."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self.closed = False
        self.last_active = self._loop.time()
        #: When the head under way began (a new connection's: when it was made); None while
        #: no head is arriving (rule 6).
        self._began: float | None = self.last_active
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
        #: What the connection is counted under, per peer (``peer_key``), once admitted.
        self.peer: str | None = None
        #: The body whose rate the sweep measures, when it last did and its bytes then.
        self._rate_mark: tuple[Exchange, float, int] | None = None
        #: While closing lingering (rule 7): the end of it, and the bytes still taken.
        self._linger: asyncio.TimerHandle | None = None
        self._linger_left = 0

    @property
    def idle(self) -> bool:
        return self._current is None and self._parsing is None and not self._waiting

    # -- asyncio's side ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        refusal = self._server.admit(self, transport.get_extra_info("peername"))
        if refusal is not None:  # rule 6: said at once, the request unread
            self.closed = True
            self._send_refusal(transport, refusal)
            return
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = self._task = self._loop.create_task(self._answer_in_turn())
        self._server.tasks.add(task)
        task.add_done_callback(self._server.tasks.discard)

    @staticmethod
    def _send_refusal(transport: Any, reason: str) -> None:
        transport.write(_plain(503, reason, b"retry-after: %d\r\n" % _REFUSED_RETRY_AFTER_S))
        # The write side shut first, so that the answer goes out before the close: the
        # close resets a connection whose request came in unread, and the client still
        # reads what came before the reset.
        if transport.can_write_eof():
            transport.write_eof()
        transport.close()

    def data_received(self, data: bytes) -> None:
        if self.closed or self._upgraded:
            if self._linger is not None:  # rule 7: read and dropped, up to a point
                self._linger_left -= len(data)
                if self._linger_left < 0:
                    self.close()
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
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self._server.release(self)
        for exchange in (self._current, self._parsing, *self._waiting):
            if exchange is not None:
                exchange.lost()
        self._waiting.clear()
        self._rate_mark = None
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
        if self._began is None:  # a new connection's first head counts from the connection
            self._began = self.last_active
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
        self._began = None
        parser = self._parser
        headers = header_map(self._raw_headers)
        coding = headers.get("transfer-encoding")
        if coding is not None and coding.lower() != "chunked":
            # llhttp frames ``gzip, chunked`` by its chunks and would hand on the body
            # still coded (rule 3).
            self._refuse(501, f"transfer coding {coding!r} is not implemented here: "
                         "only chunked")
            return
        if parser.should_upgrade() and (coding is not None
                                        or headers.get("content-length", "0") != "0"):
            # llhttp would take the body for the new protocol's bytes (rule 3).
            self._refuse(400, "an Upgrade with a body is not served here")
            return
        path = _PATHS.get(self._url)
        query = ""
        if path is None:
            try:
                parsed = httptools.parse_url(self._url)
            except httptools.HttpParserInvalidURLError:
                self._refuse(400, "malformed request target")
                return
            path = unquote(parsed.path.decode("latin-1"))
            if parsed.query:
                # A query is one request's own (a sign-in's callback): not cached.
                query = parsed.query.decode("latin-1")
            elif len(_PATHS) < _MAX_PATHS:
                _PATHS[self._url] = path
        keep_alive = parser.should_keep_alive()
        exchange = Exchange(
            self, parser.get_method().decode("latin-1"), path, headers, keep_alive=keep_alive,
            # HTTP/1.0 keeps a connection only when asked by a Connection header, so kept
            # without one is 1.1 (the version is a string httptools formats on each call).
            chunked_ok=(keep_alive and "connection" not in headers)
            or parser.get_http_version() != "1.0",
            limit=self._server.max_body, internal=self._server.internal)
        if query:
            exchange.query = query
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

    # -- deadlines (rule 6), kept by the server's sweep ----------------------------------

    def check_deadlines(self, now: float, head_due: float, idle_due: float) -> None:
        """Close the connection if it is past a deadline: its head's, its body's rate, or
        (idle) keep-alive's, or a new connection's that has sent nothing."""
        parsing = self._parsing
        if parsing is not None:
            self._check_body_rate(parsing, now)
            return
        self._rate_mark = None
        if self._current is not None or self._waiting:
            return  # being answered: a head behind it waits its turn
        if self._began is not None:
            if self._began <= head_due and self._url:
                self._refuse(408, "the request's head did not arrive within "
                             f"{self._server.limits.head_timeout_s:g} s")
            elif self._began <= head_due:  # a new connection, silent so far
                self.close()
        elif self.last_active <= idle_due:
            self.close()

    def _check_body_rate(self, exchange: Exchange, now: float) -> None:
        mark = self._rate_mark
        if mark is None or mark[0] is not exchange or self._paused_reading \
                or exchange.awaits_continue:
            # Measured from here (reading paused, or the client told to wait, is not slow).
            self._rate_mark = (exchange, now, exchange.received_bytes)
            return
        _, since, size = mark
        elapsed = now - since
        if elapsed < self._server.body_window_s:
            return
        rate = self._server.limits.body_min_bytes_per_s
        if exchange.received_bytes - size < rate * elapsed:
            self._refuse(408, f"the request's body came slower than {rate} bytes/s")
        else:
            self._rate_mark = (exchange, now, exchange.received_bytes)

    @property
    def reclaimable(self) -> bool:
        """Whether the connection may be closed to make room (rule 6): it serves no
        request (idle, or a head still arriving), or it is only lingering."""
        if self.closed:
            return self._linger is not None
        return self.idle

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
            except Exception:  # logged; the connection closes below
                log.exception("the gateway's HTTP handler failed")
            finally:
                self._current = None
            if not self.closed and (not exchange.complete or not self.keeps(exchange)):
                if exchange.complete and not exchange.body_ended:
                    self._close_lingering()  # the client may be sending still (rule 7)
                else:
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
    def unsent(self) -> int:
        """Bytes written that are not yet handed to the system (the transport's buffer)."""
        transport = self._transport
        return 0 if transport is None or self.closed else transport.get_write_buffer_size()

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
        """Answer a request that cannot be served, if it is the answer the client waits for
        next (rule 3), and close; lingering, when answered (rule 7)."""
        if self.closed:
            return
        due = self._current if self._current is not None else (
            self._waiting[0] if self._waiting else None)
        if due is not None and (due is not self._parsing or due.started):
            self.close()  # an answer under way, or an earlier request's due
            return
        if due is not None:
            due.lost()  # its handler reads no more of it, and answers nothing
        self.send(_plain(status, reason))
        self._close_lingering()

    def _close_lingering(self) -> None:
        """Close once what was written is sent, taking what the client still sends until
        it closes its side or has sent too much or for too long (rule 7)."""
        transport = self._transport
        if transport is None or transport.is_closing() or not transport.can_write_eof():
            self.close()
            return
        self.closed = True
        self._wake_answerer()
        transport.write_eof()
        if self._paused_reading:
            self._paused_reading = False
            transport.resume_reading()
        self._linger_left = LINGER_BYTES
        self._linger = self._loop.call_later(LINGER_S, self.close)

    def close(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
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

    def __init__(self, app: App, sock: socket.socket, drain_timeout_s: float, *,
                 max_body: int = 4 * 1024 * 1024, keep_alive_s: float = KEEP_ALIVE_S,
                 limits: Limits | None = None, body_window_s: float = BODY_WINDOW_S,
                 internal: bool = False) -> None:
        """``limits``: the connections, deadlines and descriptors of rule 6 (the
        defaults of ``Limits`` when None). ``internal``: ``sock`` is the socket sibling
        gateway processes pass requests on (``siblings``), not one clients reach."""
        self.app = app
        self.max_body = max_body
        self.internal = internal
        self.limits = limits or Limits()
        self.body_window_s = body_window_s
        self.draining = False
        #: The open connections, oldest first (the order ``_reclaim`` looks in).
        self.connections: dict[Connection, None] = {}
        #: The connections' tasks (``Connection``: each answers its requests in turn).
        self.tasks: set[asyncio.Task[None]] = set()
        self._peers: dict[str, int] = {}
        self._descriptors = Descriptors()
        self._sock = sock
        self._drain_timeout_s = drain_timeout_s
        self._keep_alive_s = keep_alive_s
        self._listener: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._descriptors.measure(0)
        self._listener = await loop.create_server(
            lambda: Connection(self), sock=self._sock, backlog=1024)
        self._sweep_later()

    @property
    def idle(self) -> bool:
        """Whether no request is being answered or waiting to be."""
        return all(conn.idle for conn in self.connections)

    # -- connections in and out (rule 6) --------------------------------------------------

    def admit(self, conn: Connection, peername: Any) -> str | None:
        """Count ``conn`` in, or say why it is refused."""
        limits = self.limits
        peer = peer_key(peername)
        if peer is not None and self._peers.get(peer, 0) >= limits.peer_connections:
            return (f"this gateway takes {limits.peer_connections} connections from one "
                    "address (limit peer_connections): close one first")
        if len(self.connections) >= limits.connections:
            if not self._reclaim():
                return (f"this gateway is at its {limits.connections} connections "
                        "(limit connections)")
        elif self._short_of_descriptors() and not self._reclaim():
            return ("this gateway keeps its last file descriptors for what it serves "
                    "already (limit spare_descriptors)")
        conn.peer = peer
        self.connections[conn] = None
        if peer is not None:
            self._peers[peer] = self._peers.get(peer, 0) + 1
        return None

    def release(self, conn: Connection) -> None:
        """``conn`` closed: it is counted no more."""
        if conn not in self.connections:
            return  # refused, never counted
        del self.connections[conn]
        peer = conn.peer
        if peer is not None:
            left = self._peers[peer] - 1
            if left:
                self._peers[peer] = left
            else:
                del self._peers[peer]

    def _short_of_descriptors(self) -> bool:
        # The new connection's socket is open already, and not yet among ``connections``.
        free = self._descriptors.free(len(self.connections) + 1)
        return free is not None and free < self.limits.spare_descriptors

    def _reclaim(self) -> bool:
        """Close the oldest connection serving no request, if one is found among the
        oldest few: whether one was."""
        for n, conn in enumerate(self.connections):
            if n >= _RECLAIM_SCAN:
                break
            if conn.reclaimable:
                conn.close()
                return True
        return False

    # -- the sweep (rules 4 and 6) --------------------------------------------------------

    def _sweep_later(self) -> None:
        loop = asyncio.get_running_loop()
        every = min(self._keep_alive_s, self.limits.head_timeout_s, self.body_window_s, 5.0)
        self._sweeper = loop.call_later(every / 2, self._sweep)

    def _sweep(self) -> None:
        """Close the connections past a deadline; count the descriptors again."""
        now = asyncio.get_running_loop().time()
        head_due = now - self.limits.head_timeout_s
        idle_due = now - self._keep_alive_s
        for conn in list(self.connections):
            if not conn.closed:
                conn.check_deadlines(now, head_due, idle_due)
        self._descriptors.measure(len(self.connections))
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
        for conn in [c for c in self.connections if c.idle or c.closed]:
            conn.close()
        try:
            if self.tasks:
                _done, late = await asyncio.wait(list(self.tasks),
                                                 timeout=max(self._drain_timeout_s, 0.1))
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
