"""The host's side of tasks a legacy server asks it to run (2025-11-25, client-side
tasks): a task-augmented ``elicitation/create`` or ``sampling/createMessage`` (its params
carry ``task``) is answered at once with a ``CreateTaskResult``, the host's handler works
on it meanwhile, and the server looks at it with ``tasks/get``, takes its answer with
``tasks/result`` (which waits for it), lists them with ``tasks/list`` and cancels one
with ``tasks/cancel``.

Rules:

1. A task is made only for a kind the host declared in ``tasks.requests`` (and so has a
   handler for); at most ``MAX_TASKS`` at once per server, beyond which the request is
   refused (``-32603``, the server may ask again without the task).
2. Ids are unguessable (``secrets``); an unknown id is ``-32602``.
3. Statuses: ``working`` while the handler runs (``input_required`` for an elicitation:
   a person is being asked), then ``completed`` (its answer), ``failed`` (the handler
   raised: its message) or ``cancelled`` (``tasks/cancel``: the handler is cancelled).
4. An ended task is kept for its TTL (the server's ``task.ttl``, at most ``MAX_KEEP_S``),
   then forgotten; so is everything when the connection ends.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from .._codec import encode_error, encode_result
from ..loop.tasks import TaskScope
from ..protocol.mrtr import ELICIT, InputHandler
from ..protocol.versions import INTERNAL_ERROR, INVALID_PARAMS

#: Client-side tasks held at once for one server (rule 1).
MAX_TASKS = 64
#: Seconds an ended task is kept at most (rule 4).
MAX_KEEP_S = 600.0
#: Milliseconds the server is told to wait between two looks.
POLL_INTERVAL_MS = 500

#: The methods of the client-side tasks protocol a server sends.
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _ClientTask:
    task_id: str
    method: str
    ttl_ms: int
    created_at: str = field(default_factory=_now)
    updated_at: str = ""
    status: str = "working"
    message: str | None = None
    answer: asyncio.Future[bytes] | None = None
    work: asyncio.Task[None] | None = None
    expiry: asyncio.TimerHandle | None = None

    def __post_init__(self) -> None:
        self.updated_at = self.created_at

    def shape(self) -> dict[str, Any]:
        task: dict[str, Any] = {
            "taskId": self.task_id, "status": self.status, "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at, "ttl": self.ttl_ms,
            "pollInterval": POLL_INTERVAL_MS}
        if self.message is not None:
            task["statusMessage"] = self.message
        return task


class ClientTasks:
    def __init__(self, write: Callable[[bytes], None], scope: TaskScope) -> None:
        self._write = write
        self._scope = scope
        self._tasks: dict[str, _ClientTask] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, request_id: Any, method: str, handler: InputHandler,
              params: dict[str, Any]) -> None:
        """A task-augmented request of ``method``: answered with its task now (rule 1)."""
        limit = MAX_TASKS
        if len(self._tasks) >= limit:
            self._write(encode_error(request_id, INTERNAL_ERROR,
                                     f"client holds {limit} tasks of this server already"))
            return
        asked = params.pop("task", None)
        ttl: Any = asked.get("ttl") if isinstance(asked, dict) else None
        keep = MAX_KEEP_S * 1000
        ttl_ms = int(min(ttl, keep)) if type(ttl) in (int, float) and ttl > 0 else int(keep)
        task = _ClientTask(secrets.token_hex(16), method, ttl_ms)
        if method == ELICIT:
            task.status, task.message = "input_required", "waiting for the user"
        task.answer = asyncio.get_running_loop().create_future()
        task.answer.add_done_callback(_retrieved)
        self._tasks[task.task_id] = task
        task.work = self._scope.spawn(self._run(task, handler, params),
                                      name=f"client task {method}")
        self._write(encode_result(request_id, orjson.dumps({"task": task.shape()})))

    def on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        """One of ``TASK_METHODS`` from the server."""
        if method == "tasks/list":
            tasks = [t.shape() for t in self._tasks.values()]
            self._write(encode_result(request_id, orjson.dumps({"tasks": tasks})))
            return
        task_id = params.get("taskId")
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            self._write(encode_error(request_id, INVALID_PARAMS, "Task not found"))
            return
        if method == "tasks/get":
            self._write(encode_result(request_id, orjson.dumps(task.shape())))
        elif method == "tasks/cancel":
            if task.status in ("working", "input_required"):
                assert task.work is not None
                task.work.cancel()
                self._ended(task, "cancelled", "cancelled by the server")
            self._write(encode_result(request_id, orjson.dumps(task.shape())))
        else:  # tasks/result: waits for the end
            self._scope.spawn(self._result(request_id, task), name="tasks/result")

    def close(self) -> None:
        for task in self._tasks.values():
            if task.work is not None:
                task.work.cancel()
            if task.expiry is not None:
                task.expiry.cancel()
        self._tasks.clear()

    async def _run(self, task: _ClientTask, handler: InputHandler,
                   params: dict[str, Any]) -> None:
        assert task.answer is not None
        try:
            answer = await handler(params)
        except Exception as exc:  # noqa: BLE001 - the task's failure, told on tasks/result
            if not task.answer.done():
                task.answer.set_exception(exc)
            self._ended(task, "failed", f"client error: {exc}")
            return
        if not task.answer.done():
            meta = {"io.modelcontextprotocol/related-task": {"taskId": task.task_id}}
            task.answer.set_result(orjson.dumps({**answer, "_meta": meta}))
        self._ended(task, "completed", None)

    async def _result(self, request_id: Any, task: _ClientTask) -> None:
        assert task.answer is not None
        try:
            answer = await asyncio.shield(task.answer)
        except asyncio.CancelledError:
            if task.status == "cancelled":
                self._write(encode_error(request_id, INTERNAL_ERROR, "the task was cancelled"))
                return
            raise
        except Exception as exc:  # noqa: BLE001 - the handler's failure, as an error
            self._write(encode_error(request_id, INTERNAL_ERROR, f"client error: {exc}"))
            return
        self._write(encode_result(request_id, answer))

    def _ended(self, task: _ClientTask, status: str, message: str | None) -> None:
        task.status, task.message, task.updated_at = status, message, _now()
        if status == "cancelled" and task.answer is not None and not task.answer.done():
            task.answer.cancel()
        task.expiry = asyncio.get_running_loop().call_later(
            task.ttl_ms / 1000.0, self._tasks.pop, task.task_id, None)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


__all__ = ["MAX_TASKS", "TASK_METHODS", "ClientTasks"]
