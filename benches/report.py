"""Turn a pytest-benchmark JSON from bench_fanout.py into markdown tables.

    python benches/report.py BENCH.json > table.md

Reads ``extra_info`` (median calls/s, p50 and p99 over rounds, timed call phase
only) of every ``test_fanout`` case and prints, per scenario, calls/s and
p50/p99 for each client, with the ratios trunkline/SDK and trunkline/raw when a
trunkline column exists, and raw/SDK (the headroom the SDK leaves) always.
Other benchmarks in the same file are ignored, except bench_gateway.py's, whose tables
follow (``bench_gateway.render``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from formats import ms as _ms
from formats import rate as _rate

CLIENT_ORDER = ("trunkline", "trunkline-supervisor", "sdk", "raw", "raw-relay", "null")
LABEL = {
    "trunkline": "trunkline (Host.call_tool)",
    "trunkline-supervisor": "trunkline (Supervisor)",
    "sdk": "SDK",
    "raw": "raw uvloop",
    "raw-relay": "raw + C relay",
    "null": "null (harness)",
}


def load(path: Path) -> tuple[list[str], dict[tuple[str, str], dict[str, Any]], dict[str, Any]]:
    doc = json.loads(path.read_text())
    scenarios: list[str] = []
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for bench in doc.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if "calls_per_s" not in info or "scenario" not in info or "client" not in info:
            continue
        if info["scenario"] not in scenarios:
            scenarios.append(info["scenario"])
        cells[(info["scenario"], info["client"])] = info
    return scenarios, cells, doc.get("machine_info", {})


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if not a or not b or not b["calls_per_s"]:
        return "–"
    return f"{a['calls_per_s'] / b['calls_per_s']:.2f}x"


def _cpu(info: dict[str, Any]) -> str:
    if "client_cpu_us" not in info:
        return "–"
    helpers = info["helpers_cpu_us"]
    split = f" ({info['parent_cpu_us']:.1f} + {helpers:.1f})" if helpers >= 0.05 else ""
    return f"{info['client_cpu_us']:.1f}{split}"


def _cpu_ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if not a or not b or not b.get("client_cpu_us"):
        return "–"
    return f"{a['client_cpu_us'] / b['client_cpu_us']:.2f}x"


def _shape(name: str) -> str:
    shape, _, payload = name.partition("-")
    n, _, k = shape.partition("x")
    size = "~100 B" if payload == "small" else payload.replace("k", " KiB")
    return f"{int(n)} × {int(k):,} | {size}"


def render(path: Path) -> str:
    scenarios, cells, machine = load(path)
    if not scenarios:
        return (
            f"No fan-out results in {path} (run benches/bench_fanout.py with --benchmark-json).\n"
        )
    clients = [c for c in CLIENT_ORDER if any((s, c) in cells for s in scenarios)]
    clients += sorted({c for (_, c) in cells} - set(clients))
    ratios: list[tuple[str, str, str]] = []
    if "trunkline" in clients:
        ratios += [("trunkline/SDK", "trunkline", "sdk"), ("trunkline/raw", "trunkline", "raw")]
    ratios.append(("raw/SDK", "raw", "sdk"))

    out: list[str] = []
    if any(info.get("smoke") for info in cells.values()):
        out.append(
            "> **Smoke run** (`--benchmark-disable`, tiny call counts): "
            "these numbers mean nothing.\n"
        )
    cpu = machine.get("cpu", {}).get("brand_raw") or machine.get("processor") or ""
    if cpu or machine.get("python_version"):
        out.append(f"Machine: {cpu} · Python {machine.get('python_version', '?')}\n")

    out.append(
        "Throughput, calls/s (median of rounds; servers × calls in flight **per server**):\n"
    )
    head = (
        ["servers × in flight", "result"]
        + [LABEL.get(c, c) for c in clients]
        + [r[0] for r in ratios]
    )
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * 2 + "---:|" * (len(clients) + len(ratios)))
    for s in scenarios:
        row = [_shape(s)]
        for c in clients:
            info = cells.get((s, c))
            row.append(_rate(info["calls_per_s"]) if info else "–")
        for _, a, b in ratios:
            row.append(_ratio(cells.get((s, a)), cells.get((s, b))))
        out.append("| " + " | ".join(row) + " |")

    def per_client_table(title: str, cell: Callable[[dict[str, Any]], str]) -> None:
        out.append(f"\n{title}\n")
        head = ["servers × in flight", "result"] + [LABEL.get(c, c) for c in clients]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * 2 + "---:|" * len(clients))
        for s in scenarios:
            row = [_shape(s)]
            for c in clients:
                info = cells.get((s, c))
                row.append(cell(info) if info else "–")
            out.append("| " + " | ".join(row) + " |")

    per_client_table("Latency per call, p50 / p99 in ms (submit to verified result):",
                     lambda info: f"{_ms(info['p50_ms'])} / {_ms(info['p99_ms'])}")
    if any("client_cpu_us" in info for info in cells.values()):
        per_client_table(
            "Client CPU per call in µs, timed phase (median of rounds): the client's own process "
            "+ its helper processes (trunkline's workers); the echo servers' CPU is not counted:",
            _cpu)
        if "trunkline" in clients and "raw" in clients:
            out.append(
                "\ntrunkline's client CPU per call / raw's: "
                + ", ".join(
                    f"{_shape(s).replace(' | ', ' ')} "
                    f"{_cpu_ratio(cells.get((s, 'trunkline')), cells.get((s, 'raw')))}"
                    for s in scenarios
                )
            )
    per_client_table("Calls per round × rounds:",
                     lambda info: f"{info['calls']:,} × {info['rounds']}")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path, help="pytest-benchmark --benchmark-json output")
    ns = ap.parse_args(argv)
    scenarios, _, _ = load(ns.json)
    gateway = _gateway_tables(ns.json)
    if gateway and not scenarios:
        sys.stdout.write(gateway)
    else:
        sys.stdout.write(render(ns.json) + (f"\n{gateway}" if gateway else ""))
    return 0


def _gateway_tables(path: Path) -> str:
    """bench_gateway.py's tables, when the file holds its cases ("" otherwise)."""
    doc = json.loads(path.read_text())
    if not any((b.get("extra_info") or {}).get("gateway_bench") for b in doc.get("benchmarks", [])):
        return ""
    benches = str(Path(__file__).resolve().parent)
    if benches not in sys.path:
        sys.path.insert(0, benches)
    import bench_gateway

    return bench_gateway.render(path)


if __name__ == "__main__":
    sys.exit(main())
