"""The Host API end to end: real worker processes, scripted and real servers, the
merged catalog, routing verified on the wire."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run, scripted
from mcp_schema import MODERN, validate_message
from trunkline import CatalogOptions, ClientOptions
from trunkline.catalog import ToolCollision
from trunkline.channel import ServerState
from trunkline.config import load_config
from trunkline.errors import (
    ConfigurationError,
    SchemaViolation,
    ServerError,
    TransportLost,
    UnknownTool,
)
from trunkline.params import HttpParams, http, stdio
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, RestartPolicy, ServerConfig

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0),
                        restart=RestartPolicy(base_s=0.01, cap_s=0.05))


def calls(tap) -> list[dict]:
    return [m for m in map(orjson.loads, taplog.lines(tap, taplog.IN))
            if m.get("method") == "tools/call"]


def lists(tap) -> int:
    return sum(1 for m in map(orjson.loads, taplog.lines(tap, taplog.IN))
               if m.get("method") == "tools/list")


def raw_tools(*tools: dict, extra: str = "") -> str:
    body = json.dumps({"tools": list(tools)})[1:-1]
    return ('raw:{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete",'
            f'"ttlMs":0,"cacheScope":"public",{body}{extra}}}}}')


def test_prefix_policy_routes_each_name_to_its_owner_with_the_local_name(tmp_path, no_leaks):
    tap_a, tap_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    async def main():
        async with Host(catalog=CatalogOptions(collision="prefix"), settings=SETTINGS) as host:
            await host.add_server("alpha", scripted("--tools", "echo,search", tap=tap_a))
            await host.add_server("beta", scripted("--tools", "echo,search", tap=tap_b))
            names = [(t.name, t.server, t.local_name) for t in host.tools()]
            assert names == [("alpha_echo", "alpha", "echo"), ("alpha_search", "alpha", "search"),
                             ("beta_echo", "beta", "echo"), ("beta_search", "beta", "search")]
            assert any("beta_echo" in str(w) for w in host.warnings)
            first = await host.call_tool("alpha_echo", {"who": "alpha"})
            second = await host.call_tool("beta_echo", {"who": "beta"})
            assert orjson.loads(first.text) == {"who": "alpha"} and first.server == "alpha"
            assert orjson.loads(second.text) == {"who": "beta"} and second.server == "beta"
            assert second.is_error is False
    run(main())
    # On the wire each server got exactly its own call, under its own (local) name.
    assert [(c["params"]["name"], c["params"]["arguments"]) for c in calls(tap_a)] == [
        ("echo", {"who": "alpha"})]
    assert [(c["params"]["name"], c["params"]["arguments"]) for c in calls(tap_b)] == [
        ("echo", {"who": "beta"})]


def test_reject_policy_refuses_naming_both_servers_and_the_tool(no_leaks):
    async def main():
        async with Host(catalog=CatalogOptions(collision="reject"), settings=SETTINGS) as host:
            await host.add_server("alpha", scripted("--tools", "echo"))
            with pytest.raises(ToolCollision) as info:
                await host.add_server("beta", scripted("--tools", "echo,search"))
            message = str(info.value)
            assert "alpha" in message and "beta" in message and "echo" in message
            # The refused server is stopped; the first one is untouched.
            assert [s.name for s in host.servers()] == ["alpha"]
            assert [t.name for t in host.tools()] == ["echo"]
            assert (await host.call_tool("echo", {"x": 1})).text
    run(main())


def test_from_config_starts_servers_in_file_order_and_honours_allow_legacy(tmp_path, no_leaks):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "modern": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]},
        "old": {"command": sys.executable, "allowLegacy": True,
                "args": [str(PEERS / "scripted.py"), "--era", "legacy"]},
        "stranger": {"command": sys.executable,
                     "args": [str(PEERS / "scripted.py"), "--era", "legacy"]},
        "off": {"command": "/nonexistent", "disabled": True},
    }}))
    async def main():
        async with Host.from_config(config, settings=SETTINGS) as host:
            status = {s.name: s for s in host.servers()}
            assert list(status) == ["modern", "old", "stranger"]
            assert (status["modern"].era, status["old"].era) == ("modern", "legacy")
            assert status["stranger"].state is ServerState.UNAVAILABLE
            assert "era refused" in status["stranger"].reason
            assert {t.server for t in host.tools()} == {"modern", "old"}
            result = await host.call_tool("old_echo", {"via": "legacy"})
            assert orjson.loads(result.text) == {"via": "legacy"}
    run(main())


@pytest.mark.parametrize("bad,message", [
    ({"servers": {}}, "mcpServers"),
    ({"mcpServers": {"x": {"args": []}}}, "command"),
    ({"mcpServers": {"x": {"command": "c", "args": "a b"}}}, "args"),
    ({"mcpServers": {"x": {"command": "c", "allowLegacy": "yes"}}}, "allowLegacy"),
    ({"mcpServers": {"x": {"command": "c", "bogus": 1}}}, "unknown keys"),
    ({"mcpServers": {"a/b": {"command": "c"}}}, "no '/'"),
    ({"mcpServers": {"x": {"url": "ftp://127.0.0.1:1/mcp"}}}, "http"),
    ({"mcpServers": {"x": {"url": "http://u:p@127.0.0.1:1/mcp"}}}, "credentials"),
    ({"mcpServers": {"x": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}}, "HTTP\\+SSE"),
    ({"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp", "command": "c"}}}, "unknown keys"),
    ({"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp",
                           "headers": {"Mcp-Method": "tools/call"}}}}, "reserved"),
    ({"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp",
                           "headers": {"X-Evil": "a\r\nInjected: 1"}}}}, "X-Evil"),
    ({"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp", "verifyTls": "no"}}}, "verifyTls"),
    ({"mcpServers": {"x": {"command": "c", "discoverTimeoutMs": 0}}}, "discoverTimeoutMs"),
    ({"mcpServers": {"x": {"command": "c", "discoverTimeoutMs": "500"}}}, "discoverTimeoutMs"),
    ({"mcpServers": {"x": {"command": "c", "discoverTimeoutMs": 1.5}}}, "discoverTimeoutMs"),
    ({"mcpServers": {"x": {"command": "c", "discoverTimeoutMs": True}}}, "discoverTimeoutMs"),
    ({"mcpServers": {"x": {"command": "c", "maxDiscoverTimeoutMs": 0}}},
     "maxDiscoverTimeoutMs"),
    ({"mcpServers": {"x": {"command": "c", "maxDiscoverTimeoutMs": 6e4}}},
     "maxDiscoverTimeoutMs"),
    # Issue 41: token passthrough is refused, citing the specification's ban; a per-user
    # mode is for HTTP servers only.
    ({"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp", "credentials": "passthrough"}}},
     "passthrough.*forbids token passthrough.*MUST NOT accept or transit any other tokens"),
    ({"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp", "credentials": "mine"}}},
     "\"credentials\" must be one of 'shared', 'per_user', 'exchange', not 'mine'"),
    ({"mcpServers": {"x": {"command": "c", "credentials": "per_user"}}},
     "'per_user' is for HTTP servers"),
])
def test_bad_config_fails_with_the_key_named(tmp_path, bad, message):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps(bad))
    with pytest.raises(ConfigurationError, match=message):
        Host.from_config(config)


def test_credentials_modes_from_the_config(tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "mine": {"url": "https://a.example/mcp", "credentials": "per_user"},
        "traded": {"url": "https://b.example/mcp", "credentials": "exchange"},
        "ours": {"url": "https://c.example/mcp"},
        "local": {"command": "c", "credentials": "shared"},
    }}))
    assert [e.credentials for e in load_config(config)] == [
        "per_user", "exchange", "shared", "shared"]
    with pytest.raises(ConfigurationError, match="forbids token passthrough"):
        ServerConfig("x", http("https://a.example/mcp"), credentials="passthrough")


def test_discover_timeout_per_server_or_from_the_caller(tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "cold": {"command": "npx", "args": ["-y", "some-server"], "discoverTimeoutMs": 30000},
        "warm": {"command": "warm-server"},
    }}))
    cold, warm = load_config(config)
    assert (cold.discover_timeout_s, warm.discover_timeout_s) == (30.0, None)
    cold, warm = load_config(config, discover_timeout_s=2.5)
    assert (cold.discover_timeout_s, warm.discover_timeout_s) == (30.0, 2.5)
    settings = HostSettings()
    assert settings.negotiation_for(cold).discover_timeout_s == 30.0
    assert settings.negotiation_for(warm).discover_timeout_s == 2.5
    assert HostSettings().negotiation_for(load_config(config)[1]).discover_timeout_s == \
        settings.negotiation.discover_timeout_s


def test_how_far_patience_goes_per_server_or_from_the_caller(tmp_path):
    """``maxDiscoverTimeoutMs``: how far a silent server's probe deadlines may grow."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "image": {"command": "docker", "args": ["run", "-i", "big"],
                  "maxDiscoverTimeoutMs": 600000},
        "warm": {"command": "warm-server"},
    }}))
    image, warm = load_config(config)
    assert (image.max_discover_timeout_s, warm.max_discover_timeout_s) == (600.0, None)
    image, warm = load_config(config, max_discover_timeout_s=30.0)
    assert (image.max_discover_timeout_s, warm.max_discover_timeout_s) == (600.0, 30.0)
    settings = HostSettings()
    assert settings.negotiation_for(image, patience=10).discover_timeout_s == 600.0
    assert settings.negotiation_for(warm, patience=10).discover_timeout_s == 30.0
    assert settings.negotiation_for(warm, patience=1).discover_timeout_s == \
        2 * settings.negotiation.discover_timeout_s
    assert settings.negotiation_for(load_config(config)[1], patience=10) \
        .discover_timeout_s == settings.negotiation.max_discover_timeout_s == 120.0


def test_config_http_entries_keep_url_headers_and_tls_setting(tmp_path):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp",
                   "headers": {"Authorization": "Bearer t0ken"}, "allowLegacy": True},
        "cursor-style": {"url": "http://127.0.0.1:8000/mcp", "verifyTls": False},
    }}))
    entries = load_config(config)
    assert [e.name for e in entries] == ["remote", "cursor-style"]
    remote, local = (e.params for e in entries)
    assert isinstance(remote, HttpParams) and isinstance(local, HttpParams)
    assert (remote.url, dict(remote.headers), remote.verify_tls) == (
        "https://mcp.example.com/mcp", {"Authorization": "Bearer t0ken"}, True)
    assert entries[0].allow_legacy and not entries[1].allow_legacy
    assert local.verify_tls is False
    # The allowlist binds the exact URL, not the origin.
    assert remote.identity() != HttpParams("https://mcp.example.com/other").identity()


def test_unknown_tool_is_error_results_and_server_errors(no_leaks):
    failing = raw_tools({"name": "echo", "inputSchema": {"type": "object"}})
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(
                "--tools-call",
                'raw:{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete",'
                '"content":[{"type":"text","text":"boom"}],"isError":true}}'))
            result = await host.call_tool("echo", {})
            assert result.is_error and result.text == "boom"  # returned, not raised
            with pytest.raises(UnknownTool):
                await host.call_tool("nope", {})
            # A bad call raises where it is awaited, not where it is made (gather, tasks).
            pending = [host.call_tool("nope", {}), host.call_tool("echo", ["not", "a", "map"]),
                       host.call_tool("echo", {}, log_level="loud")]
            outcomes = await asyncio.gather(*pending, return_exceptions=True)
            assert [type(o) for o in outcomes] == [UnknownTool, TypeError, ValueError]
            # Arguments JSON cannot carry: refused before anything is sent, when awaited.
            unsendable = host.call_tool("echo", {"when": object()})
            with pytest.raises(TypeError, match="not JSON serializable"):
                await unsendable
            assert (await host.call_tool("echo", {})).is_error  # the server still answers
            await host.add_server("e", scripted("--tools-list", failing,
                                                "--tools-call", "error:-32602"))
            with pytest.raises(ServerError) as info:
                await host.call_tool("e_echo", {})
            assert info.value.code == -32602 and info.value.server == "e"
    run(main())


def test_an_integer_beyond_64_bits_is_refused_by_its_place_where_the_call_is_awaited(
        tap, no_leaks):
    """JSON-RPC peers keep integers in 64 bits: one beyond is never sent (rounded, or
    not at all), and the error names where it is, raised where the call is awaited."""
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            plain = host.call_tool("echo", {"a": 10**30})  # nothing raises here
            asking = host.call_tool("echo", {"deep": [1, {"n": -(2**63) - 1}]},
                                    on_progress=lambda *_: None)
            with pytest.raises(TypeError, match=r"^arguments\.a: an integer beyond 64 bits "
                               r"\(31 digits\).*send it as a string"):
                await plain
            with pytest.raises(TypeError, match=r"^arguments\.deep\[1\]\.n: an integer "
                               r"beyond 64 bits \(19 digits\)"):
                await asking
            # Never sent, so no progress is watched for it.
            assert not host._servers.handle("s").notices._progress
            edge = await host.call_tool("echo", {"u": 2**64 - 1, "i": -(2**63)})
            assert orjson.loads(edge.text) == {"u": 2**64 - 1, "i": -(2**63)}
    run(main())
    assert [c["params"]["arguments"] for c in calls(tap)] == [{"u": 2**64 - 1, "i": -(2**63)}]


def test_output_schema_is_enforced_on_structured_content(no_leaks):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    listing = raw_tools({"name": "count", "inputSchema": {"type": "object"},
                         "outputSchema": schema})
    def answer(structured):
        return ('raw:{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete",'
                '"content":[{"type":"text","text":"x"}]' + structured + "}}")
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("good", scripted("--tools-list", listing, "--tools-call",
                                                   answer(',"structuredContent":{"n":3}')))
            await host.add_server("bad", scripted("--tools-list", listing, "--tools-call",
                                                  answer(',"structuredContent":{"n":"three"}')))
            await host.add_server("none", scripted("--tools-list", listing,
                                                   "--tools-call", answer("")))
            assert (await host.call_tool("good_count", {})).structured_content == {"n": 3}
            with pytest.raises(SchemaViolation, match="violates its outputSchema") as info:
                await host.call_tool("bad_count", {})
            assert info.value.server == "bad"
            with pytest.raises(SchemaViolation, match="no structuredContent"):
                await host.call_tool("none_count", {})
    run(main())


def test_malformed_tools_are_quarantined_and_the_rest_loads(no_leaks):
    listing = raw_tools({"name": "fine", "inputSchema": {"type": "object"}},
                        {"inputSchema": {"type": "object"}},
                        {"name": "broken", "inputSchema": "object"})
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted("--tools-list", listing))
            assert [t.name for t in host.tools()] == ["fine"]
            texts = [str(w) for w in host.warnings]
            assert len([w for w in texts if "'s'" in w or "s:" in w or "s " in w]) >= 2, texts
    run(main())


def test_a_restarted_server_is_relisted_and_calls_wait_for_it(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            before = [t.name for t in host.tools()]
            os.kill(next(s.server_pid for s in host.servers()), signal.SIGKILL)
            while host.servers()[0].state is ServerState.READY:
                await asyncio.sleep(0.005)
            # A call made while the server restarts waits for it and is answered.
            result = await host.call_tool("echo", {"after": "restart"}, timeout=30)
            assert orjson.loads(result.text) == {"after": "restart"}
            deadline = time.monotonic() + 20
            while lists(tap) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert [t.name for t in host.tools()] == before
            assert host.servers()[0].restarts == 1
    run(main())
    assert lists(tap) == 2, "the new transport lists its tools from scratch"


def test_ttl_keeps_a_fresh_listing_and_refetches_a_stale_one(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("cached", scripted("--ttl-ms", "600000", tap=tap))
            await host.list_tools()
            await host.list_tools()
            assert lists(tap) == 1, "fresh for ten minutes: no refetch"
            await host.refresh_tools("cached")
            assert lists(tap) == 2, "an explicit refresh (list changed) refetches at once"
    run(main())


def test_unavailable_server_fails_calls_at_once_with_its_reason(no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("legacy", scripted("--era", "legacy"))
            assert host.tools() == []
            assert host.servers()[0].state is ServerState.UNAVAILABLE
            with pytest.raises(UnknownTool):
                await host.call_tool("echo", {})
    run(main())


@pytest.mark.real_servers
def test_real_servers_collide_and_route_under_prefix(tmp_path, no_leaks):
    """mcp 2.x Python and TypeScript SDK v2 servers both expose echo and search; the
    mcp 1.x and 2.x time servers both expose get_current_time (the 1.x one legacy)."""
    taps = {n: tmp_path / f"{n}.jsonl" for n in ("py", "ts", "old", "new")}
    def tapped(server, name):
        realpeers.require(server)
        return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(taps[name]), "--",
                     *server.argv, env=dict(server.env))
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("py", tapped(realpeers.MODERN_PY_ECHO, "py"))
            await host.add_server("ts", tapped(realpeers.MODERN_TS, "ts"))
            await host.add_server("new", tapped(realpeers.MODERN_PY_TIME, "new"))
            await host.add_server("old", tapped(realpeers.LEGACY_PY_TIME, "old"),
                                  allow_legacy=True)
            names = {t.name: (t.server, t.local_name) for t in host.tools()}
            assert names["py_echo"] == ("py", "echo") and names["ts_echo"] == ("ts", "echo")
            assert names["new_get_current_time"] == ("new", "get_current_time")
            assert names["old_get_current_time"] == ("old", "get_current_time")
            a = await host.call_tool("py_echo", {"text": "to python"})
            b = await host.call_tool("ts_echo", {"text": "to typescript"})
            c = await host.call_tool("old_get_current_time", {"timezone": "UTC"})
            assert "to python" in a.text and "to typescript" in b.text and "UTC" in c.text
    run(main())
    sent = {n: [(m["params"]["name"], m["params"].get("arguments")) for m in calls(t)]
            for n, t in taps.items()}
    assert sent["py"] == [("echo", {"text": "to python"})]
    assert sent["ts"] == [("echo", {"text": "to typescript"})]
    assert sent["old"] == [("get_current_time", {"timezone": "UTC"})]
    assert sent["new"] == []


def test_list_changed_from_a_legacy_server_refetches_at_once(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("old", scripted(
                "--era", "legacy", "--notify-after-call", "notifications/tools/list_changed",
                tap=tap), allow_legacy=True)
            assert lists(tap) == 1
            await host.call_tool("echo", {})
            deadline = time.monotonic() + 20
            while lists(tap) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert lists(tap) == 2, "the announced change refetched the list without a poll"
            assert "echo" in [t.name for t in host.tools()]
    run(main())


def test_an_announced_change_reaches_the_watchers_even_when_the_list_comes_out_the_same(
        tap, no_leaks):
    # What a gateway relays: the server said its tools changed (here they did not, as after
    # a tool added and removed again), so its clients are told and list again.
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("old", scripted(
                "--era", "legacy", "--notify-after-call", "notifications/tools/list_changed",
                tap=tap), allow_legacy=True)
            told: list[list[str]] = []
            host.watch_catalog(lambda catalog: told.append(
                [entry.name for entry in catalog.entries]))
            before = [t.name for t in host.tools()]
            await host.call_tool("echo", {})
            deadline = time.monotonic() + 20
            while not told and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert told == [before], "the announcement was relayed once, the list unchanged"
            await host.refresh_tools()
            assert len(told) == 1, "a re-list that changed nothing and was not announced"
    run(main())


@pytest.mark.real_servers
def test_real_servers_collide_under_reject(no_leaks):
    async def main():
        async with Host(catalog=CatalogOptions(collision="reject"), settings=SETTINGS) as host:
            py = realpeers.require(realpeers.MODERN_PY_ECHO)
            ts = realpeers.require(realpeers.MODERN_TS)
            await host.add_server("py", stdio(*py.argv, env=dict(py.env)))
            with pytest.raises(ToolCollision) as info:
                await host.add_server("ts", stdio(*ts.argv, env=dict(ts.env)))
            assert "py" in str(info.value) and "ts" in str(info.value)
            assert "echo" in str(info.value)
            assert [s.name for s in host.servers()] == ["py"]
            assert "hi" in (await host.call_tool("echo", {"text": "hi"})).text
    run(main())


def test_progress_reaches_only_its_call_and_logs_reach_the_host_tagged(tap, no_leaks):
    logs: list[tuple[str, dict]] = []
    async def main():
        async with Host(settings=SETTINGS,
                        client=ClientOptions(on_log=lambda s, p: logs.append((s, p)))) as host:
            await host.add_server("talk", scripted(tap=tap))
            seen_a: list = []
            seen_b: list = []
            a, b = await asyncio.gather(
                host.call_tool("chatty", {"n": 1}, on_progress=lambda *p: seen_a.append(p),
                               log_level="info"),
                host.call_tool("chatty", {"n": 2}, on_progress=lambda *p: seen_b.append(p)))
            assert seen_a == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
            assert seen_b == seen_a  # each call saw exactly its own three, nothing else
            assert orjson.loads(a.text) == {"n": 1} and orjson.loads(b.text) == {"n": 2}
            assert host._servers.handle("talk").notices.dropped == 2  # the "not ours" tokens
    run(main())
    assert logs == [("talk", {"level": "info", "logger": "chatty", "data": "asked for level info"})]
    sent = calls(tap)
    tokens = [c["params"]["_meta"]["progressToken"] for c in sent]
    assert len(set(tokens)) == 2
    assert [c["params"]["_meta"].get("io.modelcontextprotocol/logLevel") for c in sent] == [
        "info", None]
    for c in sent:
        validate_message(c, MODERN)


def test_over_stdio_a_log_message_is_a_calls_only_while_it_alone_is_in_flight(tap, no_leaks):
    """stdio carries no stream per request: with one call in flight, asking for logs, its
    sink gets the message; while two are in flight a message names neither, so the host
    gets it, and never the other call."""
    host_logs: list[tuple[str, dict]] = []

    async def main():
        async with Host(settings=SETTINGS,
                        client=ClientOptions(on_log=lambda s, p: host_logs.append((s, p)))
                        ) as host:
            await host.add_server("talk", scripted(tap=tap))
            alone: list[dict] = []
            await host.call_tool("chatty", {"n": 1}, log_level="info", on_log=alone.append)
            assert alone == [{"level": "info", "logger": "chatty",
                              "data": "asked for level info"}]
            assert host_logs == []
            a: list[dict] = []
            b: list[dict] = []
            await asyncio.gather(
                host.call_tool("chatty", {"n": 2}, log_level="info", on_log=a.append),
                host.call_tool("chatty", {"n": 3}, log_level="debug", on_log=b.append))
            # The server answers in turn: a's message came while both asked (the host's);
            # b's came while both asked, or once a was done and b alone was left.
            assert a == []
            got_b = [p["data"] for p in b] + [p["data"] for _, p in host_logs
                                                if p["data"] == "asked for level debug"]
            assert got_b == ["asked for level debug"]
            # A call that asked for logs is in flight; one that asked for none logs anyway
            # (a server may): that line is not the asking call's (issue 36, finding 7).
            slow: list[dict] = []
            started = asyncio.Event()
            sleeping = asyncio.ensure_future(host.call_tool(
                "sleep", {"seconds": 60}, log_level="debug", on_log=slow.append,
                on_progress=lambda *_: started.set()))  # "sleeping": it is with the server
            await asyncio.wait_for(started.wait(), 20)
            await host.call_tool("chatty", {"unasked": "the plain call's"})
            for _ in range(400):  # the line is somewhere by now, or soon
                if slow or any(p["data"] == "the plain call's" for _, p in host_logs):
                    break
                await asyncio.sleep(0.025)
            assert slow == [], "the asking call got a line of another call's"
            assert ("talk", {"level": "warning", "logger": "chatty",
                             "data": "the plain call's"}) in host_logs
            sleeping.cancel()
            await asyncio.gather(sleeping, return_exceptions=True)
    run(main())
    assert "asked for level info" in [p["data"] for _, p in host_logs]


def _crash_calls(tap) -> list[dict]:
    return [c for c in calls(tap) if c["params"]["name"] == "crash"]


@pytest.mark.parametrize("idempotent,sends", [(False, 1), (True, 3)])
def test_calls_after_a_crash_are_retried_only_when_idempotent(tap, no_leaks, idempotent,
                                                              sends):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            with pytest.raises(TransportLost) as info:
                await host.call_tool("crash", {}, idempotent=idempotent,
                                     idempotency_key="order-42", timeout=60)
            assert info.value.attempts == sends
    run(main())
    sent = _crash_calls(tap)
    assert len(sent) == sends
    # Each retry went to a fresh server process as a new request; the key never changed.
    assert {c["params"]["_meta"]["dev.trunkline/idempotencyKey"] for c in sent} == {"order-42"}
    pids = [r["pid"] for r in taplog.load_records(tap)
            if r["dir"] == "in" and '"crash"' in r["line"]]
    assert len(set(pids)) == sends


def test_idempotent_tools_from_the_server_config_are_retried(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap), idempotent_tools=["crash"])
            with pytest.raises(TransportLost):
                await host.call_tool("crash", {}, timeout=60)
    run(main())
    assert len(_crash_calls(tap)) == 3


def test_reads_are_retried_after_transport_loss(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            status = await host.add_server("s", scripted("--tools-list", "exit", tap=tap))
            # Three attempts lost: the server is added unlisted, saying why.
            assert status.listing_error.startswith("tools/list failed: server exited")
            return time.time()
    added_at = run(main())
    # Before add_server returned (its listing is tried again later, in the background).
    listed = [r for r in taplog.load_records(tap) if r["dir"] == taplog.IN
              and r["t"] <= added_at and orjson.loads(r["line"]).get("method") == "tools/list"]
    assert len(listed) == 3


def test_cancelling_a_call_cancels_it_on_the_wire(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            task = asyncio.ensure_future(host.call_tool("sleep", {}, timeout=60))
            await until_sent(tap, "tools/call")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await until_sent(tap, "notifications/cancelled")
            # The server is still fine for everyone else.
            assert orjson.loads((await host.call_tool("echo", {"after": 1})).text) == {"after": 1}
            # The cancelled call's slot was given back, as the answered one's was.
            assert host.servers()[0].in_flight == 0
    run(main())
    msgs = list(map(orjson.loads, taplog.lines(tap, taplog.IN)))
    call = next(m for m in msgs if m.get("method") == "tools/call")
    cancel = next(m for m in msgs if m.get("method") == "notifications/cancelled")
    assert cancel["params"]["requestId"] == call["id"]
    validate_message(cancel, MODERN)


async def until_sent(tap, method, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not any(m.get("method") == method
                  for m in map(orjson.loads, taplog.lines(tap, taplog.IN))):
        assert time.monotonic() < deadline, f"{method} never reached the server"
        await asyncio.sleep(0.02)


def test_retry_of_an_unavailable_server_starts_it_afresh(no_leaks, tap):
    """``Host.retry(name)`` used to be shadowed by the retry policy attribute (now
    ``retry_policy``): calling it raised TypeError."""
    async def main():
        async with Host(settings=SETTINGS) as host:
            first = await host.add_server("old", scripted("--era", "legacy", tap=tap))
            assert first.state is ServerState.UNAVAILABLE
            again = await host.retry("old")
            assert again.state is ServerState.UNAVAILABLE and again.restarts == 0
            assert again.worker_pid != first.worker_pid
    run(main())
    assert [m.get("method") for m in taplog.messages(tap)] == ["server/discover"] * 2
