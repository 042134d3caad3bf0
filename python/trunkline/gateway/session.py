"""One downstream client over one connection (stdio), served through the Host.

A ``ClientSession`` reads what the client sends (``protocol.read``), has the ``Answerer``
answer it, and keeps what belongs to the connection: its legacy session, each request
answered from behind the gateway (``tools/call``, prompts, resources) as its own task in
the connection's scope (``notifications/cancelled`` cancels that task, and so the request
behind it), the listen streams and their ``resourceSubscriptions`` (each ended with its
stream), its tasks (MCP tasks, a modern client's: bound to the connection, cancelled
when it ends). What its 2025-11-25 session holds (the capabilities declared, the log
level set, its resource subscriptions, the questions asked of its client) is
``legacy_sessions``' ``LegacyConnection``. When the fleet's tools, prompts or resources
list changes, a legacy session and every modern listen stream granted changes of that
list are told, once each. Nothing here answers an input request on a server's behalf.
The connection is one client: what it asks behind the gateway counts against that
client's budgets (``admission``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..loop.tasks import TaskScope
from ..policy.identity import LOCAL
from ..protocol.listen import SUBSCRIPTION_ID
from . import protocol as p
from .answers import (
    CALL,
    LISTEN,
    NO_CLIENT,
    SUBSCRIBING,
    Answerer,
    Client,
    granted_lists,
    listen_grant,
    resource_updated,
)
from .legacy_sessions import LegacyConnection
from .tasks import LEGACY_TASK_METHODS, TASK_METHODS, Caller


class ClientSession:
    def __init__(self, answerer: Answerer, send: Callable[[p.Message], None],
                 scope: TaskScope) -> None:
        self._answerer = answerer
        self._send = send
        self._scope = scope
        #: The connection's legacy session.
        self._legacy = LegacyConnection(answerer, send)
        self._calls: dict[tuple[str, Any], asyncio.Task[Any]] = {}
        #: Open modern listen streams granted list changes: their request ids, and the
        #: lists (``tools``, ``prompts``, ``resources``) each was granted.
        self._listens: dict[tuple[str, Any], tuple[Any, frozenset[str]]] = {}
        #: What stops each listen stream's resource watches, by its request id (every open
        #: listen stream has one).
        self._listen_watches: dict[tuple[str, Any], Callable[[], None]] = {}
        self._closed = False
        self._unwatch = answerer.watch_lists(self._list_changed)
        #: What the client (``LOCAL``) sees of the tool list.
        self._sight = answerer.sight(LOCAL)
        #: The connection is the one client, and its tasks are its own (``tasks``).
        self._caller = Caller(self, self)

    def close(self) -> None:
        """The client is gone: stop watching; the connection's scope ends its calls."""
        self._closed = True
        self._unwatch()
        self._listens.clear()
        self._legacy.close()
        for task in self._answerer.tasks.drop_owner(self):
            self._scope.spawn(task.cancel(), name=f"tasks/cancel {task.task_id}")
        for stop in self._listen_watches.values():
            stop()
        self._listen_watches.clear()

    # -- inbound --------------------------------------------------------------------------

    def receive(self, message: Any) -> None:
        inbound = p.read(message, self._legacy.version)
        if isinstance(inbound, p.Refused):
            self.refuse(message, inbound)
        elif isinstance(inbound, p.Notification):
            self._notified(inbound)
        elif isinstance(inbound, p.Request):
            self._requested(inbound)
        elif isinstance(inbound, p.Response):
            self._legacy.answered(inbound)

    def refuse(self, message: Any, refused: p.Refused) -> None:
        """Answer ``message`` with its refusal, unless it was a notification."""
        if refused.id is not None or not isinstance(message, dict) or "id" in message:
            self._send(p.error_response(refused.id, refused.error))

    def _notified(self, note: p.Notification) -> None:
        if note.method == "notifications/cancelled":
            key = p.request_key(note.params.get("requestId"))
            self._listens.pop(key, None)
            stop = self._listen_watches.pop(key, None)
            if stop is not None:
                stop()
            task = self._calls.pop(key, None)  # a listen stream being set up, too
            if task is not None:
                task.cancel()

    def _requested(self, request: p.Request) -> None:
        if request.method == CALL:
            # The connection is the one client: everything it asks counts against it.
            self._start(request, self._answerer.call(request, self._send,
                                                     self._client(request), self,
                                                     caller=self._caller))
        elif request.method in TASK_METHODS and request.era is p.ClientEra.MODERN:
            self._start(request, self._answerer.task_request(request, self._caller, self))
        elif request.method in LEGACY_TASK_METHODS and request.era is p.ClientEra.LEGACY:
            self._start(request, self._answerer.legacy_task_request(request, self._caller))
        elif request.method == LISTEN and request.era is p.ClientEra.MODERN:
            self._start(request, self._listen(request))
        elif request.method in SUBSCRIBING and request.era is p.ClientEra.LEGACY:
            self._start(request, self._legacy.subscription(request))
        elif (answer := self._answerer.immediate(request)) is not None:
            if request.era is p.ClientEra.LEGACY:
                self._legacy.immediate(request, answer)
            self._send(answer)
        else:
            self._start(request, self._answerer.from_fleet(request, self._client(request),
                                                           self._send, self))

    def _client(self, request: p.Request) -> Client:
        """A legacy client is asked for a server's input on this connection, and gets log
        messages at the level it set."""
        if request.era is p.ClientEra.MODERN:
            return NO_CLIENT
        return self._legacy.client()

    # -- requests answered from behind the gateway ----------------------------------------

    def _start(self, request: p.Request,
               answer: Coroutine[Any, Any, p.Message | None]) -> None:
        """Run one request as its own task, cancellable by the client; its answer, if it
        has one (a listen stream's is the stream)."""
        key = p.request_key(request.id)
        if key in self._calls:
            answer.close()
            self._send(p.error_response(request.id, p.error(
                p.INVALID_REQUEST, f"request id {request.id!r} is already in flight")))
            return
        task = self._scope.spawn(self._answer(answer), name=f"{request.method} {request.id!r}")
        self._calls[key] = task
        task.add_done_callback(lambda _t: self._calls.pop(key, None) if
                               self._calls.get(key) is _t else None)

    async def _answer(self, answer: Coroutine[Any, Any, p.Message | None]) -> None:
        message = await answer
        if message is not None:
            self._send(message)

    # -- list changes ---------------------------------------------------------------------

    async def _listen(self, request: p.Request) -> dict[str, Any] | None:
        """Open a listen stream (its request stays open until the client cancels it, or
        goes); the refusal of one naming too many resources, or an id already open."""
        key = p.request_key(request.id)
        if key in self._listen_watches:
            return p.error_response(request.id, p.error(
                p.INVALID_REQUEST, f"request id {request.id!r} is already in flight"))

        def updated(params: dict[str, Any]) -> None:
            note = resource_updated(params)
            note["params"]["_meta"] = {SUBSCRIPTION_ID: request.id}
            self._send(note)
        watched = await self._answerer.watch_listed(request, updated)
        if isinstance(watched, p.InBandError):
            return watched.response(request.id)
        resources, stop = watched
        if self._closed:  # the client went while the URIs were routed
            stop()
            return None
        self._listen_watches[key] = stop
        granted = listen_grant(request, resources)
        self._send(p.notification("notifications/subscriptions/acknowledged", {
            "_meta": {SUBSCRIPTION_ID: request.id}, "notifications": granted}))
        lists = granted_lists(granted)
        if lists:
            self._listens[key] = (request.id, lists)
        return None

    def _list_changed(self, which: str) -> None:
        if not self._sight.changed(which):
            return  # what the one client sees did not change (a policy hides the rest)
        self._legacy.list_changed(which)
        for listen_id, lists in self._listens.values():
            if which in lists:
                self._send(p.list_changed(which, listen_id))
