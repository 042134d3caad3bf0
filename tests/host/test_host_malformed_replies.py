"""Malformed answers (issue 36, finding 11): an answer whose id can be read fails the call
it answers at once, with ``MalformedMessage`` naming what was wrong, and counts as the
server's protocol violation; the server's other calls go on. Through the real worker and
channel, against ``tests/peers/scripted.py`` answering one tool badly."""

from __future__ import annotations

import asyncio
import json

import pytest
import taplog

import httppeers
from conftest import run, scripted
from httppeers import http_peer  # noqa: F401 - a fixture
from trunkline import http
from trunkline.errors import MalformedMessage
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0))

#: scripted.py's action for the bad answer -> what the error must say was wrong.
MALFORMED = {
    "malformed": 'a response must not carry both "result" and "error"',
    "bad-utf8": "invalid UTF-8 at byte",
    "deep:200": "nesting deeper than 128",
}


async def violations(host: Host, at_least: int) -> int:
    """The server's protocol violations once the worker's count of them has come (its
    STATS frame follows the call's FAILURE)."""
    while (count := host.servers()[0].protocol_violations) < at_least:
        await asyncio.sleep(0.01)
    return count


@pytest.mark.parametrize("action", MALFORMED)
def test_a_malformed_answer_fails_its_call_at_once_and_the_others_go_on(action, no_leaks, tap):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted("--tool-action", f"search={action}", tap=tap))
            # The call's own timeout is long: only its answer can end it before that. The
            # outer wait is a guard against a hang, not a measure of speed.
            bad = asyncio.ensure_future(host.call_tool("search", {"query": "q"}, timeout=60))
            good = await asyncio.wait_for(host.call_tool("echo", {"i": 1}), 20)
            assert json.loads(good.text) == {"i": 1}
            with pytest.raises(MalformedMessage) as info:
                await asyncio.wait_for(bad, 20)
            error = info.value
            assert error.server == "s" and error.method == "tools/call"
            assert MALFORMED[action] in error.message, error.message
            assert await asyncio.wait_for(violations(host, 1), 20) == 1
            after = await asyncio.wait_for(host.call_tool("echo", {"after": True}), 20)
            assert json.loads(after.text) == {"after": True}
            assert host.servers()[0].in_flight == 0
            return error
    error = run(main())
    # The worker named the request whose answer it could not read: the id the server got.
    [search] = [json.loads(line) for line in taplog.lines(tap, taplog.IN)
                if b'"search"' in line and b'"tools/call"' in line]
    assert error.request_id == search["id"]


def test_an_answer_only_the_parent_can_find_unreadable_fails_and_counts(no_leaks):
    """A lone surrogate escape deep in a result passes the worker's envelope scan (which
    leaves a payload's strings to the one full decode); the parent's decode fails the call
    with the reason and counts it as the server's violation."""
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted("--tool-action", "search=surrogate"))
            with pytest.raises(MalformedMessage, match="result is not valid JSON") as info:
                await asyncio.wait_for(host.call_tool("search", {"query": "q"}, timeout=60), 20)
            assert info.value.server == "s"
            assert await asyncio.wait_for(violations(host, 1), 20) == 1
            good = await asyncio.wait_for(host.call_tool("echo", {"i": 2}), 20)
            assert json.loads(good.text) == {"i": 2}
    run(main())


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
def test_a_malformed_http_answer_fails_its_call_the_same_way(sse, no_leaks, http_peer,
                                                             tmp_path):
    """Over Streamable HTTP, as a JSON body or as the last event of an SSE stream that the
    server then holds open: the call fails at once with the reason, not when the exchange
    ends (never, for the held stream)."""
    argv, env = httppeers.scripted("--malformed-echo", *(["--sse"] if sse else []))
    record = tmp_path / "record.jsonl"
    server = http_peer(argv, env, record=record)

    async def stream_closed() -> None:
        while not (record.exists() and '"closed"' in record.read_text()):
            await asyncio.sleep(0.02)
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("remote", http(server.url))
            bad = asyncio.ensure_future(host.call_tool("echo", {"text": "malformed"},
                                                       timeout=60))
            good = await asyncio.wait_for(host.call_tool("echo", {"text": "fine"}), 20)
            assert good.text == "fine"
            with pytest.raises(MalformedMessage) as info:
                await asyncio.wait_for(bad, 20)
            assert info.value.server == "remote"
            assert MALFORMED["malformed"] in info.value.message, info.value.message
            assert await asyncio.wait_for(violations(host, 1), 20) == 1
            if sse:  # the worker let go of the held stream, with the host still running
                await asyncio.wait_for(stream_closed(), 20)
    run(main())
