"""The host's spans, metrics and trace context through the public Host API against real
servers on stdio: the mcp 2.3.0 echo server (modern) and mcp-server-time on mcp 1.x
(legacy, allowlisted), each wrapped in tests/peers/tap.py so what the server received is
asserted; the scripted peer only for what no real server does on demand (a tool error
code, a crash in the middle of a call)."""

from __future__ import annotations

import asyncio
import sys

import orjson
import pytest
import taplog
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.trace import SpanKind, StatusCode

import realpeers
from conftest import PEERS, run, scripted
from otelsdk import Recorded, meta_of, traceparent
from trunkline import CallOptions
from trunkline.errors import RequestTimeout, ServerError, ServerUnavailable
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.parent.telemetry import Telemetry
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.retry import RetryPolicy
from trunkline.settings import HostSettings, RestartPolicy

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))


def tapped(server: realpeers.RealServer, log, *extra: str):
    realpeers.require(server)
    return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(log), "--",
                 *server.argv, *extra, env=dict(server.env))


def received(tap, method: str) -> list[dict]:
    return [m for m in map(orjson.loads, taplog.lines(tap, taplog.IN))
            if m.get("method") == method]


@pytest.mark.real_servers
def test_modern_tool_call_span_and_context_reach_the_server(no_leaks, tmp_path):
    log = tmp_path / "tap.jsonl"
    rec = Recorded()
    outer = rec.tracer_provider.get_tracer("test")

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("echo", tapped(realpeers.MODERN_PY_ECHO, log))
            with outer.start_as_current_span("agent step") as step:
                result = await host.call_tool("echo", {"text": "hi"})
            assert result.text == "hi"
            return step
    step = run(main())

    span = rec.span("tools/call echo")
    assert span.kind is SpanKind.CLIENT
    assert span.parent is not None and span.parent.span_id == step.get_span_context().span_id
    assert span.context.trace_id == step.get_span_context().trace_id
    attributes = dict(span.attributes)
    [call] = received(log, "tools/call")
    assert attributes == {
        "mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool", "network.transport": "pipe",
        "mcp.protocol.version": "2026-07-28", "trunkline.server": "echo",
        # The id the server received (the worker chose it; the RESULT frame told it).
        "jsonrpc.request.id": str(call["id"])}
    assert span.status.status_code is StatusCode.UNSET

    # The real server received the call span's context in params._meta, beside the
    # era's own keys.
    meta = meta_of(call)
    assert meta["traceparent"] == traceparent(span)
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"

    # The listing is a span of its own (no target: a list names nothing), a root.
    [listing] = rec.spans("tools/list")
    assert listing.attributes["mcp.method.name"] == "tools/list"
    assert "gen_ai.operation.name" not in listing.attributes
    [listed] = received(log, "tools/list")
    assert meta_of(listed)["traceparent"] == traceparent(listing)

    # Lifecycle: the spawn and the era verdict, with its evidence.
    assert rec.span("trunkline.server.spawn").attributes["trunkline.server"] == "echo"
    verdict = rec.span("trunkline.server.era_verdict")
    assert verdict.attributes["trunkline.era"] == "modern"
    assert verdict.attributes["trunkline.evidence"]
    assert verdict.attributes["mcp.protocol.version"] == "2026-07-28"

    [point] = [p for p in rec.points("mcp.client.operation.duration")
               if p.attributes["mcp.method.name"] == "tools/call"]
    assert point.count == 1 and point.sum > 0
    assert point.attributes["gen_ai.tool.name"] == "echo"
    assert point.attributes["trunkline.server"] == "echo"
    assert "error.type" not in point.attributes
    [verdicts] = rec.points("trunkline.server.era_verdicts")
    assert verdicts.value == 1 and verdicts.attributes["trunkline.era"] == "modern"
    states = {p.attributes["trunkline.server.state"]: p.value
              for p in rec.points("trunkline.server.state")}
    assert states["stopped"] == 1 and states["ready"] == 0  # read after the host closed
    rec.shutdown()


@pytest.mark.real_servers
def test_legacy_server_gets_the_context_too(no_leaks, tmp_path):
    log = tmp_path / "tap.jsonl"
    rec = Recorded()

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("time", tapped(realpeers.LEGACY_PY_TIME, log),
                                  allow_legacy=True)
            result = await host.call_tool("get_current_time", {"timezone": "UTC"})
            assert not result.is_error
    run(main())

    span = rec.span("tools/call get_current_time")
    assert span.attributes["mcp.protocol.version"] == "2025-11-25"
    [call] = received(log, "tools/call")
    assert meta_of(call)["traceparent"] == traceparent(span)
    assert span.attributes["jsonrpc.request.id"] == str(call["id"])
    verdict = rec.span("trunkline.server.era_verdict")
    assert verdict.attributes["trunkline.era"] == "legacy"
    rec.shutdown()


def test_errors_are_typed_by_code_and_tool_error(no_leaks, tmp_path):
    rec = Recorded()
    tap = tmp_path / "tap.jsonl"

    async def main():
        async with Host(telemetry=rec.options()) as host:
            await host.add_server("bad", scripted("--tools", "echo", "--tools-call",
                                                  "error:-32050", tap=tap))
            with pytest.raises(ServerError):
                await host.call_tool("echo", {"x": 1})
    run(main())
    span = rec.span("tools/call echo")
    [call] = received(tap, "tools/call")
    assert span.attributes["jsonrpc.request.id"] == str(call["id"])
    assert span.attributes["error.type"] == "-32050"
    assert span.attributes["rpc.response.status_code"] == "-32050"
    assert span.status.status_code is StatusCode.ERROR
    [point] = [p for p in rec.points("mcp.client.operation.duration")
               if p.attributes["mcp.method.name"] == "tools/call"]
    assert point.attributes["error.type"] == "-32050"
    rec.shutdown()


@pytest.mark.real_servers
def test_an_is_error_result_is_a_tool_error(no_leaks, tmp_path):
    rec = Recorded()

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("time", tapped(realpeers.MODERN_PY_TIME, tmp_path / "t"))
            result = await host.call_tool("get_current_time", {"timezone": "Not/AZone"})
            assert result.is_error
    run(main())
    span = rec.span("tools/call get_current_time")
    assert span.attributes["error.type"] == "tool_error"
    assert span.status.status_code is StatusCode.ERROR
    rec.shutdown()


def test_retries_restarts_and_the_crash_loop_are_in_the_trace(no_leaks, tmp_path):
    """A call to a tool that kills its server, declared idempotent: three attempts fail
    with the connection, the third trips the restart limit, and the fourth finds the
    server cut off. The span shows each retry and each wait for the restarting server, and
    the lifecycle spans each restart's cause and the crash-loop cut-off."""
    rec = Recorded()
    settings = HostSettings(restart=RestartPolicy(base_s=0.01, cap_s=0.05, max_restarts=2,
                                                  window_s=60.0, cool_down_s=60.0))

    async def main():
        async with Host(settings=settings,
                        calls=CallOptions(retry=RetryPolicy(max_attempts=4, base_s=0.01)),
                        telemetry=rec.options()) as host:
            await host.add_server("frail", scripted("--tools", "crash"))
            with pytest.raises(ServerUnavailable):
                await host.call_tool("crash", {}, idempotent=True, timeout=30)
    run(main())

    span = rec.span("tools/call crash")
    assert span.attributes["error.type"] == "ServerUnavailable"
    events = [e.name for e in span.events]
    assert events.count("retry") == 3, events
    retry = next(e for e in span.events if e.name == "retry")
    assert retry.attributes["trunkline.attempts"] == 1
    assert retry.attributes["error.type"] == "TransportLost"
    assert "wait_for_server" in events and "server_ready" in events
    restarts = rec.spans("trunkline.server.restart")
    assert len(restarts) == 2
    assert all(r.attributes["trunkline.reason"] for r in restarts)
    [cut_off] = rec.spans("trunkline.server.crash_loop")
    assert "crash loop" in cut_off.attributes["trunkline.reason"]
    assert cut_off.attributes["trunkline.delay_s"] == 60.0
    [retries] = rec.points("trunkline.server.retries")
    assert retries.value == 3 and retries.attributes["trunkline.server"] == "frail"
    [restarted] = rec.points("trunkline.server.restarts")
    assert restarted.value == 2
    rec.shutdown()


def test_telemetry_off_sends_no_trace_context(no_leaks, tmp_path):
    """No provider given and none set globally: nothing is added to what a server gets."""
    tap = tmp_path / "tap.jsonl"

    async def main():
        async with Host() as host:
            assert host.telemetry.tracer() is None and host.telemetry.instruments() is None
            await host.add_server("a", scripted("--tools", "echo", tap=tap))
            await host.call_tool("echo", {"x": 1})
    run(main())
    [call] = received(tap, "tools/call")
    assert set(meta_of(call)) == {"io.modelcontextprotocol/protocolVersion",
                                  "io.modelcontextprotocol/clientCapabilities",
                                  "io.modelcontextprotocol/clientInfo"}


def test_a_meter_provider_the_api_defines_makes_no_instruments():
    """The OpenTelemetry API's own meter providers record nothing: its no-op, and its
    stand-in (what ``metrics.get_meter_provider()`` returns while none is set, as in these
    tests, which never set one globally). A telemetry given either makes no instruments;
    one given an SDK's provider, or an application's own, does."""
    stand_in = metrics.get_meter_provider()
    assert not isinstance(stand_in, (SdkMeterProvider, metrics.NoOpMeterProvider))
    assert Telemetry(meter_provider=stand_in).instruments() is None
    assert Telemetry(meter_provider=metrics.NoOpMeterProvider()).instruments() is None

    class OwnProvider(metrics.MeterProvider):
        def get_meter(self, name, version=None, schema_url=None, attributes=None):
            return metrics.NoOpMeter(name, version)

    assert Telemetry(meter_provider=OwnProvider()).instruments() is not None
    rec = Recorded()
    assert Telemetry(meter_provider=rec.meter_provider).instruments() is not None
    rec.shutdown()


@pytest.mark.real_servers
def test_a_list_change_is_a_lifecycle_span(no_leaks, tmp_path):
    """The real server adds a tool and says so on its listen stream: the host re-lists it,
    and the change is a span of its own."""
    log = tmp_path / "tap.jsonl"
    rec = Recorded()

    async def main():
        async with Host(settings=SETTINGS, telemetry=rec.options()) as host:
            await host.add_server("echo", tapped(realpeers.MODERN_PY_ECHO, log, "--listen"))
            await until(lambda: any(
                m.get("method") == "notifications/subscriptions/acknowledged"
                for m in map(orjson.loads, taplog.lines(log, taplog.OUT))))
            assert (await host.call_tool("add_tool", {"name": "greet"}, timeout=30)
                    ).text == "added greet"
            await until(lambda: "greet" in {t.name for t in host.tools()})
    run(main())
    [changed] = rec.spans("trunkline.server.list_changed")
    assert changed.attributes["trunkline.server"] == "echo"
    assert changed.attributes["trunkline.list"] == "tools"
    assert len(rec.spans("tools/list")) == 2  # the first listing, and the one it caused
    rec.shutdown()


async def until(predicate, timeout: float = 30.0) -> None:
    """Poll ``predicate`` (a condition the test waits for, not a timing it asserts)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.05)


def test_a_timed_out_call_names_the_request_the_worker_sent(no_leaks, tmp_path):
    """The worker's deadline ends the call first (the parent's is the backstop), and its
    FAILURE names the request's id: the span has it, as the conventions require of a
    request that was executed."""
    rec = Recorded()
    tap = tmp_path / "tap.jsonl"

    async def main():
        async with Host(telemetry=rec.options()) as host:
            await host.add_server("slow", scripted("--tools", "sleep", tap=tap))
            with pytest.raises(RequestTimeout) as info:
                await host.call_tool("sleep", {}, timeout=0.3)
            return info.value
    error = run(main())
    [call] = received(tap, "tools/call")
    assert error.request_id == call["id"]
    span = rec.span("tools/call sleep")
    assert span.attributes["error.type"] == "RequestTimeout"
    assert span.attributes["jsonrpc.request.id"] == str(call["id"])
    # The server was told, with the same id.
    [cancelled] = received(tap, "notifications/cancelled")
    assert cancelled["params"]["requestId"] == call["id"]
    rec.shutdown()
