"""``trunkline serve`` against the official TypeScript SDK clients, 1.x
(``@modelcontextprotocol/sdk``, the 2025-11-25 ``initialize`` handshake) and v2
(``@modelcontextprotocol/client`` with version negotiation ``'auto'``: a ``server/discover``
probe, then 2026-07-28), each over stdio (the client spawns the gateway) and over Streamable
HTTP. ``tests/peers/ts-client/ts_client.mjs`` is the client; ``.ci/install-peers`` installs
it with its pinned SDKs into ``.peers/ts-client``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest
from scripted import BUILTIN_TOOLS

import realpeers
from conftest import PEERS, run, scripted
from gateways import HttpGateway, alive_with, fleet_config, last_document, real_server
from mcp_schema import LEGACY, MODERN

CLIENT_SRC = PEERS / "ts-client"
CLIENT_DIR = realpeers.PEERS_DIR / "ts-client"
CLIENT = CLIENT_DIR / "ts_client.mjs"
#: the SDK major -> its npm package, the version it must be and the protocol it ends on
SDKS = {"ts-v1": ("1", "@modelcontextprotocol/sdk", LEGACY),
        "ts-v2": ("2", "@modelcontextprotocol/client", MODERN)}
PINNED = json.loads((CLIENT_SRC / "package.json").read_text())["dependencies"]


def require_client(package: str) -> None:
    """pytest.fail (never skip) unless .peers/ts-client holds this test's client and SDK."""
    try:
        installed = json.loads(
            (CLIENT_DIR / "node_modules" / package / "package.json").read_text())["version"]
        current = CLIENT.read_bytes() == (CLIENT_SRC / "ts_client.mjs").read_bytes()
    except (OSError, ValueError, KeyError):
        installed, current = None, False
    if installed != PINNED[package] or not current:
        pytest.fail(f"{package}@{PINNED[package]} and ts_client.mjs are not installed under "
                    f"{CLIENT_DIR}; run: bash .ci/install-peers", pytrace=False)


async def ts_client(major: str, tool: str, arguments: dict[str, Any], *target: str
                    ) -> dict[str, Any]:
    """Run the client once against ``target`` (a URL, or the argv of a stdio server); the
    document it printed."""
    return await node_document(str(CLIENT), major, tool, json.dumps(arguments), "--",
                               *target)


async def node_document(*argv: str, **options: Any) -> dict[str, Any]:
    """Run Node with ``argv`` (``options`` as for ``create_subprocess_exec``) to its end;
    the JSON document it printed last."""
    return await last_document(realpeers.NODE, *argv, **options)


async def gone(*markers: str, seconds: float = 30) -> bool:
    """Whether every process whose command line carries a marker ends within ``seconds``
    (the stdio gateways are the client's children, and their upstreams theirs: no_leaks,
    which sees only this process's children, cannot see them)."""
    for _ in range(int(seconds / 0.1)):
        if not any(alive_with(m) for m in markers):
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.real_servers
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("sdk", list(SDKS))
def test_the_official_typescript_clients(gateways, tmp_path, sdk, transport):
    major, package, protocol = SDKS[sdk]
    require_client(package)
    # Unique server names, so the upstreams can be found in the process table afterwards.
    mark = f"tsc-{tmp_path.name}"
    path = fleet_config(tmp_path, {"alpha": scripted("--name", f"alpha-{mark}"),
                                   "beta": scripted("--name", f"beta-{mark}")})

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        if transport == "http":
            gw = await HttpGateway.start(path, gateways)
            target: tuple[str, ...] = (gw.url,)
        else:
            target = (sys.executable, "-m", "trunkline", "serve", str(path), "--stdio")
        echoed = await ts_client(major, "beta_echo", {"hello": sdk}, *target)
        chatted = await ts_client(major, "alpha_chatty", {"a": 1}, *target)
        if transport == "http":
            assert await gw.stop() == 0, gw.stderr.decode()[-3000:]
        assert await gone(str(path), mark), "a gateway or an upstream outlived its client"
        return echoed, chatted

    echoed, chatted = run(main(), timeout=300)
    names = [tool["name"] for tool in BUILTIN_TOOLS]
    for done in echoed, chatted:
        assert done["sdk"] == PINNED[package]
        assert done["protocol"] == protocol
        assert done["era"] == ("modern" if protocol == MODERN else "legacy")
        # every tool is offered by both: each under its server's prefix
        assert sorted(done["tools"]) == sorted([f"{server}_{n}" for n in names
                                                for server in ("alpha", "beta")])
    assert echoed["result"]["isError"] is False
    [block] = echoed["result"]["content"]
    assert block["type"] == "text" and json.loads(block["text"]) == {"hello": sdk}
    assert chatted["result"]["isError"] is False
    [block] = chatted["result"]["content"]
    assert block["type"] == "text" and json.loads(block["text"]) == {"a": 1}

    # The gateway's part: the three steps, under the token the SDK chose, before the answer
    # (and not the upstream's stray fourth on a token nobody asked for).
    token = chatted["wire"]["token"]
    assert token is not None
    steps = [[step, 3, f"step {step}"] for step in (1, 2, 3)]
    assert chatted["wire"]["progress"] == [
        {"progressToken": token, "progress": p, "total": t, "message": m} for p, t, m in steps]
    # The SDK's part. Over HTTP each SSE event is dispatched on its own and all three reach
    # the handler. Over stdio both SDK majors dispatch a response at once but a notification
    # a microtask later, so the steps read in the same chunk as the answer (usually all of
    # them) are dropped (modelcontextprotocol/typescript-sdk#2580): what does arrive is the
    # first steps, in order.
    if transport == "http":
        assert chatted["progress"] == steps
    else:
        assert chatted["progress"] == steps[:len(chatted["progress"])]
    assert echoed["wire"]["progress"] == [] and echoed["progress"] == []


@pytest.mark.real_servers
def test_the_typescript_v2_client_reads_a_legacy_servers_resource(gateways, tmp_path):
    """The v2 SDK checks a 2026-07-28 ``resources/read`` result for its caching hints
    (``ttlMs``, ``cacheScope``): through the gateway, a legacy server's read, which has
    none, comes with them. ``ts_read.mjs`` is read from stdin in the installed SDK's
    directory."""
    require_client("@modelcontextprotocol/client")
    uri = "demo://resource/dynamic/text/3"
    path = fleet_config(tmp_path, {"ev": real_server(realpeers.require(
        realpeers.LEGACY_TS_EVERYTHING))}, allow_legacy=("ev",))

    async def main() -> dict[str, Any]:
        gw = await HttpGateway.start(path, gateways)
        with open(CLIENT_SRC / "ts_read.mjs", "rb") as script:
            document = await node_document(
                "--input-type=module", stdin=script, cwd=CLIENT_DIR,
                env={**os.environ, "TS_READ_URL": gw.url, "TS_READ_URI": uri})
        assert await gw.stop() == 0
        return document

    done = run(main(), timeout=180)
    assert done["sdk"] == PINNED["@modelcontextprotocol/client"]
    assert (done["era"], done["protocol"]) == ("modern", MODERN)
    assert "error" not in done, done["error"]
    [content] = done["result"]["contents"]
    assert content["uri"] == uri and content["text"].startswith("Resource 3:")
    assert (done["result"]["ttlMs"], done["result"]["cacheScope"]) == (0, "private")
