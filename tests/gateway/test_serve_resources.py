"""Resource subscriptions through ``trunkline serve``: a legacy client's
``resources/subscribe`` (over stdio, and over HTTP with its updates on the session's GET
stream) and a modern client's ``subscriptions/listen`` with ``resourceSubscriptions``,
all relayed from a real server behind the gateway (mcp 2.3.0, whose ``touch`` tool
announces an update; wrapped in tests/peers/tap.py, so the subscription it was asked for
is seen on the wire). Every message the gateway writes is schema-checked."""

from __future__ import annotations

import asyncio
import secrets
import sys
from typing import Any

import aiohttp
import orjson
import taplog

import realpeers
from conftest import PEERS, run
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
from mcp_schema import LEGACY, MODERN, conforms
from trunkline import channel as ch
from trunkline.gateway.answers import Answerer
from trunkline.gateway.http import HttpFace
from trunkline.gateway.http_rules import SessionSigner
from trunkline.params import StdioParams
from trunkline.parent.generation import Generation
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))

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


# -- what one client's subscriptions can cost (issue 36) ---------------------------------

ITEMS = [f"echo://items/i{n}" for n in range(1024)]
DYNAMIC = [f"demo://resource/dynamic/text/{n}" for n in range(1, 257)]


def tapped_everything(tap: Any) -> StdioParams:
    server = realpeers.require(realpeers.LEGACY_TS_EVERYTHING)
    return StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                        *server.argv), dict(server.env))


def listened(tap: Any) -> list[Any]:
    """The resourceSubscriptions of each listen request sent to the server behind."""
    return [m["params"]["notifications"].get("resourceSubscriptions")
            for m in taplog.messages(tap, taplog.IN) if m.get("method") == "subscriptions/listen"]


def sent(tap: Any, method: str) -> list[str]:
    """The URI of each ``method`` request sent to the server behind."""
    return [m["params"]["uri"] for m in taplog.messages(tap, taplog.IN)
            if m.get("method") == method]


def watch_frames(monkeypatch: Any) -> list[dict[str, Any]]:
    """Every ``WATCH_RESOURCES`` frame a parent in this process sends a worker, as JSON."""
    frames: list[dict[str, Any]] = []
    send = Generation.send

    def spy(gen: Generation, frame: bytes) -> None:
        if frame[4] == ch.WATCH_RESOURCES:
            frames.append(orjson.loads(frame[5:]))
        send(gen, frame)
    monkeypatch.setattr(Generation, "send", spy)
    return frames


async def open_listen(gw: HttpGateway, uris: list[str]) -> tuple[Any, Any, dict[str, Any]]:
    """A modern listen stream for ``uris``: the response, its messages, the first one."""
    listen = gw.message("subscriptions/listen", {
        "notifications": {"resourceSubscriptions": uris}, "_meta": modern_meta()})
    stream = await gw.http.post(gw.url, data=orjson.dumps(listen),
                                headers=gw.modern_headers(listen))
    heard = sse_messages(stream)
    return stream, heard, await asyncio.wait_for(anext(heard), 30)


def test_a_listen_request_naming_more_than_listen_uris_is_refused(gateways, tmp_path, tap):
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "listen_uris=8")
        await until(lambda: listened(tap), "the worker's own listen stream")
        listen = gw.message("subscriptions/listen", {
            "notifications": {"resourceSubscriptions": ITEMS[:9]}, "_meta": modern_meta()})
        response = await gw.http.post(gw.url, data=orjson.dumps(listen),
                                      headers=gw.modern_headers(listen))
        answer = await response.json() if response.content_type == "application/json" \
            else await asyncio.wait_for(anext(sse_messages(response)), 30)  # a stream?
        response.close()
        assert response.status == 200 and "error" in answer, answer
        assert answer["id"] == listen["id"] and answer["error"]["code"] == -32602
        assert "names 9 resources, over the limit of 8" in answer["error"]["message"]
        assert answer["error"]["data"] == {"limit": "listen_uris", "max": 8}
        conforms(answer, MODERN, "JSONRPCErrorResponse")
        # Nothing of it was subscribed: the next stream behind names only what a
        # request within the limit asks for.
        stream, _, ack = await open_listen(gw, [ABOUT])
        assert ack["params"]["notifications"] == {"resourceSubscriptions": [ABOUT]}
        await until(lambda: [ABOUT] in acked(tap), "the server behind was subscribed")
        assert [uris for uris in listened(tap) if uris] == [[ABOUT]]
        stream.close()
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_listen_is_one_change_for_each_worker_and_ends_with_its_stream(
        no_leaks, tmp_path, tap, monkeypatch):
    """256 URIs of a modern server and 256 of a legacy one in one listen request, served
    by the pieces ``serve --http`` runs (``Answerer``, ``HttpFace``): each worker is sent
    one change naming its URIs (never the whole set per URI); the modern server's listen
    stream is opened again once, naming them all, the legacy one gets one
    resources/subscribe per URI; the client hanging up is one change back, undoing both."""
    ev_tap = tmp_path / "ev.jsonl"
    frames = watch_frames(monkeypatch)
    items, dynamic = ITEMS[:256], DYNAMIC

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("py", tapped_echo(tap))
            await host.add_server("ev", tapped_everything(ev_tap), allow_legacy=True)
            await until(lambda: acked(tap), "the worker's own listen stream")
            answerer = Answerer(host, server_info={"name": "gw", "version": "1"})
            face = HttpFace(answerer, bind="127.0.0.1", port=0, api_keys=[],
                            signer=SessionSigner(secrets.token_bytes(32)),
                            max_body_bytes=1 << 20)
            url = await face.start()
            try:
                async with aiohttp.ClientSession() as http:
                    listen = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                              "params": {"notifications": {
                                  "resourceSubscriptions": items + dynamic},
                                  "_meta": modern_meta()}}
                    stream = await http.post(url, data=orjson.dumps(listen),
                                             headers=HttpGateway.modern_headers(listen))
                    ack = await asyncio.wait_for(anext(sse_messages(stream)), 30)
                    assert ack["params"]["notifications"] == {
                        "resourceSubscriptions": items + dynamic}
                    await until(lambda: len(frames) >= 2, "the workers were told")
                    assert sorted(frames, key=str) == [{"added": dynamic, "removed": []},
                                                       {"added": items, "removed": []}]
                    await until(lambda: sorted(items) in acked(tap), "the modern stream")
                    assert listened(tap) == [None, sorted(items)], "opened again once"
                    await until(lambda: len(sent(ev_tap, "resources/subscribe")) >= 256,
                                "the legacy server subscribed to each")
                    stream.close()  # the client hangs up
                    await until(lambda: len(frames) >= 4, "the workers were told again")
                    assert sorted(frames[2:], key=str) == [
                        {"added": [], "removed": dynamic}, {"added": [], "removed": items}]
                    await until(lambda: len(sent(ev_tap, "resources/unsubscribe")) >= 256,
                                "the legacy server unsubscribed from each")
                    await until(lambda: len(listened(tap)) == 3, "the modern stream again")
                    assert listened(tap)[-1] is None
                    assert sorted(sent(ev_tap, "resources/subscribe")) == sorted(dynamic)
                    assert sorted(sent(ev_tap, "resources/unsubscribe")) == sorted(dynamic)
                    assert len(frames) == 4
            finally:
                await face.stop()
                answerer.close()
    run(main(), timeout=180)


def test_a_client_gone_while_its_listen_is_routed_leaves_nothing_watched(
        gateways, tmp_path, tap):
    """Eight URIs the gateway knows and one it must list the fleet again for: the client
    hangs up as soon as it sent the request, which the gateway hears while it lists."""
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        await until(lambda: listened(tap), "the worker's own listen stream")
        _, templates = await gw.modern("resources/templates/list")  # the routes are known
        assert "result" in templates, templates
        listen = gw.message("subscriptions/listen", {
            "notifications": {"resourceSubscriptions": [*ITEMS[:8], "nope://x"]},
            "_meta": modern_meta()})
        body = orjson.dumps(listen)
        host, port = gw.url.split("//")[1].split("/")[0].rsplit(":", 1)
        head = "".join(f"{k}: {v}\r\n" for k, v in {
            "Host": f"{host}:{port}", "Content-Length": str(len(body)),
            **gw.modern_headers(listen)}.items())
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /mcp HTTP/1.1\r\n" + head.encode() + b"\r\n" + body)
        writer.close()  # gone at once
        await writer.wait_closed()
        # A request after it names one URI: the stream behind names that one only.
        stream, _, _ = await open_listen(gw, [ABOUT])
        await until(lambda: any(ABOUT in (uris or ()) for uris in acked(tap)),
                    "the server behind was subscribed")
        assert [uris for uris in listened(tap) if uris] == [[ABOUT]]
        stream.close()
        assert await gw.stop() == 0
    run(main(), timeout=120)
