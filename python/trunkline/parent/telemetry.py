"""A host's telemetry: which tracer and meter it uses, the records of its requests, the
events of its servers' lives, and the per-server metrics read from their statuses.

Off costs (almost) nothing. A host uses the providers given to ``Host(...)``, else the
global ones (set by the application, by ``opentelemetry-instrument``, or by
``trunkline serve`` from ``OTEL_*``); the API's own no-op and proxy providers mean off.
Which it is is looked up once per request (two global reads and two identity checks);
with telemetry off no span, no context and no attribute is made.

Lifecycle events are spans of their own (INTERNAL, roots, ended at once), so an operator
sees each when it happens rather than when a long span ends: ``trunkline.server.spawn``,
``.era_verdict`` (era, version, evidence), ``.restart`` (cause, delay), ``.crash_loop``
(the cut-off: cool-down and why), ``.reprobe``, ``.list_changed``.

The gateway's requests are recorded by ``telemetry/served.py`` with this host's tracer
and meter.

Metrics (names the conventions lack are ``trunkline.server.*``, each with
``trunkline.server``): ``mcp.client.operation.duration`` and, in the gateway,
``mcp.server.operation.duration`` (histograms, s); ``retries``, ``timeouts`` and
``era_verdicts`` (counters); ``in_flight`` and ``state`` (gauges: 1 for the current
state) and ``restarts``, ``late_replies`` (counters), observed from the servers'
statuses when the metrics are collected, so the call path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import SpanKind

from ..channel import ServerState
from ..telemetry import conventions as c
from ..telemetry import served
from ..telemetry.calls import CallRecord
from ..telemetry.instruments import STATE, Instruments
from ..version import VERSION
from .restarts import CoolDown, ReprobeIn, RestartIn

if TYPE_CHECKING:
    from .handle import ServerStatus, WorkerHandle

_OFF_TRACING = (trace.NoOpTracerProvider, trace.ProxyTracerProvider, type(None))
_API_METRICS = metrics.__name__
_SCOPE = "trunkline"


def _defined_by_the_api(provider: metrics.MeterProvider) -> bool:
    """Whether ``provider`` is one the OpenTelemetry API itself defines (its no-op, and its
    stand-in that ``metrics.get_meter_provider()`` returns until one is set), which record
    nothing: only an SDK's provider records. The API names its tracing stand-in
    (``trace.ProxyTracerProvider``), not its metrics one: that one is known by the package
    that defines it."""
    module = type(provider).__module__
    return module == _API_METRICS or module.startswith(_API_METRICS + ".")


# The API's public getters look into os.environ on every call (~2 µs each: twice per
# request), so the globals they return are read directly, and the getters called once per
# host (they load a provider named by OTEL_PYTHON_*_PROVIDER). None: not set yet, off.
if hasattr(trace, "_TRACER_PROVIDER"):
    def _global_tracer_provider() -> trace.TracerProvider | None:
        return trace._TRACER_PROVIDER
else:  # pragma: no cover - an API without that global: the public getter
    def _global_tracer_provider() -> trace.TracerProvider | None:
        return trace.get_tracer_provider()

_METRICS_GLOBALS: Any = getattr(metrics, "_internal", None)
if hasattr(_METRICS_GLOBALS, "_METER_PROVIDER"):
    def _global_meter_provider() -> metrics.MeterProvider | None:
        return _METRICS_GLOBALS._METER_PROVIDER
else:  # pragma: no cover
    def _global_meter_provider() -> metrics.MeterProvider | None:
        return metrics.get_meter_provider()


class Telemetry:
    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None,
                 statuses: Callable[[], Iterable[ServerStatus]] = list) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._statuses = statuses
        self._seen_tracing: object = None
        self._tracer: trace.Tracer | None = None
        self._seen_metrics: object = None
        self._instruments: Instruments | None = None
        self._transports: dict[str, tuple[object, dict[str, Any]]] = {}
        #: Per server: the generations whose spawn and verdict were told, the last
        #: decision told.
        self._spawn_told: dict[str, int] = {}
        self._verdict_told: dict[str, int] = {}
        self._decision_told: dict[str, object] = {}
        trace.get_tracer_provider()  # loads one OTEL_PYTHON_TRACER_PROVIDER names, if any
        metrics.get_meter_provider()

    # -- providers -------------------------------------------------------------------------

    def tracer(self) -> trace.Tracer | None:
        provider = self._tracer_provider or _global_tracer_provider()
        if provider is not self._seen_tracing:
            self._seen_tracing = provider
            self._tracer = (None if isinstance(provider, _OFF_TRACING)
                            else provider.get_tracer(_SCOPE, VERSION))
        return self._tracer

    def instruments(self) -> Instruments | None:
        provider = self._meter_provider or _global_meter_provider()
        if provider is not self._seen_metrics:
            self._seen_metrics = provider
            self._instruments = (
                None if provider is None or _defined_by_the_api(provider)
                else Instruments(provider.get_meter(_SCOPE, VERSION), self._statuses))
        return self._instruments

    def recording(self) -> bool:
        """Whether requests get records now (a tracer or meter provider is set). Asked on
        every call: while the providers are the ones last seen, two identity checks."""
        if ((self._tracer_provider or _global_tracer_provider()) is self._seen_tracing
                and (self._meter_provider or _global_meter_provider()) is self._seen_metrics):
            return self._tracer is not None or self._instruments is not None
        return self.tracer() is not None or self.instruments() is not None

    # -- requests ----------------------------------------------------------------------------

    def call(self, handle: WorkerHandle, method: str, params: Mapping[str, Any] | None,
             carried: Mapping[str, str] | None = None) -> CallRecord | None:
        """The record of one request the host sends to ``handle``'s server (None: off).
        Its span continues the context its caller gave (``carried``, W3C), else the
        current one."""
        tracer = self.tracer()
        instruments = self.instruments()
        if tracer is None and instruments is None:
            return None
        target, attributes = c.request_attributes(method, params)
        attributes.update(self._transport(handle))
        attributes[c.SERVER] = handle.name
        version = handle.version
        if version is not None:
            attributes[c.PROTOCOL_VERSION] = version
        parent = None if carried is None or tracer is None else propagate.extract(carried)
        return CallRecord(tracer, instruments, c.span_name(method, target), SpanKind.CLIENT,
                          method, attributes, parent=parent)

    # -- requests the gateway serves -------------------------------------------------------

    #: The record of one request the gateway serves, and the trace context of an HTTP
    #: request's headers, with this host's tracer and meter (``telemetry/served.py``).
    serve = served.record
    incoming = served.incoming

    def _transport(self, handle: WorkerHandle) -> dict[str, Any]:
        known = self._transports.get(handle.name)
        params = handle.config.params
        if known is None or known[0] is not params:
            known = self._transports[handle.name] = (params, c.transport_attributes(params))
        return known[1]

    # -- servers' lives ----------------------------------------------------------------------

    def server_state(self, handle: WorkerHandle) -> None:
        """A server's state changed: the lifecycle events it means."""
        tracer = self.tracer()
        instruments = self.instruments()
        if tracer is None and instruments is None:
            return
        name = handle.name
        base = {c.SERVER: name, "trunkline.server.generation": handle.generation}
        state = handle.state
        decision = handle.decision
        if decision is not None and self._decision_told.get(name) is not decision:
            self._decision_told[name] = decision
            told = {**base, "trunkline.reason": decision.reason,
                    "trunkline.delay_s": float(getattr(decision, "delay_s", 0.0))}
            if isinstance(decision, RestartIn):
                self._event(tracer, "restart", told)
            elif isinstance(decision, CoolDown):
                self._event(tracer, "crash_loop", told)
            elif isinstance(decision, ReprobeIn):
                self._event(tracer, "reprobe", told)
        if handle.generation and self._spawn_told.get(name) != handle.generation:
            # Told at a new worker's first state report (its STARTING may be no change of
            # the handle's state; generation 0 is a handle with no worker yet).
            self._spawn_told[name] = handle.generation
            self._event(tracer, "spawn", {**base, "trunkline.server.restarts": handle.restarts})
        report = handle.report
        if (report is not None and state in (ServerState.READY, ServerState.UNAVAILABLE)
                and report.state is state
                and self._verdict_told.get(name) != handle.generation):
            self._verdict_told[name] = handle.generation
            era = report.era or "none"
            attributes = {**base, "trunkline.era": era,
                          "trunkline.evidence": list(report.evidence), STATE: state.value}
            if report.version:
                attributes[c.PROTOCOL_VERSION] = report.version
            if report.reason:
                attributes["trunkline.reason"] = report.reason
            self._event(tracer, "era_verdict", attributes)
            if instruments is not None:
                instruments.era_verdicts.add(1, {c.SERVER: name, "trunkline.era": era})

    def list_changed(self, server: str, which: str) -> None:
        tracer = self.tracer()
        if tracer is not None:
            self._event(tracer, "list_changed", {c.SERVER: server, "trunkline.list": which})

    @staticmethod
    def _event(tracer: trace.Tracer | None, event: str, attributes: dict[str, Any]) -> None:
        if tracer is None:
            return
        span = tracer.start_span(f"trunkline.server.{event}", context=otel_context.Context(),
                                 kind=SpanKind.INTERNAL, attributes=attributes)
        span.end()
