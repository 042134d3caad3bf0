"""HTTP fan-out harness: ``tools/call`` over Streamable HTTP (2026-07-28), K calls in flight.

One server, ``http_echo_server.py``'s ``POST /mcp/echo`` route (a minimal 2026-07-28 MCP
server answering JSON), and three clients measured the same way:

* ``trunkline``  ``trunkline.Host`` with one server entry, ``trunkline.http(url)``: the
                 parent process, its worker process for that server, aiohttp in the worker.
* ``sdk``        the official ``mcp`` 2.3.x ``Client(url, mode="auto")`` (httpx2), always
                 run under ``.peers/py-modern/bin/python`` (``$TRUNKLINE_BENCH_SDK_PYTHON``)
                 in a subprocess, on the stock asyncio loop, defaults untouched.
* ``raw``        one aiohttp ``ClientSession`` on uvloop, orjson, correctly headed
                 2026-07-28 POSTs: the floor of what an HTTP client in Python costs.

The load generator, warm-up, echo verification and latency bookkeeping are
``fanout.drive``'s, unchanged, so this bench measures exactly as ``bench_fanout.py`` does
(one server: ``servers = 1``). ``drive`` hands ``start`` the stdio echo server's argv;
these adapters take their URL at construction and ignore it. The tool is
``echo {text}``: every call sends a unique text, the token padded with ``.`` to the
case's size (100 B or 64 KiB), and the server sends it back.

Command line (the parent, ``bench_http_fanout.py``, starts the server and passes --url):

    python benches/http_fanout.py list
    python benches/http_fanout.py run trunkline c64-small --url http://127.0.0.1:P/mcp/echo \\
        [--calls N] [--json]

This module imports only the standard library and ``fanout`` at the top: the SDK's
interpreter, which has neither trunkline nor aiohttp nor orjson, runs it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import fanout

BENCHES = Path(__file__).resolve().parent
SDK_PYTHON = fanout.SDK_PYTHON
MODERN = fanout.MODERN
PAD = fanout.PAD
ROUND_TIMEOUT_S = 600.0
CALL_TIMEOUT_S = 120.0
POOL = 100  # connections: aiohttp's default limit, trunkline.http()'s default, httpx2's max


def echo_text(token: str, size: int) -> str:
    """What every client sends as ``text``: the token padded to ``size`` (fanout's check)."""
    return token.ljust(size, PAD)


# ------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    inflight: int
    size: int  # characters of text sent and echoed back
    calls: int  # per round, fast clients (trunkline, raw)
    slow_calls: int  # per round, the SDK (capped)

    @property
    def name(self) -> str:
        return f"c{self.inflight}-{'small' if self.size < 1024 else f'{self.size // 1024}k'}"

    @property
    def label(self) -> str:
        return f"{self.inflight:,} | {'100 B' if self.size < 1024 else f'{self.size // 1024} KiB'}"

    def scenario(self, calls: int) -> fanout.Scenario:
        return fanout.Scenario(1, self.inflight, self.size, calls)

    def calls_for(self, slow: bool, smoke: bool = False) -> int:
        if smoke:  # fanout's rule: 2 per in-flight slot, at least 2, at most 64
            return self.scenario(self.calls).calls_for(slow, smoke=True)
        return self.slow_calls if slow else self.calls


SMALL, LARGE = 100, 65536
CASES: tuple[Case, ...] = (
    Case(1, SMALL, 3_000, 1_000),
    Case(64, SMALL, 10_000, 2_000),
    Case(256, SMALL, 10_000, 2_000),
    Case(1, LARGE, 2_000, 500),
    Case(64, LARGE, 4_000, 1_000),
    Case(256, LARGE, 4_000, 1_000),
)
CASE_BY_NAME = {c.name: c for c in CASES}


# --------------------------------------------------------------------- clients


class _HttpAdapter:
    """``fanout.FanoutClient`` for one endpoint URL: ``call`` sends ``echo`` the token
    padded to the case's size and returns the echoed text (``_echo``, which raises on an
    error or ``isError``)."""

    name: ClassVar[str]
    event_loop: ClassVar[str] = "uvloop"
    slow: ClassVar[bool] = False

    def __init__(self, url: str) -> None:
        self.url = url

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        return await self._echo(echo_text(token, size or 0))

    async def _echo(self, text: str) -> str:
        raise NotImplementedError


class TrunklineHttpClient(_HttpAdapter):
    """The public API: ``Host``, ``add_server(name, trunkline.http(url))``, ``call_tool``."""

    name: ClassVar[str] = "trunkline"

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        import trunkline
        from trunkline.protocol import NegotiationConfig
        from trunkline.settings import HostSettings

        settings = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=30.0))
        self._host = trunkline.Host(settings=settings,
                                    calls=trunkline.CallOptions(call_timeout_s=CALL_TIMEOUT_S))
        try:
            status = await self._host.add_server(
                "echo-http", trunkline.http(self.url, max_connections=POOL)
            )
            if status.era != "modern":
                raise RuntimeError(f"the echo endpoint is not ready and modern: {status}")
            self._tool = next(t.name for t in self._host.tools() if t.server == "echo-http")
        except BaseException:
            await self._host.aclose()
            raise

    async def _echo(self, text: str) -> str:
        result = await self._host.call_tool(self._tool, {"text": text})
        if result.is_error:
            raise RuntimeError(f"isError result: {result!r}")
        return result.content[0]["text"]  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        await self._host.aclose()


class SdkHttpClient(_HttpAdapter):
    """``mcp.Client(url, mode="auto")``: ``server/discover`` goes over the wire (the SDK
    validates the DiscoverResult), its first ``call_tool`` also lists the tools (during
    the warm-up). httpx2 defaults: 100 connections, 20 kept alive."""

    name: ClassVar[str] = "sdk"
    event_loop: ClassVar[str] = "asyncio"
    slow: ClassVar[bool] = True

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        from mcp import Client

        self._stack = AsyncExitStack()
        try:
            self._client = await self._stack.enter_async_context(Client(self.url, mode="auto"))
            if self._client.protocol_version != MODERN:
                raise RuntimeError(
                    f"the SDK negotiated {self._client.protocol_version!r}, not {MODERN}"
                )
        except BaseException:
            await self._stack.aclose()
            raise

    async def _echo(self, text: str) -> str:
        result = await self._client.call_tool("echo", {"text": text})
        if result.is_error:
            raise RuntimeError(f"isError result: {result!r}")
        return result.content[0].text  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        await self._stack.aclose()


class RawAiohttpClient(_HttpAdapter):
    """One ``ClientSession`` (``TCPConnector(limit=POOL)``), uvloop, orjson. Each call is
    one POST with the five headers a 2026-07-28 ``tools/call`` needs and a body spliced
    from precomputed bytes (the three ``_meta`` keys) around the orjson-encoded arguments;
    the answer must be ``application/json`` with the request's id. ``server/discover``
    goes first."""

    name: ClassVar[str] = "raw"

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        import aiohttp
        import orjson
        import yarl

        self._loads, self._dumps = orjson.loads, orjson.dumps
        self._url = yarl.URL(self.url)
        meta = orjson.dumps(
            {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {
                    "name": "trunkline-bench-raw-aiohttp",
                    "version": "0.1.0",
                },
            }
        )
        self._call_head = (
            b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","_meta":' + meta
        )
        self._call_args = b',"arguments":'
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": MODERN}
        self._call_headers = {**base, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
        self._next_id = 1
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL),
            timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S))
        try:
            discover = (
                b'{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":%s}}' % meta
            )
            msg = await self._post(discover, {**base, "Mcp-Method": "server/discover"}, 0)
            if MODERN not in msg.get("result", {}).get("supportedVersions", ()):
                raise RuntimeError(f"the echo endpoint is not modern: {msg!r}")
        except BaseException:
            await self._session.close()
            raise

    async def _post(self, body: bytes, headers: dict[str, str], rid: int) -> dict[str, Any]:
        async with self._session.post(self._url, data=body, headers=headers) as resp:
            if resp.status != 200 or resp.content_type != "application/json":
                raise RuntimeError(f"HTTP {resp.status} {resp.content_type}")
            msg = self._loads(await resp.read())
        if msg.get("id") != rid:
            raise RuntimeError(f"answer to id {msg.get('id')!r}, expected {rid}")
        return msg  # type: ignore[no-any-return]  # a JSON object

    async def _echo(self, text: str) -> str:
        rid = self._next_id
        self._next_id = rid + 1
        args = self._dumps({"text": text})
        body = b"".join((self._call_head, self._call_args, args, b'},"id":%d}' % rid))
        msg = await self._post(body, self._call_headers, rid)
        result = msg.get("result")
        if result is None or result.get("isError"):
            raise RuntimeError(f"error answer: {msg!r}")
        return result["content"][0]["text"]  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        await self._session.close()


ADAPTERS: dict[str, type[_HttpAdapter]] = {
    c.name: c for c in (TrunklineHttpClient, SdkHttpClient, RawAiohttpClient)
}
CLIENTS = tuple(ADAPTERS)


# ---------------------------------------------------------------------- running


def run_here(client: str, case: Case, url: str, calls: int) -> fanout.RunResult:
    """One round in this interpreter: a fresh client, fanout.drive's timed phase."""
    cls = ADAPTERS[client]
    res = fanout._run_on_loop(cls.event_loop, fanout.drive(cls(url), case.scenario(calls), calls))
    return dataclasses.replace(res, scenario=case.name)


def _child_env() -> dict[str, str]:
    # 127.0.0.1 only: no client may be sent through a proxy from the environment.
    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}


def run_round(
    client: str, case: Case, url: str, calls: int, *, isolate: bool = True
) -> fanout.RunResult:
    """One round against the server at ``url``. The SDK always runs in a subprocess under
    its own venv; the others in a fresh interpreter with ``isolate`` (full rounds), else
    in this one (smoke). A subprocess runs in its own session and is killed with its
    whole process group (a trunkline worker included) on a timeout or any failure."""
    python = SDK_PYTHON if client == "sdk" else Path(sys.executable)
    if client != "sdk" and not isolate:
        return run_here(client, case, url, calls)
    if not python.exists():
        raise RuntimeError(f"{python} does not exist (the SDK venv: .ci/install-peers makes it)")
    argv = [str(python), str(Path(__file__).resolve()), "run", client, case.name,
            "--url", url, "--calls", str(calls), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_child_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=ROUND_TIMEOUT_S)
    finally:
        stragglers = _kill_group(proc.pid)  # the round's own process group
        if proc.returncode is None:
            proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(
            f"{client} {case.name} round under {python} failed (rc {proc.returncode}):\n"
            f"{err[-4000:]}"
        )
    if stragglers:
        raise RuntimeError(
            f"{client} {case.name}: processes of the round outlived it (killed): {err[-2000:]}"
        )
    return fanout.RunResult(**json.loads(out.strip().splitlines()[-1]))


def _kill_group(pgid: int) -> bool:
    """SIGKILL whatever is left in a process group; True if anything was."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="http_fanout.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list clients and cases")
    run = sub.add_parser("run", help="run one round of one case in this interpreter")
    run.add_argument("client", choices=CLIENTS)
    run.add_argument("case", choices=list(CASE_BY_NAME))
    run.add_argument("--url", required=True, help="the server's /mcp/echo endpoint")
    run.add_argument("--calls", type=int, default=None)
    run.add_argument("--json", action="store_true")
    ns = ap.parse_args(argv)
    if ns.cmd == "list":
        print("clients:", ", ".join(CLIENTS), f"(sdk under {SDK_PYTHON})")
        for c in CASES:
            print(f"  {c.name:11} {c.inflight:>4} in flight, text {c.size:>6} B, "
                  f"{c.calls} calls per round ({c.slow_calls} for the SDK)")
        return 0
    case = CASE_BY_NAME[ns.case]
    calls = case.calls_for(ADAPTERS[ns.client].slow) if ns.calls is None else ns.calls
    res = run_here(ns.client, case, ns.url, calls)
    if ns.json:
        print(json.dumps(dataclasses.asdict(res)))
    else:
        print(f"{res.client:10} {res.scenario:11} {res.calls:>7} calls {res.seconds:7.3f} s "
              f"{res.calls_per_s:>8.0f} calls/s  p50 {res.p50_ms:.3f} ms  p99 {res.p99_ms:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
