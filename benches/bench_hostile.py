"""``trunkline serve`` under attack (``hostile_load.py``): for each attack of issue 36, a
legitimate client's calls (answered, failed, p50, p99) and the gateway's memory (RSS of
its process tree before, at the peak and after), beside the same run with no attack.

    .venv/bin/pytest benches/bench_hostile.py --benchmark-json=H.json   # full, ~2.5 min
    .venv/bin/python benches/bench_hostile.py report H.json            # the table
    .venv/bin/pytest benches/bench_hostile.py --benchmark-disable      # smoke (CI)

Timings are never pass/fail. A case fails only when the legitimate client got no answer
at all (the gateway was taken from it), or failed more calls than it got answered.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import hostile_load

ATTACK_S = 10.0
SMOKE_S = 1.5


@pytest.mark.parametrize("attack", hostile_load.ATTACKS)
def test_hostile(benchmark: Any, attack: str) -> None:
    smoke = bool(benchmark.disabled)
    outcomes: list[hostile_load.Outcome] = []
    benchmark.group = "hostile"
    benchmark.pedantic(lambda: outcomes.append(hostile_load.run_attack(
        attack, SMOKE_S if smoke else ATTACK_S)), rounds=1, iterations=1, warmup_rounds=0)
    [outcome] = outcomes
    assert outcome.answered > 0 and outcome.failed <= outcome.answered, outcome
    benchmark.extra_info.update(hostile_bench=True, smoke=smoke, **outcome.as_dict())


def report(path: str) -> str:
    """The table of a ``--benchmark-json`` file: each attack beside the baseline."""
    runs = {b["extra_info"]["attack"]: b["extra_info"]
            for b in json.loads(Path(path).read_text())["benchmarks"]
            if b["extra_info"].get("hostile_bench")}
    base = runs.get("none")
    lines = ["| attack | legit answered | failed | p50 ms | p99 ms | p99 / baseline | "
             "RSS MiB before / peak / after |", "|---|---:|---:|---:|---:|---:|---|"]
    for attack in hostile_load.ATTACKS:
        run = runs.get(attack)
        if run is None:
            continue
        ratio = (f"{run['p99_ms'] / base['p99_ms']:.2f}x" if base and base["p99_ms"]
                 and run["p99_ms"] else "-")
        lines.append(
            f"| {attack} | {run['answered']} | {run['failed']} | "
            f"{_ms(run['p50_ms'])} | {_ms(run['p99_ms'])} | {ratio} | "
            f"{run['rss_before_mib']:.0f} / {run['rss_peak_mib']:.0f} / "
            f"{run['rss_after_mib']:.0f} |")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the hostile benchmark's report")
    parser.add_argument("command", choices=["report"])
    parser.add_argument("json")
    args = parser.parse_args()
    print(report(args.json))
    sys.exit(0)
