"""The answer to one POSTed JSON-RPC message (its body read, past the HTTP face's screening
and authentication: ``http``).

A modern (2026-07-28) request is stateless: its headers are checked against its body
(``http_rules``); a ``tools/call``, or what is asked of the servers behind, answers as JSON
or as an SSE stream (``http_relay``); ``subscriptions/listen`` is an SSE stream held open
until the client closes it, told of every change of the lists it was granted; a modern
client's answer to an input round another process asked (its ``requestState`` names the
process) is passed to that process when it is a sibling copy (``siblings``). Whatever the
2025-11-25 era sends (a request in or without a session, a client's answer to a question,
its ``notifications/cancelled``) is ``legacy_sessions``'.

A client's W3C trace context headers (``traceparent``, ``tracestate``, ``baggage``) are its
request's when the request's ``_meta`` names none (``answers`` says where they go).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Hashable
from typing import Any

import msgspec
import orjson
from opentelemetry import context as otel_context

from .._codec import wide_integer_at
from ..loop.awaitables import ready
from ..parent.input_bridge import TOKEN_PREFIX
from ..policy.identity import LOCAL
from ..protocol import headers as mcp_headers
from ..protocol.listen import SUBSCRIPTION_ID
from ..telemetry.carried import picked
from . import protocol as p
from .answers import (
    CALL,
    LISTEN,
    NO_CLIENT,
    Answerer,
    ListSight,
    granted_lists,
    listen_grant,
    resource_updated,
)
from .event_streams import SSE_HEADERS
from .event_streams import sse as _sse
from .exchange import Exchange
from .http_relay import relayed, stream_writer
from .http_rules import LegacySession, check_modern_headers, check_version_header, status_for
from .legacy_sessions import LegacyRequests
from .outbox import StreamWriter
from .replies import (
    Handled,
    HttpReply,
    answer,
    json_reply,
    malformed_status,
    owner,
    passed,
    refusal,
    sibling_for,
)
from .siblings import Siblings
from .tasks import NOBODY, TASK_METHODS, Caller, instance_of, takes_tasks

log = logging.getLogger("trunkline.gateway")


class PostHandler:
    """The answer to one POSTed message (see the module's docstring), and the modern listen
    streams open."""

    def __init__(self, answerer: Answerer, legacy: LegacyRequests, instance: str,
                 siblings: Siblings | None = None) -> None:
        """``instance``: this process's name, which the input rounds it asks carry."""
        self._answerer = answerer
        self._legacy = legacy
        self._siblings = siblings
        #: What a bridged input round's token starts with when this process asked it.
        self._own_rounds = f"{TOKEN_PREFIX}{instance}."
        self._instance = instance
        #: Open listen streams, and the lists (``tools``, ``prompts``, ``resources``) each
        #: was granted changes of.
        self._streams: dict[StreamWriter, tuple[frozenset[str], ListSight]] = {}
        self._header_params_of: dict[Hashable, tuple[mcp_headers.HeaderParam, ...]] = {}

    def message(self, http: Exchange, body: bytes) -> Awaitable[Handled]:
        """The answer to a POST's body, to await. Not a coroutine itself: for a request
        served from behind the gateway it is the answerer's own coroutine, one frame fewer
        for every call in flight."""
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return ready(refusal(400, p.PARSE_ERROR, f"Parse error: {exc}"))
        if wide_integer_at(body) is not None:  # orjson made it a float: refused, not rounded
            return ready(self._not_a_request(p.wide_integer(message, body), None))
        refused = check_version_header(http.headers.get("mcp-protocol-version"), message)
        if refused is not None:
            return ready(json_reply(refused, malformed_status(refused["error"])))
        session_id = http.headers.get("mcp-session-id")
        session = self._legacy.verified(http, session_id) if session_id else None
        inbound = p.read(message, session.version if session else None,
                         http.identity or LOCAL)
        if type(inbound) is p.Request and inbound.era is p.ClientEra.MODERN:
            state = inbound.params.get("requestState")
            if type(state) is str and state.startswith(TOKEN_PREFIX) \
                    and not state.startswith(self._own_rounds):
                # An answer to an input round another process asked: there if a sibling.
                index = sibling_for(self._siblings, http,
                                    state[len(TOKEN_PREFIX):].split(".")[0])
                if index is not None:
                    assert self._siblings is not None
                    return passed(self._siblings, http, body, index)
            elif inbound.method in TASK_METHODS and self._siblings is not None:
                # A task another copy holds: passed to it, which answers.
                task_id = inbound.params.get("taskId")
                instance = instance_of(task_id) if type(task_id) is str else None
                index = None if instance is None or instance == self._instance \
                    else sibling_for(self._siblings, http, instance)
                if index is not None:
                    return passed(self._siblings, http, body, index)
        elif session_id:
            unserved = self._legacy.unserved(http, body, session_id, session)
            if unserved is not None:
                return unserved
        if type(inbound) is not p.Request:
            return ready(self._not_a_request(inbound, session_id))
        if "traceparent" in http.headers:
            return self._carrying(http, inbound, session_id, session)
        return self._request(http, inbound, session_id, session)

    def _not_a_request(self, inbound: p.Inbound, session_id: str | None) -> HttpReply:
        """The answer to a POST of anything but a request: a refusal, or 202 Accepted."""
        if isinstance(inbound, p.Refused):
            return json_reply(p.error_response(inbound.id, inbound.error),
                              malformed_status(inbound.error))
        if isinstance(inbound, p.Response):
            if not self._legacy.sessions.answered(inbound, session_id):
                log.info("a client's answer to no question of its session: dropped")
        elif isinstance(inbound, p.Notification) and session_id and \
                inbound.method == "notifications/cancelled":
            # A legacy call outlives its connection; this is how its client ends it.
            self._legacy.sessions.cancelled(session_id, inbound.params.get("requestId"))
        return HttpReply(202)

    def _carrying(self, http: Exchange, request: p.Request, session_id: str | None,
                  session: LegacySession | None) -> Awaitable[Handled]:
        """A request whose W3C headers carry a trace context: with tracing on, the ambient
        context while it is served; with tracing off, the request's own when its
        ``_meta`` names none, for the answerer to pass on."""
        traced = self._answerer.host.incoming_trace(http.headers)
        if traced is not None:
            return self._traced_request(traced, http, request, session_id, session)
        if "traceparent" not in request.meta:
            request = msgspec.structs.replace(request, trace_headers=picked(http.headers))
        return self._request(http, request, session_id, session)

    async def _traced_request(self, traced: otel_context.Context, http: Exchange,
                              request: p.Request, session_id: str | None,
                              session: LegacySession | None) -> Handled:
        # The W3C headers' context is the ambient one while the request is served (its
        # SERVER span's parent, or a link when the request's _meta names a parent).
        token = otel_context.attach(traced)
        try:
            return await self._request(http, request, session_id, session)
        finally:
            otel_context.detach(token)

    def _request(self, http: Exchange, request: p.Request, session_id: str | None,
                 session: LegacySession | None) -> Awaitable[Handled]:
        """The answer to a request, to await: the answerer's own coroutine for one served
        from behind the gateway, a ready reply for the rest. A modern request counts
        against its connection (``admission``: a modern client's requests are one at a
        time on each of its)."""
        if request.era is not p.ClientEra.MODERN:
            return self._legacy.request(http, request, session_id, session)
        mismatch = check_modern_headers(http.headers, request, self._header_params(request))
        if mismatch is not None:
            return ready(json_reply(p.error_response(request.id, mismatch),
                                    status_for(mismatch)))
        connection: object = http.connection  # the client the request counts against
        if request.method == CALL:
            caller = _caller(http) if takes_tasks(request.meta) else NOBODY
            return relayed(http, self._answerer.limits, lambda notify: self._answerer.call(
                request, notify, NO_CLIENT, connection, caller=caller))
        if request.method in TASK_METHODS:
            return relayed(http, self._answerer.limits, lambda _notify:
                           self._answerer.task_request(request, _caller(http), connection))
        if request.method == LISTEN:
            return self._listen(http, request)
        answered = self._answerer.immediate(request)
        if answered is None:
            return relayed(http, self._answerer.limits, lambda notify:
                           self._answerer.from_fleet(request, NO_CLIENT, notify, connection))
        return ready(answer(answered))

    def _header_params(self, request: p.Request) -> tuple[mcp_headers.HeaderParam, ...]:
        """The ``x-mcp-header`` arguments of the tool a ``tools/call`` names (as served),
        found once per tool and catalog (walking a schema on every call cost more than the
        rest of the header checks together)."""
        name = request.params.get("name")
        if request.method != CALL or not isinstance(name, str) or self._answerer.tool_search:
            return ()  # in tool-search mode a call names one of the gateway's own tools
        host = self._answerer.host
        # Where each identity has a catalog of its own, a name is its entry's there.
        entry = host.tool_entry(name, request.identity) if host.lists_per_identity else None
        key: Hashable = name if entry is None else entry
        known = self._header_params_of.get(key)
        if known is not None:
            return known
        if entry is None:
            entry = host.tool_entry(name)
            if entry is None:
                return ()
        try:
            found = mcp_headers.tool_header_params(entry.input_schema)
        except mcp_headers.InvalidToolHeaders:
            return ()
        self._header_params_of[key] = found
        return found

    async def _listen(self, http: Exchange, request: p.Request) -> dict[str, Any] | None:
        http.cancel_when_gone()

        def write(note: p.Message) -> Awaitable[None]:
            assert isinstance(note, dict)  # a listen stream carries notifications only
            params = {**note.get("params", {}), "_meta": {SUBSCRIPTION_ID: request.id}}
            return http.write(_sse({**note, "params": params}))
        stream = stream_writer(http, self._answerer.limits, "a listen stream", write)
        watched = await self._answerer.watch_listed(
            request, lambda params: stream.put(resource_updated(params)))
        if isinstance(watched, p.InBandError):
            return watched.response(request.id)
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
            self._streams[stream] = (granted_lists(granted),
                                     self._answerer.sight(request.identity))
            await stream.run()
            # The gateway is stopping: the subscription ends gracefully.
            await http.write(_sse(p.response(request.id, {"resultType": "complete"})))
        finally:
            self._streams.pop(stream, None)
            stop()
        return None

    def list_changed(self, which: str) -> None:
        """A list of the fleet's changed: every listen stream granted its changes is told."""
        if which == "tools":
            self._header_params_of.clear()
        note = p.list_changed(which)
        for stream, (lists, sight) in self._streams.items():
            if which in lists and sight.changed(which):
                stream.put(note)

    def stop(self) -> None:
        """The gateway stops: every listen stream ends (gracefully)."""
        for stream in self._streams:
            stream.close()


def _caller(http: Exchange) -> Caller:
    """Whose a modern client's tasks are (``gateway/tasks.py``): bound to the identity of
    its access token, when it shows one; counted against it, else against its address."""
    bound = owner(http)
    return Caller(bound, bound if bound is not None else http.connection.peer)


__all__ = ["PostHandler"]
