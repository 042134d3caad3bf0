"""The pure parts: the conventions' names and values (telemetry/conventions.py) and which
exporters the ``OTEL_*`` variables ask for (telemetry/sdk.py)."""

from __future__ import annotations

import pytest

from trunkline.errors import RequestTimeout, ServerError
from trunkline.params import http, stdio
from trunkline.telemetry import conventions as c
from trunkline.telemetry.sdk import _instance, configure, exporters


@pytest.mark.parametrize(("method", "params", "name", "extra"), [
    ("tools/call", {"name": "search", "arguments": {}}, "tools/call search",
     {c.TOOL: "search", c.OPERATION: "execute_tool"}),
    ("prompts/get", {"name": "greet"}, "prompts/get greet", {c.PROMPT: "greet"}),
    # A URI is an attribute, never the name (unbounded cardinality).
    ("resources/read", {"uri": "file:///a/b"}, "resources/read", {c.RESOURCE_URI: "file:///a/b"}),
    ("tools/list", {"cursor": "x"}, "tools/list", {}),
    ("tools/call", {"name": 7}, "tools/call", {c.OPERATION: "execute_tool"}),
])
def test_span_names_and_request_attributes(method, params, name, extra):
    target, attributes = c.request_attributes(method, params)
    assert c.span_name(method, target) == name
    assert attributes == {c.METHOD: method, **extra}


def test_transport_attributes():
    assert c.transport_attributes(stdio("srv")) == {c.TRANSPORT: "pipe"}
    web = {c.TRANSPORT: "tcp", "network.protocol.name": "http",
           "network.protocol.version": "1.1"}
    assert c.transport_attributes(http("https://mcp.example.com/x")) == {
        **web, c.SERVER_ADDRESS: "mcp.example.com", c.SERVER_PORT: 443}
    assert c.transport_attributes(http("http://[::1]:8123/mcp")) == {
        **web, c.SERVER_ADDRESS: "::1", c.SERVER_PORT: 8123}


def test_error_types():
    assert c.error_type(ServerError("no", code=-32602)) == "-32602"
    assert c.error_type(RequestTimeout("slow")) == "RequestTimeout"
    assert c.result_error_type("tools/call", {"isError": True, "content": []}) == "tool_error"
    assert c.result_error_type("tools/call", {"isError": False}) is None
    assert c.result_error_type("prompts/get", {"isError": True}) is None


@pytest.mark.parametrize(("env", "traces", "metrics"), [
    ({}, [], []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"], ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"], []),
    ({"OTEL_TRACES_EXPORTER": "console, otlp", "OTEL_METRICS_EXPORTER": "prometheus"},
     ["console", "otlp"], ["prometheus"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, [],
     ["otlp"]),
])
def test_exporters_asked_by_the_environment(env, traces, metrics):
    assert exporters("traces", env) == traces
    assert exporters("metrics", env) == metrics


def test_nothing_is_configured_unless_asked():
    nothing = configure(env={})
    assert nothing.tracer_provider is None and nothing.meter_provider is None
    disabled = configure(prometheus=True, env={"OTEL_SDK_DISABLED": "true",
                                               "OTEL_TRACES_EXPORTER": "console"})
    assert disabled.tracer_provider is None and disabled.meter_provider is None
    with pytest.raises(ValueError, match="unknown exporter 'zipkin'"):
        configure(env={"OTEL_TRACES_EXPORTER": "zipkin"})


def test_each_process_is_an_instance_of_its_own_unless_configured():
    first, second = _instance({}), _instance({})
    assert first.keys() == {"service.instance.id"} and first != second
    assert _instance({"OTEL_RESOURCE_ATTRIBUTES": "a=1, service.instance.id=gw-3"}) == {}
