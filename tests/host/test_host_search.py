"""``Host.search_tools`` against real servers (mcp-server-time and the echo peer on the
official Python SDK 2.x, server-everything on the TypeScript SDK 1.x): what it finds is
the host's catalog, under the names the model calls (prefixed or aliased), each callable
as found; a tool a server adds at runtime is found once the catalog has it, and a server
that goes away takes its tools out of the results."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import replace

import pytest

import realpeers
from conftest import run
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, RestartPolicy

pytestmark = pytest.mark.real_servers

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))


def real(server, *extra: str):
    realpeers.require(server)
    return stdio(server.argv[0], *server.argv[1:], *extra, env=dict(server.env))


async def fleet(host: Host) -> None:
    await host.add_server("time", real(realpeers.MODERN_PY_TIME))
    await host.add_server("echo", real(realpeers.MODERN_PY_ECHO, "--listen"))
    await host.add_server("everything", real(realpeers.LEGACY_TS_EVERYTHING),
                          allow_legacy=True)


async def until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.05)


def test_search_finds_real_tools_and_each_is_callable_as_found(no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await fleet(host)
            (now,) = host.search_tools("current time in a timezone", limit=1)
            assert (now.name, now.server, now.entry.local_name) == \
                ("get_current_time", "time", "get_current_time")
            assert now.score > 0 and now.entry is host.catalog.lookup("get_current_time")
            result = await host.call_tool(now.name, {"timezone": "UTC"})
            assert not result.is_error and '"timezone": "UTC"' in result.text

            add = host.search_tools("sum of two numbers")[0]
            assert (add.name, add.server) == ("get-sum", "everything")
            assert "5" in (await host.call_tool(add.name, {"a": 2, "b": 3})).text

            # Both servers have "echo": each is found under its prefixed name.
            # (The echo server's other tools match "echo" too, by its name: lower.)
            echoes = host.search_tools("echo", limit=5)
            assert [m.entry.local_name for m in echoes[:2]] == ["echo", "echo"]
            by_server = {m.server: m.name for m in echoes[:2]}
            assert by_server == {"echo": "echo_echo", "everything": "everything_echo"}
            said = await host.call_tool(by_server["everything"], {"message": "hi"})
            assert "hi" in said.text
            assert (await host.call_tool(by_server["echo"], {"text": "ho"})).text == "ho"

            assert host.search_tools("xylophone quantum") == []
            with pytest.raises(ValueError):
                host.search_tools("echo", limit=0)
    run(main())


def test_model_safe_names_are_what_search_returns(no_leaks):
    async def main():
        with pytest.warns(DeprecationWarning, match="model_safe_names"):
            host = Host(settings=SETTINGS, model_safe_names=True)  # every name is, now
        async with host:
            await fleet(host)
            echoes = {m.server: m for m in host.search_tools("echo", limit=2)}
            prefixed = echoes["everything"]
            assert prefixed.entry.name == "everything_echo"
            assert prefixed.name == prefixed.entry.name and "/" not in prefixed.name
            assert "hey" in (await host.call_tool(prefixed.name, {"message": "hey"})).text
    run(main())


def test_a_tool_added_at_runtime_is_found_once_listed(no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("echo", real(realpeers.MODERN_PY_ECHO, "--listen"))
            assert host.search_tools("translate klingon") == []
            added = await host.call_tool("add_tool", {"name": "translate_klingon"}, timeout=30)
            assert not added.is_error
            # No refresh: the server's list change on its listen stream rebuilds the
            # catalog, and the next search builds the index again.
            await until(lambda: "translate_klingon" in host.catalog)
            (found,) = host.search_tools("translate klingon")
            assert found.name == "translate_klingon" and found.server == "echo"
            assert (await host.call_tool(found.name, {})).text == "translate_klingon here"
    run(main())


def test_a_server_that_goes_away_takes_its_tools_out_of_the_results(no_leaks):
    no_restarts = replace(SETTINGS, restart=RestartPolicy(max_restarts=0))

    async def main():
        async with Host(settings=no_restarts) as host:
            await fleet(host)
            assert host.search_tools("current time")[0].server == "time"
            time_server = next(s for s in host.servers() if s.name == "time")
            os.kill(time_server.server_pid, signal.SIGKILL)
            await until(lambda: "get_current_time" not in host.catalog)
            found = host.search_tools("current time", limit=50)
            assert found and all(m.server != "time" for m in found), found
    run(main())


def test_under_a_policy_each_identity_finds_what_it_may_list(no_leaks):
    """The index is of the whole catalog, and each search keeps what its identity may
    list: not the index of what the host's own (``local``) identity may see, which under
    a policy granting it nothing is nothing."""
    from trunkline import Identity, Policy

    policy = Policy.compile({"rules": [
        {"id": "ops-time", "allow": ["list", "call"], "servers": ["time"],
         "when": "'ops' in identity.groups"},
        {"id": "everyone-echoes", "allow": ["list"], "tools": ["echo/echo"],
         "when": "identity.kind == 'user'"}]})
    ops = Identity.user("ana", groups=["ops"])
    dev = Identity.user("bo", groups=["dev"])

    async def main():
        async with Host(settings=SETTINGS, policy=policy) as host:
            await host.add_server("time", real(realpeers.MODERN_PY_TIME))
            await host.add_server("echo", real(realpeers.MODERN_PY_ECHO))
            query = "current time in a timezone echo text"
            assert {m.name for m in host.search_tools(query, limit=50, identity=ops)} == \
                {"get_current_time", "convert_time", "echo"}
            assert [m.name for m in host.search_tools(query, limit=50, identity=dev)] == \
                ["echo"]
            assert host.search_tools(query, limit=50) == []  # local: granted nothing
            (now,) = host.search_tools("current time", limit=1, identity=ops)
            assert now.name == "get_current_time"
            result = await host.call_tool(now.name, {"timezone": "UTC"}, identity=ops)
            assert not result.is_error
            # The limit is checked as without a policy.
            for limit in (0, -1, True, 2.5):
                with pytest.raises(ValueError):
                    host.search_tools(query, limit=limit, identity=ops)
    run(main())


def test_under_a_policy_an_empty_catalog_finds_nothing(no_leaks):
    from trunkline import Identity, Policy

    policy = Policy.compile({"rules": [{"id": "all", "allow": ["list", "call"]}]})

    async def main():
        async with Host(settings=SETTINGS, policy=policy) as host:
            assert host.search_tools("anything", identity=Identity.user("ana")) == []
    run(main())
