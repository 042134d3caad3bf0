"""The OpenTelemetry SDK as the telemetry tests use it: providers of their own (never the
global ones) whose spans and metrics stay in memory, and readers of what they hold."""

from __future__ import annotations

from typing import Any

import orjson
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from trunkline import TelemetryOptions


class Recorded:
    """A tracer provider and a meter provider for one host, and what they recorded."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def options(self) -> TelemetryOptions:
        """A host's ``telemetry=``: these providers."""
        return TelemetryOptions(tracer_provider=self.tracer_provider,
                                meter_provider=self.meter_provider)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def span(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, (name, [s.name for s in self.spans()])
        return found[0]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` collected now."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def meta_of(line: bytes | dict[str, Any]) -> dict[str, Any]:
    message = orjson.loads(line) if isinstance(line, bytes) else line
    return (message.get("params") or {}).get("_meta") or {}
