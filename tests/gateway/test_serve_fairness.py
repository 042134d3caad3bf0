"""Each client gets its fair share of ``trunkline serve``: at most ``client_server_share``
of one server's places (``--max-per-server``) and ``client_calls`` requests behind the
gateway in all (``--limit NAME=VALUE``); beyond either the client is refused at once,
naming its own budget and when its own calls will have ended, while every other client
is answered (issue 36, finding 9: one legacy session fired 2,100 slow calls, hung up on
each, and every other client got 429 from that server for 60 s, told ``Retry-After: 1``).

A client is a legacy session (whatever connections its requests come on, and for as long
as its calls run, which outlive their connections), a modern client's connection (which
carries one request at a time: ``gateway/http_server.py``), the stdio face's one client."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from conftest import run, scripted
from gateways import BOTH, JSON_ONLY, HttpGateway, StdioGateway, fleet_config, modern_meta
from mcp_schema import LEGACY, MODERN, conforms

SLEEP = {"name": "sleep", "arguments": {"seconds": 60}}
#: The slow calls still running at the end are cancelled when the gateway stops.
QUICK_STOP = ("--drain-timeout", "0.5")


async def hung_up(gw: HttpGateway, message: dict[str, Any], headers: dict[str, str]
                  ) -> tuple[int, Any, Any]:
    """POST ``message`` and hang up as soon as the response's head is in (a legacy call's
    stream, when it was admitted, goes on without the client); its status, its JSON body
    (None for a stream) and its headers."""
    async with gw.http.post(gw.url, data=orjson.dumps(message), headers=headers) as response:
        if response.content_type == "text/event-stream":
            response.close()
            return response.status, None, response.headers
        return response.status, await response.json(), response.headers


def refused_for(answer: dict[str, Any], got: Any, budget: str, limit: int,
                server: str | None = None) -> int:
    """Check a refusal of a client over ``budget``; the seconds it is told to wait."""
    data = answer["error"]["data"]
    expected = {"kind": "Overloaded", "scope": "client", "budget": budget, "limit": limit,
                **({"server": server} if server else {})}
    assert {k: v for k, v in data.items() if k != "retryAfterS"} == expected, answer
    assert budget in answer["error"]["message"] and "this client" in answer["error"]["message"]
    # Its own calls (60 s each, just begun) must end first: not "1 s", never beyond them.
    wait = data["retryAfterS"]
    assert got["Retry-After"] == str(wait) and 1 < wait <= 60, (wait, got)
    return wait


def test_a_legacy_session_gets_its_share_of_a_server_and_others_are_answered(gateways,
                                                                           tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--max-per-server", "4",
                                     "--limit", "client_server_share=0.5", *QUICK_STOP)
        hog, _ = await gw.legacy_session()
        # Two slow calls, each on a connection it hangs up at once: they run on, and
        # count against the session.
        first = gw.message("tools/call", SLEEP)
        for message in (first, gw.message("tools/call", SLEEP)):
            status, _, _ = await hung_up(gw, message, hog)
            assert status == 200
        # Half of alpha's four places is the session's share: more is refused at once,
        # on a stream or as JSON, naming the session's budget, not the server's.
        for accept in (BOTH, JSON_ONLY):
            status, answer, got = await hung_up(gw, gw.message("tools/call", SLEEP),
                                                {**hog, "Accept": accept})
            assert status == 429, (status, answer)
            refused_for(answer, got, "client_server_share", 2, "alpha")
            conforms(answer, LEGACY, "JSONRPCErrorResponse")
        # Everyone else still finds alpha: another session and a modern client.
        other, _ = await gw.legacy_session()
        status, answer, _ = await gw.post(gw.message("tools/call", {
            "name": "echo", "arguments": {"from": "other"}}), other)
        assert status == 200 and "result" in answer, answer
        status, answer = await gw.modern("tools/call", {"name": "echo", "arguments": {}})
        assert status == 200 and "result" in answer, answer
        # The session's own call ends (its client cancels it): a place of its own again.
        busy = gw.message("tools/call", SLEEP)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": first["id"]}}
        status, _, _ = await gw.post(cancel, hog)
        assert status == 202
        for _ in range(400):
            status, answer, _ = await hung_up(gw, busy, hog)
            if status == 200:
                break
            busy = gw.message("tools/call", SLEEP)
            await asyncio.sleep(0.025)
        assert status == 200, answer
        assert await gw.stop() == 0
    run(main())


def test_a_clients_calls_across_servers_are_bounded_by_client_calls(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted(), "beta": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "client_calls=2", *QUICK_STOP)
        hog, _ = await gw.legacy_session()
        for tool in ("alpha_sleep", "beta_sleep"):
            status, _, _ = await hung_up(gw, gw.message(
                "tools/call", {**SLEEP, "name": tool}), hog)
            assert status == 200
        # Neither server is anywhere near full (2048 places each): the session's own
        # budget in all is, whichever server and whatever else it asks.
        for message in (gw.message("tools/call", {"name": "beta_echo", "arguments": {}}),
                        gw.message("prompts/list", {})):
            status, answer, got = await hung_up(gw, message, hog)
            assert status == 429, (status, answer)
            refused_for(answer, got, "client_calls", 2)
        status, answer = await gw.modern("tools/call", {"name": "beta_echo", "arguments": {}})
        assert status == 200 and "result" in answer, answer
        message = gw.message("tools/call", {"name": "alpha_echo", "arguments": {},
                                            "_meta": modern_meta()})
        status, answer, _ = await gw.post(message, gw.modern_headers(message, BOTH))
        assert status == 200 and "result" in answer, answer
        conforms(answer, MODERN, "JSONRPCResultResponse")
        assert await gw.stop() == 0
    run(main())


def test_the_stdio_clients_calls_are_bounded_by_client_calls(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await StdioGateway.start(path, gateways, "--limit", "client_calls=2")
        await gw.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"name": "old", "version": "1"}})
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        slow = [gw.request("tools/call", SLEEP) for _ in range(2)]
        refused = await gw.call("tools/call", {"name": "echo", "arguments": {}})
        data = refused["error"]["data"]
        assert (data["scope"], data["budget"], data["limit"]) == ("client", "client_calls", 2)
        assert 1 < data["retryAfterS"] <= 60
        conforms(refused, LEGACY, "JSONRPCErrorResponse")
        # One of its calls cancelled: room for one more.
        gw.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": slow[0]}})
        for _ in range(400):
            answer = await gw.call("tools/call", {"name": "echo", "arguments": {}})
            if "result" in answer:
                break
            await asyncio.sleep(0.025)
        assert "result" in answer, answer
        assert await gw.close() == 0
    run(main())


def test_a_round_held_for_a_modern_client_counts_against_it_until_taken_up(gateways,
                                                                            tmp_path):
    # A legacy server's question to a modern client holds the call (and its server's
    # slot) in flight until the client answers: it is the client's place meanwhile, and
    # the client's answer takes it up (it is never refused for its own held round).
    import realpeers
    from gateways import CAPS, real_server

    path = fleet_config(tmp_path, {"ev": real_server(realpeers.LEGACY_TS_EVERYTHING)},
                        allow_legacy=("ev",))
    eliciting = {"elicitation": {"form": {}}}

    async def main():
        gw = await HttpGateway.start(path, gateways, "--max-per-server", "2",
                                     "--limit", "client_server_share=0.5", *QUICK_STOP)
        status, listed = await gw.modern("tools/list")
        [tool] = [t["name"] for t in listed["result"]["tools"]
                  if t["name"].endswith("trigger-elicitation-request")]

        def call(**extra: Any) -> dict[str, Any]:
            return gw.message("tools/call", {"name": tool, "arguments": {},
                                             "_meta": modern_meta(**{CAPS: eliciting}),
                                             **extra})
        # One connection: one client.
        import aiohttp
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
            async def post(message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
                async with http.post(gw.url, data=orjson.dumps(message),
                                     headers=gw.modern_headers(message, JSON_ONLY)) as r:
                    return r.status, await r.json()
            status, needed = await post(call())
            assert status == 200 and needed["result"]["resultType"] == "input_required"
            # Its one place of ev (half of two) is held by the round: more is refused.
            status, refused = await post(call())
            assert status == 429 and refused["error"]["data"]["scope"] == "client", refused
            [(key, _)] = needed["result"]["inputRequests"].items()
            status, done = await post(call(
                inputResponses={key: {"action": "accept", "content": {"name": "Kim"}}},
                requestState=needed["result"]["requestState"]))
            assert status == 200 and "Kim" in orjson.dumps(done).decode(), done
            # Answered: its place is free again.
            status, again = await post(call())
            assert status == 200 and again["result"]["resultType"] == "input_required"
        assert await gw.stop() == 0
    run(main(), timeout=120)
