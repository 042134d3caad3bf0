"""Per-user instances (``instances.py``) beside ordinary servers (``scale.py``), workers
forked from the template either way: 256 identities' own instances of one server against
256 servers, for start-up and memory per idle worker.

Full run (each round a fresh interpreter), then the table:

    .venv/bin/pytest benches/bench_instances.py --benchmark-json=INSTANCES.json
    .venv/bin/python benches/bench_instances.py report INSTANCES.json

Smoke run (CI, ``--benchmark-disable``): one round of 8 of each; every answer is checked,
every instance must be reaped, timings are never judged.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import pytest

import instances
import scale

COUNT, SMOKE_COUNT = 256, 8
ROUNDS = 3
KINDS = ("per-user instances", "servers")


@pytest.mark.parametrize("kind", KINDS)
def test_instances(benchmark: Any, kind: str) -> None:
    smoke = bool(benchmark.disabled)
    count = SMOKE_COUNT if smoke else COUNT
    rows: list[dict[str, float]] = []

    def one_round() -> None:
        if kind == "servers":
            fleet = scale.run_round("zygote", count, 2 * count, 64)
            rows.append({"startup_s": fleet.startup_s,
                         "pss_per_worker_bytes": fleet.pss_per_worker_bytes})
        else:
            own = instances.run_round(count)
            rows.append({"startup_s": own.startup_s,
                         "pss_per_worker_bytes": own.pss_per_instance_bytes,
                         "reaped_s": own.reaped_s})

    benchmark.group = "instances"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1,
                       warmup_rounds=0)
    assert rows
    median = statistics.median
    benchmark.extra_info.update(
        kind=kind, count=count, rounds=len(rows), smoke=smoke,
        **{key: median(r[key] for r in rows) for key in rows[0]})


def report(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    rows = sorted((b["extra_info"] for b in data["benchmarks"] if b["group"] == "instances"),
                  key=lambda info: KINDS.index(info["kind"]))
    lines = ["Workers forked from the template: N identities' own instances of one server "
             "(first calls at once) beside N servers (added at once); medians of rounds:",
             "", "| workers | of | start-up (all answered / ready) | per worker "
             "| PSS per idle worker | all reaped after the last answer |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        reaped = f"{r['reaped_s']:.2f} s" if "reaped_s" in r else "-"
        lines.append(
            f"| {r['count']} | {r['kind']} | {r['startup_s']:.2f} s "
            f"| {r['startup_s'] / r['count'] * 1000:.1f} ms "
            f"| {r['pss_per_worker_bytes'] / 2**20:.1f} MiB | {reaped} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        sys.exit("usage: bench_instances.py report INSTANCES.json")
    print(report(sys.argv[2]))
