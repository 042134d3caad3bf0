"""Log messages through ``trunkline serve``: a server's log messages for a call travel on
that call's own stream to the client that made it, at the level the client asked (a
modern client in the request's ``_meta``, a legacy one with ``logging/setLevel`` for its
session), and never to another client. Every message written is schema-checked."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest

import httppeers
import realpeers
from conftest import run, scripted
from gateways import (
    BOTH,
    HttpGateway,
    StdioGateway,
    fleet_config,
    modern_meta,
    real_server,
    sse_messages,
)
from httppeers import http_peer  # noqa: F401 - a fixture
from mcp_schema import LEGACY, MODERN, conforms

LEVEL = "io.modelcontextprotocol/logLevel"
INIT = {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}


def logs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/message"]


async def streamed(gw: HttpGateway, message: dict[str, Any],
                   headers: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    async with gw.http.post(gw.url, data=orjson.dumps(message), headers=headers) as response:
        if response.content_type == "text/event-stream":
            return response.status, [m async for m in sse_messages(response)]
        return response.status, [await response.json()]


def test_stdio_clients_of_both_eras_get_their_calls_logs(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        modern = await StdioGateway.start(path, gateways)
        done = await modern.call("tools/call", {"name": "chatty", "arguments": {},
                                                "_meta": modern_meta(**{LEVEL: "notice"})})
        assert "result" in done
        assert logs(modern.notes) == [
            {"level": "info", "logger": "chatty", "data": "asked for level notice"}]
        for note in modern.notes:
            conforms(note, MODERN, "JSONRPCNotification")
        # The message came before the answer, on the same stream (stdout).
        order = [orjson.loads(line) for line in modern.raw]
        assert [("method" in m) for m in order][-2:] == [True, False]
        bad = await modern.call("tools/call", {"name": "chatty", "arguments": {},
                                               "_meta": modern_meta(**{LEVEL: "loud"})})
        assert bad["error"]["code"] == -32602 and "loud" in bad["error"]["message"]
        assert await modern.close() == 0

        legacy = await StdioGateway.start(path, gateways)
        init = await legacy.call("initialize", INIT)
        assert init["result"]["capabilities"]["logging"] == {}
        legacy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        # No level set: none asked behind the gateway, none sent.
        await legacy.call("tools/call", {"name": "chatty", "arguments": {}})
        assert logs(legacy.notes) == []
        refused = await legacy.call("logging/setLevel", {"level": "verbose"})
        assert refused["error"]["code"] == -32602
        assert (await legacy.call("logging/setLevel", {"level": "debug"}))["result"] == {}
        called = await legacy.call("tools/call", {"name": "chatty", "arguments": {}})
        conforms(called["result"], LEGACY, "CallToolResult")
        assert logs(legacy.notes) == [
            {"level": "info", "logger": "chatty", "data": "asked for level debug"}]
        for note in legacy.notes:
            conforms(note, LEGACY, "LoggingMessageNotification")
        assert await legacy.close() == 0
    run(main())


def test_http_clients_of_both_eras_get_their_calls_logs_on_its_stream(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways)
        message = gw.message("tools/call", {"name": "chatty", "arguments": {},
                                            "_meta": modern_meta(**{LEVEL: "info"})})
        status, got = await streamed(gw, message, gw.modern_headers(message, BOTH))
        assert status == 200
        *notes, answer = got
        assert logs(notes) == [
            {"level": "info", "logger": "chatty", "data": "asked for level info"}]
        assert answer["id"] == message["id"] and "result" in answer
        for note in notes:
            conforms(note, MODERN, "JSONRPCNotification")
        bad = gw.message("tools/call", {"name": "chatty", "arguments": {},
                                        "_meta": modern_meta(**{LEVEL: 7})})
        status, (answer,) = await streamed(gw, bad, gw.modern_headers(bad, BOTH))
        assert answer["error"]["code"] == -32602

        session, answer = await gw.legacy_session()
        assert answer["result"]["capabilities"]["logging"] == {}
        call = {"name": "chatty", "arguments": {}}
        status, got = await streamed(gw, gw.message("tools/call", call), session)
        assert logs(got) == []  # no level set yet
        status, answer, _ = await gw.post(gw.message("logging/setLevel", {"level": "warning"}),
                                          session)
        assert status == 200 and answer["result"] == {}
        status, got = await streamed(gw, gw.message("tools/call", call), session)
        *notes, answer = got
        assert logs(notes) == [
            {"level": "info", "logger": "chatty", "data": "asked for level warning"}]
        for note in notes:
            conforms(note, LEGACY, "LoggingMessageNotification")
        conforms(answer["result"], LEGACY, "CallToolResult")
        assert await gw.stop() == 0
    run(main())


def test_concurrent_clients_each_get_only_their_own_calls_logs(gateways, tmp_path, http_peer):
    """Behind the gateway an HTTP server's log messages are told apart by the stream they
    came on: eight clients at once, each asking for logs, each gets exactly its own."""
    argv, env = httppeers.py_http_modern()
    upstream = http_peer(argv, env)
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"remote": {"url": upstream.url}}}))

    async def one(gw: HttpGateway, n: int) -> list[dict[str, Any]]:
        message = gw.message("tools/call", {"name": "count", "arguments": {"n": n},
                                            "_meta": modern_meta(**{LEVEL: "info"})})
        status, got = await streamed(gw, message, gw.modern_headers(message, BOTH))
        assert status == 200 and got[-1]["result"]["content"][0]["text"] == f"counted {n}"
        return logs(got)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        seen = await asyncio.gather(*(one(gw, n) for n in range(1, 9)))
        for n, got in zip(range(1, 9), seen, strict=True):
            assert [(m["level"], m["data"]) for m in got] == [
                ("info", f"step {i}") for i in range(1, n + 1)], (n, got)
        assert await gw.stop() == 0
    run(main())


def test_a_prompts_log_messages_reach_the_client_that_asked_for_it(gateways, tmp_path):
    """Not only calls: a prompt read logs too (mcp 2.3.0's greet logs "greeting <name>"
    when asked), on the request's own stream over HTTP and on the connection over stdio,
    at the level the client asked."""
    path = fleet_config(tmp_path, {"py": real_server(realpeers.MODERN_PY_ECHO)})

    async def main():
        gw = await HttpGateway.start(path, gateways)
        ask = gw.message("prompts/get", {"name": "greet", "arguments": {"name": "Ada"},
                                         "_meta": modern_meta(**{LEVEL: "info"})})
        status, got = await streamed(gw, ask, gw.modern_headers(ask, BOTH))
        *notes, answer = got
        assert status == 200 and answer["id"] == ask["id"], got
        assert "Ada" in answer["result"]["messages"][0]["content"]["text"]
        assert [(m["level"], m["data"]) for m in logs(notes)] == [("info", "greeting Ada")]
        # Not asked: none sent, and the answer is plain JSON.
        quiet = gw.message("prompts/get", {"name": "greet", "arguments": {"name": "Bo"},
                                           "_meta": modern_meta()})
        status, got = await streamed(gw, quiet, gw.modern_headers(quiet, BOTH))
        assert status == 200 and logs(got) == [] and "result" in got[-1]
        assert await gw.stop() == 0

        legacy = await StdioGateway.start(path, gateways)
        await legacy.call("initialize", INIT)
        legacy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await legacy.call("logging/setLevel", {"level": "info"}))["result"] == {}
        got = await legacy.call("prompts/get", {"name": "greet", "arguments": {"name": "Lin"}})
        assert "Lin" in got["result"]["messages"][0]["content"]["text"]
        assert [(m["level"], m["data"]) for m in logs(legacy.notes)] == [
            ("info", "greeting Lin")]
        for note in legacy.notes:
            conforms(note, LEGACY, "LoggingMessageNotification")
        assert await legacy.close() == 0
    run(main(), timeout=180)


@pytest.mark.parametrize("asker", ["modern", "legacy"])
def test_a_stdio_servers_unattributed_line_reaches_no_client(gateways, tmp_path, asker):
    """Client A asks for debug logs and runs a slow call; client B asks for none and calls a
    tool of the same stdio server that logs anyway. A stdio server's line names no request,
    and two were in flight: it is neither A's nor B's, and goes to the gateway's own log
    (finding 7 of issue 36: A's stream carried all of B's lines)."""
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--log-level", "info")
        a_got: list[dict[str, Any]] = []
        a_sleeping = asyncio.Event()
        sleep = {"name": "sleep", "arguments": {"seconds": 60}}
        if asker == "modern":
            a_call = gw.message("tools/call", {**sleep, "_meta": modern_meta(
                **{LEVEL: "debug", "progressToken": "a"})})
            a_headers = gw.modern_headers(a_call, BOTH)
        else:
            a_headers, _ = await gw.legacy_session()
            status, answer, _ = await gw.post(
                gw.message("logging/setLevel", {"level": "debug"}), a_headers)
            assert status == 200 and answer["result"] == {}
            a_call = gw.message("tools/call", {**sleep, "_meta": {"progressToken": "a"}})

        async def a_reads() -> None:
            async with gw.http.post(gw.url, data=orjson.dumps(a_call),
                                    headers=a_headers) as response:
                assert response.status == 200
                async for message in sse_messages(response):
                    a_got.append(message)
                    if message.get("method") == "notifications/progress":
                        a_sleeping.set()  # A's call is with the server

        a_task = asyncio.ensure_future(a_reads())
        await asyncio.wait_for(a_sleeping.wait(), 30)

        # B asks for no logs, in the other era.
        line = "B's own line, asked by nobody"
        chatty = {"name": "chatty", "arguments": {"unasked": line}}
        if asker == "modern":
            b_headers, _ = await gw.legacy_session()
            b_call = gw.message("tools/call", chatty)
        else:
            b_call = gw.message("tools/call", {**chatty, "_meta": modern_meta()})
            b_headers = gw.modern_headers(b_call, BOTH)
        status, b_got = await streamed(gw, b_call, b_headers)
        assert status == 200 and "result" in b_got[-1], b_got
        assert logs(b_got) == [], "B asked for no logs"

        # The line goes somewhere: to the gateway's log (or, wrongly, to A's stream).
        assert gw.proc.stderr is not None
        gateway_log = b""
        for _ in range(400):
            if logs(a_got) or line.encode() in gateway_log:
                break
            try:
                gateway_log += await asyncio.wait_for(gw.proc.stderr.readline(), 0.05)
            except TimeoutError:
                pass
        assert logs(a_got) == [], "A's stream carried a line of B's call"
        assert line.encode() in gateway_log and b"server 'alpha'" in gateway_log
        assert not a_task.done(), "A's call is still in flight"

        if asker == "legacy":  # its call outlives the connection: cancelled by name
            status, _, _ = await gw.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                          "params": {"requestId": a_call["id"]}}, a_headers)
            assert status == 202
        a_task.cancel()
        await asyncio.gather(a_task, return_exceptions=True)
        assert await gw.stop() == 0
    run(main())
