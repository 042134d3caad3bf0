"""subscriptions/listen: list changes announced on the stream refetch the catalog; a lost
stream is re-opened with a new id and the lists refetched; notifications that are not the
stream's are dropped."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
import taplog

from conftest import run, scripted
from mcp_schema import MODERN, validate_message
from trunkline.channel import ServerState
from trunkline.errors import TransportLost
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.listen import ListenStream, Verdict
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0))


def sent(tap, method):
    return [m for m in map(orjson.loads, taplog.lines(tap, taplog.IN)) if m.get("method") == method]


async def until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def test_list_changed_on_the_stream_refetches_the_catalog(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            await until(lambda: len(sent(tap, "subscriptions/listen")) == 1)
            listen = sent(tap, "subscriptions/listen")[0]
            validate_message(listen, MODERN)
            assert listen["params"]["notifications"] == {"toolsListChanged": True}
            assert len(sent(tap, "tools/list")) == 1
            await host.call_tool("mutate", {})
            await until(lambda: len(sent(tap, "tools/list")) == 2)
            await asyncio.sleep(0.3)
            # One change on our stream refetched once; the stray one was dropped.
            assert len(sent(tap, "tools/list")) == 2
    run(main())


@pytest.mark.parametrize("how", ["end-listen", "end-listen-cancel"])
def test_a_closed_stream_is_reopened_with_a_new_id_and_lists_refetched(tap, no_leaks, how):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            await until(lambda: len(sent(tap, "subscriptions/listen")) == 1)
            await host.call_tool(how, {})
            await until(lambda: len(sent(tap, "subscriptions/listen")) == 2)
            await until(lambda: len(sent(tap, "tools/list")) == 2)
            first, second = sent(tap, "subscriptions/listen")
            assert first["id"] != second["id"]
            await host.call_tool("mutate", {})  # the new stream works
            await until(lambda: len(sent(tap, "tools/list")) == 3)
    run(main())


def test_a_server_without_list_changed_gets_no_listen(tap, no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted("--capabilities", '{"tools": {}}', tap=tap))
            await host.call_tool("echo", {})
            await asyncio.sleep(0.2)
    run(main())
    assert sent(tap, "subscriptions/listen") == []


def test_stream_acceptance_rules():
    stream = ListenStream(7, {"toolsListChanged": True})

    def sub(sid):
        return {"_meta": {"io.modelcontextprotocol/subscriptionId": sid}}

    assert stream.accept("notifications/tools/list_changed", sub(7)).verdict is Verdict.DROP
    ack = {"notifications": {"toolsListChanged": True, "promptsListChanged": True}, **sub(7)}
    assert (
        stream.accept("notifications/subscriptions/acknowledged", ack).verdict
        is Verdict.ACKNOWLEDGED
    )
    assert stream.honoured == {"toolsListChanged": True}, "only what was asked for"
    assert stream.accept("notifications/tools/list_changed", sub(7)).which == "tools"
    assert stream.accept("notifications/tools/list_changed", sub("7")).verdict is Verdict.DROP
    assert stream.accept("notifications/tools/list_changed", {}).verdict is Verdict.DROP
    assert stream.accept("notifications/prompts/list_changed", sub(7)).verdict is Verdict.DROP
    assert stream.accept("notifications/message", sub(7)).verdict is Verdict.DROP
    assert stream.accept("notifications/cancelled", {"requestId": "7"}).verdict is Verdict.DROP
    assert stream.accept("notifications/cancelled", {"requestId": 7}).verdict is Verdict.CLOSED
    assert stream.dropped == 6


def test_resource_updates_count_for_granted_uris_and_their_sub_resources():
    asked = {"resourceSubscriptions": ["file:///a", "file:///b"]}
    stream = ListenStream(3, asked)
    sub = {"_meta": {"io.modelcontextprotocol/subscriptionId": 3}}

    def update(uri):
        return {"uri": uri, **sub}

    assert stream.accept("notifications/resources/updated", update("file:///a")).verdict \
        is Verdict.DROP, "before the acknowledgement"
    # The server grants one of the two, and claims one nobody asked for.
    ack = {"notifications": {"resourceSubscriptions": ["file:///a", "file:///z"]}, **sub}
    assert stream.accept("notifications/subscriptions/acknowledged", ack).verdict \
        is Verdict.ACKNOWLEDGED
    assert stream.resources == frozenset({"file:///a"})
    accepted = stream.accept("notifications/resources/updated", update("file:///a"))
    assert (accepted.verdict, accepted.uri) == (Verdict.UPDATED, "file:///a")
    assert stream.accept("notifications/resources/updated",
                         update("file:///a/inner")).uri == "file:///a/inner"
    for other in ("file:///b", "file:///z", "file:///ab", 7):
        assert stream.accept("notifications/resources/updated", update(other)).verdict \
            is Verdict.DROP, other
    assert stream.accept("notifications/resources/updated",
                         {"uri": "file:///a"}).verdict is Verdict.DROP, "no subscription id"


def test_prompt_and_resource_list_changes_reach_the_offerings_watchers(no_leaks):
    """A legacy server's announcement (unasked, on its connection) is told, and so is a
    server declaring prompts and resources that stops being ready (a crash) and is ready
    again (its restart): the fleet's lists were not what they had been. Its tool-list
    change is the catalog's, not the offerings'. A watcher with ``on_moved`` hears the
    server's coming and going there, and its announcement alone as a change; within
    ``batched``, each list once, as an announcement if one of them was."""
    announcing = scripted("--era", "legacy", "--capabilities", orjson.dumps(
        {"tools": {}, "prompts": {"listChanged": True}, "resources": {}}).decode(),
        "--notify-after-call", "notifications/prompts/list_changed",
        "--notify-after-call", "notifications/tools/list_changed")

    async def main():
        heard = []
        told: list[tuple[str, str]] = []
        async with Host(settings=SETTINGS) as host:
            stop = host.watch_offerings(heard.append)
            stop_told = host.watch_offerings(lambda which: told.append(("announced", which)),
                                             on_moved=lambda which: told.append(("moved",
                                                                                 which)))
            await host.add_server("old", announcing, allow_legacy=True)
            assert heard == ["prompts", "resources"], "a server came"
            assert told == [("moved", "prompts"), ("moved", "resources")]
            await host.call_tool("echo", {})
            await until(lambda: len(heard) == 3)
            assert heard[2] == "prompts"
            assert told[2:] == [("announced", "prompts")]
            with pytest.raises(TransportLost):
                await host.call_tool("crash", {})
            await until(lambda: len(heard) == 7)
            assert heard[3:] == ["prompts", "resources"] * 2, "gone, then back"
            assert told[3:] == [("moved", "prompts"), ("moved", "resources")] * 2
            # Batched: an announcement, and a going and coming back, told once per list.
            del told[:]
            states: list[ServerState] = []
            stop_states = host.watch_servers(lambda status: states.append(status.state))
            with host.batched():
                await host.call_tool("echo", {})
                await host.call_tool("echo", {})  # the first one's announcement was handled
                with pytest.raises(TransportLost):
                    await host.call_tool("crash", {})
                await until(lambda: ServerState.READY in states[1:]
                            and states[0] is not ServerState.READY)
                assert told == [] and len(heard) == 7, "held"
            stop_states()
            assert told == [("announced", "prompts"), ("moved", "resources")]
            assert heard[7:] == ["prompts", "resources"]
            stop()
            stop_told()
            # The second answer comes after the first call's announcement, which the host
            # handled in order, before it.
            await host.call_tool("echo", {})
            await host.call_tool("echo", {})
            assert len(heard) == 9 and len(told) == 2, "no longer watched"
    run(main())
