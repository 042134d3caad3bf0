"""A gateway's configuration reloaded while it serves (issue 42): ``Gateway.reload`` in
this process (servers added, removed and replaced by difference, the unchanged one
untouched, one list change told to a listen stream for a reload that changed its tools
and none for one that did not; broken configurations refused whole; the policy), then
``trunkline serve --http`` reloading on SIGHUP (with ``--processes 2`` every copy) and on
``--watch-config``, ``/readyz`` during a reload of a slow starter, and the drain notice.
Behind it: the real mcp 2.x server of ``tests/peers/py_modern_echo.py``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

import realpeers
from conftest import run
from gateways import SUB, HttpGateway, modern_meta, real_server, sse_messages
from trunkline.gateway.serve import Gateway, GatewaySettings

pytestmark = pytest.mark.real_servers

TOOLS = "notifications/tools/list_changed"


def echo(**env: str) -> dict[str, Any]:
    """An entry of the real echo server; ``env`` tells two definitions apart."""
    params = real_server(realpeers.require(realpeers.MODERN_PY_ECHO))
    return {"command": params.command, "args": list(params.args),
            "env": {**params.env, **env}}


def slow_echo(seconds: float) -> dict[str, Any]:
    """The echo server, started ``seconds`` late (a slow starter)."""
    entry = echo()
    command = " ".join([entry["command"], *entry["args"]])
    return {"command": "sh", "args": ["-c", f"sleep {seconds}; exec {command}"],
            "env": entry["env"]}


def write(path: Path, servers: dict[str, Any] | str, **top: Any) -> Path:
    """Put a configuration in place at once (a reload never reads half a file)."""
    draft = path.with_suffix(".draft")
    draft.write_text(servers if isinstance(servers, str)
                     else json.dumps({"mcpServers": servers, **top}))
    os.replace(draft, path)
    return path


def pids(gateway: Gateway) -> dict[str, int | None]:
    return {s.name: s.worker_pid for s in gateway.host.servers()}


def served_by(gateway: Gateway) -> set[str]:
    return {t.server for t in gateway.host.tools()}


async def readyz(base: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{base}/readyz") as response:
        return response.status, await response.json()


async def until(predicate: Any, what: str, seconds: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await predicate():
        assert loop.time() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.05)


def test_a_reload_changes_the_fleet_by_difference_and_tells_a_change_once(no_leaks, tmp_path):
    path = write(tmp_path / "mcp.json", {"a": echo(), "b": echo(), "c": echo()})

    async def main() -> None:
        async with Gateway(GatewaySettings(config=path)) as gateway:
            assert gateway.url is not None
            client = HttpGateway(None, gateway.url)  # type: ignore[arg-type]
            told: list[Any] = []
            gateway.watch_reloads(told.append)
            listen = client.message("subscriptions/listen", {
                "notifications": {"toolsListChanged": True}, "_meta": modern_meta()})
            stream = await client.http.post(gateway.url, data=orjson.dumps(listen),
                                            headers=client.modern_headers(listen))
            heard = sse_messages(stream)
            assert (await asyncio.wait_for(anext(heard), 30))["method"] == \
                "notifications/subscriptions/acknowledged"
            before = pids(gateway)

            write(path, {"a": echo(), "c": echo(DEFINITION="2"), "d": echo()})
            outcome = await gateway.reload()
            assert (outcome.ok, outcome.error) == (True, None)
            assert (outcome.added, outcome.removed, outcome.replaced, outcome.unchanged) == \
                (("d",), ("b",), ("c",), ("a",))
            assert not outcome.policy_changed and outcome.finished_at >= outcome.started_at
            assert told == [outcome] and gateway.last_reload == outcome
            assert not gateway.reloading
            after = pids(gateway)
            assert list(after) == ["a", "c", "d"]
            assert after["a"] == before["a"] and after["c"] != before["c"]
            assert served_by(gateway) == {"a", "c", "d"}
            changed = await asyncio.wait_for(anext(heard), 30)
            assert changed == {"jsonrpc": "2.0", "method": TOOLS,
                               "params": {"_meta": {SUB: listen["id"]}}}
            _, called = await client.modern("tools/call", {"name": "d_echo",
                                                           "arguments": {"text": "new"}})
            assert called["result"]["content"][0]["text"] == "new"

            # Nothing changed: nothing touched. A new definition of c serving the same
            # tools: replaced, but no client sees a change.
            same = await gateway.reload()
            assert same.ok and same.unchanged == ("a", "c", "d") and not same.replaced
            write(path, {"a": echo(), "c": echo(DEFINITION="3"), "d": echo()})
            quiet = await gateway.reload()
            assert quiet.ok and quiet.replaced == ("c",)
            assert pids(gateway)["a"] == before["a"]
            assert told == [outcome, same, quiet]
            status, ready = await readyz(client.base)
            assert status == 200 and ready["reloading"] is False and ready["starting"] == []
        # Stopped: the stream ends with its answer, and nothing else came on it.
        rest = [m async for m in heard]
        assert rest == [{"jsonrpc": "2.0", "id": listen["id"],
                         "result": {"resultType": "complete"}}], rest
        stream.close()
        await client.http.close()

    run(main(), timeout=240)


BROKEN = {
    "not JSON": ("{\"mcpServers\": {", "not valid JSON"),
    "a bad entry": ({"a": echo(), "x": {"command": 5}}, "'x'"),
    "a policy that does not compile": (
        {"rules": [{"id": "broken", "allow": ["list"], "when": "identity.groups.exists(g, "}]},
        "rule 'broken': \"when\" does not compile"),
    "the token store moved": ({"store": "elsewhere"}, "a restart is needed to change the "
                                                      "\"oauth\" settings"),
}


def test_a_broken_configuration_is_refused_whole_and_the_fleet_serves_on(no_leaks, tmp_path,
                                                                          caplog):
    path = write(tmp_path / "mcp.json", {"a": echo()})

    async def main() -> None:
        async with Gateway(GatewaySettings(config=path)) as gateway:
            before, tools = pids(gateway), gateway.host.tools()
            for case, (broken, says) in BROKEN.items():
                if case == "a policy that does not compile":
                    write(path, {"a": echo(), "b": echo()}, policy=broken)
                elif case == "the token store moved":
                    write(path, {"a": echo(), "b": echo()}, oauth=broken)
                else:
                    write(path, broken)
                caplog.clear()
                with caplog.at_level(logging.ERROR, "trunkline.gateway"):
                    outcome = await gateway.reload()
                assert not outcome.ok and outcome.error is not None, case
                assert says in outcome.error, (case, outcome.error)
                assert (outcome.added, outcome.removed, outcome.replaced) == ((), (), ())
                assert any("configuration not reloaded" in r.getMessage()
                           and says in r.getMessage() for r in caplog.records), case
                assert pids(gateway) == before and gateway.host.tools() == tools, case
                assert gateway.last_reload == outcome

    run(main(), timeout=180)


def test_a_reload_puts_a_new_policy_in_force_without_touching_a_server(no_leaks, tmp_path):
    only_echo = {"rules": [{"id": "echo", "allow": ["list", "call"], "tools": ["a/echo"]}]}
    path = write(tmp_path / "mcp.json", {"a": echo()}, policy=only_echo)

    async def main() -> None:
        async with Gateway(GatewaySettings(config=path)) as gateway:
            client = HttpGateway(None, gateway.url)  # type: ignore[arg-type]
            before = pids(gateway)
            _, listed = await client.modern("tools/list")
            assert [t["name"] for t in listed["result"]["tools"]] == ["echo"]
            only_search = {"rules": [{"id": "search", "allow": ["list", "call"],
                                      "tools": ["a/search"]}]}
            write(path, {"a": echo()}, policy=only_search)
            outcome = await gateway.reload()
            assert outcome.ok and outcome.policy_changed and outcome.unchanged == ("a",)
            _, listed = await client.modern("tools/list")
            assert [t["name"] for t in listed["result"]["tools"]] == ["search"]
            assert pids(gateway) == before
            await client.http.close()

    run(main(), timeout=120)


def test_readyz_says_a_reload_is_under_way_and_which_servers_still_start(no_leaks, tmp_path):
    path = write(tmp_path / "mcp.json", {"a": echo()})

    async def main() -> None:
        async with Gateway(GatewaySettings(config=path)) as gateway:
            assert gateway.url is not None
            base = gateway.url.rsplit("/", 1)[0]
            status, ready = await readyz(base)
            assert status == 200 and ready == {"ready": True, "tools": len(
                gateway.host.tools()), "unavailable": [], "reloading": False, "starting": []}
            write(path, {"a": echo(), "slowpoke": slow_echo(3)})
            reloading = asyncio.ensure_future(gateway.reload())
            seen: list[dict[str, Any]] = []

            async def starting() -> bool:
                status, ready = await readyz(base)
                assert status == 200  # a reload does not take the gateway out
                seen.append(ready)
                return ready["reloading"] and ready["starting"] == ["slowpoke"]

            await until(starting, "the slow starter shown as starting")
            outcome = await reloading
            assert outcome.ok and outcome.added == ("slowpoke",)
            status, ready = await readyz(base)
            assert ready["reloading"] is False and ready["starting"] == []
            assert "slowpoke" in served_by(gateway)

    run(main(), timeout=120)


def test_the_drain_notice_answers_503_at_readyz_while_everything_else_serves(no_leaks,
                                                                              tmp_path):
    path = write(tmp_path / "mcp.json", {"a": echo()})

    async def main() -> None:
        gateway = Gateway(GatewaySettings(config=path, drain_notice_s=3.0))
        await gateway.__aenter__()
        stopping: asyncio.Future[Any] | None = None
        try:
            assert gateway.url is not None
            client = HttpGateway(None, gateway.url)  # type: ignore[arg-type]
            assert (await readyz(client.base))[0] == 200
            stopping = asyncio.ensure_future(gateway.__aexit__(None, None, None))

            async def out() -> bool:
                return (await readyz(client.base))[0] == 503

            await until(out, "/readyz answering 503")
            assert not stopping.done()
            status, listed = await client.modern("tools/list")
            assert status == 200 and listed["result"]["tools"], listed
            async with client.http.get(f"{client.base}/healthz") as health:
                assert health.status == 200
            await client.http.close()
            await stopping
        finally:
            if stopping is None:
                await gateway.__aexit__(None, None, None)
            else:
                await stopping

    run(main(), timeout=120)


async def tool_names(gw: HttpGateway) -> set[str]:
    _, listed = await gw.modern("tools/list")
    return {t["name"] for t in listed["result"]["tools"]}


async def said(gw: HttpGateway, text: str, times: int = 1, seconds: float = 60) -> str:
    """Read the gateway's stderr until ``text`` came ``times`` times; what was read."""
    assert gw.proc.stderr is not None
    read = ""
    while read.count(text) < times:
        line = await asyncio.wait_for(gw.proc.stderr.readline(), seconds)
        assert line, f"the gateway ended before saying {text!r}: {read}"
        read += line.decode()
    return read


def test_sighup_reloads_serve_and_a_broken_file_is_refused(gateways, tmp_path):
    path = write(tmp_path / "mcp.json", {"a": echo()})

    async def main() -> None:
        gw = await HttpGateway.start(path, gateways)
        assert "echo" in await tool_names(gw)
        write(path, {"a": echo(), "b": echo()})
        gw.proc.send_signal(signal.SIGHUP)
        await said(gw, "configuration reloaded: added b")
        assert {"a_echo", "b_echo"} <= await tool_names(gw)
        write(path, "{")
        gw.proc.send_signal(signal.SIGHUP)
        await said(gw, "configuration not reloaded")
        assert {"a_echo", "b_echo"} <= await tool_names(gw)
        assert await gw.stop() == 0

    run(main(), timeout=180)


def test_serve_watching_its_file_reloads_when_it_changes(gateways, tmp_path):
    path = write(tmp_path / "mcp.json", {"a": echo()})

    async def main() -> None:
        gw = await HttpGateway.start(path, gateways, "--watch-config")
        write(path, {"a": echo(), "b": echo()})
        await said(gw, "configuration reloaded: added b")
        assert {"a_echo", "b_echo"} <= await tool_names(gw)
        write(path, {"b": echo()})
        await said(gw, "configuration reloaded: removed a")
        assert "echo" in await tool_names(gw)
        assert await gw.stop() == 0

    run(main(), timeout=180)


def test_with_processes_every_copy_reloads_on_sighup(gateways, tmp_path):
    path = write(tmp_path / "mcp.json", {"a": echo()})

    async def main() -> None:
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        write(path, {"a": echo(), "b": echo()})
        gw.proc.send_signal(signal.SIGHUP)
        await said(gw, "configuration reloaded: added b", times=2)
        for _ in range(4):  # whichever copy the kernel gives the connection to
            listed = await gw.modern_on_new_connection("tools/list", {})
            assert {"a_echo", "b_echo"} <= {t["name"] for t in listed["result"]["tools"]}
        assert await gw.stop() == 0

    run(main(), timeout=240)
