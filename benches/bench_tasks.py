"""Waiting on many MCP tasks of one server (``task_wait.py``, ``task_server.py``; issue
39): how often trunkline looks at them against what the server's ``pollIntervalMs``
asks, the shortest time between two looks at one task, the CPU the waiting costs (the
parent's, the worker's) per waiting task per second and per look, and the wall time to
the last result against the tasks' duration; beside a raw single-process client that
polls each task itself, in the same run, rounds interleaved (trunkline, raw, raw,
trunkline, ...).

The shapes: 1,000 tasks asking 1,000 ms, 1,000 asking 250 ms, and 100 asking 0 ms (the
floor, ``TaskLimits.min_poll_s``, is what is kept then), each task lasting 5 s.

The official SDK (mcp 2.3.0, ``.peers/py-modern``) has no column: its client does not
follow tasks. ``mcp_types`` defines the 2025-11-25 task types "types-only; their methods
are not in the request/notification unions below, so they are never dispatched", and
``mcp.client`` sends no ``tasks/get`` (its only route to a ``resultType: "task"`` is a
``ResultClaim`` an application writes itself, with its own polling).

    .venv/bin/pytest benches/bench_tasks.py --benchmark-json=TASKS.json   # full, ~2.5 min
    .venv/bin/python benches/bench_tasks.py report TASKS.json            # the tables
    .venv/bin/pytest benches/bench_tasks.py --benchmark-disable          # smoke (CI)

Timings are never pass/fail. A case fails when a call fails, a result is not the text
its call gave, or the server's record disagrees with the round (a task not created, not
seen completed, or cancelled; a look at an unknown task, or at one whose end a look had
already shown); ``test_job_without_tasks`` checks the server's other path (a client that
does not declare the extension gets its result as a plain answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

import formats
import task_wait


@dataclass(frozen=True)
class Shape:
    tasks: int
    interval_ms: int
    duration_s: float = 5.0

    @property
    def name(self) -> str:
        return f"{self.tasks}x{self.interval_ms}ms"


SHAPES = (Shape(1000, 1000), Shape(1000, 250), Shape(100, 0))
ROUNDS = 3
#: The smoke pass: a few tasks of 0.5 s, looked at every 100 ms at most (so each is looked
#: at several times, and none waits a whole second for its first look).
SMOKE_TASKS, SMOKE_DURATION_S, SMOKE_INTERVAL_MS = 12, 0.5, 100


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_tasks(benchmark: Any, shape: Shape) -> None:
    smoke = bool(benchmark.disabled)
    tasks = min(shape.tasks, SMOKE_TASKS) if smoke else shape.tasks
    duration = SMOKE_DURATION_S if smoke else shape.duration_s
    interval = min(shape.interval_ms, SMOKE_INTERVAL_MS) if smoke else shape.interval_ms
    rounds: dict[str, list[task_wait.WaitResult]] = {c: [] for c in task_wait.CLIENTS}

    def one_round() -> None:
        # Interleaved, the order alternating, so that drift weighs on both alike.
        n = len(rounds["raw"])
        for client in task_wait.CLIENTS[::-1] if n % 2 else task_wait.CLIENTS:
            rounds[client].append(task_wait.run_round(
                client, tasks, interval, duration, isolate=not smoke))

    benchmark.group = f"tasks-{shape.name}"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1,
                       warmup_rounds=0)
    # Every answer and the server's record were checked in the round (WrongRound).
    want = 1 if smoke else ROUNDS
    assert all(len(rs) == want and all(r.tasks == tasks and r.polls >= tasks for r in rs)
               for rs in rounds.values())
    benchmark.extra_info.update(
        tasks_bench=True, shape=shape.name, tasks=tasks, interval_ms=interval,
        duration_s=duration, smoke=smoke,
        columns={c: _summary(rs) for c, rs in rounds.items()})


def _summary(rounds: list[task_wait.WaitResult]) -> dict[str, Any]:
    """Each figure's median over rounds (None where a round had none), and the rounds."""
    out: dict[str, Any] = {"rounds": len(rounds), "per_round": [asdict(r) for r in rounds]}
    for key, value in asdict(rounds[0]).items():
        if not isinstance(value, str):  # every figure but the client's name
            values = [getattr(r, key) for r in rounds if getattr(r, key) is not None]
            out[key] = statistics.median(values) if values else None
    return out


def test_job_without_tasks() -> None:
    """A client that does not declare the tasks extension gets ``job``'s result as a plain
    answer after the job's duration, and the server makes no task."""
    from trunkline import Host
    from trunkline.params import stdio
    from trunkline.settings import HostSettings, ServerConfig

    async def run() -> tuple[str, dict[str, Any]]:
        argv = task_wait.server_argv(100, 0.2)
        async with Host(settings=HostSettings(extensions=())) as host:
            [status] = await host.add_servers([ServerConfig("jobs", stdio(argv[0],
                                                                          *argv[1:]))])
            assert status.era == "modern"
            names = {e.local_name: e.name for e in host.tools()}
            result = await host.call_tool(names["job"], {"text": "plain"})
            stats = await host.call_tool(names["stats"], {})
            return result.content[0]["text"], json.loads(stats.content[0]["text"])

    text, record = asyncio.run(run())
    assert text == "plain"
    assert (record["tasks"], record["plain_calls"], record["polls"]) == (0, 1, 0)


# -------------------------------------------------------------------- reporting


def _cases(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    found = [b["extra_info"] for b in doc.get("benchmarks", [])
             if (b.get("extra_info") or {}).get("tasks_bench")]
    order = {s.name: i for i, s in enumerate(SHAPES)}
    return sorted(found, key=lambda i: order.get(i["shape"], len(order)))


def _us(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "–"


def render(path: Path) -> str:
    """The markdown tables of a ``--benchmark-json`` file ("" when it has no tasks case)."""
    cases = _cases(path)
    if not cases:
        return ""
    out: list[str] = []
    if any(i["smoke"] for i in cases):
        out.append("> **Smoke run** (`--benchmark-disable`, tiny counts): these numbers mean "
                   "nothing.\n")

    def shape(i: dict[str, Any]) -> str:
        return f"{i['tasks']:,} × {i['interval_ms']} ms, {i['duration_s']:g} s"

    out += ["Looks while the tasks wait, as the server saw them (medians of rounds; looks/s "
            "= tasks / the mean time between two looks at one task; asked = tasks / the "
            "interval, or the 50 ms floor):", "",
            "| tasks × pollIntervalMs, duration | client | looks/s (asked) "
            "| shortest gap | median gap | creation to first look | last result after "
            "| seen late, median / max |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for i in cases:
        for client in task_wait.CLIENTS:
            c = i["columns"][client]
            out.append(
                f"| {shape(i)} | {client} | {formats.rate(c['looks_per_s'])} "
                f"({formats.rate(c['asked_per_s'])}) | {formats.ms(1e3 * c['gap_min_s'])} ms "
                f"| {formats.ms(1e3 * c['gap_median_s'])} ms "
                f"| {formats.ms(1e3 * c['first_look_min_s'])} ms "
                f"| {c['wall_s']:.2f} s | {formats.ms(1e3 * c['seen_late_median_s'])} / "
                f"{formats.ms(1e3 * c['seen_late_max_s'])} ms |")
    out += ["", "CPU while every task waits (the window: from 1 s after the first call, a "
            "whole number of intervals, before the first task ends), µs per waiting task "
            "per second and per look; then the whole round (calls, waiting, results) per "
            "task:", "",
            "| tasks × pollIntervalMs | trunkline parent | trunkline worker | raw "
            "| trunkline/raw | per look: trunkline | raw | trunkline/raw "
            "| whole round per task: trunkline (parent + worker) | raw |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i in cases:
        t, r = i["columns"]["trunkline"], i["columns"]["raw"]
        both = (None if t["parent_us_per_task_s"] is None
                else t["parent_us_per_task_s"] + t["worker_us_per_task_s"])
        whole_t = 1e6 * (t["parent_cpu_s"] + t["worker_cpu_s"]) / i["tasks"]
        whole_r = 1e6 * r["parent_cpu_s"] / i["tasks"]
        out.append(
            f"| {i['tasks']:,} × {i['interval_ms']} ms | {_us(t['parent_us_per_task_s'])} "
            f"| {_us(t['worker_us_per_task_s'])} | {_us(r['parent_us_per_task_s'])} "
            f"| {_ratio(both, r['parent_us_per_task_s'])} | {_us(t['client_us_per_look'])} "
            f"| {_us(r['client_us_per_look'])} "
            f"| {_ratio(t['client_us_per_look'], r['client_us_per_look'])} "
            f"| {_us(whole_t)} ({_us(1e6 * t['parent_cpu_s'] / i['tasks'])} + "
            f"{_us(1e6 * t['worker_cpu_s'] / i['tasks'])}) | {_us(whole_r)} |")
    out += ["", "The SDK (mcp 2.3.0) has no column: its client does not follow tasks "
            "(no `tasks/get`; `benches/bench_tasks.py` says where)."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("report", help="the markdown tables from a pytest --benchmark-json file")
    p.add_argument("json", type=Path)
    ns = ap.parse_args(argv)
    sys.stdout.write((render(ns.json) or f"No tasks results in {ns.json}.") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
