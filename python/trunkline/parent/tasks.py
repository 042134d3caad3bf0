"""The parent's half of following tasks: who waits on each of a server's tasks, and what
they are told.

A tool call its server runs as a task (MCP tasks: ``protocol.tasks``) becomes a
``ToolTask``: the task's id, its latest status, its end. The worker looks at the task
(``worker.tasks.TaskPoller``) and reports only what changed (``TaskReport``); here each
report reaches its ``ToolTask``: a new status to its watchers, input it asks for to the
call's handlers (or, for a caller that answers itself, kept until ``respond``), its end
to whoever waits. A legacy task asks with requests of the server's own, each naming the
task (``related-task``): the call's handlers answer those too (``handler_for``), and no
other call's.

A task lives on its server, not in a worker: when a worker is replaced, every task still
followed is watched again on the new one (``ServerTasks.resume``), which looks at it at
once. A server that still knows it goes on; one that forgot it ends it with ``TaskLost``.
What one server's tasks can hold here is bounded by ``ServerConfig.max_tasks``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .. import channel as ch
from ..errors import (
    InputNotSupported,
    MalformedMessage,
    RequestTimeout,
    ServerError,
    TaskCancelled,
    TaskLimitReached,
    TaskLost,
    TrunklineError,
)
from ..protocol.mrtr import InputHandler, parse_input_request, undeclared
from ..protocol.tasks import CANCELLED, COMPLETED, FAILED, TERMINAL, TaskView

if TYPE_CHECKING:
    from .handle import WorkerHandle
    from .mrtr import InputRounds

log = logging.getLogger("trunkline.host")

#: Makes a task's final result the caller's: ``(result, raw bytes) -> CallToolResult``.
Finish = Callable[[dict[str, Any], bytes], Any]


@dataclass(frozen=True)
class TaskStatus:
    """One look at a task, as the host last heard of it."""

    task_id: str
    #: ``working``, ``input_required``, ``completed``, ``failed`` or ``cancelled``.
    status: str
    message: str | None = None
    poll_interval_ms: float | None = None
    ttl_ms: float | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    #: The input the task waits for and nobody answered yet, by ``inputRequests`` key
    #: (a ``ToolTask`` whose caller answers itself: ``respond``).
    input_requests: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL


class ToolTask:
    """A tool call its server runs as a task: ``Host.start_tool`` returns one (and
    ``Host.resume_task`` one for a task started earlier); ``call_tool`` waits on one
    itself. ``wait()`` gives the final ``CallToolResult``; ``cancel()`` asks the server
    to stop it; ``respond()`` answers the input it asks for when no handler did."""

    def __init__(self, tasks: ServerTasks, key: int, view: TaskView, tool: str,
                 finish: Finish, rounds: InputRounds | None, *, legacy: bool,
                 identity: object | None = None) -> None:
        self._tasks = tasks
        #: Who the call that started it was made for: every request about it is too.
        self.identity = identity
        self._key = key
        self.server = tasks.server
        #: The server's id of the task: give it to ``Host.resume_task`` to wait again.
        self.task_id = view.task_id
        #: The tool's canonical name (as the caller named it).
        self.tool = tool
        self.legacy = legacy
        self._finish = finish
        self._rounds = rounds
        self._status = _status(view)
        self._end: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._end.add_done_callback(_retrieved)
        self._watchers: list[Callable[[TaskStatus], None]] = []
        self._answering: set[str] = set()

    def __repr__(self) -> str:
        return (f"ToolTask(server={self.server!r}, tool={self.tool!r}, "
                f"status={self._status.status!r})")

    @property
    def status(self) -> TaskStatus:
        return self._status

    def done(self) -> bool:
        return self._end.done()

    def outcome(self) -> Any:
        """The task's end, once ``done()``: the final ``CallToolResult``, or the exception
        ``wait()`` raises (returned, not raised); None while it runs. For a caller that
        answers about the task without waiting (a gateway's ``tasks/get``)."""
        end = self._end
        if not end.done():
            return None
        return end.exception() or end.result()

    def handler(self, method: str) -> InputHandler | None:
        """The call's handler of ``method`` (the host's when the call brought none), for
        a request of the server's about this task; None for a caller that answers the
        task's input itself."""
        return None if self._rounds is None else self._rounds.handler(method)

    def watch(self, on_status: Callable[[TaskStatus], None]) -> Callable[[], None]:
        """Call ``on_status(status)`` at each change (on the loop); returns what stops it."""
        self._watchers.append(on_status)
        return lambda: self._watchers.remove(on_status) if on_status in self._watchers \
            else None

    async def wait(self, timeout: float | None = None) -> Any:
        """The final ``CallToolResult``. Raises ``ServerError`` (the task failed with that
        JSON-RPC error), ``TaskCancelled``, ``TaskLost``, or ``RequestTimeout`` after
        ``timeout`` seconds (the task goes on: wait again, or cancel it)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._end), timeout)
        except TimeoutError:
            raise RequestTimeout(f"the task did not end within {timeout:g} s",
                                 timeout_s=timeout, server=self.server,
                                 method="tasks/get") from None

    async def cancel(self) -> None:
        """Ask the server to cancel the task (``tasks/cancel``: cooperative) and stop
        following it: ``wait()`` raises ``TaskCancelled`` from now on."""
        if self._end.done():
            return
        self._tasks.unfollow(self._key, cancel=True)
        self._set_end(TaskCancelled("the task was cancelled by its caller",
                                    task_id=self.task_id, server=self.server))

    async def respond(self, responses: Mapping[str, Any]) -> None:
        """Answer input the task asked for (``status.input_requests``), by key
        (``tasks/update``; a legacy task's input is asked with the server's own
        requests, which the host's handlers answer: ``ValueError`` here)."""
        if self.legacy:
            raise ValueError("a legacy task's input is answered by the host's handlers")
        await self._tasks.update(self.task_id, dict(responses), self.identity)
        left = {k: v for k, v in self._status.input_requests.items() if k not in responses}
        self._status = _replace(self._status, input_requests=left)

    # -- reports ---------------------------------------------------------------------------

    def reported(self, report: ch.TaskReport, result: bytes) -> None:
        # What a report does not say (a legacy task's end, which tasks/result gives
        # without the task's times) is as the last one said.
        last = self._status
        view = TaskView(
            self.task_id, report.status, report.status_message,
            last.poll_interval_ms if report.poll_interval_ms is None
            else report.poll_interval_ms,
            last.ttl_ms if report.ttl_ms is None else report.ttl_ms,
            report.created_at or last.created_at,
            report.last_updated_at or last.last_updated_at)
        asks: dict[str, Any] = {}
        if report.asks:
            decoded = orjson.loads(report.asks)
            asks = {k: v for k, v in decoded.items() if k not in self._answering}
        pending = {**self._status.input_requests, **asks} if (
            report.status == "input_required") else {}
        self._status = _status(view, pending)
        for watcher in list(self._watchers):
            try:
                watcher(self._status)
            except Exception:  # one watcher must not stop the task's others
                log.exception("server %r: a task's status watcher failed", self.server)
        if asks and self._rounds is not None:
            self._answering.update(asks)
            self._tasks.spawn(self._answer(asks), f"answer task {self._key}")
        if report.lost is not None:
            self._set_end(TaskLost(f"task {self.task_id!r}: {report.lost}",
                                   task_id=self.task_id, server=self.server))
        elif report.overdue:
            self._set_end(RequestTimeout("the task did not end before the call's deadline; "
                                         "it was cancelled upstream", server=self.server,
                                         method="tools/call"))
        elif report.status == COMPLETED:
            raw = result or b"{}"
            try:
                self._set_end(self._finish(orjson.loads(raw), raw))
            except TrunklineError as exc:
                self._set_end(exc)
            except orjson.JSONDecodeError:
                self._set_end(MalformedMessage("the task's result is not JSON",
                                               server=self.server, method="tools/call"))
        elif report.status == FAILED:
            error = report.error or {}
            code = error.get("code")
            self._set_end(ServerError(str(error.get("message") or "the task failed"),
                                      code=code if type(code) is int else -32603,
                                      data=error.get("data"), server=self.server,
                                      method="tools/call"))
        elif report.status == CANCELLED:
            self._set_end(TaskCancelled(f"task {self.task_id!r} was cancelled on the server",
                                        task_id=self.task_id, server=self.server))

    def fail(self, error: BaseException) -> None:
        self._set_end(error)

    async def _answer(self, asks: dict[str, Any]) -> None:
        """The call's handlers answer what the task asks, checked as an input round's
        answers are; the answers go back with ``tasks/update``."""
        rounds = self._rounds
        assert rounds is not None
        try:
            responses = await rounds.answer_entries(self.server, asks)
            await self._tasks.update(self.task_id, responses, self.identity)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the task's end, told to its waiter
            await self.cancel()
            self._end_with(exc)

    def _end_with(self, exc: BaseException) -> None:
        if not self._end.done():
            self._end.set_exception(exc)
        else:
            # cancel() ended it first: what failed is the reason, not the cancellation.
            self._end = asyncio.get_running_loop().create_future()
            self._end.add_done_callback(_retrieved)
            self._end.set_exception(exc)

    def _set_end(self, outcome: Any) -> None:
        if self._end.done():
            return
        self._tasks.forget(self._key)
        if isinstance(outcome, BaseException):
            self._end.set_exception(outcome)
        else:
            self._end.set_result(outcome)


class ServerTasks:
    """The tasks of one server the host follows, each under a key of its own."""

    def __init__(self, handle: WorkerHandle) -> None:
        self._handle = handle
        self.server = handle.name
        self._tasks: dict[int, ToolTask] = {}
        self._keys = itertools.count(1)
        #: When each task's caller stops waiting (the loop's clock), by key.
        self._deadlines: dict[int, float | None] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def follow(self, view: TaskView, *, tool: str, finish: Finish,
               rounds: InputRounds | None, legacy: bool, deadline: float | None = None,
               resumed: bool = False, identity: object | None = None) -> ToolTask:
        """Follow the task ``view`` names from now on (``resumed``: one started before,
        looked at once to learn whether the server still knows it), with the credentials
        of ``identity`` (who the call was made for)."""
        if len(self._tasks) >= self._handle.config.max_tasks:
            self.spawn(self.cancel_upstream(view.task_id, identity), "tasks/cancel")
            raise TaskLimitReached(
                f"the host follows {len(self._tasks)} tasks of this server already "
                f"(max_tasks); the new task was cancelled", server=self.server,
                method="tools/call")
        key = next(self._keys)
        task = ToolTask(self, key, view, tool, finish, rounds, legacy=legacy,
                        identity=identity)
        self._tasks[key] = task
        self._deadlines[key] = deadline
        self._send(self._watch(key, task, view, resumed=resumed))
        return task

    def reported(self, report: ch.TaskReport, result: bytes) -> None:
        task = self._tasks.get(report.key)
        if task is not None:
            task.reported(report, result)

    def handler_for(self, task_id: str, method: str) -> InputHandler | None:
        """The handler of the call whose task ``task_id`` is, for a request of the
        server's that names it; None when no task followed here has that id."""
        for task in self._tasks.values():
            if task.task_id == task_id:
                return task.handler(method)
        return None

    def forget(self, key: int) -> None:
        self._tasks.pop(key, None)
        self._deadlines.pop(key, None)

    def unfollow(self, key: int, *, cancel: bool) -> None:
        task = self._tasks.get(key)
        self.forget(key)
        if task is None:
            return
        if not self._send(ch.TaskUnwatch(key, cancel).to_bytes()) and cancel:
            # No worker now: the server is told when it is back, by a request of its own.
            self.spawn(self.cancel_upstream(task.task_id, task.identity), "tasks/cancel")

    def resume(self) -> None:
        """A new worker is ready: every task still followed is watched on it."""
        for key, task in list(self._tasks.items()):
            status = task.status
            view = TaskView(task.task_id, status.status, status.message,
                            status.poll_interval_ms, status.ttl_ms, status.created_at,
                            status.last_updated_at)
            self._send(self._watch(key, task, view, resumed=True))

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        for task in list(self._tasks.values()):
            task.fail(error())

    async def update(self, task_id: str, responses: dict[str, Any],
                     identity: object | None = None) -> None:
        """``tasks/update``: answers to the task's input requests."""
        params = orjson.dumps({"taskId": task_id, "inputResponses": responses})
        reply = await self._handle.slots.request(
            "tasks/update", params, timeout=self._handle.settings.task_limits.max_poll_s,
            identity=identity)
        reply.decode(server=self.server, method="tasks/update")

    async def cancel_upstream(self, task_id: str, identity: object | None = None) -> None:
        try:
            reply = await self._handle.slots.request(
                "tasks/cancel", orjson.dumps({"taskId": task_id}),
                timeout=self._handle.settings.task_limits.max_poll_s, identity=identity)
            reply.decode(server=self.server, method="tasks/cancel")
        except TrunklineError as exc:
            log.info("server %r: tasks/cancel failed: %s", self.server, exc)

    def spawn(self, coro: Any, name: str) -> None:
        self._handle.spawn(coro, name)

    def _watch(self, key: int, task: ToolTask, view: TaskView, *, resumed: bool) -> bytes:
        deadline = self._deadlines.get(key)
        left = None if deadline is None else max(
            deadline - asyncio.get_running_loop().time(), 0.0)
        return ch.TaskWatch(key=key, task_id=view.task_id, legacy=task.legacy,
                            status=view.status, status_message=view.status_message,
                            poll_interval_ms=view.poll_interval_ms, ttl_ms=view.ttl_ms,
                            created_at=view.created_at,
                            last_updated_at=view.last_updated_at,
                            deadline_s=left, resumed=resumed,
                            credential=self._handle.slots.credential_of(task.identity)
                            ).to_bytes()

    def _send(self, frame: bytes) -> bool:
        return self._handle.send_when_ready(frame)


def _status(view: TaskView, pending: Mapping[str, Any] | None = None) -> TaskStatus:
    return TaskStatus(view.task_id, view.status, view.status_message, view.poll_interval_ms,
                      view.ttl_ms, view.created_at, view.last_updated_at,
                      dict(pending or view.input_requests or {}))


def _replace(status: TaskStatus, **fields: Any) -> TaskStatus:
    values = {name: getattr(status, name) for name in TaskStatus.__dataclass_fields__}
    values.update(fields)
    return TaskStatus(**values)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def checked_entries(server: str, asks: Mapping[str, Any], capabilities: Mapping[str, Any]
                    ) -> list[Any]:
    """``inputRequests`` entries, each parsed and gated by the declared capabilities as
    an input round's are (``protocol.mrtr``)."""
    items = []
    for key, entry in asks.items():
        item = parse_input_request(key, entry)
        if isinstance(item, str):
            raise MalformedMessage(f"task input request {key!r}: {item}", server=server,
                                   method="tasks/get")
        missing = undeclared(item, capabilities)
        if missing is not None:
            raise InputNotSupported(
                f"the task asked for {missing[1]}, which this host did not declare",
                key=key, kind=missing[1], server=server, method="tasks/get")
        items.append(item)
    return items


__all__ = ["ServerTasks", "TaskStatus", "ToolTask", "checked_entries"]
