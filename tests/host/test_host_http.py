"""The Host over Streamable HTTP, end to end: real SDK servers on 127.0.0.1 (mcp 2.3.0
and fastmcp 4.2.3 modern, mcp 1.30.0 and server-everything legacy) and the scripted peer
for what no real server does on demand (401, 503, a stream dropped mid-call).

Each server runs in its own worker process, like a stdio server; the verdicts are the
fail-closed ones of stdio: modern on positive evidence, legacy only for an allowlisted
URL, and what the server received (its ``--record`` file) proves no ``initialize`` ever
reached a server that was not allowlisted.
"""

from __future__ import annotations

import asyncio

import pytest

import httppeers
from conftest import run
from httppeers import http_peer  # noqa: F401 - a fixture
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline import CallOptions, ClientOptions, Host, http
from trunkline.channel import ServerState
from trunkline.errors import (
    AuthenticationFailed,
    HttpStatusError,
    ServerUnavailable,
    StreamBroken,
    ToolQuarantined,
    TransportLost,
)
from trunkline.parent.mrtr import CallInput
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.retry import RetryPolicy
from trunkline.settings import HostSettings, RestartPolicy

# Python servers take 1-3 s to start under load; a refused server is not restarted.
SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=15.0,
                                                      legacy_probe_timeout_s=15.0))


def posted(server) -> list[dict]:
    return [r for r in server.records() if r.get("method") == "POST"]


def posted_methods(server) -> list[str]:
    return [(r.get("body") or {}).get("method") for r in posted(server)]


MODERN_SERVERS = [
    pytest.param(httppeers.py_http_modern, id="mcp-2.3.0"),
    pytest.param(httppeers.fastmcp_http, id="fastmcp-4.2.3"),
]


@pytest.mark.real_servers
@pytest.mark.parametrize("allow_legacy", [False, True], ids=["not-allowlisted", "allowlisted"])
@pytest.mark.parametrize("server_args", MODERN_SERVERS)
def test_modern_sdk_server_over_http(no_leaks, http_peer, tmp_path, server_args, allow_legacy):
    argv, env = server_args()
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")
    progress: list[tuple[float, float | None, str | None]] = []

    async def main():
        async with Host(settings=SETTINGS) as host:
            # A modern server needs no allowlist, and an allowlisted one is still modern:
            # positive evidence decides, and initialize is never sent.
            status = await host.add_server("remote", http(server.url),
                                           allow_legacy=allow_legacy)
            assert (status.state, status.era, status.version) == (
                ServerState.READY, "modern", MODERN)
            assert {"add", "echo", "headered", "count"} <= {t.name for t in host.tools()}
            assert (await host.call_tool("add", {"a": 2, "b": 40})).text == "42"
            headered = await host.call_tool("headered", {"region": "日本", "count": 3})
            assert headered.text == "region=日本 count=3 flag=false"
            counted = await host.call_tool(
                "count", {"n": 3}, on_progress=lambda p, t, m: progress.append((p, t, m)))
            assert counted.text == "counted 3"
    run(main())

    assert [p for p, _, _ in progress] == [1, 2, 3]
    sent = posted(server)
    assert "initialize" not in posted_methods(server)
    for record in sent:
        body, headers = record["body"], record["headers"]
        validate_message(body, MODERN)
        assert headers["mcp-protocol-version"] == MODERN
        assert headers["mcp-method"] == body["method"]
    call = next(r for r in sent if r["body"]["method"] == "tools/call"
                and r["body"]["params"]["name"] == "headered")
    # What the server received: the SDK itself checks these against the body.
    assert call["headers"]["mcp-name"] == "headered"
    assert call["headers"]["mcp-param-region"] == "=?base64?5pel5pys?="
    assert call["headers"]["mcp-param-count"] == "3"


@pytest.mark.real_servers
def test_each_calls_log_messages_reach_that_call_only(no_leaks, http_peer):
    """Over HTTP a log message is attributed by the response stream it came on: three
    concurrent calls, two asking for logs, each sink gets exactly its own call's."""
    argv, env = httppeers.py_http_modern()
    server = http_peer(argv, env)
    unattributed: list[tuple[str, dict]] = []

    async def main():
        async with Host(settings=SETTINGS,
                        client=ClientOptions(on_log=lambda s, p: unattributed.append((s, p)))
                        ) as host:
            await host.add_server("remote", http(server.url))
            logs: dict[int, list[dict]] = {2: [], 3: []}
            results = await asyncio.gather(*(
                host.call_tool("count", {"n": n}, log_level="info", on_log=logs[n].append)
                for n in (2, 3)), host.call_tool("count", {"n": 4}))
            assert [r.text for r in results] == ["counted 2", "counted 3", "counted 4"]
            for n, seen in logs.items():
                assert [(m["level"], m["data"]) for m in seen] == [
                    ("info", f"step {i}") for i in range(1, n + 1)]
                assert all("_meta" not in m or "dev.trunkline/stream" not in m["_meta"]
                           for m in seen)  # the worker's tag does not leak
            # A level below the one asked is not sent: the server filters by _meta.
            quiet: list[dict] = []
            await host.call_tool("count", {"n": 2}, log_level="warning", on_log=quiet.append)
            assert quiet == []
            with pytest.raises(ValueError, match="on_log needs a log_level"):
                await host.call_tool("count", {"n": 1}, on_log=quiet.append)
    run(main())
    assert unattributed == []  # the call without a level got no logs: none were sent


LEGACY_SERVERS = [
    pytest.param(httppeers.py_http_legacy, True, id="mcp-1.30.0"),
    pytest.param(httppeers.ts_everything_http, False, id="server-everything"),
]


@pytest.mark.real_servers
@pytest.mark.parametrize("allow_legacy", [False, True], ids=["not-allowlisted", "allowlisted"])
@pytest.mark.parametrize(("server_args", "records"), LEGACY_SERVERS)
def test_legacy_sdk_server_over_http(no_leaks, http_peer, tmp_path, server_args, records,
                                     allow_legacy):
    argv, env = server_args()
    record = tmp_path / "record.jsonl" if records else None
    server = http_peer(argv, env, record=record)

    async def main():
        async with Host(settings=SETTINGS) as host:
            status = await host.add_server("old", http(server.url), allow_legacy=allow_legacy)
            if not allow_legacy:
                assert status.state is ServerState.UNAVAILABLE
                assert "era refused" in status.reason
                assert host.tools() == []
                # It answered (no evidence of the modern era): the fix is named.
                assert status.hint is not None, status.evidence
                assert status.hint.startswith("it answered server/discover with ")
                assert '"allowLegacy": true' in status.hint
                return
            assert (status.state, status.era, status.version) == (
                ServerState.READY, "legacy", LEGACY)
            result = await host.call_tool("echo", {"message" if not records else "text": "hi"})
            assert "hi" in result.text
    run(main())

    if not records:
        return
    methods = posted_methods(server)
    if not allow_legacy:
        assert methods == ["server/discover"]  # the probe, and nothing else
        return
    assert methods[:3] == ["server/discover", "initialize", "notifications/initialized"]
    later = posted(server)[2:]
    session = later[0]["headers"]["mcp-session-id"]
    for r in later:
        assert r["headers"]["mcp-session-id"] == session
        assert r["headers"]["mcp-protocol-version"] == LEGACY
        validate_message(r["body"], LEGACY)
    deletes = [r for r in server.records() if r.get("method") == "DELETE"]
    assert deletes and deletes[-1]["headers"]["mcp-session-id"] == session


@pytest.mark.parametrize("status", ["401", "503"])
def test_unusable_endpoint_is_unavailable_with_the_reason(no_leaks, http_peer, tmp_path, status):
    argv, env = httppeers.scripted("--status", status)
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")

    async def main():
        async with Host(settings=SETTINGS) as host:
            got = await host.add_server("remote", http(server.url), allow_legacy=True)
            assert got.state is ServerState.UNAVAILABLE
            assert host.tools() == []
            with pytest.raises(ServerUnavailable):
                await host.read_resource("remote", "file:///x")
            return got
    got = run(main())
    if status == "401":
        assert got.reason.startswith("authentication failed") and "401" in got.reason
        assert posted_methods(server) == ["server/discover"]  # a challenge is not evidence
    else:
        assert "era refused" in got.reason and any("HTTP 503" in e for e in got.evidence)
        assert posted_methods(server) == ["server/discover", "initialize"]


def test_dropped_stream_fails_the_call_and_retries_only_when_idempotent(no_leaks, http_peer,
                                                                        tmp_path):
    argv, env = httppeers.scripted("--drop-mid-call")
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")

    async def main():
        retry = RetryPolicy(max_attempts=2, base_s=0.01)
        async with Host(settings=SETTINGS, calls=CallOptions(retry=retry)) as host:
            await host.add_server("remote", http(server.url))
            with pytest.raises(StreamBroken):
                await host.call_tool("echo", {"text": "once"})
            with pytest.raises(StreamBroken):
                await host.call_tool("echo", {"text": "twice"}, idempotent=True)
            # The server is still there for everything else.
            assert host.servers()[0].state is ServerState.READY
            assert [t.name for t in await host.refresh_tools()] or host.tools()
    run(main())
    calls = [r["body"] for r in posted(server) if r["body"]["method"] == "tools/call"]
    texts = [c["params"]["arguments"]["text"] for c in calls]
    assert texts == ["once", "twice", "twice"]  # not idempotent: never repeated
    # A re-sent request is a new request: a new JSON-RPC id every time.
    assert len({c["id"] for c in calls}) == 3


def test_expired_legacy_session_is_renegotiated(no_leaks, http_peer, tmp_path):
    """A 404 to a request carrying the session id: the session is gone. That worker ends,
    the supervisor restarts it, and the server gets a fresh initialize without the old
    id; the call made meanwhile fails as lost and the next one works."""
    argv, env = httppeers.scripted("--legacy", "--expire-session-after", "3")
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")
    settings = HostSettings(negotiation=SETTINGS.negotiation,
                            restart=RestartPolicy(base_s=0.01, cap_s=0.05))

    async def main():
        async with Host(settings=settings) as host:
            await host.add_server("old", http(server.url), allow_legacy=True)
            # initialized + tools/list used two of the three; this call is the third.
            assert (await host.call_tool("echo", {"text": "a"})).text == "a"
            with pytest.raises(TransportLost):
                await host.call_tool("echo", {"text": "b"})
            assert (await host.call_tool("echo", {"text": "c"})).text == "c"
            assert host.servers()[0].restarts == 1
    run(main())
    inits = [r for r in posted(server) if r["body"]["method"] == "initialize"]
    assert len(inits) == 2
    assert all("mcp-session-id" not in r["headers"] for r in inits)
    sessions = {r["headers"].get("mcp-session-id") for r in posted(server)
                if r["body"]["method"] == "tools/call"}
    assert len(sessions) == 2  # the call after the restart used the new session


@pytest.mark.parametrize(("status", "error", "attempts"), [
    ("503", HttpStatusError, 2),          # transient: an idempotent call is sent again
    ("500", HttpStatusError, 1),          # a server fault without an answer: final
    ("401", AuthenticationFailed, 1),     # never retried, never evidence about the era
])
def test_http_status_on_a_call_reaches_the_caller_typed(no_leaks, http_peer, tmp_path, status,
                                                       error, attempts):
    argv, env = httppeers.scripted("--status", status, "--status-for", "tools/call")
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")

    async def main():
        retry = RetryPolicy(max_attempts=2, base_s=0.01)
        async with Host(settings=SETTINGS, calls=CallOptions(retry=retry)) as host:
            await host.add_server("remote", http(server.url))
            with pytest.raises(error) as caught:
                await host.call_tool("echo", {"text": "x"}, idempotent=True)
            assert caught.value.status == int(status) and caught.value.server == "remote"
            assert host.servers()[0].state is ServerState.READY
    run(main())
    calls = [r["body"] for r in posted(server) if r["body"]["method"] == "tools/call"]
    assert len(calls) == attempts and len({c["id"] for c in calls}) == attempts


def test_header_mismatch_after_a_definition_change_relists_and_resends(no_leaks, http_peer,
                                                                      tmp_path):
    """The -32020 recovery: the server started annotating `echo.text` after we listed it. Its
    -32020 makes the host re-list that server. The new definition is not the pinned one, so
    echo is quarantined and the call is not sent again; once approved, the call goes out
    with the header (a new request). The rejected one never ran, so this holds for tools
    that are not idempotent."""
    argv, env = httppeers.scripted("--annotate-echo-after-list")
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("remote", http(server.url))
            with pytest.raises(ToolQuarantined) as held:
                await host.call_tool("echo", {"text": "ü once"})
            assert "inputSchema.properties.text.x-mcp-header" in held.value.changes
            await host.approve_tool("remote", "echo")
            assert (await host.call_tool("echo", {"text": "ü once"})).text == "ü once"
            annotated = next(t for t in host.tools() if t.name == "echo")
            assert annotated.input_schema["properties"]["text"]["x-mcp-header"] == "Text"
    run(main())
    sent = [r for r in posted(server) if r["body"]["method"] in ("tools/list", "tools/call")]
    assert [r["body"]["method"] for r in sent] == [
        "tools/list", "tools/call", "tools/list", "tools/call"]
    first, second = sent[1], sent[3]
    assert "mcp-param-text" not in first["headers"]
    assert second["headers"]["mcp-param-text"].startswith("=?base64?")
    assert first["body"]["id"] != second["body"]["id"]


@pytest.mark.real_servers
def test_listen_stream_over_http_brings_a_runtime_tool_into_the_catalog(no_leaks, http_peer,
                                                                        tmp_path):
    """mcp 2.3.0 with subscriptions: the worker keeps a subscriptions/listen POST open (an
    SSE stream); the server's tools/list_changed arrives on it and the host re-lists."""
    argv, env = httppeers.py_http_modern("--listen")
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("remote", http(server.url))
            for _ in range(400):  # the listen request is sent once the server is ready
                if "subscriptions/listen" in posted_methods(server):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # let the server acknowledge the subscription
            assert (await host.call_tool("add_tool", {"name": "greet"})).text == "added greet"
            for _ in range(400):  # no refresh_tools(): only the stream can tell the host
                if "greet" in {t.name for t in host.tools()}:
                    break
                await asyncio.sleep(0.05)
            assert (await host.call_tool("greet", {})).text == "greet here"
    run(main())
    listens = [r for r in posted(server) if r["body"]["method"] == "subscriptions/listen"]
    assert len(listens) == 1 and listens[0]["headers"]["mcp-method"] == "subscriptions/listen"
    validate_message(listens[0]["body"], MODERN)
    assert posted_methods(server).count("tools/list") >= 2


@pytest.mark.real_servers
def test_a_legacy_servers_own_requests_reach_the_call_they_came_with(no_leaks, http_peer):
    """mcp 1.30.0 over Streamable HTTP asks with its own elicitation/create on each call's
    response stream: two calls in flight at once, each with its own handlers, each
    answered by its own; a call without handlers leaves the request to the host's (none
    here: the server is told no, and the call ends with its word)."""
    argv, env = httppeers.py_http_legacy()
    server = http_peer(argv, env)

    def answering(name: str, asked: list[dict]) -> CallInput:
        async def elicit(params: dict) -> dict:
            asked.append(params)
            await asyncio.sleep(0.2)  # both calls are waiting for their answers now
            return {"action": "accept", "content": {"name": name}}
        return CallInput(handlers={"elicitation/create": elicit})

    async def main():
        async with Host(settings=SETTINGS,
                        client=ClientOptions(capabilities={"elicitation": {}})) as host:
            await host.add_server("old", http(server.url), allow_legacy=True)
            asked: dict[str, list[dict]] = {"Ada": [], "Lin": []}
            results = await asyncio.gather(*(
                host.call_tool("ask_name", {}, call_input=answering(name, seen))
                for name, seen in asked.items()))
            assert [r.text for r in results] == ["hello Ada", "hello Lin"]
            for seen in asked.values():
                [params] = seen
                assert params["message"] == "What is your name?"
                assert "dev.trunkline/stream" not in (params.get("_meta") or {})
            unanswered = await host.call_tool("ask_name", {})
            assert unanswered.is_error or "hello" not in unanswered.text
    run(main())
