"""One downstream client over one connection, served through the Host.

A ``ClientSession`` reads what the client sends (``protocol.read``), answers what needs
nothing behind the gateway at once (discover, initialize, ping, the merged tool list), and
runs each ``tools/call`` as its own task in the connection's scope: progress goes back
under the client's own token, ``notifications/cancelled`` cancels that task (and so the
call behind it), and the result or the error goes back in the client's era. When the
merged catalog changes, a legacy session and every modern listen stream that asked for
tool-list changes are told. Nothing here answers an input request on a server's behalf.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..catalog import Catalog
from ..errors import TrunklineError
from ..loop.tasks import TaskScope
from ..parent.host import Host
from ..protocol.listen import SUBSCRIPTION_ID
from . import protocol as p

log = logging.getLogger("trunkline.gateway")

Send = Callable[[dict[str, Any]], None]


def _key(request_id: Any) -> tuple[str, Any]:
    """Request ids as the client sent them: ``1`` and ``"1"`` are two ids."""
    return (type(request_id).__name__, request_id)


class ClientSession:
    def __init__(self, host: Host, send: Send, scope: TaskScope, *,
                 server_info: Mapping[str, Any], instructions: str | None = None) -> None:
        self._host = host
        self._send = send
        self._scope = scope
        self._server_info = dict(server_info)
        self._instructions = instructions
        #: The connection's legacy session: its revision once ``initialize`` was answered.
        self.legacy_version: str | None = None
        self._calls: dict[tuple[str, Any], asyncio.Task[Any]] = {}
        #: Open modern listen streams that asked for tool-list changes: their request ids.
        self._listens: dict[tuple[str, Any], Any] = {}
        self._unwatch = host.watch_catalog(self._catalog_changed)

    def close(self) -> None:
        """The client is gone: stop watching; the connection's scope ends its calls."""
        self._unwatch()
        self._listens.clear()

    # -- inbound --------------------------------------------------------------------------

    def receive(self, message: Any) -> None:
        inbound = p.read(message, self.legacy_version)
        if isinstance(inbound, p.Refused):
            if inbound.id is not None or not isinstance(message, dict) or "id" in message:
                self._send(p.error_response(inbound.id, inbound.error))
        elif isinstance(inbound, p.Notification):
            self._notified(inbound)
        elif isinstance(inbound, p.Request):
            self._requested(inbound)

    def _notified(self, note: p.Notification) -> None:
        if note.method == "notifications/cancelled":
            request_id = note.params.get("requestId")
            key = _key(request_id)
            self._listens.pop(key, None)
            task = self._calls.pop(key, None)
            if task is not None:
                task.cancel()

    def _requested(self, request: p.Request) -> None:
        method = request.method
        if method == "initialize":
            result = p.initialize_result(request.params.get("protocolVersion"),
                                         self._server_info, self._instructions)
            self.legacy_version = result["protocolVersion"]
            self._answer(request, result)
        elif method == "server/discover":
            self._answer(request, p.discover_result(self._server_info, self._instructions))
        elif method == "ping" and request.era is p.ClientEra.LEGACY:
            self._answer(request, {})  # 2026-07-28 has no ping
        elif method == "tools/list":
            tools = [p.served_tool(entry) for entry in self._host.tools()]
            self._answer(request, p.list_result(tools, request.era))
        elif method == "tools/call":
            self._start_call(request)
        elif method == "subscriptions/listen" and request.era is p.ClientEra.MODERN:
            self._listen(request)
        elif method == "logging/setLevel" and request.era is p.ClientEra.LEGACY:
            self._answer(request, {})  # accepted; the servers behind log to the host
        else:
            self._send(p.error_response(request.id, p.unknown_method(method)))

    def _answer(self, request: p.Request, result: dict[str, Any]) -> None:
        self._send(p.response(request.id, result))

    # -- tools/call ---------------------------------------------------------------------------

    def _start_call(self, request: p.Request) -> None:
        key = _key(request.id)
        if key in self._calls:
            self._send(p.error_response(request.id, p.error(
                p.INVALID_REQUEST, f"request id {request.id!r} is already in flight")))
            return
        task = self._scope.spawn(self._call(request), name=f"tools/call {request.id!r}")
        self._calls[key] = task
        task.add_done_callback(lambda _t: self._calls.pop(key, None) if
                               self._calls.get(key) is _t else None)

    async def _call(self, request: p.Request) -> None:
        name = request.params.get("name")
        arguments = request.params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            self._send(p.error_response(request.id, p.error(
                p.INVALID_PARAMS, "tools/call needs a tool name and an arguments object")))
            return
        token = request.meta.get("progressToken")
        on_progress = None
        if isinstance(token, (str, int)) and not isinstance(token, bool):
            on_progress = self._progress_to(token)
        try:
            result = await self._host.call_tool(name, arguments, on_progress=on_progress)
        except asyncio.CancelledError:
            raise  # the client cancelled: it expects no answer
        except Exception as exc:  # noqa: BLE001 - every failure becomes the client's error
            if not isinstance(exc, TrunklineError):
                log.exception("tools/call %r failed inside the gateway", name)
            self._send(p.error_response(request.id, p.error_for(exc)))
            return
        self._send(p.response(request.id, p.call_result(result.raw, request.era)))

    def _progress_to(self, token: str | int) -> Callable[[Any, Any, Any], None]:
        def progress(value: Any, total: Any, message: Any) -> None:
            params: dict[str, Any] = {"progressToken": token, "progress": value}
            if total is not None:
                params["total"] = total
            if message is not None:
                params["message"] = message
            self._send(p.notification("notifications/progress", params))
        return progress

    # -- list changes ---------------------------------------------------------------------

    def _listen(self, request: p.Request) -> None:
        wanted = request.params.get("notifications")
        granted = {"toolsListChanged": True} if isinstance(wanted, dict) and \
            wanted.get("toolsListChanged") is True else {}
        self._send(p.notification("notifications/subscriptions/acknowledged", {
            "_meta": {SUBSCRIPTION_ID: request.id}, "notifications": granted}))
        if granted:
            self._listens[_key(request.id)] = request.id

    def _catalog_changed(self, catalog: Catalog) -> None:
        if self.legacy_version is not None:
            self._send(p.notification("notifications/tools/list_changed", {}))
        for listen_id in self._listens.values():
            self._send(p.notification("notifications/tools/list_changed",
                                      {"_meta": {SUBSCRIPTION_ID: listen_id}}))
