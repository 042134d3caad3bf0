"""The HTTP test peers work, checked without trunkline's HTTP client: raw aiohttp requests
against tests/peers/http_scripted.py and the real SDK servers of realpeers.HTTP (started
by tests/httppeers.py), plus the official mcp 2.3.0 client against the scripted peer."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import aiohttp
import pytest

import httppeers
import realpeers
from conftest import child_pids, group_alive, run
from httppeers import http_peer, start_http_peer  # noqa: F401 - http_peer is a fixture
from mcp_schema import MODERN, conforms

META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "smoke", "version": "0"}}
ACCEPT = "application/json, text/event-stream"
TIMEOUT = aiohttp.ClientTimeout(total=30)


def modern(method: str, id_: int = 1, meta: dict | None = None, **params: Any) -> tuple[dict, dict]:
    """A modern request body and the headers a correct client sends with it."""
    body = {"jsonrpc": "2.0", "id": id_, "method": method,
            "params": {**params, "_meta": {**META, **(meta or {})}}}
    headers = {"Accept": ACCEPT, "Content-Type": "application/json",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return body, headers


def sse_parse(text: str) -> tuple[list[str], list[dict]]:
    """(comment lines, decoded `data:` payloads) of an SSE body."""
    comments, events = [], []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [ln[5:].lstrip() for ln in block.split("\n") if ln.startswith("data:")]
        comments += [ln for ln in block.split("\n") if ln.startswith(":")]
        if data and "".join(data):
            events.append(json.loads("\n".join(data)))
    return comments, events


async def post(url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any, str]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        async with s.post(url, data=json.dumps(body), headers=headers) as r:
            return r.status, r.headers.copy(), await r.text()  # case-insensitive


async def answer(url: str, body: dict, headers: dict[str, str]) -> tuple[int, Any, list[dict]]:
    """POST; return (status, headers, JSON-RPC messages) whether the reply is JSON or SSE."""
    status, rh, text = await post(url, body, headers)
    if rh.get("Content-Type", "").startswith("text/event-stream"):
        return status, rh, sse_parse(text)[1]
    return status, rh, [json.loads(text)] if text else []


def valid(definition: str, result: dict) -> dict:
    return conforms(result, MODERN, definition)


# ---- scripted peer ---------------------------------------------------------------------

@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
def test_scripted_discover_list_call(no_leaks, http_peer, tmp_path, sse):
    peer = http_peer(*httppeers.scripted(*(["--sse"] if sse else [])), record=tmp_path / "r.jsonl")
    assert peer.url.startswith("http://127.0.0.1:") and peer.url.endswith("/mcp")

    async def main():
        status, rh, msgs = await answer(peer.url, *modern("server/discover"))
        assert status == 200 and rh["Content-Type"].startswith(
            "text/event-stream" if sse else "application/json")
        found = valid("DiscoverResult", msgs[-1]["result"])
        assert found["supportedVersions"] == [MODERN] and found["capabilities"] == {"tools": {}}
        _, _, msgs = await answer(peer.url, *modern("tools/list", 2))
        tools = valid("ListToolsResult", msgs[-1]["result"])["tools"]
        assert [t["name"] for t in tools] == ["echo", "slow", "headered"]
        _, _, msgs = await answer(peer.url, *modern(
            "tools/call", 3, {"progressToken": "tok"}, name="echo", arguments={"text": "hi"}))
        assert valid("CallToolResult", msgs[-1]["result"])["content"] == [
            {"type": "text", "text": "hi"}
        ]
        if sse:  # progress first, then the response that ends the stream
            assert msgs[0]["method"] == "notifications/progress"
            assert msgs[0]["params"]["progressToken"] == "tok" and len(msgs) == 2
        else:
            assert len(msgs) == 1
    run(main())
    recs = peer.records()
    assert [r["body"]["method"] for r in recs] == ["server/discover", "tools/list", "tools/call"]
    assert all(r["method"] == "POST" and r["path"] == "/mcp" for r in recs)
    assert recs[2]["headers"]["mcp-name"] == "echo"
    assert recs[2]["headers"]["mcp-protocol-version"] == MODERN


def test_scripted_sse_stream_starts_with_a_comment(no_leaks, http_peer):
    peer = http_peer(*httppeers.scripted("--sse"))
    status, rh, text = run(
        post(peer.url, *modern("tools/call", name="slow", arguments={"seconds": 1.2}))
    )
    comments, events = sse_parse(text)
    assert status == 200 and text.startswith(": keep-alive\n\n")
    assert len(comments) >= 2 and rh["X-Accel-Buffering"] == "no"
    assert events[-1]["result"]["content"][0]["text"] == "slept 1.2"


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


@pytest.mark.parametrize("change,code,status", [
    ({"MCP-Protocol-Version": "2025-11-25"}, -32020, 400),
    ({"MCP-Protocol-Version": None}, -32020, 400),
    ({"Mcp-Method": "tools/list"}, -32020, 400),
    ({"Mcp-Name": "echo"}, -32020, 400),
    ({"Mcp-Param-Region": None}, -32020, 400),
    ({"Mcp-Param-Count": "4"}, -32020, 400),
    ({"Mcp-Param-Flag": "true"}, -32020, 400),  # flag absent in the body: no header allowed
    ({"Accept": "application/json"}, -32600, 406),
    ({}, None, 200),
], ids=["version", "no-version", "method", "name", "no-param", "param-value", "extra-param",
        "accept", "all-correct"])
def test_scripted_validates_modern_headers(no_leaks, http_peer, change, code, status):
    peer = http_peer(*httppeers.scripted())
    body, headers = modern("tools/call", name="headered", arguments={"region": "eu", "count": 3})
    headers.update({"Mcp-Param-Region": "eu", "Mcp-Param-Count": "3"})
    for k, v in change.items():
        if v is None:
            headers.pop(k)
        else:
            headers[k] = v
    got, _, msgs = run(answer(peer.url, body, headers))
    assert got == status, msgs
    if code is None:
        assert msgs[0]["result"]["content"][0]["text"] == "region=eu count=3"
    else:
        assert msgs[0]["error"]["code"] == code and msgs[0]["id"] == 1
        if code == -32020:
            assert set(msgs[0]["error"]["data"]) == {"header", "expected", "received"}


def test_scripted_header_encoding_and_other_errors(no_leaks, http_peer):
    peer = http_peer(*httppeers.scripted())

    async def main():
        body, headers = modern("tools/call", name="headered", arguments={"region": " eu-ü"})
        got, _, msgs = await answer(peer.url, body, {**headers, "Mcp-Param-Region": b64(" eu-ü")})
        assert got == 200 and msgs[0]["result"]["content"][0]["text"] == "region= eu-ü"
        # a value that needs Base64 sent plain is a mismatch
        body, headers = modern("tools/call", name="headered", arguments={"region": " eu"})
        got, _, msgs = await answer(peer.url, body, {**headers, "Mcp-Param-Region": " eu"})
        assert got == 400 and msgs[0]["error"]["code"] == -32020
        # the version headers agree but the server does not speak it
        body, headers = modern("server/discover", meta={
            "io.modelcontextprotocol/protocolVersion": "2099-01-01"})
        got, _, msgs = await answer(
            peer.url, body, {**headers, "MCP-Protocol-Version": "2099-01-01"}
        )
        assert got == 400 and msgs[0]["error"]["code"] == -32022
        assert msgs[0]["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
        body, headers = modern("server/discover")
        del body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        got, _, msgs = await answer(peer.url, body, headers)
        assert got == 400 and msgs[0]["error"]["code"] == -32602
        got, _, msgs = await answer(peer.url, *modern("nope/nope"))
        assert got == 404 and msgs[0]["error"]["code"] == -32601
        got, _, msgs = await answer(peer.url, *modern("tools/call", name="nope", arguments={}))
        assert got == 400 and msgs[0]["error"]["code"] == -32602
        got, _, text = await post(peer.url, {"jsonrpc": "2.0", "method": "notifications/x"},
                                  modern("server/discover")[1])
        assert got == 202 and text == ""
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            for verb in ("GET", "DELETE"):
                async with s.request(verb, peer.url) as r:
                    assert r.status == 405 and r.headers["Allow"] == "POST"
    run(main())


def test_scripted_invalid_header_tool_is_listed(no_leaks, http_peer):
    peer = http_peer(*httppeers.scripted("--invalid-header-tool"))
    _, _, msgs = run(answer(peer.url, *modern("tools/list")))
    bad = [t for t in msgs[0]["result"]["tools"] if t["name"] == "bad_header"]
    assert bad and bad[0]["inputSchema"]["properties"]["x"] == {
        "type": "number",
        "x-mcp-header": "X",
    }


def test_scripted_auth_and_status_codes(no_leaks, http_peer, tmp_path):
    peer = http_peer(*httppeers.scripted("--require-bearer", "s3cret"), record=tmp_path / "r.jsonl")
    body, headers = modern("server/discover")
    status, rh, text = run(post(peer.url, body, headers))
    assert status == 401 and rh["WWW-Authenticate"] == 'Bearer realm="test"'
    assert not text.lstrip().startswith("{")  # not a JSON-RPC body
    status, _, text = run(post(peer.url, body, {**headers, "Authorization": "Bearer wrong"}))
    assert status == 401
    status, _, text = run(post(peer.url, body, {**headers, "Authorization": "Bearer s3cret"}))
    assert status == 200 and json.loads(text)["result"]["resultType"] == "complete"
    assert [r["headers"].get("authorization") for r in peer.records()] == [
        None, "Bearer wrong", "Bearer s3cret"]
    for code in (401, 403, 500, 503):
        other = http_peer(*httppeers.scripted("--status", str(code)))
        status, rh, _ = run(post(other.url, body, headers))
        assert status == code
        assert ("WWW-Authenticate" in rh) == (code == 401)


def test_scripted_garbage(no_leaks, http_peer):
    peer = http_peer(*httppeers.scripted("--garbage"))
    status, rh, text = run(post(peer.url, *modern("server/discover")))
    assert status == 200 and rh["Content-Type"].startswith("application/json")
    with pytest.raises(ValueError):
        json.loads(text)


def test_scripted_drop_mid_call_closes_without_a_response(no_leaks, http_peer):
    peer = http_peer(*httppeers.scripted("--drop-mid-call"))

    async def main():
        body, headers = modern("tools/call", meta={"progressToken": 7}, name="echo",
                               arguments={"text": "x"})
        seen = b""
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            async with s.post(peer.url, data=json.dumps(body), headers=headers) as r:
                assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
                with pytest.raises(aiohttp.ClientPayloadError):
                    async for chunk in r.content.iter_any():
                        seen += chunk
        _, events = sse_parse(seen.decode())
        assert [e.get("method") for e in events] == ["notifications/progress"]
        assert events[0]["params"]["progressToken"] == 7
        # the peer itself lives on
        status, _, _ = await answer(peer.url, *modern("server/discover"))
        assert status == 200
    run(main())


def test_scripted_records_a_cancelled_call(no_leaks, http_peer, tmp_path):
    peer = http_peer(*httppeers.scripted(), record=tmp_path / "r.jsonl")

    async def main():
        task = asyncio.ensure_future(answer(peer.url, *modern(
            "tools/call", 9, name="slow", arguments={"seconds": 30})))
        while not peer.records():
            await asyncio.sleep(0.05)
        task.cancel()  # closes the connection
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if peer.events():
                break
            await asyncio.sleep(0.05)
    run(main())
    assert peer.events() == [{"event": "cancelled", "id": 9}]


def test_scripted_legacy_sessions(no_leaks, http_peer, tmp_path):
    peer = http_peer(*httppeers.scripted("--legacy", "--expire-session-after", "4"),
                     record=tmp_path / "r.jsonl")
    base = {"Accept": ACCEPT, "Content-Type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "s", "version": "0"},
        },
    }

    async def main():
        status, _, text = await post(peer.url, *modern("server/discover"))
        assert status == 400 and json.loads(text) == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32000, "message": "Bad Request: No valid session ID provided"}}
        status, rh, text = await post(peer.url, init, base)
        assert status == 200 and json.loads(text)["result"]["protocolVersion"] == "2025-11-25"
        sid = rh["Mcp-Session-Id"]
        inside = {**base, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        status, _, text = await post(
            peer.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, inside
        )
        assert (status, text) == (202, "")
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "yo"}}}
        status, _, text = await post(peer.url, call, inside)
        assert status == 200 and json.loads(text)["result"] == {
            "content": [{"type": "text", "text": "yo"}], "isError": False}
        status, _, _ = await post(peer.url, call, {**base, "MCP-Protocol-Version": "2025-11-25"})
        assert status == 400  # no session id
        status, _, _ = await post(peer.url, call, {**base, "Mcp-Session-Id": sid})
        assert status == 400  # no protocol version (the 3rd request of the session)
        status, _, text = await post(peer.url, call, inside)  # the 4th one: still answered
        assert status == 200
        status, _, text = await post(peer.url, call, inside)  # the 5th: expired
        assert status == 404 and json.loads(text)["error"]["code"] == -32001
        # a new session, ended by DELETE
        _, rh, _ = await post(peer.url, init, base)
        sid = rh["Mcp-Session-Id"]
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            async with s.delete(peer.url, headers={"Mcp-Session-Id": sid}) as r:
                assert r.status == 200
            async with s.get(peer.url, headers={"Mcp-Session-Id": sid}) as r:
                assert r.status == 405
        status, _, _ = await post(peer.url, call, {**inside, "Mcp-Session-Id": sid})
        assert status == 404
    run(main())
    assert [r["method"] for r in peer.records()][-3:] == ["DELETE", "GET", "POST"]


# ---- the helper itself -----------------------------------------------------------------

def test_stop_leaves_no_process_and_no_fd(no_leaks):
    peer = start_http_peer(*httppeers.scripted())
    pgid = peer.pid
    assert peer.alive() and group_alive(pgid)
    peer.stop()
    peer.stop()  # idempotent
    assert not group_alive(pgid) and peer.pid not in child_pids()


def test_stop_kills_grandchildren_and_sigterm_deaf_peers(no_leaks):
    # a peer that ignores SIGTERM and whose own child prints the LISTENING line
    code = textwrap.dedent("""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('LISTENING http://127.0.0.1:1/mcp', flush=True); time.sleep(600)"])
        time.sleep(600)
    """)
    peer = start_http_peer([sys.executable, "-c", code])
    assert peer.url == "http://127.0.0.1:1/mcp"
    peer.stop(grace=0.3)
    assert not group_alive(peer.pid)


@pytest.mark.parametrize("argv,message", [
    ([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"],
     "exited with 3"),
    ([sys.executable, "-c", "import time; time.sleep(600)"], "no LISTENING line"),
], ids=["exits", "silent"])
def test_start_failure_raises_with_output_and_leaks_nothing(no_leaks, argv, message):
    with pytest.raises(RuntimeError, match=message) as info:
        start_http_peer(argv, timeout=1.0)
    if "exits" in message:
        assert "boom" in str(info.value)


# ---- the official client against the scripted peer ---------------------------------------

CLIENT = """
import sys, anyio
from mcp import Client
async def main(url, mode):
    async with Client(url, mode=mode) as c:
        tools = await c.list_tools()
        r = await c.call_tool("headered", {"region": " eu-ü", "count": 3, "flag": True})
        print(c.protocol_version, sorted(t.name for t in tools.tools), r.content[0].text)
anyio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.real_servers
@pytest.mark.parametrize("flags,version", [
    ((), MODERN), (("--sse",), MODERN), (("--invalid-header-tool",), MODERN),
    (("--legacy",), "2025-11-25"), (("--legacy", "--sse"), "2025-11-25"),
], ids=["json", "sse", "invalid-tool", "legacy", "legacy-sse"])
def test_official_client_talks_to_the_scripted_peer(no_leaks, http_peer, tmp_path, flags, version):
    python = realpeers.PY_MODERN_VENV / "bin" / "python"
    realpeers.require(realpeers.PY_HTTP_MODERN)  # the same venv
    peer = http_peer(*httppeers.scripted(*flags), record=tmp_path / "r.jsonl")
    out = subprocess.run([str(python), "-c", CLIENT, peer.url, "auto"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    # the invalid tool is dropped by the client (MCP 2026-07-28: the client MUST drop it)
    assert out.stdout.split("\n")[0] == (
        f"{version} ['echo', 'headered', 'slow'] region= eu-ü count=3 flag=true")
    call = [r for r in peer.records() if (r["body"] or {}).get("method") == "tools/call"][-1]
    if version == MODERN:
        assert call["headers"]["mcp-param-region"] == b64(" eu-ü")
        assert (call["headers"]["mcp-param-count"], call["headers"]["mcp-param-flag"]) == (
            "3",
            "true",
        )
    else:
        assert "mcp-session-id" in call["headers"]


# ---- the real SDK servers over HTTP -------------------------------------------------------

MODERN_REAL = {"py-http-modern": httppeers.py_http_modern, "fastmcp-http": httppeers.fastmcp_http}
LEGACY_REAL = {"py-http-legacy": httppeers.py_http_legacy,
               "ts-everything-http": httppeers.ts_everything_http}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "smoke", "version": "0"},
    },
}


@pytest.mark.real_servers
@pytest.mark.parametrize("name", list(MODERN_REAL))
def test_real_modern_http_server(no_leaks, http_peer, tmp_path, name):
    peer = http_peer(*MODERN_REAL[name](), record=tmp_path / "r.jsonl", timeout=30)
    assert peer.url.startswith("http://127.0.0.1:")

    async def main():
        status, rh, msgs = await answer(peer.url, *modern("server/discover"))
        assert status == 200 and rh["Content-Type"].startswith("application/json")
        assert valid("DiscoverResult", msgs[0]["result"])["supportedVersions"] == [MODERN]
        _, _, msgs = await answer(peer.url, *modern("tools/list", 2))
        tools = {t["name"]: t for t in valid("ListToolsResult", msgs[0]["result"])["tools"]}
        assert {"add", "echo", "headered", "count", "slow"} <= set(tools)
        props = tools["headered"]["inputSchema"]["properties"]
        assert [props[p]["x-mcp-header"] for p in ("region", "count", "flag")] == [
            "Region", "Count", "Flag"]
        _, _, msgs = await answer(
            peer.url, *modern("tools/call", 3, name="add", arguments={"a": 2, "b": 3})
        )
        assert msgs[0]["result"]["content"][0]["text"] == "5"
        body, headers = modern(
            "tools/call", 4, name="headered", arguments={"region": " eu", "count": 2}
        )
        headers.update({"Mcp-Param-Region": b64(" eu"), "Mcp-Param-Count": "2"})
        status, _, msgs = await answer(peer.url, body, headers)
        assert (
            status == 200
            and msgs[0]["result"]["content"][0]["text"] == "region= eu count=2 flag=false"
        )
        del headers["Mcp-Param-Count"]
        status, _, msgs = await answer(peer.url, body, headers)
        assert status == 400 and msgs[0]["error"]["code"] == -32020
        status, _, msgs = await answer(
            peer.url, body, {**headers, "MCP-Protocol-Version": "2099-01-01"}
        )
        assert status == 400 and msgs[0]["error"]["code"] == -32020
        # progress makes it answer with SSE
        status, rh, msgs = await answer(peer.url, *modern(
            "tools/call", 5, {"progressToken": "p"}, name="count", arguments={"n": 2}))
        assert rh["Content-Type"].startswith("text/event-stream")
        assert [m.get("method") for m in msgs] == ["notifications/progress"] * 2 + [None]
        assert msgs[-1]["result"]["content"][0]["text"] == "counted 2"
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            async with s.get(peer.url, headers={"MCP-Protocol-Version": MODERN}) as r:
                assert r.status == 405
        # dual era: initialize is served too, with a session id
        status, rh, msgs = await answer(
            peer.url, INIT, {"Accept": ACCEPT, "Content-Type": "application/json"}
        )
        assert status == 200 and "Mcp-Session-Id" in rh
        assert msgs[0]["result"]["protocolVersion"] == "2025-11-25"
    run(main())
    recs = peer.records()
    assert recs[0]["headers"]["mcp-method"] == "server/discover"
    assert recs[3]["headers"]["mcp-param-region"] == b64(" eu")


@pytest.mark.real_servers
@pytest.mark.parametrize("name", list(LEGACY_REAL))
def test_real_legacy_http_server(no_leaks, http_peer, tmp_path, name):
    record = tmp_path / "r.jsonl" if name != "ts-everything-http" else None
    peer = http_peer(*LEGACY_REAL[name](), record=record, timeout=30)
    assert peer.url.startswith("http://127.0.0.1:")
    base = {"Accept": ACCEPT, "Content-Type": "application/json"}

    async def main():
        status, _, msgs = await answer(peer.url, *modern("server/discover"))
        assert status == 400 and msgs[0]["error"]["code"] in (-32000, -32600)
        status, rh, msgs = await answer(peer.url, INIT, base)
        assert status == 200 and msgs[-1]["result"]["protocolVersion"] == "2025-11-25"
        sid = rh["Mcp-Session-Id"]
        inside = {**base, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        status, _, _ = await answer(
            peer.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, inside
        )
        assert status == 202
        arguments = {"message": "yo"} if name == "ts-everything-http" else {"text": "yo"}
        status, _, msgs = await answer(
            peer.url,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": arguments},
            },
            inside,
        )
        assert status == 200 and "yo" in msgs[-1]["result"]["content"][0]["text"]
        assert "resultType" not in msgs[-1]["result"]
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            async with s.delete(peer.url, headers=inside) as r:
                assert r.status == 200
        status, _, _ = await answer(
            peer.url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, inside
        )
        assert status in (400, 404)  # mcp 1.30.0: 404; server-everything: 400
    run(main())
    if record is not None:
        assert [r["body"]["method"] for r in peer.records()[:2]] == [
            "server/discover",
            "initialize",
        ]
