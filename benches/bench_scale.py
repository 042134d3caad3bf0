"""Fleets through the public API: 1, 8, 64 and 256 echo servers, workers spawned or forked
from the worker template; start-up time, memory per idle worker, and calls/s at a fixed
total in flight (``scale.py``; issue 13).

Full run (each round a fresh interpreter), then the table:

    .venv/bin/pytest benches/bench_scale.py --benchmark-json=SCALE.json
    .venv/bin/python benches/bench_scale.py report SCALE.json

Smoke run (CI, ``--benchmark-disable``): one round per fleet size with a few calls; every
server must become ready and every answer is checked, timings are never judged.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import pytest

import scale

FLEETS = (1, 8, 64, 256)
ROUNDS = 3
CALLS, SMOKE_CALLS = 100_000, 2_000
INFLIGHT, SMOKE_INFLIGHT = 1024, 64


@pytest.mark.parametrize("start", scale.STARTS)
@pytest.mark.parametrize("servers", FLEETS, ids=[f"{n}-servers" for n in FLEETS])
def test_scale(benchmark: Any, servers: int, start: str) -> None:
    smoke = bool(benchmark.disabled)
    calls, inflight = (SMOKE_CALLS, SMOKE_INFLIGHT) if smoke else (CALLS, INFLIGHT)
    results: list[scale.ScaleResult] = []

    def one_round() -> None:
        results.append(scale.run_round(start, servers, calls, inflight))

    benchmark.group = "scale"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1,
                       warmup_rounds=0)
    assert results and all(r.servers == servers and r.calls == calls and r.start == start
                           for r in results)
    median = statistics.median
    benchmark.extra_info.update(
        start=start, servers=servers, inflight=inflight, calls=calls, rounds=len(results),
        smoke=smoke,
        startup_s=median(r.startup_s for r in results),
        pss_per_worker_bytes=median(r.pss_per_worker_bytes for r in results),
        calls_per_s=median(r.calls_per_s for r in results),
        parent_cpu_us_per_call=median(r.parent_cpu_us_per_call for r in results),
    )


def report(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    rows = sorted((b["extra_info"] for b in data["benchmarks"] if b["group"] == "scale"),
                  key=lambda info: (info["servers"], info["start"]))
    lines = [f"Fleets through `Host.call_tool`, {rows[0]['inflight'] if rows else '?'} calls "
             "in flight in total (medians of rounds):", "",
             "| servers | workers start | start-up (all ready) | per server "
             "| PSS per idle worker | calls/s | parent CPU per call |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['servers']} | {r['start']} | {r['startup_s']:.2f} s "
            f"| {r['startup_s'] / r['servers'] * 1000:.0f} ms "
            f"| {r['pss_per_worker_bytes'] / 2**20:.1f} MiB | {r['calls_per_s']:,.0f} "
            f"| {r['parent_cpu_us_per_call']:.1f} µs |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        sys.exit("usage: bench_scale.py report SCALE.json")
    print(report(sys.argv[2]))
