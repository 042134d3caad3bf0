"""What a gateway needs of a host (the methods at the end of ``Host``): a tool's server and
entry by the name it is served under, from the catalog as last listed, and the telemetry
a gateway's requests are recorded with. Real worker processes and scripted servers."""

from __future__ import annotations

from opentelemetry import metrics, trace

from conftest import run, scripted
from otelsdk import Recorded
from trunkline import CatalogOptions, TelemetryOptions
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))


def test_a_tool_is_found_by_its_served_name_and_a_name_no_tool_has_is_none(no_leaks):
    async def main():
        async with Host(catalog=CatalogOptions(collision="prefix"), settings=SETTINGS) as host:
            await host.add_server("alpha", scripted("--tools", "echo"))
            await host.add_server("beta", scripted("--tools", "echo,search"))
            # ``echo`` is contested: each server's is served under its server's prefix.
            assert host.server_of("alpha_echo") == "alpha"
            assert host.server_of("beta_echo") == "beta"
            assert host.server_of("search") == "beta"
            entry = host.tool_entry("beta_echo")
            assert entry is not None
            assert (entry.server, entry.local_name, entry.name) == ("beta", "echo", "beta_echo")
            # The name a model calls it by finds the same entry.
            assert host.tool_entry(entry.model_name) == entry
            assert host.server_of("gamma_echo") is None
            assert host.tool_entry("gamma_echo") is None
    run(main())


TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HEADERS = {"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"}


def test_with_tracing_off_a_gateway_finds_no_incoming_context_and_records_nothing(no_leaks):
    async def main():
        async with Host(settings=SETTINGS,
                        telemetry=TelemetryOptions(tracer_provider=trace.NoOpTracerProvider(),
                                                   meter_provider=metrics.NoOpMeterProvider())
                        ) as host:
            assert host.tracing is False
            assert host.incoming_trace(HEADERS) is None
            assert host.serve_record("ping", {}, 1, "2025-11-25", "tcp") is None
    run(main())


def test_with_tracing_on_a_gateway_continues_its_clients_trace(no_leaks):
    recorded = Recorded()

    async def main():
        async with Host(settings=SETTINGS, telemetry=recorded.options()) as host:
            assert host.tracing is True
            context = host.incoming_trace(HEADERS)
            assert context is not None
            parent = trace.get_current_span(context).get_span_context()
            assert format(parent.trace_id, "032x") == TRACE_ID
            assert host.serve_record("ping", {}, 1, "2025-11-25", "tcp") is not None
    try:
        run(main())
    finally:
        recorded.shutdown()
