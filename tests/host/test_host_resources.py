"""Resource subscriptions through the Host (``Host.subscribe_resource``), against real
servers wrapped in tests/peers/tap.py: the mcp 2.3.0 Python server (modern: the URIs ride
the worker's ``subscriptions/listen`` stream as ``resourceSubscriptions``; its ``touch``
tool announces an update) and server-everything (legacy: ``resources/subscribe``; its
``toggle-subscriber-updates`` tool sends an update for each subscribed URI at once, then
every 5 s)."""

from __future__ import annotations

import sys
import time
from typing import Any

import orjson
import pytest
from conftest import PEERS, run
from mcp_schema import LEGACY, MODERN, conforms, validate_message

import realpeers
import taplog
from trunkline.parent.host import Host
from trunkline.params import stdio
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

pytestmark = pytest.mark.real_servers

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))


def tapped(server: realpeers.RealServer, log: Any, *extra: str) -> Any:
    realpeers.require(server)
    return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(log), "--",
                 *server.argv, *extra, env=dict(server.env))


def messages(tap: Any, direction: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in taplog.lines(tap, direction)]


async def until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:g} s"
        await asyncio.sleep(0.05)


def listens(tap: Any) -> list[dict[str, Any]]:
    return [m for m in messages(tap, taplog.IN) if m.get("method") == "subscriptions/listen"]


def acked_with(tap: Any, uris: list[str]) -> bool:
    return any(m.get("method") == "notifications/subscriptions/acknowledged"
               and m["params"].get("notifications", {}).get("resourceSubscriptions") == uris
               for m in messages(tap, taplog.OUT))


def test_a_modern_servers_updates_reach_the_watchers_of_that_uri(tap, no_leaks):
    about, other = "echo://about", "echo://items/pear"
    got_a: list[dict] = []
    got_b: list[dict] = []

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("py", tapped(realpeers.MODERN_PY_ECHO, tap, "--listen"))
            stop_a = host.subscribe_resource("py", about, got_a.append)
            stop_b = host.subscribe_resource("py", about, got_b.append)
            await until(lambda: acked_with(tap, [about]), "a listen stream for the resource")
            assert (await host.call_tool("touch", {"uri": about})).text == f"touched {about}"
            await until(lambda: got_a and got_b, "the update reached both watchers")
            assert got_a == got_b == [{"uri": about}]
            await host.call_tool("touch", {"uri": other})  # watched by nobody
            stop_a()
            await host.call_tool("touch", {"uri": about})
            await until(lambda: len(got_b) == 2, "the second update reached the one left")
            assert got_a == [{"uri": about}] and got_b == [{"uri": about}] * 2
            stop_b()
            await until(lambda: acked_with(tap, []) or len(listens(tap)) >= 3,
                        "the stream reopened without the resource")
    run(main())
    sent = listens(tap)
    for listen in sent:
        validate_message(listen, MODERN)
    # Both watchers shared one subscription; nobody watching: a stream without it.
    assert [m["params"]["notifications"].get("resourceSubscriptions") for m in sent] == [
        None, [about], None][:len(sent)]


def test_a_legacy_server_is_subscribed_with_resources_subscribe(tap, no_leaks):
    uri = "demo://resource/dynamic/text/1"
    got: list[dict] = []

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("ev", tapped(realpeers.LEGACY_TS_EVERYTHING, tap),
                                  allow_legacy=True)
            stop = host.subscribe_resource("ev", uri, got.append)
            await until(lambda: any(m.get("method") == "resources/subscribe"
                                    for m in messages(tap, taplog.IN)), "resources/subscribe")
            await host.call_tool("toggle-subscriber-updates", {}, timeout=30)
            await until(lambda: got, "an update")
            assert got[0] == {"uri": uri}
            stop()
            await until(lambda: any(m.get("method") == "resources/unsubscribe"
                                    for m in messages(tap, taplog.IN)), "resources/unsubscribe")
    run(main())
    subs = [m for m in messages(tap, taplog.IN)
            if m.get("method") in ("resources/subscribe", "resources/unsubscribe")]
    assert [(m["method"], m["params"]) for m in subs] == [
        ("resources/subscribe", {"uri": uri}), ("resources/unsubscribe", {"uri": uri})]
    for m in subs:
        conforms(m, LEGACY, "SubscribeRequest" if m["method"] == "resources/subscribe"
                 else "UnsubscribeRequest")


def test_a_server_without_subscriptions_is_refused(no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            server = realpeers.require(realpeers.MODERN_PY_ECHO)
            await host.add_server("quiet", stdio(*server.argv, env=dict(server.env)))
            with pytest.raises(ValueError, match="offers no resource subscriptions"):
                host.subscribe_resource("quiet", "echo://about", lambda _p: None)
    run(main())
