"""A legacy server's own requests: ``ping`` answered here, elicitation, sampling and roots
handed to the host's handlers, everything else refused. Never left unanswered.

Only the legacy era has server-initiated requests; a modern server sending one has broken
the protocol (the caller counts it). The same client capabilities gate these requests as
gate modern input requests: a kind the host did not declare is refused here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from .._codec import encode_error, encode_result
from ..loop.tasks import TaskScope
from ..protocol.mrtr import CAPABILITY_OF, InputHandler
from ..protocol.versions import INTERNAL_ERROR, METHOD_NOT_FOUND
from .client_tasks import TASK_METHODS, ClientTasks

log = logging.getLogger("trunkline.worker")


class ServerRequests:
    def __init__(self, handlers: Mapping[str, InputHandler], capabilities: Mapping[str, Any],
                 *, write: Callable[[bytes], None], scope: TaskScope,
                 task_kinds: frozenset[str] = frozenset()) -> None:
        """``task_kinds``: the request methods the host runs as tasks when the server
        asks (the legacy ``tasks.requests`` it declared; ``worker.client_tasks``)."""
        self._handlers = dict(handlers)
        self._capabilities = capabilities
        self._write = write
        self._scope = scope
        self._task_kinds = task_kinds
        self.tasks = ClientTasks(self._send, scope) if task_kinds else None
        #: False once the connection ends: an answer finished later is not written.
        self.open = True

    def on_request(self, request_id: Any, method: str, line: bytes) -> None:
        if method == "ping":
            self._write(encode_result(request_id, b"{}"))
            return
        if method in TASK_METHODS and self.tasks is not None:
            self.tasks.on_request(request_id, method, _params(line))
            return
        handler = self._handlers.get(method)
        if handler is None or CAPABILITY_OF.get(method) not in self._capabilities:
            self._write(encode_error(
                request_id, METHOD_NOT_FOUND, f"client does not support {method}"))
            return
        if method in self._task_kinds and b'"task"' in line:
            params = _params(line)
            if isinstance(params.get("task"), dict):
                assert self.tasks is not None
                self.tasks.start(request_id, method, handler, params)
                return
        self._scope.spawn(self._answer(request_id, handler, line),
                          name=f"answer {method}")

    async def _answer(self, request_id: Any, handler: InputHandler, line: bytes) -> None:
        try:
            params = orjson.loads(line).get("params") or {}
            reply = encode_result(request_id, orjson.dumps(await handler(params)))
        except BaseException as exc:
            message = ("client is shutting down" if not isinstance(exc, Exception)
                       else f"client error: {exc}")
            self._send(encode_error(request_id, INTERNAL_ERROR, message))
            if not isinstance(exc, Exception):
                raise
            return
        self._send(reply)

    def _send(self, line: bytes) -> None:
        if self.open:
            self._write(line)


def _params(line: bytes) -> dict[str, Any]:
    try:
        params = orjson.loads(line).get("params")
    except orjson.JSONDecodeError:
        return {}
    return params if isinstance(params, dict) else {}
