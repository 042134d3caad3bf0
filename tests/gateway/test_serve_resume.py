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
from conftest import run, scripted
from mcp_schema import LEGACY, conforms

import taplog
from gateways import HttpGateway, fleet_config, sse_messages, wait_for_tap


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
