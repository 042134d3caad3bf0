"""``trunkline serve --http`` in front of a per-user stdio server (``"instances":
"per_user"``, ``"maxInstances": 2``), its callers three named API keys: each key's calls go
to a process of its own; with both places held by calls in flight a third key's call is
an overload (a 2026-07-28 POST: 429 with ``Retry-After``; a legacy session: the JSON-RPC
error on its stream, ``retryAfterS`` in its data); ``/status`` counts the instances; once
one call ends, the third key's call takes the room it leaves.

The server is the scripted peer (tests/peers/scripted.py): its ``sleep`` holds a call for
as long as the test needs, which no real server does on demand."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import orjson

from conftest import run, scripted
from gateways import BOTH, JSON_ONLY, HttpGateway, modern_meta
from mcp_schema import LEGACY, MODERN, conforms

KEYS = {who: f"sk-instances-{who}-{secrets.token_hex(8)}" for who in ("alice", "bob", "carol")}
SLEEP = {"name": "sleep", "arguments": {"seconds": 60}}
ECHO = {"name": "echo", "arguments": {}}
#: The sleeps still running at the end are cancelled when the gateway stops.
QUICK_STOP = ("--drain-timeout", "0.5")


def fleet(tmp_path: Path, marker: str) -> Path:
    params = scripted(env={"INSTANCE_MARKER": marker})
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"per": {
        "command": params.command, "args": list(params.args), "env": dict(params.env),
        "instances": "per_user", "maxInstances": 2}}}))
    (tmp_path / "keys.json").write_text(json.dumps(
        {"keys": [{"name": who, "key": key} for who, key in KEYS.items()]}))
    return path


def processes_with(marker: str) -> int:
    """Live processes whose environment holds ``INSTANCE_MARKER=marker``."""
    import os

    wanted = f"INSTANCE_MARKER={marker}".encode()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    count += wanted in f.read().split(b"\0")
            except OSError:
                pass
    return count


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


async def legacy_session(gw: HttpGateway, who: str) -> dict[str, str]:
    headers = {"Accept": BOTH, "Content-Type": "application/json", **bearer(who)}
    init = gw.message("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"name": "old", "version": "1"}})
    status, answer, got = await gw.post(init, headers)
    assert status == 200 and "result" in answer, (status, answer)
    return {**headers, "Mcp-Session-Id": got["Mcp-Session-Id"],
            "MCP-Protocol-Version": "2025-11-25"}


async def hung_up(gw: HttpGateway, message: dict[str, Any], headers: dict[str, str]) -> int:
    """POST ``message`` and hang up once the head is in (a legacy call goes on)."""
    async with gw.http.post(gw.url, data=orjson.dumps(message), headers=headers) as response:
        response.close()
        return response.status


async def status_of(gw: HttpGateway) -> dict[str, Any]:
    async with gw.http.get(f"{gw.base}/status", headers=bearer("alice")) as response:
        assert response.status == 200
        document: dict[str, Any] = await response.json()
        return document


async def modern_call(gw: HttpGateway, who: str, params: dict[str, Any]
                      ) -> tuple[int, Any, Any]:
    message = gw.message("tools/call", {**params, "_meta": modern_meta()})
    return await gw.post(message, {**gw.modern_headers(message, JSON_ONLY), **bearer(who)})


def test_each_key_its_own_process_and_beyond_the_bound_429_with_retry_after(gateways,
                                                                           tmp_path):
    marker = secrets.token_hex(6)
    path = fleet(tmp_path, marker)

    async def main() -> None:
        gw = await HttpGateway.start(path, gateways, "--api-key-file",
                                     str(tmp_path / "keys.json"), *QUICK_STOP)
        assert processes_with(marker) == 1  # the catalog instance, which lists the tools
        held = {}
        for who in ("alice", "bob"):
            held[who] = await legacy_session(gw, who)
            first = gw.message("tools/call", SLEEP)
            held[f"{who}-id"] = first["id"]
            assert await hung_up(gw, first, held[who]) == 200
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while (await status_of(gw))["servers"][0].get("instances") != 2 \
                or processes_with(marker) != 3:
            assert loop.time() < deadline, "the two instances never started"
            await asyncio.sleep(0.02)
        document = await status_of(gw)
        assert document["user_instances"] == {"running": 2, "limit": 512}
        expected = {"kind": "Overloaded", "scope": "server", "budget": "maxInstances",
                    "limit": 2, "retryAfterS": 1, "server": "per"}
        # A 2026-07-28 request: 429, Retry-After.
        status, answer, got = await modern_call(gw, "carol", ECHO)
        assert status == 429, (status, answer)
        assert got["Retry-After"] == "1"
        assert answer["error"]["data"] == expected, answer
        assert "maxInstances" in answer["error"]["message"]
        conforms(answer, MODERN, "JSONRPCErrorResponse")
        # A legacy session: the same error, on its call's stream.
        carol = await legacy_session(gw, "carol")
        status, answer, got = await gw.post(gw.message("tools/call", ECHO), carol)
        assert status == 200 and got["Content-Type"] == "text/event-stream", (status, got)
        assert answer["error"]["data"] == expected, answer
        conforms(answer, LEGACY, "JSONRPCErrorResponse")
        assert processes_with(marker) == 3  # nothing was started for carol
        # Alice's call ends (cancelled): her instance is idle, and carol's takes its place.
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": held["alice-id"]}}
        status, _, _ = await gw.post(cancel, held["alice"])
        assert status == 202
        for _ in range(400):
            status, answer, _ = await modern_call(gw, "carol", ECHO)
            if status == 200:
                break
            assert status == 429, (status, answer)
            await asyncio.sleep(0.025)
        assert status == 200 and "result" in answer, answer
        document = await status_of(gw)
        assert document["servers"][0]["instances"] == 2
        assert processes_with(marker) == 3
        # ``trunkline status``, as an operator reads it.
        (tmp_path / "token").write_text(KEYS["alice"])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trunkline", "status", gw.url, "--token-file",
            str(tmp_path / "token"), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err
        (row,) = [line for line in out.decode().splitlines() if line.startswith("per ")]
        assert "ready, 2 per-user" in row, row
        assert await gw.stop() == 0
        assert processes_with(marker) == 0

    run(main(), timeout=180)
