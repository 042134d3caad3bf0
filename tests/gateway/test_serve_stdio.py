"""``trunkline serve CONFIG --stdio``: the fleet as one MCP server, run as a client runs it
(a subprocess, one JSON-RPC message per line), for modern and legacy clients; the official
Python SDK clients of both eras against it; every message it writes validated."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import taplog

import realpeers
from conftest import PEERS, run, scripted
from gateways import PV, SUB, StdioGateway, alive_with, fleet_config, modern_meta
from mcp_schema import LEGACY, MODERN, conforms


def test_a_modern_client_gets_one_server_with_every_tool(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted("--name", "alpha-gw-1", tap=tap),
                             "beta": scripted("--name", "beta-gw-1")})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        found = await gw.call("server/discover", {"_meta": modern_meta()})
        conforms(found["result"], MODERN, "DiscoverResult")
        assert found["result"]["supportedVersions"] == [MODERN]
        listed = await gw.call("tools/list", {"_meta": modern_meta()})
        conforms(listed["result"], MODERN, "ListToolsResult")
        names = [t["name"] for t in listed["result"]["tools"]]
        assert "alpha_echo" in names and "beta_echo" in names, names
        called = await gw.call("tools/call", {"name": "beta_echo", "arguments": {"k": 1},
                                              "_meta": modern_meta()})
        conforms(called["result"], MODERN, "CallToolResult")
        assert json.loads(called["result"]["content"][0]["text"]) == {"k": 1}
        # The result is the gateway's own: no upstream's protocol metadata in it.
        assert not any(key.startswith("io.modelcontextprotocol/")
                       for key in called["result"].get("_meta", {}))
        local = await gw.call("tools/call", {"name": "alpha_echo", "arguments": {"k": 2},
                                             "_meta": modern_meta()})
        assert json.loads(local["result"]["content"][0]["text"]) == {"k": 2}
        assert await gw.close() == 0
    run(main())
    # "alpha_echo" went to alpha under its own name; alpha never saw "beta_echo".
    calls = [m for m in taplog.messages(tap) if m.get("method") == "tools/call"]
    assert [c["params"]["name"] for c in calls] == ["echo"]
    assert not alive_with("alpha-gw-1") and not alive_with("beta-gw-1")


def test_a_legacy_client_is_served_through_initialize(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        refused = await gw.call("tools/list", {})
        assert refused["error"]["code"] == -32600, "no session before initialize"
        init = await gw.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "old", "version": "1"}})
        conforms(init["result"], LEGACY, "InitializeResult")
        assert init["result"]["protocolVersion"] == "2025-06-18"
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await gw.call("ping"))["result"] == {}
        listed = await gw.call("tools/list", {})
        conforms(listed["result"], LEGACY, "ListToolsResult")
        assert "resultType" not in listed["result"]
        called = await gw.call("tools/call", {"name": "echo", "arguments": {"v": 3}})
        conforms(called["result"], LEGACY, "CallToolResult")
        assert "resultType" not in called["result"]
        assert await gw.close() == 0
    run(main())


def test_bad_input_gets_a_precise_error_and_disturbs_nothing(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        gw.send(b"this is not json\n")
        parse = await gw.answer()
        assert "id" not in parse and parse["error"]["code"] == -32700
        old = await gw.call("tools/list", {"_meta": {PV: "2099-01-01"}})
        assert old["error"]["code"] == -32022
        assert old["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
        conforms(old, MODERN, "UnsupportedProtocolVersionError")
        unknown = await gw.call("resources/unheard_of", {"_meta": modern_meta()})
        assert unknown["error"]["code"] == -32601
        ping = await gw.call("ping", {"_meta": modern_meta()})
        assert ping["error"]["code"] == -32601, "2026-07-28 has no ping"
        missing = await gw.call("tools/call", {"name": "nope", "arguments": {},
                                               "_meta": modern_meta()})
        assert missing["error"]["code"] == -32602 and "nope" in missing["error"]["message"]
        failing = await gw.call("tools/call", {"name": "echo", "arguments": "not an object",
                                               "_meta": modern_meta()})
        assert failing["error"]["code"] == -32602
        fine = await gw.call("tools/call", {"name": "echo", "arguments": {"still": "works"},
                                            "_meta": modern_meta()})
        assert json.loads(fine["result"]["content"][0]["text"]) == {"still": "works"}
        for reply in (parse, unknown, missing, failing):
            conforms(reply, MODERN, "JSONRPCErrorResponse")
        assert await gw.close() == 0
    run(main())


def test_an_upstream_error_passes_through(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted("--tools-call", "error:-32042")})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        failed = await gw.call("tools/call", {"name": "echo", "arguments": {},
                                              "_meta": modern_meta()})
        assert failed["error"]["code"] == -32042
        assert await gw.close() == 0
    run(main())


def test_progress_reaches_the_caller_under_its_own_token_only(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        done = await gw.call("tools/call", {"name": "chatty", "arguments": {"a": 1},
                                            "_meta": modern_meta(progressToken="mine-7")})
        assert "result" in done
        progress = [n["params"] for n in gw.notes if n["method"] == "notifications/progress"]
        assert progress == [{"progressToken": "mine-7", "progress": step, "total": 3,
                             "message": f"step {step}"} for step in (1, 2, 3)], \
            "the upstream's stray token stayed behind"
        for note in gw.notes:
            conforms(note, MODERN, "ProgressNotification")
        assert await gw.close() == 0
    run(main())


def test_cancelling_a_call_cancels_it_behind_the_gateway(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        slow = gw.request("tools/call", {"name": "sleep", "arguments": {"seconds": 30},
                                         "_meta": modern_meta()})
        for _ in range(200):
            if any(m.get("method") == "tools/call" for m in taplog.messages(tap)):
                break
            await asyncio.sleep(0.05)
        gw.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": slow, "reason": "user gave up"}})
        after = await gw.call("tools/call", {"name": "echo", "arguments": {"n": 1},
                                             "_meta": modern_meta()})
        assert after["id"] != slow, "the cancelled call is never answered"
        for _ in range(200):
            if any(m.get("method") == "notifications/cancelled" for m in taplog.messages(tap)):
                break
            await asyncio.sleep(0.05)
        assert await gw.close() == 0
    run(main())
    upstream = taplog.messages(tap)
    sleep_id = next(m["id"] for m in upstream if m.get("params", {}).get("name") == "sleep")
    cancels = [m for m in upstream if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancels] == [sleep_id]


def test_a_listen_stream_hears_of_a_changed_catalog(gateways, tmp_path):
    """A server behind the gateway adds a tool at runtime (the mcp 2.x SDK); the modern
    client's open listen stream is told, and the new tool is listed and callable."""
    server = realpeers.MODERN_PY_ECHO
    params = type(scripted())(server.argv[0], (*server.argv[1:], "--listen"), dict(server.env))
    path = fleet_config(tmp_path, {"py": params})
    async def main():
        gw = await StdioGateway.start(path, gateways)
        listen = gw.request("subscriptions/listen", {
            "notifications": {"toolsListChanged": True, "promptsListChanged": True},
            "_meta": modern_meta()})
        for _ in range(400):
            if gw.notes:
                break
            await asyncio.sleep(0.05)
        ack = gw.notes[0]
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"] == {"_meta": {SUB: listen}, "notifications": {
            "toolsListChanged": True, "promptsListChanged": True}}
        added = await gw.call("tools/call", {"name": "add_tool", "arguments": {"name": "fresh"},
                                             "_meta": modern_meta()})
        assert "error" not in added, added
        for _ in range(400):
            if any(n["method"] == "notifications/tools/list_changed" for n in gw.notes):
                break
            await asyncio.sleep(0.05)
        changed = [n for n in gw.notes if n["method"] == "notifications/tools/list_changed"]
        assert changed and changed[0]["params"]["_meta"][SUB] == listen
        listed = await gw.call("tools/list", {"_meta": modern_meta()})
        assert "fresh" in [t["name"] for t in listed["result"]["tools"]]
        assert await gw.close() == 0
    run(main(), timeout=180)


@pytest.mark.real_servers
@pytest.mark.parametrize("venv", ["py-modern", "py-legacy"])
def test_the_official_python_clients_of_both_eras(gateways, tmp_path, venv):
    python = realpeers.PEERS_DIR / venv / "bin" / "python"
    path = fleet_config(tmp_path, {"alpha": scripted(), "beta": scripted("--name", "beta")})
    done = _run_sdk_client(python, "beta_echo", {"hello": venv}, path)
    assert "beta_echo" in done["tools"] and "alpha_echo" in done["tools"]
    assert json.loads(done["result"]["content"][0]["text"]) == {"hello": venv}
    if venv == "py-modern":
        assert done["sdk"].startswith("2.") and MODERN in done["protocol"]
    else:
        assert done["sdk"].startswith("1.") and done["protocol"] == LEGACY


def _run_sdk_client(python: Path, tool: str, arguments: dict, path: Path) -> dict:
    import subprocess

    done = subprocess.run(
        [str(python), str(PEERS / "sdk_client.py"), tool, json.dumps(arguments), "--",
         sys.executable, "-m", "trunkline", "serve", str(path), "--stdio"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_stdin_and_stdout_may_be_files_or_dev_null(tmp_path):
    """``serve --stdio < requests.jsonl > answers.jsonl``, and stdin or stdout on
    ``/dev/null``: served and ended cleanly (the loop cannot watch a file: before, uvloop
    aborted the process, status 134)."""
    import subprocess

    path = fleet_config(tmp_path, {"alpha": scripted("--name", "alpha-files")})
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                    "params": {"_meta": modern_meta()}}) + "\n")
    command = [sys.executable, "-m", "trunkline", "serve", str(path), "--stdio"]
    answers = tmp_path / "answers.jsonl"
    with open(requests, "rb") as stdin, open(answers, "wb") as stdout:
        done = subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                              timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    [answer] = [json.loads(line) for line in answers.read_text().splitlines()]
    assert "echo" in [t["name"] for t in answer["result"]["tools"]]
    with open(os.devnull, "rb") as nothing:
        done = subprocess.run(command, stdin=nothing, capture_output=True, timeout=120,
                              check=False)
    assert (done.returncode, done.stdout) == (0, b""), done.stderr[-2000:]
    with open(requests, "rb") as stdin:
        done = subprocess.run(command, stdin=stdin, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
