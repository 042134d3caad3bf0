"""``serve --http --processes N``: state one copy holds is served by that copy, whichever
copy the kernel hands a connection to. A legacy session's answers to its server's
questions, its cancellations, log level, resource subscriptions and resumptions, and a
modern client's answers to an input round, each sent on a connection of its own (so both
copies get some), all reach the copy that holds them (``gateway/siblings.py``); a copy
started again holds nothing of the one before, and says so with a 404."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import taplog

import realpeers
from conftest import run, scripted
from gateways import (
    CAPS,
    HttpGateway,
    alive_with,
    fleet_config,
    modern_meta,
    real_server,
    sse_messages,
    wait_for_tap,
)
from trunkline.gateway.copy_metrics import COPY_INDEX_ENV

ELICITING = {"elicitation": {"form": {}}}
LEVEL = "io.modelcontextprotocol/logLevel"


def fresh() -> aiohttp.ClientSession:
    """A client whose every request is on a new connection: the kernel picks the copy."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


async def on_its_own(gw: HttpGateway, message: dict[str, Any], headers: dict[str, str]
                     ) -> tuple[int, list[dict[str, Any]]]:
    """POST ``message`` on a connection of its own: its status and the messages answered
    (a JSON body's one, or an event stream's)."""
    async with fresh() as http, http.post(gw.url, data=orjson.dumps(message),
                                          headers=headers) as response:
        if response.content_type == "text/event-stream":
            return response.status, [m async for m in sse_messages(response)]
        raw = await response.read()
        return response.status, [orjson.loads(raw)] if raw else []


def copies(marker: str) -> list[int]:
    return [pid for pid in alive_with(marker) if pid in alive_with("--listen-fd")]


def test_questions_and_input_rounds_reach_the_copy_that_asked(gateways, tmp_path):
    path = fleet_config(tmp_path, {"ev": real_server(realpeers.LEGACY_TS_EVERYTHING)},
                        allow_legacy=("ev",))

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        session, _ = await gw.legacy_session(ELICITING)
        _, listed, _ = await gw.post(gw.message("tools/list", {}), session)
        [tool] = [t["name"] for t in listed["result"]["tools"]
                  if t["name"].endswith("trigger-elicitation-request")]
        # A legacy session: the server's question comes on the call's stream, the answer
        # is POSTed on a connection of its own.
        for i in range(8):
            call = gw.message("tools/call", {"name": tool, "arguments": {}})
            async with fresh() as http, http.post(gw.url, data=orjson.dumps(call),
                                                  headers=session) as stream:
                heard = sse_messages(stream)
                asked = await asyncio.wait_for(anext(heard), 60)
                assert asked["method"] == "elicitation/create", asked
                status, _ = await on_its_own(gw, {"jsonrpc": "2.0", "id": asked["id"],
                                                  "result": {"action": "accept",
                                                             "content": {"name": f"n{i}"}}},
                                             session)
                assert status == 202
                done = await asyncio.wait_for(anext(heard), 30)
            assert done["id"] == call["id"] and f"n{i}" in orjson.dumps(done).decode(), done
        # A modern client: the round's answer comes in a request of its own.
        for i in range(8):
            first = gw.message("tools/call", {"name": tool, "arguments": {},
                                              "_meta": modern_meta(**{CAPS: ELICITING})})
            _, (needed,) = await on_its_own(gw, first, gw.modern_headers(first))
            [(key, _)] = needed["result"]["inputRequests"].items()
            again = gw.message("tools/call", {
                "name": tool, "arguments": {}, "_meta": modern_meta(**{CAPS: ELICITING}),
                "inputResponses": {key: {"action": "accept", "content": {"name": f"m{i}"}}},
                "requestState": needed["result"]["requestState"]})
            status, (done,) = await on_its_own(gw, again, gw.modern_headers(again))
            assert status == 200 and f"m{i}" in orjson.dumps(done).decode(), done
        assert await gw.stop() == 0
    run(main(), timeout=240)


def test_a_sessions_level_cancels_and_resumptions_reach_its_copy(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        session, _ = await gw.legacy_session()
        status, _ = await on_its_own(gw, gw.message("logging/setLevel", {"level": "info"}),
                                     session)
        assert status == 200
        # Every call of the session logs at its level, whichever copy took the connection.
        for _ in range(8):
            status, got = await on_its_own(gw, gw.message(
                "tools/call", {"name": "chatty", "arguments": {}}), session)
            notes = [m["params"]["data"] for m in got if m.get("method") ==
                     "notifications/message"]
            assert status == 200 and notes == ["asked for level info"], got
        # A cancellation reaches the call it names.
        for i in range(4):
            call = gw.message("tools/call", {"name": "sleep", "arguments": {"seconds": 60 + i}})
            async with fresh() as http, http.post(gw.url, data=orjson.dumps(call),
                                                  headers=session) as stream:
                await wait_for_tap(tap, lambda m, i=i: m.get("method") == "tools/call" and
                                   m["params"]["arguments"].get("seconds") == 60 + i)
                status, _ = await on_its_own(gw, {
                    "jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": call["id"]}}, session)
                assert status == 202
                heard = await asyncio.wait_for(
                    asyncio.ensure_future(_all(sse_messages(stream))), 30)
            assert heard == [], "a cancelled call ends without an answer"
        for _ in range(200):
            cancelled = [m for m in taplog.messages(tap)
                         if m.get("method") == "notifications/cancelled"]
            if len(cancelled) == 4:
                break
            await asyncio.sleep(0.05)
        assert len(cancelled) == 4, cancelled
        # A stream dropped before its answer is picked up with Last-Event-ID on another
        # connection (one whose answer was written out in full is not kept).
        for _ in range(4):
            call = gw.message("tools/call", {"name": "sleep", "arguments": {"seconds": 1}})
            async with fresh() as http, http.post(gw.url, data=orjson.dumps(call),
                                                  headers=session) as stream:
                priming = await stream.content.readuntil(b"\n\n")
            event_id = priming.decode().split("id: ", 1)[1].split("\n", 1)[0]
            async with fresh() as http, http.get(gw.url, headers={
                    **session, "Accept": "text/event-stream",
                    "Last-Event-ID": event_id}) as resumed:
                assert resumed.status == 200, await resumed.text()
                answers = [m async for m in sse_messages(resumed)]
            assert [a["id"] for a in answers] == [call["id"]], (event_id, answers)
        assert await gw.stop() == 0
    run(main(), timeout=240)


def test_a_sessions_subscriptions_are_heard_on_any_connection(gateways, tmp_path):
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    path = fleet_config(tmp_path, {"py": real_server(server, "--listen")})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        session, _ = await gw.legacy_session()
        status, (answer,) = await on_its_own(
            gw, gw.message("resources/subscribe", {"uri": "echo://about"}), session)
        assert status == 200 and answer["result"] == {}, answer
        # Four GET streams of the session, each on a connection of its own: all hear it.
        heard: list[asyncio.Queue[dict[str, Any] | None]] = []
        pumps: list[asyncio.Future[None]] = []
        async with fresh() as http:
            streams = [await http.get(gw.url, headers={**session,
                                                       "Accept": "text/event-stream"})
                       for _ in range(4)]
            try:
                for stream in streams:
                    assert stream.status == 200
                    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
                    heard.append(queue)
                    pumps.append(asyncio.ensure_future(_into(sse_messages(stream), queue)))
                await asyncio.sleep(0.5)  # the streams are registered where they landed
                status, _ = await on_its_own(gw, gw.message(
                    "tools/call", {"name": "touch", "arguments": {"uri": "echo://about"}}),
                    session)
                assert status == 200
                for queue in heard:
                    note = await asyncio.wait_for(queue.get(), 30)
                    assert note["method"] == "notifications/resources/updated", note
                    assert note["params"]["uri"] == "echo://about"
                # Its client ends it, on whichever copy: every stream of it ends there,
                # and its id is 404 on any connection.
                async with fresh() as other, other.delete(gw.url, headers=session) as done:
                    assert done.status == 200
                for queue in heard:
                    assert await asyncio.wait_for(queue.get(), 30) is None, "ended"
                for _ in range(4):
                    status, (answer,) = await on_its_own(gw, gw.message("ping"), session)
                    assert status == 404 and "start a new session" in \
                        answer["error"]["message"], answer
            finally:
                for stream in streams:
                    stream.close()
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        assert await gw.stop() == 0
    run(main(), timeout=240)


def test_a_session_of_a_copy_started_again_is_gone_and_says_so(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted("--name", "procs-gone-1")})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        session, _ = await gw.legacy_session()
        instance = session["Mcp-Session-Id"].split(".")[0]
        index = int(instance.rsplit("_", 1)[1])
        # The copy that opened it: the one whose environment names that index.
        [holder] = [pid for pid in copies(str(path)) if f"{COPY_INDEX_ENV}={index}".encode()
                    in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")]
        os.kill(holder, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(copies(str(path))) != 2
                                               or holder in copies(str(path))):
            await asyncio.sleep(0.1)
        for i in range(6):
            status, (answer,) = await on_its_own(gw, gw.message(
                "tools/call", {"name": "echo", "arguments": {"i": i}}), session)
            assert status == 404, answer
            assert "start a new session" in answer["error"]["message"], answer
        fresh_session, _ = await gw.legacy_session()
        status, got = await on_its_own(gw, gw.message(
            "tools/call", {"name": "echo", "arguments": {"i": 9}}), fresh_session)
        assert status == 200 and "result" in got[-1], got
        assert await gw.stop() == 0
    run(main(), timeout=240)


async def _all(messages: Any) -> list[dict[str, Any]]:
    return [m async for m in messages]


async def _into(messages: Any, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    """The messages, then None when the stream ends."""
    async for message in messages:
        await queue.put(message)
    await queue.put(None)
