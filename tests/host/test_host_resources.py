"""Resource subscriptions through the Host (``Host.subscribe_resource``), against real
servers wrapped in tests/peers/tap.py: the mcp 2.3.0 Python server (modern: the URIs ride
the worker's ``subscriptions/listen`` stream as ``resourceSubscriptions``; its ``touch``
tool announces an update) and server-everything (legacy: ``resources/subscribe``; its
``toggle-subscriber-updates`` tool sends an update for each subscribed URI at once, then
every 5 s)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run, scripted
from mcp_schema import LEGACY, MODERN, conforms, validate_message
from trunkline import channel as ch
from trunkline.errors import TransportLost
from trunkline.params import stdio
from trunkline.parent.generation import Generation
from trunkline.parent.host import Host
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


def watch_frames(monkeypatch: Any) -> list[dict[str, Any]]:
    """Every ``WATCH_RESOURCES`` frame the parent sends a worker, as JSON, from now on."""
    frames: list[dict[str, Any]] = []
    send = Generation.send

    def spy(gen: Generation, frame: bytes) -> None:
        if frame[4] == ch.WATCH_RESOURCES:
            frames.append(orjson.loads(frame[5:]))
        send(gen, frame)
    monkeypatch.setattr(Generation, "send", spy)
    return frames


def test_the_worker_is_told_each_change_once_and_a_new_worker_the_whole_set(
        no_leaks, monkeypatch):
    """What crosses to the worker grows with the change, never with the set: many URIs
    watched at once are one change, so are the watches of one tick, and a stop is the
    URIs nobody watches any more; a worker started again gets the whole set once."""
    frames = watch_frames(monkeypatch)
    first = [f"scripted://r/{n}" for n in range(100)]
    then = [f"scripted://s/{n}" for n in range(9)]

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(
                "--capabilities", '{"tools":{},"resources":{"subscribe":true}}'))
            stop_first = host.subscribe_resources("s", first, lambda _p: None)
            await until(lambda: frames, "the first change")
            assert frames == [{"added": first, "removed": []}]
            # Watched one by one, in one tick: still one change, each URI once.
            stops = [host.subscribe_resource("s", uri, lambda _p: None) for uri in then]
            also = host.subscribe_resource("s", then[0], lambda _p: None)  # watched already
            await until(lambda: len(frames) == 2, "the second change")
            assert frames[1] == {"added": then, "removed": []}
            stop_first()
            stops[0]()  # then[0] is still watched by ``also``
            await until(lambda: len(frames) == 3, "the third change")
            assert frames[2] == {"added": [], "removed": first}
            with pytest.raises(TransportLost):
                await host.call_tool("crash", {}, timeout=30)
            await until(lambda: len(frames) == 4, "the new worker's set")
            assert frames[3] == {"added": then, "removed": []}
            also()
            for stop in stops:
                stop()
            await until(lambda: len(frames) == 5, "the last change")
            assert frames[4] == {"added": [], "removed": then}
    run(main())


def test_changes_while_a_listen_awaits_its_acknowledgement_go_in_one_new_filter(
        tap, no_leaks):
    """The worker opens its server's listen stream again once per burst of changes: the
    changes that come while a listen request waits for its acknowledgement (scripted.py
    holds it until the tool ``ack-listens``) wait with it, and go in one new filter."""
    a, b, c = "scripted://a", "scripted://b", "scripted://c"

    def filters() -> list[Any]:
        return [m["params"]["notifications"].get("resourceSubscriptions")
                for m in listens(tap)]

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(
                "--hold-listen-acks", "--capabilities",
                '{"tools":{"listChanged":true},"resources":{"subscribe":true}}', tap=tap))
            await until(lambda: len(listens(tap)) == 1, "the worker's first listen")
            for uri in (a, b):
                host.subscribe_resource("s", uri, lambda _p: None)
                # Answered after the worker applied the change (the channel keeps order).
                await host.call_tool("echo", {})
            assert filters() == [None], "nothing is asked again before the acknowledgement"
            await host.call_tool("ack-listens", {})
            await until(lambda: len(listens(tap)) == 2, "the stream opened again")
            host.subscribe_resource("s", c, lambda _p: None)
            await host.call_tool("echo", {})
            assert filters() == [None, [a, b]]
            await host.call_tool("ack-listens", {})
            await until(lambda: len(listens(tap)) == 3, "the stream opened again")
            assert filters() == [None, [a, b], [a, b, c]]
    run(main())


def test_a_worker_behind_in_reading_gets_the_changes_merged(tap, no_leaks, monkeypatch):
    """A worker that reads nothing (stopped) while watches come and go: once its channel
    is full the changes wait in the parent, one entry per URI, instead of piling up in
    the channel; when it reads again it is sent them merged."""
    frames = watch_frames(monkeypatch)
    # ~100 KiB a change: the channel's socket buffers (some MiB) fill after a few dozen.
    uris = [f"scripted://r/{n:04d}/" + "x" * 80 for n in range(1000)]
    cycles = 300

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(
                "--capabilities", '{"tools":{"listChanged":true},"resources":{"subscribe":true}}',
                tap=tap))
            await until(lambda: len(listens(tap)) == 1, "the worker's first listen")
            [status] = host.servers()
            os.kill(status.worker_pid, signal.SIGSTOP)
            try:
                for _ in range(cycles):
                    stop = host.subscribe_resources("s", uris, lambda _p: None)
                    await asyncio.sleep(0)  # its tick: the change goes, or waits
                    stop()
                    await asyncio.sleep(0)
                sent = len(frames)
            finally:
                os.kill(status.worker_pid, signal.SIGCONT)
            assert sent < cycles, "past the channel's buffer the changes waited, merged"
            host.subscribe_resources("s", uris[:3], lambda _p: None)
            await until(lambda: listens(tap)[-1]["params"]["notifications"].get(
                "resourceSubscriptions") == uris[:3], "the worker caught up")
    run(main())
