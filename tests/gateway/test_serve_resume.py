"""A legacy client's call stream through ``trunkline serve --http`` is resumable (MCP
2025-11-25 "Resumability and Redelivery", SEP-1699): it opens with a priming event (an id,
``retry``, empty data), every event has an id, a dropped connection does not cancel the
call, and a GET with ``Last-Event-ID`` replays what came after. The call ends early only
by the client's ``notifications/cancelled``. The server behind is the scripted peer with
its wire tap, so what reached it (and what did not) is seen."""

from __future__ import annotations

import asyncio
import json

import orjson
import taplog

from conftest import run, scripted
from gateways import HttpGateway, fleet_config, sse_messages, wait_for_tap
from mcp_schema import LEGACY, conforms


def test_a_dropped_stream_is_resumed_and_the_call_runs_on(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways)
        mine, _ = await gw.legacy_session()
        call = gw.message("tools/call", {"name": "sleep", "arguments": {"seconds": 1.5}})
        response = await gw.http.post(gw.url, data=orjson.dumps(call), headers=mine)
        assert response.headers["Content-Type"].startswith("text/event-stream")
        priming = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 30)
        fields = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
                      for line in priming.decode().strip().split("\n"))
        assert set(fields) == {"id", "retry", "data"} and fields["data"] == ""
        assert int(fields["retry"]) > 0
        response.close()  # the connection drops before the answer
        await wait_for_tap(tap, lambda m: m.get("method") == "tools/call")
        # Another session cannot pick the stream up, nor can an id this gateway never gave.
        other, _ = await gw.legacy_session()
        for headers, last in ((other, fields["id"]), (mine, "nothing-here-0"),
                              (mine, fields["id"] + "x")):
            async with gw.http.get(gw.url, headers={
                    **headers, "Accept": "text/event-stream", "Last-Event-ID": last}) as r:
                assert r.status == 404, (last, r.status)
        ids: list[str] = []
        async with gw.http.get(gw.url, headers={**mine, "Accept": "text/event-stream",
                                                "Last-Event-ID": fields["id"]}) as resumed:
            assert resumed.status == 200
            answers = [m async for m in sse_messages(resumed, ids)]
        assert [a["id"] for a in answers] == [call["id"]]
        assert answers[0]["result"]["content"][0]["text"] == "slept 1.5s"
        conforms(answers[0]["result"], LEGACY, "CallToolResult")
        stream = fields["id"].rsplit("-", 1)[0]
        assert ids == [f"{stream}-1"], "replayed after the priming event, under its own id"
        assert await gw.stop() == 0
    run(main(), timeout=120)
    upstream = taplog.messages(tap)
    assert not [m for m in upstream if m.get("method") == "notifications/cancelled"], \
        "a dropped connection is no cancellation for a legacy client"


def test_a_legacy_client_cancels_its_call_with_a_notification(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways)
        mine, _ = await gw.legacy_session()
        call = gw.message("tools/call", {"name": "sleep", "arguments": {"seconds": 30}})
        async with gw.http.post(gw.url, data=orjson.dumps(call), headers=mine) as streaming:
            await wait_for_tap(tap, lambda m: m.get("method") == "tools/call")
            status, _, _ = await gw.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                          "params": {"requestId": call["id"]}}, mine)
            assert status == 202
            heard = await asyncio.wait_for(
                asyncio.ensure_future(_all(sse_messages(streaming))), 30)
        assert heard == [], "a cancelled request gets no answer"
        cancels = await wait_for_tap(
            tap, lambda m: m.get("method") == "notifications/cancelled")
        sent = next(m for m in taplog.messages(tap) if m.get("method") == "tools/call")
        assert [c["params"]["requestId"] for c in cancels] == [sent["id"]]
        # An id already in flight in the session is refused; the first call is not
        # disturbed.
        again = gw.message("tools/call", {"name": "sleep", "arguments": {"seconds": 1}})
        async with gw.http.post(gw.url, data=orjson.dumps(again), headers=mine) as first:
            twin = await gw.post({**again, "params": {"name": "echo", "arguments": {}}}, mine)
            assert twin[1]["error"]["code"] == -32600 and "in flight" in \
                twin[1]["error"]["message"]
            done = await _all(sse_messages(first))
        assert [m["id"] for m in done] == [again["id"]] and "result" in done[0]
        # The session goes on.
        status, answer, _ = await gw.post(gw.message(
            "tools/call", {"name": "echo", "arguments": {"v": 1}}), mine)
        assert status == 200 and json.loads(answer["result"]["content"][0]["text"]) == {"v": 1}
        assert await gw.stop() == 0
    run(main(), timeout=120)


async def _all(messages) -> list[dict]:
    return [m async for m in messages]


async def _priming_id(response) -> str:
    """The id of a call stream's priming event (its first)."""
    priming = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 30)
    return priming.decode().split("id: ", 1)[1].split("\n", 1)[0]


async def _kept(gw: HttpGateway) -> dict:
    """What the gateway's legacy sessions hold (``/status``), once none of their calls is
    in flight."""
    for _ in range(600):
        async with gw.http.get(gw.base + "/status") as response:
            held = (await response.json())["legacy_sessions"]
        if held["calls"] == 0:
            return held
        await asyncio.sleep(0.05)
    raise AssertionError(f"calls still in flight: {held}")


async def _dropped(gw: HttpGateway, session: dict, arguments: dict) -> str:
    """A ``big`` call whose client hangs up after its priming event, before its answer;
    once it is answered behind the gateway: its priming event's id."""
    call = gw.message("tools/call", {"name": "big", "arguments": arguments})
    async with gw.http.post(gw.url, data=orjson.dumps(call), headers=session) as response:
        event_id = await _priming_id(response)
    await _kept(gw)
    return event_id


async def _resumed(gw: HttpGateway, session: dict, event_id: str) -> tuple[int, list]:
    """A GET with ``Last-Event-ID``: its status and the messages it replayed."""
    async with gw.http.get(gw.url, headers={**session, "Accept": "text/event-stream",
                                            "Last-Event-ID": event_id}) as response:
        if response.status != 200:
            return response.status, []
        return 200, [m async for m in sse_messages(response)]


def test_a_stream_written_out_in_full_is_not_kept_and_one_dropped_is(gateways, tmp_path):
    # Every call answers 0.3 s late: a client hanging up at its priming event has not
    # been written its answer.
    path = fleet_config(tmp_path, {"alpha": scripted("--tools-call", "late:0.3")})

    async def main():
        gw = await HttpGateway.start(path, gateways)
        mine, _ = await gw.legacy_session()
        call = gw.message("tools/call", {"name": "echo", "arguments": {"v": 1}})
        async with gw.http.post(gw.url, data=orjson.dumps(call), headers=mine) as response:
            event_id = await _priming_id(response)
            answers = [m async for m in sse_messages(response)]
        assert [a["id"] for a in answers] == [call["id"]]
        assert await _resumed(gw, mine, event_id) == (404, []), "delivered: nothing kept"
        # Dropped before its answer: kept, and resumed once; written out in full then.
        event_id = await _dropped(gw, mine, {"bytes": 10})
        status, answers = await _resumed(gw, mine, event_id)
        assert status == 200 and answers[0]["result"]["content"][0]["text"] == "x" * 10
        assert await _resumed(gw, mine, event_id) == (404, [])
        assert (await _kept(gw))["kept_streams"] == 0
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_kept_streams_are_bounded_by_bytes_and_the_oldest_finished_go(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted("--tools-call", "late:0.3")})
    # A kept stream of a 10,000-byte answer counts about 10,700 bytes: three fit a
    # session's bound, four the gateway's.
    limits = ("--limit", "session_kept_bytes=35000", "--limit", "kept_bytes=50000")

    async def main():
        gw = await HttpGateway.start(path, gateways, *limits)
        one, _ = await gw.legacy_session()
        two, _ = await gw.legacy_session()
        ones = [await _dropped(gw, one, {"bytes": 10_000}) for _ in range(5)]
        held = await _kept(gw)
        assert held["kept_streams"] == 3 and held["kept_bytes"] <= 35_000, held
        # The other session's streams are its own, up to the gateway's bound: beyond it,
        # the oldest finished stream of anyone's goes.
        twos = [await _dropped(gw, two, {"bytes": 10_000}) for _ in range(2)]
        held = await _kept(gw)
        assert held["kept_streams"] == 4 and held["kept_bytes"] <= 50_000, held
        assert held["evicted_streams"] == 3, held
        for event_id in ones[:3]:
            assert await _resumed(gw, one, event_id) == (404, []), "evicted, oldest first"
        for session, event_id in [(one, ones[3]), (one, ones[4]), (two, twos[0]),
                                  (two, twos[1])]:
            status, answers = await _resumed(gw, session, event_id)
            assert status == 200 and len(answers[0]["result"]["content"][0]["text"]) == \
                10_000, (status, answers)
        assert (await _kept(gw))["kept_bytes"] == 0, "each was delivered by its resumption"
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_legacy_calls_at_a_sustained_rate_are_all_answered(gateways, tmp_path):
    # Kept-stream bounds of a few streams' worth: far below what these calls would keep
    # if each were kept a while after its answer.
    path = fleet_config(tmp_path, {"alpha": scripted()})
    limits = ("--limit", "session_kept_bytes=4000", "--limit", "kept_bytes=8000")

    async def main():
        gw = await HttpGateway.start(path, gateways, *limits)
        sessions = [(await gw.legacy_session())[0] for _ in range(4)]
        refused: list = []

        async def client(n: int) -> None:
            session = sessions[n % len(sessions)]
            for i in range(25):
                call = gw.message("tools/call", {"name": "echo", "arguments": {"n": n, "i": i}})
                async with gw.http.post(gw.url, data=orjson.dumps(call),
                                        headers=session) as response:
                    if response.status != 200:
                        refused.append((response.status, await response.text()))
                        continue
                    if i % 2:  # every other one hung up on at its priming event
                        await _priming_id(response)
                        continue
                    answers = [m async for m in sse_messages(response)]
                    assert [a["id"] for a in answers] == [call["id"]] and "result" in \
                        answers[0], answers
        await asyncio.gather(*(client(n) for n in range(16)))
        assert refused == []
        held = await _kept(gw)
        assert held["kept_bytes"] <= 8000, held
        assert await gw.stop() == 0
    run(main(), timeout=180)
