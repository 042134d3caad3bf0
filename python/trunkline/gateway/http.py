"""The gateway over Streamable HTTP: ``trunkline serve CONFIG --http HOST:PORT``.

One endpoint, ``/mcp``, serving both eras (each request an ``exchange`` of the gateway's own
HTTP/1.1 server, ``http_server``):

- **Modern (2026-07-28)**, stateless: every POST is one request, its headers checked
  against its body (``http_rules``); a ``tools/call`` answers as an SSE stream when the
  client accepts one and something comes before the answer (progress, a legacy client's
  input request), else as JSON, so an error keeps its status; closing the exchange
  cancels the call behind the gateway; ``subscriptions/listen`` is an SSE stream held open
  until the client closes it, told of every change of the lists it was granted. Every
  stream waits for its reader in an ``outbox`` (bounded; progress coalesced once the
  reader is behind), and one whose reader takes nothing for ``Limits.stream_behind_s``
  has its connection dropped, which cancels its call as the client's going away does.
- **Legacy (2025-11-25 and earlier)**: ``initialize`` mints an ``Mcp-Session-Id`` that is
  signed (``SessionSigner``), naming this process and carrying its expiry; a GET with it
  opens the session's stream for list changes; DELETE ends it. An id no replica signed is
  404, and so is one of a session that ended (DELETE, idle, expired), which tells the
  client to start over. A legacy call accepting SSE gets a resumable stream
  (``event_streams``: a priming event, event ids, replay on a GET with
  ``Last-Event-ID``); it outlives its connection and ends early only by the client's
  ``notifications/cancelled`` or the session's end. A server's input for a legacy
  client's call is asked on that call's SSE stream and answered in a POST. Everything a
  session holds (asks waiting, streams, subscriptions, its log level) is the process's
  that opened it (``legacy_sessions``, which bounds it): a request of a session another
  process holds is passed to it when it is a sibling copy (``siblings``), else answered
  404 naming the holder (a replica behind a balancer without affinity, or a process
  started again since), never accepted and dropped. The same for a modern client's answer
  to an input round another process asked (its ``requestState`` names the process).

Around it: ``/healthz`` and ``/readyz``; ``/status`` (``admin``, for ``trunkline
status``), behind the same checks as ``/mcp``; ``Host`` checked against the names the
gateway answers to, ``Origin`` against its own origins (scheme, host and port); API keys
(``Authorization: Bearer``) required on any bind that is not loopback, or OAuth access
tokens (``bearer``: the gateway as a protected resource, its RFC 9728 metadata at
``/.well-known/oauth-protected-resource[/mcp]``), or either; a body over the limit is 413
naming the limit. The connections, deadlines and descriptors ``answerer.limits`` bounds
are the HTTP server's to keep (``http_server``). A downstream client's ``Authorization`` is
the gateway's business only: nothing of it goes to the servers behind (the specification
forbids token passthrough; upstream credentials are the gateway's own). A client's W3C
trace context headers (``traceparent``, ``tracestate``, ``baggage``) are its request's
when the request's ``_meta`` names none (``answers`` says where they go). Stopping drains:
no new requests, calls in flight finish within the drain deadline, listen streams end.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgspec
import orjson
from opentelemetry import context as otel_context

from .._codec import wide_integer_at
from ..errors import ConfigurationError
from ..loop.awaitables import ready
from ..parent.bridged_calls import TOKEN_PREFIX
from ..protocol import headers as mcp_headers
from ..protocol.listen import SUBSCRIPTION_ID
from ..telemetry.carried import picked
from . import bearer
from . import protocol as p
from .admin import status_document
from .admission import retry_after
from .answers import (
    CALL,
    LISTEN,
    NO_CLIENT,
    SUBSCRIBING,
    Admitted,
    Answerer,
    Client,
    granted_lists,
    listen_grant,
    resource_updated,
)
from .event_streams import SSE_HEADERS
from .event_streams import sse as _sse
from .exchange import JSON, Disconnected, Exchange
from .http_rules import (
    LegacySession,
    SessionSigner,
    check_modern_headers,
    check_version_header,
    host_allowed,
    key_accepted,
    loopback_names,
    origin_allowed,
    served_origins,
    session_owner,
    status_for,
)
from .http_server import HttpServer
from .issuer_keys import IssuerKeys
from .legacy_sessions import LegacySessions
from .limits import Limits
from .outbox import StreamWriter, client_stream
from .processes import bind_socket, bind_unix_socket
from .siblings import Siblings, SiblingUnreachable

log = logging.getLogger("trunkline.gateway")

ENDPOINT = "/mcp"


@dataclass(slots=True)
class Reply:
    """A whole response, as a handler decides it (the app sends it)."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: None: ``headers`` name it (a sibling's response, passed on as it came).
    content_type: bytes | None = JSON


def _json(message: dict[str, Any], status: int = 200,
          headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, orjson.dumps(message), headers or {})


def _answer(message: dict[str, Any], headers: Mapping[str, str] | None = None) -> Reply:
    """A JSON-RPC answer with the status its error (if any) goes with, and
    ``Retry-After`` when it is an overload."""
    if "error" not in message:
        return _json(message, 200, headers)
    err = message["error"]
    wait = retry_after(err)
    extra = {**(headers or {}), **({"Retry-After": str(wait)} if wait is not None else {})}
    return _json(message, status_for(err), extra)


def _refusal(status: int, code: int, message: str, **headers: str) -> Reply:
    return _json(p.error_response(None, p.error(code, message)), status, headers)


def _session_ended() -> Reply:
    """A request of a session this process held, which has ended (2025-11-25: 404, and
    its client starts a new one)."""
    return _refusal(404, p.INVALID_REQUEST, "Session not found: it ended (its client "
                    "deleted it, or it was idle or past its lifetime); start a new session")


def _malformed_status(err: dict[str, Any]) -> int:
    """A request refused for its shape (no revision or capabilities in ``_meta``, params
    that are not an object) is 400 even where the code alone (-32602) would not say so."""
    status = status_for(err)
    return 400 if status == 200 else status


#: A route's handler: its reply, a JSON-RPC message to answer with as JSON, or None (it
#: answered itself, as a stream).
Handler = Callable[[Exchange], Awaitable["Reply | dict[str, Any] | None"]]


def _owner(http: Exchange) -> str | None:
    identity = http.identity
    return None if identity is None else session_owner(identity.issuer, identity.subject)


def _dropped(_note: dict[str, Any]) -> None:
    """Where a call's notifications go when its client takes JSON only (they would come
    before the answer, and a JSON answer has no room for them)."""


def _stream_writer(http: Exchange, limits: Limits, what: str,
                   write: Callable[[dict[str, Any]], Awaitable[None]] | None = None
                   ) -> StreamWriter:
    return client_stream(http, limits, what, write or (lambda message: http.write(_sse(message))))


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
            self._writer = _stream_writer(self._http, self._limits, "a call's stream",
                                          self._write)
            self._task = asyncio.ensure_future(self._writer.run())
        self._writer.put(message)

    async def _write(self, message: dict[str, Any]) -> None:
        if not self._http.started:
            await self._http.open_stream(SSE_HEADERS)
        await self._http.write(_sse(message))

    async def finish(self, answer: dict[str, Any]) -> None:
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


class HttpFace:
    """The HTTP server around one ``Answerer``; ``start`` binds, ``stop`` drains."""

    def __init__(self, answerer: Answerer, *, bind: str, port: int, api_keys: Iterable[bytes],
                 signer: SessionSigner, max_body_bytes: int, drain_s: float = 10.0,
                 names: Iterable[str] = (), sock: socket.socket | None = None,
                 oauth: bearer.ResourceSettings | None = None,
                 metrics: Callable[[], Awaitable[tuple[bytes, str]]] | None = None,
                 siblings: Siblings | None = None) -> None:
        """``sock``: a socket already bound to ``bind`` and listening, shared with other
        gateway processes (``processes``); else ``start`` binds one. ``oauth``: access
        tokens from these issuers are accepted (besides API keys, if any). ``metrics``:
        the Prometheus page (body, content type), served at ``/metrics`` to whoever passes
        the same checks as ``/mcp``. ``siblings``: the other copies of this
        ``serve --processes N``, to which requests whose state they hold are passed."""
        self._answerer = answerer
        self._bind, self._port = bind, port
        self._sock = sock
        self._keys = tuple(api_keys)
        if not self._keys and oauth is None and bind not in loopback_names():
            raise ConfigurationError(
                f"serving on {bind} (not loopback) needs API keys (TRUNKLINE_API_KEYS or "
                "--api-key-file) or OAuth (--oauth-issuer)")
        if oauth is not None and oauth.resource is None and bind not in loopback_names():
            raise ConfigurationError(
                f"serving on {bind} with OAuth needs --oauth-resource: the URL clients reach "
                "the gateway's /mcp by, which tokens are issued for")
        self._oauth = oauth
        #: Whether a request must show an API key or an access token (checked by
        #: ``_validator`` when ``oauth`` is given).
        self._authenticating = bool(self._keys) or oauth is not None
        #: Set by ``start`` (the resource URL may need the port bound).
        self._validator: bearer.Validator | None = None
        self._issuer_keys: list[IssuerKeys] = []
        self._prm: bytes = b""
        self._challenge_base = ""
        self._signer = signer
        self._limit = max_body_bytes
        self._drain_s = drain_s
        if oauth is not None and oauth.resource is not None:
            # The name clients reach it by, by definition.
            names = (*names, urlsplit(oauth.resource).hostname or "")
        #: The host names requests may be addressed to (``Host``).
        self._hosts = {n.strip("[]").lower() for n in names} | (
            {n.strip("[]") for n in loopback_names()} if bind in loopback_names() else {bind})
        #: The origins a browser's page of the gateway's own has (``Origin``), once the
        #: port is bound (``start``).
        self._origins: frozenset[tuple[str, str, int]] = frozenset()
        #: Open listen streams, and the lists (``tools``, ``prompts``, ``resources``) each
        #: was granted changes of.
        self._streams: dict[StreamWriter, frozenset[str]] = {}
        #: What the legacy sessions this process opened hold: a signed session id cannot
        #: carry what comes after it.
        self._legacy = LegacySessions(answerer)
        self._header_params_of: dict[str, tuple[mcp_headers.HeaderParam, ...]] = {}
        #: ``Host`` header values already judged (a client sends the same one every time).
        self._host_verdicts: dict[str, bool] = {}
        self._draining = False
        self._siblings = siblings
        #: What a bridged input round's token starts with when this process asked it.
        self._own_rounds = f"{TOKEN_PREFIX}{signer.instance}."
        self._server: HttpServer | None = None
        #: Where the siblings pass requests to this process (``siblings``), if any.
        self._sibling_server: HttpServer | None = None
        self.url: str | None = None
        self._routes: dict[str, dict[str, Handler]] = {
            ENDPOINT: {"POST": self._post, "GET": self._get, "DELETE": self._delete},
            "/healthz": {"GET": self._healthz},
            "/readyz": {"GET": self._readyz},
            "/status": {"GET": self._status},
        }
        self._metrics_page = metrics
        if metrics is not None:
            self._routes["/metrics"] = {"GET": self._metrics}
        if oauth is not None and oauth.resource is not None:
            self._add_metadata_routes(oauth.resource)
        self._unwatch = answerer.watch_lists(self._list_changed)

    async def start(self) -> str:
        await self._legacy.start()
        sock = self._sock or bind_socket(self._bind, self._port)
        host = f"[{self._bind}]" if sock.family == socket.AF_INET6 else self._bind
        port = sock.getsockname()[1]
        self.url = f"http://{host}:{port}{ENDPOINT}"
        self._origins = served_origins(
            self._hosts, port, () if self._oauth is None or self._oauth.resource is None
            else (self._oauth.resource,))
        if self._oauth is not None:  # before the first request can come in
            self._protect(self._oauth, self.url)
        limits = self._answerer.limits
        self._server = HttpServer(self, sock, self._drain_s, max_body=self._limit,
                                  limits=limits)
        await self._server.start()
        if self._siblings is not None:
            own = self._siblings.socket_path(self._siblings.index)
            self._sibling_server = HttpServer(self, bind_unix_socket(own), self._drain_s,
                                              max_body=self._limit, limits=limits,
                                              internal=True)
            await self._sibling_server.start()
        return self.url

    def _protect(self, oauth: bearer.ResourceSettings, url: str) -> None:
        """The token checks and metadata, now that the resource URL is known."""
        resource = oauth.resource or url
        if oauth.resource is None:
            self._add_metadata_routes(resource)
        self._issuer_keys = [IssuerKeys(issuer) for issuer in oauth.issuers]
        self._validator = bearer.Validator(
            bearer.TokenPolicy(oauth.issuers, oauth.audience or resource, oauth.scopes),
            {keys.issuer: keys for keys in self._issuer_keys})
        self._prm = orjson.dumps(bearer.protected_resource_metadata(
            resource, oauth.issuers, oauth.scopes))
        self._challenge_base = bearer.metadata_url(resource)

    def _add_metadata_routes(self, resource: str) -> None:
        for path in (*bearer.metadata_paths(resource),
                     bearer.PRM_SUFFIX + ENDPOINT):  # what a client of /mcp itself asks
            self._routes[path] = {"GET": self._metadata}

    async def __call__(self, exchange: Exchange) -> None:
        """One exchange, routed; a bug in the gateway is still a JSON-RPC answer (and a
        log line), not a bare 500."""
        reply: Reply | None = None
        result: bytes | None = None  # a JSON-RPC result: 200, no headers (most answers)
        try:
            methods = self._routes.get(exchange.path)
            handler = None if methods is None else methods.get(exchange.method)
            if handler is not None:
                answered = await handler(exchange)
                if type(answered) is not dict:
                    reply = answered
                elif "error" in answered:  # a JSON-RPC message is answered as JSON
                    reply = _answer(answered)
                else:
                    result = orjson.dumps(answered)
            elif methods is None:
                reply = Reply(404)
            else:
                reply = Reply(405, headers={"Allow": ", ".join(methods)})
        except Disconnected:
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not exchange.gone or task is None or task.uncancel() > 0:
                raise
            return
        except Exception:  # noqa: BLE001 - the client gets an answer; the operator the trace
            log.exception("%s %s failed inside the gateway", exchange.method, exchange.path)
            if exchange.started:
                return
            reply = _refusal(500, p.INTERNAL_ERROR, "internal error")
        finally:
            exchange.close()
        if result is not None or reply is not None:
            if result is not None:
                exchange.respond(200, result)
            else:
                exchange.respond(reply.status, reply.body, reply.headers, reply.content_type)
            if exchange.backed_up:
                await exchange.drained()
        elif exchange.started:
            await exchange.close_stream()

    async def stop(self) -> None:
        """Drain: refuse new requests, end the streams, let calls in flight finish within
        the drain deadline (then they are cancelled), release the port."""
        self._draining = True
        if self._server is not None:
            self._server.stop_accepting()
        if self._sibling_server is not None:
            self._sibling_server.stop_accepting()
        self._unwatch()
        for stream in self._streams:
            stream.close()
        # Legacy calls outlive their connections: they get the drain deadline.
        await self._legacy.drain(self._drain_s)
        if self._server is not None:
            await self._server.stop()
        if self._sibling_server is not None:
            await self._sibling_server.stop()
        for keys in self._issuer_keys:
            await keys.aclose()

    # -- checks every request passes ---------------------------------------------------

    async def _gate(self, request: Exchange) -> Reply | None:
        refused = self._screen(request)
        if refused is None and self._authenticating:
            refused = await self._authenticate(request)
        return refused

    def _screen(self, request: Exchange) -> Reply | None:
        """The checks before authentication: draining, Host, Origin."""
        if self._draining:
            return _refusal(503, p.INTERNAL_ERROR, "the gateway is stopping",
                            **{"Retry-After": "1"})
        if not self._host_allowed(request.headers.get("host")):
            return _refusal(403, p.INVALID_REQUEST, "unknown Host")
        origin = request.headers.get("origin")  # only browsers send one
        if origin is not None and not origin_allowed(origin, self._origins):
            return _refusal(403, p.INVALID_REQUEST, "Origin not allowed")
        return None

    async def _authenticate(self, request: Exchange) -> Reply | None:
        """An API key, or else an access token (``bearer``), when either is configured;
        a token's identity is attached to the request."""
        authorization = request.headers.get("authorization")
        if self._keys and key_accepted(authorization, self._keys):
            return None
        if self._validator is None:
            if not self._keys:
                return None
            return _refusal(401, p.INVALID_REQUEST, "an API key is required",
                            **{"WWW-Authenticate": 'Bearer realm="trunkline"'})
        verdict = await self._validator.check(authorization)
        if isinstance(verdict, bearer.Identity):
            request.identity = verdict
            return None
        # The reason only: never the token (a flood of bad ones is not worth more).
        log.debug("%s %s refused: %s", request.method, request.path, verdict.reason)
        if verdict.status == 503:
            return _refusal(503, p.INTERNAL_ERROR, verdict.reason, **{"Retry-After": "5"})
        challenge = bearer.challenge(self._challenge_base, self._validator.policy.scopes,
                                     verdict if verdict.error else None)
        return _refusal(verdict.status, p.INVALID_REQUEST, verdict.reason,
                        **{"WWW-Authenticate": challenge})

    async def _metadata(self, http: Exchange) -> Reply:
        """The RFC 9728 document: public, so any page may read it."""
        return Reply(200, self._prm, {"Access-Control-Allow-Origin": "*",
                                      "Cache-Control": "max-age=300"})

    def _session(self, http: Exchange, session_id: str | None) -> LegacySession | None:
        """The legacy session an id stands for, if this key signed it and it is the
        requester's own (one opened with a token answers only that token's identity)."""
        session = self._signer.verify(session_id) if session_id else None
        if session is None or session.owner != _owner(http):
            return None
        return session

    def _host_allowed(self, host: str | None) -> bool:
        if host is None:
            return False
        verdict = self._host_verdicts.get(host)
        if verdict is None:
            verdict = host_allowed(host, self._hosts)
            if len(self._host_verdicts) < 1024:  # bounded: Host is the client's to choose
                self._host_verdicts[host] = verdict
        return verdict

    # -- POST: one message ---------------------------------------------------------------

    def _post(self, request: Exchange) -> Awaitable[Reply | dict[str, Any] | None]:
        """One JSON-RPC message. Not a coroutine itself when nothing must be waited for
        before the message is read (no authentication to check, the body arrived): the
        answer's own coroutine is what the handler awaits, one frame fewer for every call
        in flight."""
        if self._authenticating or not request.body_ended:
            return self._post_after_waiting(request)
        refused = self._screen(request)
        if refused is not None:
            return ready(refused)
        body = request.ended_body(self._limit)
        if body is None:  # over the limit: say by how much, if the client said its length
            return ready(self._oversized(request) or self._too_long())
        return self._message(request, body)

    async def _post_after_waiting(self, request: Exchange) -> Reply | dict[str, Any] | None:
        refused = await self._gate(request) or self._oversized(request)
        if refused is not None:
            return refused
        return await self._message(request, await request.body(self._limit))

    def _oversized(self, request: Exchange) -> Reply | None:
        length = request.content_length()
        if length is not None and length > self._limit:
            return _refusal(413, p.INVALID_REQUEST,
                            f"a body of {length} bytes, over the limit of {self._limit} bytes")
        return None

    def _too_long(self) -> Reply:
        return _refusal(413, p.INVALID_REQUEST, f"a body over the limit of {self._limit} bytes")

    def _message(self, request: Exchange, body: bytes | None
                 ) -> Awaitable[Reply | dict[str, Any] | None]:
        """The answer to a POST's body (None: it was over the limit)."""
        if body is None:
            return ready(self._too_long())
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return ready(_refusal(400, p.PARSE_ERROR, f"Parse error: {exc}"))
        if wide_integer_at(body) is not None:  # orjson made it a float: refused, not rounded
            return ready(self._not_a_request(p.wide_integer(message, body), None))
        refused = check_version_header(request.headers.get("mcp-protocol-version"), message)
        if refused is not None:
            return ready(_json(refused, _malformed_status(refused["error"])))
        session_id = request.headers.get("mcp-session-id")
        session = self._session(request, session_id) if session_id else None
        inbound = p.read(message, session.version if session else None)
        if session_id and session is None and not (isinstance(inbound, p.Request)
                                                  and inbound.era is p.ClientEra.MODERN):
            return ready(_refusal(404, p.INVALID_REQUEST, "Session not found"))
        if session is not None and not (isinstance(inbound, p.Request)
                                        and inbound.era is p.ClientEra.MODERN):
            if not session.held:
                return self._elsewhere(request, body, session.instance)
            if not self._legacy.find(session_id):
                return ready(_session_ended())
        if type(inbound) is p.Request and inbound.era is p.ClientEra.MODERN:
            state = inbound.params.get("requestState")
            if type(state) is str and state.startswith(TOKEN_PREFIX) \
                    and not state.startswith(self._own_rounds):
                # An answer to an input round another process asked: there if a sibling.
                index = self._sibling_index(request, state[len(TOKEN_PREFIX):].split(".")[0])
                if index is not None:
                    return self._forwarded(request, body, index)
        if type(inbound) is not p.Request:
            return ready(self._not_a_request(inbound, session_id))
        if "traceparent" in request.headers:
            return self._carrying(request, inbound, session_id, session)
        return self._request(request, inbound, session_id, session)

    def _sibling_index(self, http: Exchange, instance: str) -> int | None:
        """The sibling copy named ``instance``, when a request may be passed to it (one
        that came from a sibling never is: one hop at most)."""
        if self._siblings is None or http.internal:
            return None
        return self._siblings.index_of(instance)

    def _elsewhere(self, http: Exchange, body: bytes | None, instance: str
                   ) -> Awaitable[Reply | None]:
        """A request of a legacy session another gateway process opened: passed to it if it
        is a sibling copy, else 404 saying why (a client starts a new session on 404)."""
        index = self._sibling_index(http, instance)
        if index is not None:
            return self._forwarded(http, body, index)
        if instance == self._signer.instance:
            where = (f"gateway process {instance!r}, which opened it, was started again "
                     "since, and what the session held is gone")
        else:
            where = (f"it was opened by gateway process {instance!r}, which holds its state, "
                     f"and this is {self._signer.instance!r}: route every request of a "
                     "session to the process that opened it (behind a load balancer: "
                     "affinity on Mcp-Session-Id)")
        return ready(_refusal(404, p.INVALID_REQUEST,
                              f"Session not found here: {where}; start a new session"))

    async def _forwarded(self, http: Exchange, body: bytes | None, index: int
                         ) -> Reply | None:
        assert self._siblings is not None
        try:
            answered = await self._siblings.forward(http, body, index)
        except SiblingUnreachable as exc:
            return _refusal(404, p.INVALID_REQUEST, f"Session not found: {exc}; start a new "
                            "session")
        if answered is None:
            return None
        status, content, headers = answered
        return Reply(status, content, headers, content_type=None)

    def _not_a_request(self, inbound: p.Inbound, session_id: str | None) -> Reply:
        """The answer to a POST of anything but a request: a refusal, or 202 Accepted."""
        if isinstance(inbound, p.Refused):
            return _json(p.error_response(inbound.id, inbound.error),
                         _malformed_status(inbound.error))
        if isinstance(inbound, p.Response):
            if not self._legacy.answered(inbound, session_id):
                log.info("a client's answer to no question of its session: dropped")
        elif isinstance(inbound, p.Notification) and session_id and \
                inbound.method == "notifications/cancelled":
            # A legacy call outlives its connection; this is how its client ends it.
            self._legacy.cancelled(session_id, inbound.params.get("requestId"))
        return Reply(202)

    def _carrying(self, http: Exchange, request: p.Request, session_id: str | None,
                  session: LegacySession | None) -> Awaitable[Reply | dict[str, Any] | None]:
        """A request whose W3C headers carry a trace context: with tracing on, the ambient
        context while it is served; with tracing off, the request's own when its
        ``_meta`` names none, for the answerer to pass on."""
        traced = self._answerer.host.telemetry.incoming(http.headers)
        if traced is not None:
            return self._traced_request(traced, http, request, session_id, session)
        if "traceparent" not in request.meta:
            request = msgspec.structs.replace(request, trace_headers=picked(http.headers))
        return self._request(http, request, session_id, session)

    async def _traced_request(self, traced: otel_context.Context, http: Exchange,
                              request: p.Request, session_id: str | None,
                              session: LegacySession | None) -> Reply | dict[str, Any] | None:
        # The W3C headers' context is the ambient one while the request is served (its
        # SERVER span's parent, or a link when the request's _meta names a parent).
        token = otel_context.attach(traced)
        try:
            return await self._request(http, request, session_id, session)
        finally:
            otel_context.detach(token)

    def _request(self, http: Exchange, request: p.Request, session_id: str | None,
                 session: LegacySession | None) -> Awaitable[Reply | dict[str, Any] | None]:
        """The answer to a request, to await: the handler's own coroutine for one served
        from behind the gateway (this function is not a coroutine itself: one frame fewer
        for every call in flight), a ready reply for the rest."""
        if request.era is p.ClientEra.MODERN:
            mismatch = check_modern_headers(http.headers, request, self._header_params(request))
            if mismatch is not None:
                return ready(_json(p.error_response(request.id, mismatch), status_for(mismatch)))
        elif request.method != "initialize":
            version = http.headers.get("mcp-protocol-version")
            if version is not None and version != request.version:
                return ready(_json(p.error_response(request.id, p.error(
                    p.INVALID_REQUEST, f"MCP-Protocol-Version {version!r} is not this "
                    f"session's ({request.version})")), 400))
        # Whom the request counts against (``admission``): a legacy session, else the
        # connection (a modern client's requests are one at a time on each of its).
        legacy = session is not None and request.era is p.ClientEra.LEGACY
        if request.method == CALL:
            if legacy and "text/event-stream" in http.headers.get("accept", ""):
                # Its stream opens at once: an overload must be told before, as a status.
                admitted = self._answerer.admit_call(request, session_id)
                if type(admitted) is dict:
                    return ready(_answer(p.error_response(request.id, admitted)))
                return self._legacy_call(http, request, session_id, session, admitted)
            key = session_id if legacy else http.connection
            return self._relayed(http, lambda notify: self._answerer.call(
                request, notify, NO_CLIENT, key))
        if request.method == LISTEN and request.era is p.ClientEra.MODERN:
            return self._listen(http, request)
        if request.method in SUBSCRIBING and session_id and request.era is p.ClientEra.LEGACY:
            return self._subscription_reply(request, session_id)
        answer = self._answerer.immediate(request)
        if answer is None:
            client = NO_CLIENT if session_id is None or request.era is p.ClientEra.MODERN \
                else Client(log_level=self._legacy.log_level(session_id))
            key = session_id if legacy else http.connection
            return self._relayed(http, lambda notify: self._answerer.from_fleet(
                request, client, notify, key))
        headers = {}
        if request.method == "logging/setLevel" and "result" in answer and session_id:
            self._legacy.set_log_level(session_id, request.params["level"])
        if request.method == "initialize" and "result" in answer:
            declared = request.params.get("capabilities")
            limits, now = self._answerer.limits, time.time()
            minted = self._signer.mint(
                answer["result"]["protocolVersion"], declared if isinstance(declared, dict)
                else None, now=now, owner=_owner(http), lifetime_s=limits.session_lifetime_s,
                idle_s=limits.session_idle_s)
            refused = self._legacy.opened(minted, now + limits.session_lifetime_s)
            if refused is not None:
                return ready(_answer(p.error_response(request.id, refused)))
            headers["Mcp-Session-Id"] = minted
        return ready(_answer(answer, headers))

    async def _subscription_reply(self, request: p.Request, session_id: str) -> Reply:
        return _answer(await self._legacy.subscription(request, session_id))

    def _header_params(self, request: p.Request) -> tuple[mcp_headers.HeaderParam, ...]:
        """The ``x-mcp-header`` arguments of the tool a ``tools/call`` names (as served),
        found once per tool and catalog (walking a schema on every call cost more than the
        rest of the header checks together)."""
        name = request.params.get("name")
        if request.method != CALL or not isinstance(name, str) or self._answerer.tool_search:
            return ()  # in tool-search mode a call names one of the gateway's own tools
        known = self._header_params_of.get(name)
        if known is not None:
            return known
        try:
            entry = self._answerer.host.catalog.lookup(name)
            found = mcp_headers.tool_header_params(entry.input_schema)
        except (KeyError, mcp_headers.InvalidToolHeaders):
            return ()
        self._header_params_of[name] = found
        return found

    def _relayed(self, http: Exchange,
                 answer: Callable[[Callable[[dict[str, Any]], None]],
                                  Awaitable[dict[str, Any]]]
                 ) -> Awaitable[Reply | dict[str, Any] | None]:
        """A request answered from behind the gateway: as an SSE stream when the client
        accepts one and something (progress, a log message) comes before the answer, else
        as JSON, so that an error keeps its status. ``answer(notify)`` runs it, in the
        handler's task; a writer task exists only once a stream has to open. For a client
        that accepts JSON only this is ``answer``'s own coroutine, whose message the
        handler answers with (no frame of this one waits with the call)."""
        # The client closing the exchange is the cancellation (2026-07-28).
        http.cancel_when_gone()
        if "text/event-stream" not in http.headers.get("accept", ""):
            return answer(_dropped)
        return self._streamed(http, answer)

    async def _streamed(self, http: Exchange,
                        answer: Callable[[Callable[[dict[str, Any]], None]],
                                         Awaitable[dict[str, Any]]]) -> Reply | None:
        stream = _LazyStream(http, self._answerer.limits)
        try:
            message = await answer(stream.add)
            if not stream.opened:
                # Nothing came before the answer: plain JSON, whose status can still say
                # what an error is (-32021 is 400, an overload 429).
                return _answer(message)
            await stream.finish(message)
        finally:
            await stream.aclose()
        return None

    async def _legacy_call(self, http: Exchange, request: p.Request, session_id: str,
                           session: LegacySession, admitted: Admitted) -> Reply | None:
        """A legacy session's call (``LegacySessions.call``), ``admitted`` under its session,
        which it counts against until it ends."""
        refused = await self._legacy.call(http, request, session_id, session.capabilities,
                                          admitted)
        return None if refused is None else _answer(refused)

    async def _listen(self, http: Exchange, request: p.Request) -> dict[str, Any] | None:
        http.cancel_when_gone()

        def write(note: dict[str, Any]) -> Awaitable[None]:
            params = {**note.get("params", {}), "_meta": {SUBSCRIPTION_ID: request.id}}
            return http.write(_sse({**note, "params": params}))
        stream = _stream_writer(http, self._answerer.limits, "a listen stream", write)
        watched = await self._answerer.watch_listed(
            request, lambda params: stream.put(resource_updated(params)))
        if isinstance(watched, dict):
            return p.error_response(request.id, watched)
        resources, stop = watched
        # Nothing waits between the watch and here: it is stopped however this ends.
        try:
            granted = listen_grant(request, resources)
            await http.open_stream(SSE_HEADERS)
            await http.write(_sse(p.notification(
                "notifications/subscriptions/acknowledged",
                {"_meta": {SUBSCRIPTION_ID: request.id}, "notifications": granted})))
            if not granted:
                await http.write(_sse(p.response(request.id, {"resultType": "complete"})))
                return None
            self._streams[stream] = granted_lists(granted)
            await stream.run()
            # The gateway is stopping: the subscription ends gracefully.
            await http.write(_sse(p.response(request.id, {"resultType": "complete"})))
        finally:
            self._streams.pop(stream, None)
            stop()
        return None

    # -- GET / DELETE: a legacy session's stream, and its end ----------------------------------

    async def _get(self, http: Exchange) -> Reply | None:
        refused = await self._gate(http)
        if refused is not None:
            return refused
        session_id = http.headers.get("mcp-session-id")
        session = self._session(http, session_id) if session_id else None
        if session is None:
            return Reply(405, headers={"Allow": "POST"})
        if not session.held:
            return await self._elsewhere(http, None, session.instance)
        if not self._legacy.find(session_id):
            return _session_ended()
        last_event_id = http.headers.get("last-event-id")
        if last_event_id is not None:
            if not await self._legacy.resume(http, session_id, last_event_id):
                return _refusal(404, p.INVALID_REQUEST,
                                "no stream of this session to resume from that event here")
            return None
        await self._legacy.changes(http, session_id)
        return None

    async def _delete(self, http: Exchange) -> Reply | None:
        """A legacy session's client ends it (2025-11-25): everything it held goes at once,
        and its id is 404 from then on. Without a session (or with an id no replica
        signed) there is nothing to end: 405, this endpoint takes POSTs."""
        refused = await self._gate(http)
        if refused is not None:
            return refused
        session_id = http.headers.get("mcp-session-id")
        session = self._session(http, session_id) if session_id else None
        if session is None or not session_id:
            return Reply(405, headers={"Allow": "POST"})
        if not session.held:
            return await self._elsewhere(http, None, session.instance)
        if not self._legacy.end(session_id):
            return _session_ended()
        return Reply(200)

    # -- health ---------------------------------------------------------------------------

    async def _metrics(self, http: Exchange) -> Reply:
        refused = await self._gate(http)
        if refused is not None:
            return refused
        assert self._metrics_page is not None
        body, content_type = await self._metrics_page()
        return Reply(200, body, {"Content-Type": content_type})

    async def _healthz(self, http: Exchange) -> Reply:
        return _json({"status": "ok"})

    async def _readyz(self, http: Exchange) -> Reply:
        down = [s.name for s in self._answerer.host.servers() if s.state.value == "unavailable"]
        ready = not self._draining
        return _json({"ready": ready, "tools": len(self._answerer.host.tools()),
                      "unavailable": down}, 200 if ready else 503)

    async def _status(self, http: Exchange) -> Reply:
        """Each server's state, era, calls in flight, latency, restarts and last error
        (``admin``), for ``trunkline status``; checked like ``/mcp``."""
        refused = await self._gate(http)
        if refused is not None:
            return refused
        return _json({**status_document(self._answerer.host),
                      "legacy_sessions": self._legacy.status()},
                     headers={"Cache-Control": "no-store"})

    def _list_changed(self, which: str) -> None:
        if which == "tools":
            self._header_params_of.clear()
        note = p.list_changed(which)
        for stream, lists in self._streams.items():
            if which in lists:
                stream.put(note)
        self._legacy.list_changed(note)
