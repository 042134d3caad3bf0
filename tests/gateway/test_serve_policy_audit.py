"""``trunkline serve --http`` with a policy, named API keys and ``--audit FILE``, in front
of a real server (the echo peer on the official Python SDK 2.x): every call the policy
lets through, refuses or hides, and every call a bound refuses, leaves one record naming
the key's identity, the rule and the outcome, and never an argument's value; SIGHUP puts a
new policy in force without dropping a connection, and a policy that does not compile
keeps the old one."""

from __future__ import annotations

import asyncio
import json
import signal

import orjson
import pytest

import realpeers
from conftest import run
from gateways import HttpGateway

pytestmark = pytest.mark.real_servers

KEYS = {"keys": [
    {"name": "support-bot", "key": "support-bot-key-0123456789", "groups": ["support"]},
    {"name": "reader", "key": "reader-key-0123456789abcdef"}]}
SUPPORT = "support-bot-key-0123456789"
READER = "reader-key-0123456789abcdef"

POLICY = {"rules": [
    {"id": "echo-for-support", "allow": ["list", "call"], "servers": ["echo"],
     "when": "'support' in identity.groups"},
    {"id": "reader-lists-echo", "allow": ["list"], "tools": ["echo/echo"],
     "when": "identity.subject == 'reader'"},
    {"id": "no-sleep", "deny": ["call"], "tools": ["echo/sleep"]},
]}


def write_fleet(tmp_path, policy):
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    (tmp_path / "keys.json").write_text(json.dumps(KEYS))
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({
        "mcpServers": {"echo": {"command": server.argv[0], "args": server.argv[1:],
                                "env": dict(server.env)}},
        "policy": "policy.json"}))
    return path


async def call(gw, key, name, arguments, request_id=1):
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments,
                          "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                    "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {**gw.modern_headers(message, "application/json"),
               "Authorization": f"Bearer {key}"}
    async with gw.http.post(gw.url, data=orjson.dumps(message), headers=headers) as response:
        return response.status, await response.read()


async def listed(gw, key):
    message = {"jsonrpc": "2.0", "id": 9, "method": "tools/list",
               "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                    "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {**gw.modern_headers(message, "application/json"),
               "Authorization": f"Bearer {key}"}
    async with gw.http.post(gw.url, data=orjson.dumps(message), headers=headers) as response:
        assert response.status == 200
        return sorted(t["name"] for t in (await response.json())["result"]["tools"])


async def logged(gw, text):
    """The gateway's stderr line saying ``text``, read as it comes."""
    while True:
        line = await asyncio.wait_for(gw.proc.stderr.readline(), 30)
        assert line, f"the gateway ended without logging {text!r}"
        if text.encode() in line:
            return line.decode()


async def records(path, count):
    for _ in range(400):
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} audit records never came: {path.read_text()!r}")


def test_every_decision_leaves_one_record_and_no_argument_value(tmp_path, gateways):
    config = write_fleet(tmp_path, POLICY)
    trail = tmp_path / "audit.jsonl"

    async def main():
        gw = await HttpGateway.start(
            config, gateways, "--api-key-file", str(tmp_path / "keys.json"),
            "--audit", str(trail), "--audit-hash-arguments",
            env={"TRUNKLINE_AUDIT_KEY": "k" * 32})
        try:
            assert await listed(gw, READER) == ["echo"]
            status, body = await call(gw, SUPPORT, "echo", {"text": "secret-words"})
            assert status == 200 and b"secret-words" in body
            status, body = await call(gw, SUPPORT, "sleep", {"ms": 1}, 2)
            assert orjson.loads(body)["error"]["code"] == -32003
            assert b"no-sleep" not in body  # the rule is the operator's to know
            _, hidden = await call(gw, READER, "sleep", {"ms": 1}, 3)
            _, unknown = await call(gw, READER, "nothing_here", {}, 5)
            assert hidden == unknown.replace(b"nothing_here", b"sleep").replace(
                b'"id":5', b'"id":3')
            _, listed_only = await call(gw, READER, "echo", {"text": "secret-words"}, 4)
            assert orjson.loads(listed_only)["error"]["code"] == -32003
            got = await records(trail, 5)
        finally:
            await gw.stop()
        by_id = {r["request_id"]: r for r in got}
        assert by_id[1]["decision"] == "allowed" and by_id[1]["rule"] == "echo-for-support"
        assert by_id[1]["outcome"] == "ok" and by_id[1]["server"] == "echo"
        assert by_id[1]["identity"] == {"kind": "api_key", "subject": "support-bot"}
        assert by_id[1]["arguments_hash"].startswith("hmac-sha256:")
        assert (by_id[2]["decision"], by_id[2]["rule"]) == ("denied", "no-sleep")
        assert "outcome" not in by_id[2]
        assert by_id[3]["decision"] == "denied" and by_id[3]["error"] == "ToolHidden"
        assert by_id[4]["decision"] == "denied" and by_id[4]["identity"]["subject"] == "reader"
        assert (by_id[5]["decision"], by_id[5]["error"]) == ("denied", "UnknownTool")
        assert len(got) == 5
        text = trail.read_text()
        assert "secret-words" not in text and SUPPORT not in text and READER not in text
        assert (trail.stat().st_mode & 0o777) == 0o600
    run(main())


def test_sighup_changes_the_policy_and_a_broken_one_keeps_the_old(tmp_path, gateways):
    config = write_fleet(tmp_path, POLICY)

    async def main():
        gw = await HttpGateway.start(config, gateways, "--api-key-file",
                                     str(tmp_path / "keys.json"))
        try:
            assert await listed(gw, READER) == ["echo"]
            # A policy that does not compile: refused, logged, the old one stays.
            (tmp_path / "policy.json").write_text(json.dumps({"rules": [
                {"id": "broken", "allow": ["list"], "when": "identity.groups +"}]}))
            gw.proc.send_signal(signal.SIGHUP)
            said = await logged(gw, "configuration not reloaded")
            assert "rule 'broken'" in said and "does not compile" in said
            assert await listed(gw, READER) == ["echo"]
            (tmp_path / "policy.json").write_text(json.dumps({"rules": [
                {"id": "reader-all", "allow": ["list", "call"],
                 "when": "identity.subject == 'reader'"}]}))
            gw.proc.send_signal(signal.SIGHUP)
            said = await logged(gw, "policy reloaded from")
            assert "1 rules" in said
            assert len(await listed(gw, READER)) == 10
            status, body = await call(gw, READER, "echo", {"text": "now"})
            assert status == 200 and b"now" in body
            assert await listed(gw, SUPPORT) == []  # the new policy grants it nothing
        finally:
            await gw.stop()
    run(main())


def test_a_policy_that_does_not_compile_refuses_to_start(tmp_path, gateways):
    config = write_fleet(tmp_path, {"rules": [{"id": "bad-one", "allow": ["list"],
                                               "when": "1 +"}]})

    async def main():
        with pytest.raises(AssertionError) as failed:
            await HttpGateway.start(config, gateways)
        said = str(failed.value)
        assert "bad-one" in said and "does not compile" in said
        assert "Traceback" not in said
    run(main())


def test_a_legacy_session_with_a_key_gives_back_what_its_calls_held(tmp_path, gateways):
    """A 2025-11-25 session's calls (answered as SSE streams, admitted before they start)
    count against the key's identity and are given back when they end: with
    ``client_calls=2``, call after call is served (before, each was admitted under the
    session and released under the identity, and the third was refused)."""
    config = write_fleet(tmp_path, {"rules": [{"id": "all", "allow": ["list", "call"]}]})

    async def main():
        gw = await HttpGateway.start(config, gateways, "--api-key-file",
                                     str(tmp_path / "keys.json"), "--limit", "client_calls=2")
        try:
            gw.http.headers["Authorization"] = f"Bearer {READER}"
            headers, _ = await gw.legacy_session()
            for n in range(5):
                message = gw.message("tools/call", {"name": "echo",
                                                    "arguments": {"text": f"call {n}"}})
                status, answer, _ = await gw.post(message, headers)
                assert status == 200 and f"call {n}" in json.dumps(answer), answer
        finally:
            await gw.stop()
        assert b"KeyError" not in gw.stderr
    run(main())


def test_hidden_prompts_and_resources_are_answered_as_missing_ones(tmp_path, gateways):
    """Prompts, resources and completion under a policy: listed per identity, and one the
    identity may not see refused with the very bytes a missing one gets (only the name
    differs), in both eras."""
    config = write_fleet(tmp_path, {"rules": [
        {"id": "tools", "allow": ["list", "call"], "tools": ["*"]},
        {"id": "about-for-support", "allow": ["list", "call"], "resources": ["echo://about"],
         "when": "'support' in identity.groups"},
        {"id": "greet-for-support", "allow": ["list", "call"], "prompts": ["greet"],
         "when": "'support' in identity.groups"}]})

    async def ask(gw, key, method, params, request_id=7):
        message = gw.message(method, {**params, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}})
        message["id"] = request_id
        headers = {**gw.modern_headers(message, "application/json"),
                   "Authorization": f"Bearer {key}"}
        async with gw.http.post(gw.url, data=orjson.dumps(message),
                                headers=headers) as response:
            return await response.read()

    async def main():
        gw = await HttpGateway.start(config, gateways, "--api-key-file",
                                     str(tmp_path / "keys.json"))
        try:
            support = orjson.loads(await ask(gw, SUPPORT, "resources/list", {}))
            assert [r["uri"] for r in support["result"]["resources"]] == ["echo://about"]
            read = orjson.loads(await ask(gw, SUPPORT, "resources/read",
                                          {"uri": "echo://about"}))
            assert "trunkline modern echo peer" in json.dumps(read["result"])
            prompts = orjson.loads(await ask(gw, SUPPORT, "prompts/list", {}))
            assert [p["name"] for p in prompts["result"]["prompts"]] == ["greet"]
            for method, member in (("resources/list", "resources"),
                                   ("prompts/list", "prompts"),
                                   ("resources/templates/list", "resourceTemplates")):
                listed = orjson.loads(await ask(gw, READER, method, {}))
                assert listed["result"][member] == [], listed
            hidden = await ask(gw, READER, "prompts/get", {"name": "greet",
                                                            "arguments": {"name": "x"}})
            missing = await ask(gw, READER, "prompts/get", {"name": "gone",
                                                             "arguments": {"name": "x"}})
            assert hidden == missing.replace(b"gone", b"greet") and b"error" in hidden
            hidden = await ask(gw, READER, "completion/complete", {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "name", "value": "a"}})
            missing = await ask(gw, READER, "completion/complete", {
                "ref": {"type": "ref/prompt", "name": "gone"},
                "argument": {"name": "name", "value": "a"}})
            assert hidden == missing.replace(b"gone", b"greet") and b"error" in hidden
            hidden = await ask(gw, READER, "resources/read", {"uri": "echo://about"})
            assert orjson.loads(hidden)["error"]["data"] == {"uri": "echo://about"}
            # The legacy era: the same, in its own words (-32002 for a resource).
            gw.http.headers["Authorization"] = f"Bearer {READER}"
            headers, _ = await gw.legacy_session()
            answers = []
            for name in ("greet", "gone"):
                message = gw.message("prompts/get", {"name": name, "arguments": {"name": "x"}})
                message["id"] = 1
                _, answer, _ = await gw.post(message, headers)
                answers.append(json.dumps(answer).replace("gone", "greet"))
            assert answers[0] == answers[1] and "error" in answers[0]
            message = gw.message("resources/read", {"uri": "echo://about"})
            _, answer, _ = await gw.post(message, headers)
            assert answer["error"]["code"] == -32002
        finally:
            await gw.stop()
    run(main())


def test_tool_search_calls_are_recorded_too(tmp_path, gateways):
    """With ``--tool-search``, a ``call_tool`` of a tool the identity may not see is
    refused by the gateway itself, and still leaves its record: the real tool named."""
    config = write_fleet(tmp_path, POLICY)
    trail = tmp_path / "audit.jsonl"

    async def main():
        gw = await HttpGateway.start(config, gateways, "--api-key-file",
                                     str(tmp_path / "keys.json"), "--tool-search",
                                     "--audit", str(trail))
        try:
            _, body = await call(gw, READER, "call_tool",
                                 {"name": "sleep", "arguments": {"ms": 1}}, 1)
            assert orjson.loads(body)["result"]["isError"] is True
            _, body = await call(gw, SUPPORT, "call_tool",
                                 {"name": "echo", "arguments": {"text": "x"}}, 2)
            assert orjson.loads(body)["result"].get("isError") is not True
            got = {r["request_id"]: r for r in await records(trail, 2)}
        finally:
            await gw.stop()
        assert (got[1]["decision"], got[1]["error"], got[1]["target"]) == (
            "denied", "ToolHidden", "sleep")
        assert (got[2]["decision"], got[2]["rule"], got[2]["target"]) == (
            "allowed", "echo-for-support", "echo")
    run(main())
