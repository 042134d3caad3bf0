"""Shared by the gateway tests: a fleet config on disk, ``trunkline serve`` processes that
never outlive their test (``HttpGateway`` for ``--http``), SSE bodies read as messages, and
the 2026-07-28 request metadata."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import taplog

from mcp_schema import MODERN
from trunkline.params import StdioParams

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
SUB = "io.modelcontextprotocol/subscriptionId"


def modern_meta(**extra: Any) -> dict[str, Any]:
    return {PV: MODERN, CAPS: {}, **extra}


async def last_document(*argv: str, timeout: float = 120, **options: Any) -> dict[str, Any]:
    """Run ``argv`` (``options`` as for ``create_subprocess_exec``) to its end, within
    ``timeout`` seconds; the JSON document it printed last (a failure: its stderr's end)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, **options)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:  # a failed test: never leave it behind
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def fleet_config(tmp_path: Path, servers: dict[str, StdioParams],
                 allow_legacy: tuple[str, ...] = ()) -> Path:
    """An ``mcpServers`` file naming ``servers``; those in ``allow_legacy`` allowlisted
    for the legacy era."""
    path = tmp_path / "mcp.json"
    entries: dict[str, Any] = {name: {"command": params.command, "args": list(params.args),
                                      "env": dict(params.env)}
                               for name, params in servers.items()}
    for name in allow_legacy:
        entries[name]["allowLegacy"] = True
    path.write_text(json.dumps({"mcpServers": entries}))
    return path


def real_server(server: Any, *extra: str) -> StdioParams:
    """A ``realpeers.RealServer`` (installed by .ci/install-peers) as a fleet entry."""
    return StdioParams(server.argv[0], (*server.argv[1:], *extra), dict(server.env))


def alive_with(marker: str) -> list[int]:
    """Live processes whose command line carries ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


class Started:
    """The gateway processes a test started; ``reap`` kills any still running (a test
    that failed before closing its gateway must not leave it behind)."""

    def __init__(self) -> None:
        self._pids: list[int] = []

    def add(self, pid: int) -> None:
        self._pids.append(pid)

    def reap(self) -> None:
        while self._pids:
            pid = self._pids.pop()
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # ended and reaped: this pid may be someone else's by now
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


JSON_ONLY = "application/json"
BOTH = "application/json, text/event-stream"


class Requests:
    """JSON-RPC requests with ids counted from 1 (a test client's own)."""

    _next = 0

    def message(self, method: str, params: dict[str, Any] | None = None,
                request_id: Any = None) -> dict[str, Any]:
        if request_id is None:
            self._next += 1
            request_id = self._next
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return message


class HttpGateway(Requests):
    """A ``trunkline serve --http`` process and an HTTP client for it."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc = proc
        self.url = url
        self.base = url.rsplit("/", 1)[0]
        self.http = aiohttp.ClientSession()
        self.stderr = b""

    @classmethod
    async def start(cls, path: Path, gateways: Any, *flags: str, bind: str = "127.0.0.1:0",
                    env: dict[str, str] | None = None) -> HttpGateway:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trunkline", "serve", str(path), "--http", bind, *flags,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})})
        gateways.add(proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line.startswith(b"LISTENING "):
            await proc.wait()
            raise AssertionError(f"no LISTENING line: {line!r} {await proc.stderr.read()!r}")
        return cls(proc, line.split()[1].decode())


    @staticmethod
    def modern_headers(message: dict[str, Any], accept: str = BOTH) -> dict[str, str]:
        """The headers a 2026-07-28 client sends with ``message``."""
        params = message.get("params", {})
        headers = {"Accept": accept, "Content-Type": "application/json",
                   "MCP-Protocol-Version": params.get("_meta", {}).get(PV, MODERN),
                   "Mcp-Method": message["method"]}
        named_by = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
                    "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
        if message["method"] in named_by:
            headers["Mcp-Name"] = params[named_by[message["method"]]]
        return headers

    async def post(self, message: dict[str, Any] | bytes, headers: dict[str, str]
                   ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
        """One POST; its status, its answer (the JSON body, or an SSE body's last message;
        None when empty) and its headers."""
        body = message if isinstance(message, bytes) else orjson.dumps(message)
        async with self.http.post(self.url, data=body, headers=headers) as response:
            if response.content_type == "text/event-stream":
                *_, answer = [m async for m in sse_messages(response)]
                return response.status, answer, response.headers
            raw = await response.read()
            return response.status, orjson.loads(raw) if raw else None, response.headers

    async def legacy_session(self, capabilities: dict[str, Any] | None = None
                             ) -> tuple[dict[str, str], dict[str, Any]]:
        """A fresh 2025-11-25 session: the headers its requests carry (SSE accepted), and
        the answer to its ``initialize``."""
        headers = {"Accept": BOTH, "Content-Type": "application/json"}
        init = self.message("initialize", {"protocolVersion": "2025-11-25",
                                           "capabilities": capabilities or {},
                                           "clientInfo": {"name": "old", "version": "1"}})
        status, answer, got = await self.post(init, headers)
        assert status == 200 and "result" in answer, (status, answer)
        return {**headers, "Mcp-Session-Id": got["Mcp-Session-Id"],
                "MCP-Protocol-Version": "2025-11-25"}, answer

    async def modern(self, method: str, params: dict[str, Any] | None = None,
                     accept: str = JSON_ONLY) -> tuple[int, Any]:
        """A 2026-07-28 request with its headers right; its status and JSON answer."""
        message = self.message(method, {**(params or {}), "_meta": modern_meta()})
        status, answer, _ = await self.post(message, self.modern_headers(message, accept))
        if answer is not None and "id" in answer:
            assert answer["id"] == message["id"], answer
        return status, answer

    async def modern_on_new_connection(self, method: str, params: dict[str, Any]
                                       ) -> dict[str, Any]:
        """A 2026-07-28 request on a TCP connection of its own (with ``--processes N``,
        each connection is accepted by one copy, the kernel's choice); its JSON answer."""
        message = self.message(method, {**params, "_meta": modern_meta()})
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True)) as http:
            async with http.post(self.url, data=orjson.dumps(message),
                                 headers=self.modern_headers(message, BOTH)) as response:
                assert response.status == 200, await response.text()
                return await response.json()

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM (the operator stops it) and wait for it to drain and end."""
        await self.http.close()
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, self.stderr = await asyncio.wait_for(self.proc.communicate(), timeout)
        finally:
            if self.proc.returncode is None:  # a failed test: never leave it behind
                self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode


async def sse_messages(response: aiohttp.ClientResponse,
                       ids: list[str] | None = None) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, as they arrive (an event with empty data, a
    priming event, carries none); each event's id, when it has one, appended to ``ids``."""
    data: list[bytes] = []
    event_id: str | None = None
    async for line in response.content:
        line = line.rstrip(b"\r\n")
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip())
        elif line.startswith(b"id:"):
            event_id = line[3:].strip().decode()
        elif not line:
            if event_id is not None and ids is not None:
                ids.append(event_id)
            if b"".join(data):
                yield orjson.loads(b"\n".join(data))
            data, event_id = [], None


class StdioGateway(Requests):
    """A ``trunkline serve --stdio`` process and the messages it wrote."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.notes: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, path: Path, gateways: Any, *flags: str) -> StdioGateway:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trunkline", "serve", str(path), "--stdio", *flags,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        gateways.add(proc.pid)
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.raw.append(line)
            message = orjson.loads(line)
            if "method" in message:
                self.notes.append(message)
            else:
                await self.messages.put(message)

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else orjson.dumps(message) + b"\n"
        self.proc.stdin.write(data)

    def request(self, method: str, params: dict[str, Any] | None = None,
                request_id: Any = None) -> Any:
        message = self.message(method, params, request_id)
        self.send(message)
        return message["id"]

    async def answer(self, timeout: float = 30) -> dict[str, Any]:
        return await asyncio.wait_for(self.messages.get(), timeout)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = self.request(method, params)
        reply = await self.answer()
        assert reply["id"] == request_id, reply
        return reply

    async def close(self) -> int:
        """Close its stdin (the client leaves) and wait for it to end."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = await asyncio.wait_for(self.proc.wait(), 30)
        finally:
            if self.proc.returncode is None:  # a failed test: never leave it behind
                self.proc.kill()
                await self.proc.wait()
            await self._reader
        return code


async def wait_for_tap(tap: Path, predicate: Any, seconds: float = 20) -> list[dict[str, Any]]:
    """The messages an upstream's wire tap recorded as sent to it that match ``predicate``,
    once there is one."""
    for _ in range(int(seconds / 0.05)):
        found = [m for m in taplog.messages(tap) if predicate(m)]
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("the upstream never saw it")
