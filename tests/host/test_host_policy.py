"""``Host(policy=...)``: the library decides per identity, against real servers
(mcp-server-time and the echo peer on the official Python SDK 2.x): ``tools()`` and
``search_tools()`` show an identity what it may list, a call it may not make never leaves
the host (``NotPermitted``), a tool it may not see is refused exactly as a name no tool
has (``ToolHidden`` with the unknown tool's message), and ``set_policy`` changes all of it
for the calls that follow."""

from __future__ import annotations

import pytest

import realpeers
from conftest import run
from trunkline import Identity, NotPermitted, Policy, ToolHidden, UnknownTool
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

pytestmark = pytest.mark.real_servers

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))

POLICY = Policy.compile({"rules": [
    {"id": "time-for-all", "allow": ["list", "call"], "servers": ["time"]},
    {"id": "echo-for-support", "allow": ["list", "call"], "servers": ["echo"],
     "when": "'support' in identity.groups"},
    {"id": "no-sleep", "deny": ["call"], "tools": ["echo/sleep"],
     "when": "!('admin' in identity.scopes)"},
    {"id": "short-echo", "deny": ["call"], "tools": ["echo/echo"],
     "arguments": "size(arguments.text) > 8"},
]})

SUPPORT = Identity.user("sam", groups=["support"])
ADMIN = Identity.user("ada", groups=["support"], scopes=["admin"])
OTHER = Identity.user("olga")


def real(server, *extra: str):
    realpeers.require(server)
    return stdio(server.argv[0], *server.argv[1:], *extra, env=dict(server.env))


def names(entries):
    return sorted(e.name for e in entries)


def test_each_identity_sees_and_calls_what_the_policy_grants(no_leaks):
    async def main():
        async with Host(settings=SETTINGS, policy=POLICY) as host:
            await host.add_server("time", real(realpeers.MODERN_PY_TIME))
            await host.add_server("echo", real(realpeers.MODERN_PY_ECHO))
            assert names(host.tools(identity=OTHER)) == ["convert_time", "get_current_time"]
            assert names(host.tools(identity=SUPPORT)) == [
                "add_tool", "ask_name", "convert_time", "count", "echo", "get_current_time",
                "rename_tool", "rewrite_tool", "rewritten_calls", "search", "sleep", "touch"]
            assert names(host.tools()) == names(host.tools(identity=OTHER))  # local

            # A search never finds what the identity may not see.
            assert [m.name for m in host.search_tools("echo text back", identity=SUPPORT)
                    ][:1] == ["echo"]
            assert all(m.server == "time" for m in host.search_tools("echo text back",
                                                                     identity=OTHER))

            ok = await host.call_tool("echo", {"text": "hi"}, identity=SUPPORT)
            assert not ok.is_error and "hi" in ok.text
            # Hidden: the very message of a name no tool has.
            with pytest.raises(ToolHidden) as hidden:
                await host.call_tool("echo", {"text": "hi"}, identity=OTHER)
            with pytest.raises(UnknownTool) as unknown:
                await host.call_tool("no_such_tool", {}, identity=OTHER)
            assert str(hidden.value) == str(unknown.value).replace("no_such_tool", "echo")
            assert hidden.value.rule is None
            # Listed but not callable: refused before anything is sent.
            with pytest.raises(NotPermitted) as refused:
                await host.call_tool("sleep", {"ms": 1}, identity=SUPPORT)
            assert refused.value.rule == "no-sleep" and "no-sleep" not in str(refused.value)
            assert not (await host.call_tool("sleep", {"ms": 1}, identity=ADMIN)).is_error
            # Decided on the call's arguments.
            with pytest.raises(NotPermitted):
                await host.call_tool("echo", {"text": "far too long"}, identity=SUPPORT)

            host.set_policy(Policy.compile({"rules": [
                {"id": "all", "allow": ["list", "call"]}]}))
            assert len(host.tools(identity=OTHER)) == 12
            assert not (await host.call_tool("echo", {"text": "now"}, identity=OTHER)).is_error
            host.set_policy(None)
            assert len(host.tools(identity=OTHER)) == 12
    run(main())


def test_a_host_from_a_configuration_takes_its_policy(tmp_path, no_leaks):
    server = realpeers.require(realpeers.MODERN_PY_TIME)
    (tmp_path / "policy.json").write_text(
        '{"rules": [{"id": "convert-only", "allow": ["list", "call"], '
        '"tools": ["convert_time"]}]}')
    config = {"mcpServers": {"time": {"command": server.argv[0], "args": server.argv[1:],
                                      "env": dict(server.env)}},
              "policy": str(tmp_path / "policy.json")}

    async def main():
        async with Host.from_config(config, settings=SETTINGS) as host:
            assert names(host.tools()) == ["convert_time"]
            with pytest.raises(ToolHidden):
                await host.call_tool("get_current_time", {"timezone": "UTC"})
    run(main())


def test_prompts_and_resources_are_decided_per_identity_too(no_leaks):
    policy = Policy.compile({"rules": [
        {"id": "about", "allow": ["list", "call"], "resources": ["echo://about"]},
        {"id": "greet", "allow": ["list", "call"], "prompts": ["echo/greet"],
         "when": "'support' in identity.groups"}]})

    async def main():
        async with Host(settings=SETTINGS, policy=policy) as host:
            await host.add_server("echo", real(realpeers.MODERN_PY_ECHO))
            read = await host.read_resource("echo", "echo://about", identity=OTHER)
            assert "trunkline modern echo peer" in str(read)
            with pytest.raises(NotPermitted) as refused:
                await host.read_resource("echo", "echo://items/apple", identity=SUPPORT)
            assert refused.value.rule is None
            got = await host.get_prompt("echo", "greet", {"name": "Ada"}, identity=SUPPORT)
            assert "Ada" in str(got)
            with pytest.raises(NotPermitted):
                await host.get_prompt("echo", "greet", {"name": "Ada"}, identity=OTHER)
    run(main())
