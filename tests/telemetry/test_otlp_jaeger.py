"""``trunkline serve`` exporting its spans and metrics over OTLP to a real backend:
Jaeger (tests/jaeger.py, built by .ci/install-jaeger), configured only by the standard
``OTEL_*`` variables, with the real mcp 2.3.0 echo server behind the gateway. The
client's trace context goes in ``_meta``; the trace is read back from Jaeger's query
API, as an operator's UI would read it, and the metrics from the Prometheus exporter of
the collector inside Jaeger."""

from __future__ import annotations

import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

import realpeers
from conftest import run
from gateways import HttpGateway, fleet_config, modern_meta, real_server
from jaeger import Jaeger, tags

pytestmark = pytest.mark.real_servers


def test_the_gateways_trace_reaches_jaeger_over_otlp(gateways, tmp_path):
    realpeers.require(realpeers.MODERN_PY_ECHO)
    path = fleet_config(tmp_path, {"echo": real_server(realpeers.MODERN_PY_ECHO)})
    trace_id, agent_span = os.urandom(16).hex(), os.urandom(8).hex()
    jaeger = Jaeger(tmp_path)

    async def main():
        await jaeger.ready()
        gateway = await HttpGateway.start(path, gateways, env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint,
            "OTEL_SERVICE_NAME": "gw-otlp", "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "300"})
        try:
            message = gateway.message("tools/call", {
                "name": "echo", "arguments": {"text": "traced"},
                "_meta": {**modern_meta(), "traceparent": f"00-{trace_id}-{agent_span}-01"}})
            status, answer, _ = await gateway.post(message, gateway.modern_headers(message))
            assert status == 200 and answer["result"]["content"][0]["text"] == "traced"
            trace = await jaeger.trace(trace_id, spans=2)
            page = await jaeger.metrics("mcp_server_operation_duration")
        finally:
            assert await gateway.stop() == 0
        return message["id"], trace, page

    try:
        request_id, trace, page = run(main(), timeout=240)
    finally:
        jaeger.stop()

    # The metrics, as the collector received them over OTLP (its Prometheus names).
    samples = [s for f in text_string_to_metric_families(page) for s in f.samples]
    served = [s for s in samples if s.name == "mcp_server_operation_duration_seconds_count"
              and s.labels.get("mcp_method_name") == "tools/call"]
    assert [(s.labels["gen_ai_tool_name"], s.value) for s in served] == [("echo", 1)]
    assert served[0].labels["job"] == "gw-otlp"
    sent = [s for s in samples if s.name == "mcp_client_operation_duration_seconds_count"
            and s.labels.get("mcp_method_name") == "tools/call"]
    assert [(s.labels["trunkline_server"], s.value) for s in sent] == [("echo", 1)]
    # The collector's naming: a gauge of unit "1" gets "_ratio"; the instance is the
    # process's own service.instance.id.
    assert any(s.name == "trunkline_server_state_ratio" and s.value == 1
               and s.labels.get("trunkline_server_state") == "ready" for s in samples)
    assert served[0].labels["instance"] and served[0].labels["instance"] == sent[0].labels[
        "instance"]

    by_kind = {tags(span).get("span.kind"): span for span in trace["spans"]}
    served, sent = by_kind["server"], by_kind["client"]
    assert served["operationName"] == sent["operationName"] == "tools/call echo"
    # The client's span is the SERVER span's parent; the SERVER span the CLIENT span's.
    assert [(r["refType"], r["spanID"]) for r in served["references"]] == [
        ("CHILD_OF", agent_span)]
    assert [(r["refType"], r["spanID"]) for r in sent["references"]] == [
        ("CHILD_OF", served["spanID"])]
    served_tags, sent_tags = tags(served), tags(sent)
    assert served_tags["mcp.method.name"] == sent_tags["mcp.method.name"] == "tools/call"
    assert served_tags["jsonrpc.request.id"] == str(request_id)
    assert served_tags["network.transport"] == "tcp"
    assert sent_tags["gen_ai.tool.name"] == "echo"
    assert sent_tags["gen_ai.operation.name"] == "execute_tool"
    assert sent_tags["network.transport"] == "pipe"
    assert sent_tags["mcp.protocol.version"] == "2026-07-28"
    assert sent_tags["trunkline.server"] == "echo"
    assert sent_tags["jsonrpc.request.id"].isdigit()  # the id the worker sent upstream
    process = trace["processes"][served["processID"]]
    assert process["serviceName"] == "gw-otlp"
    assert "service.instance.id" in {tag["key"] for tag in process["tags"]}
