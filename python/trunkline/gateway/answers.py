"""What the gateway answers to one downstream request, through the Host.

Shared by every face (stdio, Streamable HTTP): ``immediate`` for what needs nothing behind
the gateway (discover, initialize, ping, the merged tool list), ``call`` for a
``tools/call``, whose progress goes to the given sink under the client's own token. Both
return the whole response message, in the client's era. Connection state (a legacy
session, in-flight tasks, listen streams) belongs to the faces.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import TrunklineError
from ..parent.host import Host
from . import protocol as p

log = logging.getLogger("trunkline.gateway")

Send = Callable[[dict[str, Any]], None]

#: Requests that need a call behind the gateway, or a stream: the faces run them.
CALL = "tools/call"
LISTEN = "subscriptions/listen"


class Answerer:
    def __init__(self, host: Host, *, server_info: Mapping[str, Any],
                 instructions: str | None = None) -> None:
        self.host = host
        self._server_info = dict(server_info)
        self._instructions = instructions

    def immediate(self, request: p.Request) -> dict[str, Any]:
        """The response to anything but ``tools/call`` and a modern listen."""
        method, era = request.method, request.era
        if method == "initialize":
            result = p.initialize_result(request.params.get("protocolVersion"),
                                         self._server_info, self._instructions)
        elif method == "server/discover":
            result = p.discover_result(self._server_info, self._instructions)
        elif method == "ping" and era is p.ClientEra.LEGACY:
            result = {}  # 2026-07-28 has no ping
        elif method == "tools/list":
            result = p.list_result([p.served_tool(e) for e in self.host.tools()], era)
        elif method == "logging/setLevel" and era is p.ClientEra.LEGACY:
            result = {}  # accepted; the servers behind log to the host
        else:
            return p.error_response(request.id, p.unknown_method(method))
        return p.response(request.id, result)

    async def call(self, request: p.Request, progress: Send) -> dict[str, Any]:
        """The response to one ``tools/call`` (a result, or an error naming the server)."""
        name = request.params.get("name")
        arguments = request.params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return p.error_response(request.id, p.error(
                p.INVALID_PARAMS, "tools/call needs a tool name and an arguments object"))
        token = request.meta.get("progressToken")
        on_progress = None
        if isinstance(token, (str, int)) and not isinstance(token, bool):
            on_progress = _progress_to(token, progress)
        try:
            result = await self.host.call_tool(name, arguments, on_progress=on_progress)
        except asyncio.CancelledError:
            raise  # the client cancelled: it expects no answer
        except Exception as exc:  # noqa: BLE001 - every failure becomes the client's error
            if not isinstance(exc, TrunklineError):
                log.exception("tools/call %r failed inside the gateway", name)
            return p.error_response(request.id, p.error_for(exc))
        return p.response(request.id, p.call_result(result.raw, request.era))


def _progress_to(token: str | int, send: Send) -> Callable[[Any, Any, Any], None]:
    def progress(value: Any, total: Any, message: Any) -> None:
        params: dict[str, Any] = {"progressToken": token, "progress": value}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        send(p.notification("notifications/progress", params))
    return progress


def listen_grant(request: p.Request) -> dict[str, bool]:
    """What a modern listen stream gets: tool-list changes, if it asked for them."""
    wanted = request.params.get("notifications")
    return {"toolsListChanged": True} if isinstance(wanted, dict) and \
        wanted.get("toolsListChanged") is True else {}
