"""Fan-out benchmark harness: N echo servers x K calls in flight per server.

One scenario = ``servers`` copies of the C echo server (``echo_server/echo.c``),
``inflight`` calls kept in flight *per server* (so ``8 x 1024`` is 8,192 calls in
flight in total), ``calls`` calls in total, and a result size (``None``: the
small ~100 B CallToolResult; ``65536``: the text is padded to 64 KiB).

A client is an adapter class (see ``FanoutClient``) registered in ``ADAPTERS``:

* ``sdk``       the official ``mcp`` 2.3.x ``Client``, one per server (stdio).
* ``raw``       one process, uvloop + orjson, a dict of futures, one pipe write
                per server per loop tick: the practical ceiling for Python.
* ``null``      no server at all: each call returns its token at once; the harness's
                own cost per call.
* ``trunkline`` ``Host.call_tool``, the public API, and ``trunkline-supervisor``,
                the ``Supervisor`` layer below it: ``benches/fanout_trunkline.py``,
                when that file exists (see the slot below).

The load generator: ``inflight`` worker coroutines per server, each doing calls
back to back until that server's share of ``calls`` is used up. Latency is the
time from just before ``await client.call(...)`` to its return; throughput is
``calls / wall time`` of that phase. Spawning, the handshake, one verified
warm-up call per server and shutdown are outside the timed phase. Every echoed
text is verified against its (unique) token.

Command line (handy while developing an adapter):

    python benches/fanout.py list
    python benches/fanout.py run raw 8x1024-small [--calls N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

BENCHES = Path(__file__).resolve().parent
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
import proc_tree  # noqa: E402 - beside this file, found once the folder is on the path

REPO = BENCHES.parent
ECHO_SRC = BENCHES / "echo_server" / "echo.c"
RELAY_SRC = BENCHES / "echo_server" / "relay.c"
BUILD_DIR = Path(os.environ.get("TRUNKLINE_BENCH_BUILD", REPO / ".peers" / "bench"))
SDK_PYTHON = Path(
    os.environ.get("TRUNKLINE_BENCH_SDK_PYTHON", REPO / ".peers" / "py-modern" / "bin" / "python")
)
MODERN = "2026-07-28"
PAD = "."  # echo.c pads the token with this byte; tokens never contain it


# ---------------------------------------------------------------- echo server


def build_echo_server() -> Path:
    """Compile echo.c with ``cc -O2`` into BUILD_DIR, once per source content."""
    return build_c(ECHO_SRC)


def build_c(src_path: Path) -> Path:
    """Compile one of ``echo_server/``'s C programs with ``cc -O2`` into BUILD_DIR, once per
    source content."""
    src = src_path.read_bytes()
    digest = hashlib.sha256(src).hexdigest()[:16]
    stem = src_path.stem
    exe = BUILD_DIR / f"{stem}-{digest}"
    if exe.exists():
        return exe
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp = BUILD_DIR / f".{stem}-{digest}.{os.getpid()}"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-o", str(tmp), str(src_path)], check=True)
    os.replace(tmp, exe)  # atomic: concurrent builders race harmlessly
    for old in BUILD_DIR.glob(f"{stem}-*"):
        if old != exe:
            old.unlink(missing_ok=True)
    return exe


# ------------------------------------------------------------------ scenarios


@dataclass(frozen=True)
class Scenario:
    servers: int
    inflight: int  # per server
    size: int | None  # None: small result (token only); else pad the text to this many bytes
    calls: int  # total calls in one full round
    slow_calls: int | None = (
        None  # the cap for clients marked `slow` (the SDK); None: same as calls
    )

    @property
    def name(self) -> str:
        size = "small" if self.size is None else f"{self.size // 1024}k"
        return f"{self.servers}x{self.inflight}-{size}"

    @property
    def total_inflight(self) -> int:
        return self.servers * self.inflight

    def calls_for(self, slow: bool, smoke: bool = False) -> int:
        """Total calls in one round. Smoke: two calls per in-flight slot on one server
        (at least 2 per server, at most 64): every server, every path, and concurrency
        are still exercised and verified, in well under a second per case."""
        if smoke:
            return max(2 * self.servers, min(64, 2 * self.inflight))
        if slow and self.slow_calls is not None:
            return self.slow_calls
        return self.calls


# Full rounds: for fast clients (raw, trunkline) each round takes ~0.5-8 s and
# does at least 2 full windows of in-flight calls, so the timed phase is mostly
# steady state. The SDK (~1-2k calls/s here) is capped to keep the suite in a
# few minutes: 2 windows at 8x1024 and one window at 32x1024 (a burst: every
# call is submitted at the start, so its p50 is about half the drain time).
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(1, 1, None, 10_000, 2_000),
    Scenario(1, 256, None, 100_000, 5_000),
    Scenario(8, 1024, None, 200_000, 16_384),
    Scenario(32, 1024, None, 200_000, 32_768),
    Scenario(1, 1, 65536, 5_000, 1_000),
    Scenario(1, 256, 65536, 20_000, 5_000),
    Scenario(8, 1024, 65536, 24_576, 16_384),
    Scenario(32, 1024, 65536, 65_536, 32_768),
)
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


def parse_scenario(name: str, calls: int | None = None) -> Scenario:
    """A named scenario, or an ad-hoc one spelled the same way ("4x64-small", "2x8-16k")."""
    if name in SCENARIOS_BY_NAME:
        sc = SCENARIOS_BY_NAME[name]
        return sc if calls is None else Scenario(sc.servers, sc.inflight, sc.size, calls)
    shape, _, payload = name.partition("-")
    servers, _, inflight = shape.partition("x")
    size = None if payload == "small" else int(payload.rstrip("k")) * 1024
    n, k = int(servers), int(inflight)
    return Scenario(n, k, size, calls if calls is not None else max(20 * n * k, 10_000))


# ----------------------------------------------------------- adapter contract


@runtime_checkable
class FanoutClient(Protocol):
    """What the harness needs from a client under test.

    ``start`` and ``close`` are awaited from the same task (anyio-based clients
    need that); ``call`` is awaited concurrently from many tasks. ``call``
    sends ``tools/call`` ``echo`` with arguments ``{"token": token}`` (plus
    ``"size": size`` unless size is None) to server ``server_index`` (an index
    into ``server_argvs``) and returns the text of the result's first content
    block; it raises on an error response or ``isError: true``.
    """

    name: ClassVar[str]
    event_loop: ClassVar[str]  # "uvloop" or "asyncio": the loop the harness runs it on
    slow: ClassVar[bool]  # True: full rounds use Scenario.slow_calls (a cap) instead of calls

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None: ...
    async def call(self, server_index: int, token: str, size: int | None) -> str: ...
    async def close(self) -> None: ...


# ------------------------------------------------------- (a) the official SDK


class SdkClient:
    """The official ``mcp`` 2.3.x ``Client``: one per server over stdio, default settings
    (``mode="auto"``: it sends ``server/discover`` first; its first ``call_tool`` also
    does one ``tools/list`` to learn output schemas). Runs on the stock asyncio loop,
    as a typical SDK user would."""

    name: ClassVar[str] = "sdk"
    event_loop: ClassVar[str] = "asyncio"
    slow: ClassVar[bool] = True

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        from mcp import Client, StdioServerParameters

        self._stack = AsyncExitStack()
        self._clients: list[Any] = []
        # Entered one by one in this task: anyio cancel scopes must exit where they entered.
        for argv in server_argvs:
            params = StdioServerParameters(command=argv[0], args=list(argv[1:]))
            self._clients.append(await self._stack.enter_async_context(Client(params)))

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        args: dict[str, Any] = {"token": token} if size is None else {"token": token, "size": size}
        result = await self._clients[server_index].call_tool("echo", args)
        if result.is_error:
            raise RuntimeError(f"isError result: {result!r}")
        return result.content[0].text  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        await self._stack.aclose()


# ------------------------------------------- (b) raw single-process ceiling


class _RawServer(asyncio.SubprocessProtocol):
    """One echo server: id -> future table, newline splitting, per-tick write coalescing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, loads: Callable[[bytes], Any]) -> None:
        self.loop = loop
        self.loads = loads
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.next_id = 1
        self.queue: list[bytes] = []
        self.flush_scheduled = False
        self.parts: list[bytes] = []  # the unfinished last line, in pieces
        self.exited: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.SubprocessTransport | None = None
        self.stdin: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a subprocess transport
        self.stdin = self.transport.get_pipe_transport(0)  # type: ignore[union-attr]  # pipe 0: its stdin

    def send(self, line: bytes) -> None:
        self.queue.append(line)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        data = b"".join(self.queue)
        self.queue.clear()
        self.stdin.write(data)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        end = data.rfind(b"\n")
        if end < 0:
            self.parts.append(data)  # a line longer than this read: keep the pieces
            return
        if self.parts:
            self.parts.append(data)
            data = b"".join(self.parts)
            end = data.rfind(b"\n")
            self.parts = []
        if end + 1 < len(data):
            self.parts.append(data[end + 1 :])
        loads, pop = self.loads, self.pending.pop
        find = data.find
        nl = find(b"\n")
        if nl > 4096:
            # Long lines (64 KiB results): decode memoryview slices, copy nothing.
            mv = memoryview(data)
            start = 0
            while True:
                msg = loads(mv[start:nl])
                fut = pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                if nl >= end:
                    break
                start = nl + 1
                nl = find(b"\n", start)
            return
        for line in (data if end + 1 == len(data) else data[: end + 1]).split(b"\n"):
            if line:
                msg = loads(line)
                fut = pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)

    def _fail_all(self, why: str) -> None:
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(why))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._fail_all("echo server closed stdout")

    def process_exited(self) -> None:
        self._fail_all("echo server exited")
        if not self.exited.done():
            self.exited.set_result(None)


class RawClient:
    """Single process, uvloop + orjson, a dict of futures per server, writes coalesced
    per loop tick; every request is stamped with the 2026-07-28 ``_meta`` keys and
    ``server/discover`` goes first. Requests are built by splicing the id and the
    orjson-encoded arguments between precomputed bytes."""

    name: ClassVar[str] = "raw"
    event_loop: ClassVar[str] = "uvloop"
    slow: ClassVar[bool] = False

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        import orjson

        self._loads = orjson.loads
        self._dumps = orjson.dumps
        meta = orjson.dumps(
            {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {
                    "name": "trunkline-bench-raw",
                    "version": "0.1.0",
                },
            }
        )
        self._call_head = (
            b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","_meta":' + meta
        )
        self._call_args = b',"arguments":'
        self._call_id = b'},"id":'
        self._discover = (
            b'{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":'
            + meta
            + b"}}\n"
        )
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._servers: list[_RawServer] = []
        for argv in server_argvs:
            _, proto = await loop.subprocess_exec(
                lambda: _RawServer(loop, self._loads),
                *argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
            )
            self._servers.append(proto)
        await asyncio.gather(*(self._handshake(s) for s in self._servers))

    async def _handshake(self, srv: _RawServer) -> None:
        fut = self._loop.create_future()
        srv.pending[0] = fut
        srv.send(self._discover)
        msg = await asyncio.wait_for(fut, 10)
        if MODERN not in msg.get("result", {}).get("supportedVersions", ()):
            raise RuntimeError(f"echo server is not modern: {msg!r}")

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        srv = self._servers[server_index]
        rid = srv.next_id
        srv.next_id = rid + 1
        args = {"token": token} if size is None else {"token": token, "size": size}
        fut = self._loop.create_future()
        srv.pending[rid] = fut
        srv.send(
            b"".join(
                (self._call_head, self._call_args, self._dumps(args), self._call_id, b"%d}\n" % rid)
            )
        )
        msg = await fut
        result = msg.get("result")
        if result is None or result.get("isError"):
            raise RuntimeError(f"error answer: {msg!r}")
        return result["content"][0]["text"]  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        for srv in self._servers:
            if srv.stdin is not None:
                srv.stdin.close()  # EOF: echo exits
        waits = [s.exited for s in self._servers]
        if waits:
            await asyncio.wait(waits, timeout=5)
        for srv in self._servers:
            if srv.transport is not None:
                srv.transport.close()  # kills a straggler, reaps


class RawRelayClient(RawClient):
    """The raw client with ``relay.c`` between it and each server: a C process that
    copies bytes both ways and does nothing else. The cheapest process per server there
    is; what it costs against ``raw`` is the floor of the hop itself (two more pipe
    crossings and wake-ups per call), which any client with a process per server pays,
    trunkline's workers included."""

    name: ClassVar[str] = "raw-relay"

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        relay = str(build_c(RELAY_SRC))
        await super().start([[relay, *argv] for argv in server_argvs])


class NullClient:
    """No server, no I/O: every call answers at once what the echo server would (its
    token, padded to ``size``). What the harness
    itself spends per call (its coroutines, timing and checks), to read the other
    columns against."""

    name: ClassVar[str] = "null"
    event_loop: ClassVar[str] = "uvloop"
    slow: ClassVar[bool] = False

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        pass

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        return token if size is None else token + PAD * max(0, size - len(token))

    async def close(self) -> None:
        pass


# -------------------------------------------------------- adapter registry

ADAPTERS: dict[str, type[FanoutClient]] = {"sdk": SdkClient, "raw": RawClient,
                                           "raw-relay": RawRelayClient, "null": NullClient}

# ===== TRUNKLINE SLOT =====================================================
# trunkline's adapters live in benches/fanout_trunkline.py and are listed in its
# `ADAPTERS` (client name -> a FanoutClient class): "trunkline" (the public Host API),
# "trunkline-traced" (the same with OpenTelemetry on: every call sampled, spans
# batched, metrics recorded) and "trunkline-supervisor" (the layer below, a second
# figure). If the file exists, those columns exist and the module must import cleanly (a
# broken adapter fails loudly); if it is absent, they are simply absent. It is imported
# lazily, so an interpreter without trunkline (the SDK fallback) never touches it.
TRUNKLINE_ADAPTER = BENCHES / "fanout_trunkline.py"
TRUNKLINE_CLIENTS = ("trunkline", "trunkline-traced", "trunkline-supervisor")


def _load_trunkline(name: str) -> type[FanoutClient]:
    if str(BENCHES) not in sys.path:
        sys.path.insert(0, str(BENCHES))
    return importlib.import_module("fanout_trunkline").ADAPTERS[name]  # type: ignore[no-any-return]  # FanoutClient classes


# ==========================================================================


def client_names() -> list[str]:
    """Clients that have an adapter here (whether they can run is another matter: see sdk_mode)."""
    names = list(ADAPTERS)
    if TRUNKLINE_ADAPTER.exists():
        names[:0] = TRUNKLINE_CLIENTS
    return names


def get_adapter(name: str) -> type[FanoutClient]:
    if name in TRUNKLINE_CLIENTS and TRUNKLINE_ADAPTER.exists():
        return _load_trunkline(name)
    return ADAPTERS[name]


def sdk_mode() -> str | None:
    """How the SDK column can run here: "inproc" when `mcp` imports in this
    interpreter, "subprocess" when only the .peers/py-modern venv has it, else None."""
    if importlib.util.find_spec("mcp") is not None:
        return "inproc"
    if SDK_PYTHON.exists():
        return "subprocess"
    return None


# ------------------------------------------------------------------ running


@dataclass
class RunResult:
    client: str
    scenario: str
    calls: int
    seconds: float
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    #: CPU per call in the timed phase, µs: the harness's process (the client itself, and
    #: the harness's own share: see the null client), the client's other processes
    #: (trunkline's workers; none for the others), and the echo servers.
    parent_cpu_us: float = 0.0
    helpers_cpu_us: float = 0.0
    server_cpu_us: float = 0.0

    @property
    def client_cpu_us(self) -> float:
        """The client's CPU per call, all its processes."""
        return self.parent_cpu_us + self.helpers_cpu_us


class CpuReading:
    """CPU used by the harness's process tree from one point to another, by role: this
    process, the echo servers (told by the file they run), every other process below
    (the client's own helpers, such as trunkline's workers)."""

    def __init__(self, echo_exe: str) -> None:
        self._echo = os.path.realpath(echo_exe)
        self._pids = proc_tree.descendants(os.getpid())
        self._before = proc_tree.cpu_by_pid(self._pids)

    def per_call(self, calls: int) -> tuple[float, float, float]:
        """µs per call since the reading began: (this process, helpers, servers)."""
        used = {pid: cpu - self._before[pid]
                for pid, cpu in proc_tree.cpu_by_pid(self._pids).items()}
        me = os.getpid()
        servers = sum(cpu for pid, cpu in used.items()
                      if pid != me and proc_tree.executable(pid) == self._echo)
        helpers = sum(used.values()) - used[me] - servers
        return tuple(1e6 * cpu / calls for cpu in (used[me], helpers, servers))  # type: ignore[return-value]  # three values


class EchoMismatch(AssertionError):
    pass


def _checker(size: int | None) -> Callable[[str, str], None]:
    if size is None:

        def check(token: str, text: str) -> None:
            if text != token:
                raise EchoMismatch(f"sent {token!r}, got {text[:80]!r}")

        return check
    tails: dict[int, str] = {}

    def check_padded(token: str, text: str) -> None:
        n = len(token)
        tail = tails.get(n)
        if tail is None:
            tail = tails[n] = PAD * max(0, size - n)
        if len(text) != max(size, n) or not text.startswith(token) or not text.endswith(tail):
            raise EchoMismatch(
                f"sent {token!r} size {size}, got {len(text)} chars starting {text[:40]!r}"
            )

    return check_padded


def _quantile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


async def drive(client: FanoutClient, scenario: Scenario, calls: int) -> RunResult:
    """Start the client on fresh echo servers, run the timed phase, close."""
    exe = str(build_echo_server())
    argvs = [[exe] for _ in range(scenario.servers)]
    size = scenario.size
    check = _checker(size)
    await client.start(argvs)
    try:
        warm = [f"warm-s{i}" for i in range(scenario.servers)]
        for i, text in enumerate(
            await asyncio.gather(*(client.call(i, warm[i], size) for i in range(scenario.servers)))
        ):
            check(warm[i], text)

        share, extra = divmod(calls, scenario.servers)
        budget = [share + (1 if i < extra else 0) for i in range(scenario.servers)]
        latencies: list[float] = []
        lat = latencies.append
        call = client.call
        pc = time.perf_counter

        async def worker(i: int, w: int) -> None:
            n = 0
            prefix = f"s{i}-w{w}-n"
            while budget[i] > 0:
                budget[i] -= 1
                n += 1
                token = prefix + str(n)
                t0 = pc()
                text = await call(i, token, size)
                lat(pc() - t0)
                check(token, text)
                del text  # else each idle worker pins its last (64 KiB) result

        workers = [
            worker(i, w)
            for i in range(scenario.servers)
            for w in range(min(scenario.inflight, budget[i]))
        ]
        gc.collect()
        cpu = CpuReading(exe)
        t0 = pc()
        await asyncio.gather(*workers)
        seconds = pc() - t0
        parent_cpu, helpers_cpu, server_cpu = cpu.per_call(calls)
    finally:
        await client.close()
    if len(latencies) != calls:
        raise AssertionError(f"{len(latencies)} calls completed, {calls} expected")
    latencies.sort()
    return RunResult(
        client=client.name,
        scenario=scenario.name,
        calls=calls,
        seconds=seconds,
        calls_per_s=calls / seconds,
        p50_ms=_quantile(latencies, 0.50) * 1e3,
        p99_ms=_quantile(latencies, 0.99) * 1e3,
        mean_ms=statistics.fmean(latencies) * 1e3,
        parent_cpu_us=parent_cpu,
        helpers_cpu_us=helpers_cpu,
        server_cpu_us=server_cpu,
    )


def _run_on_loop(kind: str, coro: Coroutine[Any, Any, RunResult]) -> RunResult:
    if kind == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    with asyncio.Runner() as runner:
        return runner.run(coro)


def run_scenario(
    client_name: str, scenario: Scenario, calls: int | None = None, *, isolate: bool = True
) -> RunResult:
    """Run one round of `scenario` with a fresh client and fresh servers (blocking).

    `calls` defaults to the scenario's full-round count for that client. With
    `isolate` (the default, and what the suite uses) the round runs in a fresh
    interpreter (`fanout.py run ... --json`), so no client's leftovers (heap
    layout, imported frameworks, garbage, threads) can slow the next one down:
    measured here, the raw client ran 1x1-64k at a half to a third of its speed
    right after an in-process SDK round.
    """
    cls = get_adapter(client_name)
    if calls is None:
        calls = scenario.calls_for(getattr(cls, "slow", False))
    python = Path(sys.executable)
    if client_name == "sdk" and sdk_mode() == "subprocess":
        python, isolate = SDK_PYTHON, True
    if isolate:
        return _run_in_subprocess(python, client_name, scenario, calls)
    return _run_on_loop(cls.event_loop, drive(cls(), scenario, calls))


def fresh_round(argv: Sequence[str], what: str, timeout: float = 900) -> dict[str, Any]:
    """Run one round as ``argv``, a fresh interpreter that prints its result as the last
    line of its output, in JSON; that result. (The benchmarks' rounds run this way so that
    no earlier round's heap, threads or processes weigh on the next.)"""
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} round failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]  # the run's JSON line


def _run_in_subprocess(python: Path, client_name: str, scenario: Scenario, calls: int) -> RunResult:
    shape = scenario.name  # parse_scenario() turns it back into the same shape
    return RunResult(
        **fresh_round(
            [
                str(python),
                str(Path(__file__).resolve()),
                "run",
                client_name,
                shape,
                "--calls",
                str(calls),
                "--json",
            ],
            f"{client_name} {shape} under {python}",
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fanout.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list clients and scenarios")
    sub.add_parser("build", help="compile the echo server, print its path")
    run = sub.add_parser("run", help="run one round of one scenario")
    run.add_argument("client", choices=client_names())
    run.add_argument(
        "scenario", help="e.g. " + ", ".join(SCENARIOS_BY_NAME) + ", or any NxK-small / NxK-<n>k"
    )
    run.add_argument("--calls", type=int, default=None)
    run.add_argument("--json", action="store_true")
    ns = ap.parse_args(argv)
    if ns.cmd == "list":
        print("clients:", ", ".join(client_names()), f"(sdk: {sdk_mode()})")
        for s in SCENARIOS:
            print(
                f"  {s.name:16} {s.servers:>3} servers x {s.inflight:>5} in flight per server, "
                f"{s.calls} calls per round ({s.calls_for(True)} for slow clients)"
            )
        return 0
    if ns.cmd == "build":
        print(build_echo_server())
        return 0
    scenario = parse_scenario(ns.scenario)
    cls = get_adapter(ns.client)
    calls = scenario.calls_for(getattr(cls, "slow", False)) if ns.calls is None else ns.calls
    res = _run_on_loop(cls.event_loop, drive(cls(), scenario, calls))
    if ns.json:
        print(json.dumps(asdict(res)))
    else:
        print(
            f"{res.client:10} {res.scenario:16} {res.calls:>8} calls {res.seconds:8.3f} s "
            f"{res.calls_per_s:>10.0f} calls/s  p50 {res.p50_ms:.3f} ms  p99 {res.p99_ms:.3f} ms  "
            f"CPU per call {res.parent_cpu_us:.1f} + {res.helpers_cpu_us:.1f} µs "
            f"(server {res.server_cpu_us:.1f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
