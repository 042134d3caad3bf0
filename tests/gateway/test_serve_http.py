"""``trunkline serve CONFIG --http HOST:PORT``: the fleet as one Streamable HTTP server, run
as an operator runs it (a subprocess printing ``LISTENING <url>``, stopped by SIGTERM),
spoken to with aiohttp and with the official SDK clients of both eras. Every message it
writes is validated against the schema of the era it speaks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys

import aiohttp
import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run, scripted
from gateways import (
    BOTH,
    JSON_ONLY,
    PV,
    SUB,
    HttpGateway,
    alive_with,
    fleet_config,
    modern_meta,
    sse_messages,
    wait_for_tap,
)
from mcp_schema import LEGACY, MODERN, conforms


def test_a_modern_client_gets_the_fleet_over_http(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted("--name", "alpha-http-1", tap=tap),
                                   "beta": scripted("--name", "beta-http-1")})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        status, found = await gw.modern("server/discover")
        assert status == 200
        conforms(found["result"], MODERN, "DiscoverResult")
        assert found["result"]["supportedVersions"] == [MODERN]
        _, listed = await gw.modern("tools/list")
        conforms(listed["result"], MODERN, "ListToolsResult")
        names = [t["name"] for t in listed["result"]["tools"]]
        assert "alpha_echo" in names and "beta_echo" in names, names
        _, called = await gw.modern("tools/call", {"name": "beta_echo", "arguments": {"k": 1}})
        conforms(called["result"], MODERN, "CallToolResult")
        assert json.loads(called["result"]["content"][0]["text"]) == {"k": 1}
        assert not any(key.startswith("io.modelcontextprotocol/")
                       for key in called["result"].get("_meta", {}))
        # Accepting SSE, a call streams its progress (under the caller's token), then
        # its answer, and the exchange ends.
        message = gw.message("tools/call", {"name": "chatty", "arguments": {"a": 1},
                                             "_meta": modern_meta(progressToken="tok-9")})
        async with gw.http.post(gw.url, data=orjson.dumps(message),
                                headers=gw.modern_headers(message, BOTH)) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            streamed = [m async for m in sse_messages(response)]
        *progress, last = streamed
        assert [n["params"] for n in progress] == [
            {"progressToken": "tok-9", "progress": step, "total": 3, "message": f"step {step}"}
            for step in (1, 2, 3)]
        for note in progress:
            conforms(note, MODERN, "ProgressNotification")
        assert last["id"] == message["id"] and "result" in last
        conforms(last, MODERN, "JSONRPCResultResponse")
        assert await gw.stop() == 0
    run(main())
    calls = [m for m in taplog.messages(tap) if m.get("method") == "tools/call"]
    assert [c["params"]["name"] for c in calls] == ["chatty"]
    assert not alive_with("alpha-http-1") and not alive_with("beta-http-1")


def test_headers_must_agree_with_the_body(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        call = gw.message("tools/call", {"name": "echo", "arguments": {},
                                         "_meta": modern_meta()})
        right = gw.modern_headers(call)
        for header, value in (("MCP-Protocol-Version", None), ("Mcp-Method", "tools/list"),
                              ("Mcp-Name", "other"), ("Mcp-Name", None)):
            headers = {k: v for k, v in right.items() if k != header}
            if value is not None:
                headers[header] = value
            status, answer, _ = await gw.post(call, headers)
            assert status == 400, (header, answer)
            assert answer["error"]["code"] == -32020 and answer["id"] == call["id"]
            assert answer["error"]["data"]["header"] == header
            conforms(answer, MODERN, "JSONRPCErrorResponse")
        # A version the gateway does not speak: -32022 naming what it does.
        future = gw.message("tools/list", {"_meta": {**modern_meta(), PV: "2099-01-01"}})
        status, answer, _ = await gw.post(future, gw.modern_headers(future))
        assert status == 400 and answer["error"]["code"] == -32022
        assert answer["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
        conforms(answer, MODERN, "UnsupportedProtocolVersionError")
        # Not JSON: -32700 with no id; an unknown method: 404 with -32601.
        status, answer, _ = await gw.post(b"{not json", right)
        assert status == 400 and answer["error"]["code"] == -32700 and "id" not in answer
        status, answer = await gw.modern("resources/unheard_of")
        assert status == 404 and answer["error"]["code"] == -32601
        # A notification is accepted with no body.
        status, answer, _ = await gw.post({"jsonrpc": "2.0", "method": "notifications/x",
                                           "params": {"_meta": modern_meta()}}, right)
        assert (status, answer) == (202, None)
        # GET and DELETE without a legacy session: this endpoint takes POSTs.
        for method in ("GET", "DELETE"):
            async with gw.http.request(method, gw.url, headers={"Accept": BOTH}) as response:
                assert response.status == 405 and response.headers["Allow"] == "POST"
        status, answer, _ = await gw.post(call, right)
        assert status == 200 and "result" in answer, "nothing above disturbed it"
        assert await gw.stop() == 0
    run(main())


def test_a_legacy_session_is_signed_and_served_by_the_replica_that_opened_it(gateways,
                                                                             tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    shared = {"TRUNKLINE_SESSION_KEY": "k" * 32}
    async def main():
        one, two, stranger = await asyncio.gather(
            HttpGateway.start(path, gateways, env=shared),
            HttpGateway.start(path, gateways, env=shared),
            HttpGateway.start(path, gateways, env={"TRUNKLINE_SESSION_KEY": "z" * 32}))
        headers = {"Accept": BOTH, "Content-Type": "application/json"}
        # Before initialize there is no session to speak in.
        status, answer, _ = await one.post(one.message("tools/list", {}), headers)
        assert status == 400 and answer["error"]["code"] == -32600
        init = one.message("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "old", "version": "1"}})
        status, answer, got = await one.post(init, headers)
        assert status == 200
        conforms(answer["result"], LEGACY, "InitializeResult")
        assert answer["result"]["protocolVersion"] == "2025-06-18"
        session = got["Mcp-Session-Id"]
        assert session.isascii() and session.isprintable()
        in_session = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        status, _, _ = await one.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                                      in_session)
        assert status == 202
        status, answer, _ = await one.post(one.message("tools/call", {
            "name": "echo", "arguments": {"v": 3}}), in_session)
        assert status == 200 and "resultType" not in answer["result"]
        conforms(answer["result"], LEGACY, "CallToolResult")
        assert json.loads(answer["result"]["content"][0]["text"]) == {"v": 3}
        # Another replica verifies the id but holds none of the session's state: 404, which
        # tells the client to start a new session, naming the replica that holds it.
        status, answer, _ = await two.post(two.message("tools/call", {
            "name": "echo", "arguments": {"v": 4}}), in_session)
        assert status == 404 and answer["error"]["code"] == -32600
        assert session.split(".")[0] in answer["error"]["message"], answer
        # A replica with another key, or a tampered id: 404, start over.
        status, answer, _ = await stranger.post(stranger.message("tools/list", {}), in_session)
        assert status == 404 and answer["error"]["code"] == -32600
        forged = {**in_session, "Mcp-Session-Id": session[:-2] + ("AA" if session[-2:] != "AA"
                                                                  else "BB")}
        status, _, _ = await one.post(one.message("tools/list", {}), forged)
        assert status == 404
        # The session's version is the one spoken: another is refused.
        status, answer, _ = await one.post(one.message("ping"), {
            **in_session, "MCP-Protocol-Version": "2025-11-25"})
        assert status == 400 and answer["error"]["code"] == -32600
        # Its client ends it where it is held (elsewhere: 404 naming the holder); from
        # then on its id is 404 there too.
        async with two.http.delete(two.url, headers=in_session) as response:
            assert response.status == 404
            assert session.split(".")[0] in (await response.json())["error"]["message"]
        async with one.http.delete(one.url, headers=in_session) as response:
            assert response.status == 200
        status, answer, _ = await one.post(one.message("tools/list", {}), in_session)
        assert status == 404 and answer["error"]["code"] == -32600
        async with one.http.delete(one.url, headers=in_session) as response:
            assert response.status == 404
        assert [await gw.stop() for gw in (one, two, stranger)] == [0, 0, 0]
    run(main())


def test_closing_the_exchange_cancels_the_call_behind_the_gateway(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        message = gw.message("tools/call", {"name": "sleep", "arguments": {"seconds": 30},
                                            "_meta": modern_meta()})
        async with aiohttp.ClientSession() as other:
            waiting = asyncio.ensure_future(other.post(gw.url, data=orjson.dumps(message),
                                                       headers=gw.modern_headers(message, BOTH)))
            await wait_for_tap(tap, lambda m: m.get("method") == "tools/call")
            waiting.cancel()  # the client gives up: the connection is gone
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        cancels = await wait_for_tap(tap, lambda m: m.get("method") == "notifications/cancelled")
        status, after = await gw.modern("tools/call", {"name": "echo", "arguments": {"n": 1}})
        assert status == 200 and "result" in after
        assert await gw.stop() == 0
        return cancels
    cancels = run(main())
    upstream = taplog.messages(tap)
    sleep_id = next(m["id"] for m in upstream if m.get("params", {}).get("name") == "sleep")
    assert [c["params"]["requestId"] for c in cancels] == [sleep_id]


def test_streams_hear_of_a_changed_catalog_and_end_when_the_gateway_stops(gateways, tmp_path):
    """A server behind the gateway adds a tool at runtime (the mcp 2.x SDK): a modern
    listen stream and a legacy session's GET stream are both told; SIGTERM ends the
    listen stream with its final answer."""
    server = realpeers.MODERN_PY_ECHO
    params = type(scripted())(server.argv[0], (*server.argv[1:], "--listen"), dict(server.env))
    path = fleet_config(tmp_path, {"py": params})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        listen = gw.message("subscriptions/listen", {
            "notifications": {"toolsListChanged": True, "resourcesListChanged": True},
            "_meta": modern_meta()})
        modern_stream = await gw.http.post(gw.url, data=orjson.dumps(listen),
                                           headers=gw.modern_headers(listen))
        heard = sse_messages(modern_stream)
        ack = await asyncio.wait_for(anext(heard), 30)
        assert ack == {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                       "params": {"_meta": {SUB: listen["id"]},
                                  "notifications": {"toolsListChanged": True,
                                                    "resourcesListChanged": True}}}
        init = gw.message("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "old", "version": "1"}})
        _, _, got = await gw.post(init, {"Accept": BOTH})
        legacy_stream = await gw.http.get(gw.url, headers={
            "Accept": "text/event-stream", "Mcp-Session-Id": got["Mcp-Session-Id"],
            "MCP-Protocol-Version": "2025-11-25"})
        assert legacy_stream.status == 200
        legacy_heard = sse_messages(legacy_stream)
        _, added = await gw.modern("tools/call", {"name": "add_tool",
                                                  "arguments": {"name": "fresh"}})
        assert "error" not in added, added
        changed = await asyncio.wait_for(anext(heard), 30)
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"][SUB] == listen["id"]
        conforms(changed, MODERN, "ToolListChangedNotification")
        legacy_changed = await asyncio.wait_for(anext(legacy_heard), 30)
        assert legacy_changed == {"jsonrpc": "2.0",
                                  "method": "notifications/tools/list_changed", "params": {}}
        _, listed = await gw.modern("tools/list")
        assert "fresh" in [t["name"] for t in listed["result"]["tools"]]
        # The operator stops it: the listen stream ends with its answer.
        gw.proc.send_signal(signal.SIGTERM)
        final = await asyncio.wait_for(anext(heard), 30)
        assert final == {"jsonrpc": "2.0", "id": listen["id"],
                         "result": {"resultType": "complete"}}
        modern_stream.close()
        legacy_stream.close()
        assert await gw.stop() == 0
    run(main(), timeout=180)


def test_stopping_drains_calls_in_flight(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})
    async def main():
        gw = await HttpGateway.start(path, gateways, "--drain-timeout", "30")
        slow = asyncio.ensure_future(gw.modern("tools/call", {
            "name": "sleep", "arguments": {"seconds": 1.5}}))
        await wait_for_tap(tap, lambda m: m.get("method") == "tools/call")
        gw.proc.send_signal(signal.SIGTERM)
        status, answer = await slow
        assert status == 200 and "result" in answer, "the call in flight finished"
        assert await gw.stop() == 0
    run(main())
    assert not any(m.get("method") == "notifications/cancelled" for m in taplog.messages(tap))


def test_a_body_over_the_limit_is_413_and_the_gateway_goes_on(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await HttpGateway.start(path, gateways, "--max-body-bytes", "4096")
        big = gw.message("tools/call", {"name": "echo", "arguments": {"x": "y" * 5000},
                                        "_meta": modern_meta()})
        status, answer, _ = await gw.post(big, gw.modern_headers(big))
        assert status == 413 and "4096" in answer["error"]["message"]
        # Chunked, so the length is not known up front: still refused, still 413.
        async def chunks():
            body = orjson.dumps(big)
            for at in range(0, len(body), 1000):
                yield body[at:at + 1000]
        async with gw.http.post(gw.url, data=chunks(), headers=gw.modern_headers(big)) as r:
            assert r.status == 413
        # A client that writes its whole body before it reads (as most do) reads the 413,
        # though the gateway answered before the body was in: what came after the answer
        # was read and dropped, not met with a reset.
        head = gw.url.split("/")[2]
        size = 8 * 1024 * 1024
        raw = socket.create_connection(("127.0.0.1", int(head.rsplit(":", 1)[1])), timeout=30)
        request = (f"POST /mcp HTTP/1.1\r\nHost: {head}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {size}\r\n\r\n").encode()
        await asyncio.get_running_loop().run_in_executor(
            None, raw.sendall, request + b" " * size)
        assert raw.recv(4096).startswith(b"HTTP/1.1 413 ")
        raw.close()
        status, answer = await gw.modern("tools/call", {"name": "echo", "arguments": {"x": 1}})
        assert status == 200 and "result" in answer
        assert await gw.stop() == 0
    run(main())


def test_hosts_origins_and_api_keys(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    key = "sk-trunkline-test-0123456789abcdef"
    async def main():
        gw = await HttpGateway.start(path, gateways, env={"TRUNKLINE_API_KEYS": f"other,{key}"})
        message = gw.message("tools/list", {"_meta": modern_meta()})
        headers = gw.modern_headers(message)
        status, answer, got = await gw.post(message, headers)
        assert status == 401 and got["WWW-Authenticate"].startswith("Bearer")
        status, answer, _ = await gw.post(message, {**headers, "Authorization": "Bearer nope"})
        assert status == 401 and key not in json.dumps(answer)
        authorized = {**headers, "Authorization": f"Bearer {key}"}
        status, answer, _ = await gw.post(message, authorized)
        assert status == 200 and "result" in answer
        # DNS rebinding: a name pointed at 127.0.0.1, or a page from elsewhere.
        status, _, _ = await gw.post(message, {**authorized, "Host": "evil.example"})
        assert status == 403
        status, _, _ = await gw.post(message, {**authorized, "Origin": "http://evil.example"})
        assert status == 403
        port = gw.url.split(":")[2].split("/")[0]
        status, _, _ = await gw.post(message, {**authorized,
                                               "Origin": f"http://localhost:{port}"})
        assert status == 200
        # An origin is scheme, host and port: a page of another program on this host
        # (another port), or one served over TLS, is not the gateway's.
        elsewhere = "9999" if port != "9999" else "9998"
        for origin in (f"http://localhost:{elsewhere}", f"http://127.0.0.1:{elsewhere}",
                       f"https://localhost:{port}", "http://localhost", "null"):
            status, _, _ = await gw.post(message, {**authorized, "Origin": origin})
            assert status == 403, origin
        assert await gw.stop() == 0
        assert key.encode() not in gw.stderr
    run(main())


def test_the_names_clients_reach_the_gateway_by_are_served_and_no_other(gateways, tmp_path):
    """``--host-name``: a gateway behind a load balancer or a DNS name answers requests
    addressed to it (and pages of it, by Origin); any other name is still refused, and
    the refusal says how to name one."""
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await HttpGateway.start(path, gateways, "--host-name", "gw.example",
                                     "--host-name", "10.0.0.7")
        port = gw.url.split(":")[2].split("/")[0]
        message = gw.message("tools/list", {"_meta": modern_meta()})
        headers = gw.modern_headers(message)
        for host in (f"gw.example:{port}", "GW.example", "10.0.0.7:8443", f"127.0.0.1:{port}"):
            status, answer, _ = await gw.post(message, {**headers, "Host": host})
            assert status == 200 and "result" in answer, (host, answer)
        status, _, _ = await gw.post(message, {**headers, "Host": f"gw.example:{port}",
                                               "Origin": f"http://gw.example:{port}"})
        assert status == 200
        status, answer, _ = await gw.post(message, {**headers, "Host": "evil.example"})
        assert status == 403 and "--host-name" in answer["error"]["message"]
        assert await gw.stop() == 0
    run(main())


def test_a_calls_timeout_from_the_command_line_and_from_its_servers_entry(gateways, tmp_path):
    """``serve --call-timeout`` is the calls' default; a server's ``callTimeoutMs`` is its
    own (here shorter for one server, longer for the other)."""
    path = fleet_config(tmp_path, {"quick": scripted("--tools", "sleep"),
                                   "patient": scripted("--tools", "sleep")})
    config = json.loads(path.read_text())
    config["mcpServers"]["quick"]["callTimeoutMs"] = 300
    path.write_text(json.dumps(config))
    async def main():
        gw = await HttpGateway.start(path, gateways, "--call-timeout", "1.5")
        status, answer = await gw.modern("tools/call", {"name": "quick_sleep",
                                                        "arguments": {"seconds": 1}})
        assert "error" in answer and "0.3 s" in answer["error"]["message"], answer
        status, answer = await gw.modern("tools/call", {"name": "patient_sleep",
                                                        "arguments": {"seconds": 0.5}})
        assert status == 200 and "result" in answer, answer
        status, answer = await gw.modern("tools/call", {"name": "patient_sleep",
                                                        "arguments": {"seconds": 5}})
        assert "error" in answer and "1.5 s" in answer["error"]["message"], answer
        assert await gw.stop() == 0
    run(main())


def test_a_public_bind_without_api_keys_is_refused(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    done = subprocess.run([sys.executable, "-m", "trunkline", "serve", str(path), "--http",
                           "0.0.0.0:0"], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "TRUNKLINE_API_KEYS"})
    assert done.returncode != 0 and "LISTENING" not in done.stdout
    assert "API keys" in done.stderr


def test_health_and_readiness(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted(),
                                   "broken": scripted("--discover", "exit:3",
                                                      "--initialize", "exit:3")})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        async with gw.http.get(f"{gw.base}/healthz") as response:
            assert response.status == 200 and await response.json() == {"status": "ok"}
        async with gw.http.get(f"{gw.base}/readyz") as response:
            ready = await response.json()
        assert response.status == 200 and ready["ready"] is True
        assert ready["unavailable"] == ["broken"] and ready["tools"] > 0
        assert await gw.stop() == 0
    run(main())


@pytest.mark.real_servers
@pytest.mark.parametrize("venv", ["py-modern", "py-legacy"])
def test_the_official_python_clients_of_both_eras_over_http(gateways, tmp_path, venv):
    path = fleet_config(tmp_path, {"alpha": scripted(), "beta": scripted("--name", "beta")})
    python = realpeers.PEERS_DIR / venv / "bin" / "python"
    async def main():
        gw = await HttpGateway.start(path, gateways)
        client = await asyncio.create_subprocess_exec(
            str(python), str(PEERS / "sdk_client.py"), "beta_echo",
            json.dumps({"hello": venv}), "--", gw.url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(client.communicate(), 120)
        assert client.returncode == 0, err.decode()[-3000:]
        assert await gw.stop() == 0
        return json.loads(out.decode().strip().splitlines()[-1])
    done = run(main())
    assert "beta_echo" in done["tools"] and "alpha_echo" in done["tools"]
    assert json.loads(done["result"]["content"][0]["text"]) == {"hello": venv}
    if venv == "py-modern":
        assert done["sdk"].startswith("2.") and MODERN in done["protocol"]
    else:
        assert done["sdk"].startswith("1.") and done["protocol"] == LEGACY


def test_a_flood_is_refused_with_retry_after_and_disturbs_no_one(gateways, tmp_path, tap):
    beta_tap = tmp_path / "beta-tap.jsonl"
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap), "beta": scripted(tap=beta_tap)})
    async def main():
        gw = await HttpGateway.start(path, gateways, "--max-per-server", "2",
                                     "--max-in-flight", "3")
        def sleeping(seconds: float) -> dict:
            return {"name": "sleep", "arguments": {"seconds": seconds}}
        slow = [asyncio.ensure_future(gw.modern("tools/call", sleeping(60))) for _ in range(2)]
        for _ in range(400):
            if len([m for m in taplog.messages(tap) if m.get("method") == "tools/call"]) == 2:
                break
            await asyncio.sleep(0.025)
        # alpha has its two: a third is refused at once, as JSON even to an SSE client.
        for accept in (JSON_ONLY, BOTH):
            message = gw.message("tools/call", {**sleeping(0), "_meta": modern_meta()})
            status, answer, got = await gw.post(message, gw.modern_headers(message, accept))
            assert status == 429 and got["Retry-After"] == "1"
            assert got["Content-Type"].startswith("application/json")
            assert answer["error"]["data"] == {"kind": "Overloaded", "scope": "server",
                                               "limit": 2, "retryAfterS": 1, "server": "alpha"}
            conforms(answer, MODERN, "JSONRPCErrorResponse")
        # beta is not alpha: its calls go on, until the gateway as a whole is full.
        status, answer = await gw.modern("tools/call", {"name": "beta_echo", "arguments": {}})
        assert status == 200 and "result" in answer
        beta_slow = asyncio.ensure_future(gw.modern("tools/call", {
            "name": "beta_sleep", "arguments": {"seconds": 60}}))
        await wait_for_tap(beta_tap, lambda m: m.get("params", {}).get("name") == "sleep")
        status, answer = await gw.modern("tools/call", {"name": "beta_echo", "arguments": {}})
        assert status == 503 and answer["error"]["data"]["scope"] == "gateway"
        assert not any(task.done() for task in (*slow, beta_slow)), "none was disturbed"
        # The clients give up on their slow calls: that frees their places.
        for task in (*slow, beta_slow):
            task.cancel()
        for _ in range(400):
            status, answer = await gw.modern("tools/call", {"name": "echo",
                                                            "arguments": {"ok": 1}})
            if status == 200:
                break
            await asyncio.sleep(0.025)
        assert status == 200 and "result" in answer
        assert await gw.stop() == 0
    run(main())


def test_a_modern_request_missing_its_meta_is_400(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        headers = {"Accept": BOTH, "Content-Type": "application/json",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}
        for meta in ({}, {"io.modelcontextprotocol/clientCapabilities": {}},
                     {PV: MODERN}, {PV: MODERN, "io.modelcontextprotocol/clientCapabilities": 7}):
            message = gw.message("server/discover", {"_meta": meta})
            status, answer, _ = await gw.post(message, headers)
            assert status == 400 and answer["error"]["code"] == -32602, (meta, answer)
            assert answer["id"] == message["id"]
        # A body naming another revision than its header: -32020, not -32022.
        other = gw.message("server/discover", {"_meta": {**modern_meta(), PV: "v999.0.0"}})
        status, answer, _ = await gw.post(other, headers)
        assert status == 400 and answer["error"]["code"] == -32020
        # initialize is no 2026-07-28 method.
        init = gw.message("initialize", {"protocolVersion": MODERN, "capabilities": {},
                                         "clientInfo": {"name": "x", "version": "1"},
                                         "_meta": modern_meta()})
        status, answer, _ = await gw.post(init, {**headers, "Mcp-Method": "initialize"})
        assert status == 404 and answer["error"]["code"] == -32601
        assert await gw.stop() == 0
    run(main())


def test_a_call_to_a_gone_servers_tool_names_the_server(gateways, tmp_path):
    """beta crashes on every call until its restarts run out: its tools leave the list,
    a call to one says which server and why, and alpha is untouched."""
    path = fleet_config(tmp_path, {"alpha": scripted(), "beta": scripted("--name", "beta")})
    async def main():
        gw = await HttpGateway.start(path, gateways)
        for _ in range(40):
            async with gw.http.get(f"{gw.base}/readyz") as response:
                if (await response.json())["unavailable"] == ["beta"]:
                    break
            await gw.modern("tools/call", {"name": "beta_crash", "arguments": {}})
        else:
            raise AssertionError("beta never became unavailable")
        _, listed = await gw.modern("tools/list")
        assert not any(t["name"].startswith("beta_") for t in listed["result"]["tools"])
        status, gone = await gw.modern("tools/call", {"name": "beta_echo", "arguments": {}})
        assert gone["error"]["code"] == -32602
        assert gone["error"]["data"] == {"server": "beta", "state": "unavailable"}
        assert "'beta' is unavailable" in gone["error"]["message"], gone
        status, never = await gw.modern("tools/call", {"name": "nope", "arguments": {}})
        assert never["error"]["code"] == -32602 and "data" not in never["error"]
        status, fine = await gw.modern("tools/call", {"name": "echo", "arguments": {"a": 1}})
        assert status == 200 and "result" in fine
        assert await gw.stop() == 0
    run(main())


def test_model_safe_names_are_served_and_called(gateways, tmp_path):
    import re

    path = fleet_config(tmp_path, {"alpha": scripted(), "beta": scripted("--name", "beta")})
    async def main():
        gw = await HttpGateway.start(path, gateways, "--model-safe-names")
        _, listed = await gw.modern("tools/list")
        names = [t["name"] for t in listed["result"]["tools"]]
        assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in names), names
        [beta_echo] = [n for n in names if "beta" in n and "echo" in n]
        _, called = await gw.modern("tools/call", {"name": beta_echo, "arguments": {"m": 1}})
        assert json.loads(called["result"]["content"][0]["text"]) == {"m": 1}
        assert await gw.stop() == 0
    run(main())
