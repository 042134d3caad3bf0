"""Two checkouts of trunkline side by side in one run: the fan-out and gateway benchmarks
of each, rounds interleaved, and the ratios after / before.

A change that must cost nothing (a refactoring) is measured against the tree before it,
on the same machine at the same time: each round runs every case once with each tree,
the order of the two alternating from round to round, so drift (another job, the CPU's
clock) weighs on both alike. Each case is one fresh process tree, run by that tree's own
scripts (``benches/fanout.py run trunkline SHAPE --json``, ``benches/gateway_load.py wrk
trunkline N``) with that tree's ``python/`` first on the path: each side is measured the
way its own benchmarks measure it.

    git worktree add /tmp/before 65a4801      # the tree before, with its extension built
    cp python/trunkline/_codec*.so /tmp/before/python/trunkline/   # if the crate is the same
    .venv/bin/python benches/compare_trees.py /tmp/before . --rounds 5

Printed: per case the median of each side and the ratio of the medians (calls/s, and CPU
per call where the case reads it), then every round's ratio, so noise shows as spread.
Timings are never pass/fail here either.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The fan-out shapes compared by default: one call at a time, a wide fleet, a big result.
FANOUT = ("1x1-small", "1x256-small", "8x1024-small", "1x256-64k")
#: The gateway's connection counts compared by default (wrk, ``tools/call`` over HTTP).
GATEWAY = (1, 64, 256)


@dataclass
class Case:
    """One benchmark case: its name, and how to run it in a tree (its figures by name)."""

    name: str
    run: Callable[[Path], dict[str, float]]
    #: Per side: one reading per round, by figure.
    readings: dict[str, list[dict[str, float]]] = field(default_factory=dict)


def _json_line(argv: list[str], tree: Path, what: str, timeout_s: float) -> Any:
    """Run ``argv`` in ``tree`` (its ``python/`` first on the path); its last line, JSON."""
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True,
                          check=False, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} in {tree} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fanout_case(shape: str) -> Case:
    def run(tree: Path) -> dict[str, float]:
        got = _json_line([sys.executable, "benches/fanout.py", "run", "trunkline", shape,
                          "--json"], tree, f"fan-out {shape}", 900)
        return {"calls/s": got["calls_per_s"], "p50 ms": got["p50_ms"],
                "CPU µs/call": got["parent_cpu_us"] + got["helpers_cpu_us"]}
    return Case(f"fan-out {shape}", run)


def gateway_case(connections: int, seconds: int, target: str) -> Case:
    def run(tree: Path) -> dict[str, float]:
        got = _json_line([sys.executable, "benches/gateway_load.py", "wrk", target,
                          str(connections), "--seconds", str(seconds)], tree,
                         f"gateway {target} at {connections}", 300)
        calls = max(got["calls"], 1)
        gateway_cpu = got["target_cpu_s"] - got["target_cpu_by_role"].get("upstreams", 0.0)
        return {"calls/s": got["calls_per_s"], "p50 ms": got["p50_ms"],
                "CPU µs/call": gateway_cpu / calls * 1e6}
    return Case(f"gateway {target} x{connections}", run)


def compare(before: Path, after: Path, cases: list[Case], rounds: int,
            say: Callable[[str], None] = print) -> None:
    sides = {"before": before, "after": after}
    for n in range(rounds):
        order = ["before", "after"] if n % 2 == 0 else ["after", "before"]
        for case in cases:
            for side in order:
                reading = case.run(sides[side])
                case.readings.setdefault(side, []).append(reading)
                say(f"round {n + 1} {case.name} {side}: "
                    + ", ".join(f"{k} {v:.4g}" for k, v in reading.items()))
    say("")
    say(render(cases))


def render(cases: list[Case]) -> str:
    """The table: per case and figure, both medians, their ratio, each round's ratio."""
    out = ["| case | figure | before | after | after / before | per round |",
           "|---|---|---:|---:|---:|---|"]
    for case in cases:
        before, after = case.readings.get("before", []), case.readings.get("after", [])
        if not before or not after:
            continue
        for figure in before[0]:
            b = statistics.median(r[figure] for r in before)
            a = statistics.median(r[figure] for r in after)
            rounds = " ".join(f"{y[figure] / x[figure]:.2f}"
                              for x, y in zip(before, after, strict=True) if x[figure])
            ratio = f"{a / b:.2f}" if b else "-"
            out.append(f"| {case.name} | {figure} | {b:.4g} | {a:.4g} | {ratio} | {rounds} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="the checkout before (its extension built)")
    ap.add_argument("after", type=Path, help="the checkout after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fanout", default=",".join(FANOUT),
                    help="fan-out shapes, comma-separated ('' for none)")
    ap.add_argument("--gateway", default=",".join(map(str, GATEWAY)),
                    help="gateway connection counts, comma-separated ('' for none)")
    ap.add_argument("--gateway-target", default="trunkline",
                    choices=["trunkline", "trunkline-sse"])
    ap.add_argument("--seconds", type=int, default=5, help="each gateway run's length")
    ns = ap.parse_args(argv)
    cases = [fanout_case(s) for s in ns.fanout.split(",") if s]
    cases += [gateway_case(int(c), ns.seconds, ns.gateway_target)
              for c in ns.gateway.split(",") if c]
    compare(ns.before.resolve(), ns.after.resolve(), cases, ns.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
