"""A caller's W3C trace context (``traceparent``, ``tracestate``, ``baggage``) reaches the
server behind as it came when trunkline records no span of its own (W3C Trace Context
asks an intermediary that does not trace to pass it on): through ``trunkline serve`` run
with no ``OTEL_*`` setting at all (the HTTP face, from ``_meta`` or the W3C headers, and
the stdio face; clients of both eras; a modern and a legacy real server behind, each in
tests/peers/tap.py so what it received is asserted), and through ``Host.call_tool`` /
``Host.request`` (``trace_context``), checked before it goes. With tracing on, the host's
CLIENT span continues a given context and its own goes upstream."""

from __future__ import annotations

import os
import sys

import orjson
import pytest
import taplog
from opentelemetry.trace import SpanKind

import realpeers
from conftest import PEERS, run
from gateways import JSON_ONLY, HttpGateway, StdioGateway, fleet_config, modern_meta
from otelsdk import Recorded, traceparent
from trunkline import TelemetryOptions
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings
from trunkline.telemetry.carried import carried

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))
KEYS = ("traceparent", "tracestate", "baggage")


def w3c(n: int) -> dict[str, str]:
    """A caller's context, told apart from the others by ``n`` (its trace and span ids)."""
    return {"traceparent": f"00-4bf92f3577b34da6a3ce929d0e0e{n:04x}-00f067aa0ba9{n:04x}-01",
            "tracestate": f"congo=t61rcWkgMzE,rojo=00f067aa0ba9{n:04x}",
            "baggage": f"user=alice,n={n}"}


def tapped(server: realpeers.RealServer, log):
    realpeers.require(server)
    return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(log), "--",
                 *server.argv, env=dict(server.env))


def received(log, method: str) -> list[dict]:
    return [m for m in map(orjson.loads, taplog.lines(log, taplog.IN))
            if m.get("method") == method]


def trace_of(message: dict) -> dict[str, str]:
    """The W3C keys of what an upstream received in ``params._meta``."""
    meta = message["params"].get("_meta") or {}
    return {k: meta[k] for k in KEYS if k in meta}


def echoed(log) -> dict[str, dict]:
    """The echo server's ``tools/call`` requests, by the text they echo."""
    return {m["params"]["arguments"]["text"]: m for m in received(log, "tools/call")}


@pytest.fixture
def untraced(monkeypatch):
    """No ``OTEL_*`` variable in the environment the gateway inherits: no tracing."""
    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)


@pytest.mark.real_servers
def test_serve_http_passes_a_modern_clients_context_on(gateways, tmp_path, untraced):
    echo_log, time_log = tmp_path / "echo.jsonl", tmp_path / "time.jsonl"
    path = fleet_config(tmp_path, {"echo": tapped(realpeers.MODERN_PY_ECHO, echo_log),
                                   "time": tapped(realpeers.LEGACY_PY_TIME, time_log)},
                        allow_legacy=("time",))

    async def main():
        gw = await HttpGateway.start(path, gateways)

        async def ask(method, params, meta=None, headers=None):
            message = gw.message(method, {**params, "_meta": modern_meta(**(meta or {}))})
            status, answer, _ = await gw.post(
                message, {**gw.modern_headers(message, JSON_ONLY), **(headers or {})})
            assert status == 200 and "result" in answer, answer

        try:
            await ask("tools/call", {"name": "echo", "arguments": {"text": "in _meta"}},
                      {**w3c(1), "com.example/private": "the client's own"})
            await ask("tools/call", {"name": "get_current_time",
                                     "arguments": {"timezone": "UTC"}}, w3c(2))
            await ask("tools/call", {"name": "echo", "arguments": {"text": "in headers"}},
                      headers=w3c(3))
            await ask("tools/call", {"name": "echo", "arguments": {"text": "in both"}},
                      w3c(4), headers=w3c(5))
            await ask("tools/call", {"name": "echo", "arguments": {"text": "none"}})
            await ask("tools/call", {"name": "echo", "arguments": {"text": "malformed"}},
                      {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                       "tracestate": "congo=t61rcWkgMzE", "baggage": "user=bob"})
            await ask("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}, w3c(6))
            await ask("resources/read", {"uri": "echo://about"}, w3c(7))
            await ask("completion/complete", {
                "ref": {"type": "ref/resource", "uri": "echo://items/{item}"},
                "argument": {"name": "item", "value": "ap"}}, headers=w3c(8))
        finally:
            assert await gw.stop() == 0
    run(main())

    calls = echoed(echo_log)
    # Unchanged: the same trace id and parent id (no span of ours between), the client's
    # tracestate and baggage, and nothing else of the client's _meta.
    assert trace_of(calls["in _meta"]) == w3c(1)
    assert "com.example/private" not in calls["in _meta"]["params"]["_meta"]
    [legacy] = received(time_log, "tools/call")
    assert trace_of(legacy) == w3c(2)
    assert trace_of(calls["in headers"]) == w3c(3)
    assert trace_of(calls["in both"]) == w3c(4)  # _meta wins over the headers
    assert trace_of(calls["none"]) == {}
    # A malformed traceparent is dropped, and its tracestate with it; baggage stands alone.
    assert trace_of(calls["malformed"]) == {"baggage": "user=bob"}
    [prompt] = received(echo_log, "prompts/get")
    [read] = received(echo_log, "resources/read")
    [completion] = received(echo_log, "completion/complete")
    assert [trace_of(prompt), trace_of(read), trace_of(completion)] == [w3c(6), w3c(7), w3c(8)]
    # The gateway's listings carry no one's context.
    assert all(trace_of(m) == {} for m in received(echo_log, "tools/list"))


@pytest.mark.real_servers
def test_serve_http_passes_a_legacy_sessions_context_on(gateways, tmp_path, untraced):
    echo_log = tmp_path / "echo.jsonl"
    path = fleet_config(tmp_path, {"echo": tapped(realpeers.MODERN_PY_ECHO, echo_log)})

    async def main():
        gw = await HttpGateway.start(path, gateways)
        try:
            session, _ = await gw.legacy_session()
            for message, headers in (
                    (gw.message("tools/call", {"name": "echo", "arguments": {"text": "legacy"},
                                               "_meta": w3c(11)}), {}),
                    (gw.message("tools/call", {"name": "echo",
                                               "arguments": {"text": "legacy headers"}}),
                     w3c(12)),
                    (gw.message("prompts/get", {"name": "greet", "arguments": {"name": "Lin"},
                                                "_meta": w3c(13)}), {})):
                status, answer, _ = await gw.post(message, {**session, **headers})
                assert status == 200 and "result" in answer, answer
        finally:
            assert await gw.stop() == 0
    run(main())

    calls = echoed(echo_log)
    assert trace_of(calls["legacy"]) == w3c(11)
    assert trace_of(calls["legacy headers"]) == w3c(12)
    [prompt] = received(echo_log, "prompts/get")
    assert trace_of(prompt) == w3c(13)


@pytest.mark.real_servers
def test_serve_stdio_passes_the_clients_context_on(gateways, tmp_path, untraced):
    echo_log, time_log = tmp_path / "echo.jsonl", tmp_path / "time.jsonl"
    path = fleet_config(tmp_path, {"echo": tapped(realpeers.MODERN_PY_ECHO, echo_log),
                                   "time": tapped(realpeers.LEGACY_PY_TIME, time_log)},
                        allow_legacy=("time",))

    async def main():
        gw = await StdioGateway.start(path, gateways)
        try:
            for params in (
                    {"name": "echo", "arguments": {"text": "modern"},
                     "_meta": modern_meta(**w3c(21))},
                    {"name": "get_current_time", "arguments": {"timezone": "UTC"},
                     "_meta": modern_meta(**w3c(22))},
                    {"name": "echo", "arguments": {"text": "none"}, "_meta": modern_meta()}):
                assert "result" in await gw.call("tools/call", params)
            read = await gw.call("resources/read", {"uri": "echo://about",
                                                    "_meta": modern_meta(**w3c(23))})
            assert "result" in read, read
            init = await gw.call("initialize", {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "old", "version": "1"}})
            assert "result" in init
            gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            legacy = await gw.call("tools/call", {"name": "echo", "arguments": {"text": "legacy"},
                                                  "_meta": w3c(24)})
            assert "result" in legacy, legacy
        finally:
            assert await gw.close() == 0
    run(main())

    calls = echoed(echo_log)
    assert trace_of(calls["modern"]) == w3c(21)
    assert trace_of(calls["none"]) == {}
    assert trace_of(calls["legacy"]) == w3c(24)
    [legacy_upstream] = received(time_log, "tools/call")
    assert trace_of(legacy_upstream) == w3c(22)
    [read] = received(echo_log, "resources/read")
    assert trace_of(read) == w3c(23)


@pytest.mark.real_servers
def test_host_passes_a_given_context_on_checked(no_leaks, tmp_path):
    """Telemetry off (no provider given, none set globally): ``trace_context`` goes upstream
    as given, what is malformed or too long dropped; what is not a trace context at all is
    the caller's mistake, raised where the call is awaited, and nothing is sent."""
    log = tmp_path / "echo.jsonl"

    async def main():
        async with Host(settings=SETTINGS) as host:
            assert host.telemetry.tracer() is None and host.telemetry.instruments() is None
            await host.add_server("echo", tapped(realpeers.MODERN_PY_ECHO, log))
            await host.call_tool("echo", {"text": "given"}, trace_context=w3c(31))
            await host.request("echo", "prompts/get", {
                "name": "greet", "arguments": {"name": "Ada"},
                "_meta": {"com.example/own": "kept", "traceparent": "replaced"}},
                trace_context=w3c(32))
            zero_trace = "00-" + "0" * 32 + "-00f067aa0ba902b7-01"
            await host.call_tool("echo", {"text": "zero trace id"}, trace_context={
                "traceparent": zero_trace, "tracestate": "congo=t61rcWkgMzE"})
            await host.call_tool("echo", {"text": "too long"}, trace_context={
                **w3c(33), "baggage": "k=" + "v" * 8191})
            await host.call_tool("echo", {"text": "plain"})
            for wrong, error in (({**w3c(34), "progressToken": "t"}, ValueError),
                                 ({"traceparent": 34}, TypeError),
                                 (w3c(34)["traceparent"], TypeError)):
                with pytest.raises(error):
                    await host.call_tool("echo", {"text": "refused"}, trace_context=wrong)
                with pytest.raises(error):
                    await host.request("echo", "resources/read", {"uri": "echo://about"},
                                       trace_context=wrong)
    run(main())

    calls = echoed(log)
    assert trace_of(calls["given"]) == w3c(31)
    [prompt] = received(log, "prompts/get")
    assert trace_of(prompt) == w3c(32)
    assert prompt["params"]["_meta"]["com.example/own"] == "kept"
    assert trace_of(calls["zero trace id"]) == {}
    assert trace_of(calls["too long"]) == {k: w3c(33)[k] for k in ("traceparent", "tracestate")}
    assert trace_of(calls["plain"]) == {}
    assert "refused" not in calls and not received(log, "resources/read")


@pytest.mark.real_servers
def test_with_telemetry_on_the_calls_span_continues_a_given_context(no_leaks, tmp_path):
    """Tracing on: the CLIENT span is the given context's child, and its own context goes
    upstream (with the given tracestate and baggage). Metrics alone record no span: the
    given context goes upstream as it came."""
    traced_log, metered_log = tmp_path / "traced.jsonl", tmp_path / "metered.jsonl"
    rec = Recorded()

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("echo", tapped(realpeers.MODERN_PY_ECHO, traced_log))
            await host.call_tool("echo", {"text": "traced"}, trace_context=w3c(41))
        async with Host(settings=SETTINGS,
                        telemetry=TelemetryOptions(meter_provider=rec.meter_provider)) as host:
            assert host.telemetry.tracer() is None
            await host.add_server("echo", tapped(realpeers.MODERN_PY_ECHO, metered_log))
            await host.call_tool("echo", {"text": "metered"}, trace_context=w3c(42))
    run(main())

    span = rec.span("tools/call echo")
    assert span.kind is SpanKind.CLIENT
    assert (f"{span.context.trace_id:032x}", f"{span.parent.span_id:016x}") == tuple(
        w3c(41)["traceparent"].split("-")[1:3])
    [traced] = received(traced_log, "tools/call")
    assert trace_of(traced) == {**w3c(41), "traceparent": traceparent(span)}
    [metered] = received(metered_log, "tools/call")
    assert trace_of(metered) == w3c(42)
    rec.shutdown()


@pytest.mark.parametrize(("given", "passed"), [
    (w3c(1), w3c(1)),
    ({"traceparent": w3c(1)["traceparent"]}, {"traceparent": w3c(1)["traceparent"]}),
    ({"baggage": "user=alice"}, {"baggage": "user=alice"}),
    ({"tracestate": "congo=t61rcWkgMzE"}, None),  # means nothing without its parent
    ({}, None),
    # A later version may add fields after the flags; version 00 may not, ff is invalid.
    ({"traceparent": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"},
     {"traceparent": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"}),
    ({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"}, None),
    ({"traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, None),
    ({"traceparent": "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}, None),
    ({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}, None),
    ({"traceparent": " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, None),
    ({**w3c(1), "tracestate": "congo=t61r\ncWk"},
     {"traceparent": w3c(1)["traceparent"], "baggage": w3c(1)["baggage"]}),
    ({**w3c(1), "baggage": "k=\x00"}, {k: w3c(1)[k] for k in ("traceparent", "tracestate")}),
    ({**w3c(1), "tracestate": "a=" + "b" * 8190}, {**w3c(1), "tracestate": "a=" + "b" * 8190}),
    ({**w3c(1), "tracestate": "a=" + "b" * 8191},
     {"traceparent": w3c(1)["traceparent"], "baggage": w3c(1)["baggage"]}),
])
def test_what_of_a_given_context_is_passed_on(given, passed):
    assert carried(given) == passed


@pytest.mark.parametrize(("given", "error"), [
    ({"traceparent": w3c(1)["traceparent"], "progressToken": "t"}, ValueError),
    ({"traceparent": b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, TypeError),
    ([("traceparent", w3c(1)["traceparent"])], TypeError),
])
def test_what_is_no_trace_context_is_refused(given, error):
    with pytest.raises(error):
        carried(given)
