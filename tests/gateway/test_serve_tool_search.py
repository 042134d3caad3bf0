"""``trunkline serve --tool-search``: the gateway serves two tools, ``search_tools`` and
``call_tool``, in front of real servers (mcp-server-time and the echo peer on the official
Python SDK 2.x, server-everything on the TypeScript SDK 1.x) and a scripted one whose
calls fail with a JSON-RPC error. Over stdio and HTTP, for modern and legacy clients and
the official SDK client; every definition and result validated against the MCP schema of
the client's era, and search results against ``search_tools``' own output schema."""

from __future__ import annotations

import asyncio
import json
import sys

import jsonschema
import pytest

import realpeers
from conftest import PEERS, run, scripted
from gateways import HttpGateway, StdioGateway, fleet_config, modern_meta, real_server
from mcp_schema import LEGACY, MODERN, conforms

pytestmark = pytest.mark.real_servers

TWO = ["search_tools", "call_tool"]


def config(tmp_path):
    for server in (realpeers.MODERN_PY_TIME, realpeers.MODERN_PY_ECHO,
                   realpeers.LEGACY_TS_EVERYTHING):
        realpeers.require(server)
    return fleet_config(tmp_path, {
        "time": real_server(realpeers.MODERN_PY_TIME),
        "echo": real_server(realpeers.MODERN_PY_ECHO, "--listen"),
        "everything": real_server(realpeers.LEGACY_TS_EVERYTHING),
        "errs": scripted("--tools", "echo", "--tools-call", "error:-32099"),
    }, allow_legacy=("everything",))


def check_listed(result, revision):
    conforms(result, revision, "ListToolsResult")
    assert [t["name"] for t in result["tools"]] == TWO
    for tool in result["tools"]:
        conforms(tool, MODERN, "Tool")
        conforms(tool, LEGACY, "Tool")
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
    return {t["name"]: t for t in result["tools"]}


def text(result) -> str:
    return "".join(block.get("text", "") for block in result["content"])


class Face:
    """One client of a gateway: ``call(name, arguments)`` -> the whole answer."""

    def __init__(self, ask, revision):
        self.ask = ask
        self.revision = revision

    async def call(self, name, arguments):
        return await self.ask("tools/call", {"name": name, "arguments": arguments})

    async def result(self, name, arguments):
        answer = await self.call(name, arguments)
        assert "result" in answer, answer
        conforms(answer["result"], self.revision, "CallToolResult")
        return answer["result"]


async def exercise(face: Face, listed) -> None:
    """What a model does through the two tools, and what it gets wrong."""
    tools = check_listed(listed, face.revision)
    found_schema = tools["search_tools"]["outputSchema"]

    found = await face.result("search_tools", {"query": "sum of two numbers", "limit": 3})
    jsonschema.validate(found["structuredContent"], found_schema)
    assert json.loads(text(found)) == found["structuredContent"]
    (first, *rest) = found["structuredContent"]["tools"]
    assert (first["name"], first["server"]) == ("get-sum", "everything")
    assert first["inputSchema"]["properties"].keys() >= {"a", "b"} and len(rest) == 2
    summed = await face.result("call_tool", {"name": first["name"], "arguments": {"a": 2, "b": 3}})
    assert "5" in text(summed) and not summed.get("isError")

    # Prefixed names come back as they are called; structured content passes through.
    (echo, other) = (await face.result("search_tools", {"query": "echo", "limit": 2}))[
        "structuredContent"]["tools"]
    assert {echo["name"], other["name"]} <= {"echo_echo", "everything_echo", "errs_echo"}
    hits = await face.result("call_tool", {"name": "search",
                                           "arguments": {"query": "q", "limit": 2}})
    assert hits["structuredContent"] == {"query": "q", "hits": ["q result 1", "q result 2"]}

    # The tool's own isError result passes through; so does a server's JSON-RPC error.
    failed = await face.result("call_tool", {"name": "echo_echo", "arguments": {}})
    assert failed["isError"] is True and "text" in text(failed)
    refused = await face.call("call_tool", {"name": "errs_echo", "arguments": {"x": 1}})
    assert refused["error"]["code"] == -32099, refused

    # A model's mistakes are execution errors it can read and correct.
    for arguments, says in [
        ({}, "needs a query"), ({"query": "   "}, "needs a query"),
        ({"query": 7}, "needs a query"), ({"query": "x", "limit": 0}, "limit must be"),
        ({"query": "x", "limit": 51}, "limit must be"), ({"query": "x", "top": 3}, "not top"),
        ({"query": "x" * 1001}, "at most 1000"),
    ]:
        mistake = await face.result("search_tools", arguments)
        assert mistake["isError"] is True and says in text(mistake), (arguments, mistake)
    for arguments, says in [
        ({}, "needs the name"), ({"name": "get-sum", "arguments": [2, 3]}, "must be an object"),
        ({"name": "get-sum", "args": {}}, "not args"),
        ({"name": "no_such_tool"}, "no tool is named 'no_such_tool'; search_tools finds"),
    ]:
        mistake = await face.result("call_tool", arguments)
        assert mistake["isError"] is True and says in text(mistake), (arguments, mistake)
    # Only the two tools are served: anything else is an unknown tool.
    direct = await face.call("get-sum", {"a": 1, "b": 1})
    assert direct["error"]["code"] == -32602 and "call_tool" in direct["error"]["message"]

    # Nothing was lost on the way.
    again = await face.result("call_tool", {"name": "get_current_time",
                                            "arguments": {"timezone": "UTC"}})
    assert '"timezone": "UTC"' in text(again)


def test_over_stdio_for_modern_and_legacy_clients(gateways, tmp_path):
    path = config(tmp_path)

    async def main():
        gw = await StdioGateway.start(path, gateways, "--tool-search")

        async def modern(method, params):
            return await gw.call(method, {**params, "_meta": modern_meta()})
        discovered = await modern("server/discover", {})
        assert discovered["result"]["capabilities"]["tools"] == {"listChanged": False}
        listed = await modern("tools/list", {})
        await exercise(Face(modern, MODERN), listed["result"])

        # The called tool's progress reaches the client under the client's own token.
        counted = await gw.call("tools/call", {
            "name": "call_tool", "arguments": {"name": "count", "arguments": {"n": 3}},
            "_meta": modern_meta(progressToken="mine")})
        assert text(counted["result"]) == "counted 3"
        progress = [n["params"] for n in gw.notes if n["method"] == "notifications/progress"]
        assert [(p["progressToken"], p["progress"]) for p in progress] == \
            [("mine", 1), ("mine", 2), ("mine", 3)]

        init = await gw.call("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "old", "version": "1"}})
        assert init["result"]["protocolVersion"] == LEGACY
        # The two tools never change, and the gateway says so.
        assert init["result"]["capabilities"]["tools"] == {"listChanged": False}
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = await gw.call("tools/list", {})
        await exercise(Face(gw.call, LEGACY), listed["result"])

        # A tool added behind the gateway is found at once; the two tools served did not
        # change, so the legacy session is not told the list changed.
        await gw.call("tools/call", {"name": "call_tool", "arguments": {
            "name": "add_tool", "arguments": {"name": "brand_new_tool"}}})
        for _ in range(400):
            found = await gw.call("tools/call", {"name": "search_tools", "arguments": {
                "query": "brand new tool", "limit": 1}})
            if found["result"]["structuredContent"]["tools"][0]["name"] == "brand_new_tool":
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the added tool was never found")
        assert not [n for n in gw.notes if n["method"] == "notifications/tools/list_changed"]
        assert await gw.close() == 0
    run(main(), timeout=240)


def test_over_http_for_modern_and_legacy_clients(gateways, tmp_path):
    path = config(tmp_path)

    async def main():
        gw = await HttpGateway.start(path, gateways, "--tool-search")
        try:
            async def modern(method, params):
                status, answer = await gw.modern(method, params)
                assert status == 200 or "error" in answer, (status, answer)
                return answer
            await exercise(Face(modern, MODERN), (await modern("tools/list", {}))["result"])

            headers, _ = await gw.legacy_session()

            async def legacy(method, params):
                _, answer, _ = await gw.post(gw.message(method, params), headers)
                return answer
            await exercise(Face(legacy, LEGACY), (await legacy("tools/list", {}))["result"])
        finally:
            assert await gw.stop() == 0
    run(main(), timeout=240)


def _check_sdk_run(done):
    assert done["sdk"].startswith("2.") and MODERN in done["protocol"]
    assert [t["name"] for t in done["tools"]] == TWO
    for tool in done["tools"]:
        conforms(tool, MODERN, "Tool")
    first = done["found"]["structuredContent"]["tools"][0]
    assert (first["name"], first["server"]) == ("get_current_time", "time")
    assert '"timezone": "UTC"' in text(done["called"]) and not done["called"].get("isError")
    assert done["unknown"]["isError"] is True
    assert "search_tools" in text(done["unknown"])


async def _sdk_client(*target: str) -> dict:
    python = realpeers.PEERS_DIR / "py-modern" / "bin" / "python"
    client = await asyncio.create_subprocess_exec(
        str(python), str(PEERS / "sdk_tool_search.py"), "current time in a timezone",
        json.dumps({"timezone": "UTC"}), "--", *target,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(client.communicate(), 180)
    assert client.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def test_the_official_sdk_client_finds_and_calls_over_stdio(gateways, tmp_path):
    path = config(tmp_path)
    done = run(_sdk_client(sys.executable, "-m", "trunkline", "serve", str(path), "--stdio",
                           "--tool-search"), timeout=240)
    _check_sdk_run(done)


def test_the_official_sdk_client_finds_and_calls_over_http(gateways, tmp_path):
    path = config(tmp_path)

    async def main():
        gw = await HttpGateway.start(path, gateways, "--tool-search")
        try:
            return await _sdk_client(gw.url)
        finally:
            assert await gw.stop() == 0
    _check_sdk_run(run(main(), timeout=240))
