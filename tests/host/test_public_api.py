"""What a host developer finds from ``import trunkline``: every public name, listed by
``help(trunkline)``, and ``Host.from_config`` taking the mapping a host already holds."""

from __future__ import annotations

import json
import pydoc
import re
import subprocess
import sys
import warnings
from collections.abc import Callable

import pytest

import realpeers
import trunkline
from conftest import run
from trunkline.catalog import ListingDriver, build_catalog
from trunkline.errors import ConfigurationError

#: The names a host program written from the documentation uses (the README's first example,
#: the pages on pins, OAuth and errors), each from ``trunkline`` itself.
USED_BY_A_HOST = [
    "Host", "ServerConfig", "HostSettings", "RetryPolicy", "RestartPolicy", "ToolEntry",
    "ServerStatus", "ServerState", "CallToolResult", "InputRequired", "CallInput",
    "OAuthClient", "PinStore", "FileRecords", "ToolBounds", "CatalogWarning", "stdio",
    "http", "TrunklineError", "ConfigurationError", "ToolCollision", "UnknownTool",
    "ToolQuarantined", "ConnectionFailure", "TransportLost", "ServerUnavailable",
    "ProtocolFailure", "RequestTimeout", "SchemaViolation", "EraRefused", "ServerError",
    "AuthenticationFailed", "AuthorizationFailed",
]


def test_every_public_name_resolves_and_the_ones_a_host_uses_are_public() -> None:
    assert trunkline.__all__ == sorted(set(trunkline.__all__))
    for name in trunkline.__all__:
        assert getattr(trunkline, name) is not None, name
    assert set(USED_BY_A_HOST) <= set(trunkline.__all__)
    # The same objects as in their modules: one class, two ways to name it.
    from trunkline.catalog.model import ToolEntry
    from trunkline.errors import TransportLost
    from trunkline.protocol.retry import RetryPolicy
    assert (trunkline.ToolEntry, trunkline.TransportLost, trunkline.RetryPolicy) == (
        ToolEntry, TransportLost, RetryPolicy)
    assert issubclass(trunkline.TransportLost, trunkline.ConnectionFailure)
    with pytest.raises(AttributeError, match="no attribute 'Hots'"):
        _ = trunkline.Hots  # type: ignore[attr-defined]  # a misspelling, on purpose


def test_help_lists_the_classes_a_host_program_uses() -> None:
    text = pydoc.render_doc(trunkline, renderer=pydoc.plaintext)
    classes = {line.split()[1].split("(")[0] for line in text.splitlines()
               if line.strip().startswith("class ")}
    wanted = {"Host", "ServerConfig", "ToolEntry", "ServerStatus", "RetryPolicy",
              "HostSettings", "CallToolResult", "InputRequired", "OAuthClient",
              "TrunklineError", "TransportLost", "ToolCollision", "UnknownTool"}
    assert wanted <= classes, wanted - classes
    assert "stdio(" in text and "http(" in text


def test_importing_the_package_loads_none_of_its_parts() -> None:
    # Attributes load on first use: ``import trunkline`` (the demo server does) stays light.
    probe = ("import sys, trunkline; print(sorted(m for m in sys.modules if m == 'asyncio' "
             "or m.startswith('trunkline.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(realpeers.REPO_ROOT / "python")})
    assert out.stdout.strip() == "[]", out.stdout


def _time_server() -> dict:
    server = realpeers.require(realpeers.MODERN_PY_TIME)
    return {"command": server.argv[0], "args": server.argv[1:], "env": dict(server.env)}


@pytest.mark.real_servers
def test_from_config_takes_the_mcp_servers_mapping_a_host_already_holds(no_leaks) -> None:
    config = {"mcpServers": {"clock": _time_server(),
                             "off": {"command": "/nonexistent", "disabled": True}}}
    async def main():
        async with trunkline.Host.from_config(config) as host:
            assert [s.name for s in host.servers()] == ["clock"]
            assert {t.name for t in host.tools()} == {"get_current_time", "convert_time"}
            result = await host.call_tool("get_current_time", {"timezone": "UTC"})
            assert "UTC" in result.text and result.server == "clock"
    run(main())


@pytest.mark.real_servers
def test_a_configuration_may_prefix_every_tool_with_its_server(no_leaks) -> None:
    config = {"collision": "prefix-all", "mcpServers": {"clock": _time_server()}}
    async def main():
        async with trunkline.Host.from_config(config) as host:
            names = {t.name for t in host.tools()}
            assert names == {"clock_get_current_time", "clock_convert_time"}
            result = await host.call_tool("clock_get_current_time", {"timezone": "UTC"})
            assert "UTC" in result.text
    run(main())


@pytest.mark.parametrize("bad,message", [
    ({"servers": {}}, "<mapping>: expected an object with an \"mcpServers\" object"),
    ({"mcpServers": {"x": {"command": "c", "args": "a b"}}}, "<mapping>: server 'x'.*args"),
    ({"mcpServers": {}, "pins": {"approveFirstSight": "yes"}}, "<mapping>.*approveFirstSight"),
    ({"mcpServers": {}, "oauth": {"store": 7}}, "<mapping>.*store"),
    ({"mcpServers": {}, "collision": "first-wins"}, "<mapping>: \"collision\" must be one of"),
])
def test_a_bad_mapping_is_refused_naming_the_key(bad, message, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match=message):
        trunkline.Host.from_config(bad)


def test_every_old_spelling_warns_with_trunklines_own_deprecation_warning(tmp_path) -> None:
    """Whatever the old spelling, the warning is a ``TrunklineDeprecationWarning``: a
    ``DeprecationWarning`` one filter tells apart from other libraries' (this suite's
    makes it an error)."""
    assert issubclass(trunkline.TrunklineDeprecationWarning, DeprecationWarning)
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {}}))
    listings = []
    for server in ("a", "b"):
        driver = ListingDriver(server, "modern")
        driver.add_page({"resultType": "complete", "tools": [{"name": "echo", "inputSchema": {
            "type": "object"}}], "ttlMs": 0, "cacheScope": "public"})
        listings.append(driver.finish())
    catalog = build_catalog(listings)  # a's echo and b's: a_echo and b_echo
    relayed = trunkline.CallInput(relay=True)
    old_spellings: dict[str, Callable[[], object]] = {
        "a Host keyword": lambda: trunkline.Host(collision="reject"),
        "model_safe_names": lambda: trunkline.Host(
            catalog=trunkline.CatalogOptions(model_safe_names=True)),
        "from_config(path=)": lambda: trunkline.Host.from_config(path=path),
        "a from_config keyword": lambda: trunkline.Host.from_config(path, discover_timeout=2.0),
        "a ServerConfig keyword": lambda: trunkline.ServerConfig(
            "s", trunkline.stdio("x"), call_timeout=1.0),
        "a ServerConfig attribute": lambda: trunkline.ServerConfig(
            "s", trunkline.stdio("x")).max_inflight,
        "model_safe_aliases": lambda: build_catalog([], model_safe_aliases=True),
        "a tool's old name": lambda: catalog.lookup("b/echo"),
        "a contested name": lambda: catalog.lookup("echo"),
        "call_tool relaying": lambda: trunkline.Host().call_tool(
            "echo", {}, call_input=relayed).close(),
    }
    for what, spelling in old_spellings.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spelling()
        assert [w.category for w in caught] == [trunkline.TrunklineDeprecationWarning], what


def test_from_config_reads_a_file_as_before_and_path_is_a_deprecated_keyword(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"x": {"command": "c"}},
                                "pins": {"approveFirstSight": True}}))
    from_file = trunkline.Host.from_config(path)
    assert [c.name for c in from_file._pending_config] == ["x"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = trunkline.Host.from_config(path=path)
    assert [c.name for c in old._pending_config] == ["x"]
    assert [w.category for w in caught] == [trunkline.TrunklineDeprecationWarning]
    assert caught[0].filename == __file__  # it points at the caller's line
    with pytest.raises(TypeError, match="needs a configuration"):
        trunkline.Host.from_config()


@pytest.mark.real_servers
def test_real_servers_names_do_not_depend_on_the_file_order_and_old_names_warn(no_leaks):
    # The Python and TypeScript SDK servers both offer echo, search and sleep.
    py, ts = (_entry(realpeers.MODERN_PY_ECHO), _entry(realpeers.MODERN_TS))

    async def catalog(servers: dict) -> dict:
        async with trunkline.Host.from_config({"mcpServers": servers}) as host:
            names = {t.name: (t.server, t.local_name) for t in host.tools()}
            if list(servers) == ["py", "ts"]:
                with pytest.warns(DeprecationWarning, match="'ts/echo'") as caught:
                    moved = host.call_tool("ts/echo", {"text": "old name"})
                assert caught[0].filename == __file__
                assert (await moved).server == "ts"
                with pytest.warns(DeprecationWarning, match="'py' and 'ts' all offer 'echo'"):
                    first = host.call_tool("echo", {"text": "contested"})
                assert (await first).server == "py"  # where it went before, for one release
                assert (await host.call_tool("ts_echo", {"text": "t"})).text == "t"
            return names

    one = run(catalog({"py": py, "ts": ts}))
    other = run(catalog({"ts": ts, "py": py}))
    assert one == other
    assert one["py_echo"] == ("py", "echo") and one["ts_echo"] == ("ts", "echo")
    assert "echo" not in one and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in one)


def _entry(server: realpeers.RealServer) -> dict:
    realpeers.require(server)
    return {"command": server.argv[0], "args": server.argv[1:], "env": dict(server.env)}
