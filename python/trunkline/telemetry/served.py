"""The gateway's side of a request's telemetry: the SERVER span and duration of a request
it serves (``record``), and the trace context an HTTP request's headers carry
(``incoming``). The tracer and meter are the host's (``Providers``: the parent's
``Telemetry``): the gateway's spans and the host's are on, and off, together.

Rules:

- A served request's span is named and attributed by ``conventions`` like a host's
  (``jsonrpc.request.id`` the client's id, ``mcp.protocol.version`` its era's,
  ``network.transport`` the face's: ``pipe`` for stdio, ``tcp`` for HTTP).
- Its parent is the context in the request's ``params._meta`` (a ``traceparent`` there),
  else the ambient one (the HTTP face's, from the W3C headers); when both exist the
  ambient one is a link.
- Telemetry off (no tracer, no meter): no record, no context, nothing allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind

from . import conventions as c
from .calls import CallRecord

if TYPE_CHECKING:
    from .instruments import Instruments


class Providers(Protocol):
    """Where the tracer and the meter's instruments come from (None: that one is off)."""

    def tracer(self) -> trace.Tracer | None: ...

    def instruments(self) -> Instruments | None: ...


def record(providers: Providers, method: str, params: Mapping[str, Any], request_id: Any,
           version: str | None, transport: str | None = None,
           identity: Any = None) -> CallRecord | None:
    """The record of one request the gateway serves (None: telemetry is off);
    ``identity``: who it speaks for (``policy.Identity``), on its span (none for
    ``local``: nobody authenticated)."""
    tracer = providers.tracer()
    instruments = providers.instruments()
    if tracer is None and instruments is None:
        return None
    target, attributes = c.request_attributes(method, params)
    if request_id is not None:
        attributes[c.REQUEST_ID] = str(request_id)
    if version is not None:
        attributes[c.PROTOCOL_VERSION] = version
    if transport is not None:
        attributes[c.TRANSPORT] = transport
    if identity is not None and identity.kind != "local":
        attributes[c.ENDUSER_ID] = identity.subject
        attributes[c.IDENTITY_KIND] = identity.kind
        if identity.issuer is not None:
            attributes[c.IDENTITY_ISSUER] = identity.issuer
    parent = links = None
    meta = params.get("_meta")
    if tracer is not None and isinstance(meta, dict) and "traceparent" in meta:
        carried = {k: v for k, v in meta.items() if isinstance(v, str)}
        parent = propagate.extract(carried)
        ambient = trace.get_current_span().get_span_context()
        if ambient.is_valid:
            links = [Link(ambient)]
    return CallRecord(tracer, instruments, c.span_name(method, target), SpanKind.SERVER,
                      method, attributes, parent=parent, links=links, server_side=True)


def incoming(providers: Providers,
             headers: Mapping[str, str]) -> otel_context.Context | None:
    """The context an HTTP request's W3C headers (``traceparent``, ``tracestate``,
    ``baggage``; lower-cased names) carry, when tracing is on and they carry one."""
    if "traceparent" not in headers or providers.tracer() is None:
        return None
    return propagate.extract(headers)
