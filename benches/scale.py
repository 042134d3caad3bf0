"""Fleets of many servers through the public API: what N servers cost to start and to keep,
and whether the cost per call stays flat as N grows (issue 13).

One round: a fresh interpreter builds a ``Host`` (uvloop), adds N copies of the C echo
server (``echo_server/echo.c``) at once with ``host.add_servers``, and measures

* **start-up**: wall time from that call until every server is ready (each worker
  spawned, its server started and its era decided: ``server/discover`` answered);
* **memory**: the proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``: shared
  pages split between the processes sharing them) of every worker process, idle, summed
  and per worker; the echo servers are not counted (they are the servers', not ours);
* **calls/s at a fixed total in flight**: ``inflight`` calls kept in flight in total,
  worker ``w`` sending its ``n``-th call to server ``(w + n) mod N``, each answer's text
  checked, through ``host.call_tool``; with the parent's CPU per call.

Command line (prints one JSON object):

    .venv/bin/python benches/scale.py 64 --calls 50000 --inflight 1024 --start zygote

Workers start either way ``HostSettings.worker_start`` allows: ``spawn`` (a fresh
interpreter each) or ``zygote`` (forks of one worker template).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trunkline import CallOptions, Host
from trunkline.params import stdio
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, ServerConfig

BENCHES = Path(__file__).resolve().parent
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
import fanout  # noqa: E402 - on sys.path above

#: How workers start (``HostSettings.worker_start``).
STARTS = ("spawn", "zygote")


def _settings(start: str) -> HostSettings:
    # Room for hundreds of servers starting at once on two cores.
    return HostSettings(negotiation=NegotiationConfig(discover_timeout_s=120.0),
                        worker_start=start)


@dataclass
class ScaleResult:
    start: str
    servers: int
    inflight: int
    calls: int
    startup_s: float
    worker_pss_bytes: int  # all workers together
    pss_per_worker_bytes: float
    seconds: float
    calls_per_s: float
    parent_cpu_us_per_call: float


def pss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
        for line in f:
            if line.startswith(b"Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Pss line for pid {pid}")


async def measure(start: str, servers: int, calls: int, inflight: int) -> ScaleResult:
    exe = str(fanout.build_echo_server())
    configs = [ServerConfig(f"s{i}", stdio(exe), max_in_flight=1 << 16) for i in range(servers)]
    async with Host(settings=_settings(start), calls=CallOptions(call_timeout_s=120.0)) as host:
        started = time.perf_counter()
        statuses = await host.add_servers(configs)
        startup = time.perf_counter() - started
        bad = [s for s in statuses if s.era != "modern"]
        if bad:
            raise RuntimeError(f"{len(bad)} of {servers} servers not ready: {bad[0]}")
        await asyncio.sleep(0.5)  # let start-up garbage go before weighing the idle workers
        pids = [s.worker_pid for s in host.servers()]
        if None in pids:
            raise RuntimeError("a ready server without a worker process")
        pss = sum(pss_bytes(pid) for pid in pids if pid is not None)

        by_server = {entry.server: entry.name for entry in host.tools()}
        tools = [by_server[f"s{i}"] for i in range(servers)]
        per_worker = [calls // inflight + (1 if w < calls % inflight else 0)
                      for w in range(inflight)]

        async def worker(w: int) -> None:
            for n in range(per_worker[w]):
                token = f"w{w}n{n}"
                result = await host.call_tool(tools[(w + n) % servers], {"token": token})
                if result.is_error or result.content[0]["text"] != token:
                    raise RuntimeError(f"wrong answer for {token}: {result.raw!r}")

        cpu0, t0 = time.process_time(), time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for w in range(inflight):
                tg.create_task(worker(w))
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return ScaleResult(start, servers, inflight, calls, startup, pss, pss / servers, seconds,
                       calls / seconds, cpu / calls * 1e6)


def run_round(start: str, servers: int, calls: int, inflight: int) -> ScaleResult:
    """One round in a fresh interpreter (no earlier round's heap or processes)."""
    return ScaleResult(**fanout.fresh_round(
        [sys.executable, str(Path(__file__).resolve()), str(servers), "--calls", str(calls),
         "--inflight", str(inflight), "--start", start], f"scale {start} {servers}"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("servers", type=int)
    ap.add_argument("--calls", type=int, default=50_000)
    ap.add_argument("--inflight", type=int, default=1024)
    ap.add_argument("--start", choices=STARTS, default="spawn")
    ns = ap.parse_args(argv)
    import uvloop
    result = uvloop.run(measure(ns.start, ns.servers, ns.calls, ns.inflight))
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
