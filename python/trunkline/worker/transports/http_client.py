"""A small HTTP/1.1 client for one origin: what a Streamable HTTP worker needs, and no more.

Why not a general client: per request, aiohttp's ``ClientSession`` costs a worker about
eight times what the exchange itself costs (request and response objects, header
multidicts, timers, tracing hooks, a cookie jar), and a worker is one process per server,
so that cost caps a server's calls per second. The rules here are few because the
traffic is:

- One origin per client (the configured URL's; redirects are followed only within it,
  see ``HttpParams.follow``). ``Host``, ``User-Agent``, ``Accept-Encoding: gzip, deflate``
  and ``Content-Length`` are set here; everything else is the caller's.
- A pool of at most ``limit`` keep-alive connections. One request per connection at a time
  (no pipelining). Callers beyond the limit wait in arrival order (first come, first
  served: a caller that just released a connection cannot overtake one already waiting).
  Only establishing a connection is bounded (``connect_timeout_s``); a caller's overall
  deadline is its own.
- Responses are parsed by httptools (llhttp, the parser uvicorn and Node use). The body
  streams: chunks are handed to the reader as they arrive, decompressed (gzip, deflate),
  and reading from the socket pauses while more than ``_HIGH_WATER`` bytes wait unread.
- A connection goes back to the pool only when its response ended and both sides want to
  keep it; a response abandoned before its end closes its connection (for a server that
  is how a request is cancelled). A connection the server closed while idle is dropped
  from the pool at once; one idle longer than ``_IDLE_S`` is not reused.
- Failures are ``HttpClientError``: ``ConnectFailed`` (nothing was sent),
  ``Disconnected`` (the connection ended before the response's head),
  ``BodyBroken`` (it ended, or the body was unusable, before the response's end),
  ``MalformedResponse`` (not HTTP/1.1 as it should be).
"""

from __future__ import annotations

import asyncio
import collections
import ssl as ssl_module
import time
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httptools

#: Bytes of a response body held unread before the socket stops being read.
_HIGH_WATER = 256 * 1024
#: Seconds an idle keep-alive connection may wait before it is no longer reused
#: (aiohttp's default, kept: long enough to matter, shorter than most servers' own).
_IDLE_S = 15.0


class HttpClientError(Exception):
    """An HTTP exchange that could not be completed."""


class ConnectFailed(HttpClientError):
    """No connection to the origin could be made (nothing was sent)."""

    def __init__(self, message: str, os_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.os_error = os_error


class Disconnected(HttpClientError):
    """The connection ended before the response's head arrived."""


class BodyBroken(HttpClientError):
    """The response's body ended early or could not be decoded."""


class MalformedResponse(HttpClientError):
    """The server's bytes were not a valid HTTP/1.1 response."""


class Origin:
    """Scheme, host and port of a URL, and the ``Host`` header naming them."""

    __slots__ = ("scheme", "host", "port", "host_header")

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        default = 443 if parts.scheme == "https" else 80
        self.port = parts.port or default
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if self.port == default else f"{name}:{self.port}"


def target_of(url: str) -> str:
    """The request target (path and query) of an absolute URL."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path


class Response:
    """One response: its status and headers at once, its body as it arrives."""

    __slots__ = ("status", "headers", "_connection", "_chunks", "_buffered", "_waiter",
                 "_ended", "_error", "_decoder", "_released")

    def __init__(self, status: int, headers: dict[str, str], connection: Connection) -> None:
        self.status = status
        #: Header names in lower case; a repeated header's values joined with ", ".
        self.headers = headers
        self._connection: Connection | None = connection
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: HttpClientError | None = None
        self._decoder = _decoder_for(headers.get("content-encoding"))
        self._released = False

    @property
    def content_type(self) -> str:
        """The media type in lower case, without parameters; "" without the header."""
        value = self.headers.get("content-type", "")
        return value.split(";", 1)[0].strip().lower()

    @property
    def at_eof(self) -> bool:
        """Whether the whole body arrived and was read."""
        return self._ended and not self._chunks

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, decoded, in the pieces it arrived in."""
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                if self._buffered < _HIGH_WATER and self._connection is not None:
                    self._connection.resume()
                yield chunk
            if self._error is not None:
                raise self._error
            if self._ended:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def release(self) -> None:
        """Done with this response: its connection returns to the pool if the response
        ended cleanly, and is closed otherwise."""
        if self._released:
            return
        self._released = True
        connection, self._connection = self._connection, None
        if connection is not None and not self._ended:
            connection.abandon()

    close = release

    # -- fed by the connection ---------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error as exc:
                self._fail(BodyBroken(f"the response body could not be decompressed: {exc}"))
                return
            if not data:
                return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered >= _HIGH_WATER and self._connection is not None:
            self._connection.pause()
        self._wake()

    def _end(self) -> None:
        if self._decoder is not None:
            try:
                rest = self._decoder.flush()
            except zlib.error as exc:
                self._fail(BodyBroken(f"the response body could not be decompressed: {exc}"))
                return
            if rest:
                self._chunks.append(rest)
        self._ended = True
        self._connection = None
        self._wake()

    def _fail(self, error: HttpClientError) -> None:
        if not self._ended and self._error is None:
            self._error = error
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class Connection(asyncio.Protocol):
    """One keep-alive connection: sends a request, parses its response, reports back to
    the pool when the response ended (or the connection did)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[Response] | None = None
        self._response: Response | None = None
        self._header_names: list[bytes] = []
        self._header_values: list[bytes] = []
        self._until_eof = False
        self._paused = False
        self.closed = False
        self.idle_since = 0.0
        #: Set once the connection ended (``connection_lost``), for a client closing.
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- used by the pool and the response ---------------------------------------------

    def send(self, head: bytes, body: bytes | None) -> asyncio.Future[Response]:
        assert self._transport is not None and self._head is None
        self._head = asyncio.get_running_loop().create_future()
        self._header_names.clear()
        self._header_values.clear()
        if body:
            self._transport.writelines((head, body))  # one writev, no copy of the body
        else:
            self._transport.write(head)
        return self._head

    def pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self.closed:
            self._paused = False
            self._transport.resume_reading()

    def abandon(self) -> None:
        """The reader gave up on the response before its end: close the connection."""
        self._response = None
        self.close()

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()
        self.closed = True

    def abort(self) -> None:
        """End it now (a TLS connection's close waits for the peer's close_notify)."""
        if self._transport is not None:
            self._transport.abort()
        self.closed = True

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._broken(MalformedResponse("the server switched protocols (upgrade)"))
        except httptools.HttpParserError as exc:
            self._broken(MalformedResponse(f"the response was not valid HTTP/1.1: {exc}"))

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ended.done():
            self.ended.set_result(None)
        response, self._response = self._response, None
        if response is not None and self._until_eof and exc is None:
            response._end()  # a body delimited by the end of the connection
        elif response is not None:
            response._fail(BodyBroken("the connection ended before the response's end"))
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(Disconnected(
                "the server closed the connection before the response"))
        self._pool.lost(self)

    def pause_writing(self) -> None:  # a large request body: the transport buffers it
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks -----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_names.append(name)
        self._header_values.append(value)

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._header_names.clear()
            self._header_values.clear()
            return  # an interim response: the real one follows
        headers: dict[str, str] = {}
        for raw_name, raw_value in zip(self._header_names, self._header_values, strict=True):
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self._until_eof = ("content-length" not in headers
                           and "chunked" not in headers.get("transfer-encoding", "").lower()
                           and status not in (204, 304))
        response = Response(status, headers, self)
        self._response = response
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_result(response)
        else:
            self._broken(MalformedResponse("a response arrived for no request"))

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        response, self._response = self._response, None
        if response is None:  # a 1xx: the final response is still to come
            return
        reusable = self._parser.should_keep_alive() and not self._until_eof
        response._end()
        if reusable and not self.closed:
            self._pool.give_back(self)
        else:
            self.close()

    def _broken(self, error: HttpClientError) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(error)
        response, self._response = self._response, None
        if response is not None:
            response._fail(error if isinstance(error, BodyBroken) else BodyBroken(str(error)))
        self.close()


class ConnectionPool:
    """Keep-alive connections to one origin, at most ``limit`` of them; callers beyond
    that wait in arrival order."""

    def __init__(self, origin: Origin, *, limit: int, connect_timeout_s: float,
                 ssl: ssl_module.SSLContext | None) -> None:
        self._origin = origin
        self._limit = limit
        self._connect_timeout_s = connect_timeout_s
        self._ssl = ssl
        self._idle: list[Connection] = []
        self._open: set[Connection] = set()
        self._count = 0  # connections open or being opened
        self._waiters: collections.deque[asyncio.Future[Connection | None]] = \
            collections.deque()
        self._closed = False

    async def acquire(self) -> Connection:
        if self._closed:
            raise ConnectFailed("the client is closed")
        connection = self._reuse()
        if connection is not None:
            return connection
        while self._count >= self._limit:
            waiter: asyncio.Future[Connection | None] = \
                asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                handed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._pass_on(waiter.result())
                else:
                    self._waiters.remove(waiter)
                raise
            if handed is not None:
                return handed
            # None: a slot opened (a connection ended); open a new one below.
        self._count += 1
        try:
            return await self._connect()
        except BaseException:
            self._count -= 1
            self._pass_on(None)
            raise

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        origin = self._origin
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, connection = await loop.create_connection(
                    lambda: Connection(self), origin.host, origin.port, ssl=self._ssl,
                    server_hostname=origin.host if self._ssl is not None else None)
        except TimeoutError:
            raise ConnectFailed(f"connecting to {origin.host}:{origin.port} took over "
                                f"{self._connect_timeout_s} s") from None
        except (OSError, ssl_module.SSLError) as exc:
            raise ConnectFailed(f"could not connect to {origin.host}:{origin.port}: {exc}",
                                os_error=exc) from exc
        self._open.add(connection)
        return connection

    def _reuse(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < _IDLE_S:
                return connection
            connection.close()  # counted down in lost()
        return None

    def give_back(self, connection: Connection) -> None:
        """A connection whose response ended cleanly: to the first waiter, else idle."""
        if self._closed:
            connection.close()
            return
        if not self._hand_to_waiter(connection):
            connection.idle_since = time.monotonic()
            self._idle.append(connection)

    def lost(self, connection: Connection) -> None:
        """A connection ended: its slot opens for the first waiter."""
        self._count -= 1
        self._open.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)
        self._pass_on(None)

    def _pass_on(self, connection: Connection | None) -> None:
        """A connection (or, None, a free slot) a caller did not take: to the next one."""
        if connection is not None:
            self.give_back(connection)
        else:
            self._hand_to_waiter(None)

    def _hand_to_waiter(self, handed: Connection | None) -> bool:
        """Give the first caller still waiting ``handed``; False if nobody waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(handed)
                return True
        return False

    async def aclose(self, timeout_s: float) -> None:
        """Close every connection and wait (within ``timeout_s``) until they ended; any
        still open then is aborted. Nothing is left behind."""
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectFailed("the client is closed"))
        self._idle.clear()
        connections = list(self._open)
        for connection in connections:
            connection.close()
        pending = [c.ended for c in connections if not c.ended.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        for connection in connections:
            if not connection.ended.done():
                connection.abort()
        if any(not c.ended.done() for c in connections):
            await asyncio.wait([c.ended for c in connections], timeout=timeout_s)


class HttpClient:
    """Requests to one origin over a ``ConnectionPool``."""

    def __init__(self, url: str, *, limit: int, connect_timeout_s: float, verify_tls: bool,
                 user_agent: str) -> None:
        self.origin = Origin(url)
        context: ssl_module.SSLContext | None = None
        if self.origin.scheme == "https":
            context = ssl_module.create_default_context()
            if not verify_tls:
                context.check_hostname = False
                context.verify_mode = ssl_module.CERT_NONE
        self._pool = ConnectionPool(self.origin, limit=limit,
                                    connect_timeout_s=connect_timeout_s, ssl=context)
        #: Headers every request gets unless the caller's own headers name them.
        self._defaults = {"host": f"Host: {self.origin.host_header}\r\n",
                          "user-agent": f"User-Agent: {user_agent}\r\n",
                          "accept-encoding": "Accept-Encoding: gzip, deflate\r\n"}
        self._fixed = "".join(self._defaults.values()).encode("latin-1")
        #: Request targets of the URLs asked for (the endpoint, and a redirect's target).
        self._targets: dict[str, str] = {}

    async def request(self, method: str, url: str, headers: Mapping[str, str],
                      body: bytes | None = None) -> Response:
        """Send one request to ``url`` (on this client's origin) and wait for the head of
        its response. The caller must ``release()`` the response."""
        target = self._targets.get(url)
        if target is None:
            if Origin(url).host_header != self.origin.host_header:
                raise ValueError(f"{url} is not on {self.origin.host_header}")
            target = self._targets[url] = target_of(url)
        head = self._head(method, target, headers, body)
        connection = await self._pool.acquire()
        sent = connection.send(head, body)
        try:
            return await sent
        except BaseException:
            connection.abandon()
            raise

    def _head(self, method: str, target: str, headers: Mapping[str, str],
              body: bytes | None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self._fixed]
        overridden = False
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"header {name!r}: a line break in a header")
            overridden = overridden or name.lower() in self._defaults
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if overridden:  # the caller's own value wins over a default
            given = {name.lower() for name in headers}
            lines[1] = "".join(line for key, line in self._defaults.items()
                               if key not in given).encode("latin-1")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: %d\r\n" % len(body or b""))
        lines.append(b"\r\n")
        return b"".join(lines)

    async def aclose(self, timeout_s: float = 2.0) -> None:
        """Refuse new requests and end every connection (responses still being read lose
        theirs): within ``timeout_s``, then by force."""
        await self._pool.aclose(timeout_s)


def _decoder_for(encoding: str | None) -> Any:
    if not encoding or encoding.strip().lower() == "identity":
        return None
    name = encoding.strip().lower()
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return _Deflate()
    return _Unsupported(name)


class _Deflate:
    """``deflate`` as servers send it: zlib-wrapped, or (some servers) raw."""

    def __init__(self) -> None:
        self._inner: Any = None
        self._first = b""

    def decompress(self, data: bytes) -> bytes:
        if self._inner is None:
            self._first += data
            if len(self._first) < 2:
                return b""
            wrapped = (self._first[0] & 0x0F) == 8 and \
                int.from_bytes(self._first[:2], "big") % 31 == 0
            self._inner = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self._first = self._first, b""
        return self._inner.decompress(data)

    def flush(self) -> bytes:
        if self._inner is None:
            return self.decompress(b"") if self._first else b""
        return self._inner.flush()


class _Unsupported:
    def __init__(self, name: str) -> None:
        self._name = name

    def decompress(self, data: bytes) -> bytes:
        raise zlib.error(f"content-encoding {self._name!r} is not supported (only gzip "
                         "and deflate are asked for)")

    def flush(self) -> bytes:
        return b""
