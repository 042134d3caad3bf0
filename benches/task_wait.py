"""Waiting on many tasks of one server: how often they are looked at, what the waiting
costs the client, and how soon each result arrives (MCP tasks; issue 39).

One round: a fresh interpreter starts ``task_server.py`` (its ``pollIntervalMs`` and its
tasks' duration given) and calls its tool ``job`` N times at once; the server answers each
call with a task that completes after the duration, and the client waits for every
result, each checked (the text the call gave). The clients:

* ``trunkline``: ``Host.call_tool`` on uvloop; the worker follows every task
  (``tasks/get`` when the server's interval says, never sooner than
  ``TaskLimits.min_poll_s``) and tells the parent only what changed;
* ``raw``: one process, uvloop + orjson (``fanout.py``'s raw connection), a coroutine per
  task that sleeps the interval the task asks (not less than trunkline's floor) and sends
  ``tasks/get`` until the task completes: the least a Python client can do.

Measured, each look timed by the server as it lands (``time.monotonic()``: on Linux one
clock for every process, so the server's times and the client's readings line up):

* **looks per second** while the tasks wait: N / the mean time between two looks at one
  task, beside what the interval asks (N / interval);
* the **shortest time between two looks** at one task, and from a task's creation to its
  first look;
* **CPU while every task waits**: the client process's own (``time.process_time()``)
  and, for trunkline, its worker's (``proc_tree``: the scheduler's count over the
  worker's threads), per waiting task per second and per look, read twice: once the
  calls and their tasks' creation are over (``SETTLE_S`` after the first call), then a
  whole number of intervals later, before the first task ends (the *window*: checked
  against the server's record of creations and ends). The two readings cost nothing the
  window counts;
* **wall time** from the first call to the last result, against the duration, and how
  late after its completion each task's end was seen;
* the same CPU over the whole round (calls, waiting, results), per task.

    python benches/task_wait.py run trunkline --tasks 1000 --interval-ms 1000 --duration 5
    python benches/task_wait.py run raw --tasks 1000 --interval-ms 250 --duration 5 --json

A round fails (raises) when a call fails, a result is not the text its call gave, or the
server's record disagrees with the round: a task not created or not seen completed, a
look at an unknown task or at one whose end was already seen, a task cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
import fanout  # noqa: E402 - beside this file, found once the folder is on the path
import proc_tree  # noqa: E402

SERVER = BENCHES / "task_server.py"
CLIENTS = ("trunkline", "raw")
#: Seconds: the raw client's floor between two looks, trunkline's default
#: (``TaskLimits.min_poll_s``).
FLOOR_S = 0.05
#: Seconds after the first call before the window opens (the calls, their tasks' creation
#: and the first reports are over by then), and kept clear before the first task ends.
SETTLE_S = 1.0
END_MARGIN_S = 0.1
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

#: ``job(text) -> the result's text``; ``stats(window) -> the server's summary``.
Job = Callable[[str], Awaitable[str]]
Stats = Callable[[tuple[float, float] | None], Awaitable[dict[str, Any]]]


class WrongRound(AssertionError):
    """A result or the server's record is not what the round did."""


@dataclass
class WaitResult:
    client: str
    tasks: int
    interval_ms: int
    duration_s: float
    #: Seconds from the first call to the last result, and to the last task's creation.
    wall_s: float
    created_s: float
    polls: int
    polls_per_task: float  # median over tasks
    #: Looks per second while waiting (tasks / mean gap), and what the interval asks.
    looks_per_s: float
    asked_per_s: float
    gap_min_s: float
    gap_median_s: float
    first_look_min_s: float
    first_look_median_s: float
    #: Seconds from a task's completion to the look that showed it.
    seen_late_median_s: float
    seen_late_max_s: float
    #: Seconds: the window (``window_of``), as read; None when it was not wholly between
    #: the last task's creation and the first one's end (or fit no whole interval).
    window_s: float | None
    polls_in_window: int | None
    parent_cpu_window_s: float | None
    worker_cpu_window_s: float | None
    #: µs of CPU per waiting task per second, and per look, over the window.
    parent_us_per_task_s: float | None
    worker_us_per_task_s: float | None
    client_us_per_look: float | None
    #: The whole round (first call to last result): CPU seconds, parent and worker.
    parent_cpu_s: float
    worker_cpu_s: float
    #: CPU this process's readings cost (left out of its figures).
    reading_cpu_s: float


class Cpu:
    """Readings of (monotonic seconds, this process's CPU, the worker's CPU); the CPU a
    reading costs (the worker's is read from ``/proc``) is left out of this process's
    figure."""

    def __init__(self, worker_pid: int | None) -> None:
        self.worker_pid = worker_pid
        self.own = 0.0

    def read(self) -> tuple[float, float, float]:
        before = time.process_time()
        now = time.monotonic()
        worker = proc_tree.cpu_seconds([self.worker_pid]) if self.worker_pid else 0.0
        reading = (now, before - self.own, worker)
        self.own += time.process_time() - before
        return reading


def window_of(interval_ms: int, duration_s: float) -> tuple[float, float] | None:
    """The window's start and end, in seconds after the first call: from ``SETTLE_S`` (or
    a fifth of the duration, if less) to as many whole intervals later as fit before the
    duration ends (so every task is looked at as often in it whatever the phase of its
    looks); None when not one fits."""
    start = min(SETTLE_S, duration_s / 5)
    interval = max(interval_ms / 1000, FLOOR_S)
    whole = int((duration_s - start - END_MARGIN_S) / interval)
    return (start, start + whole * interval) if whole >= 1 else None


async def wait_round(client: str, job: Job, stats: Stats, tasks: int, interval_ms: int,
                     duration_s: float, worker_pid: int | None) -> WaitResult:
    """N jobs at once, every result checked; then the server's record, checked."""
    gc.collect()
    cpu = Cpu(worker_pid)
    first = cpu.read()
    t0 = first[0]
    planned = window_of(interval_ms, duration_s)
    readings: list[tuple[float, float, float]] = []

    async def read_window() -> None:
        assert planned is not None
        for at in planned:
            await asyncio.sleep(max(t0 + at - time.monotonic(), 0.0))
            readings.append(cpu.read())

    async def one(text: str) -> None:
        got = await job(text)
        if got != text:
            raise WrongRound(f"job {text!r} answered {got!r}")

    reading = asyncio.create_task(read_window()) if planned else None
    try:
        await asyncio.gather(*(one(f"job-{i}") for i in range(tasks)))
        last = cpu.read()
    finally:
        if reading is not None:
            reading.cancel()
    wall = last[0] - t0
    record = await stats(None)
    _check(record, tasks)
    in_window: int | None = None
    parent_w = worker_w = per_task_p = per_task_w = per_look = seconds = None
    # The window counts only if every task was created before it and none ended in it.
    if len(readings) == 2 and (readings[0][0] >= record["created_last"]
                               and readings[1][0] <= record["created_first"] + duration_s):
        a, b = readings
        in_window = (await stats((a[0], b[0])))["polls_between"]
        seconds = b[0] - a[0]
        parent_w, worker_w = b[1] - a[1], b[2] - a[2]
        per_task_p = parent_w / (tasks * seconds) * 1e6
        per_task_w = worker_w / (tasks * seconds) * 1e6
        per_look = (parent_w + worker_w) / in_window * 1e6 if in_window else None
    gap = record["gap"]
    return WaitResult(
        client=client, tasks=tasks, interval_ms=interval_ms, duration_s=duration_s,
        wall_s=wall, created_s=record["created_last"] - t0, polls=record["polls"],
        polls_per_task=record["polls_per_task"]["median"],
        looks_per_s=tasks / gap["mean"] if gap["mean"] else 0.0,
        asked_per_s=tasks / max(interval_ms / 1000, FLOOR_S),
        gap_min_s=gap["min"], gap_median_s=gap["median"],
        first_look_min_s=record["first_look"]["min"],
        first_look_median_s=record["first_look"]["median"],
        seen_late_median_s=record["seen_late"]["median"],
        seen_late_max_s=record["seen_late"]["max"],
        window_s=seconds, polls_in_window=in_window,
        parent_cpu_window_s=parent_w, worker_cpu_window_s=worker_w,
        parent_us_per_task_s=per_task_p, worker_us_per_task_s=per_task_w,
        client_us_per_look=per_look,
        parent_cpu_s=last[1] - first[1], worker_cpu_s=last[2] - first[2],
        reading_cpu_s=cpu.own)


def _check(record: dict[str, Any], tasks: int) -> None:
    wrong = {k: record[k] for k, want in (
        ("tasks", tasks), ("completed_seen", tasks), ("polls_unknown", 0),
        ("polls_after_end", 0), ("cancelled", 0), ("unlooked", 0)) if record[k] != want}
    if wrong:
        raise WrongRound(f"the server's record of {tasks} tasks: {wrong}")


def server_argv(interval_ms: int, duration_s: float) -> list[str]:
    return [sys.executable, str(SERVER), "--poll-interval-ms", str(interval_ms),
            "--duration", str(duration_s)]


# ------------------------------------------------------------------------- trunkline


async def trunkline_round(tasks: int, interval_ms: int, duration_s: float) -> WaitResult:
    from trunkline import CallOptions, Host
    from trunkline.params import stdio
    from trunkline.settings import ServerConfig

    argv = server_argv(interval_ms, duration_s)
    config = ServerConfig("jobs", stdio(argv[0], *argv[1:]), max_tasks=max(tasks, 1024),
                          max_in_flight=max(tasks, 1024))
    async with Host(calls=CallOptions(call_timeout_s=duration_s + 120.0)) as host:
        [status] = await host.add_servers([config])
        if status.era != "modern" or status.worker_pid is None:
            raise WrongRound(f"the task server is not ready: {status}")
        names = {e.local_name: e.name for e in host.tools() if e.server == "jobs"}

        async def text_of(tool: str, arguments: dict[str, Any]) -> str:
            result = await host.call_tool(names[tool], arguments)
            if result.is_error:
                raise WrongRound(f"{tool} answered an error: {result.raw!r}")
            return result.content[0]["text"]  # type: ignore[no-any-return]

        async def job(text: str) -> str:
            return await text_of("job", {"text": text})

        async def stats(window: tuple[float, float] | None) -> dict[str, Any]:
            args = {} if window is None else {"from": window[0], "to": window[1]}
            return json.loads(await text_of("stats", args))  # type: ignore[no-any-return]

        await stats(None)  # warm: the call path, the catalog
        return await wait_round("trunkline", job, stats, tasks, interval_ms, duration_s,
                                status.worker_pid)


# ------------------------------------------------------------------------------- raw


class RawTasks:
    """One stdio connection (``fanout._RawServer``: a dict of futures, writes coalesced
    per loop turn), every request stamped with the 2026-07-28 ``_meta`` and the tasks
    extension declared, spliced from precomputed bytes; a task followed by a coroutine
    of its own."""

    async def start(self, argv: list[str]) -> None:
        import orjson

        self._dumps = orjson.dumps
        meta = orjson.dumps({
            "io.modelcontextprotocol/protocolVersion": fanout.MODERN,
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {TASKS_EXTENSION: {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "trunkline-bench-raw",
                                                   "version": "0.1.0"}})
        self._meta_id = b'"_meta":' + meta + b'},"id":'
        loop = asyncio.get_running_loop()
        self._loop = loop
        _, self._server = await loop.subprocess_exec(
            lambda: fanout._RawServer(loop, orjson.loads), *argv, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None)
        discovered = await self.request(b"server/discover", b"")
        if fanout.MODERN not in discovered.get("supportedVersions", ()):
            raise WrongRound(f"the task server is not modern: {discovered!r}")

    async def request(self, method: bytes, fields: bytes) -> dict[str, Any]:
        """``method`` with ``fields`` (the params' members but ``_meta``, as JSON)."""
        srv = self._server
        rid = srv.next_id
        srv.next_id = rid + 1
        fut = self._loop.create_future()
        srv.pending[rid] = fut
        srv.send(b'{"jsonrpc":"2.0","method":"%s","params":{%s%s%d}\n'
                 % (method, fields + b"," if fields else b"", self._meta_id, rid))
        msg = await fut
        result = msg.get("result")
        if not isinstance(result, dict):
            raise WrongRound(f"{method.decode()} answered {msg!r}")
        return result

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.request(b"tools/call", b'"name":%s,"arguments":%s' % (
            self._dumps(tool), self._dumps(arguments)))

    async def job(self, text: str) -> str:
        view = await self.call("job", {"text": text})
        if view.get("resultType") != "task":
            raise WrongRound(f"job answered no task: {view!r}")
        look = b'"taskId":' + self._dumps(view["taskId"])
        while view["status"] == "working":
            await asyncio.sleep(max(view.get("pollIntervalMs", 1000) / 1000, FLOOR_S))
            view = await self.request(b"tasks/get", look)
        if view["status"] != "completed":
            raise WrongRound(f"task of {text!r} ended {view['status']}")
        return view["result"]["content"][0]["text"]  # type: ignore[no-any-return]

    async def stats(self, window: tuple[float, float] | None) -> dict[str, Any]:
        args = {} if window is None else {"from": window[0], "to": window[1]}
        result = await self.call("stats", args)
        return json.loads(result["content"][0]["text"])  # type: ignore[no-any-return]

    async def close(self) -> None:
        srv = self._server
        if srv.stdin is not None:
            srv.stdin.close()  # EOF: the server exits
        await asyncio.wait([srv.exited], timeout=5)
        if srv.transport is not None:
            srv.transport.close()


async def raw_round(tasks: int, interval_ms: int, duration_s: float) -> WaitResult:
    client = RawTasks()
    await client.start(server_argv(interval_ms, duration_s))
    try:
        await client.stats(None)  # warm
        return await wait_round("raw", client.job, client.stats, tasks, interval_ms,
                                duration_s, None)
    finally:
        await client.close()


ROUNDS = {"trunkline": trunkline_round, "raw": raw_round}


def run_round(client: str, tasks: int, interval_ms: int, duration_s: float, *,
              isolate: bool = True) -> WaitResult:
    """One round; ``isolate``: in a fresh interpreter (no earlier round's heap or
    processes)."""
    if isolate:
        return WaitResult(**fanout.fresh_round(
            [sys.executable, str(Path(__file__).resolve()), "run", client, "--tasks",
             str(tasks), "--interval-ms", str(interval_ms), "--duration", str(duration_s),
             "--json"], f"tasks {client} {tasks}"))
    import uvloop
    return uvloop.run(ROUNDS[client](tasks, interval_ms, duration_s))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="one round of one client, in this interpreter")
    p.add_argument("client", choices=CLIENTS)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--json", action="store_true")
    ns = ap.parse_args(argv)
    result = run_round(ns.client, ns.tasks, ns.interval_ms, ns.duration, isolate=False)
    if ns.json:
        print(json.dumps(asdict(result)))
    else:
        for key, value in asdict(result).items():
            print(f"{key:>22}  {value}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
