"""Resource subscriptions through ``trunkline serve``: a legacy client's
``resources/subscribe`` (over stdio, and over HTTP with its updates on the session's GET
stream) and a modern client's ``subscriptions/listen`` with ``resourceSubscriptions``,
all relayed from a real server behind the gateway (mcp 2.3.0, whose ``touch`` tool
announces an update; wrapped in tests/peers/tap.py, so the subscription it was asked for
is seen on the wire). Every message the gateway writes is schema-checked."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson
from conftest import PEERS, run
from mcp_schema import LEGACY, MODERN, conforms

import realpeers
import taplog
from gateways import (
    BOTH,
    SUB,
    HttpGateway,
    StdioGateway,
    fleet_config,
    modern_meta,
    real_server,
    sse_messages,
)
from trunkline.params import StdioParams

ABOUT = "echo://about"
INIT = {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}


def fleet(tmp_path: Any, tap: Any) -> Any:
    """The tapped mcp 2.3.0 server, and server-everything (legacy) beside it: with two
    servers offering resources, a URI neither lists is not found (with one, it would go
    to that one)."""
    return fleet_config(tmp_path, {"py": tapped_echo(tap),
                                   "ev": real_server(realpeers.LEGACY_TS_EVERYTHING)},
                        allow_legacy=("ev",))


def tapped_echo(tap: Any) -> StdioParams:
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    return StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                        *server.argv, "--listen"), dict(server.env))


def acked(tap: Any) -> list[Any]:
    """The resourceSubscriptions of each listen stream the server behind acknowledged."""
    return [orjson.loads(line)["params"]["notifications"].get("resourceSubscriptions")
            for line in taplog.lines(tap, taplog.OUT)
            if b"notifications/subscriptions/acknowledged" in line]


async def until(predicate: Any, what: str, timeout: float = 20) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def test_a_legacy_stdio_client_subscribes_and_unsubscribes(gateways, tmp_path, tap):
    path = fleet(tmp_path, tap)

    async def main():
        gw = await StdioGateway.start(path, gateways)
        init = await gw.call("initialize", INIT)
        assert init["result"]["capabilities"]["resources"]["subscribe"] is True
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await gw.call("resources/subscribe", {"uri": ABOUT}))["result"] == {}
        await until(lambda: [ABOUT] in acked(tap), "the server behind was subscribed")
        await gw.call("tools/call", {"name": "touch", "arguments": {"uri": ABOUT}})
        await until(lambda: any(n["method"] == "notifications/resources/updated"
                                for n in gw.notes), "the update reached the client")
        updates = [n for n in gw.notes if n["method"] == "notifications/resources/updated"]
        assert updates == [{"jsonrpc": "2.0", "method": "notifications/resources/updated",
                            "params": {"uri": ABOUT}}]
        conforms(updates[0], LEGACY, "ResourceUpdatedNotification")
        missing = await gw.call("resources/subscribe", {"uri": "echo://nothing/here"})
        assert missing["error"]["code"] == -32002  # legacy resource-not-found
        assert (await gw.call("resources/unsubscribe", {"uri": ABOUT}))["result"] == {}
        await until(lambda: acked(tap)[-1] is None, "the server behind was unsubscribed")
        await gw.call("tools/call", {"name": "touch", "arguments": {"uri": ABOUT}})
        await asyncio.sleep(0.5)
        assert len([n for n in gw.notes
                    if n["method"] == "notifications/resources/updated"]) == 1
        assert await gw.close() == 0
    run(main())


def test_http_clients_of_both_eras_hear_of_updates(gateways, tmp_path, tap):
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        # Modern: the URIs ride the listen request; the ack grants the ones that route.
        listen = gw.message("subscriptions/listen", {
            "notifications": {"resourceSubscriptions": [ABOUT, "nope://x"]},
            "_meta": modern_meta()})
        stream = await gw.http.post(gw.url, data=orjson.dumps(listen),
                                    headers=gw.modern_headers(listen))
        heard = sse_messages(stream)
        ack = await asyncio.wait_for(anext(heard), 30)
        assert ack["params"] == {"_meta": {SUB: listen["id"]},
                                 "notifications": {"resourceSubscriptions": [ABOUT]}}, \
            "the URI no server lists is not granted"
        conforms(ack, MODERN, "SubscriptionsAcknowledgedNotification")
        # Legacy: subscribe in the session, hear it on the session's GET stream.
        _, _, got = await gw.post(gw.message("initialize", INIT), {"Accept": BOTH})
        session = {"Accept": BOTH, "Content-Type": "application/json",
                   "Mcp-Session-Id": got["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
        legacy_stream = await gw.http.get(gw.url, headers={
            **session, "Accept": "text/event-stream"})
        legacy_heard = sse_messages(legacy_stream)
        status, answer, _ = await gw.post(gw.message("resources/subscribe", {"uri": ABOUT}),
                                          session)
        assert status == 200 and answer["result"] == {}
        await until(lambda: acked(tap)[-1] == [ABOUT], "the server behind was subscribed")
        _, touched = await gw.modern("tools/call", {"name": "touch", "arguments": {"uri": ABOUT}})
        assert "error" not in touched, touched
        update = await asyncio.wait_for(anext(heard), 30)
        assert update == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                          "params": {"uri": ABOUT, "_meta": {SUB: listen["id"]}}}
        conforms(update, MODERN, "ResourceUpdatedNotification")
        legacy_update = await asyncio.wait_for(anext(legacy_heard), 30)
        assert legacy_update == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                 "params": {"uri": ABOUT}}
        conforms(legacy_update, LEGACY, "ResourceUpdatedNotification")
        # Closing the modern stream and unsubscribing the session ends the subscription
        # behind the gateway: its next listen stream names no resource.
        stream.close()
        status, answer, _ = await gw.post(gw.message("resources/unsubscribe", {"uri": ABOUT}),
                                          session)
        assert status == 200 and answer["result"] == {}
        await until(lambda: acked(tap)[-1] is None, "the server behind was unsubscribed")
        legacy_stream.close()
        assert await gw.stop() == 0
    run(main(), timeout=180)
