"""Following one task to its end, as a pure state machine: looks at the task in, when to
look next out.

A task is work a server runs beyond one request (MCP's tasks: the extension
``io.modelcontextprotocol/tasks`` in 2026-07-28, core tasks in 2025-11-25). The server
answers a ``tools/call`` with a task (``resultType: "task"``, or a legacy
``CreateTaskResult``); the client looks at it with ``tasks/get`` until it ends.

Rules:

1. Every look at a task is checked before it is believed (``task_view``): an object, the
   same ``taskId``, a known ``status``, non-negative numbers for the interval and the TTL;
   in a modern ``tasks/get``, ``input_required`` carries an ``inputRequests`` object,
   ``completed`` a ``result`` object, ``failed`` an ``error`` object. A creation is a bare
   task whatever its status (the first ``tasks/get`` brings its payload), and a legacy
   task's payloads come with ``tasks/result``. A bad look fails the task
   (``MalformedMessage``): guessing would hand the caller a result the server never gave.
2. The statuses move ``working`` <-> ``input_required`` -> one of ``completed``,
   ``failed``, ``cancelled``; a terminal status is final: nothing after it is looked at.
   The machine says its end once (``Ended``, ``Forgotten`` or ``Overdue``); any event
   after it is the driver's bug and raises. A creation that says a terminal status
   carries no payload: it is looked at after the floor.
3. The next look is due after the server's ``pollIntervalMs`` (legacy ``pollInterval``),
   or ``TaskLimits.default_poll_s`` without one, never sooner than the floor
   (``min_poll_s``: a server asking for 0 cannot make the client spin) and never later
   than the cap (``max_poll_s``: a server asking for an hour is still looked at), and
   never after the caller's deadline.
4. A look that fails is tried again after a back-off that doubles from the floor to the
   cap, at most ``max_failed_looks`` times in a row; ``-32602`` (the server does not know
   the task) is final at once: the task is ``Forgotten``.
5. A task that stays unfinished past its ``ttlMs`` (counted from when the client saw it
   created, the server's clock never trusted, whatever ``ttlMs`` the latest look says)
   and one poll interval more is ``Forgotten``: the server may have dropped it. A
   caller's deadline that passes first is ``Overdue``: the driver cancels the task
   upstream.
6. ``inputRequests`` keys are asked once each: a key seen in an earlier look is not asked
   again (the server repeats outstanding requests on every look). At most
   ``max_input_requests`` keys per look.

The machine does no I/O and reads no clock: every event takes ``now``; the driver (the
worker's ``TaskPoller``) sends the looks and keeps the timers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import MalformedMessage
from .validate import json_type

#: The extension's identifier (2026-07-28), negotiated per request in
#: ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: The ``resultType`` of a modern ``CreateTaskResult``.
RESULT_TYPE_TASK = "task"
#: The ``_meta`` key a legacy (2025-11-25) message names the task it is about with.
RELATED_TASK = "io.modelcontextprotocol/related-task"

WORKING = "working"
INPUT_REQUIRED = "input_required"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TERMINAL: frozenset[str] = frozenset({COMPLETED, FAILED, CANCELLED})
STATUSES: frozenset[str] = TERMINAL | {WORKING, INPUT_REQUIRED}

#: The JSON-RPC error a server gives for a task it does not know (rule 4).
UNKNOWN_TASK = -32602


@dataclass(frozen=True)
class TaskLimits:
    #: Seconds: the shortest wait between two looks at one task (rule 3).
    min_poll_s: float = 0.05
    #: Seconds: the longest.
    max_poll_s: float = 30.0
    #: Seconds: the wait when the server names none.
    default_poll_s: float = 1.0
    #: Failed looks in a row before the task is given up (rule 4).
    max_failed_looks: int = 5
    #: ``inputRequests`` keys in one look (rule 6).
    max_input_requests: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.min_poll_s <= self.max_poll_s < math.inf:
            raise ValueError("TaskLimits needs 0 < min_poll_s <= max_poll_s, both finite")
        if not self.default_poll_s > 0:  # NaN too; beyond the floor or the cap: taken to it
            raise ValueError("TaskLimits needs default_poll_s > 0")
        if self.max_failed_looks < 0 or self.max_input_requests < 1:
            raise ValueError("TaskLimits: max_failed_looks >= 0, max_input_requests >= 1")


@dataclass(frozen=True, slots=True)
class TaskView:
    """One checked look at a task (rule 1): its creation or a ``tasks/get`` answer."""

    task_id: str
    status: str
    status_message: str | None = None
    #: Milliseconds, as the server last said (None: it did not).
    poll_interval_ms: float | None = None
    ttl_ms: float | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    #: ``input_required`` (modern): the server's outstanding requests, by key.
    input_requests: dict[str, Any] | None = None
    #: ``completed`` (modern): the request's result, inlined.
    result: dict[str, Any] | None = None
    #: ``failed`` (modern): the JSON-RPC error the request ended with.
    error: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL


def related_task(params: Any) -> str | None:
    """The id of the task a legacy message's params name in ``_meta`` (``related-task``),
    if they name one."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    related = meta.get(RELATED_TASK) if isinstance(meta, dict) else None
    task_id = related.get("taskId") if isinstance(related, dict) else None
    return task_id if isinstance(task_id, str) else None


def _number(raw: dict[str, Any], key: str, what: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) is int and value >= 0:
        try:
            return float(value)
        except OverflowError:  # JSON bounds no integer: this one is longer than any wait
            return math.inf
    if type(value) is float and 0 <= value < math.inf:  # JSON has no NaN or Infinity
        return value
    raise MalformedMessage(f"{what}: {key} is {json_type(value)} {value!r}, "
                           "not a non-negative number")


def _text(raw: dict[str, Any], key: str, what: str) -> str | None:
    value = raw.get(key)
    if value is None or isinstance(value, str):
        return value
    raise MalformedMessage(f"{what}: {key} is a JSON {json_type(value)}, not a string")


def task_view(raw: Any, *, legacy: bool = False, task_id: str | None = None,
              created: bool = False) -> TaskView:
    """A look at a task, checked (rule 1). ``raw``: a modern ``CreateTaskResult`` or
    ``tasks/get`` result (flat), or a legacy ``tasks/get`` result (flat) or, with
    ``created``, a legacy ``CreateTaskResult`` (``{"task": {...}}``). ``task_id``: the id
    the look must name (a ``tasks/get`` for it)."""
    what = "task creation" if created else "tasks/get result"
    if legacy and created:
        if not isinstance(raw, dict) or not isinstance(raw.get("task"), dict):
            raise MalformedMessage(f"{what}: no task object")
        raw = raw["task"]
    if not isinstance(raw, dict):
        raise MalformedMessage(f"{what} is a JSON {json_type(raw)}, not an object")
    found = raw.get("taskId")
    if not isinstance(found, str) or not found:
        raise MalformedMessage(f"{what}: taskId is missing or not a string")
    if task_id is not None and found != task_id:
        raise MalformedMessage(f"{what}: names another task than the one asked for")
    status = raw.get("status")
    if not isinstance(status, str) or status not in STATUSES:
        raise MalformedMessage(f"{what}: status {status!r} is none of {sorted(STATUSES)}")
    interval, ttl = ("pollInterval", "ttl") if legacy else ("pollIntervalMs", "ttlMs")
    view = TaskView(
        task_id=found, status=status,
        status_message=_text(raw, "statusMessage", what),
        poll_interval_ms=_number(raw, interval, what), ttl_ms=_number(raw, ttl, what),
        created_at=_text(raw, "createdAt", what),
        last_updated_at=_text(raw, "lastUpdatedAt", what))
    if legacy or created:
        return view  # a bare task: its payloads come with tasks/get or tasks/result
    if status == INPUT_REQUIRED:
        requests = raw.get("inputRequests")
        if not isinstance(requests, dict):
            raise MalformedMessage(f"{what}: input_required without an inputRequests object")
        return _with(view, input_requests=requests)
    if status == COMPLETED:
        result = raw.get("result")
        if not isinstance(result, dict):
            raise MalformedMessage(f"{what}: completed without a result object")
        return _with(view, result=result)
    if status == FAILED:
        error = raw.get("error")
        if not isinstance(error, dict):
            raise MalformedMessage(f"{what}: failed without an error object")
        return _with(view, error=error)
    return view


def _with(view: TaskView, **fields: Any) -> TaskView:
    values = {name: getattr(view, name) for name in TaskView.__slots__}
    values.update(fields)
    return TaskView(**values)


# --- what the machine says -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Look:
    """Nothing to tell: look again at ``at``."""

    at: float


@dataclass(frozen=True, slots=True)
class Changed:
    """The task moved (status or message): tell the caller ``view``; look again at ``at``.
    ``asks``: ``inputRequests`` entries not asked before (rule 6), in the server's order."""

    view: TaskView
    at: float
    asks: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ended:
    """The task reached ``view.status``, a terminal one: stop looking."""

    view: TaskView


@dataclass(frozen=True, slots=True)
class Forgotten:
    """The server no longer knows the task, or it outlived its TTL: stop looking."""

    reason: str


@dataclass(frozen=True, slots=True)
class Overdue:
    """The caller's deadline passed first: stop looking, cancel the task upstream."""


Step = Look | Changed | Ended | Forgotten | Overdue


class TaskPoll:
    """One task, from the look that created it to its end (the rules above)."""

    __slots__ = ("_asked", "_backoff", "_created", "_deadline", "_expires", "_failures",
                 "_limits", "_view", "ended")

    def __init__(self, created: TaskView, now: float, *, deadline: float | None = None,
                 limits: TaskLimits | None = None) -> None:
        self._limits = limits or TaskLimits()
        self._view = created
        self._deadline = deadline
        self._failures = 0
        #: Seconds: the last wait after a failed look (rule 4), doubled from the floor.
        self._backoff = self._limits.min_poll_s
        self._asked: set[str] = set()
        self._created = now
        self._expires = self._expiry(created)
        #: True once the machine said ``Ended``, ``Forgotten`` or ``Overdue``.
        self.ended = False

    @property
    def view(self) -> TaskView:
        """The latest look."""
        return self._view

    def first(self, now: float) -> Step:
        """What the creating look itself says: it may ask for input; if it says the
        task ended, look after the floor (rule 2: a creation carries no payload)."""
        self._still_going()
        if self._view.ended:
            return self._overdue(now) or Look(self._capped(now + self._limits.min_poll_s))
        return self._judge(self._view, now, changed=True)

    def seen(self, view: TaskView, now: float) -> Step:
        """A ``tasks/get`` answered with ``view`` (checked by ``task_view``)."""
        self._still_going()
        self._failures = 0
        self._backoff = self._limits.min_poll_s
        before = self._view
        changed = (view.status != before.status
                   or view.status_message != before.status_message)
        self._view = view
        self._expires = self._expiry(view)
        return self._judge(view, now, changed=changed)

    def failed(self, code: int | None, now: float, detail: str = "") -> Step:
        """A ``tasks/get`` failed: the server's JSON-RPC error ``code``, or None (no
        answer: a timeout, the connection lost)."""
        self._still_going()
        if code == UNKNOWN_TASK:
            return self._end(Forgotten(f"the server no longer knows the task ({detail})"
                                       if detail else "the server no longer knows the task"))
        self._failures += 1
        if self._failures > self._limits.max_failed_looks:
            return self._end(Forgotten(
                f"{self._failures} looks at the task failed in a row"
                + (f", the last: {detail}" if detail else "")))
        overdue = self._overdue(now)
        if overdue is not None:
            return overdue
        # Doubled step by step, never raised to a power: the count has no bound of its own.
        self._backoff = min(self._backoff * 2, self._limits.max_poll_s)
        return Look(self._capped(now + self._backoff))

    def due(self, now: float) -> Step | None:
        """At a timer: ``Overdue`` or ``Forgotten`` if the deadline or the TTL passed,
        else None (send the look)."""
        self._still_going()
        return self._overdue(now)

    # -- internals -----------------------------------------------------------------------

    def _still_going(self) -> None:
        if self.ended:
            raise RuntimeError("the task's end was already said")

    def _judge(self, view: TaskView, now: float, *, changed: bool) -> Step:
        if view.ended:
            return self._end(Ended(view))
        overdue = self._overdue(now)
        if overdue is not None:
            return overdue
        at = self._capped(now + self._interval(view))
        asks: dict[str, Any] = {}
        if view.input_requests:
            for key, value in view.input_requests.items():
                if key not in self._asked and len(asks) < self._limits.max_input_requests:
                    asks[key] = value
            self._asked.update(asks)
        if changed or asks:
            return Changed(view, at, asks)
        return Look(at)

    def _interval(self, view: TaskView) -> float:
        limits = self._limits
        asked = view.poll_interval_ms
        wait = limits.default_poll_s if asked is None else asked / 1000.0
        return min(max(wait, limits.min_poll_s), limits.max_poll_s)

    def _capped(self, at: float) -> float:
        return at if self._deadline is None else min(at, self._deadline)

    def _overdue(self, now: float) -> Step | None:
        if self._deadline is not None and now >= self._deadline:
            return self._end(Overdue())
        if self._expires is not None and now >= self._expires:
            return self._end(Forgotten("the task outlived its ttlMs without ending"))
        return None

    def _expiry(self, view: TaskView) -> float | None:
        # From when the client saw it created (rule 5), with one poll interval of grace.
        if view.ttl_ms is None:
            return None
        return self._created + view.ttl_ms / 1000.0 + self._interval(view)

    def _end(self, step: Step) -> Step:
        self.ended = True
        return step


__all__ = [
    "CANCELLED", "COMPLETED", "FAILED", "INPUT_REQUIRED", "RESULT_TYPE_TASK", "STATUSES",
    "TASKS_EXTENSION", "TERMINAL", "UNKNOWN_TASK", "WORKING", "Changed", "Ended",
    "Forgotten", "Look", "Overdue", "Step", "TaskLimits", "TaskPoll", "TaskView",
    "task_view",
]
