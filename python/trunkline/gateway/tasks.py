"""The tasks the gateway holds for its clients (MCP tasks: the extension
``io.modelcontextprotocol/tasks`` of 2026-07-28), each under an id of its own, and what a
client is told of one. Pure: the table reads the clocks it is given and never waits.

A client that names the extension in a ``tools/call``'s ``_meta`` may get the task its
server runs the call as (``Host.start_tool_relayed``: a ``ToolTask``, which the host
follows to its end at the server's pace); the client gets a ``CreateTaskResult`` and asks
about the task with ``tasks/get``, ``tasks/update`` and ``tasks/cancel``, answered from
the ``ToolTask`` (a client asking often costs the server nothing).

Rules:

1. A task's id is the gateway's own: ``tl-task.<instance>.<secret>``, the secret from
   ``secrets.token_urlsafe`` (``SECRET_BYTES`` random bytes), the instance naming the
   gateway process that holds it (as a legacy session id does, so a balancer can route
   on ``Mcp-Name``, and a sibling copy can pass the request on). The server's own id
   never reaches the client, nor the client's anything of another's.
2. A task is bound to its owner (``Caller.owner``): the identity of the OAuth access
   token it was started with, a legacy session, the stdio face's connection; None for a
   modern HTTP client without a token, whose task any holder of its id may ask about
   (its id is unguessable, and nothing more binds it). A look-up by anyone else, or for
   an id never given or since dropped, finds nothing, alike (the client is answered
   -32602 "Task not found" either way).
3. Bounds: at most ``client_tasks`` tasks per client (``Caller.client``: its owner, else
   its address) and ``tasks`` in all, counting those held and the places of calls that
   may yet make one (``reserve``, as the call's work starts). At a bound, the oldest
   ended task of that client (for the overall bound: of anyone's) is dropped to make
   room; when none has ended, the call is refused (``admission.overloaded``: 429 for the
   client's bound, 503 for the gateway's), before anything is sent upstream.
4. An ended task is kept for its TTL from when the gateway saw it created: the server's
   ``ttlMs`` when it is shorter than ``task_ttl_s``, else ``task_ttl_s`` (the ``ttlMs``
   the client is told), then dropped. A task still running is never dropped for its
   age: its host follows it to its end (the server's own TTL ends it), and it is dropped
   once it has ended past its time. Expiries are looked at lazily, by the next
   ``reserve`` or ``find``, in the order they come (one heap).
5. A client's status is the task's as the host last heard it, its end the host's:
   ``completed`` with the result (as the call would have been answered), ``failed`` with
   the JSON-RPC error (the server's own, or what the gateway says went wrong: the task
   lost, its result refused), ``cancelled``. ``input_required`` only while the task
   waits for input its client can give (``inputRequests``); input the host answers
   itself (a legacy server asks with requests of its own) is ``working``. ``createdAt``
   and ``lastUpdatedAt`` are the server's when it gives them, else the gateway's.
6. The table lives in the gateway process: a restart loses it (the tasks go on upstream,
   followed by nobody, until their servers drop them).
7. A 2025-11-25 client has core tasks of its own (``capabilities.tasks``): a session's
   ``tools/call`` naming ``params.task`` is always answered with a task
   (``{"task": Task}``, the fields ``ttl`` and ``pollInterval``), held here bound to the
   session (or the stdio connection) as a modern client's is. When its server answered
   at once (it runs no tasks, or chose not to), the result is held as a task that has
   ended (``EndedCall``): so every tool may be called as one. The client asks with
   ``tasks/get``, ``tasks/result`` (the call's result once the task ends, as the call
   would have been answered, with ``_meta`` ``related-task``; a failed task's error as
   the error), ``tasks/list`` (its own, a page at a time) and ``tasks/cancel`` (refused,
   -32602, for a task that has ended). A ``ttl`` it asks for shortens the keeping, never
   lengthens it.
"""

from __future__ import annotations

import heapq
import itertools
import math
import secrets
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from ..errors import TaskCancelled
from ..parent.results import CallToolResult
from ..parent.tasks import TaskStatus, ToolTask
from ..protocol.tasks import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    RELATED_TASK,
    TASKS_EXTENSION,
    WORKING,
)
from ..protocol.versions import META_CLIENT_CAPABILITIES
from . import protocol as p
from .admission import CLIENT, GATEWAY, overloaded

#: What every task id the gateway gives starts with (rule 1).
TASK_PREFIX = "tl-task."
#: Random bytes in an id's secret.
SECRET_BYTES = 24
#: The requests of the extension the gateway answers.
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
#: The core tasks requests of 2025-11-25 the gateway answers a legacy client (rule 7).
LEGACY_TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
#: The ``capabilities.tasks`` the gateway declares to a legacy client (rule 7).
LEGACY_CAPABILITY: Mapping[str, Any] = {"list": {}, "cancel": {},
                                        "requests": {"tools": {"call": {}}}}
#: Tasks in one page of ``tasks/list``.
PAGE_SIZE = 100
#: How long a task still running past its time waits for the table's next look at it.
_RECHECK_S = 60.0


def takes_tasks(meta: Mapping[str, Any]) -> bool:
    """Whether a modern request's ``_meta`` names the tasks extension among its client's
    capabilities."""
    declared = meta.get(META_CLIENT_CAPABILITIES)
    extensions = declared.get("extensions") if type(declared) is dict else None
    return type(extensions) is dict and TASKS_EXTENSION in extensions


def asks_task(params: Mapping[str, Any]) -> bool:
    """Whether a legacy ``tools/call``'s params ask for it to run as a task (rule 7)."""
    return type(params.get("task")) is dict


def asked_ttl_ms(params: Mapping[str, Any]) -> int | None:
    """The ``ttl`` a legacy client asked its task kept for, when it is a positive
    number."""
    task = params.get("task")
    ttl = task.get("ttl") if type(task) is dict else None
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or \
            not math.isfinite(ttl) or ttl <= 0:
        return None
    return max(1, int(ttl))


def missing_extension() -> dict[str, Any]:
    """-32021 for a ``tasks/*`` request of a client that did not name the extension."""
    return p.missing_capabilities({"extensions": {TASKS_EXTENSION: {}}})


def not_found() -> dict[str, Any]:
    """Rule 2: an unknown id, another's, or one dropped, all alike."""
    return p.error(p.INVALID_PARAMS, "Failed to retrieve task: Task not found")


def instance_of(task_id: str) -> str | None:
    """The gateway process an id of ours names (rule 1); None for any other id."""
    if not task_id.startswith(TASK_PREFIX):
        return None
    instance, dot, _ = task_id[len(TASK_PREFIX):].partition(".")
    return instance if dot and instance else None


class Caller:
    """Who a request's tasks are (rule 2 and 3): ``owner``, whom they are bound to (None:
    no one), and ``client``, whose bound they count against (None: the overall one
    only)."""

    __slots__ = ("owner", "client")

    def __init__(self, owner: Hashable, client: Hashable) -> None:
        self.owner = owner
        self.client = client


NOBODY = Caller(None, None)


class EndedCall:
    """A call its server answered at once, held as a task that has ended (rule 7): what
    the table reads of a ``ToolTask``, all of it settled."""

    __slots__ = ("server", "task_id", "status", "_result")

    def __init__(self, server: str | None, result: CallToolResult) -> None:
        self.server = server
        #: No server holds it: it has no server id.
        self.task_id = ""
        self.status = TaskStatus("", COMPLETED)
        self._result = result

    def done(self) -> bool:
        return True

    def outcome(self) -> CallToolResult:
        return self._result

    async def wait(self, timeout: float | None = None) -> CallToolResult:
        return self._result

    async def cancel(self) -> None:
        return None


Held = ToolTask | EndedCall


class Place:
    """A call's place in the table while it may yet make a task (rule 3)."""

    __slots__ = ("client",)

    def __init__(self, client: Hashable) -> None:
        self.client = client


class HeldTask:
    """One task the gateway holds for a client."""

    __slots__ = ("id", "task", "owner", "client", "created_at", "ttl_ms", "ended_at", "seq",
                 "order")

    def __init__(self, task_id: str, task: Held, owner: Hashable, client: Hashable,
                 created_at: str, ttl_ms: int, seq: int, order: int) -> None:
        self.id = task_id
        self.task = task
        self.owner = owner
        self.client = client
        #: ``createdAt``: the server's, else when the gateway saw it created.
        self.created_at = created_at
        #: What the client is told, and what the gateway keeps it for (rule 4).
        self.ttl_ms = ttl_ms
        #: When its client cancelled it here (seconds since the epoch), if it did.
        self.ended_at: float | None = None
        #: Its entry in the expiry heap (an entry of a task since dropped is stale).
        self.seq = seq
        #: Its place among the tasks held, in the order they were made (``tasks/list``).
        self.order = order


class TaskTable:
    """The tasks one gateway process holds (the rules above)."""

    def __init__(self, instance: str, *, client_tasks: int, tasks: int, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._prefix = f"{TASK_PREFIX}{instance}."
        self.client_tasks = client_tasks
        self.tasks = tasks
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._clock = clock
        self._wall = wall
        self._held: dict[str, HeldTask] = {}
        #: Each client's tasks, oldest first.
        self._by_client: dict[Hashable, dict[str, HeldTask]] = {}
        #: Tasks and places, per client and in all.
        self._counts: dict[Hashable, int] = {}
        self._total = 0
        #: ``(when, seq, id)``: when each task's time is up (rule 4).
        self._expiries: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._held)

    # -- a call that may make a task ----------------------------------------------------

    def reserve(self, client: Hashable) -> Place | dict[str, Any]:
        """A place for a call of ``client``'s that may make a task, or the refusal
        (rule 3)."""
        self._expire(self._clock())
        if client is not None and self._counts.get(client, 0) >= self.client_tasks:
            oldest = self._oldest_ended(self._by_client.get(client, {}).values())
            if oldest is None:
                return overloaded(CLIENT, self.client_tasks, None, budget="client_tasks",
                                  what=f"this client holds {self.client_tasks} tasks that "
                                  "have not ended, its limit (client_tasks): wait for "
                                  "their results, or cancel some")
            self._drop(oldest)
        if self._total >= self.tasks:
            oldest = self._oldest_ended(self._held.values())
            if oldest is None:
                return overloaded(GATEWAY, self.tasks, None, what=(
                    f"the gateway holds {self.tasks} tasks that have not ended, its limit "
                    "(tasks)"))
            self._drop(oldest)
        self._count(client, 1)
        return Place(client)

    def release(self, place: Place) -> None:
        """The call made no task: its place goes back."""
        self._count(place.client, -1)

    def hold(self, place: Place, task: Held, owner: Hashable,
             asked_ttl_ms: int | None = None) -> HeldTask:
        """The call made ``task``: held from now on in ``place``, bound to ``owner``, for
        its time (rule 4), shortened to ``asked_ttl_ms`` when its client asked less (rule
        7)."""
        task_id = self._prefix + secrets.token_urlsafe(SECRET_BYTES)
        ttl = task.status.ttl_ms
        ttl_ms = self._ttl_ms if ttl is None or not ttl < self._ttl_ms else max(1, int(ttl))
        if asked_ttl_ms is not None:
            ttl_ms = min(ttl_ms, asked_ttl_ms)
        seq = next(self._seq)
        created = task.status.created_at
        held = HeldTask(task_id, task, owner, place.client,
                        created if isinstance(created, str) else _iso(self._wall()),
                        ttl_ms, seq, next(self._order))
        self._held[task_id] = held
        if place.client is not None:
            self._by_client.setdefault(place.client, {})[task_id] = held
        heapq.heappush(self._expiries, (self._clock() + ttl_ms / 1000, seq, task_id))
        return held

    # -- a client's requests about its tasks --------------------------------------------

    def find(self, task_id: Any, owner: Hashable) -> HeldTask | None:
        """The task ``task_id`` names, if ``owner``'s (rule 2)."""
        self._expire(self._clock())
        held = self._held.get(task_id) if type(task_id) is str else None
        if held is None or held.owner != owner:
            return None
        return held

    def page(self, owner: Hashable, cursor: Any) -> tuple[list[HeldTask], str | None] | None:
        """A page of ``owner``'s tasks, oldest first, after ``cursor`` (None: from the
        first), and the cursor of the next page (None: this was the last); None for a
        cursor the table never gave. The cursor names a place in the order, not a task,
        so a task dropped meanwhile loses no one their place."""
        self._expire(self._clock())
        after = -1
        if cursor is not None:
            if type(cursor) is not str or not cursor.startswith(_CURSOR) or \
                    not cursor[len(_CURSOR):].isdigit():
                return None
            after = int(cursor[len(_CURSOR):])
        own = [held for held in self._held.values()
               if held.owner == owner and held.order > after]
        if len(own) <= PAGE_SIZE:
            return own, None
        page = own[:PAGE_SIZE]
        return page, f"{_CURSOR}{page[-1].order}"

    def cancelled(self, held: HeldTask) -> None:
        """Its client cancelled the task (its host is told to, by the caller)."""
        if held.ended_at is None and not held.task.done():
            held.ended_at = self._wall()

    def drop_owner(self, owner: Hashable) -> list[ToolTask]:
        """``owner`` is gone (its session ended): its tasks are dropped; those still
        running, returned, are the caller's to cancel."""
        gone = [held for held in self._held.values() if held.owner == owner]
        for held in gone:
            self._drop(held)
        return [held.task for held in gone
                if not isinstance(held.task, EndedCall) and not held.task.done()]

    # -- internals ------------------------------------------------------------------------

    def _count(self, client: Hashable, step: int) -> None:
        self._total += step
        if client is None:
            return
        count = self._counts.get(client, 0) + step
        if count:
            self._counts[client] = count
        else:
            self._counts.pop(client, None)

    def _drop(self, held: HeldTask) -> None:
        del self._held[held.id]
        own = self._by_client.get(held.client)
        if own is not None:
            own.pop(held.id, None)
            if not own:
                del self._by_client[held.client]
        self._count(held.client, -1)

    @staticmethod
    def _oldest_ended(held: Iterable[HeldTask]) -> HeldTask | None:
        return next((h for h in held if h.task.done()), None)

    def _expire(self, now: float) -> None:
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            _, seq, task_id = heapq.heappop(expiries)
            held = self._held.get(task_id)
            if held is None or held.seq != seq:
                continue
            if held.task.done():
                self._drop(held)
            else:  # still running: dropped once it has ended (rule 4)
                held.seq = next(self._seq)
                heapq.heappush(expiries, (now + _RECHECK_S, held.seq, task_id))


#: What a ``tasks/list`` cursor starts with.
_CURSOR = "tl-tasks."


# --- what a client is told -------------------------------------------------------------


def created_result(held: HeldTask) -> dict[str, Any]:
    """The ``CreateTaskResult`` a ``tools/call`` is answered with: the flat ``Task``."""
    out = _task(held, _status(held))
    out["resultType"] = "task"
    return out


def detailed_task(held: HeldTask, era: p.ClientEra) -> dict[str, Any] | bytes:
    """The ``tasks/get`` result: the task with its status's payload (rule 5); a result
    the host kept as the bytes it came in goes on as them (``protocol`` rule 7), inside
    the answer's own bytes."""
    status = _status(held)
    out = _task(held, status)
    out["resultType"] = "complete"
    outcome: Any = held.task.outcome()
    if status == INPUT_REQUIRED:
        out["inputRequests"] = dict(held.task.status.input_requests)
    elif status == COMPLETED:
        assert isinstance(outcome, CallToolResult)
        passed = p.passed_on_result(outcome.raw, outcome.raw_json, era)
        if passed is not None:
            return orjson.dumps(out)[:-1] + b',"result":' + passed + b"}"
        out["result"] = p.served_result(outcome.raw, era, "tools/call")
    elif status == FAILED:
        out["error"] = p.error_for(outcome)
    return out


def _status(held: HeldTask) -> str:
    """Rule 5."""
    task = held.task
    if task.done():
        outcome = task.outcome()
        if isinstance(outcome, CallToolResult):
            return COMPLETED
        return CANCELLED if isinstance(outcome, TaskCancelled) else FAILED
    status = task.status
    if status.status == INPUT_REQUIRED and status.input_requests:
        return INPUT_REQUIRED
    return WORKING


def _task(held: HeldTask, status: str) -> dict[str, Any]:
    seen = held.task.status
    created = held.created_at
    if held.ended_at is not None:
        updated = _iso(held.ended_at)
    elif isinstance(seen.last_updated_at, str):
        updated = seen.last_updated_at
    else:
        updated = created
    out: dict[str, Any] = {"taskId": held.id, "status": status}
    if seen.message is not None:
        out["statusMessage"] = seen.message
    out["createdAt"] = created
    out["lastUpdatedAt"] = updated
    out["ttlMs"] = held.ttl_ms
    interval = seen.poll_interval_ms
    if interval is not None and math.isfinite(interval):
        out["pollIntervalMs"] = max(1, round(interval))
    return out


def legacy_created(held: HeldTask) -> dict[str, Any]:
    """A legacy ``tools/call``'s ``CreateTaskResult`` (rule 7)."""
    return {"task": legacy_task(held)}


def legacy_task(held: HeldTask) -> dict[str, Any]:
    """The task as a 2025-11-25 client is told of it (``tasks/get``, ``tasks/list``,
    ``tasks/cancel``): ``ttl`` and ``pollInterval``, in milliseconds."""
    out = _task(held, _status(held))
    out["ttl"] = out.pop("ttlMs")
    if "pollIntervalMs" in out:
        out["pollInterval"] = out.pop("pollIntervalMs")
    return out


def legacy_result(held: HeldTask) -> dict[str, Any]:
    """``tasks/result`` of a task that has ended: the call's result as a legacy client is
    answered it, naming the task in its ``_meta``; or the error, for a task that did not
    complete (its ``error``, to answer with)."""
    outcome: object = held.task.outcome()
    if not isinstance(outcome, CallToolResult):
        assert isinstance(outcome, BaseException)  # the task has ended
        return {"error": p.error_for(outcome)}
    result = dict(p.served_result(outcome.raw, p.ClientEra.LEGACY, "tools/call"))
    meta = result.get("_meta")
    result["_meta"] = {**(meta if isinstance(meta, dict) else {}),
                       RELATED_TASK: {"taskId": held.id}}
    return {"result": result}


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


__all__ = ["LEGACY_CAPABILITY", "LEGACY_TASK_METHODS", "NOBODY", "PAGE_SIZE", "TASK_METHODS",
           "TASK_PREFIX", "Caller", "EndedCall", "Held", "HeldTask", "Place", "TaskTable",
           "asked_ttl_ms", "asks_task", "created_result", "detailed_task", "instance_of",
           "legacy_created", "legacy_result", "legacy_task", "missing_extension", "not_found",
           "takes_tasks"]
