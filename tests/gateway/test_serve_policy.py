"""``trunkline serve --http`` with an authorization policy, end to end: in front of real
servers (server-everything on the TypeScript SDK 1.x, whose tools carry annotations;
mcp-server-time and the echo peer on the official Python SDK 2.x), for three users whose
tokens a real OpenID Connect provider issues with their groups (mock-oauth2-server:
tests/oidc.py) and two named API keys. What each identity is listed and may call is
written out by hand from ``POLICY`` (``SEES``), and checked through the official clients
(mcp 2.x and 1.x, the TypeScript SDK v2 and 1.x): a tool one may not see is answered byte
for byte as one no server has, even when its server is busy; ``--tool-search`` finds only
what one may see; bad tokens and bad policies are refused with a clear error; SIGHUP
changes the policy under load.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_serve_ts_clients import CLIENT_DIR, CLIENT_SRC, node_document, require_client

import realpeers
from conftest import PEERS, run, scripted
from gateways import JSON_ONLY, HttpGateway, last_document, modern_meta
from mcp_schema import LEGACY, MODERN
from oidc import GROUPS, MANY_GROUPS, start_provider

pytestmark = pytest.mark.real_servers

SCOPE = "mcp:tools"
#: The tools each server's entry lets through (``enabledTools``): a fixed catalog, whatever
#: server-everything adds once it sees the gateway's capabilities.
ENABLED = {"ev": ["echo", "get-sum", "gzip-file-as-resource", "toggle-simulated-logging"],
           "time": ["get_current_time", "convert_time"],
           "echo": ["echo", "search", "sleep"]}
#: The catalog's names (``echo`` is on two servers, so each is prefixed), and their
#: annotations as the servers declare them: server-everything's ``echo`` and ``get-sum`` and
#: mcp-server-time's tools are ``readOnlyHint: true``; server-everything's other two
#: ``readOnlyHint: false``; the echo peer's tools declare none (``readOnlyHint`` false).
EVERY = {"ev_echo", "get-sum", "gzip-file-as-resource", "toggle-simulated-logging",
         "get_current_time", "convert_time", "echo_echo", "search", "sleep"}

POLICY: dict[str, Any] = {"rules": [
    # A group's server.
    {"id": "sre-runs-echo", "allow": ["list", "call"], "servers": ["echo"],
     "when": "'sre' in identity.groups"},
    # What is read-only (by the server's annotations), for people.
    {"id": "people-read", "allow": ["list", "call"], "tools": ["*"],
     "annotations": {"readOnlyHint": True}, "when": "identity.kind == 'oauth'"},
    {"id": "oncall-writes", "allow": ["list", "call"], "servers": ["ev"],
     "annotations": {"readOnlyHint": False}, "when": "'oncall' in identity.groups"},
    # A write needs the admin scope, whoever allowed it.
    {"id": "writes-need-admin", "deny": ["call"], "servers": ["ev"],
     "annotations": {"readOnlyHint": False}, "when": "!('admin' in identity.scopes)"},
    # Listed, not called...
    {"id": "support-sees-echo", "allow": ["list"], "servers": ["echo"],
     "when": "'support' in identity.groups"},
    # ... but for a call whose arguments say it greets.
    {"id": "support-greets", "allow": ["call"], "tools": ["echo/echo"],
     "when": "'support' in identity.groups",
     "arguments": "arguments.text.startsWith('hello')"},
    # One API key by its name, another by an attribute.
    {"id": "ci-bot-ev", "allow": ["list", "call"], "servers": ["ev"],
     "when": "identity.kind == 'api_key' && identity.subject == 'ci-bot'"},
    {"id": "finance-time", "allow": ["list", "call"], "servers": ["time"],
     "when": "'team' in identity.attributes && identity.attributes.team == 'finance'"},
    # A deny on listing hides what an allow granted.
    {"id": "keys-convert-nothing", "deny": ["list"], "tools": ["time/convert_time"],
     "when": "identity.kind == 'api_key'"},
]}

KEYS = {"ci-bot": "sk-policy-ci-bot-0123456789abcdef",
        "reporter": "sk-policy-reporter-0123456789abcdef"}
KEY_FILE = {"keys": [
    {"name": "ci-bot", "key": KEYS["ci-bot"], "groups": ["ci"]},
    {"name": "reporter", "key": KEYS["reporter"], "groups": ["reporting"],
     "attributes": {"team": "finance"}}]}
#: Each OAuth user's scopes as asked for (the groups are the provider's: oidc.GROUPS).
SCOPES = {"sre": f"{SCOPE} admin", "support": SCOPE, "intern": SCOPE}

#: By hand from POLICY: what each identity is listed, and of that what it may call
#: (``support`` calls ``echo_echo`` only with a greeting: ``GREETING`` and ``NOT_A_GREETING``).
SEES: dict[str, tuple[set[str], set[str]]] = {
    # sre-runs-echo, people-read, oncall-writes; admin: writes-need-admin does not apply.
    "sre": (EVERY, EVERY),
    # people-read; support-sees-echo (list only), support-greets (echo_echo, on arguments).
    "support": ({"ev_echo", "get-sum", "get_current_time", "convert_time", "echo_echo",
                 "search", "sleep"},
                {"ev_echo", "get-sum", "get_current_time", "convert_time", "echo_echo"}),
    # people-read only.
    "intern": ({"ev_echo", "get-sum", "get_current_time", "convert_time"},
               {"ev_echo", "get-sum", "get_current_time", "convert_time"}),
    # ci-bot-ev; no admin scope: writes-need-admin refuses the two writes.
    "ci-bot": ({"ev_echo", "get-sum", "gzip-file-as-resource", "toggle-simulated-logging"},
               {"ev_echo", "get-sum"}),
    # finance-time; keys-convert-nothing hides convert_time.
    "reporter": ({"get_current_time"}, {"get_current_time"}),
}
GREETING = {"text": "hello from support"}
NOT_A_GREETING = {"text": "goodbye"}
ARGUMENTS: dict[str, dict[str, Any]] = {
    "ev_echo": {"message": "hi"}, "get-sum": {"a": 2, "b": 3},
    "gzip-file-as-resource": {"name": "hi.gz", "data": "data:text/plain;base64,aGk=",
                              "outputType": "resource"},
    "toggle-simulated-logging": {}, "get_current_time": {"timezone": "UTC"},
    "convert_time": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"},
    "echo_echo": GREETING, "search": {"query": "q", "limit": 2}, "sleep": {"ms": 1},
}
UNKNOWN = "no_such_tool_anywhere"


def unknown_tool(name: str) -> dict[str, Any]:
    """The error for a tool name the catalog does not have (and for one hidden)."""
    return {"code": -32602, "message": f"no tool named {name!r} in the catalog"}


def not_permitted(name: str) -> dict[str, Any]:
    return {"code": -32003, "message": f"calling tool {name!r} is not permitted",
            "data": {"kind": "NotPermitted"}}


def config(tmp_path: Path, servers: tuple[str, ...] = ("ev", "time", "echo")) -> Path:
    """The fleet (``servers`` of ev, time, echo), its policy in ``policy.json`` beside it
    (``POLICY`` unless written already), and the API keys in ``keys.json``."""
    real = {"ev": realpeers.LEGACY_TS_EVERYTHING, "time": realpeers.MODERN_PY_TIME,
            "echo": realpeers.MODERN_PY_ECHO}
    entries = {}
    for name in servers:
        server = realpeers.require(real[name])
        entries[name] = {"command": server.argv[0], "args": server.argv[1:],
                         "env": dict(server.env), "enabledTools": ENABLED[name]}
    if "ev" in entries:
        entries["ev"]["allowLegacy"] = True  # server-everything speaks 2025-11-25 only
    if not (tmp_path / "policy.json").exists():
        (tmp_path / "policy.json").write_text(json.dumps(POLICY))
    (tmp_path / "keys.json").write_text(json.dumps(KEY_FILE))
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": entries, "policy": "policy.json"}))
    return path


async def start(path: Path, gateways: Any, provider: Any, *flags: str) -> HttpGateway:
    return await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                   "--oauth-scopes", SCOPE, "--api-key-file",
                                   str(path.parent / "keys.json"), *flags)


async def credentials(gw: HttpGateway, provider: Any) -> dict[str, str]:
    """Each identity's bearer credential for ``gw``: a token from the provider for each
    user (its ``aud`` this gateway), the key's value for each API key."""
    said = dict(KEYS)
    for user, scope in SCOPES.items():
        said[user] = await provider.token(gw.url, scope, client_id=user)
    return said


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@pytest.fixture(scope="module")
def provider():
    started = start_provider()
    yield started
    started.stop()


# -- each identity, through the official clients -------------------------------------------

def plan_for(identity: str) -> list[list[Any]]:
    """The calls a client makes as ``identity``: every tool of the catalog, a name no tool
    has, and ``echo_echo`` with arguments that do not greet."""
    return [*([name, ARGUMENTS[name]] for name in sorted(EVERY)), [UNKNOWN, {}],
            ["echo_echo", NOT_A_GREETING]]


def check_user(identity: str, done: dict[str, Any], refused_prefix: str = "") -> None:
    """What one identity was listed and what each of its calls got, against ``SEES``.
    ``refused_prefix``: what the SDK puts before a JSON-RPC error's message (``{code}``:
    the error's code)."""
    visible, callable_ = SEES[identity]
    assert set(done["tools"]) == visible and len(done["tools"]) == len(visible), \
        (identity, done["tools"])
    *called, not_a_greeting = done["calls"]
    outcomes = dict(zip([name for name, _ in plan_for(identity)][:-1], called, strict=True))
    for name, outcome in outcomes.items():
        if name in callable_:
            assert "result" in outcome, (identity, name, outcome)
            assert not outcome["result"].get("isError"), (identity, name, outcome)
            continue
        expected = not_permitted(name) if name in visible else unknown_tool(name)
        assert "error" in outcome, (identity, name, outcome)
        error = outcome["error"]
        assert error["code"] == expected["code"], (identity, name, error)
        assert error["message"] == refused_prefix.format(code=expected["code"]) \
            + expected["message"], (identity, name, error)
    said = {name: "".join(b.get("text", "") for b in outcomes[name]["result"]["content"])
            for name in ("get-sum", "echo_echo") if name in callable_}
    if "get-sum" in said:
        assert "5" in said["get-sum"], said
    if "echo_echo" in said:
        assert said["echo_echo"] == GREETING["text"], said
    if identity == "support":  # listed and called, but these arguments do not greet
        assert not_a_greeting["error"]["code"] == -32003, not_a_greeting
    elif "echo_echo" in callable_:
        assert "result" in not_a_greeting, not_a_greeting
    else:
        assert not_a_greeting["error"]["code"] == -32602, not_a_greeting


#: client -> the identities it is used as (every identity by one client at least, each
#: client as several), the era it ends on, and what it puts before an error's message.
CLIENTS = {
    "mcp-2": (["sre", "support", "ci-bot"], MODERN, ""),
    "mcp-1": (["support", "intern", "reporter"], LEGACY, ""),
    "ts-v2": (["intern", "reporter", "sre"], MODERN, ""),
    "ts-v1": (["ci-bot", "sre"], LEGACY, "MCP error {code}: "),
}


async def python_client(venv: Path, url: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
    return await last_document(str(venv / "bin" / "python"), str(PEERS / "sdk_policy_client.py"),
                               url, timeout=180,
                               env={**os.environ, "SDK_POLICY_PLAN": json.dumps(plan)})


async def ts_policy_client(major: str, url: str, plan: list[dict[str, Any]]
                           ) -> dict[str, Any]:
    with open(CLIENT_SRC / "ts_policy.mjs", "rb") as script:
        return await node_document(
            "--input-type=module", stdin=script, cwd=CLIENT_DIR,
            env={**os.environ, "TS_POLICY_URL": url, "TS_POLICY_MAJOR": major,
                 "TS_POLICY_PLAN": json.dumps(plan)})


@pytest.mark.parametrize("client", list(CLIENTS))
def test_each_identity_sees_and_calls_what_the_policy_grants(gateways, tmp_path, provider,
                                                             client):
    identities, protocol, prefix = CLIENTS[client]
    if client == "mcp-2":
        venv = realpeers.PY_MODERN_VENV
        realpeers.require(realpeers.MODERN_PY_ECHO)  # that venv, at its pinned mcp 2.x
    elif client == "mcp-1":
        venv = realpeers.PY_LEGACY_VENV
        realpeers.require(realpeers.LEGACY_PY_TIME)  # that venv, at its pinned mcp 1.x
    else:
        require_client("@modelcontextprotocol/client" if client == "ts-v2"
                       else "@modelcontextprotocol/sdk")
    path = config(tmp_path)

    async def main() -> tuple[dict[str, Any], dict[str, str]]:
        gw = await start(path, gateways, provider)
        bearer = await credentials(gw, provider)
        plan = [{"bearer": bearer[who], "calls": plan_for(who)} for who in identities]
        if client.startswith("mcp"):
            done = await python_client(venv, gw.url, plan)
        else:
            done = await ts_policy_client(client[-1], gw.url, plan)
        assert await gw.stop() == 0, gw.stderr.decode()[-3000:]
        return done, bearer, gw.stderr

    done, bearer, stderr = run(main(), timeout=300)
    for user in SCOPES:  # the provider put each user's groups in its token
        assert claims(bearer[user])["groups"] == GROUPS[user]
    for secret in bearer.values():  # no key, no token, in the gateway's log
        assert not any(part.encode() in stderr for part in secret.split(".") if len(part) > 8)
    assert len(done["users"]) == len(identities)
    for identity, user in zip(identities, done["users"], strict=True):
        assert user["protocol"] == protocol, (identity, user["protocol"])
        check_user(identity, user, prefix)


# -- a hidden tool is an unknown one --------------------------------------------------------

async def raw_call(gw: HttpGateway, bearer: str, name: str, arguments: dict[str, Any],
                   request_id: int, session: dict[str, str] | None = None
                   ) -> tuple[int, str, bytes]:
    """A ``tools/call`` POSTed as ``bearer`` (2026-07-28; 2025-11-25 in ``session``, the
    headers of one): its status, content type and body, as they came."""
    if session is None:
        message = gw.message("tools/call", {"name": name, "arguments": arguments,
                                            "_meta": modern_meta()}, request_id)
        headers = gw.modern_headers(message, JSON_ONLY)
    else:
        message = gw.message("tools/call", {"name": name, "arguments": arguments},
                             request_id)
        headers = session
    async with gw.http.post(gw.url, data=orjson.dumps(message),
                            headers={**headers, "Authorization": f"Bearer {bearer}"}
                            ) as response:
        return response.status, response.content_type, await response.read()


async def legacy_session(gw: HttpGateway, bearer: str) -> dict[str, str]:
    """A 2025-11-25 session opened as ``bearer``: the headers its requests carry (JSON
    answers only, so a body is the message alone)."""
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "Authorization": f"Bearer {bearer}"}
    init = gw.message("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                     "clientInfo": {"name": "raw", "version": "1"}})
    status, answer, got = await gw.post(init, headers)
    assert status == 200 and answer["result"]["protocolVersion"] == LEGACY, answer
    session = {**headers, "Mcp-Session-Id": got["Mcp-Session-Id"],
               "MCP-Protocol-Version": LEGACY}
    status, _, _ = await gw.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                                 session)
    assert status == 202
    return {**session, "Accept": JSON_ONLY}


#: (identity, a tool of the full fleet it may not see): none is on the echo server.
HIDDEN = [("intern", "gzip-file-as-resource"), ("intern", "toggle-simulated-logging"),
          ("reporter", "convert_time"), ("ci-bot", "get_current_time"),
          ("support", "gzip-file-as-resource")]


def test_a_hidden_tool_is_answered_byte_for_byte_as_one_no_server_has(gateways, tmp_path,
                                                                     provider):
    """The same ``tools/call`` (same id, same name) to the fleet, where the tool is there
    but hidden from the caller, and to a gateway of the echo server alone under the same
    policy, where no server has it: the same status and the same bytes, in both eras."""
    (tmp_path / "full").mkdir()
    (tmp_path / "echo-only").mkdir()
    full = config(tmp_path / "full")
    echo_only = config(tmp_path / "echo-only", servers=("echo",))

    async def main() -> None:
        there = await start(full, gateways, provider)
        nowhere = await start(echo_only, gateways, provider)
        bearers = [await credentials(gw, provider) for gw in (there, nowhere)]
        for era in ("modern", "legacy"):
            for n, (identity, name) in enumerate(HIDDEN):
                answers = []
                for gw, bearer in zip((there, nowhere), bearers, strict=True):
                    session = None if era == "modern" else \
                        await legacy_session(gw, bearer[identity])
                    answers.append(await raw_call(gw, bearer[identity], name,
                                                  ARGUMENTS[name], 40 + n, session))
                hidden, unknown = answers
                assert hidden == unknown, (era, identity, name, hidden, unknown)
                status, kind, body = hidden
                assert (status, kind) == (200, JSON_ONLY)
                assert orjson.loads(body) == {"jsonrpc": "2.0", "id": 40 + n,
                                              "error": unknown_tool(name)}
        # A tool listed but not callable is another matter: not permitted, in both eras.
        bearer = bearers[0]["ci-bot"]
        for session in (None, await legacy_session(there, bearer)):
            status, _, body = await raw_call(there, bearer, "gzip-file-as-resource",
                                             ARGUMENTS["gzip-file-as-resource"], 7, session)
            assert status == 200 and orjson.loads(body) == {
                "jsonrpc": "2.0", "id": 7, "error": not_permitted("gzip-file-as-resource")}
        for gw in (there, nowhere):
            assert await gw.stop() == 0, gw.stderr.decode()[-3000:]
    run(main(), timeout=240)


def test_a_busy_server_does_not_tell_of_a_tool_hidden_on_it(gateways, tmp_path, provider):
    """``--max-per-server 1`` and the echo server's one place taken (the sre user's long
    ``sleep``): a call of one of its tools by one who may list it is refused as over the
    server's limit, naming it; a call of one hidden on it is still an unknown tool's, in
    both eras (a refusal naming the server would tell the tool is there, and where)."""
    path = config(tmp_path)

    async def main() -> None:
        gw = await start(path, gateways, provider, "--max-per-server", "1")
        bearer = await credentials(gw, provider)

        async def echo_is_full() -> bool:
            """Whether the sleep holds the echo server's place: support may call
            echo_echo with a greeting, and is refused as over the server's limit."""
            _, _, body = await raw_call(gw, bearer["support"], "echo_echo", GREETING, 3)
            answer = orjson.loads(body)
            return answer.get("error", {}).get("data", {}).get("server") == "echo"

        async def echo_in_flight() -> int:
            async with gw.http.get(f"{gw.base}/status", headers={
                    "Authorization": f"Bearer {KEYS['ci-bot']}"}) as response:
                assert response.status == 200
                servers = (await response.json())["servers"]
            return next(s["in_flight"] for s in servers if s["name"] == "echo")

        holding = asyncio.ensure_future(raw_call(gw, bearer["sre"], "sleep",
                                                 {"ms": 60_000}, 2))
        try:
            deadline = time.monotonic() + 30
            while await echo_in_flight() != 1:
                assert time.monotonic() < deadline and not holding.done(), "never held"
            assert await echo_is_full()
            session = await legacy_session(gw, bearer["intern"])
            for name in ("sleep", "search", "echo_echo"):
                unknown = {"jsonrpc": "2.0", "id": 11, "error": unknown_tool(name)}
                for era_session in (None, session):
                    status, _, body = await raw_call(gw, bearer["intern"], name,
                                                     ARGUMENTS[name], 11, era_session)
                    assert (status, orjson.loads(body)) == (200, unknown), \
                        (name, era_session is not None, status, body)
                # A legacy call taking SSE is admitted before its stream opens.
                streamed = gw.message("tools/call", {"name": name,
                                                     "arguments": ARGUMENTS[name]}, 11)
                status, answer, _ = await gw.post(streamed, {
                    **session, "Accept": "application/json, text/event-stream"})
                assert (status, answer) == (200, unknown), (name, status, answer)
            assert await echo_is_full(), "the place was free before the calls were made"
        finally:
            holding.cancel()  # the client goes: the gateway cancels the sleep
            await asyncio.gather(holding, return_exceptions=True)
        assert await gw.stop() == 0
    run(main(), timeout=180)


def test_two_tokens_of_one_user_are_decided_by_their_own_scopes(gateways, tmp_path,
                                                                 provider):
    """The sre user with and without the admin scope: the same tools listed, the writes
    called with it only (a decision is never reused across scopes)."""
    path = config(tmp_path)

    async def main() -> None:
        gw = await start(path, gateways, provider)
        admin = await provider.token(gw.url, f"{SCOPE} admin", client_id="sre")
        plain = await provider.token(gw.url, SCOPE, client_id="sre")
        assert claims(admin)["sub"] == claims(plain)["sub"] == "sre"
        write = "toggle-simulated-logging"
        for _ in range(2):  # the second time decided from what each token's identity keeps
            for bearer, allowed in ((plain, False), (admin, True), (plain, False)):
                listed = gw.message("tools/list", {"_meta": modern_meta()})
                status, answer, _ = await gw.post(listed, {
                    **gw.modern_headers(listed), "Authorization": f"Bearer {bearer}"})
                assert status == 200 and {t["name"] for t in answer["result"]["tools"]} == \
                    EVERY
                status, _, body = await raw_call(gw, bearer, write, {}, 9)
                answer = orjson.loads(body)
                if allowed:  # server-everything leaves isError out
                    assert not answer["result"].get("isError") and \
                        "logging" in answer["result"]["content"][0]["text"], answer
                else:
                    assert answer["error"] == not_permitted(write), answer
        assert await gw.stop() == 0
    run(main(), timeout=180)


# -- --tool-search --------------------------------------------------------------------------

def test_tool_search_finds_only_what_the_identity_may_see(gateways, tmp_path, provider):
    path = config(tmp_path)

    async def main() -> dict[str, Any]:
        gw = await start(path, gateways, provider, "--tool-search")
        bearer = await credentials(gw, provider)

        async def tool(who: str, name: str, arguments: dict[str, Any]) -> bytes:
            return (await raw_call(gw, bearer[who], name, arguments, 5))[2]

        async def found(who: str, query: str) -> list[str]:
            answer = orjson.loads(await tool(who, "search_tools",
                                             {"query": query, "limit": 50}))
            return [t["name"] for t in answer["result"]["structuredContent"]["tools"]]

        seen: dict[str, Any] = {}
        query = "compress file gzip resource"  # gzip-file-as-resource's own words
        for who in SEES:
            seen[who, query] = await found(who, query)
        # Everything each may see is found by a query matching it all; nothing else is.
        everything = " ".join(["echo sum numbers time timezone convert search sleep",
                               "compress gzip toggle logging"])
        for who in SEES:
            seen[who, "everything"] = await found(who, everything)
        # A hidden tool's call_tool gets what an unknown name's gets, byte for byte.
        for who, name in HIDDEN:
            hidden = await tool(who, "call_tool", {"name": name, "arguments": ARGUMENTS[name]})
            unknown = await tool(who, "call_tool", {"name": UNKNOWN, "arguments": {}})
            assert hidden == unknown.replace(UNKNOWN.encode(), name.encode()), (who, name)
            assert orjson.loads(hidden)["result"]["isError"] is True
        # Listed but not callable: found, and refused as not permitted.
        seen["refused"] = orjson.loads(await tool(
            "ci-bot", "call_tool", {"name": "gzip-file-as-resource",
                                    "arguments": ARGUMENTS["gzip-file-as-resource"]}))
        seen["called"] = orjson.loads(await tool(
            "ci-bot", "call_tool", {"name": "get-sum", "arguments": {"a": 2, "b": 3}}))
        assert await gw.stop() == 0
        return seen

    seen = run(main(), timeout=180)
    query = "compress file gzip resource"
    for who, (visible, _) in SEES.items():
        assert set(seen[who, "everything"]) == visible, (who, seen[who, "everything"])
        assert set(seen[who, query]) <= visible, (who, seen[who, query])
        assert ("gzip-file-as-resource" in seen[who, query]) == \
            ("gzip-file-as-resource" in visible), who
    assert seen["refused"]["error"] == not_permitted("gzip-file-as-resource"), seen["refused"]
    assert "5" in seen["called"]["result"]["content"][0]["text"], seen["called"]


# -- bad input ------------------------------------------------------------------------------

def test_tokens_whose_groups_cannot_be_read_are_refused_naming_the_claim(gateways, tmp_path,
                                                                         provider):
    """A groups claim of a thousand strings (more than the 256 read) and one that is a
    number: each token is refused 401 ``invalid_token``, the reason naming the claim and
    what is wrong with it, never a value of it."""
    path = config(tmp_path, servers=("time",))
    says = {"many-groups": f"the token's groups claim has {MANY_GROUPS} values; at most 256 "
                           "are read",
            "odd-groups": "the token's groups claim is not a list of strings"}

    async def main() -> dict[str, tuple[int, str, Any, Any]]:
        gw = await start(path, gateways, provider)
        refused = {}
        for client in says:
            token = await provider.token(gw.url, SCOPE, client_id=client)
            message = gw.message("tools/list", {"_meta": modern_meta()})
            status, answer, headers = await gw.post(message, {
                **gw.modern_headers(message), "Authorization": f"Bearer {token}"})
            refused[client] = (status, headers["WWW-Authenticate"], answer,
                               claims(token)["groups"])
        assert await gw.stop() == 0
        return refused

    refused = run(main(), timeout=120)
    # The provider sent them so.
    assert refused["many-groups"][3] == [f"g{n}" for n in range(MANY_GROUPS)]
    assert refused["odd-groups"][3] == 42
    for client, (status, challenge, answer, _) in refused.items():
        assert status == 401, (client, answer)
        params = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', challenge))
        assert (params["error"], params["error_description"]) == \
            ("invalid_token", says[client]), params
        assert answer["error"]["message"] == says[client], answer


def test_a_rule_that_can_never_match_is_a_warning_when_serve_starts(gateways, tmp_path):
    (tmp_path / "policy.json").write_text(json.dumps({"rules": [
        {"id": "ok", "allow": ["list", "call"], "servers": ["alpha"]},
        {"id": "ghost", "allow": ["list"], "servers": ["nowhere"]},
        {"id": "never", "allow": ["list"], "when": "1 == 2"},
        {"id": "prompt-hints", "allow": ["list"], "prompts": ["*"],
         "annotations": {"readOnlyHint": True}}]}))
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"alpha": {
        "command": scripted().command, "args": list(scripted().args)}},
        "policy": "policy.json"}))

    async def main() -> bytes:
        gw = await HttpGateway.start(path, gateways)
        status, answer = await gw.modern("tools/list")
        assert status == 200 and answer["result"]["tools"], answer  # it serves
        assert await gw.stop() == 0
        return gw.stderr

    stderr = run(main()).decode()
    assert "rule 'ghost' names no configured server: it can never match" in stderr, stderr
    assert "rule 'never': '1 == 2' is always false: it can never match" in stderr, stderr
    assert "rule 'prompt-hints' requires tool annotations but is about no tools" in stderr
    assert "rule 'ok'" not in stderr


@pytest.mark.parametrize("policy, says", [
    ("missing.json", "missing.json: cannot read the policy: No such file or directory"),
    ("a-directory", "a-directory: cannot read the policy: Is a directory"),
    ({"rules": [{"id": "broken", "allow": ["list"], "when": "identity.groups.exists(g, "}]},
     "rule 'broken': \"when\" does not compile"),
    ({"rules": [{"id": "stray", "allow": ["list"], "when": "request.ip == '10.0.0.1'"}]},
     "rule 'stray': \"when\" reads 'request'"),
], ids=["missing", "directory", "cel-syntax", "unknown-variable"])
def test_a_policy_that_cannot_be_used_stops_serve_with_a_clear_error(tmp_path, policy, says):
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"alpha": {
        "command": scripted().command, "args": list(scripted().args)}}, "policy": policy}))
    done = subprocess.run([sys.executable, "-m", "trunkline", "serve", str(path), "--http",
                           "127.0.0.1:0"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "LISTENING" not in done.stdout


# -- SIGHUP: a new policy, under load ------------------------------------------------------

BOT_SLEEPS = {"rules": [{"id": "bot-sleeps", "allow": ["list", "call"], "tools": ["echo/sleep"],
                         "when": "identity.subject == 'ci-bot'"}]}
BOT_SEARCHES = {"rules": [{"id": "bot-searches", "allow": ["list", "call"],
                           "tools": ["echo/search"], "when": "identity.subject == 'ci-bot'"}]}
#: The calls each worker makes in turn, and the most any makes.
LOAD = [("sleep", {"ms": 20}), ("search", {"query": "q", "limit": 1})]
WORKERS, MOST_CALLS, CALLS_AFTER = 6, 400, 6


def write_policy(path: Path, policy: dict[str, Any] | str) -> None:
    """Put ``policy`` in place at once (a reload never reads half a file)."""
    draft = path.with_suffix(".draft")
    draft.write_text(policy if isinstance(policy, str) else json.dumps(policy))
    os.replace(draft, path)


def test_sighup_changes_the_policy_under_load_and_loses_no_call(gateways, tmp_path):
    """Workers call two tools without pause while the policy file changes and SIGHUP
    comes: every call is answered; each one that ended before the signal was decided by the
    old policy, and each one started after a listing showed the new policy by the new one
    (the tool it took away is unknown, the one it gave is called). A policy that does not
    compile, next, changes nothing."""
    write_policy(tmp_path / "policy.json", BOT_SLEEPS)
    path = config(tmp_path, servers=("echo",))
    key = KEYS["ci-bot"]

    async def listed(gw: HttpGateway) -> list[str]:
        message = gw.message("tools/list", {"_meta": modern_meta()})
        status, answer, _ = await gw.post(message, {**gw.modern_headers(message),
                                                    "Authorization": f"Bearer {key}"})
        assert status == 200, answer
        return [tool["name"] for tool in answer["result"]["tools"]]

    async def main() -> tuple[list[tuple[str, float, float, str]], float, float, str]:
        gw = await HttpGateway.start(path, gateways, "--api-key-file",
                                     str(tmp_path / "keys.json"))
        assert await listed(gw) == ["sleep"]
        calls: list[tuple[str, float, float, str]] = []  # tool, started, ended, outcome
        seen_new: list[float] = []

        async def worker(n: int) -> None:
            after = 0
            for turn in range(MOST_CALLS):
                tool, arguments = LOAD[(n + turn) % len(LOAD)]
                started = time.monotonic()
                try:
                    status, _, body = await raw_call(gw, key, tool, arguments, turn)
                except Exception as exc:  # noqa: BLE001 - a lost call is the test's failure
                    calls.append((tool, started, time.monotonic(), f"lost: {exc!r}"))
                    continue
                answer = orjson.loads(body) if status == 200 else {}
                if answer.get("id") != turn:
                    outcome = f"status {status}: {body[:200]!r}"
                elif "result" in answer and not answer["result"].get("isError"):
                    outcome = "called"
                elif answer.get("error") == unknown_tool(tool):
                    outcome = "unknown"
                else:
                    outcome = f"other: {body[:200]!r}"
                calls.append((tool, started, time.monotonic(), outcome))
                if seen_new and started > seen_new[0]:
                    after += 1
                    if after == CALLS_AFTER:
                        return

        load = [asyncio.ensure_future(worker(n)) for n in range(WORKERS)]
        try:
            while len(calls) < 4 * WORKERS:  # under way
                await asyncio.sleep(0.01)
            write_policy(tmp_path / "policy.json", BOT_SEARCHES)
            signalled = time.monotonic()
            gw.proc.send_signal(signal.SIGHUP)
            while await listed(gw) != ["search"]:
                assert time.monotonic() - signalled < 30, "the new policy never showed"
            seen_new.append(time.monotonic())
            await asyncio.gather(*load)
        finally:
            for task in load:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)
        # A policy that does not compile: said on stderr, and the one in force stays.
        write_policy(tmp_path / "policy.json", "{\"rules\": [{\"id\": \"half\", \"allow\"")
        gw.proc.send_signal(signal.SIGHUP)
        assert gw.proc.stderr is not None
        said = ""
        while "configuration not reloaded" not in said:
            line = await asyncio.wait_for(gw.proc.stderr.readline(), 30)
            assert line, "the gateway ended"
            said += line.decode()
        assert await listed(gw) == ["search"]
        status, _, body = await raw_call(gw, key, "search", {"query": "q"}, 1)
        assert status == 200 and "error" not in orjson.loads(body), body
        assert await gw.stop() == 0
        return calls, signalled, seen_new[0], said + gw.stderr.decode()

    calls, signalled, seen, stderr = run(main(), timeout=240)
    assert "policy reloaded from" in stderr and "policy.json: not JSON" in stderr, stderr
    assert all(outcome in ("called", "unknown") for *_, outcome in calls), \
        [c for c in calls if c[3] not in ("called", "unknown")][:5]
    before = [(tool, outcome) for tool, _, ended, outcome in calls if ended < signalled]
    after = [(tool, outcome) for tool, started, _, outcome in calls if started > seen]
    assert before and len(after) == WORKERS * CALLS_AFTER, (len(before), len(after))
    old = {"sleep": "called", "search": "unknown"}
    new = {"sleep": "unknown", "search": "called"}
    assert all(old[tool] == outcome for tool, outcome in before), before
    assert all(new[tool] == outcome for tool, outcome in after), after
