"""What one client supplies never reaches another: a legacy server behind the gateway is
shared by every client (one upstream session), and servers keep a session's roots
(server-everything caches ``roots/list`` per session). So its roots are the operator's (the
entry's ``roots``) or none, never asked of whichever client's call came first, and a
client's ``notifications/roots/list_changed`` is not passed on."""

from __future__ import annotations

import json
import sys

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from gateways import CAPS, HttpGateway, modern_meta, sse_messages

pytestmark = pytest.mark.real_servers

PRIVATE = "file:///home/clientA-private"


def config(tmp_path, tap, roots=None):
    """server-everything behind the wire tap, allowlisted; ``roots`` its entry's."""
    argv = [sys.executable, str(PEERS / "tap.py"), "--log", str(tap), "--",
            *realpeers.LEGACY_TS_EVERYTHING.argv]
    entry = {"command": argv[0], "args": argv[1:],
             "env": dict(realpeers.LEGACY_TS_EVERYTHING.env), "allowLegacy": True}
    if roots is not None:
        entry["roots"] = roots
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"ev": entry}}))
    return path


def roots_tool(listed: dict) -> str:
    [name] = [t["name"] for t in listed["result"]["tools"]
              if t["name"].endswith("get-roots-list")]
    return name


async def legacy_call_answering_roots(gw: HttpGateway, session: dict, tool: str
                                      ) -> tuple[dict, list[dict]]:
    """A legacy session's call of ``tool`` on an SSE stream, answering any ``roots/list``
    it is asked with its private root; the answer, and what it was asked."""
    asked: list[dict] = []
    call = gw.message("tools/call", {"name": tool, "arguments": {}})
    async with gw.http.post(gw.url, data=orjson.dumps(call), headers=session) as stream:
        async for message in sse_messages(stream):
            if message.get("method") == "roots/list":
                asked.append(message)
                await gw.post({"jsonrpc": "2.0", "id": message["id"],
                               "result": {"roots": [{"uri": PRIVATE}]}}, session)
            elif message.get("id") == call["id"]:
                return message, asked
    raise AssertionError("the call's stream ended without its answer")


def text(answer: dict) -> str:
    return " ".join(block.get("text", "") for block in answer["result"]["content"])


@pytest.mark.parametrize("configured", [None, ["file:///srv/shared"]])
def test_a_shared_legacy_servers_roots_are_never_one_clients(gateways, tmp_path, configured):
    tap = tmp_path / "tap.jsonl"
    path = config(tmp_path, tap, configured)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        a, _ = await gw.legacy_session({"roots": {"listChanged": True}})
        _, listed, _ = await gw.post(gw.message("tools/list", {}), a)
        tool = roots_tool(listed)
        first, asked = await legacy_call_answering_roots(gw, a, tool)
        assert asked == [], "a shared server's roots are never asked of one client"
        # A says its roots changed: that is its own business, not the shared server's.
        status, _, _ = await gw.post({"jsonrpc": "2.0",
                                      "method": "notifications/roots/list_changed"}, a)
        assert status == 202
        b, _ = await gw.legacy_session({})
        _, second, _ = await gw.post(gw.message("tools/call", {"name": tool,
                                                               "arguments": {}}), b)
        call = gw.message("tools/call", {"name": tool, "arguments": {},
                                         "_meta": modern_meta(**{CAPS: {"roots": {}}})})
        _, third, _ = await gw.post(call, gw.modern_headers(call))
        for answer in (first, second, third):
            assert "clientA-private" not in text(answer), answer
            if configured:
                assert "file:///srv/shared" in text(answer), answer
            else:
                assert "no roots" in text(answer), answer
        assert await gw.stop() == 0
        sent = [m.get("method") for m in taplog.messages(tap)]
        assert "notifications/roots/list_changed" not in sent
        answered = [m["result"] for m in taplog.messages(tap)
                    if isinstance(m.get("result"), dict) and "roots" in m["result"]]
        assert answered and all(PRIVATE not in orjson.dumps(r).decode() for r in answered)
    run(main(), timeout=180)
