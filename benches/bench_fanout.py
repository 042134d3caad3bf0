"""Fan-out throughput: every scenario x every client, side by side (issue 4).

Full run (a few minutes on 2 cores), then the markdown table:

    .venv/bin/pytest benches/bench_fanout.py --benchmark-json=BENCH.json
    .venv/bin/python benches/report.py BENCH.json

Smoke run (CI): ``--benchmark-disable`` runs each case once with a tiny call
count; it still verifies every echoed token, and never judges timings.

The numbers that matter are in ``benchmark.extra_info`` (medians over rounds of
the timed call phase only). pytest-benchmark's own min/mean columns time a
whole round, including spawning the servers, the handshake and shutdown.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

import fanout

# Rounds per case in a full run. The SDK's big cases take 15-40 s per round
# here, so they get one round (see fanout.SCENARIOS for the call caps).
ROUNDS = 3
SLOW_BIG_ROUNDS = 1
SLOW_BIG_INFLIGHT = 8192  # total in flight at or above which a slow client gets SLOW_BIG_ROUNDS


def _cases() -> list[Any]:
    cases = []
    for sc in fanout.SCENARIOS:
        for client in fanout.client_names():
            cases.append(pytest.param(sc, client, id=f"{sc.name}-{client}"))
    return cases


@pytest.fixture(scope="session")
def echo_server() -> str:
    return str(fanout.build_echo_server())


@pytest.mark.parametrize(("scenario", "client"), _cases())
def test_fanout(benchmark: Any, echo_server: str, scenario: fanout.Scenario, client: str) -> None:
    if client == "sdk":
        mode = fanout.sdk_mode()
        if mode is None:
            pytest.skip(f"mcp 2.3.x not importable here and no {fanout.SDK_PYTHON}")
        benchmark.extra_info["sdk_mode"] = mode
    cls = fanout.get_adapter(client)
    slow = bool(getattr(cls, "slow", False))
    smoke = bool(benchmark.disabled)
    calls = scenario.calls_for(slow, smoke=smoke)
    rounds = SLOW_BIG_ROUNDS if slow and scenario.total_inflight >= SLOW_BIG_INFLIGHT else ROUNDS

    results: list[fanout.RunResult] = []

    def one_round() -> None:
        # Full rounds run in a fresh interpreter each (see fanout.run_scenario); smoke
        # rounds only check correctness, so they stay in-process and quick.
        results.append(fanout.run_scenario(client, scenario, calls, isolate=not smoke))

    benchmark.group = scenario.name
    benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=0)

    # Correctness was checked call by call inside the harness (EchoMismatch);
    # here only that every round completed every call.
    assert results and all(r.calls == calls for r in results)
    info = benchmark.extra_info
    info.update(
        client=client,
        scenario=scenario.name,
        servers=scenario.servers,
        inflight_per_server=scenario.inflight,
        result_size=scenario.size,
        calls=calls,
        rounds=len(results),
        smoke=smoke,
        calls_per_s=statistics.median(r.calls_per_s for r in results),
        p50_ms=statistics.median(r.p50_ms for r in results),
        p99_ms=statistics.median(r.p99_ms for r in results),
        client_cpu_us=statistics.median(r.client_cpu_us for r in results),
        parent_cpu_us=statistics.median(r.parent_cpu_us for r in results),
        helpers_cpu_us=statistics.median(r.helpers_cpu_us for r in results),
        server_cpu_us=statistics.median(r.server_cpu_us for r in results),
        per_round=[
            {
                "calls_per_s": r.calls_per_s,
                "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms,
                "seconds": r.seconds,
                "parent_cpu_us": r.parent_cpu_us,
                "helpers_cpu_us": r.helpers_cpu_us,
                "server_cpu_us": r.server_cpu_us,
            }
            for r in results
        ],
    )
