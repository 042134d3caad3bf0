"""Fan-out over Streamable HTTP: trunkline, the official SDK and raw aiohttp, side by side.

``tools/call`` ``echo`` at 2026-07-28 against one server (``http_echo_server.py``'s
``/mcp/echo`` route, started once per module on 127.0.0.1), 1 / 64 / 256 calls in flight,
100 B and 64 KiB texts. The clients and the load generator are in ``http_fanout.py``.

    .venv/bin/pytest benches/bench_http_fanout.py --benchmark-json=HTTPFAN.json   # full
    .venv/bin/python benches/bench_http_fanout.py report HTTPFAN.json             # the tables
    .venv/bin/pytest benches/bench_http_fanout.py --benchmark-disable             # smoke (CI)

Timings are never pass/fail. A case fails when a call fails, an echoed text is not exactly
the one sent, a round completes fewer calls than it started, the server saw a different
number of ``tools/call`` requests than calls were made (plus the warm-up), any request
lacked ``MCP-Protocol-Version: 2026-07-28`` or an ``Mcp-Method`` equal to its method, or a
process of the round outlived it. The SDK column needs ``.peers/py-modern`` and fails
without it.

The numbers are in ``extra_info`` (medians over rounds of the timed phase only), under
``fanout_case`` / ``fanout_client``, so that neither ``report.py`` (the stdio tables) nor
``bench_http_client.py report`` picks them up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

import http_fanout
import report
from bench_http_client import EchoServer, http_server  # noqa: F401 - a module-scoped fixture: the server, reaped

ROUNDS = 3
LABEL = {"trunkline": "trunkline", "sdk": "SDK", "raw": "raw aiohttp"}


@dataclass
class ServerView:
    """What the server saw during one round (deltas of its ``/stats``)."""

    tool_calls: int
    header_violations: int
    violation_samples: list[dict[str, Any]]
    connections_opened: int
    peak_open: int
    cpu_s: float


def _server_view(before: dict[str, Any], after: dict[str, Any]) -> ServerView:
    return ServerView(
        tool_calls=after["echo_methods"].get("tools/call", 0)
        - before["echo_methods"].get("tools/call", 0),
        header_violations=after["header_violations"] - before["header_violations"],
        violation_samples=after["violation_samples"][len(before["violation_samples"]) :],
        connections_opened=after["mcp_connections"] - before["mcp_connections"],
        peak_open=after["peak_open_mcp"],
        cpu_s=after["cpu_s"] - before["cpu_s"],
    )


def _children() -> set[int]:
    """This process's live (or unreaped) children."""
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            kids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            pass
    return kids


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def run_checked_round(server: EchoServer, client: str, case: http_fanout.Case, calls: int,
                      smoke: bool) -> tuple[http_fanout.fanout.RunResult, ServerView]:
    """One round, then the server's side of it: every call arrived once, correctly headed,
    and nothing the round started is still alive."""
    kids = _children()
    before = server.get("/stats?reset-peak")
    try:
        res = http_fanout.run_round(
            client, case, f"{server.base_url}/mcp/echo", calls, isolate=not smoke
        )
    finally:
        leaked = _children() - kids
        _kill(leaked)
    view = _server_view(before, server.stats())
    assert not leaked, f"{client} {case.name}: child processes outlived the round: {sorted(leaked)}"
    assert view.header_violations == 0, (
        f"{client} {case.name}: {view.header_violations} requests without MCP-Protocol-Version "
        f"{http_fanout.MODERN} or a matching Mcp-Method, e.g. {view.violation_samples}")
    assert view.tool_calls == calls + 1, (
        f"{client} {case.name}: the server saw {view.tool_calls} tools/call "
        f"for {calls} calls + 1 warm-up"
    )
    return res, view


@pytest.mark.parametrize(("case", "client"), [
    pytest.param(case, client, id=f"{case.name}-{client}")
    for case in http_fanout.CASES for client in http_fanout.CLIENTS
])
def test_http_fanout(
    benchmark: Any, http_server: EchoServer, case: http_fanout.Case, client: str
) -> None:
    if client == "sdk" and not http_fanout.SDK_PYTHON.exists():
        pytest.fail(f"the SDK column needs {http_fanout.SDK_PYTHON} (.ci/install-peers creates it)")
    smoke = bool(benchmark.disabled)
    calls = case.calls_for(http_fanout.ADAPTERS[client].slow, smoke=smoke)
    rounds: list[tuple[http_fanout.fanout.RunResult, ServerView]] = []

    def one_round() -> None:
        rounds.append(run_checked_round(http_server, client, case, calls, smoke))

    benchmark.group = f"http-fanout-{case.name}"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1, warmup_rounds=0)
    assert rounds and all(r.calls == calls for r, _ in rounds)
    benchmark.extra_info.update(summary(client, case, smoke, rounds))


def summary(client: str, case: http_fanout.Case, smoke: bool,
            rounds: list[tuple[http_fanout.fanout.RunResult, ServerView]]) -> dict[str, Any]:
    """``extra_info``: medians over rounds, and every round as measured."""
    med = {
        key: statistics.median(getattr(r, key) for r, _ in rounds)
        for key in ("calls_per_s", "p50_ms", "p99_ms")
    }
    return {
        "fanout_client": client,
        "fanout_case": case.name,
        "inflight": case.inflight,
        "text_bytes": case.size,
        "calls": rounds[0][0].calls,
        "rounds": len(rounds),
        "smoke": smoke,
        **med,
        "server_cpu_share": statistics.median(v.cpu_s / r.seconds for r, v in rounds),
        "connections_opened": statistics.median(v.connections_opened for _, v in rounds),
        "per_round": [{**asdict(r), "server": asdict(v)} for r, v in rounds],
    }


# ---------------------------------------------------------------------- reporting


def _cells(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    cells = {}
    for bench in json.loads(path.read_text()).get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if "fanout_case" in info and "calls_per_s" in info:
            cells[(info["fanout_case"], info["fanout_client"])] = info
    return cells


def render(path: Path) -> str:
    cells = _cells(path)
    if not cells:
        return (
            f"No HTTP fan-out results in {path} (run bench_http_fanout.py with --benchmark-json).\n"
        )
    clients = [c for c in http_fanout.CLIENTS if any(k[1] == c for k in cells)]
    cases = [c for c in http_fanout.CASES if any(k[0] == c.name for k in cells)]
    ratios = [
        ("trunkline/SDK", "trunkline", "sdk"),
        ("trunkline/raw", "trunkline", "raw"),
        ("raw/SDK", "raw", "sdk"),
    ]
    out = []
    if any(info.get("smoke") for info in cells.values()):
        out.append(
            "> **Smoke run** (`--benchmark-disable`, tiny call counts): "
            "these numbers mean nothing.\n"
        )

    def table(title: str, columns: list[str], row: Any) -> None:
        out.append(f"{title}\n")
        out.append("| in flight | text | " + " | ".join(columns) + " |")
        out.append("|---:|---|" + "---:|" * len(columns))
        for case in cases:
            out.append(f"| {case.label} | " + " | ".join(row(case)) + " |")
        out.append("")

    def per_client(fmt: Any) -> Any:
        return lambda case: [
            fmt(cells[(case.name, c)]) if (case.name, c) in cells else "–" for c in clients
        ]

    def ratio(case: http_fanout.Case, a: str, b: str) -> str:
        x, y = cells.get((case.name, a)), cells.get((case.name, b))
        return f"{x['calls_per_s'] / y['calls_per_s']:.2f}x" if x and y else "–"

    table("Throughput, calls/s (median of rounds):",
          [LABEL[c] for c in clients] + [r[0] for r in ratios],
          lambda case: per_client(lambda i: report._rate(i["calls_per_s"]))(case)
          + [ratio(case, a, b) for _, a, b in ratios])
    table(
        "Latency per call, p50 / p99 in ms (submit to verified result):",
        [LABEL[c] for c in clients],
        per_client(lambda i: f"{report._ms(i['p50_ms'])} / {report._ms(i['p99_ms'])}"),
    )
    table(
        "Calls per round × rounds; connections the server saw opened per round; the server's CPU "
        "during the round as a share of one core:",
        [LABEL[c] for c in clients],
        per_client(
            lambda i: (
                f"{i['calls']:,} × {i['rounds']}; {i['connections_opened']:.0f} conn; "
                f"{100 * i['server_cpu_share']:.0f}%"
            )
        ),
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("report", help="the markdown tables from a pytest --benchmark-json file")
    p.add_argument("json", type=Path)
    ns = ap.parse_args(argv)
    sys.stdout.write(render(ns.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
