"""``trunkline serve`` says it announces changes of the prompts and resources lists as well
as the tools, and does: an upstream's announced change reaches each modern listen stream
granted that list (once, with its subscription id) and no other, and every legacy
session. Behind it: the conformance suite's everything server (ours, mcp 2.x, modern),
whose ``test_trigger_prompt_change`` / ``test_trigger_tool_change`` change a list and
announce it on its listen stream; and a legacy server that announces unasked."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import orjson
import pytest

import realpeers
from conftest import run, scripted
from gateways import (
    SUB,
    HttpGateway,
    StdioGateway,
    fleet_config,
    modern_meta,
    real_server,
    sse_messages,
)
from mcp_schema import LEGACY, MODERN, conforms

pytestmark = pytest.mark.real_servers

PROMPTS = "notifications/prompts/list_changed"
TOOLS = "notifications/tools/list_changed"


def fixture_fleet(tmp_path):
    return fleet_config(tmp_path, {"ev": real_server(realpeers.require(
        realpeers.CONFORMANCE_EVERYTHING))})


def listen_for(gw: Any, **lists: bool) -> dict[str, Any]:
    return gw.message("subscriptions/listen", {"notifications": lists, "_meta": modern_meta()})


def test_over_http_each_listen_stream_hears_only_the_lists_it_was_granted(gateways, tmp_path):
    path = fixture_fleet(tmp_path)

    async def main() -> None:
        gw = await HttpGateway.start(path, gateways)
        _, found = await gw.modern("server/discover")
        conforms(found["result"], MODERN, "DiscoverResult")
        assert found["result"]["capabilities"]["prompts"] == {"listChanged": True}
        assert found["result"]["capabilities"]["resources"]["listChanged"] is True
        streams, heard = {}, {}
        for name, lists in (("prompts", {"promptsListChanged": True}),
                            ("tools", {"toolsListChanged": True})):
            listen = listen_for(gw, **lists)
            streams[name] = (listen["id"], await gw.http.post(
                gw.url, data=orjson.dumps(listen), headers=gw.modern_headers(listen)))
            heard[name] = sse_messages(streams[name][1])
            ack = await asyncio.wait_for(anext(heard[name]), 30)
            assert ack["params"] == {"_meta": {SUB: listen["id"]}, "notifications": lists}
        session, init = await gw.legacy_session()
        conforms(init["result"], LEGACY, "InitializeResult")
        assert init["result"]["capabilities"]["prompts"] == {"listChanged": True}
        legacy_stream = await gw.http.get(gw.url, headers={
            "Accept": "text/event-stream", "Mcp-Session-Id": session["Mcp-Session-Id"],
            "MCP-Protocol-Version": LEGACY})
        legacy_heard = sse_messages(legacy_stream)

        async def trigger(tool: str) -> None:
            _, called = await gw.modern("tools/call", {"name": tool, "arguments": {}})
            assert called["result"].get("isError") is not True, called

        await trigger("test_trigger_prompt_change")
        changed = await asyncio.wait_for(anext(heard["prompts"]), 30)
        assert changed == {"jsonrpc": "2.0", "method": PROMPTS,
                           "params": {"_meta": {SUB: streams["prompts"][0]}}}
        conforms(changed, MODERN, "PromptListChangedNotification")
        await trigger("test_trigger_tool_change")
        # Its first change is the tools': the prompts' never reached it.
        changed = await asyncio.wait_for(anext(heard["tools"]), 30)
        assert changed == {"jsonrpc": "2.0", "method": TOOLS,
                           "params": {"_meta": {SUB: streams["tools"][0]}}}
        # The tools' change went to every stream granted it at once: the prompts stream's
        # next is the next prompts change.
        await trigger("test_trigger_prompt_change")
        changed = await asyncio.wait_for(anext(heard["prompts"]), 30)
        assert changed["method"] == PROMPTS
        legacy = [await asyncio.wait_for(anext(legacy_heard), 30) for _ in range(3)]
        assert [m["method"] for m in legacy] == [PROMPTS, TOOLS, PROMPTS]
        for note in legacy:
            assert note["params"] == {}
            conforms(note, LEGACY, "PromptListChangedNotification" if note["method"] == PROMPTS
                     else "ToolListChangedNotification")
        # Stopped, each stream ends with its answer: nothing else came on either (one
        # notification per change).
        gw.proc.send_signal(signal.SIGTERM)
        for name, (listen_id, response) in streams.items():
            final = await asyncio.wait_for(anext(heard[name]), 30)
            assert final == {"jsonrpc": "2.0", "id": listen_id,
                             "result": {"resultType": "complete"}}, name
            response.close()
        assert [m async for m in legacy_heard] == []
        legacy_stream.close()
        assert await gw.stop() == 0

    run(main(), timeout=180)


def test_over_stdio_each_listen_stream_hears_only_the_lists_it_was_granted(gateways, tmp_path):
    path = fixture_fleet(tmp_path)

    async def main() -> tuple[list[tuple[str, Any]], Any, Any]:
        gw = await StdioGateway.start(path, gateways)
        found = await gw.call("server/discover", {"_meta": modern_meta()})
        assert found["result"]["capabilities"]["prompts"] == {"listChanged": True}
        prompts = gw.request("subscriptions/listen", {
            "notifications": {"promptsListChanged": True}, "_meta": modern_meta()})
        tools = gw.request("subscriptions/listen", {
            "notifications": {"toolsListChanged": True, "resourcesListChanged": True},
            "_meta": modern_meta()})
        await until(lambda: len(gw.notes) == 2, gw)
        for trigger, expected in (("test_trigger_prompt_change", 3),
                                  ("test_trigger_tool_change", 4),
                                  ("test_trigger_prompt_change", 5)):
            called = await gw.call("tools/call", {"name": trigger, "arguments": {},
                                                  "_meta": modern_meta()})
            assert called["result"].get("isError") is not True, called
            await until(lambda n=expected: len(gw.notes) >= n, gw)
        assert await gw.close() == 0
        acks, changes = gw.notes[:2], gw.notes[2:]
        assert {a["params"]["_meta"][SUB]: a["params"]["notifications"] for a in acks} == {
            prompts: {"promptsListChanged": True},
            tools: {"toolsListChanged": True, "resourcesListChanged": True}}
        return [(n["method"], n["params"]) for n in changes], prompts, tools

    changes, prompts, tools = run(main(), timeout=180)
    assert changes == [(PROMPTS, {"_meta": {SUB: prompts}}), (TOOLS, {"_meta": {SUB: tools}}),
                       (PROMPTS, {"_meta": {SUB: prompts}})]


def test_a_legacy_servers_prompt_list_change_reaches_a_modern_listen_stream(gateways, tmp_path):
    """A legacy server announces on its connection, unasked."""
    announcing = scripted("--era", "legacy", "--capabilities", json.dumps(
        {"tools": {}, "prompts": {"listChanged": True}}),
        "--notify-after-call", PROMPTS)
    path = fleet_config(tmp_path, {"old": announcing}, allow_legacy=("old",))

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        gw = await StdioGateway.start(path, gateways)
        listen = gw.request("subscriptions/listen", {
            "notifications": {"promptsListChanged": True}, "_meta": modern_meta()})
        await until(lambda: len(gw.notes) == 1, gw)
        called = await gw.call("tools/call", {"name": "echo", "arguments": {},
                                              "_meta": modern_meta()})
        assert "result" in called, called
        await until(lambda: len(gw.notes) == 2, gw)
        assert await gw.close() == 0
        return listen, gw.notes

    listen, notes = run(main(), timeout=120)
    assert notes[1] == {"jsonrpc": "2.0", "method": PROMPTS, "params": {"_meta": {SUB: listen}}}
    assert len(notes) == 2


async def until(condition: Any, gw: StdioGateway, seconds: float = 30) -> None:
    """Wait for ``condition()`` on what the gateway wrote."""
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not reached; the gateway wrote {gw.notes}")
