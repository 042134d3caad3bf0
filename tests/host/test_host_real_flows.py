"""Progress, multi round-trip requests and subscriptions/listen through the whole host,
against REAL SDK servers (mcp 2.3.0 Python MCPServer, @modelcontextprotocol/server 2.4.0
TypeScript McpServer), each wrapped in tests/peers/tap.py so the bytes on the wire are
asserted too. The tools used (count, ask_name, add_tool) are described in
tests/peers/REAL_SERVERS.md."""

from __future__ import annotations

import asyncio
import sys
import time

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from mcp_schema import MODERN, validate_message
from trunkline import ClientOptions
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

pytestmark = pytest.mark.real_servers

# Python servers start in 1-3 s under load: a generous probe deadline keeps a slow start
# from looking like a silent (legacy) server.
SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))

# name -> (server, extra argv). py_modern_echo.py serves subscriptions/listen only with
# --listen (its default wire behaviour, recorded in REAL_SERVERS.md, has listChanged:false).
SERVERS = {
    "modern-py-echo": (realpeers.MODERN_PY_ECHO, ["--listen"]),
    "modern-ts": (realpeers.MODERN_TS, []),
}


def tapped(name: str, log) -> object:
    server, extra = SERVERS[name]
    realpeers.require(server)
    return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(log), "--",
                 *server.argv, *extra, env=dict(server.env))


def wire(tap, direction) -> list[bytes]:
    return taplog.lines(tap, direction)


def messages(tap, direction) -> list[dict]:
    return [orjson.loads(line) for line in wire(tap, direction)]


def sent(tap, method) -> list[dict]:
    return [m for m in messages(tap, taplog.IN) if m.get("method") == method]


async def until(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:g} s"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("name", list(SERVERS))
def test_progress_from_a_real_server_reaches_the_callback(tap, no_leaks, name):
    seen: list[tuple] = []

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", tapped(name, tap))
            result = await host.call_tool("count", {"n": 3}, on_progress=lambda *p: seen.append(p),
                                          timeout=30)
            assert result.text == "counted 3"
            assert not result.is_error
    run(main())
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    (call,) = sent(tap, "tools/call")
    validate_message(call, MODERN)
    token = call["params"]["_meta"]["progressToken"]
    progress = [m["params"] for m in messages(tap, taplog.OUT)
                if m.get("method") == "notifications/progress"]
    assert [p["progressToken"] for p in progress] == [token] * 3
    assert [p["progress"] for p in progress] == [1, 2, 3]


@pytest.mark.parametrize("name", list(SERVERS))
def test_mrtr_elicitation_round_against_a_real_server(tap, no_leaks, name):
    asked: list[dict] = []

    async def elicit(params):
        asked.append(params)
        return {"action": "accept", "content": {"name": "Ada"}}

    async def main():
        async with Host(settings=SETTINGS, client=ClientOptions(
                capabilities={"elicitation": {}},
                input_handlers={"elicitation/create": elicit})) as host:
            await host.add_server("s", tapped(name, tap))
            result = await host.call_tool("ask_name", {}, timeout=30)
            assert not result.is_error, result
            assert result.text.startswith("hello Ada"), result.text
    run(main())
    assert len(asked) == 1
    assert asked[0]["message"] == "What is your name?"
    assert asked[0]["requestedSchema"]["properties"]["name"]["type"] == "string"

    calls = [line for line in wire(tap, taplog.IN) if b'"tools/call"' in line]
    assert len(calls) == 2, calls
    first, retry = (orjson.loads(line) for line in calls)
    assert first["id"] != retry["id"], "the retry is a new request with a new id"
    for msg in (first, retry):
        validate_message(msg, MODERN)
        assert msg["params"]["name"] == "ask_name"
    assert "inputResponses" not in first["params"]
    assert "requestState" not in first["params"]

    # The server's input_required answer, and the retry echoing its state byte for byte.
    (answer_line,) = [line for line in wire(tap, taplog.OUT) if b'"input_required"' in line]
    answer = orjson.loads(answer_line)
    assert answer["id"] == first["id"]
    ((key, request),) = answer["result"]["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    state = answer["result"]["requestState"]
    assert isinstance(state, str) and state
    state_bytes = orjson.dumps(state)  # both SDKs write plain JSON strings (no escapes)
    assert b'"requestState":' + state_bytes in answer_line
    assert b'"requestState":' + state_bytes in calls[1]
    assert retry["params"]["requestState"] == state
    assert retry["params"]["inputResponses"] == {
        key: {"action": "accept", "content": {"name": "Ada"}}}
    assert retry["params"]["arguments"] == first["params"]["arguments"]

    (final,) = [m for m in messages(tap, taplog.OUT) if m.get("id") == retry["id"]]
    assert final["result"]["resultType"] == "complete"
    if name == "modern-ts":
        # The TS tool echoes what ctx.mcpReq.requestState() gave it: the raw wire string.
        assert final["result"]["content"][0]["text"] == f"hello Ada state={state}"


@pytest.mark.parametrize("name", list(SERVERS))
def test_a_tool_added_at_runtime_reaches_the_catalog_through_listen(tap, no_leaks, name):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", tapped(name, tap))
            assert "greet" not in {t.name for t in host.tools()}
            await until(lambda: len(sent(tap, "subscriptions/listen")) == 1, what="listen sent")
            # Wait for the server's acknowledgement so the change cannot race the stream.
            await until(lambda: any(m.get("method") == "notifications/subscriptions/acknowledged"
                                    for m in messages(tap, taplog.OUT)), what="listen acked")
            lists_before = len(sent(tap, "tools/list"))
            result = await host.call_tool("add_tool", {"name": "greet"}, timeout=30)
            assert result.text == "added greet"
            # No refresh_tools(): the list_changed on the listen stream must do it.
            await until(lambda: "greet" in {t.name for t in host.tools()},
                        what="catalog gains greet")
            assert len(sent(tap, "tools/list")) > lists_before
            assert (await host.call_tool("greet", {}, timeout=30)).text == "greet here"
    run(main())
    (listen,) = sent(tap, "subscriptions/listen")
    validate_message(listen, MODERN)
    sid_key = "io.modelcontextprotocol/subscriptionId"
    changed = [m for m in messages(tap, taplog.OUT)
               if m.get("method") == "notifications/tools/list_changed"]
    assert changed, "the server sent no notifications/tools/list_changed"
    # Both SDKs tag stream notifications with the listen request's id as subscriptionId.
    assert [m["params"]["_meta"][sid_key] for m in changed] == [listen["id"]] * len(changed)
