"""subscriptions/listen: list changes announced on the stream refetch the catalog; a lost
stream is re-opened with a new id and the lists refetched; notifications that are not the
stream's are dropped."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from conftest import run, scripted
from mcp_schema import MODERN, validate_message

import taplog
from trunkline.parent.host import Host
from trunkline.protocol.listen import ListenStream, Verdict
from trunkline.protocol import NegotiationConfig
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
    sub = lambda sid: {"_meta": {"io.modelcontextprotocol/subscriptionId": sid}}  # noqa: E731
    assert stream.accept("notifications/tools/list_changed", sub(7)).verdict is Verdict.DROP
    ack = {"notifications": {"toolsListChanged": True, "promptsListChanged": True}, **sub(7)}
    assert stream.accept("notifications/subscriptions/acknowledged", ack).verdict is Verdict.ACKNOWLEDGED
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
    update = lambda uri: {"uri": uri, **sub}  # noqa: E731
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
