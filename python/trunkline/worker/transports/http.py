"""The Streamable HTTP transport: one MCP endpoint URL, one POST per message.

To the ``Peer`` it looks like the stdio transport: ``write`` takes newline-terminated
JSON-RPC lines, ``on_data`` receives them. Underneath, every request is its own HTTP
exchange (MCP 2026-07-28, basic/transports/streamable-http): its answer comes back as one
JSON body or as a per-request SSE stream carrying that request's notifications (progress,
logs) and then its response. What HTTP adds is reported per request through
``on_failed(request_id, error)``: a status without a JSON-RPC answer, an authentication
challenge, a broken stream. Only that request is lost; the others and the transport carry
on. HTTP/1.1 itself is ``http_client``'s.

The transport derives the HTTP headers from each message: ``MCP-Protocol-Version`` equal
to the ``_meta`` version the message carries, ``Mcp-Method``, ``Mcp-Name``, and
``Mcp-Param-*`` for tool arguments annotated with ``x-mcp-header``. It learns the
annotations from the ``tools/list`` answers passing through, and drops a tool whose
annotations are invalid before anyone above sees it. Cancellation in the modern era is
closing the request's exchange, so a ``notifications/cancelled`` line is never POSTed:
it aborts the exchange of the request it names.

Legacy (2025-11-25 and earlier) servers get the legacy shape (MCP 2025-11-25,
basic/transports): the version header and ``Mcp-Session-Id`` learned from the
``initialize`` answer, notifications and responses POSTed (202), an SSE stream that drops
before its response resumed with a GET and ``Last-Event-ID`` after the server's ``retry``
delay, a DELETE of the session on close, and a 404 for the session ending the transport
(the peer then renegotiates).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson

from ..._codec import (
    DEFAULT_MAX_LINE_BYTES,
    KIND_ERROR,
    KIND_INVALID,
    KIND_REQUEST,
    KIND_RESULT,
    Envelope,
    scan,
)
from ...errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    HttpStatusError,
    MalformedMessage,
    OversizedMessage,
    RedirectRefused,
    StreamBroken,
    TrunklineError,
)
from ...loop.tasks import TaskScope
from ...params import HttpParams
from ...protocol import headers as mcp_headers
from ...protocol.header_plan import HeaderPlan, Outgoing
from ...protocol.versions import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from ...version import VERSION
from ..credentials import CredentialSlots, HostCredentials
from . import STREAM_TAG
from .http_client import (
    BodyBroken,
    ConnectFailed,
    Disconnected,
    HttpClient,
    HttpClientError,
    Response,
)
from .sse import SseDecoder, SseError

log = logging.getLogger("trunkline.transports.http")

#: Resumption of a legacy stream that dropped before its response: attempts without any
#: new event in between, and the wait when the server named none.
_MAX_RESUMES = 5
_DEFAULT_RETRY_MS = 1000
#: Bound on an error body kept for a report, and on any JSON body read.
_EXCERPT_BYTES = 300
_ERROR_BODY_BYTES = 64 * 1024
_MODERN_ERROR_CODES = frozenset(
    {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION})
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: 401/403 answers one request may get and have the host's credentials answer (a 401, then
#: a 403 asking for more scope, and one more); the next is the request's failure.
_MAX_CHALLENGES = 3
#: ``_post_request``: the server asked for its new DPoP nonce; send the request again.
_NEW_NONCE = "new DPoP nonce"


class HttpTransport:
    """One server endpoint. Callbacks: ``on_data`` gets newline-terminated JSON-RPC lines,
    ``on_failed(request_id, error)`` a request whose exchange ended without an answer,
    ``on_closed(detail)`` once, when the transport can carry nothing more."""

    pid: int | None = None
    returncode: int | None = None
    #: Every request is its own exchange: lines come one per ``write``, so a run of them is
    #: not cut apart here again (a copy of every line).
    lines_apart = True

    def __init__(
        self,
        params: HttpParams,
        *,
        on_data: Callable[[bytes], None],
        on_closed: Callable[[str], None],
        on_failed: Callable[[Any, TrunklineError], None],
        is_pending: Callable[[Any], bool] = lambda _request_id: True,
        server: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_LINE_BYTES,
        close_wait_s: float = 2.0,
        credentials: CredentialSlots | None = None,
    ) -> None:
        """``credentials``: the host's credentials by slot, asked for an ``Authorization``
        header when the server answers 401/403 (None, or no slot 0 for a request of slot
        0: such an answer fails the request). A request of slot 0 and everything that is
        no request of the parent's (one-way POSTs, GET streams, the session's DELETE) go
        with slot 0's."""
        self.params = params
        self.server = server
        self._on_data = on_data
        self._on_closed_cb = on_closed
        self._on_failed = on_failed
        # Whether the Peer still waits for a request: a legacy stream is not resumed for a
        # request answered elsewhere (on the standalone stream), timed out or cancelled.
        self._is_pending = is_pending
        self._max_message_bytes = max_message_bytes
        self._close_wait_s = close_wait_s
        self._session: HttpClient | None = None
        #: Every exchange, one-way POST and stream runs in this scope; closing it ends them.
        self._scope = TaskScope(f"HTTP transport to {params.url}")
        #: The exchange of each request still being read, to abort it by request id.
        self._exchanges: dict[Any, asyncio.Task[Any]] = {}
        # Set once the legacy session's standalone stream is open (or known not to be):
        # requests wait for it, so anything the server sends outside a request's own
        # stream from then on has a stream to arrive on.
        self._standalone_settled: asyncio.Event | None = None
        self._closed_reported = False
        self._notes: collections.deque[str] = collections.deque(maxlen=20)
        self._headers = HeaderPlan(params.headers, server)
        self._slots = credentials
        #: Slot 0's: the host's own.
        self._credentials = credentials.shared if credentials is not None else None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self._scope.open()
        # No total or read timeout: a listen stream stays open for hours and every
        # request's deadline is the Peer's. Only connecting is bounded here.
        self._session = HttpClient(
            self.params.url, limit=self.params.max_connections,
            connect_timeout_s=self.params.connect_timeout_s,
            verify_tls=self.params.verify_tls, user_agent=_user_agent())

    @property
    def alive(self) -> bool:
        return self._session is not None and not self._closed_reported

    def stderr_tail(self, max_lines: int = 20) -> str:
        """The last HTTP-level problems seen (statuses, broken streams): what a stdio
        server's stderr would tell."""
        return "\n".join(list(self._notes)[-max_lines:])

    async def close(self) -> int | None:
        """Abort every exchange, end a legacy session (DELETE), release the pool."""
        await self._scope.aclose()
        session, self._session = self._session, None
        if session is not None:
            if self._headers.session_id is not None:
                await self._end_legacy_session(session)
            await session.aclose(self._close_wait_s)
        self._report_closed("transport closed by the client")
        return None

    async def _end_legacy_session(self, session: HttpClient) -> None:
        headers = self._authorized(self._headers.one_way(), "DELETE")
        try:
            async with asyncio.timeout(self._close_wait_s):
                async with self._http("DELETE", headers, session=session) as resp:
                    await resp.read()
        except (HttpClientError, TimeoutError, OSError, RedirectRefused) as exc:
            # The server may answer 405 or be gone; the session ends with us either way.
            log.debug("DELETE of session at %s failed: %r", self.params.url, exc)
        self._headers.session_id = None

    def _report_closed(self, detail: str) -> None:
        if not self._closed_reported:
            self._closed_reported = True
            self._on_closed_cb(detail)

    # -- writing -----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Take one or more newline-terminated JSON-RPC lines; each becomes its own
        exchange (or, for a modern cancellation, ends one)."""
        if self._session is None or self._closed_reported:
            return
        if data.find(b"\n") == len(data) - 1:
            # One line, the usual case: sent as it is, newline and all (JSON allows the
            # trailing whitespace), so a 64 KiB argument is not copied to cut it off.
            self._send(Outgoing.classify(data))
            return
        # split(b"\n"), not splitlines(): a line is newline-terminated JSON (no raw CR or
        # LF inside), and splitlines() walks every byte (~60 µs for a 64 KiB line).
        for line in data.split(b"\n"):
            if line:
                self._send(Outgoing.classify(line))

    def write_for(self, slot: int, line: bytes) -> None:
        """One newline-terminated request line of the parent's, to go with the
        credentials of ``slot`` (not 0: ``write`` is slot 0's)."""
        if self._session is None or self._closed_reported:
            return
        slots = self._slots
        self._send(Outgoing.classify(line), slots.slot(slot) if slots is not None else None)

    def _send(self, out: Outgoing, credentials: HostCredentials | None = None) -> None:
        if out.kind == KIND_REQUEST:
            if credentials is None:
                credentials = self._credentials
            task = self._scope.spawn(self._request_exchange(out, credentials),
                                     name=f"{out.method} exchange")
            self._exchanges[out.id] = task
            task.add_done_callback(functools.partial(self._exchange_done, out.id))
            return
        if out.method == "notifications/cancelled" and not self._headers.legacy:
            # Closing the request's exchange *is* the cancellation; nothing is sent.
            self._abort(out.params.get("requestId") if out.params else None)
            return
        if out.method == "notifications/cancelled":
            # Legacy: a dropped connection is not a cancellation, so the notification is
            # POSTed, and our own reading of that exchange stops too.
            self._abort(out.params.get("requestId") if out.params else None)
        if out.method == "notifications/initialized":
            self._standalone_settled = asyncio.Event()
        self._scope.spawn(self._post_one_way(out), name=f"POST {out.method or 'response'}")

    def _exchange_done(self, request_id: Any, task: asyncio.Task[Any]) -> None:
        if self._exchanges.get(request_id) is task:
            del self._exchanges[request_id]

    def _abort(self, request_id: Any) -> None:
        task = self._exchanges.get(request_id)
        if task is not None:
            task.cancel()

    # -- one request, one exchange -------------------------------------------------------

    async def _request_exchange(self, out: Outgoing,
                                credentials: HostCredentials | None) -> None:
        request_id = out.id
        try:
            headers = self._headers.request(out)
        except mcp_headers.HeaderValueError as exc:
            self._fail(request_id, MalformedMessage(
                f"cannot send this call over HTTP: {exc}", server=self.server,
                method=out.method))
            return
        if self._standalone_settled is not None and not self._standalone_settled.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.params.connect_timeout_s):
                    await self._standalone_settled.wait()
        assert self._session is not None
        try:
            for challenges in range(_MAX_CHALLENGES + 1):
                refused = await self._post_request(out, headers, credentials,
                                                   answerable=challenges < _MAX_CHALLENGES)
                if refused is None:
                    break
                if refused == _NEW_NONCE:
                    continue
                assert credentials is not None
                await credentials.challenged(*refused)
        except asyncio.CancelledError:
            raise
        except (RedirectRefused, OversizedMessage, AuthorizationFailed) as exc:
            exc.server, exc.method = self.server, out.method
            self._note(f"{out.method}: {exc.message}")
            self._fail(request_id, exc)
            return
        except (HttpClientError, OSError, TimeoutError) as exc:
            detail = _describe_network_error(exc)
            self._note(f"{out.method}: {detail}")
            self._fail(request_id, StreamBroken(detail, server=self.server, method=out.method))
            return
        except (SseError, orjson.JSONDecodeError) as exc:
            self._note(f"{out.method}: unusable answer: {exc}")
            self._fail(request_id, MalformedMessage(
                f"the answer was unusable: {exc}", server=self.server, method=out.method))
            return
        # Whatever happened above, the request is answered now or never (the Peer ignores
        # this for an id already resolved; asked first, an answered call builds no error).
        if self._is_pending(request_id):
            self._fail(request_id, StreamBroken(
                "the HTTP exchange ended without a response to the request",
                server=self.server, method=out.method))

    async def _post_request(self, out: Outgoing, headers: dict[str, str],
                            credentials: HostCredentials | None, *, answerable: bool
                            ) -> tuple[int, str | None, str | None] | str | None:
        """POST the request and deliver its answer; or, for a 401/403 the request's
        ``credentials`` may answer (``answerable``), return the status, the challenge and
        the ``Authorization`` the refused request carried, for it to be sent again;
        ``_NEW_NONCE`` for a DPoP nonce refusal to send it again with the new nonce."""
        sent = None
        proof = None
        if credentials is not None:
            if credentials.due:
                await credentials.renew()
            sent = credentials.header
            if sent is not None:
                headers = {**headers, "Authorization": sent}
                proof = credentials.proof("POST", self.params.url)
                if proof is not None:
                    headers["DPoP"] = proof[0]
        async with self._http("POST", headers, out.line, credentials=credentials) as resp:
            try:
                if (proof is not None and credentials is not None
                        and credentials.dpop is not None
                        and credentials.dpop.retry(resp.status,
                                                   resp.headers.get("www-authenticate"),
                                                   resp.headers.get("dpop-nonce"), proof[1])
                        and answerable):
                    self._note(f"{out.method}: HTTP 401 use_dpop_nonce")
                    await self._read_body(resp, _ERROR_BODY_BYTES)
                    return _NEW_NONCE
                if credentials is not None and answerable and resp.status in (401, 403):
                    challenge = resp.headers.get("www-authenticate")
                    self._note(f"{out.method}: HTTP {resp.status}"
                               + (f" ({challenge})" if challenge else ""))
                    await self._read_body(resp, _ERROR_BODY_BYTES)  # the connection stays
                    return resp.status, challenge, sent
                await self._read_answer(out, resp, credentials)
            finally:
                # An unfinished body must not go back to the pool: closing the
                # connection is also how the server learns the request was cancelled.
                resp.release()
        return None

    def _authorized(self, headers: dict[str, str], method: str,
                    credentials: HostCredentials | None = None) -> dict[str, str]:
        """``headers`` with the ``Authorization`` of ``credentials`` (the host's own when
        None), where it gave one, and its DPoP proof for a ``method`` request, where it is
        DPoP-bound."""
        credentials = credentials or self._credentials
        header = credentials.header if credentials is not None else None
        if credentials is None or header is None:
            return headers
        proof = credentials.proof(method, self.params.url)
        return {**headers, "Authorization": header,
                **({"DPoP": proof[0]} if proof is not None else {})}

    async def _read_answer(self, out: Outgoing, resp: Response,
                           credentials: HostCredentials | None) -> None:
        status = resp.status
        if status in (401, 403):
            challenge = resp.headers.get("www-authenticate")
            reason = "unauthorized" if status == 401 else "forbidden"
            detail = f"HTTP {status} {reason}" + (f" ({challenge})" if challenge else "")
            self._note(f"{out.method}: {detail}")
            self._fail(out.id, AuthenticationFailed(
                f"the server refused the request: {detail}", status=status,
                challenge=challenge, server=self.server, method=out.method))
            return
        if status == 404 and self._headers.session_id is not None:
            # The session expired (MCP 2025-11-25). Everything pending is lost; the peer starts over
            # with a fresh initialize when its worker restarts.
            self._note("HTTP 404 for the session: it has expired")
            self._report_closed("the server ended the session (HTTP 404 to a request "
                                "carrying Mcp-Session-Id)")
            return
        if 200 <= status < 300:
            if out.method == "initialize":
                self._headers.session_id = resp.headers.get("mcp-session-id") or None
            content_type = resp.content_type
            if content_type == "text/event-stream":
                await self._read_stream(out, resp, credentials)
            elif content_type == "application/json" and status != 202:
                body = await self._read_body(resp, self._max_message_bytes)
                self._deliver_body(out, body, status)
            else:
                self._note(f"{out.method}: HTTP {status} {content_type or 'without a body'}")
                self._fail(out.id, HttpStatusError(
                    f"HTTP {status} with {content_type or 'no body'} instead of a JSON-RPC "
                    "answer", status=status, server=self.server, method=out.method))
            return
        body = await self._read_body(resp, _ERROR_BODY_BYTES)
        self._deliver_error_status(out, status, body)

    async def _read_body(self, resp: Response, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.chunks():
            size += len(chunk)
            if size > limit:
                # Read no further: the body is never held whole.
                raise OversizedMessage(
                    f"the answer was an HTTP body of over {limit} bytes, the limit; it was "
                    "not read further", size=size, limit=limit)
            chunks.append(chunk)
        return b"".join(chunks)

    def _deliver_body(self, out: Outgoing, body: bytes, status: int) -> None:
        line = _one_line(body)
        if line is None:
            excerpt = body[:_EXCERPT_BYTES].decode("utf-8", "replace")
            self._note(f"{out.method}: HTTP {status} body is not JSON: {excerpt!r}")
            self._fail(out.id, MalformedMessage(
                f"HTTP {status} body is not JSON: {excerpt!r}", server=self.server,
                method=out.method))
            return
        self._deliver(out, line)

    def _deliver_error_status(self, out: Outgoing, status: int, body: bytes) -> None:
        """A 4xx/5xx. A JSON-RPC error in the body is the answer (a modern server's 400
        with -32020/-32021/-32022, a 404 with -32601); it is delivered under the request's
        id even when the server could not read that id. Otherwise the status is the
        failure. A modern error code counts only on the status the spec gives it (400)."""
        excerpt = body[:_EXCERPT_BYTES].decode("utf-8", "replace")
        self._note(f"{out.method}: HTTP {status}: {excerpt!r}")
        error = _jsonrpc_error(body)
        modern_code = error is not None and error.get("code") in _MODERN_ERROR_CODES
        if error is not None and (status == 400 or not modern_code):
            self._deliver(out, orjson.dumps(
                {"jsonrpc": "2.0", "id": out.id, "error": error}) + b"\n")
            return
        self._fail(out.id, HttpStatusError(
            f"HTTP {status} without a JSON-RPC answer: {excerpt!r}", status=status,
            body=excerpt, server=self.server, method=out.method))

    async def _read_stream(self, out: Outgoing, resp: Response,
                           credentials: HostCredentials | None) -> None:
        """One request's SSE stream: its notifications, then its response. A legacy
        stream that ends early is resumed with GET + Last-Event-ID."""
        decoder = SseDecoder(max_event_bytes=self._max_message_bytes)
        if await self._pump(out, resp, decoder):
            return
        fruitless = 0
        while self._headers.legacy_version is not None and decoder.last_event_id is not None:
            if not self._is_pending(out.id):
                return
            if fruitless >= _MAX_RESUMES:
                self._note(f"{out.method}: gave up resuming the stream after {fruitless} tries")
                return
            await asyncio.sleep((decoder.last_retry_ms or _DEFAULT_RETRY_MS) / 1000)
            seen = decoder.last_event_id
            if not self._is_pending(out.id):
                return
            async with self._get_stream(seen, credentials) as again:
                if again is None:
                    self._note(f"{out.method}: the stream could not be resumed")
                    return
                if await self._pump(out, again, decoder):
                    return
            fruitless = 0 if decoder.last_event_id != seen else fruitless + 1

    async def _pump(self, out: Outgoing, resp: Response,
                    decoder: SseDecoder) -> bool:
        """Deliver events until this request's response; True once it was delivered."""
        async with contextlib.aclosing(self._stream_lines(resp, decoder)) as lines:
            async for line in lines:
                env = scan(line[:-1])
                response = env.kind in (KIND_RESULT, KIND_ERROR)
                if (response or env.kind == KIND_INVALID) and env.id == out.id:
                    # Its answer, or what the server meant as one (a malformed answer
                    # keeps its id, and the Peer fails the request with the reason).
                    self._deliver(out, line)
                    return True
                stray = self._stray(out, env, line, response)
                if stray is not None:
                    self._note(f"{out.method}: dropped from its stream: {stray}")
                    continue
                if env.method == "notifications/message" or env.kind == KIND_REQUEST:
                    line = _from_stream(line, out)
                self._on_data(line)
        return False

    def _stray(self, out: Outgoing, env: Envelope, line: bytes,
               response: bool) -> str | None:
        """Why a message does not belong on this modern request's stream, or None. The stream
        carries that request's progress and logs, then its response; an answer to
        another request, or progress for another token, is dropped there rather than
        routed (docs/explanation/architecture.md, "Notifications on the wrong stream"). Legacy
        streams may carry more, and the Peer judges server requests (a modern server
        sending one is counted as a violation)."""
        if self._headers.legacy or out.modern_version is None:
            return None
        if response:
            return f"a response to another request (id {env.id!r})"
        if env.method == "notifications/progress":
            params = orjson.loads(line).get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            meta = (out.params or {}).get("_meta")
            ours = meta.get("progressToken") if isinstance(meta, dict) else None
            if ours is None or token != ours:
                return f"progress for token {token!r}, not this request's"
        return None

    async def _stream_lines(self, resp: Response,
                            decoder: SseDecoder) -> AsyncGenerator[bytes, None]:
        """The JSON-RPC messages of an SSE stream, one line each; comments, other event
        types and empty events are skipped."""
        async for chunk in resp.chunks():
            for event in decoder.feed(chunk):
                if event.event != "message" or not event.data:
                    continue
                line = _one_line(event.data.encode())
                if line is None:
                    self._note("an SSE event that is not JSON was skipped")
                    continue
                yield line
        decoder.finish()

    @contextlib.asynccontextmanager
    async def _get_stream(self, last_event_id: str | None,
                          credentials: HostCredentials | None = None
                          ) -> AsyncIterator[Response | None]:
        """A legacy GET stream (resumption, with the resumed request's ``credentials``, or
        the standalone stream, with the host's): the response, or
        None when the server offers no stream (405, any non-SSE answer). A 404 for the
        session ends the transport."""
        headers = self._authorized(self._headers.stream(last_event_id), "GET", credentials)
        async with self._http("GET", headers) as resp:
            if resp.status == 404 and self._headers.session_id is not None:
                self._report_closed("the server ended the session (HTTP 404 to a GET "
                                    "carrying Mcp-Session-Id)")
                yield None
            elif resp.status != 200 or resp.content_type != "text/event-stream":
                self._note(f"GET stream: HTTP {resp.status} {resp.content_type}")
                yield None
            else:
                try:
                    yield resp
                finally:
                    resp.release()

    async def _standalone_stream(self) -> None:
        """Legacy only: the session's own GET stream, where a server sends requests and
        notifications that belong to no request of ours (list changes, and elicitations
        some SDKs send outside the call's stream). Reopened when it ends, within a budget
        of attempts that bring nothing new."""
        decoder = SseDecoder(max_event_bytes=self._max_message_bytes)
        try:
            await self._standalone_loop(decoder)
        finally:
            self._settle_standalone()

    async def _standalone_loop(self, decoder: SseDecoder) -> None:
        fruitless = 0
        while self._session is not None and not self._closed_reported:
            seen = decoder.last_event_id
            try:
                async with self._get_stream(seen) as resp:
                    self._settle_standalone()
                    if resp is None:
                        return  # 405: the server offers no standalone stream
                    async with contextlib.aclosing(self._stream_lines(resp, decoder)) as lines:
                        async for line in lines:
                            self._on_data(line)
            except (HttpClientError, OSError, TimeoutError, SseError, RedirectRefused) as exc:
                self._note(f"GET stream: {_describe_network_error(exc)}")
            fruitless = 0 if decoder.last_event_id != seen else fruitless + 1
            if fruitless >= _MAX_RESUMES:
                self._note("GET stream: stopped reopening it (it keeps ending empty)")
                return
            await asyncio.sleep((decoder.last_retry_ms or _DEFAULT_RETRY_MS) / 1000)

    @contextlib.asynccontextmanager
    async def _http(self, method: str, headers: dict[str, str], data: bytes | None = None,
                    *, session: HttpClient | None = None,
                    credentials: HostCredentials | None = None) -> AsyncIterator[Response]:
        """One HTTP exchange with the configured endpoint. A redirect is followed only as
        ``HttpParams.follow`` allows (307/308, same origin, a few hops), else
        ``RedirectRefused`` names both URLs: a general client's following would carry requests,
        configured headers and the allowlisted URL's trust to any host. The client is
        bound to that origin too (``HttpClient``). ``credentials``: the request's (a
        followed redirect gets a DPoP proof of its own)."""
        session = session or self._session
        assert session is not None
        url = self.params.url
        hops = 0
        while True:
            resp = await session.request(method, url, headers, data)
            if resp.status not in _REDIRECT_STATUSES:
                break
            resp.release()
            url = self.params.follow(resp.status, resp.headers.get("location"), url, hops)
            hops += 1
            proving = credentials or self._credentials
            if "DPoP" in headers and proving is not None:
                # A proof names the URL it is for (htu): the next hop gets its own.
                proof = proving.proof(method, url)
                if proof is not None:
                    headers = {**headers, "DPoP": proof[0]}
            self._note(f"{method} followed HTTP {resp.status} to {url}")
        try:
            yield resp
        finally:
            resp.release()

    def _deliver(self, out: Outgoing, line: bytes) -> None:
        """Hand a response line up, after the transport's own reading of it."""
        self._on_data(self._headers.learn(out.method, line))

    async def _post_one_way(self, out: Outgoing) -> None:
        """A notification or a response (legacy): accepted with 202, nothing to read."""
        if self._session is None:
            return
        headers = self._authorized(self._headers.one_way(), "POST")
        try:
            async with self._http("POST", headers, out.line) as resp:
                await resp.read()
                if out.method == "notifications/initialized" and resp.status in (200, 202, 204):
                    self._scope.spawn(self._standalone_stream(), name="standalone stream")
                elif out.method == "notifications/initialized":
                    self._settle_standalone()
                if resp.status not in (200, 202, 204):
                    self._note(f"{out.method or 'response'}: HTTP {resp.status}")
                    log.warning("server %r: %s answered HTTP %d", self.server,
                                out.method or "a response", resp.status)
        except (HttpClientError, OSError, TimeoutError, RedirectRefused) as exc:
            self._note(f"{out.method or 'response'}: {_describe_network_error(exc)}")
            if out.method == "notifications/initialized":
                self._settle_standalone()

    def _settle_standalone(self) -> None:
        if self._standalone_settled is not None:
            self._standalone_settled.set()

    def _fail(self, request_id: Any, error: TrunklineError) -> None:
        if not self._closed_reported:
            self._on_failed(request_id, error)

    def _note(self, text: str) -> None:
        self._notes.append(text)


def _from_stream(line: bytes, out: Outgoing) -> bytes:
    """A log message or a (legacy) server's own request from ``out``'s response stream,
    tagged (``STREAM_TAG`` in its ``_meta``) with the progress token ``out`` carries: the
    one thing both this transport and the parent know the call by (neither names our
    request, and the JSON-RPC id is the worker's own). A tag the server wrote itself is
    replaced or removed."""
    message = orjson.loads(line)
    params = message.get("params")
    if not isinstance(params, dict):
        return line
    meta = (out.params or {}).get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    theirs = params.get("_meta")
    tagged = {k: v for k, v in theirs.items() if k != STREAM_TAG} if isinstance(
        theirs, dict) else {}
    if isinstance(token, str):
        tagged[STREAM_TAG] = token
    if tagged:
        params["_meta"] = tagged
    else:
        params.pop("_meta", None)
    return orjson.dumps(message) + b"\n"


def _one_line(body: bytes) -> bytes | None:
    """The message as one newline-terminated line (bodies may be pretty-printed), or
    None if it is not JSON."""
    if b"\n" not in body and b"\r" not in body:
        # Already one line: the codec's envelope scan (no payload decode) is the check,
        # as it is for a stdio line.
        stripped = body.strip()
        if scan(stripped).kind != KIND_INVALID:
            return stripped + b"\n"
    try:
        return orjson.dumps(orjson.loads(body)) + b"\n"
    except orjson.JSONDecodeError:
        return None


def _jsonrpc_error(body: bytes) -> dict[str, Any] | None:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = message.get("error") if isinstance(message, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), int) \
            and isinstance(error.get("message"), str):
        return error
    return None


def _describe_network_error(exc: BaseException) -> str:
    if isinstance(exc, RedirectRefused):
        return exc.message
    if isinstance(exc, ConnectFailed):
        return f"could not connect: {exc.os_error or exc}"
    if isinstance(exc, Disconnected):
        return "the server closed the connection before the response"
    if isinstance(exc, BodyBroken):
        return f"the response stream broke before its end: {exc}"
    if isinstance(exc, HttpClientError):
        return str(exc)
    return f"network error: {exc!r}"


def _user_agent() -> str:
    return f"trunkline/{VERSION}"
