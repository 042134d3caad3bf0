"""Attacks on ``trunkline serve --http``, each beside a legitimate client: what the
legitimate client's calls cost while it runs (answered, failed, p50, p99) and what the
gateway's process tree holds (RSS before, at its peak, and after), against the same run
with no attack. ``bench_hostile.py`` runs them; the findings are issue 36's.

The fleet (one gateway per attack, so no attack inherits another's memory):

* ``legit``  ``tests/peers/scripted.py``: the legitimate client's ``echo``;
* ``target`` ``tests/peers/scripted.py`` (``sleep``, ``big``), the attacks' own server, or
  for ``churn`` ``tests/peers/hostile.py --churn 50:500``;
* ``ev``     server-everything (2025-11-25, allowlisted): resources matched by a template,
  which subscribe.

The attacks (at a scale two cores run in seconds; each as the issue measured it):

* ``none``            the baseline.
* ``listen-flood``    modern listen requests, each naming ``listen_uris`` (1024) of ev's
                      resources, opened and dropped in a loop by 4 clients.
* ``subscribe-flood`` legacy sessions subscribing one URI at a time up to their budget
                      (``session_subscriptions``), a new session when one is full.
* ``kept-streams``    legacy calls asking for 4 MiB results over SSE and hanging up at once,
                      8 at a time.
* ``slowloris``       300 connections, each dripping its request's head a byte at a time.
* ``slot-hog``        one legacy session firing 60 s calls at one server, hanging up on each.
* ``progress-flood``  modern calls streaming 20,000 padded progress notifications each, to
                      clients that never read.
* ``churn``           a server announcing a tools change every 50 ms, 500 new names each.

Command line, for one attack against a gateway it starts itself:

    .venv/bin/python benches/hostile_load.py listen-flood --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

BENCHES = Path(__file__).resolve().parent
REPO = BENCHES.parent
PEERS = REPO / "tests" / "peers"
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
from proc_tree import descendants, rss_bytes  # noqa: E402 - on sys.path above

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
BOTH = "application/json, text/event-stream"
JSON_ONLY = "application/json"
EVERYTHING = REPO / ".peers" / "npm" / "node_modules" / "@modelcontextprotocol" / \
    "server-everything" / "dist" / "index.js"
TEXT_URI = "demo://resource/dynamic/text/{}"
ATTACKS = ("none", "listen-flood", "subscribe-flood", "kept-streams", "slowloris",
           "slot-hog", "progress-flood", "churn")


@dataclass
class Outcome:
    """One attack's run: the legitimate client's calls and the gateway's memory."""

    attack: str
    seconds: float
    answered: int = 0
    failed: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    rss_before_mib: float = 0.0
    rss_peak_mib: float = 0.0
    rss_after_mib: float = 0.0
    #: What the attack itself did (requests sent, refusals it met), for the report.
    attacker: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- the gateway ------------------------------------------------------------------------


class Gateway:
    """``trunkline serve CONFIG --http 127.0.0.1:0`` with the fleet above."""

    def __init__(self, attack: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="trunkline-hostile-")
        target = ([sys.executable, str(PEERS / "hostile.py"), "--churn", "50:500"]
                  if attack == "churn" else [sys.executable, str(PEERS / "scripted.py")])
        servers = {
            "legit": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]},
            "target": {"command": target[0], "args": target[1:]},
            "ev": {"command": "node", "args": [str(EVERYTHING), "stdio"], "allowLegacy": True},
        }
        config = Path(self._dir.name) / "mcp.json"
        config.write_text(json.dumps({"mcpServers": servers}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trunkline", "serve", str(config), "--http", "127.0.0.1:0",
             "--drain-timeout", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self._dir.name)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("LISTENING "):
            self.stop()
            raise RuntimeError(f"the gateway did not start: {line!r}")
        self.url = line.split()[1]
        self.host, self.port = self.url.split("/")[2].split(":")

    def rss_mib(self) -> float:
        return sum(rss_bytes(pid) for pid in descendants(self.proc.pid)) / (1 << 20)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._dir.cleanup()


def modern_call(name: str, arguments: dict[str, Any], rid: Any, **meta: Any
                ) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments,
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}, **meta}}}


def modern_headers(message: dict[str, Any], accept: str = JSON_ONLY) -> dict[str, str]:
    headers = {"Accept": accept, "Content-Type": "application/json",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": message["method"]}
    if message["method"] == "tools/call":
        headers["Mcp-Name"] = message["params"]["name"]
    return headers


async def legacy_session(http: aiohttp.ClientSession, url: str) -> dict[str, str] | None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {},
                       "clientInfo": {"name": "hostile", "version": "1"}}}
    headers = {"Accept": BOTH, "Content-Type": "application/json"}
    async with http.post(url, data=orjson.dumps(init), headers=headers) as response:
        if response.status != 200:
            return None
        await response.read()
        session = response.headers["Mcp-Session-Id"]
    return {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}


# --- the legitimate client ------------------------------------------------------------


async def legitimate(url: str, until: float, out: Outcome) -> None:
    """Sequential ``echo`` calls on one connection until ``until``."""
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        n = 0
        while time.monotonic() < until:
            n += 1
            message = modern_call("echo", {"n": n}, n)
            started = time.perf_counter()
            try:
                async with http.post(url, data=orjson.dumps(message),
                                     headers=modern_headers(message),
                                     timeout=aiohttp.ClientTimeout(total=30)) as response:
                    body = await response.read()
                ok = response.status == 200 and b'"result"' in body
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if ok:
                latencies.append((time.perf_counter() - started) * 1000)
            else:
                out.failed += 1
                await asyncio.sleep(0.05)
    out.answered = len(latencies)
    if latencies:
        latencies.sort()
        out.p50_ms = statistics.median(latencies)
        out.p99_ms = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


# --- the attacks -------------------------------------------------------------------------


Attack = Callable[[Gateway, float, dict[str, int]], Awaitable[None]]


def _count(tally: dict[str, int], key: str, n: int = 1) -> None:
    tally[key] = tally.get(key, 0) + n


async def none(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    await asyncio.sleep(max(0.0, until - time.monotonic()))


async def listen_flood(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    async def one(client: int) -> None:
        async with aiohttp.ClientSession() as http:
            round_ = 0
            while time.monotonic() < until:
                round_ += 1
                uris = [TEXT_URI.format(f"{client}-{round_}-{i}") for i in range(1024)]
                message = {"jsonrpc": "2.0", "id": round_, "method": "subscriptions/listen",
                           "params": {"notifications": {"resourceSubscriptions": uris},
                                      "_meta": {"io.modelcontextprotocol/protocolVersion":
                                                MODERN,
                                                "io.modelcontextprotocol/clientCapabilities":
                                                {}}}}
                try:
                    async with http.post(gw.url, data=orjson.dumps(message),
                                         headers=modern_headers(message, BOTH),
                                         timeout=aiohttp.ClientTimeout(total=10)) as r:
                        _count(tally, f"listen {r.status}")
                        await asyncio.wait_for(r.content.readuntil(b"\n\n"), 5)
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    _count(tally, "listen failed")
    await asyncio.gather(*(one(c) for c in range(4)))


async def subscribe_flood(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    async with aiohttp.ClientSession() as http:
        session = await legacy_session(http, gw.url)
        i = 0
        while time.monotonic() < until and session is not None:
            i += 1
            message = {"jsonrpc": "2.0", "id": i, "method": "resources/subscribe",
                       "params": {"uri": TEXT_URI.format(i)}}
            try:
                async with http.post(gw.url, data=orjson.dumps(message), headers=session,
                                     timeout=aiohttp.ClientTimeout(total=30)) as r:
                    body = await r.read()
            except (aiohttp.ClientError, TimeoutError):
                _count(tally, "subscribe failed")
                continue
            if b'"error"' in body:  # its budget is full: another session
                _count(tally, "refused")
                session = await legacy_session(http, gw.url)
            else:
                _count(tally, "subscribed")


async def kept_streams(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    async def one(worker: int) -> None:
        async with aiohttp.ClientSession() as http:
            session = await legacy_session(http, gw.url)
            n = 0
            while time.monotonic() < until and session is not None:
                n += 1
                message = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                           "params": {"name": "target/big", "arguments": {"bytes": 4 << 20}}}
                try:
                    async with http.post(gw.url, data=orjson.dumps(message), headers=session,
                                         timeout=aiohttp.ClientTimeout(total=30)) as r:
                        _count(tally, f"call {r.status}")
                        r.close()  # hang up at once
                except (aiohttp.ClientError, TimeoutError):
                    _count(tally, "call failed")
                await asyncio.sleep(0.05)
    await asyncio.gather(*(one(w) for w in range(8)))


async def slowloris(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    head = (f"POST /mcp HTTP/1.1\r\nHost: {gw.host}:{gw.port}\r\n"
            "Content-Type: application/json\r\n" + "X-Pad: " + "x" * 200 + "\r\n").encode()

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection(gw.host, int(gw.port))
        except OSError:
            _count(tally, "connect refused")
            return
        _count(tally, "connected")
        try:
            for byte in head:
                if time.monotonic() >= until or reader.at_eof():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(2.0)
        except OSError:
            _count(tally, "cut off")
        finally:
            writer.close()
    await asyncio.gather(*(one() for _ in range(300)))


async def slot_hog(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    async with aiohttp.ClientSession() as http:
        session = await legacy_session(http, gw.url)
        n = 0
        while time.monotonic() < until and session is not None:
            n += 1
            message = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                       "params": {"name": "target/sleep", "arguments": {"seconds": 60}}}
            try:
                async with http.post(gw.url, data=orjson.dumps(message), headers=session,
                                     timeout=aiohttp.ClientTimeout(total=10)) as r:
                    _count(tally, f"call {r.status}")
                    r.close()
            except (aiohttp.ClientError, TimeoutError):
                _count(tally, "call failed")
            if n % 50 == 0:
                await asyncio.sleep(0)


async def progress_flood(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    async def one(client: int) -> None:
        reader, writer = await asyncio.open_connection(gw.host, int(gw.port))
        message = modern_call("target/sleep", {"seconds": 0.01, "progress": 20000, "pad": 512},
                              client, progressToken=f"p{client}")
        body = orjson.dumps(message)
        headers = modern_headers(message, BOTH)
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"POST /mcp HTTP/1.1\r\nHost: {gw.host}:{gw.port}\r\n{head}"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        _count(tally, "calls")
        try:
            # Never read: the gateway holds what it cannot write, or lets go.
            while time.monotonic() < until and not reader.at_eof():
                await asyncio.sleep(0.2)
        finally:
            writer.close()
    await asyncio.gather(*(one(c) for c in range(4)))


async def churn(gw: Gateway, until: float, tally: dict[str, int]) -> None:
    await asyncio.sleep(max(0.0, until - time.monotonic()))  # the server is the attacker


ATTACK_OF: dict[str, Attack] = {
    "none": none, "listen-flood": listen_flood, "subscribe-flood": subscribe_flood,
    "kept-streams": kept_streams, "slowloris": slowloris, "slot-hog": slot_hog,
    "progress-flood": progress_flood, "churn": churn,
}


async def _run(attack: str, gw: Gateway, seconds: float) -> Outcome:
    out = Outcome(attack, seconds)
    await asyncio.sleep(0.5)  # the fleet settles
    out.rss_before_mib = out.rss_peak_mib = gw.rss_mib()
    until = time.monotonic() + seconds

    async def sample() -> None:
        while time.monotonic() < until:
            out.rss_peak_mib = max(out.rss_peak_mib, gw.rss_mib())
            await asyncio.sleep(0.25)
    tally: dict[str, int] = {}
    await asyncio.gather(legitimate(gw.url, until, out), ATTACK_OF[attack](gw, until, tally),
                         sample())
    await asyncio.sleep(min(3.0, seconds))  # what the attack left behind
    out.rss_after_mib = gw.rss_mib()
    out.attacker = tally
    return out


def run_attack(attack: str, seconds: float) -> Outcome:
    """One attack against a fresh gateway, beside the legitimate client."""
    gw = Gateway(attack)
    try:
        return asyncio.run(_run(attack, gw, seconds))
    finally:
        gw.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("attack", choices=ATTACKS)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    print(json.dumps(run_attack(args.attack, args.seconds).as_dict(), indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
