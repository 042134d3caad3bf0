"""A legacy (2025-11-25) session through ``trunkline serve --http`` ends, and what it holds
is bounded (``gateway/legacy_sessions.py``): its client ends it with DELETE, and so do
idleness and its signed expiry; whatever it held (subscriptions behind the gateway, its
GET streams, its calls in flight) goes with it, and its id is 404 from then on. One
session's subscriptions are counted against its own budget, never another's.

The server behind is the real mcp 2.3.0 echo server (tests/peers/py_modern_echo.py with
``--listen``), wrapped in tests/peers/tap.py: the resource set the gateway watches on it
is what each of its listen acknowledgements names, and a call cancelled behind the
gateway is a ``notifications/cancelled`` on its wire."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson
import taplog

import realpeers
from conftest import PEERS, run
from gateways import HttpGateway, fleet_config, sse_messages, wait_for_tap
from trunkline.params import StdioParams

ABOUT = "echo://about"


def tapped_echo(tap: Any) -> StdioParams:
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    return StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                        *server.argv, "--listen"), dict(server.env))


def watch_sets(tap: Any) -> list[set[str]]:
    """The resources the server behind was asked to tell of, each time it was asked."""
    return [set(orjson.loads(line)["params"]["notifications"].get("resourceSubscriptions")
                or ())
            for line in taplog.lines(tap, taplog.OUT)
            if b"notifications/subscriptions/acknowledged" in line]


def watched(tap: Any) -> set[str] | None:
    """The resources the server behind was last asked to tell of (None: never asked)."""
    sets = watch_sets(tap)
    return sets[-1] if sets else None


async def until(predicate: Any, what: str, timeout: float = 30) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def cancelled_upstream(tap: Any) -> list[Any]:
    return [m["params"]["requestId"] for m in taplog.messages(tap)
            if m.get("method") == "notifications/cancelled"]


def upstream_id(tap: Any, ms: int) -> Any:
    """The id the server behind got the call sleeping ``ms`` under."""
    [call] = [m for m in taplog.messages(tap) if m.get("method") == "tools/call"
              and m["params"]["arguments"].get("ms") == ms]
    return call["id"]


async def subscribe(gw: HttpGateway, session: dict[str, str], uri: str) -> tuple[int, Any]:
    status, answer, _ = await gw.post(gw.message("resources/subscribe", {"uri": uri}), session)
    return status, answer


async def running_call(gw: HttpGateway, session: dict[str, str], tap: Any, ms: int) -> Any:
    """A call sleeping ``ms`` behind the gateway, whose client hung up after its priming
    event (a legacy call runs on): the id the server behind got it under."""
    call = gw.message("tools/call", {"name": "sleep", "arguments": {"ms": ms}})
    async with gw.http.post(gw.url, data=orjson.dumps(call), headers=session) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        await asyncio.wait_for(response.content.readuntil(b"\n\n"), 30)
    await wait_for_tap(tap, lambda m: m.get("method") == "tools/call"
                       and m["params"]["arguments"].get("ms") == ms)
    return upstream_id(tap, ms)


async def ended(gw: HttpGateway, session: dict[str, str]) -> None:
    """The session's id is 404 for every kind of request."""
    status, answer, _ = await gw.post(gw.message("tools/list", {}), session)
    assert status == 404 and "start a new session" in answer["error"]["message"], answer
    async with gw.http.get(gw.url, headers={**session, "Accept": "text/event-stream"}) as r:
        assert r.status == 404
    async with gw.http.delete(gw.url, headers=session) as r:
        assert r.status == 404


def test_a_session_subscribes_within_its_own_budget(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"py": tapped_echo(tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "session_subscriptions=2")
        one, _ = await gw.legacy_session()
        two, _ = await gw.legacy_session()
        for uri in ("echo://items/a", "echo://items/b", "echo://items/a"):
            status, answer = await subscribe(gw, one, uri)
            assert status == 200 and answer["result"] == {}, answer
        status, answer = await subscribe(gw, one, "echo://items/c")
        assert status == 400 and answer["error"]["code"] == -32600, answer
        assert "session_subscriptions" in answer["error"]["message"], answer
        assert answer["error"]["data"] == {"limit": "session_subscriptions", "max": 2}
        # Another session's budget is its own.
        for uri in ("echo://items/c", "echo://items/a"):
            status, answer = await subscribe(gw, two, uri)
            assert status == 200 and answer["result"] == {}, answer
        await until(lambda: watched(tap) == {f"echo://items/{x}" for x in "abc"},
                    "the server behind watches what the sessions hold")
        # Within its budget again once it unsubscribes one.
        status, _, _ = await gw.post(gw.message("resources/unsubscribe",
                                                {"uri": "echo://items/b"}), one)
        assert status == 200
        status, answer = await subscribe(gw, one, "echo://items/d")
        assert status == 200 and answer["result"] == {}, answer
        await until(lambda: watched(tap) == {f"echo://items/{x}" for x in "acd"},
                    "the server behind watches what the sessions hold")
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_delete_ends_a_session_and_frees_what_it_held(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"py": tapped_echo(tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--drain-timeout", "1")
        mine, _ = await gw.legacy_session()
        other, _ = await gw.legacy_session()
        assert (await subscribe(gw, mine, ABOUT))[0] == 200
        assert (await subscribe(gw, other, "echo://items/kept"))[0] == 200
        await until(lambda: watched(tap) == {ABOUT, "echo://items/kept"},
                    "the server behind was subscribed")
        stream = await gw.http.get(gw.url, headers={**mine, "Accept": "text/event-stream"})
        assert stream.status == 200
        hung_up = await running_call(gw, mine, tap, 59_001)
        # A call whose client still reads it, and one of the other session's.
        reading = gw.message("tools/call", {"name": "sleep", "arguments": {"ms": 59_002}})
        followed = await gw.http.post(gw.url, data=orjson.dumps(reading), headers=mine)
        await wait_for_tap(tap, lambda m: m.get("method") == "tools/call"
                           and m["params"]["arguments"].get("ms") == 59_002)
        others = await running_call(gw, other, tap, 59_003)

        async with gw.http.delete(gw.url, headers=mine) as response:
            assert response.status == 200
        # Its GET stream and the stream of the call it read end; its calls are cancelled
        # behind the gateway (the server is told) and its subscription released.
        assert [m async for m in sse_messages(stream)] == []
        assert [m async for m in sse_messages(followed)] == [], "a cancelled call: no answer"
        followed_id = upstream_id(tap, 59_002)
        await until(lambda: {hung_up, followed_id} <= set(cancelled_upstream(tap)),
                    "the server behind was told of both cancellations")
        await until(lambda: watched(tap) == {"echo://items/kept"},
                    "the server behind was unsubscribed")
        await ended(gw, mine)
        # The other session has all it had.
        assert others not in cancelled_upstream(tap)
        status, answer, _ = await gw.post(gw.message(
            "tools/call", {"name": "echo", "arguments": {"text": "still here"}}), other)
        assert status == 200 and answer["result"]["content"][0]["text"] == "still here"
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_an_idle_session_ends_and_one_with_a_stream_open_does_not(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"py": tapped_echo(tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "session_idle_s=2")
        listening, _ = await gw.legacy_session()
        stream = await gw.http.get(gw.url, headers={**listening,
                                                    "Accept": "text/event-stream"})
        assert stream.status == 200
        assert (await subscribe(gw, listening, "echo://items/kept"))[0] == 200
        await until(lambda: watched(tap) == {"echo://items/kept"},
                    "the server behind was subscribed")
        idle, _ = await gw.legacy_session()
        assert (await subscribe(gw, idle, ABOUT))[0] == 200
        hung_up = await running_call(gw, idle, tap, 59_004)
        # Nothing more of that session: its end comes by itself.
        await until(lambda: hung_up in cancelled_upstream(tap),
                    "the idle session's call was cancelled behind the gateway")
        await until(lambda: watched(tap) == {"echo://items/kept"},
                    "the idle session's subscription was released")
        assert {ABOUT, "echo://items/kept"} in watch_sets(tap), "it was subscribed"
        await ended(gw, idle)
        # The session whose GET stream stayed open was active all along.
        status, answer, _ = await gw.post(gw.message(
            "tools/call", {"name": "touch", "arguments": {"uri": "echo://items/kept"}}),
            listening)
        assert status == 200 and "result" in answer, answer
        note = await asyncio.wait_for(anext(sse_messages(stream)), 30)
        assert note["params"]["uri"] == "echo://items/kept", note
        stream.close()
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_session_ends_at_its_signed_expiry_even_while_in_use(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"py": tapped_echo(tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "session_lifetime_s=5")
        mine, _ = await gw.legacy_session()
        stream = await gw.http.get(gw.url, headers={**mine, "Accept": "text/event-stream"})
        assert stream.status == 200
        assert (await subscribe(gw, mine, ABOUT))[0] == 200
        hung_up = await running_call(gw, mine, tap, 59_005)
        # Its GET stream ends when the session does, with all it held.
        assert await asyncio.wait_for(_all(sse_messages(stream)), 60) == []
        await until(lambda: hung_up in cancelled_upstream(tap),
                    "the call was cancelled behind the gateway")
        await until(lambda: watched(tap) == set(), "the subscription was released")
        assert {ABOUT} in watch_sets(tap), "it was subscribed"
        await ended(gw, mine)
        fresh, _ = await gw.legacy_session()
        status, answer, _ = await gw.post(gw.message("ping"), fresh)
        assert status == 200 and answer["result"] == {}
        assert await gw.stop() == 0
    run(main(), timeout=120)


async def _all(messages: Any) -> list[dict[str, Any]]:
    return [m async for m in messages]


def test_a_process_holds_a_bounded_number_of_sessions(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"py": tapped_echo(tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "sessions=2")
        first, _ = await gw.legacy_session()
        assert (await subscribe(gw, first, ABOUT))[0] == 200
        second, _ = await gw.legacy_session()
        stream = await gw.http.get(gw.url, headers={**second, "Accept": "text/event-stream"})
        assert stream.status == 200
        # A third ends the least recently active one with no stream open, with all it
        # held; the others go on.
        third, _ = await gw.legacy_session()
        await ended(gw, first)
        await until(lambda: watched(tap) == set(), "the first one's subscription went")
        for session in (second, third):
            status, answer, _ = await gw.post(gw.message("ping"), session)
            assert status == 200 and answer["result"] == {}
        # With a stream open in each, a new one is refused, saying when to come back.
        other = await gw.http.get(gw.url, headers={**third, "Accept": "text/event-stream"})
        assert other.status == 200
        init = gw.message("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "late", "version": "1"}})
        status, answer, headers = await gw.post(init, {"Accept": "application/json",
                                                       "Content-Type": "application/json"})
        assert status == 503 and headers["Retry-After"] == "1", (status, answer)
        assert "Mcp-Session-Id" not in headers and "(sessions)" in answer["error"]["message"]
        other.close()
        # Once one of them has no stream open, there is room again.
        fourth = await _opened(gw)
        await ended(gw, third)
        status, _, _ = await gw.post(gw.message("ping"), fourth)
        assert status == 200
        stream.close()
        assert await gw.stop() == 0
    run(main(), timeout=120)


async def _opened(gw: HttpGateway) -> dict[str, str]:
    """A new session, once the gateway has room for one."""
    for _ in range(600):
        init = gw.message("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "new", "version": "1"}})
        status, _, headers = await gw.post(init, {"Accept": "application/json",
                                                  "Content-Type": "application/json"})
        if status == 200:
            return {"Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "Mcp-Session-Id": headers["Mcp-Session-Id"],
                    "MCP-Protocol-Version": "2025-11-25"}
        assert status == 503
        await asyncio.sleep(0.05)
    raise AssertionError("no room for a new session")
