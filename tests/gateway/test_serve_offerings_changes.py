"""A reload tells a client that the prompts or resources list changed only when what it
would list changed (issue 42): the gateway lists the fleet's prompts and resources again
when a server that offers them came or went, and compares with what it served before. A
server's own announced change is told as it comes, even when the list comes out the same.

Behind the gateway (``Gateway`` in this process, served over HTTP on 127.0.0.1): the
conformance suite's everything server (mcp 2.x; its ``test_trigger_prompt_change`` adds a
prompt, removes it again and announces the change) and two of the mcp 2.x echo servers of
``tests/peers/py_modern_echo.py`` (a prompt ``greet``, a resource ``echo://about``, a
template ``echo://items/{item}``). In front: a modern listen stream granted the prompts
and resources lists, and a legacy session's GET stream."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from gateways import SUB, HttpGateway, modern_meta, real_server, sse_messages
from mcp_schema import LEGACY
from trunkline.gateway.serve import Gateway, GatewaySettings

pytestmark = pytest.mark.real_servers

PROMPTS = "notifications/prompts/list_changed"
RESOURCES = "notifications/resources/list_changed"
RESOURCE_LISTS = ("resources/list", "resources/templates/list")
#: Bound against a hang (never a pass/fail threshold).
WAIT_S = 30


def entry(server: realpeers.RealServer, **env: str) -> dict[str, Any]:
    """A configuration entry of a real server; ``env`` tells two definitions apart."""
    params = real_server(realpeers.require(server))
    return {"command": params.command, "args": list(params.args),
            "env": {**params.env, **env}}


def write(path: Path, servers: dict[str, Any]) -> Path:
    """Put a configuration in place at once (a reload never reads half a file)."""
    draft = path.with_suffix(".draft")
    draft.write_text(json.dumps({"mcpServers": servers}))
    os.replace(draft, path)
    return path


class Stream:
    """What one SSE stream carried, read as it comes until it ends."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.messages: list[dict[str, Any]] = []
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in sse_messages(self.response):
            self.messages.append(message)

    def changes(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("method") in (PROMPTS, RESOURCES)]

    def counted(self) -> Counter[str]:
        return Counter(m["method"] for m in self.changes())

    async def heard(self, expected: Counter[str]) -> None:
        """Until the stream carried at least ``expected`` (bounded)."""
        for _ in range(int(WAIT_S / 0.02)):
            if self.counted() >= expected:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"never heard {dict(expected)}: {self.messages}")

    async def ended(self) -> None:
        """Until the stream ended (the gateway stopped): all it will ever carry."""
        try:
            await asyncio.wait_for(asyncio.shield(self._task), WAIT_S)
        finally:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self.response.close()


async def listed(client: HttpGateway) -> dict[str, Any]:
    """What a modern client lists of the prompts and resources (with the templates)."""
    seen = {}
    for method in ("prompts/list", "resources/list", "resources/templates/list"):
        status, answer = await client.modern(method)
        assert status == 200 and "result" in answer, (method, answer)
        seen[method] = answer["result"]
    return seen


def test_reloads_tell_a_change_of_prompts_and_resources_only_when_the_lists_changed(
        no_leaks, tmp_path):
    path = write(tmp_path / "mcp.json", {
        "ev": entry(realpeers.CONFORMANCE_EVERYTHING),
        "a": entry(realpeers.MODERN_PY_ECHO), "b": entry(realpeers.MODERN_PY_ECHO)})

    async def main() -> None:
        streams: list[Stream] = []
        client: HttpGateway | None = None
        try:
            async with Gateway(GatewaySettings(config=path)) as gateway:
                assert gateway.url is not None
                client = HttpGateway(None, gateway.url)  # type: ignore[arg-type]
                listen_id = await exercise(gateway, client, path, streams)
        finally:
            for stream in streams:
                await stream.ended()
            if client is not None:
                await client.http.close()
        modern, legacy = streams
        # Stopped: what the streams carried is all they ever will. The replacement told
        # nothing, nor did B's going of the resources: had they, a stream would hold more.
        assert modern.counted() == legacy.counted() == Counter({PROMPTS: 3, RESOURCES: 1})
        assert all(m["params"] == {"_meta": {SUB: listen_id}} for m in modern.changes())
        assert all(m["params"] == {} for m in legacy.changes())

    run(main(), timeout=240)


async def exercise(gateway: Gateway, client: HttpGateway, path: Path,
                   streams: list[Stream]) -> Any:
    """The reloads and the announced change, with the streams listening; the listen
    stream's id."""
    granted = {"promptsListChanged": True, "resourcesListChanged": True}
    listen = client.message("subscriptions/listen", {
        "notifications": granted, "_meta": modern_meta()})
    modern = Stream(await client.http.post(gateway.url, data=orjson.dumps(listen),
                                           headers=client.modern_headers(listen)))
    streams.append(modern)
    session, _ = await client.legacy_session()
    legacy = Stream(await client.http.get(gateway.url, headers={
        "Accept": "text/event-stream", "Mcp-Session-Id": session["Mcp-Session-Id"],
        "MCP-Protocol-Version": LEGACY}))
    streams.append(legacy)
    for _ in range(int(WAIT_S / 0.02)):
        if modern.messages:
            break
        await asyncio.sleep(0.02)
    assert modern.messages[0]["params"] == {"_meta": {SUB: listen["id"]},
                                            "notifications": granted}
    before = await listed(client)
    assert {p["name"] for p in before["prompts/list"]["prompts"]} >= {"greet"}

    # A's definition changes (its environment): a new process, the same prompts
    # and resources. Nobody is told anything.
    write(path, {"ev": entry(realpeers.CONFORMANCE_EVERYTHING),
                 "a": entry(realpeers.MODERN_PY_ECHO, DEFINITION="2"),
                 "b": entry(realpeers.MODERN_PY_ECHO)})
    replaced = await gateway.reload()
    assert replaced.ok and replaced.replaced == ("a",), replaced
    assert await listed(client) == before

    # B goes: its prompt leaves the list (served as "b/greet"); its resource and
    # template were A's too (served from A), so that list stays. One change of
    # the prompts, on each stream, and none of the resources.
    write(path, {"ev": entry(realpeers.CONFORMANCE_EVERYTHING),
                 "a": entry(realpeers.MODERN_PY_ECHO, DEFINITION="2")})
    removed = await gateway.reload()
    assert removed.ok and removed.removed == ("b",), removed
    after = await listed(client)
    assert after["prompts/list"] != before["prompts/list"]
    assert {k: after[k] for k in RESOURCE_LISTS} == \
        {k: before[k] for k in RESOURCE_LISTS}
    once = Counter({PROMPTS: 1})
    for stream in streams:
        await stream.heard(once)

    # The everything server announces a change of its prompts (one added and
    # removed again): told as it came, though the list is the same again.
    _, called = await client.modern("tools/call", {
        "name": "test_trigger_prompt_change", "arguments": {}})
    assert called["result"].get("isError") is not True, called
    for stream in streams:
        await stream.heard(once + Counter({PROMPTS: 1}))
    assert await listed(client) == after

    # A goes too: its prompt, resource and template leave. One change of each list.
    write(path, {"ev": entry(realpeers.CONFORMANCE_EVERYTHING)})
    removed = await gateway.reload()
    assert removed.ok and removed.removed == ("a",), removed
    last = await listed(client)
    assert all(last[k] != after[k] for k in last), last
    for stream in streams:
        await stream.heard(once + Counter({PROMPTS: 2, RESOURCES: 1}))
    return listen["id"]



def test_a_reload_replacing_many_servers_lists_the_fleet_once(no_leaks, tmp_path):
    """Four servers replaced in one reload make one listing of the fleet's prompts and
    resources, not one per server: the unchanged server (behind ``tests/peers/tap.py``) is
    asked for its prompts once when the gateway starts, once for that reload, and once for
    the next (one removal), however the two listings fall; and the removal is told
    once."""
    tap = tmp_path / "ev.jsonl"
    ev = entry(realpeers.CONFORMANCE_EVERYTHING)
    ev = {**ev, "command": sys.executable,
          "args": [str(PEERS / "tap.py"), "--log", str(tap), "--", ev["command"], *ev["args"]]}
    echoes = {f"e{n}": entry(realpeers.MODERN_PY_ECHO) for n in range(4)}
    path = write(tmp_path / "mcp.json", {"ev": ev, **echoes})

    def prompt_lists() -> int:
        return sum(1 for m in taplog.messages(tap) if m.get("method") == "prompts/list")

    async def main() -> None:
        stream: Stream | None = None
        client: HttpGateway | None = None
        try:
            async with Gateway(GatewaySettings(config=path)) as gateway:
                assert gateway.url is not None
                client = HttpGateway(None, gateway.url)  # type: ignore[arg-type]
                listen = client.message("subscriptions/listen", {
                    "notifications": {"promptsListChanged": True}, "_meta": modern_meta()})
                stream = Stream(await client.http.post(
                    gateway.url, data=orjson.dumps(listen),
                    headers=client.modern_headers(listen)))
                # The gateway lists once when it starts, to know what it serves.
                for _ in range(int(WAIT_S / 0.02)):
                    if prompt_lists() and stream.messages:
                        break
                    await asyncio.sleep(0.02)
                assert prompt_lists() == 1 and stream.messages, stream.messages
                write(path, {"ev": ev, **{name: entry(realpeers.MODERN_PY_ECHO, DEFINITION="2")
                                          for name in echoes}})
                replaced = await gateway.reload()
                assert replaced.ok and replaced.replaced == tuple(echoes), replaced
                write(path, {"ev": ev, **{name: entry(realpeers.MODERN_PY_ECHO, DEFINITION="2")
                                          for name in list(echoes)[:3]}})
                removed = await gateway.reload()
                assert removed.ok and removed.removed == ("e3",), removed
                await stream.heard(Counter({PROMPTS: 1}))
                # The second reload's listing may come after the telling (the first one's
                # listing, under way during the second reload, may have seen the removal).
                for _ in range(int(WAIT_S / 0.02)):
                    if prompt_lists() >= 3:
                        break
                    await asyncio.sleep(0.02)
        finally:
            if stream is not None:
                await stream.ended()
            if client is not None:
                await client.http.close()
        # Stopped: no listing, no telling more.
        assert prompt_lists() == 3
        assert stream.counted() == Counter({PROMPTS: 1}), stream.messages

    run(main(), timeout=240)
