"""Traces over Streamable HTTP and through the gateway, end to end against real servers:
the mcp 2.3.0 HTTP server (its ``--record`` file says what it received) behind the Host,
and behind a gateway (``Answerer`` + ``HttpFace``, the pieces ``trunkline serve --http``
runs) whose client sends its own trace context in ``_meta`` and in the W3C headers."""

from __future__ import annotations

import secrets
import sys

import aiohttp
import orjson
import pytest
import taplog
from opentelemetry import baggage, propagate
from opentelemetry.trace import SpanKind

import httppeers
import realpeers
from conftest import PEERS, run
from gateways import HttpGateway, modern_meta
from httppeers import http_peer  # noqa: F401 - a fixture
from otelsdk import Recorded, meta_of, traceparent
from trunkline import Host, http
from trunkline.gateway.answers import Answerer
from trunkline.gateway.api_keys import ApiKey, ApiKeys
from trunkline.gateway.http import HttpFace
from trunkline.gateway.http_rules import SessionSigner
from trunkline.params import stdio
from trunkline.policy import Identity
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

pytestmark = pytest.mark.real_servers

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))


def test_http_server_span_attributes_and_context(no_leaks, http_peer, tmp_path):
    argv, env = httppeers.py_http_modern()
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")
    port = int(server.url.split(":")[2].split("/")[0])
    rec = Recorded()

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("remote", http(server.url))
            assert (await host.call_tool("add", {"a": 2, "b": 40})).text == "42"
    run(main())

    span = rec.span("tools/call add")
    assert span.kind is SpanKind.CLIENT
    assert {k: span.attributes[k] for k in (
        "network.transport", "network.protocol.name", "network.protocol.version",
        "server.address", "server.port", "mcp.protocol.version")} == {
        "network.transport": "tcp", "network.protocol.name": "http",
        "network.protocol.version": "1.1", "server.address": "127.0.0.1", "server.port": port,
        "mcp.protocol.version": "2026-07-28"}
    [call] = [r["body"] for r in server.records()
              if r.get("method") == "POST" and r["body"].get("method") == "tools/call"]
    assert span.attributes["jsonrpc.request.id"] == str(call["id"])
    assert meta_of(call)["traceparent"] == traceparent(span)
    [point] = [p for p in rec.points("mcp.client.operation.duration")
               if p.attributes["mcp.method.name"] == "tools/call"]
    assert point.attributes["server.port"] == port
    rec.shutdown()


def test_gateway_continues_the_clients_trace_upstream(no_leaks, tmp_path):
    """A client's ``_meta`` context is the SERVER span's parent, its W3C headers' context
    a link; the host's CLIENT span is the SERVER span's child, and the real server behind
    receives that span's context, with the client's baggage."""
    log = tmp_path / "tap.jsonl"
    realpeers.require(realpeers.MODERN_PY_ECHO)
    server = stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(log), "--",
                   *realpeers.MODERN_PY_ECHO.argv, env=dict(realpeers.MODERN_PY_ECHO.env))
    rec = Recorded()
    client = rec.tracer_provider.get_tracer("client")

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("echo", server)
            answerer = Answerer(host, server_info={"name": "gw", "version": "1"},
                                transport="tcp")
            face = HttpFace(answerer, bind="127.0.0.1", port=0, api_keys=[],
                            signer=SessionSigner(secrets.token_bytes(32)),
                            max_body_bytes=1 << 20)
            url = await face.start()
            try:
                with client.start_as_current_span("http hop") as hop:
                    headers: dict[str, str] = {}
                    propagate.inject(headers)
                with client.start_as_current_span("agent") as agent:
                    carried: dict[str, str] = {}
                    propagate.inject(carried, context=baggage.set_baggage("user", "alice"))
                message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": "hi"},
                                      "_meta": modern_meta(**carried)}}
                async with aiohttp.ClientSession() as session:
                    async with session.post(url, json=message, headers={
                            **HttpGateway.modern_headers(message, "application/json"),
                            **headers}) as response:
                        answer = await response.json()
                    # Answered by the gateway itself (its catalog): a SERVER span too.
                    listing = {"jsonrpc": "2.0", "id": 8, "method": "tools/list",
                               "params": {"_meta": modern_meta()}}
                    async with session.post(url, json=listing, headers=HttpGateway.
                                            modern_headers(listing, "application/json")
                                            ) as response:
                        assert (await response.json())["result"]["tools"]
            finally:
                await face.stop()
                answerer.close()
            assert answer["result"]["content"][0]["text"] == "hi", answer
            return hop, agent
    hop, agent = run(main())

    served = next(s for s in rec.spans("tools/call echo") if s.kind is SpanKind.SERVER)
    sent = next(s for s in rec.spans("tools/call echo") if s.kind is SpanKind.CLIENT)
    assert served.parent.span_id == agent.get_span_context().span_id
    assert served.context.trace_id == agent.get_span_context().trace_id
    assert [link.context.span_id for link in served.links] == [
        hop.get_span_context().span_id]
    assert served.attributes["jsonrpc.request.id"] == "7"
    assert served.attributes["network.transport"] == "tcp"
    assert served.attributes["mcp.method.name"] == "tools/call"
    assert served.attributes["gen_ai.tool.name"] == "echo"
    assert sent.parent.span_id == served.context.span_id
    assert sent.context.trace_id == agent.get_span_context().trace_id

    [upstream] = [m for m in map(orjson.loads, taplog.lines(log, taplog.IN))
                  if m.get("method") == "tools/call"]
    call = meta_of(upstream)
    # Each side names its own request: the client's id on the SERVER span (kept, "7"
    # above), the id the gateway's worker sent upstream on the CLIENT span.
    assert sent.attributes["jsonrpc.request.id"] == str(upstream["id"])
    assert call["traceparent"] == traceparent(sent)
    assert call["baggage"] == "user=alice"
    served_methods = {p.attributes["mcp.method.name"]: p.count
                      for p in rec.points("mcp.server.operation.duration")}
    assert served_methods == {"tools/call": 1, "tools/list": 1}
    listed = next(s for s in rec.spans("tools/list") if s.kind is SpanKind.SERVER)
    assert listed.attributes["jsonrpc.request.id"] == "8"
    assert "error.type" not in listed.attributes
    rec.shutdown()


def test_the_server_span_says_who_the_request_speaks_for(no_leaks):
    """An API key's identity is on the gateway's SERVER span (``enduser.id``, its kind),
    never on a metric (one series per user would have no bound), and never the key."""
    realpeers.require(realpeers.MODERN_PY_ECHO)
    server = stdio(*realpeers.MODERN_PY_ECHO.argv, env=dict(realpeers.MODERN_PY_ECHO.env))
    rec = Recorded()
    key = "ci-bot-secret-0123456789"

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("echo", server)
            answerer = Answerer(host, server_info={"name": "gw", "version": "1"},
                                transport="tcp")
            face = HttpFace(answerer, bind="127.0.0.1", port=0,
                            api_keys=ApiKeys([ApiKey(Identity.api_key("ci-bot"),
                                                     key.encode())]),
                            signer=SessionSigner(secrets.token_bytes(32)),
                            max_body_bytes=1 << 20)
            url = await face.start()
            try:
                message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": "hi"},
                                      "_meta": modern_meta()}}
                async with aiohttp.ClientSession() as session:
                    async with session.post(url, json=message, headers={
                            **HttpGateway.modern_headers(message, "application/json"),
                            "Authorization": f"Bearer {key}"}) as response:
                        assert (await response.json())["result"]["content"][0]["text"] == "hi"
            finally:
                await face.stop()
                answerer.close()
    run(main())
    served = next(s for s in rec.spans("tools/call echo") if s.kind is SpanKind.SERVER)
    assert served.attributes["enduser.id"] == "ci-bot"
    assert served.attributes["trunkline.identity.kind"] == "api_key"
    assert "trunkline.identity.issuer" not in served.attributes
    for name in ("mcp.server.operation.duration", "mcp.client.operation.duration"):
        for point in rec.points(name):
            assert "enduser.id" not in point.attributes
    everything = repr([dict(s.attributes) for s in rec.spans()])
    assert key not in everything
    rec.shutdown()
