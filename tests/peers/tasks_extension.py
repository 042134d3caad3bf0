"""The MCP Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) on the official
Python SDK's extension interface (mcp 2.x ``mcp.server.extension``, SEP-2133), for
tests/peers/conformance_everything.py: a tools/call answered with a task handle, polled
with tasks/get, fed input with tasks/update, stopped with tasks/cancel.

    tasks = Tasks()

    @tasks.tool(support="optional", description="...")
    async def slow_compute(seconds: float) -> str:
        detach()                     # from here on the call may run as a task
        await anyio.sleep(seconds)
        return "done"

    server = MCPServer(..., extensions=[tasks], lifespan=lambda _: tasks.running())

The rules (ext-tasks specification/draft/tasks.md):

- A task tool is registered with its task support: ``optional`` (the server may answer
  with a task) or ``required`` (it can only run as one). The server decides; the client
  only says it can take a task, by naming the extension in the request's
  ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``.
- A request that does not name it never gets a task: an ``optional`` tool runs to its
  end within the request (``detach()`` does nothing), a ``required`` one is refused with
  -32021 and ``data.requiredCapabilities.extensions`` naming the extension.
- A request that names it runs the tool in the background, within the request until the
  tool calls ``detach()``. Whatever the tool returns before that (an InputRequiredResult
  gathering input by multi round-trip, or a result) is the request's answer; at
  ``detach()`` the task is created (so tasks/get finds it at once) and the request
  answers with its CreateTaskResult: ``resultType: "task"`` and the flat Task fields.
- A task is ``working``, ``input_required`` while the tool waits in ``await_input()``, then
  ``completed`` (the tool's CallToolResult, ``isError`` included), ``failed`` (a JSON-RPC
  error the tool raised, as ``error``) or ``cancelled``. A terminal status never changes.
- ``await_input(requests)`` parks the task as ``input_required`` with those requests
  (keys unique over the task's life); tasks/update delivers responses for outstanding
  keys (others are ignored), a subset leaves the rest outstanding, and the task works on
  once every one is answered.
- tasks/cancel is honoured at once: the task is ``cancelled`` and its work stopped; on a
  terminal task it is a no-op. Every ack is an empty result.
- tasks/get, tasks/update and tasks/cancel need the extension named on the request
  (-32021), an ``Mcp-Name`` header equal to ``params.taskId`` over HTTP (-32020), and a
  task this server holds (-32602).
- Tasks belong to the 2026-07-28 era (``resultType``): a 2025-11-25 session never gets
  one, as if it had not named the extension, and the tasks methods are -32601 there.
- Task ids are unguessable (``secrets.token_urlsafe``). Tasks live in memory for their
  ``ttlMs`` from creation, then are dropped (a running one is stopped first).

Everything runs in the task group of ``Tasks.running()``, which the server's lifespan
holds: no task outlives the server.
"""

from __future__ import annotations

import contextvars
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    ErrorData,
    InputRequiredResult,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

EXTENSION_ID = "io.modelcontextprotocol/tasks"
#: How long a task is kept from its creation, and how often a client should poll it.
TTL_MS = 300_000
POLL_INTERVAL_MS = 250
TERMINAL = frozenset({"completed", "failed", "cancelled"})

Status = Literal["working", "input_required", "completed", "failed", "cancelled"]
Support = Literal["optional", "required"]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Task:
    """One task: its status and what that status carries."""

    task_id: str
    created_at: str
    expires: float  # time.monotonic() deadline
    status: Status = "working"
    last_updated_at: str = ""
    #: Outstanding input requests (status input_required), and the answers so far.
    pending: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    keys_used: set[str] = field(default_factory=set)
    answered: anyio.Event = field(default_factory=anyio.Event)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    #: The tool's run: cancelled by tasks/cancel or at the end of the TTL.
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def __post_init__(self) -> None:
        self.last_updated_at = self.created_at

    def wire(self) -> dict[str, Any]:
        """The Task fields (a CreateTaskResult is these and ``resultType: "task"``)."""
        return {"taskId": self.task_id, "status": self.status, "createdAt": self.created_at,
                "lastUpdatedAt": self.last_updated_at, "ttlMs": TTL_MS,
                "pollIntervalMs": POLL_INTERVAL_MS}

    def detailed(self) -> dict[str, Any]:
        """The DetailedTask tasks/get answers: the Task and what its status carries."""
        out = self.wire()
        if self.status == "input_required":
            out["inputRequests"] = dict(self.pending)
        elif self.status == "completed":
            out["result"] = self.result
        elif self.status == "failed":
            out["error"] = self.error
        return out

    def move(self, status: Status) -> None:
        if self.status not in TERMINAL:
            self.status = status
            self.last_updated_at = now_iso()

    def finish(self, result: dict[str, Any] | None = None,
               error: dict[str, Any] | None = None) -> None:
        if self.status in TERMINAL:
            return
        self.result, self.error = result, error
        self.move("completed" if error is None else "failed")

    def cancel(self) -> None:
        self.move("cancelled")
        self.scope.cancel()

    async def wait_for(self, requests: dict[str, Any]) -> dict[str, Any]:
        reused = self.keys_used & set(requests)
        if reused:
            raise ValueError(f"input request keys are unique over a task's life: {sorted(reused)}")
        self.keys_used |= set(requests)
        self.pending, self.answered = dict(requests), anyio.Event()
        self.move("input_required")
        await self.answered.wait()
        return {key: self.answers.pop(key) for key in requests}

    def deliver(self, responses: dict[str, Any]) -> None:
        """Take the responses to outstanding requests; ignore the rest."""
        taken = [key for key in responses if key in self.pending]
        for key in taken:
            self.answers[key] = responses[key]
            del self.pending[key]
        if taken and not self.pending and self.status == "input_required":
            self.move("working")
            self.answered.set()
        elif taken:
            self.last_updated_at = now_iso()


@dataclass
class Handoff:
    """One task-capable call in flight: decided when the tool detaches or ends."""

    tasks: Tasks
    decided: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    task: Task | None = None
    outcome: HandlerResult = None
    failure: BaseException | None = None


#: The call the current tool run belongs to (unset outside a task-capable call), and the
#: task it became (unset until detach()).
_handoff: contextvars.ContextVar[Handoff | None] = contextvars.ContextVar("handoff", default=None)
_task: contextvars.ContextVar[Task | None] = contextvars.ContextVar("task", default=None)


def detach() -> None:
    """From here on, run the current tool call as a task if the client can take one: the
    request answers with the task's CreateTaskResult. Elsewhere, does nothing."""
    handoff = _handoff.get()
    if handoff is None or handoff.task is not None:
        return
    handoff.task = handoff.tasks.create(handoff.scope)
    _task.set(handoff.task)
    handoff.decided.set()


def in_task() -> bool:
    """Does the current tool call run as a task (it detached, and the client took one)?"""
    return _task.get() is not None


async def await_input(requests: dict[str, Any]) -> dict[str, Any]:
    """Ask the client through the task (``input_required``) and wait for every answer;
    returns the responses by key, as the client sent them."""
    task = _task.get()
    if task is None:
        raise RuntimeError("await_input() runs only in a task, after detach()")
    return await task.wait_for(requests)


class TaskParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any]


def error_wire(error: ErrorData) -> dict[str, Any]:
    return error.model_dump(by_alias=True, mode="json", exclude_none=True)


class Tasks(Extension):
    """The tasks extension: task tools, the three methods, and the tasks themselves."""

    identifier = EXTENSION_ID

    def __init__(self) -> None:
        self._tools: list[ToolBinding] = []
        self._support: dict[str, Support] = {}
        self._tasks: dict[str, Task] = {}
        self._group: TaskGroup | None = None

    # ---- the server's side: tools, methods, the interceptor ----------------------------

    def tool(self, *, support: Support, name: str | None = None,
             **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a task tool (``MCPServer.add_tool`` keyword arguments pass through)."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._support[name or fn.__name__] = support
            self._tools.append(ToolBinding(fn=fn, kwargs={"name": name, **kwargs}))
            return fn

        return decorator

    def tools(self) -> Sequence[ToolBinding]:
        return self._tools

    def methods(self) -> Sequence[MethodBinding]:
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return (MethodBinding("tasks/get", TaskParams, self._get, versions),
                MethodBinding("tasks/update", UpdateTaskParams, self._update, versions),
                MethodBinding("tasks/cancel", TaskParams, self._cancel, versions))

    async def intercept_tool_call(self, params: CallToolRequestParams,
                                  ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        support = self._support.get(params.name)
        if support is None or (support == "optional" and not takes_tasks(ctx)):
            return await call_next(ctx)
        if not takes_tasks(ctx):
            raise missing_extension()
        if self._group is None:
            raise RuntimeError("Tasks.running() is not entered (the server's lifespan)")
        handoff = Handoff(self)
        token = _handoff.set(handoff)
        try:
            self._group.start_soon(self._run, handoff, call_next, ctx)
        finally:
            _handoff.reset(token)
        try:
            await handoff.decided.wait()
        except BaseException:
            if handoff.task is None:
                handoff.scope.cancel()  # the request is gone before the tool detached
            raise
        if handoff.task is not None:
            return {"resultType": "task", **handoff.task.wire()}
        if handoff.failure is not None:
            raise handoff.failure
        return handoff.outcome

    async def _run(self, handoff: Handoff, call_next: CallNext,
                   ctx: ServerRequestContext[Any, Any]) -> None:
        outcome: HandlerResult = None
        failure: Exception | None = None
        with handoff.scope:
            try:
                outcome = await call_next(ctx)
            except Exception as exc:  # noqa: BLE001 - recorded, as the request would answer
                failure = exc
        task = handoff.task
        if task is None:  # never detached: the request answers with what the tool did
            handoff.outcome, handoff.failure = outcome, failure
            handoff.decided.set()
        elif handoff.scope.cancel_called:
            pass  # cancelled (tasks/cancel) or dropped (TTL): nothing more to record
        elif isinstance(failure, MCPError):
            task.finish(error=error_wire(failure.error))
        elif failure is not None or isinstance(outcome, InputRequiredResult) or outcome is None:
            task.finish(error={"code": INTERNAL_ERROR, "message": "the tool failed in its task"})
        else:
            task.finish(result=outcome.model_dump(by_alias=True, mode="json", exclude_none=True)
                        if isinstance(outcome, BaseModel) else dict(outcome))

    # ---- the tasks ---------------------------------------------------------------------

    def create(self, scope: anyio.CancelScope) -> Task:
        self._expire()
        task = Task(task_id=secrets.token_urlsafe(24), created_at=now_iso(),
                    expires=time.monotonic() + TTL_MS / 1000, scope=scope)
        self._tasks[task.task_id] = task
        return task

    def _expire(self) -> None:
        now = time.monotonic()
        for task_id, task in list(self._tasks.items()):
            if task.expires <= now:
                task.scope.cancel()
                del self._tasks[task_id]

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> Task:
        headers = getattr(ctx.request, "headers", None)  # None on stdio
        if headers is not None and decode_header_value(headers.get(MCP_NAME_HEADER)) != task_id:
            raise MCPError(code=HEADER_MISMATCH,
                           message=f"{MCP_NAME_HEADER} header does not match params.taskId")
        if not takes_tasks(ctx):
            raise missing_extension()
        self._expire()
        task = self._tasks.get(task_id)
        if task is None:
            raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")
        return task

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        return self._find(ctx, params.task_id).detailed()

    async def _update(self, ctx: ServerRequestContext[Any, Any],
                      params: UpdateTaskParams) -> dict[str, Any]:
        self._find(ctx, params.task_id).deliver(params.input_responses)
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any],
                      params: TaskParams) -> dict[str, Any]:
        self._find(ctx, params.task_id).cancel()
        return {}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Hold the task group every tool run (and so every task) lives in."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()


def takes_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Can this request be answered with a task: a 2026-07-28 era request (the era of
    ``resultType``) that names the extension in its client capabilities?"""
    extensions = getattr(ctx.session.client_capabilities, "extensions", None)
    return (ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            and bool(extensions and EXTENSION_ID in extensions))


def missing_extension() -> MCPError:
    return MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                    message=f"This request needs the client to declare {EXTENSION_ID!r}",
                    data={"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}})
