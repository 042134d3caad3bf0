"""One desktop-style client driving ``trunkline serve CONFIG --stdio`` over N upstreams.

The shape a desktop client gives the gateway: one ``mcpServers`` entry, one pipe pair, and
behind it N copies of the C echo server (``echo_server/echo.c``), each a tool of the merged
catalog (``echo``, ``echo1/echo``, ...). The client is the raw one of ``fanout.py`` (uvloop,
orjson, a dict of futures, one write per loop tick, its ``_RawServer`` pipe protocol),
pointed at the gateway instead of at a server: it sends ``server/discover``, lists the
tools (there must be N), then keeps K calls in flight in total. Worker ``w`` sends its
``n``-th call to tool ``(w + n) mod N``, so every upstream is called whatever K is (at
K = 1 the calls go round the N tools one after the other). Every text is checked against
its unique token; timing as in ``fanout.drive`` (warm-up, ``gc.collect()`` and shutdown
outside the timed phase). The gateway's CPU (its process, its workers, the upstreams) is
read around the timed phase.

    .venv/bin/python benches/gateway_stdio.py run --inflight 64 --calls 20000 [--upstreams 8]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
import fanout  # noqa: E402 - on sys.path above
import gateway_load  # noqa: E402 - on sys.path above
import proc_tree  # noqa: E402 - on sys.path above

META = {"io.modelcontextprotocol/protocolVersion": fanout.MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "trunkline-bench-desktop",
                                               "version": "0.1.0"}}


@dataclass
class StdioResult:
    upstreams: int
    inflight: int
    calls: int
    seconds: float
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    gateway_cpu_s: float  # the gateway, its workers and the upstreams, timed phase only


class GatewayOverStdio:
    """The gateway as a child process, spoken to with ``fanout``'s raw pipe protocol."""

    async def start(self, upstreams: int) -> None:
        import orjson

        self._dumps, loads = orjson.dumps, orjson.loads
        exe = str(fanout.build_echo_server())
        self._dir = tempfile.TemporaryDirectory(prefix="bench-gw-stdio-")
        names = ["echo"] + [f"echo{i}" for i in range(1, upstreams)]
        config = gateway_load.write_config(Path(self._dir.name) / "mcp.json",
                                           {n: [exe] for n in names})
        loop = asyncio.get_running_loop()
        self._loop = loop
        _, self._srv = await loop.subprocess_exec(
            lambda: fanout._RawServer(loop, loads), sys.executable, "-m", "trunkline", "serve",
            str(config), "--stdio", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        assert self._srv.transport is not None
        self.pid = self._srv.transport.get_pid()
        found = await self._request("server/discover", {"_meta": META}, timeout=60)
        if fanout.MODERN not in found.get("result", {}).get("supportedVersions", ()):
            raise RuntimeError(f"the gateway is not modern: {found!r}")
        listed = await self._request("tools/list", {"_meta": META}, timeout=60)
        self.tools = sorted(t["name"] for t in listed["result"]["tools"])
        if len(self.tools) != upstreams:
            raise RuntimeError(f"{upstreams} upstreams, {len(self.tools)} tools: {self.tools}")
        meta = self._dumps(META)
        self._heads = [b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":'
                       + self._dumps(name) + b',"_meta":' + meta + b',"arguments":'
                       for name in self.tools]

    async def _request(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        rid = self._srv.next_id
        self._srv.next_id += 1
        fut = self._loop.create_future()
        self._srv.pending[rid] = fut
        self._srv.send(self._dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                    "params": params}) + b"\n")
        return await asyncio.wait_for(fut, timeout)

    async def call(self, tool_index: int, token: str) -> str:
        srv = self._srv
        rid = srv.next_id
        srv.next_id = rid + 1
        fut = self._loop.create_future()
        srv.pending[rid] = fut
        srv.send(b"".join((self._heads[tool_index], self._dumps({"token": token}),
                           b'},"id":%d}\n' % rid)))
        msg = await fut
        result = msg.get("result")
        if result is None or result.get("isError"):
            raise RuntimeError(f"error answer: {msg!r}")
        return result["content"][0]["text"]  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        srv = self._srv
        if srv.stdin is not None:
            srv.stdin.close()  # EOF: the gateway ends its session and exits
        try:
            await asyncio.wait_for(asyncio.shield(srv.exited), 30)
        finally:
            if srv.transport is not None:
                srv.transport.close()  # kills a straggler, reaps
            self._dir.cleanup()


async def drive(upstreams: int, inflight: int, calls: int) -> StdioResult:
    gw = GatewayOverStdio()
    await gw.start(upstreams)
    try:
        for i in range(upstreams):  # warm-up: every upstream once, checked
            if (text := await gw.call(i, f"warm-{i}")) != f"warm-{i}":
                raise fanout.EchoMismatch(f"sent warm-{i}, got {text!r}")
        budget = [calls]
        latencies: list[float] = []
        pc = time.perf_counter

        async def worker(w: int) -> None:
            n = 0
            while budget[0] > 0:
                budget[0] -= 1
                n += 1
                token = f"w{w}-n{n}"
                t0 = pc()
                text = await gw.call((w + n) % upstreams, token)
                latencies.append(pc() - t0)
                if text != token:
                    raise fanout.EchoMismatch(f"sent {token!r}, got {text[:80]!r}")

        gc.collect()
        tree = proc_tree.descendants(gw.pid)
        cpu0 = proc_tree.cpu_seconds(tree)
        t0 = pc()
        await asyncio.gather(*(worker(w) for w in range(min(inflight, calls))))
        seconds = pc() - t0
        cpu = proc_tree.cpu_seconds(tree) - cpu0
    finally:
        await gw.close()
    if len(latencies) != calls:
        raise AssertionError(f"{len(latencies)} calls completed, {calls} expected")
    latencies.sort()
    return StdioResult(upstreams=upstreams, inflight=inflight, calls=calls, seconds=seconds,
                       calls_per_s=calls / seconds,
                       p50_ms=fanout._quantile(latencies, 0.50) * 1e3,
                       p99_ms=fanout._quantile(latencies, 0.99) * 1e3, gateway_cpu_s=cpu)


def run_round(upstreams: int, inflight: int, calls: int, *, isolate: bool) -> StdioResult:
    """One round; with ``isolate`` in a fresh interpreter (as ``fanout.run_scenario``)."""
    if not isolate:
        return fanout._run_on_loop("uvloop", drive(upstreams, inflight, calls))
    return StdioResult(**fanout.fresh_round(
        [sys.executable, str(Path(__file__).resolve()), "run", "--upstreams", str(upstreams),
         "--inflight", str(inflight), "--calls", str(calls), "--json"],
        "gateway stdio", timeout=600))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one round")
    r.add_argument("--upstreams", type=int, default=8)
    r.add_argument("--inflight", type=int, default=1)
    r.add_argument("--calls", type=int, default=5000)
    r.add_argument("--json", action="store_true")
    ns = ap.parse_args(argv)
    res = fanout._run_on_loop("uvloop", drive(ns.upstreams, ns.inflight, ns.calls))
    if ns.json:
        print(json.dumps(asdict(res)))
    else:
        print(f"{res.upstreams} upstreams, {res.inflight} in flight: {res.calls} calls in "
              f"{res.seconds:.3f} s, {res.calls_per_s:,.0f} calls/s, p50 {res.p50_ms:.3f} ms, "
              f"p99 {res.p99_ms:.3f} ms, gateway CPU {res.gateway_cpu_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

