#!/usr/bin/env python3
"""A small MCP 2026-07-28 server on stdio that runs its tool as tasks (the tasks extension,
``io.modelcontextprotocol/tasks``), and counts how its clients look at them: the server of
the tasks benchmark (``bench_tasks.py``, ``task_wait.py``).

Why a project peer: what is measured is a client waiting on a thousand tasks of one
server, each lasting a chosen time and asking a chosen ``pollIntervalMs``, with every look
timed where it lands. No real server does that on demand: the one installed here that runs
tasks (server-everything's ``simulate-research-query``) speaks 2025-11-25, not the
2026-07-28 extension, runs each task at its own pace and counts nothing. This one does
only that, cheaply (stdlib asyncio and orjson), so that the client is what is measured.

    python benches/task_server.py --poll-interval-ms 1000 --duration 5 [--ttl-ms 60000]
        [--stats STATS.json]

Answers, one JSON-RPC message per line each way:

* ``server/discover``: ``supportedVersions`` 2026-07-28, capabilities ``tools`` and
  ``extensions["io.modelcontextprotocol/tasks"] = {}``; ``ping``: ``{}``.
* ``tools/list``: ``job`` ``{text: string}`` and ``stats`` ``{from?, to?: number}``.
* ``tools/call`` ``job``: when the request's
  ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions`` declares the tasks
  extension, a ``CreateTaskResult`` (``resultType: "task"``, ``taskId``, ``status``
  ``working``, ``createdAt``, ``lastUpdatedAt``, ``ttlMs``, ``pollIntervalMs``) at once;
  the task completes ``--duration`` seconds after. Otherwise the job runs as long and
  the call is answered with its result. The result either way:
  ``{"content":[{"type":"text","text": TEXT}],"isError":false}``, ``TEXT`` the argument.
* ``tasks/get``: the task (a ``DetailedTask``, ``resultType: "complete"``), its result
  inlined once completed; ``tasks/cancel``: the task, cancelled unless it had ended. An
  unknown ``taskId`` gets -32602.
* ``tools/call`` ``stats``: the summary below as the text of its result (and written to
  ``--stats``); ``from`` and ``to`` (seconds of ``time.monotonic()``) also count the
  looks between them (``polls_between``).
* ``subscriptions/listen``: acknowledged, nothing granted (the stream stays open, quiet);
  anything else: -32601.

The summary (written to ``--stats`` at exit too: stdin's end or SIGTERM): ``tasks``
created, ``plain_calls``, ``cancelled``, ``methods`` (requests received, by method),
``polls`` (``tasks/get`` answered), ``polls_unknown`` (for no task of ours),
``polls_after_end`` (at a task whose end a look already showed), ``completed_seen``
(tasks whose completion a look showed), ``unlooked`` (tasks never looked at), the first and
last look and creation (``time.monotonic()`` seconds: on Linux the same clock in every
process, so a client can set them beside its own readings), and, in seconds: ``gap`` (the
time between two looks at one task: count, min, median, mean), ``per_task_min_gap`` and
``per_task_median_gap`` (min, median over tasks), ``first_look`` (creation to the first
look: min, median), ``seen_late`` (completion to the look that showed it: median, max),
``polls_per_task`` (min, median, max).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import os
import secrets
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = {"io.modelcontextprotocol/serverInfo": {"name": "task-server",
                                                      "version": "1.0.0"}}
TOOLS = [
    {"name": "job", "description": "Runs for the server's --duration, then answers its text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "stats", "description": "How the server's tasks were looked at (JSON text).",
     "inputSchema": {"type": "object", "properties": {"from": {"type": "number"},
                                                      "to": {"type": "number"}}}},
]
UNKNOWN = -32602
NOT_FOUND = -32601


@dataclass
class Task:
    task_id: str
    text: str
    #: ``time.monotonic()`` and the wall clock (``time.time()``) at its creation.
    created: float
    created_wall: float
    #: ISO 8601 of its cancellation (None: not cancelled).
    cancelled_at: str | None = None
    #: ``time.monotonic()`` of each ``tasks/get`` answered for it.
    looks: list[float] = field(default_factory=list)
    #: The ``time.monotonic()`` of the look that showed it ended (None: none yet).
    end_seen: float | None = None


def _iso(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def _result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


class TaskServer:
    """The server's state: its tasks and the looks at them. ``handle`` answers one
    request; nothing here does I/O but ``send``."""

    def __init__(self, poll_interval_ms: int, duration_s: float, ttl_ms: int,
                 send: Any, later: Any, stats_path: str | None = None) -> None:
        self.poll_interval_ms = poll_interval_ms
        self.duration_s = duration_s
        self.ttl_ms = ttl_ms
        self.stats_path = stats_path
        self._send = send
        self._later = later
        self._prefix = secrets.token_hex(6)
        self._numbers = itertools.count(1)
        self.tasks: dict[str, Task] = {}
        self.plain_calls = 0
        self.polls = 0
        self.polls_unknown = 0
        self.polls_after_end = 0
        self.first_poll: float | None = None
        self.last_poll: float | None = None
        #: Requests received, by method (notifications included).
        self.methods: dict[str, int] = {}

    # -- requests ------------------------------------------------------------------------

    def handle(self, msg: dict[str, Any]) -> None:
        method, rid = msg.get("method"), msg.get("id")
        key = str(method)
        self.methods[key] = self.methods.get(key, 0) + 1
        if rid is None:
            return  # a notification: nothing to answer
        params = msg.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "tasks/get":
            self._get(rid, params)
        elif method == "tools/call":
            self._call(rid, params)
        elif method == "tasks/cancel":
            self._cancel(rid, params)
        elif method == "server/discover":
            self._answer(rid, {"supportedVersions": [MODERN], "capabilities": {
                "tools": {}, "extensions": {TASKS_EXTENSION: {}}}, "ttlMs": 0,
                "cacheScope": "public"})
        elif method == "tools/list":
            self._answer(rid, {"tools": TOOLS, "ttlMs": 0, "cacheScope": "public"})
        elif method == "ping":
            self._answer(rid, {})
        elif method == "subscriptions/listen":
            self._send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                        "params": {"notifications": {},
                                   "_meta": {"io.modelcontextprotocol/subscriptionId": rid}}})
        else:
            self._error(rid, NOT_FOUND, f"method not found: {method}")

    def _call(self, rid: Any, params: dict[str, Any]) -> None:
        name = params.get("name")
        args = params.get("arguments")
        args = args if isinstance(args, dict) else {}
        if name == "stats":
            window = (args.get("from"), args.get("to"))
            text = orjson.dumps(self.summary(window)).decode()
            self.write_stats(text)
            self._answer(rid, _result(text))
            return
        text = args.get("text")
        if name != "job" or not isinstance(text, str):
            self._error(rid, UNKNOWN, "job takes {text: string}; tools: job, stats")
            return
        if not self._declares_tasks(params):
            self.plain_calls += 1
            self._later(self.duration_s, lambda: self._answer(rid, _result(text)))
            return
        now = time.monotonic()
        task = Task(f"{self._prefix}-{next(self._numbers)}", text, now, time.time())
        self.tasks[task.task_id] = task
        self._answer(rid, {"resultType": "task", **self._view(task, now)})

    def _get(self, rid: Any, params: dict[str, Any]) -> None:
        now = time.monotonic()
        task = self.tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if task is None:
            self.polls_unknown += 1
            self._error(rid, UNKNOWN, "unknown task")
            return
        self.polls += 1
        if self.first_poll is None:
            self.first_poll = now
        self.last_poll = now
        if task.end_seen is not None:
            self.polls_after_end += 1
        task.looks.append(now)
        view = self._view(task, now, detailed=True)
        if view["status"] != "working" and task.end_seen is None:
            task.end_seen = now
        self._answer(rid, view)

    def _cancel(self, rid: Any, params: dict[str, Any]) -> None:
        now = time.monotonic()
        task = self.tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if task is None:
            self._error(rid, UNKNOWN, "unknown task")
            return
        if not self._done(task, now) and task.cancelled_at is None:
            task.cancelled_at = _iso(time.time())
        self._answer(rid, self._view(task, now))

    # -- tasks ---------------------------------------------------------------------------

    @staticmethod
    def _declares_tasks(params: dict[str, Any]) -> bool:
        meta = params.get("_meta")
        caps = meta.get(CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
        extensions = caps.get("extensions") if isinstance(caps, dict) else None
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions

    def _done(self, task: Task, now: float) -> bool:
        return task.cancelled_at is None and now >= task.created + self.duration_s

    def _view(self, task: Task, now: float, *, detailed: bool = False) -> dict[str, Any]:
        done = self._done(task, now)
        created_at = _iso(task.created_wall)
        if task.cancelled_at is not None:
            status, updated = "cancelled", task.cancelled_at
        elif done:
            status, updated = "completed", _iso(task.created_wall + self.duration_s)
        else:
            status, updated = "working", created_at
        view: dict[str, Any] = {
            "taskId": task.task_id, "status": status, "createdAt": created_at,
            "lastUpdatedAt": updated, "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_interval_ms}
        if detailed and done:
            view["result"] = _result(task.text)
        return view

    # -- answers -------------------------------------------------------------------------

    def _answer(self, rid: Any, result: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "id": rid,
                    "result": {"resultType": "complete", **result, "_meta": SERVER_INFO}})

    def _error(self, rid: Any, code: int, message: str) -> None:
        self._send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    # -- the record ----------------------------------------------------------------------

    def summary(self, window: tuple[Any, Any] = (None, None)) -> dict[str, Any]:
        tasks = list(self.tasks.values())
        gaps = [b - a for t in tasks for a, b in itertools.pairwise(t.looks)]
        per_task_gaps = [[b - a for a, b in itertools.pairwise(t.looks)] for t in tasks]
        per_task_gaps = [g for g in per_task_gaps if g]
        created = [t.created for t in tasks]
        out: dict[str, Any] = {
            "poll_interval_ms": self.poll_interval_ms, "duration_s": self.duration_s,
            "tasks": len(tasks), "plain_calls": self.plain_calls,
            "cancelled": sum(t.cancelled_at is not None for t in tasks),
            "polls": self.polls, "polls_unknown": self.polls_unknown,
            "polls_after_end": self.polls_after_end,
            "completed_seen": sum(t.end_seen is not None and t.cancelled_at is None
                                  for t in tasks),
            "unlooked": sum(not t.looks for t in tasks),
            "methods": dict(self.methods),
            "first_poll": self.first_poll, "last_poll": self.last_poll,
            "created_first": min(created, default=None),
            "created_last": max(created, default=None),
            "gap": _spread(gaps) | {"count": len(gaps),
                                    "mean": statistics.fmean(gaps) if gaps else None},
            "per_task_min_gap": _spread([min(g) for g in per_task_gaps]),
            "per_task_median_gap": _spread([statistics.median(g) for g in per_task_gaps]),
            "first_look": _spread([t.looks[0] - t.created for t in tasks if t.looks]),
            "seen_late": _spread([t.end_seen - t.created - self.duration_s for t in tasks
                                  if t.end_seen is not None and t.cancelled_at is None],
                                 high=True),
            "polls_per_task": _spread([len(t.looks) for t in tasks], high=True),
        }
        start, end = window
        if isinstance(start, int | float) and isinstance(end, int | float):
            out["polls_between"] = sum(start <= at <= end for t in tasks for at in t.looks)
        return out

    def write_stats(self, text: str | None = None) -> None:
        if self.stats_path:
            with open(self.stats_path, "w") as f:
                f.write(text if text is not None else orjson.dumps(self.summary()).decode())


def _spread(values: list[float], *, high: bool = False) -> dict[str, Any]:
    if not values:
        return {"min": None, "median": None} | ({"max": None} if high else {})
    out = {"min": min(values), "median": statistics.median(values)}
    return out | ({"max": max(values)} if high else {})


class _Lines(asyncio.Protocol):
    """stdin, split into JSON-RPC messages; its end stops the server."""

    def __init__(self, server: TaskServer, done: asyncio.Future[None]) -> None:
        self._server = server
        self._done = done
        self._rest = b""

    def data_received(self, data: bytes) -> None:
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if line.strip():
                try:
                    msg = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # not ours to judge: a benchmark client sends JSON
                if isinstance(msg, dict):
                    self._server.handle(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def serve(ns: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(1, "wb", buffering=0))
    pending: list[bytes] = []

    def flush() -> None:
        out.write(b"".join(pending))
        pending.clear()

    def send(msg: dict[str, Any]) -> None:
        # One write per loop turn: a burst of looks is answered with one write.
        if not pending:
            loop.call_soon(flush)
        pending.append(orjson.dumps(msg, option=orjson.OPT_APPEND_NEWLINE))

    server = TaskServer(ns.poll_interval_ms, ns.duration, ns.ttl_ms, send, loop.call_later,
                        ns.stats)
    done: asyncio.Future[None] = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: done.done() or done.set_result(None))
    await loop.connect_read_pipe(lambda: _Lines(server, done), os.fdopen(0, "rb", buffering=0))
    try:
        await done
    finally:
        server.write_stats()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--poll-interval-ms", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds each task runs")
    ap.add_argument("--ttl-ms", type=int, default=600_000)
    ap.add_argument("--stats", help="write the summary here at exit")
    ns = ap.parse_args(argv)
    asyncio.run(serve(ns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
