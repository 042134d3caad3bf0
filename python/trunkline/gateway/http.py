"""The gateway over Streamable HTTP: ``trunkline serve CONFIG --http HOST:PORT``.

One endpoint, ``/mcp``, serving both eras (each request an ``exchange`` of the gateway's own
HTTP/1.1 server, ``http_server``). The face is in parts: ``HttpFace`` here is the router
(the routes, the checks every request passes, authentication, the protected resource
metadata, health, status and metrics); a POSTed message is answered by ``http_post`` (a
request answered from behind the gateway goes out by ``http_relay``), and everything of the
2025-11-25 era by ``legacy_sessions``:

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
status``), behind the same checks as ``/mcp``; everything under ``/admin`` (the operator
API and its pages, ``operator_api``), behind the admin credential (``admin_access``) after
the same Host and Origin checks; ``Host`` checked against the names the
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
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import orjson

from ..auth.secret import Secret
from ..auth.user_sign_in import SignIns
from ..errors import ConfigurationError
from ..loop.awaitables import ready
from ..parent.user_credentials import SubjectTokens
from ..policy.identity import Identity
from . import bearer
from . import protocol as p
from .admin import status_document
from .answers import Answerer
from .api_keys import ApiKeys
from .exchange import Disconnected, Exchange
from .http_post import PostHandler
from .http_rules import (
    SessionSigner,
    host_allowed,
    loopback_names,
    origin_allowed,
    served_origins,
)
from .http_server import HttpServer
from .issuer_keys import IssuerKeys
from .legacy_sessions import LegacyRequests, LegacySessions
from .person_check import PersonCheck
from .processes import bind_socket, bind_unix_socket
from .replies import Handled, Handler, HttpReply, answer, json_reply, refusal
from .siblings import Siblings
from .sign_in_pages import SignInPages

log = logging.getLogger("trunkline.gateway")

ENDPOINT = "/mcp"
#: The operator's paths (``operator_api``).
ADMIN = "/admin"
#: Binds on every address: no one name clients reach the gateway by comes with them.
_WILDCARDS = frozenset({"0.0.0.0", "::"})


class HttpFace:
    """The HTTP server around one ``Answerer``, and its router: ``start`` binds, ``stop``
    drains."""

    def __init__(self, answerer: Answerer, *, bind: str, port: int,
                 api_keys: ApiKeys | Iterable[bytes],
                 signer: SessionSigner, max_body_bytes: int, drain_s: float = 10.0,
                 names: Iterable[str] = (), sock: socket.socket | None = None,
                 oauth: bearer.ResourceSettings | None = None,
                 metrics: Callable[[], Awaitable[tuple[bytes, str]]] | None = None,
                 siblings: Siblings | None = None,
                 sign_ins: SignIns | None = None,
                 subject_tokens: SubjectTokens | None = None,
                 sign_in_client: tuple[str, Secret | None] | None = None,
                 drain_notice_s: float = 0.0,
                 readiness: Callable[[], tuple[bool, list[str]]] | None = None) -> None:
        """``sock``: a socket already bound to ``bind`` and listening, shared with other
        gateway processes (``processes``); else ``start`` binds one. ``oauth``: access
        tokens from these issuers are accepted (besides API keys, if any). ``metrics``:
        the Prometheus page (body, content type), served at ``/metrics`` to whoever passes
        the same checks as ``/mcp``. ``siblings``: the other copies of this
        ``serve --processes N``, to which requests whose state they hold are passed.
        ``sign_ins``: where users sign in to ``per_user`` servers (its two pages are
        served, ``sign_in_pages``); ``subject_tokens``: where each OAuth caller's token is
        kept for servers that exchange it; ``sign_in_client``: the gateway's client id
        and secret at its own issuers, with which a sign-in's browser proves its person
        (``person_check``). ``drain_notice_s``: on ``stop``, ``/readyz`` answers 503 for
        that long first while everything else still serves. ``readiness``: whether a
        reload is being made and which servers are still starting, for ``/readyz``."""
        self._answerer = answerer
        self._drain_notice_s = drain_notice_s
        self._readiness = readiness
        #: Stopping after the drain notice: not ready, still serving.
        self._leaving = False
        self._bind, self._port = bind, port
        self._sock = sock
        self._keys = api_keys if isinstance(api_keys, ApiKeys) else \
            ApiKeys.unnamed(api_keys)
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
        self._limit = max_body_bytes
        self._drain_s = drain_s
        if oauth is not None and oauth.resource is not None:
            # The name clients reach it by, by definition.
            names = (*names, urlsplit(oauth.resource).hostname or "")
        if bind in _WILDCARDS and not names:
            log.warning("serving on %s without --host-name: only requests addressed to Host "
                        "%s are answered; name the ones clients use (a DNS name, a load "
                        "balancer's address) with --host-name", bind, bind)
        #: The host names requests may be addressed to (``Host``).
        self._hosts = {n.strip("[]").lower() for n in names} | (
            {n.strip("[]") for n in loopback_names()} if bind in loopback_names() else {bind})
        #: The origins a browser's page of the gateway's own has (``Origin``), once the
        #: port is bound (``start``).
        self._origins: frozenset[tuple[str, str, int]] = frozenset()
        #: What the legacy sessions this process opened hold: a signed session id cannot
        #: carry what comes after it.
        self._legacy = LegacySessions(answerer)
        self._legacy_requests = LegacyRequests(self._legacy, answerer, signer, siblings)
        self._posts = PostHandler(answerer, self._legacy_requests, signer.instance, siblings)
        #: ``Host`` header values already judged (a client sends the same one every time).
        self._host_verdicts: dict[str, bool] = {}
        self._draining = False
        self._siblings = siblings
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
        self._sign_in_pages = SignInPages(sign_ins) if sign_ins is not None else None
        self._sign_ins = sign_ins
        self._sign_in_client = sign_in_client
        self._person_check: PersonCheck | None = None
        self._subject_tokens = subject_tokens
        if sign_ins is not None:
            # The name browsers reach it by, for the sign-in pages.
            self._hosts.add((urlsplit(sign_ins.base_url).hostname or "").lower())
        self._metrics_page = metrics
        if metrics is not None:
            self._routes["/metrics"] = {"GET": self._metrics}
        if oauth is not None and oauth.resource is not None:
            self._add_metadata_routes(oauth.resource)
        self._unwatch = answerer.watch_lists(self._list_changed)
        #: Every path under ``/admin``, once screened (``operator_api``); None: those
        #: paths are 404 (no admin credential is configured).
        self.admin: Callable[[Exchange], Awaitable[HttpReply | None]] | None = None

    @property
    def token_validator(self) -> bearer.Validator | None:
        """The access tokens' validator once started, when OAuth is configured (the admin
        credential's tokens are checked by it: ``admin_access``)."""
        return self._validator

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
            if self._sign_in_pages is not None and self._sign_ins is not None \
                    and self._sign_in_client is not None:
                client_id, secret = self._sign_in_client
                self._person_check = PersonCheck(
                    client_id=client_id, client_secret=secret,
                    issuers={keys.issuer: keys for keys in self._issuer_keys},
                    sign_ins=self._sign_ins, resource=self._oauth.resource or self.url)
                self._sign_in_pages.check_persons(self._person_check)
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
            {keys.issuer: keys for keys in self._issuer_keys},
            claim_names=self._answerer.claim_names)
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
        reply: HttpReply | None = None
        result: bytes | None = None  # a JSON-RPC result: 200, no headers (most answers)
        try:
            methods = self._routes.get(exchange.path)
            handler = None if methods is None else methods.get(exchange.method)
            if handler is not None:
                answered = await handler(exchange)
                if isinstance(answered, bytes):  # a result passed on as it came
                    result = answered
                elif not isinstance(answered, dict):
                    reply = answered
                elif "error" in answered:  # a JSON-RPC message is answered as JSON
                    reply = answer(answered)
                else:
                    result = orjson.dumps(answered)
            elif methods is None and self.admin is not None and (
                    exchange.path == ADMIN or exchange.path.startswith(ADMIN + "/")):
                reply = self._screen(exchange) or await self.admin(exchange)
            elif methods is None and self._sign_in_pages is not None and \
                    self._sign_in_pages.serves(exchange.path):
                reply = self._screen(exchange) or await self._sign_in_pages(exchange)
            elif methods is None:
                reply = HttpReply(404)
            else:
                reply = HttpReply(405, headers={"Allow": ", ".join(methods)})
        except Disconnected:
            return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not exchange.gone or task is None or task.uncancel() > 0:
                raise
            return
        except Exception:  # the client gets an answer; the operator the trace
            log.exception("%s %s failed inside the gateway", exchange.method, exchange.path)
            if exchange.started:
                return
            reply = refusal(500, p.INTERNAL_ERROR, "internal error")
        finally:
            exchange.close()
        if result is not None:
            exchange.respond(200, result)
        elif reply is not None:
            exchange.respond(reply.status, reply.body, reply.headers, reply.content_type)
        else:
            if exchange.started:
                await exchange.close_stream()
            return
        if exchange.backed_up:
            await exchange.drained()

    async def stop(self) -> None:
        """Drain: refuse new requests, end the streams, let calls in flight finish within
        the drain deadline (then they are cancelled), release the port. With a drain
        notice, ``/readyz`` answers 503 for that long first, everything else served."""
        if self._drain_notice_s > 0 and self._server is not None and not self._draining:
            self._leaving = True
            log.info("stopping in %g s: /readyz answers 503 meanwhile", self._drain_notice_s)
            await asyncio.sleep(self._drain_notice_s)
        self._draining = True
        if self._server is not None:
            self._server.stop_accepting()
        if self._sibling_server is not None:
            self._sibling_server.stop_accepting()
        self._unwatch()
        self._posts.stop()
        # Legacy calls outlive their connections: they get the drain deadline.
        await self._legacy.drain(self._drain_s)
        if self._server is not None:
            await self._server.stop()
        if self._sibling_server is not None:
            await self._sibling_server.stop()
        for keys in self._issuer_keys:
            await keys.aclose()
        if self._person_check is not None:
            await self._person_check.aclose()

    # -- checks every request passes ---------------------------------------------------

    async def _gate(self, request: Exchange) -> HttpReply | None:
        refused = self._screen(request)
        if refused is None and self._authenticating:
            refused = await self._authenticate(request)
        return refused

    def _screen(self, request: Exchange) -> HttpReply | None:
        """The checks before authentication: draining, Host, Origin."""
        if self._draining:
            return refusal(503, p.INTERNAL_ERROR, "the gateway is stopping",
                            **{"Retry-After": "1"})
        if not self._host_allowed(request.headers.get("host")):
            return refusal(403, p.INVALID_REQUEST, "unknown Host: a name the gateway is "
                           "reached by is named with serve --host-name")
        origin = request.headers.get("origin")  # only browsers send one
        if origin is not None and not origin_allowed(origin, self._origins):
            return refusal(403, p.INVALID_REQUEST, "Origin not allowed")
        return None

    async def _authenticate(self, request: Exchange) -> HttpReply | None:
        """An API key, or else an access token (``bearer``), when either is configured;
        a token's identity is attached to the request."""
        authorization = request.headers.get("authorization")
        if self._keys:
            named = self._keys.identity_of(authorization)
            if named is not None:
                request.identity = named
                return None
        if self._validator is None:
            if not self._keys:
                return None
            return refusal(401, p.INVALID_REQUEST, "an API key is required",
                            **{"WWW-Authenticate": 'Bearer realm="trunkline"'})
        verdict = await self._validator.check(authorization)
        if isinstance(verdict, Identity):
            request.identity = verdict
            if self._subject_tokens is not None and authorization is not None:
                # Kept for the servers that trade it (``exchange``): valid, just checked.
                self._subject_tokens.keep(verdict, authorization.partition(" ")[2].strip())
            return None
        # The reason only: never the token (a flood of bad ones is not worth more).
        log.debug("%s %s refused: %s", request.method, request.path, verdict.reason)
        if verdict.status == 503:
            return refusal(503, p.INTERNAL_ERROR, verdict.reason, **{"Retry-After": "5"})
        challenge = bearer.challenge(self._challenge_base, self._validator.policy.scopes,
                                     verdict if verdict.error else None)
        return refusal(verdict.status, p.INVALID_REQUEST, verdict.reason,
                        **{"WWW-Authenticate": challenge})

    async def _metadata(self, http: Exchange) -> HttpReply:
        """The RFC 9728 document: public, so any page may read it."""
        return HttpReply(200, self._prm, {"Access-Control-Allow-Origin": "*",
                                      "Cache-Control": "max-age=300"})

    def _host_allowed(self, host: str | None) -> bool:
        if host is None:
            return False
        verdict = self._host_verdicts.get(host)
        if verdict is None:
            verdict = host_allowed(host, self._hosts)
            if len(self._host_verdicts) < 1024:  # bounded: Host is the client's to choose
                self._host_verdicts[host] = verdict
        return verdict

    # -- /mcp ------------------------------------------------------------------------------

    def _post(self, request: Exchange) -> Awaitable[Handled]:
        """One JSON-RPC message (``http_post``), once screened and authenticated and its
        body read within the limit. Not a coroutine itself when nothing must be waited for
        before the message is read (no authentication to check, the body arrived): the
        answer's own coroutine is what the router awaits, one frame fewer for every call
        in flight."""
        if self._authenticating or not request.body_ended:
            return self._post_after_waiting(request)
        refused = self._screen(request)
        if refused is not None:
            return ready(refused)
        body = request.ended_body(self._limit)
        if body is None:  # over the limit: say by how much, if the client said its length
            return ready(self._oversized(request) or self._too_long())
        return self._posts.message(request, body)

    async def _post_after_waiting(self, request: Exchange) -> Handled:
        refused = await self._gate(request) or self._oversized(request)
        if refused is not None:
            return refused
        body = await request.body(self._limit)
        if body is None:
            return self._too_long()
        return await self._posts.message(request, body)

    def _oversized(self, request: Exchange) -> HttpReply | None:
        length = request.content_length()
        if length is not None and length > self._limit:
            return refusal(413, p.INVALID_REQUEST,
                           f"a body of {length} bytes, over the limit of {self._limit} bytes")
        return None

    def _too_long(self) -> HttpReply:
        return refusal(413, p.INVALID_REQUEST, f"a body over the limit of {self._limit} bytes")

    async def _get(self, http: Exchange) -> HttpReply | None:
        """A legacy session's stream (``LegacyRequests.get``)."""
        refused = await self._gate(http)
        if refused is not None:
            return refused
        return await self._legacy_requests.get(http)

    async def _delete(self, http: Exchange) -> HttpReply | None:
        """A legacy session's end (``LegacyRequests.delete``)."""
        refused = await self._gate(http)
        if refused is not None:
            return refused
        return await self._legacy_requests.delete(http)

    # -- health ---------------------------------------------------------------------------

    async def _metrics(self, http: Exchange) -> HttpReply:
        refused = await self._gate(http)
        if refused is not None:
            return refused
        assert self._metrics_page is not None
        body, content_type = await self._metrics_page()
        return HttpReply(200, body, {"Content-Type": content_type})

    async def _healthz(self, http: Exchange) -> HttpReply:
        return json_reply({"status": "ok"})

    async def _readyz(self, http: Exchange) -> HttpReply:
        """Whether to send this process requests (503 once it is stopping, from the drain
        notice on), the tools served, the servers unavailable, and whether a reload is
        being made and which servers are still starting."""
        host = self._answerer.host
        down = [s.name for s in host.servers() if s.state.value == "unavailable"]
        reloading, starting = self._readiness() if self._readiness is not None else (
            False, [s.name for s in host.servers()
                    if s.state.value in ("starting", "negotiating")])
        ready = not (self._draining or self._leaving)
        return json_reply({"ready": ready, "tools": len(host.catalog.entries),
                           "unavailable": down, "reloading": reloading,
                           "starting": starting}, 200 if ready else 503)

    async def _status(self, http: Exchange) -> HttpReply:
        """Each server's state, era, calls in flight, latency, restarts and last error
        (``admin``), for ``trunkline status``; checked like ``/mcp``."""
        refused = await self._gate(http)
        if refused is not None:
            return refused
        auditor = self._answerer.auditor
        return json_reply({**status_document(self._answerer.host,
                                             None if auditor is None else auditor.log),
                      "legacy_sessions": self._legacy.status()},
                     headers={"Cache-Control": "no-store"})

    def _list_changed(self, which: str) -> None:
        self._posts.list_changed(which)
        self._legacy.list_changed(which)


__all__ = ["ENDPOINT", "HttpFace", "HttpReply"]
