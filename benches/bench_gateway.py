"""``trunkline serve`` as a gateway: throughput, latency and memory per client, side by side
with the same upstream served directly and through fastmcp's proxy, in the same run.

Over HTTP (wrk, ``gateway_load.py``): ``tools/call`` at 2026-07-28 with 1, 64 and 256
connections (one call in flight each) against

* ``direct``         ``http_echo_server.py``: no gateway; the ceiling of wrk itself,
* ``trunkline``      ``trunkline serve CONFIG --http`` over the C echo server, JSON answers
                     (``Accept: application/json``),
* ``trunkline-sse``  the same process, the client accepting SSE too, so every call is
                     answered as an event stream,
* ``trunkline-x2``   ``serve --processes 2``: two gateway processes on one socket (JSON),
* ``fastmcp``        fastmcp 4.2.3's ``create_proxy`` over the same ``mcpServers`` file
                     (it requires ``Accept: application/json, text/event-stream``).

The 2025-11-25 era side by side (``test_gateway_legacy``): one session per target opened
from Python, then wrk's ``tools/call`` in it, every answer an SSE stream, at the same
connection counts, rounds interleaved (trunkline, agentgateway, trunkline, ...) so both see
the same machine, against

* ``trunkline-legacy``     the ``trunkline`` process above, called the 2025-11-25 way,
* ``agentgateway-legacy``  agentgateway (Rust) over the same C echo server as its stdio
                           target; ``TRUNKLINE_BENCH_AGENTGATEWAY`` names its binary
                           (``benches/agentgateway/build.sh`` builds it). Without it the
                           column is left out and ``test_legacy_agentgateway_column`` is skipped,
                           saying so.

Memory: RSS of the gateway and its workers with no client, then with N idle clients: kept
alive after one call, or holding a ``subscriptions/listen`` stream (trunkline only:
fastmcp's proxy answers it -32601). Over stdio (``gateway_stdio.py``): one client driving
``trunkline serve CONFIG --stdio`` with 8 upstreams at 1 and 64 calls in flight, beside the
official ``mcp`` client and the raw client of ``fanout.py`` calling one upstream directly.

    .venv/bin/pytest benches/bench_gateway.py --benchmark-json=GW.json   # full, ~4.5 min
    .venv/bin/pytest benches/bench_gateway.py -k legacy --benchmark-json=L.json  # legacy, ~2 min
    .venv/bin/python benches/bench_gateway.py report GW.json            # the tables
    .venv/bin/pytest benches/bench_gateway.py --benchmark-disable       # smoke (CI)

Timings are never pass/fail. A case fails when any call fails: a non-2xx, a JSON-RPC error,
a result that is not the echo of that very call, a socket error or a wrk timeout; for
``direct`` also a request without the right MCP headers or a count of calls the server did
not see; for a legacy column also an answer that is not an event stream with one
JSON-RPC response; for the idle clients a call answered wrongly, a listen stream not
acknowledged, or fewer sockets held open than clients connected. The fastmcp column and
the SDK baseline need ``.ci/install-peers``' venvs and fail without them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

import fanout
import formats
import gateway_load
import gateway_stdio

HTTP_COLUMNS = ("direct", "trunkline", "trunkline-sse", "trunkline-x2", "fastmcp")
LABEL = {"direct": "direct", "trunkline": "trunkline", "trunkline-sse": "trunkline, SSE",
         "trunkline-x2": "trunkline --processes 2", "fastmcp": "fastmcp proxy"}
LEGACY_COLUMNS = ("trunkline-legacy", "agentgateway-legacy")
LEGACY_LABEL = {"trunkline-legacy": "trunkline", "agentgateway-legacy": "agentgateway"}
CONNECTIONS = (1, 64, 256)
ROUNDS = 3
ROUND_S = 5  # wrk's duration per full round
WARMUP_S = 1  # one unrecorded wrk run per case before its rounds (full mode)
SMOKE_S = 1  # wrk's shortest run
# fastmcp's proxy, hit by 256 new connections at once, once answered nothing within a
# second on the CI machine (wrk counts only what is answered before its run ends): its
# smoke run gets long enough for its first answers.
SMOKE_S_SLOW_PEER = 5

IDLE_CASES = (("keepalive", "trunkline"), ("listen", "trunkline"), ("keepalive", "fastmcp"))
IDLE_CLIENTS, SMOKE_IDLE_CLIENTS = 1000, 20
# uvicorn drops an idle keep-alive connection after 5 s; the measurement takes longer.
FASTMCP_IDLE_KEEPALIVE_S = 600

STDIO_UPSTREAMS = 8
STDIO_INFLIGHT = (1, 64)
# calls per full round: (trunkline over 8 upstreams, sdk direct, raw direct), by in flight
STDIO_CALLS = {1: {"trunkline": 3_000, "sdk": 1_000, "raw": 5_000},
               64: {"trunkline": 30_000, "sdk": 3_000, "raw": 50_000}}
STDIO_CLIENTS = ("trunkline", "sdk", "raw")
STDIO_LABEL = {"trunkline": f"trunkline --stdio, {STDIO_UPSTREAMS} upstreams",
               "sdk": "mcp SDK direct, 1 upstream", "raw": "raw uvloop direct, 1 upstream"}


# ------------------------------------------------------------------------- HTTP


class Targets:
    """The HTTP targets of this module, each started on first use, all stopped at the end."""

    def __init__(self) -> None:
        self._started: dict[str, gateway_load.Target] = {}

    def get(self, column: str) -> gateway_load.Target:
        """The target of ``column``; for a ``-legacy`` column, the process without a session
        (``gateway_load.open_legacy_session`` opens one)."""
        process = column.removesuffix("-sse").removesuffix("-legacy")
        if process not in self._started:
            self._started[process] = gateway_load.STARTERS[process]()
        target = self._started[process]
        return target.as_column(column, gateway_load.BOTH) if column.endswith("-sse") else target

    def stop(self) -> None:
        for target in self._started.values():
            target.stop()
        self._started.clear()


@pytest.fixture(scope="module")
def http_targets() -> Iterator[Targets]:
    if shutil.which("wrk") is None:
        pytest.fail("wrk is not installed (.ci/install-system installs it)")
    targets = Targets()
    try:
        yield targets
    finally:
        targets.stop()


@pytest.mark.parametrize(("connections", "column"), [
    pytest.param(n, column, id=f"c{n}-{column}") for n in CONNECTIONS for column in HTTP_COLUMNS
])
def test_gateway_http(benchmark: Any, http_targets: Targets, connections: int,
                      column: str) -> None:
    target = http_targets.get(column)
    smoke = bool(benchmark.disabled)
    rounds: list[gateway_load.WrkResult] = []
    if not smoke:
        gateway_load.run_wrk(target, connections, WARMUP_S)

    def one_round() -> None:
        smoke_s = SMOKE_S_SLOW_PEER if column == "fastmcp" else SMOKE_S
        rounds.append(gateway_load.run_wrk(target, connections, smoke_s if smoke else ROUND_S))

    benchmark.group = f"gateway-http-c{connections}"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1, warmup_rounds=0)
    assert rounds and all(r.calls > 0 for r in rounds)
    benchmark.extra_info.update(gateway_bench="http", column=column, connections=connections,
                                smoke=smoke, **_summary(rounds))


def _summary(rounds: list[gateway_load.WrkResult]) -> dict[str, Any]:
    """The medians of a case's rounds, and the rounds themselves."""
    med = {k: statistics.median(getattr(r, k) for r in rounds)
           for k in ("calls_per_s", "p50_ms", "p99_ms")}
    return dict(
        rounds=len(rounds), calls=statistics.median(r.calls for r in rounds), **med,
        target_cpu_ms_per_call=statistics.median(1e3 * r.target_cpu_s / r.calls for r in rounds),
        target_cpu_share=statistics.median(r.target_cpu_s / r.seconds for r in rounds),
        target_cpu_us_per_call_by_role={
            role: statistics.median(1e6 * r.target_cpu_by_role[role] / r.calls for r in rounds)
            for role in rounds[0].target_cpu_by_role},
        wrk_cpu_share=statistics.median(r.wrk_cpu_s / r.seconds for r in rounds),
        per_round=[asdict(r) for r in rounds])


# --------------------------------------------------------------- legacy (2025-11-25)


def test_legacy_agentgateway_column(http_targets: Targets) -> None:
    """The agentgateway column can run: its binary is given, it starts, and a 2025-11-25
    session's call through it is answered as an event stream (``open_legacy_session``
    checks). Skipped, saying how to build it, when no binary is given."""
    reason = gateway_load.agentgateway_missing()
    if reason:
        pytest.skip(reason)
    session = gateway_load.open_legacy_session(http_targets.get("agentgateway-legacy"))
    gateway_load.close_legacy_session(session)
    assert session.session and session.tool.endswith("echo")


@pytest.mark.parametrize("connections", [
    pytest.param(n, id=f"c{n}-legacy") for n in CONNECTIONS
])
def test_gateway_legacy(benchmark: Any, http_targets: Targets, connections: int) -> None:
    columns = [c for c in LEGACY_COLUMNS
               if c != "agentgateway-legacy" or gateway_load.agentgateway_missing() is None]
    smoke = bool(benchmark.disabled)
    sessions: dict[str, gateway_load.Target] = {}
    rounds: dict[str, list[gateway_load.WrkResult]] = {c: [] for c in columns}
    try:
        for column in columns:  # a fresh session for each connection count
            sessions[column] = gateway_load.open_legacy_session(http_targets.get(column))
            if not smoke:
                gateway_load.run_wrk(sessions[column], connections, WARMUP_S)

        def one_round() -> None:
            for column in columns:  # interleaved: each round runs every column once
                rounds[column].append(gateway_load.run_wrk(
                    sessions[column], connections, SMOKE_S if smoke else ROUND_S))

        benchmark.group = f"gateway-legacy-c{connections}"
        benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1,
                           warmup_rounds=0)
    finally:
        for session in sessions.values():
            gateway_load.close_legacy_session(session)
    assert all(rs and all(r.calls > 0 for r in rs) for rs in rounds.values())
    benchmark.extra_info.update(
        gateway_bench="legacy", connections=connections, smoke=smoke,
        tools={c: s.tool for c, s in sessions.items()},
        columns={c: _summary(rs) for c, rs in rounds.items()})


# ----------------------------------------------------------------------- memory


@pytest.mark.parametrize(("kind", "target_name"), [
    pytest.param(kind, name, id=f"{kind}-{name}") for kind, name in IDLE_CASES
])
def test_gateway_idle_clients(benchmark: Any, http_targets: Targets, kind: str,
                              target_name: str) -> None:
    smoke = bool(benchmark.disabled)
    clients = SMOKE_IDLE_CLIENTS if smoke else IDLE_CLIENTS
    # A full round weighs a fresh process: one that served the load above would lend its
    # freed memory to the new clients. A smoke round only checks, on the module's targets.
    if smoke:
        target, fresh = http_targets.get(target_name), None
    else:
        fresh = target = (gateway_load.start_fastmcp(keep_alive_s=FASTMCP_IDLE_KEEPALIVE_S)
                          if target_name == "fastmcp" else gateway_load.start_trunkline())
    costs: list[gateway_load.IdleCost] = []
    try:
        benchmark.group = "gateway-idle-clients"
        benchmark.pedantic(
            lambda: costs.append(asyncio.run(gateway_load.measure_idle_cost(
                target, kind, clients, settle_s=0.1 if smoke else 1.0))),
            rounds=1, iterations=1, warmup_rounds=0)
    finally:
        if fresh is not None:
            fresh.stop()
    assert costs and costs[0].sockets_added >= clients
    benchmark.extra_info.update(gateway_bench="idle", smoke=smoke, **costs[0].as_dict())


# ------------------------------------------------------------------------ stdio


def _stdio_round(client: str, inflight: int, calls: int, smoke: bool) -> dict[str, Any]:
    if client == "trunkline":
        res = gateway_stdio.run_round(STDIO_UPSTREAMS, inflight, calls, isolate=not smoke)
        return asdict(res)
    scenario = fanout.parse_scenario(f"1x{inflight}-small", calls)
    run = fanout.run_scenario(client, scenario, calls, isolate=not smoke)
    return {"upstreams": 1, "inflight": inflight, **asdict(run)}


@pytest.mark.parametrize(("inflight", "client"), [
    pytest.param(k, c, id=f"k{k}-{c}") for k in STDIO_INFLIGHT for c in STDIO_CLIENTS
])
def test_gateway_stdio(benchmark: Any, inflight: int, client: str) -> None:
    if client == "sdk" and fanout.sdk_mode() is None:
        pytest.fail(f"the SDK baseline needs {fanout.SDK_PYTHON} (.ci/install-peers creates it)")
    smoke = bool(benchmark.disabled)
    calls = (max(2 * STDIO_UPSTREAMS, min(64, 2 * inflight)) if smoke
             else STDIO_CALLS[inflight][client])
    rounds: list[dict[str, Any]] = []
    benchmark.group = f"gateway-stdio-k{inflight}"
    benchmark.pedantic(lambda: rounds.append(_stdio_round(client, inflight, calls, smoke)),
                       rounds=1 if smoke else ROUNDS, iterations=1, warmup_rounds=0)
    assert rounds and all(r["calls"] == calls for r in rounds)
    med = {k: statistics.median(r[k] for r in rounds) for k in ("calls_per_s", "p50_ms", "p99_ms")}
    benchmark.extra_info.update(gateway_bench="stdio", client=client, inflight=inflight,
                                upstreams=rounds[0]["upstreams"], calls=calls, smoke=smoke,
                                rounds=len(rounds), **med, per_round=rounds)


# -------------------------------------------------------------------- reporting


def _results(path: Path, kind: str) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    return [b["extra_info"] for b in doc.get("benchmarks", [])
            if (b.get("extra_info") or {}).get("gateway_bench") == kind]


def _table(out: list[str], title: str, head: list[str], rows: list[list[str]]) -> None:
    out += [f"{title}\n", "| " + " | ".join(head) + " |",
            "|" + "---:|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out.append("")


def _cpu_cell(info: dict[str, Any]) -> str:
    by_role = info.get("target_cpu_us_per_call_by_role")
    if by_role is None:  # a file from before the split by role
        split = f"{1e3 * info['target_cpu_ms_per_call']:.0f}"
    else:
        split = " + ".join(f"{by_role[r]:.0f}" for r in ("gateway", "workers", "upstreams"))
    return f"{split}; wrk {100 * info['wrk_cpu_share']:.0f}%"


def _mib(b: float) -> str:
    return f"{b / 2**20:.1f}"


def render(path: Path) -> str:
    """The markdown tables of a ``--benchmark-json`` file ("" when it has no gateway case)."""
    http, idle, stdio, legacy = (_results(path, k) for k in ("http", "idle", "stdio", "legacy"))
    if not (http or idle or stdio or legacy):
        return ""
    out: list[str] = []
    if any(i.get("smoke") for i in http + idle + stdio + legacy):
        out.append("> **Smoke run** (`--benchmark-disable`, tiny counts): these numbers mean "
                   "nothing.\n")
    if http:
        cell = {(i["connections"], i["column"]): i for i in http}
        cols = [c for c in HTTP_COLUMNS if any(k[1] == c for k in cell)]
        conns = sorted({k[0] for k in cell})

        def per(fmt: Callable[[dict[str, Any]], str]) -> Callable[[int], list[str]]:
            return lambda n: [fmt(cell[(n, c)]) if (n, c) in cell else "–" for c in cols]

        def ratio(n: int, a: str, b: str) -> str:
            x, y = cell.get((n, a)), cell.get((n, b))
            return f"{x['calls_per_s'] / y['calls_per_s']:.2f}x" if x and y else "–"

        def added(n: int, c: str) -> str:
            x, d = cell.get((n, c)), cell.get((n, "direct"))
            return f"+{formats.ms(x['p50_ms'] - d['p50_ms'])}" if x and d else "–"

        _table(out, "Over HTTP, calls/s (median of rounds; in flight = wrk's connections):",
               ["in flight", *(LABEL[c] for c in cols), "trunkline/fastmcp",
                "trunkline ×2/fastmcp", "trunkline/direct"],
               [[str(n), *per(lambda i: formats.rate(i["calls_per_s"]))(n),
                 ratio(n, "trunkline", "fastmcp"), ratio(n, "trunkline-x2", "fastmcp"),
                 ratio(n, "trunkline", "direct")]
                for n in conns])
        _table(out, "Latency per call, p50 / p99 in ms (wrk), and the p50 each gateway adds "
               "over direct:",
               ["in flight", *(LABEL[c] for c in cols), "added p50 trunkline",
                "added p50 fastmcp"],
               [[str(n), *per(lambda i: f"{formats.ms(i['p50_ms'])} / "
                                        f"{formats.ms(i['p99_ms'])}")(n),
                 added(n, "trunkline"), added(n, "fastmcp")] for n in conns])
        _table(out, "CPU per call in µs: the serving process + its workers + its upstream "
               "(all the target's processes); wrk's share of one core:",
               ["in flight", *(LABEL[c] for c in cols)],
               [[str(n), *per(_cpu_cell)(n)] for n in conns])
    if legacy:
        _legacy_tables(out, legacy)
    if idle:
        _table(out, "Memory per connected client (RSS, idle clients held open):",
               ["target", "client", "clients", "gateway MiB before → with", "workers MiB",
                "bytes per client"],
               [[i["target"], "keep-alive after one call" if i["kind"] == "keepalive"
                 else "open subscriptions/listen", f"{i['clients']:,}",
                 f"{_mib(i['rss_before']['gateway'])} → {_mib(i['rss_after']['gateway'])}",
                 f"{_mib(i['rss_before']['workers'])} → {_mib(i['rss_after']['workers'])}",
                 f"{i['bytes_per_client']:,.0f}"] for i in idle])
    if stdio:
        cell = {(i["inflight"], i["client"]): i for i in stdio}
        clients = [c for c in STDIO_CLIENTS if any(k[1] == c for k in cell)]
        _table(out, "Over stdio, one client: calls/s, p50 / p99 ms (median of rounds):",
               ["in flight", *(STDIO_LABEL[c] for c in clients)],
               [[str(k), *(f"{formats.rate(cell[(k, c)]['calls_per_s'])}; "
                           f"{formats.ms(cell[(k, c)]['p50_ms'])} / "
                           f"{formats.ms(cell[(k, c)]['p99_ms'])}"
                           if (k, c) in cell else "–" for c in clients)]
                for k in sorted({k for k, _ in cell})])
    return "\n".join(out)


def _legacy_tables(out: list[str], legacy: list[dict[str, Any]]) -> None:
    """trunkline's 2025-11-25 path beside agentgateway: calls/s, latency, CPU per call."""
    cols = [c for c in LEGACY_COLUMNS if any(c in i["columns"] for i in legacy)]
    rows = sorted(legacy, key=lambda i: i["connections"])

    def per(info: dict[str, Any], fmt: Callable[[dict[str, Any]], str]) -> list[str]:
        return [fmt(info["columns"][c]) if c in info["columns"] else "–" for c in cols]

    def ratio(info: dict[str, Any], of: Callable[[dict[str, Any]], float]) -> str:
        """The median over rounds of trunkline's round against agentgateway's next to it."""
        x, y = (info["columns"].get(c) for c in LEGACY_COLUMNS)
        if not (x and y):
            return "–"
        pairs = zip(x["per_round"], y["per_round"], strict=True)
        return f"{statistics.median(of(a) / of(b) for a, b in pairs):.2f}x"

    def rate(r: dict[str, Any]) -> float:
        return r["calls"] / r["seconds"]

    def per_cpu_s(r: dict[str, Any]) -> float:
        return r["calls"] / r["target_cpu_s"]

    names = [LEGACY_LABEL[c] for c in cols]
    _table(out, "2025-11-25 sessions (every answer SSE), calls/s and p50 / p99 ms (median of "
           "rounds; the columns' rounds interleaved, a ratio is the median of the rounds' "
           "ratios, each against the other column's round next to it):",
           ["in flight", *(f"{n} calls/s" for n in names), *(f"{n} p50 / p99" for n in names),
            "trunkline/agentgateway calls/s"],
           [[str(i["connections"]), *per(i, lambda c: formats.rate(c["calls_per_s"])),
             *per(i, lambda c: f"{formats.ms(c['p50_ms'])} / {formats.ms(c['p99_ms'])}"),
             ratio(i, rate)] for i in rows])
    _table(out, "CPU per call in µs (the gateway + its workers + its upstream), calls per "
           "CPU-second of the whole tree, wrk's share of one core:",
           ["in flight", *(f"{n} µs per call" for n in names),
            *(f"{n} calls per CPU-s" for n in names), "trunkline/agentgateway calls per CPU-s"],
           [[str(i["connections"]), *per(i, _cpu_cell),
             *per(i, lambda c: f"{1e3 / c['target_cpu_ms_per_call']:,.0f}"),
             ratio(i, per_cpu_s)] for i in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("report", help="the markdown tables from a pytest --benchmark-json file")
    p.add_argument("json", type=Path)
    ns = ap.parse_args(argv)
    sys.stdout.write(render(ns.json) or f"No gateway results in {ns.json}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
