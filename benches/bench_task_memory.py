"""What a waiting task costs: N tasks of server-everything's ``simulate-research-query``
(a real 2025-11-25 server; four seconds of work each) started through ``Host.start_tool``
and held in the gateway's task table (``gateway/tasks.py``), as ``trunkline serve`` holds
its clients' tasks, all still running when measured.

- **parent bytes per task**: what tracemalloc sees the host process hold once the N tasks
  are held, less what it held before, over N (the ``ToolTask`` and its status, the
  server's bookkeeping, the table's entry and id);
- **table bytes per task**: the table's share alone (its entries, ids, indexes and expiry
  heap), measured apart over the same N;
- **worker bytes per task**: the worker's resident memory (``VmRSS``) after, less before,
  over N: its coroutine and machine per followed task (rough: pages, not objects).

Full run, then the table:

    .venv/bin/pytest benches/bench_task_memory.py --benchmark-json=MEM.json
    .venv/bin/python benches/bench_task_memory.py report MEM.json

Smoke run (CI, ``--benchmark-disable``): 20 tasks. A case fails only if a task is not a
``ToolTask``, ended before it was measured, or is not cancelled at the end; the figures
are never judged.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import realpeers
from trunkline import Host, HostSettings, ServerConfig, ToolTask
from trunkline.gateway.tasks import Place, TaskTable
from trunkline.params import StdioParams
from trunkline.protocol import NegotiationConfig

TOOL = "simulate-research-query"
TASKS, SMOKE_TASKS = 1000, 20


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def measure(count: int) -> dict[str, Any]:
    server = realpeers.require(realpeers.LEGACY_TS_EVERYTHING)
    settings = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                          legacy_probe_timeout_s=20.0))
    async with Host(settings=settings) as host:
        await host.add_servers([ServerConfig(
            "ev", StdioParams(server.argv[0], tuple(server.argv[1:]), dict(server.env)),
            allow_legacy=True, max_tasks=max(count, 1024))])
        # One task first: every module and cache a task touches is loaded before.
        warm = await host.start_tool(TOOL, {"topic": "warm"})
        assert isinstance(warm, ToolTask)
        await warm.cancel()
        worker = host.servers()[0].worker_pid
        assert worker is not None
        table = TaskTable("bench", client_tasks=count, tasks=count, ttl_s=3600)
        gc.collect()
        worker_before = _rss(worker)
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        tasks = []
        for n in range(count):
            task = await host.start_tool(TOOL, {"topic": f"t{n}"})
            assert isinstance(task, ToolTask)
            place = table.reserve("client")
            assert isinstance(place, Place)
            table.hold(place, task, None)
            tasks.append(task)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        worker_after = _rss(worker)
        assert not any(task.done() for task in tasks), "a task ended before it was measured"
        parent = sum(s.size_diff for s in after.compare_to(before, "filename"))

        # The table's share alone, for the same tasks.
        tracemalloc.start()
        gc.collect()
        alone_before = tracemalloc.get_traced_memory()[0]
        alone = TaskTable("bench", client_tasks=count, tasks=count, ttl_s=3600)
        for task in tasks:
            place = alone.reserve("client")
            assert isinstance(place, Place)
            alone.hold(place, task, None)
        table_bytes = tracemalloc.get_traced_memory()[0] - alone_before
        tracemalloc.stop()

        await asyncio.gather(*(task.cancel() for task in tasks))
        assert all(task.done() for task in tasks)
    return {"tasks": count, "parent_bytes_per_task": parent / count,
            "table_bytes_per_task": table_bytes / count,
            "worker_bytes_per_task": (worker_after - worker_before) / count}


def test_memory_per_waiting_task(benchmark: Any) -> None:
    smoke = bool(benchmark.disabled)
    count = SMOKE_TASKS if smoke else TASKS
    results: list[dict[str, Any]] = []
    benchmark.group = "task-memory"
    benchmark.pedantic(lambda: results.append(asyncio.run(measure(count))), rounds=1,
                       iterations=1, warmup_rounds=0)
    assert results and results[0]["tasks"] == count
    benchmark.extra_info.update(smoke=smoke, **results[0])


def report(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    lines = ["| tasks waiting | parent per task | of which the gateway's table | "
             "worker per task |", "|---:|---:|---:|---:|"]
    for bench in data["benchmarks"]:
        if bench["group"] != "task-memory":
            continue
        r = bench["extra_info"]
        lines.append(f"| {r['tasks']:,} | {r['parent_bytes_per_task'] / 1024:.1f} KiB "
                     f"| {r['table_bytes_per_task']:.0f} B "
                     f"| {r['worker_bytes_per_task'] / 1024:.1f} KiB |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        sys.exit("usage: bench_task_memory.py report MEM.json")
    print(report(sys.argv[2]))
