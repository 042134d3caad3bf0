"""The OpenTelemetry SDK and exporters as ``trunkline serve`` sets them up: from the
standard ``OTEL_*`` environment variables, and the Prometheus page of the gateway's
``/metrics``. Needs the ``otel`` extra (``pip install 'trunkline[otel]'``); imported only
when something asks for it.

Rules:

- ``OTEL_SDK_DISABLED=true``: nothing is set up, whatever else is asked.
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (comma-separated ``otlp``,
  ``console``, ``none``; metrics also ``prometheus``) choose the exporters. Unset, an
  OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or its per-signal variable) means
  ``otlp``; nothing at all means no exporter, so a gateway nobody configured sends
  nothing anywhere.
- ``prometheus=True`` (``serve --metrics``) adds the Prometheus reader, served by the
  gateway's HTTP face at ``/metrics`` rather than a port of its own.
- ``logs=True`` (``serve --audit otel``: something emits log records) sets up a logger
  provider likewise, from ``OTEL_LOGS_EXPORTER`` (``otlp``, ``console``, ``none``) or an
  OTLP endpoint; without it none is, whatever the variables say (trunkline's own log
  lines stay on stderr).
- ``console`` writes to stderr: ``serve --stdio`` speaks the protocol on stdout.
- Everything else (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_TRACES_SAMPLER``, endpoints, headers, intervals, ``OTEL_PROPAGATORS``) is read by
  the SDK itself. The service name defaults to ``trunkline``; ``service.instance.id`` to
  one of the process's own (unless ``OTEL_RESOURCE_ATTRIBUTES`` sets it).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace


class MissingExtra(RuntimeError):
    """Telemetry was asked for and the SDK is not installed."""


@dataclass
class Configured:
    """What ``configure`` set up: the providers (None: that signal is off) and, with the
    Prometheus reader, the page it serves."""

    tracer_provider: Any = None
    meter_provider: Any = None
    logger_provider: Any = None
    prometheus: bool = False
    _registry: Any = field(default=None, repr=False)

    def metrics_page(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of every metric now, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        return generate_latest(self._registry or REGISTRY), CONTENT_TYPE_LATEST

    def shutdown(self) -> None:
        """Export what is pending and stop the exporters."""
        for provider in (self.tracer_provider, self.meter_provider, self.logger_provider):
            if provider is not None:
                provider.shutdown()


def exporters(signal: str, env: Mapping[str, str]) -> list[str]:
    """The exporters ``env`` asks for one signal (``traces``, ``metrics``, ``logs``); pure."""
    named = env.get(f"OTEL_{signal.upper()}_EXPORTER")
    if named is None:
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        return ["otlp"] if endpoint else []
    chosen = [n.strip().lower() for n in named.split(",") if n.strip()]
    return [] if "none" in chosen else chosen


def configure(*, prometheus: bool = False, logs: bool = False,
              env: Mapping[str, str] | None = None) -> Configured:
    """Set the global tracer, meter and (with ``logs``) logger providers as ``env``
    (default ``os.environ``) says; a signal nobody asked for stays the API's no-op."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Configured()
    traces = exporters("traces", env)
    wanted_metrics = exporters("metrics", env)
    if prometheus and "prometheus" not in wanted_metrics:
        wanted_metrics.append("prometheus")
    wanted_logs = exporters("logs", env) if logs else []
    if not traces and not wanted_metrics and not wanted_logs:
        return Configured()
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    except ImportError:
        raise MissingExtra("telemetry needs the OpenTelemetry SDK: "
                           "pip install 'trunkline[otel]'") from None
    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME", "trunkline"),
                                **_instance(env)})
    done = Configured()
    if traces:
        done.tracer_provider = _tracer_provider(traces, resource)
        trace.set_tracer_provider(done.tracer_provider)
    if wanted_metrics:
        done.meter_provider, done.prometheus = _meter_provider(wanted_metrics, resource)
        metrics.set_meter_provider(done.meter_provider)
    if wanted_logs:
        from opentelemetry import _logs

        done.logger_provider = _logger_provider(wanted_logs, resource)
        _logs.set_logger_provider(done.logger_provider)
    return done


def _instance(env: Mapping[str, str]) -> dict[str, str]:
    """A ``service.instance.id`` of this process's own, unless the operator set one: the
    copies of ``serve --processes N`` (and replicas) export under one service name, and a
    backend must not take their counters for one series."""
    configured = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if any(item.split("=", 1)[0].strip() == "service.instance.id"
           for item in configured.split(",")):
        return {}
    return {"service.instance.id": uuid.uuid4().hex}


def _tracer_provider(names: list[str], resource: Any) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER is read here
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} "
                             "(otlp, console, none)")
    return provider


def _meter_provider(names: list[str], resource: Any) -> tuple[Any, bool]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    readers: list[Any] = []
    prometheus = False
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr)))
        elif name == "prometheus":
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            readers.append(PrometheusMetricReader())
            prometheus = True
        else:
            raise ValueError(f"OTEL_METRICS_EXPORTER: unknown exporter {name!r} "
                             "(otlp, prometheus, console, none)")
    return MeterProvider(resource=resource, metric_readers=readers), prometheus


def _logger_provider(names: list[str], resource: Any) -> Any:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter

    provider = LoggerProvider(resource=resource)
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

            provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        elif name == "console":
            provider.add_log_record_processor(
                BatchLogRecordProcessor(ConsoleLogRecordExporter(out=sys.stderr)))
        else:
            raise ValueError(f"OTEL_LOGS_EXPORTER: unknown exporter {name!r} "
                             "(otlp, console, none)")
    return provider
