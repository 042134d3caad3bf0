"""HTTP client choice for the Streamable HTTP transport: aiohttp vs httpx, side by side.

MCP's traffic shape over HTTP: one POST per JSON-RPC message to one endpoint, many in
flight, a keep-alive pool, and a response that is either ``application/json`` (~200 B or
64 KiB) or ``text/event-stream`` (progress events, then the final response). The client
learns which from the response headers, so each client does what the transport will do:
stream the response, then read the JSON body whole or feed the event stream to
``trunkline.transports.sse.SseDecoder`` until it ends. Every response is verified (the
echoed id, the text, the three events of a stream), and so is the server's count of
requests and of connections (at most the pool open at once; one when one is in flight).

Clients: ``aiohttp`` and ``httpx`` (encode, 0.28), plus ``httpx2`` (the pydantic fork with
the same API, which the ``mcp`` SDK 2.x depends on) where it is installed. All on uvloop,
pool of POOL connections.

The server is ``http_echo_server.py`` in its own process (one per module, 127.0.0.1,
ephemeral port), stopped and reaped by the module fixture.

    .venv/bin/pytest benches/bench_http_client.py --benchmark-json=HTTP.json  # full, ~8 min
    .venv/bin/python benches/bench_http_client.py report HTTP.json             # the table
    .venv/bin/pytest benches/bench_http_client.py --benchmark-disable          # smoke, ~20 s
    .venv/bin/python benches/bench_http_client.py run [--rounds N] [--pool N] [--cases ...]
    .venv/bin/python benches/bench_http_client.py cancel [-n N]   # the cancellation probe
    .venv/bin/python benches/bench_http_client.py mem             # import cost and peak RSS

``run`` interleaves the clients round by round (the order rotates), which is fairer on a
noisy machine than pytest's all-rounds-of-one-then-the-next. Timings are never pass/fail.
The numbers are in ``extra_info`` (medians over rounds of the timed phase only;
pytest-benchmark's own columns also time opening the client and the warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import importlib
import importlib.util
import json
import os
import resource
import select
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson
import pytest

from trunkline.worker.transports.sse import SseDecoder

BENCHES = Path(__file__).resolve().parent
SERVER_SCRIPT = BENCHES / "http_echo_server.py"
sys.path.insert(0, str(BENCHES))
import http_echo_server as srv  # noqa: E402 - the expected texts, shared with the server

POOL = 100  # connections per client: aiohttp TCPConnector(limit=), httpx max_connections
# Smoke rounds (--benchmark-disable) keep 256 in flight but queue them on a pool of 16:
# the same code paths (pool queueing included) are verified, and httpx, whose pool costs
# O(connections^2) per request, stays within the smoke budget.
SMOKE_POOL = 16
TIMEOUT_S = 30.0  # per request; generous: a request only waits this long when it is broken
ROUNDS = 3
CLIENTS = ("aiohttp", "httpx", "httpx2")  # httpx2: only where it is installed (mcp 2.x pulls it in)
MODES = ("small", "large", "sse", "slow-sse", "slow-head")
MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "Mcp-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
}
T = TypeVar("T")


@dataclass(frozen=True)
class Case:
    name: str
    mode: str  # the server route: small | large | sse
    inflight: int
    requests: int  # per round, full run
    smoke_requests: int  # per round, --benchmark-disable

    @property
    def label(self) -> str:
        shape = {"small": "JSON ~200 B", "large": "JSON 64 KiB", "sse": "SSE, 3 events"}[self.mode]
        return f"{'sequential' if self.inflight == 1 else f'{self.inflight} in flight'}, {shape}"


CASES = (
    Case("seq-small", "small", 1, 1000, 20),
    Case("seq-64k", "large", 1, 500, 10),
    Case("seq-sse", "sse", 1, 1000, 20),
    Case("c256-small", "small", 256, 2000, 256),
    Case("c256-64k", "large", 256, 2000, 256),
    Case("c256-sse", "sse", 256, 2000, 256),
)
CASE_BY_NAME = {c.name: c for c in CASES}


class EchoMismatch(AssertionError):
    pass


class HttpFailure(RuntimeError):
    pass


# ------------------------------------------------------------------------- server


class EchoServer:
    """``http_echo_server.py`` in a child process; ``stop()`` always reaps it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            self.port = self._read_port(10.0)
        except BaseException:
            self.stop()
            raise
        self.base_url = f"http://127.0.0.1:{self.port}"

    def _read_port(self, timeout: float) -> int:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError("http_echo_server.py printed no port in time")
            chunk = os.read(fd, 64)
            if not chunk:
                raise RuntimeError(f"http_echo_server.py exited early (rc={self.proc.wait()})")
            line += chunk
        kind, _, port = line.decode().strip().partition(" ")
        if kind != "PORT":
            raise RuntimeError(f"unexpected first line from the server: {line!r}")
        return int(port)

    def get(self, path: str) -> dict[str, Any]:
        """A control request on its own short connection (never counted as /mcp)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path, headers={"Connection": "close"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise HttpFailure(f"GET {path}: {resp.status} {body!r}")
            return orjson.loads(body)
        finally:
            conn.close()

    def stats(self) -> dict[str, Any]:
        return self.get("/stats")

    def stop(self) -> None:
        p = self.proc
        if p.stdin is not None:
            try:
                p.stdin.close()  # the server exits on stdin EOF
            except OSError:
                pass
        try:
            p.wait(timeout=3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()


# ------------------------------------------------------------------------ clients


OnEvent = Callable[[dict[str, Any]], None]


class Client(Protocol):
    name: str

    async def call(
        self, mode: str, body: bytes, on_event: OnEvent | None = None
    ) -> list[dict[str, Any]]:
        """POST ``body`` to ``/mcp/<mode>``; the JSON-RPC messages of the response, in order
        (one for ``application/json``, every event's data for ``text/event-stream``)."""
        ...

    async def close(self) -> None: ...


async def _read_sse(chunks: AsyncIterator[bytes], on_event: OnEvent | None) -> list[dict[str, Any]]:
    """Every event of one SSE response body (either client's chunk iterator), decoded."""
    dec = SseDecoder()
    msgs: list[dict[str, Any]] = []
    async for chunk in chunks:
        for ev in dec.feed(chunk):
            msg = orjson.loads(ev.data)
            msgs.append(msg)
            if on_event is not None:
                on_event(msg)
    _sse_end(dec)
    return msgs


def _sse_end(dec: SseDecoder) -> None:
    if dec.pending_bytes:
        raise HttpFailure(
            f"event stream cut off with {dec.pending_bytes} bytes of an event pending"
        )
    dec.finish()


class AiohttpClient:
    """One ``ClientSession`` with ``TCPConnector(limit=pool)``; everything else default."""

    name = "aiohttp"

    def __init__(self, base_url: str, pool: int = POOL) -> None:
        import aiohttp
        import yarl

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
        )
        self._urls = {m: yarl.URL(f"{base_url}/mcp/{m}") for m in MODES}

    async def call(
        self, mode: str, body: bytes, on_event: OnEvent | None = None
    ) -> list[dict[str, Any]]:
        async with self._session.post(self._urls[mode], data=body, headers=MCP_HEADERS) as resp:
            if resp.status != 200:
                raise HttpFailure(f"HTTP {resp.status}")
            ctype = resp.headers.get("Content-Type", "")
            if ctype.startswith("application/json"):
                return [orjson.loads(await resp.read())]
            if ctype.startswith("text/event-stream"):
                return await _read_sse(resp.content.iter_any(), on_event)
            raise HttpFailure(f"unexpected Content-Type {ctype!r}")

    async def close(self) -> None:
        await self._session.close()


class HttpxClient:
    """One ``AsyncClient`` with ``Limits(max_connections=pool, max_keepalive_connections=pool)``
    (the keep-alive default is 20, which would churn connections at 100 in flight) and
    ``trust_env=False`` (aiohttp's default: no proxy from the environment for 127.0.0.1).
    ``module`` is ``httpx`` (encode, 0.28) or ``httpx2`` (the pydantic fork, same API: the
    one the ``mcp`` SDK 2.x depends on)."""

    def __init__(self, base_url: str, pool: int = POOL, module: str = "httpx") -> None:
        mod = importlib.import_module(module)
        self.name = module
        self._client = mod.AsyncClient(
            limits=mod.Limits(max_connections=pool, max_keepalive_connections=pool),
            timeout=mod.Timeout(TIMEOUT_S),
            trust_env=False,
        )
        self._urls = {m: mod.URL(f"{base_url}/mcp/{m}") for m in MODES}

    async def call(
        self, mode: str, body: bytes, on_event: OnEvent | None = None
    ) -> list[dict[str, Any]]:
        async with self._client.stream(
            "POST", self._urls[mode], content=body, headers=MCP_HEADERS
        ) as resp:
            if resp.status_code != 200:
                raise HttpFailure(f"HTTP {resp.status_code}")
            ctype = resp.headers.get("Content-Type", "")
            if ctype.startswith("application/json"):
                return [orjson.loads(await resp.aread())]
            if ctype.startswith("text/event-stream"):
                return await _read_sse(resp.aiter_raw(), on_event)
            raise HttpFailure(f"unexpected Content-Type {ctype!r}")

    async def close(self) -> None:
        await self._client.aclose()


def available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def open_client(name: str, base_url: str, pool: int = POOL) -> Client:
    """Must be called with the event loop running (every client binds to it)."""
    if name == "aiohttp":
        return AiohttpClient(base_url, pool)
    return HttpxClient(base_url, pool, module=name)


def run_on_uvloop(coro: Coroutine[Any, Any, T]) -> T:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


# ------------------------------------------------------------------ load and checks


def request_body(rid: int | str) -> bytes:
    return orjson.dumps({
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"token": f"t{rid}"}},
    })


def verify(msgs: list[dict[str, Any]], rid: int | str, mode: str) -> None:
    if mode == "sse":
        if len(msgs) != 3:
            raise EchoMismatch(f"id {rid}: {len(msgs)} events, expected 3")
        for n, note in enumerate(msgs[:2], 1):
            p = note.get("params") or {}
            if (
                note.get("method") != "notifications/progress"
                or p.get("progressToken") != rid
                or p.get("progress") != n
            ):
                raise EchoMismatch(f"id {rid}: event {n} is {note!r}")
    elif len(msgs) != 1:
        raise EchoMismatch(f"id {rid}: {len(msgs)} messages, expected 1")
    final = msgs[-1]
    if final.get("id") != rid:
        raise EchoMismatch(f"sent id {rid!r}, got id {final.get('id')!r}")
    text = final["result"]["content"][0]["text"]
    expected = srv.large_text(rid) if mode == "large" else srv.small_text(rid)
    if text != expected:
        raise EchoMismatch(
            f"id {rid}: text of {len(text)} chars is not the expected {len(expected)}"
        )


@dataclass
class RoundResult:
    client: str
    case: str
    pool: int
    requests: int
    seconds: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    warmup: int
    connections: int  # TCP connections the client opened in this round (warm-up included)
    peak_open: int  # the most of its connections open at once, as the server counted them
    server_requests: int  # /mcp requests the server answered in this round (warm-up included)
    server_cpu_s: float  # server CPU in the timed phase


def _pct(sorted_vals: list[float], q: float) -> float:
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


async def _quiet(server: EchoServer, timeout: float = 3.0) -> dict[str, Any]:
    """Wait until the previous client's connections are gone, then start a peak count."""
    deadline = time.monotonic() + timeout
    while server.stats()["open_mcp"] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return server.get("/stats?reset-peak")


async def _round(
    name: str, case: Case, server: EchoServer, requests: int, pool: int, warmup: int | None
) -> RoundResult:
    before = await _quiet(server)
    client = open_client(name, server.base_url, pool)
    try:
        mode = case.mode

        async def one(rid: int) -> None:
            verify(await client.call(mode, request_body(rid)), rid, mode)

        # Warm-up, untimed: by default open as many connections as the timed phase will use.
        if warmup is None:
            warmup = min(case.inflight, pool)
        await asyncio.gather(*(one(-1 - i) for i in range(warmup)))
        gc.collect()

        ids = iter(range(1, requests + 1))  # shared by the workers: each takes the next id
        lat: list[float] = []
        perf = time.perf_counter

        async def worker() -> None:
            for rid in ids:
                t0 = perf()
                msgs = await client.call(mode, request_body(rid))
                lat.append(perf() - t0)
                verify(msgs, rid, mode)

        cpu0 = server.stats()["cpu_s"]
        t0 = perf()
        await asyncio.gather(*(worker() for _ in range(min(case.inflight, requests))))
        seconds = perf() - t0
        after = server.stats()
    finally:
        await client.close()
    if len(lat) != requests:
        raise EchoMismatch(f"{len(lat)} of {requests} requests completed")
    lat.sort()
    return RoundResult(
        client=name,
        case=case.name,
        pool=pool,
        requests=requests,
        seconds=seconds,
        requests_per_s=requests / seconds,
        p50_ms=_pct(lat, 0.50) * 1e3,
        p99_ms=_pct(lat, 0.99) * 1e3,
        warmup=warmup,
        connections=after["mcp_connections"] - before["mcp_connections"],
        peak_open=after["peak_open_mcp"],
        server_requests=after["requests"] - before["requests"],
        server_cpu_s=after["cpu_s"] - cpu0,
    )


def run_round(
    name: str,
    case: Case,
    server: EchoServer,
    requests: int,
    pool: int = POOL,
    warmup: int | None = None,
) -> RoundResult:
    return run_on_uvloop(_round(name, case, server, requests, pool, warmup))


def check_round(r: RoundResult, case: Case) -> None:
    """Correctness beyond the per-response checks: every request reached the server once,
    the pool limit held, and keep-alive worked (one connection when one is in flight)."""
    assert r.server_requests == r.requests + r.warmup, r
    assert 1 <= r.peak_open <= r.pool, r
    if case.inflight == 1:
        assert r.connections == 1, r


# ------------------------------------------------------------------ cancellation


@dataclass
class CancelResult:
    client: str
    phase: str  # "stream": cancelled mid event stream; "headers": before the response head
    requests: int  # n: held by the server at once (the client's whole pool), then all cancelled
    cancelled: int  # tasks that ended in CancelledError
    cancel_ms: float  # cancel() of all tasks until all had ended (client side)
    closed: int  # of those connections, how many the server saw closed within CLOSE_WAIT_S
    close_ms_max: float | None  # cancel() until the server saw the last one closed
    how: dict[str, int]  # how the server saw them closed: "eof" (FIN) or "reset" (RST)
    pool_ok: bool  # 2 n verified requests afterwards completed within POOL_WAIT_S
    pool_error: str | None
    new_connections: int  # opened for those 2 n requests: n when no cancelled connection was reused


CLOSE_WAIT_S = 3.0
POOL_WAIT_S = 10.0
CANCEL_N = 16  # the probe's pool size, and how many requests it holds and cancels


async def _slow_counts(
    server: EchoServer, prefix: str
) -> tuple[dict[str, int], list[float], dict[str, int]]:
    doc = server.get(f"/slow?prefix={prefix}")
    return doc["counts"], doc["closed_at"], doc["how"]


async def _cancel_probe(name: str, phase: str, server: EchoServer, n: int) -> CancelResult:
    prefix = f"cancel-{name}-{phase}-{os.getpid()}-{time.monotonic_ns()}-"
    mode = {"stream": "slow-sse", "headers": "slow-head"}[phase]
    # The pool is exactly n: if cancelling leaked a pool slot per request, none is left.
    client = open_client(name, server.base_url, pool=n)
    try:
        verify(await client.call("small", request_body(0)), 0, "small")  # a pooled connection first
        seen = 0
        all_streaming = asyncio.Event()

        def on_event(msg: dict[str, Any]) -> None:
            nonlocal seen
            seen += 1
            if seen == n:
                all_streaming.set()

        tasks = [
            asyncio.create_task(client.call(mode, request_body(f"{prefix}{i}"), on_event))
            for i in range(n)
        ]
        # Every request is held by the server (and, mid-stream, has its first event read).
        deadline = time.monotonic() + 10
        while True:
            counts, _, _ = await _slow_counts(server, prefix)
            held = counts.get("streaming" if phase == "stream" else "waiting", 0)
            if held == n and (phase != "stream" or all_streaming.is_set()):
                break
            if time.monotonic() > deadline or any(t.done() for t in tasks):
                raise HttpFailure(f"only {held} of {n} slow requests got going: {counts}")
            await asyncio.sleep(0.01)

        t_cancel = time.monotonic()
        for t in tasks:
            t.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        cancel_ms = (time.monotonic() - t_cancel) * 1e3
        cancelled = sum(isinstance(o, asyncio.CancelledError) for o in outcomes)

        # The server's view. The loop keeps running between polls: a transport close may
        # be scheduled with call_soon.
        deadline = t_cancel + CLOSE_WAIT_S
        while True:
            counts, closed_at, how = await _slow_counts(server, prefix)
            if counts.get("closed", 0) == n or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        closed = counts.get("closed", 0)
        close_ms_max = (max(closed_at) - t_cancel) * 1e3 if closed_at else None

        # The pool afterwards: a client that leaked a pool slot per cancelled request has
        # none left; one that put a half-read connection back reads garbage or hangs.
        pool_error = None
        mid = server.stats()
        try:
            async def one(rid: int) -> None:
                verify(await client.call("small", request_body(rid), None), rid, "small")

            await asyncio.wait_for(
                asyncio.gather(*(one(i) for i in range(1, 2 * n + 1))), POOL_WAIT_S
            )
        except (TimeoutError, Exception) as exc:  # noqa: BLE001 - reported, asserted by the test
            pool_error = f"{type(exc).__name__}: {exc}"
        after = server.stats()
    finally:
        await client.close()
    return CancelResult(
        client=name,
        phase=phase,
        requests=n,
        cancelled=cancelled,
        cancel_ms=cancel_ms,
        closed=closed,
        close_ms_max=close_ms_max,
        how=how,
        pool_ok=pool_error is None,
        pool_error=pool_error,
        new_connections=after["mcp_connections"] - mid["mcp_connections"],
    )


def cancel_probe(name: str, phase: str, server: EchoServer, n: int = CANCEL_N) -> CancelResult:
    return run_on_uvloop(_cancel_probe(name, phase, server, n))


# -------------------------------------------------------------------------- pytest


@pytest.fixture(scope="module")
def http_server():
    server = EchoServer()
    try:
        yield server
    finally:
        server.stop()
    assert server.proc.returncode is not None


def _client_param(name: str, *rest: Any, id: str) -> Any:
    marks = [] if available(name) else [pytest.mark.skip(reason=f"{name} is not installed")]
    return pytest.param(*rest, name, id=id, marks=marks)


@pytest.mark.parametrize(
    ("case", "client"), [_client_param(cl, c, id=f"{c.name}-{cl}") for c in CASES for cl in CLIENTS]
)
def test_http_client(benchmark: Any, http_server: EchoServer, case: Case, client: str) -> None:
    smoke = bool(benchmark.disabled)
    n = case.smoke_requests if smoke else case.requests
    results: list[RoundResult] = []

    pool = SMOKE_POOL if smoke else POOL

    def one_round() -> None:
        results.append(run_round(client, case, http_server, n, pool))

    benchmark.group = f"http-{case.name}"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1, warmup_rounds=0)

    assert results
    for r in results:
        check_round(r, case)
    benchmark.extra_info.update(
        http_client=client,
        case=case.name,
        mode=case.mode,
        inflight=case.inflight,
        pool=pool,
        requests=n,
        rounds=len(results),
        smoke=smoke,
        requests_per_s=statistics.median(r.requests_per_s for r in results),
        p50_ms=statistics.median(r.p50_ms for r in results),
        p99_ms=statistics.median(r.p99_ms for r in results),
        per_round=[asdict(r) for r in results],
    )


@pytest.mark.parametrize("phase", ["stream", "headers"])
@pytest.mark.parametrize("client", [_client_param(cl, id=cl) for cl in CLIENTS])
def test_cancel_closes_connection(http_server: EchoServer, client: str, phase: str) -> None:
    """Cancelling the task that awaits a response must close its connection (that is how
    an MCP client cancels a request over HTTP) and leave the pool usable."""
    r = cancel_probe(client, phase, http_server)
    assert r.cancelled == r.requests, r
    assert r.closed == r.requests, r
    assert r.pool_ok, r


# ---------------------------------------------------------------------- reporting


def _rate(v: float) -> str:
    return f"{v / 1000:.1f}k" if v >= 10_000 else f"{v:,.0f}"


def _ms(v: float) -> str:
    return (
        f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"
    )


def table(cells: dict[tuple[str, str], dict[str, Any]]) -> str:
    """cells[(case name, client)] = {"requests_per_s", "p50_ms", "p99_ms", ...}: one row per
    case, req/s per client, aiohttp over each other client, then p50 and p99 per client."""
    clients = [c for c in CLIENTS if any(k[1] == c for k in cells)]
    others = [c for c in clients if c != "aiohttp"] if "aiohttp" in clients else []
    head = ["case", *(f"{c} req/s" for c in clients), *(f"aiohttp/{c}" for c in others),
            f"p50 ms {' / '.join(clients)}", f"p99 ms {' / '.join(clients)}"]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for case in CASES:
        row = [cells.get((case.name, c)) for c in clients]
        if not any(row):
            continue
        a = cells.get((case.name, "aiohttp"))
        ratios = []
        for c in others:
            o = cells.get((case.name, c))
            ratios.append(f"{a['requests_per_s'] / o['requests_per_s']:.2f}x" if a and o else "–")
        out.append("| " + " | ".join([
            case.label,
            *(_rate(x["requests_per_s"]) if x else "–" for x in row),
            *ratios,
            " / ".join(_ms(x["p50_ms"]) if x else "–" for x in row),
            " / ".join(_ms(x["p99_ms"]) if x else "–" for x in row),
        ]) + " |")
    return "\n".join(out)


def cells_from_json(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    doc = json.loads(path.read_text())
    cells = {}
    for bench in doc.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if "http_client" in info and "requests_per_s" in info:
            cells[(info["case"], info["http_client"])] = info
    return cells


def _cmd_run(args: argparse.Namespace) -> None:
    cases = [CASE_BY_NAME[c] for c in args.cases] if args.cases else list(CASES)
    clients = [c for c in (args.clients or CLIENTS) if available(c)]
    server = EchoServer()
    rounds: dict[tuple[str, str], list[RoundResult]] = {}
    try:
        for i in range(args.rounds):
            for case in cases:
                # Interleaved, and the order rotates each round: noise hits every client alike.
                order = clients[i % len(clients):] + clients[: i % len(clients)]
                for name in order:
                    r = run_round(name, case, server, args.requests or case.requests, args.pool)
                    check_round(r, case)
                    rounds.setdefault((case.name, name), []).append(r)
                    print(
                        f"round {i + 1} {case.name:<11} {name:<8} {r.requests_per_s:9,.0f} req/s  "
                        f"p50 {r.p50_ms:8.3f} ms  opened {r.connections:3d}  "
                        f"peak {r.peak_open:3d}  "
                        f"server cpu {r.server_cpu_s:.2f} s / {r.seconds:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        server.stop()
    cells = {
        k: {
            "requests_per_s": statistics.median(r.requests_per_s for r in v),
            "p50_ms": statistics.median(r.p50_ms for r in v),
            "p99_ms": statistics.median(r.p99_ms for r in v),
        }
        for k, v in rounds.items()
    }
    print(table(cells))


def _cmd_cancel(args: argparse.Namespace) -> None:
    server = EchoServer()
    try:
        print(
            "| client | cancelled while | requests (= pool) | ended in CancelledError "
            "| server saw closed | closed by | cancel → last close seen "
            "| 2n requests afterwards | connections opened for them |"
        )
        print("|---|---|---:|---:|---:|---|---:|---|---:|")
        for name in CLIENTS:
            if not available(name):
                continue
            for phase in ("stream", "headers"):
                r = cancel_probe(name, phase, server, args.n)
                close = f"{r.close_ms_max:.1f} ms" if r.close_ms_max is not None else "–"
                print(
                    f"| {name} | {'SSE stream' if phase == 'stream' else 'awaiting headers'} "
                    f"| {r.requests} | {r.cancelled} | {r.closed} "
                    f"| {', '.join(f'{k} {v}' for k, v in sorted(r.how.items()))} "
                    f"| {close} | {'ok' if r.pool_ok else r.pool_error} "
                    f"| {r.new_connections} |",
                    flush=True,
                )
    finally:
        server.stop()


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _cmd_mem_child(args: argparse.Namespace) -> None:
    gc.collect()
    base = _rss_kib()
    t0 = time.perf_counter()
    importlib.import_module(args.client)
    import_s = time.perf_counter() - t0
    imported = _rss_kib()
    server = EchoServer()
    try:
        r = run_round(args.client, CASE_BY_NAME["c256-64k"], server, 2000)
    finally:
        server.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "import_ms": import_s * 1e3,
                "import_kib": imported - base,
                "peak_over_base_kib": peak - base,
                "requests_per_s": r.requests_per_s,
            }
        )
    )


def _cmd_mem(args: argparse.Namespace) -> None:
    print(
        "| client | import time | RSS added by the import | peak RSS over the pre-import baseline, "
        "2,000 × 64 KiB at 256 in flight |"
    )
    print("|---|---:|---:|---:|")
    for name in CLIENTS:
        if not available(name):
            continue
        out = subprocess.run(
            [sys.executable, __file__, "_mem", name], check=True, capture_output=True, text=True
        )
        d = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {name} | {d['import_ms']:.0f} ms | {d['import_kib'] / 1024:.1f} MiB "
              f"| {d['peak_over_base_kib'] / 1024:.1f} MiB |", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("run", help="interleaved rounds of every case, then the table")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument(
        "--requests", type=int, default=0, help="per round (default: the case's full count)"
    )
    p.add_argument("--pool", type=int, default=POOL)
    p.add_argument("--cases", nargs="*", choices=list(CASE_BY_NAME))
    p.add_argument("--clients", nargs="*", choices=list(CLIENTS))
    p = sub.add_parser("report", help="the table from a pytest --benchmark-json file")
    p.add_argument("json", type=Path)
    p = sub.add_parser(
        "cancel", help="hold n requests (the whole pool) per client and phase, cancel them"
    )
    p.add_argument("-n", type=int, default=CANCEL_N)
    sub.add_parser("mem", help="import cost and peak RSS, each client in a fresh interpreter")
    p = sub.add_parser("_mem")
    p.add_argument("client", choices=CLIENTS)
    args = ap.parse_args(argv)
    if args.cmd is None:
        args = ap.parse_args(["run"])
    if args.cmd == "run":
        _cmd_run(args)
    elif args.cmd == "report":
        print(table(cells_from_json(args.json)))
    elif args.cmd == "cancel":
        _cmd_cancel(args)
    elif args.cmd == "mem":
        _cmd_mem(args)
    elif args.cmd == "_mem":
        _cmd_mem_child(args)


if __name__ == "__main__":
    main()
