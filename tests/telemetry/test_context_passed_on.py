"""A caller's W3C trace context (``traceparent``, ``tracestate``, ``baggage``) reaches the
server behind as it came when trunkline records no span of its own (W3C Trace Context
asks an intermediary that does not trace to pass it on): through ``trunkline serve`` run
with no ``OTEL_*`` setting at all (the HTTP face, from ``_meta`` or the W3C headers, and
the stdio face; clients of both eras; a modern and a legacy real server behind, each in
tests/peers/tap.py so what it received is asserted), and through ``Host.call_tool`` /
``Host.request`` (``trace_context``), checked before it goes. With tracing on, the host's
CLIENT span continues a given context and its own goes upstream."""

from __future__ import annotations

import sys

import orjson
import pytest
from conftest import PEERS, run
from opentelemetry.trace import SpanKind

import realpeers
import taplog
from otelsdk import Recorded, traceparent
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
        async with Host(settings=SETTINGS, **rec.host_kwargs()) as host:
            await host.add_server("echo", tapped(realpeers.MODERN_PY_ECHO, traced_log))
            await host.call_tool("echo", {"text": "traced"}, trace_context=w3c(41))
        async with Host(settings=SETTINGS, meter_provider=rec.meter_provider) as host:
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
