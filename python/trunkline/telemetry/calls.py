"""One request's telemetry, from the moment it starts to its outcome: its span (CLIENT
in the host, SERVER in the gateway), its trace context for ``params._meta``, and its
duration in the histogram of its side.

A ``CallRecord`` exists only while telemetry is on: the call path asks ``Telemetry.call``
for one and gets None when nothing is configured, so a call with telemetry off allocates
nothing here. While it runs, the record's span is the current span and the record the
current call (a context variable, set only when there is one), so the parts that happen
rarely (a retry, a wait for a restarting server, an input round) add their events to it
without the call path passing it down.

A CLIENT span's ``jsonrpc.request.id`` is the id the request went out with. The worker
chooses it (its codec stamps each request), so it comes back to the parent with the
answer: in the RESULT frame, or in the FAILURE the worker sends when it ended the request
itself (its deadline, a lost HTTP exchange, an oversized answer). A retried call's span
has its last request's id, and each retry event the failed attempt's. A timed-out call
has its request's: the worker's deadline ends it, the parent's own (a little later) being
only a backstop. A call its caller cancelled has none: the parent never learns it.

Retries, waits and input rounds are span *events*, not child spans: every attempt goes
out with the same params bytes (serialized once, before the first attempt), so they all
carry the call span's ``traceparent``; a child span per attempt would need the params
serialized again per attempt, and its duration is the attempt's, which the worker's
deadline already bounds. The events keep the order and the time of each.
"""

from __future__ import annotations

import time
from asyncio import CancelledError
from collections.abc import Coroutine, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import conventions as c

if TYPE_CHECKING:
    from .instruments import Instruments

_CURRENT: ContextVar[CallRecord | None] = ContextVar("trunkline_call", default=None)

#: Attributes a duration is recorded with (a resource URI is not one: unbounded).
_METRIC_KEYS = (c.METHOD, c.TOOL, c.PROMPT, c.OPERATION, c.TRANSPORT, c.NET_PROTOCOL_NAME,
                c.NET_PROTOCOL_VERSION, c.SERVER_ADDRESS, c.SERVER_PORT, c.PROTOCOL_VERSION,
                c.ERROR_TYPE, c.SERVER)


class CallRecord:
    """One request's span and duration; ``run`` wraps the request's coroutine."""

    __slots__ = ("_attributes", "_context", "_histogram", "_instruments", "_method",
                 "_server_side", "_span", "_started")

    def __init__(self, tracer: trace.Tracer | None, instruments: Instruments | None,
                 name: str, kind: SpanKind, method: str, attributes: dict[str, Any],
                 parent: otel_context.Context | None = None,
                 links: list[trace.Link] | None = None, server_side: bool = False) -> None:
        self._method = method
        self._server_side = server_side
        self._attributes = attributes
        self._instruments = instruments
        self._histogram = None if instruments is None else (
            instruments.server_duration if server_side else instruments.client_duration)
        self._span = None if tracer is None else tracer.start_span(
            name, context=parent, kind=kind, attributes=attributes, links=links)
        #: The span in its parent's context (the baggage that came with it included): what
        #: is current while the request runs, and what goes upstream.
        self._context = (None if self._span is None
                         else trace.set_span_in_context(self._span, parent))
        self._started = time.perf_counter()

    def meta(self) -> dict[str, str]:
        """``traceparent``, ``tracestate``, ``baggage`` for the request's ``params._meta``
        (by the configured propagators; W3C trace context and baggage by default)."""
        carrier: dict[str, str] = {}
        span = self._span
        if span is not None and span.get_span_context().is_valid:
            propagate.inject(carrier, context=self._context)
        return carrier

    def stamp(self, body: dict[str, Any]) -> None:
        """Put the trace context into ``body["_meta"]`` (a copy: it may be the caller's)."""
        carrier = self.meta()
        if carrier:
            meta = body.get("_meta")
            body["_meta"] = {**meta, **carrier} if isinstance(meta, dict) else carrier

    async def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        """Await ``work`` with this record current; end it with the outcome."""
        token = _CURRENT.set(self)
        attached = None if self._context is None else otel_context.attach(self._context)
        try:
            result = await work
        except BaseException as exc:
            self.finish(error=exc)
            raise
        finally:
            if attached is not None:
                otel_context.detach(attached)
            _CURRENT.reset(token)
        self.finish(result=result)
        return result

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        if self._span is not None and self._span.is_recording():
            self._span.add_event(name, attributes)

    def sent_as(self, request_id: int | str | None) -> None:
        """The JSON-RPC id of the request on the wire (the worker chose it). A SERVER
        span keeps its own: the id its client sent."""
        span = self._span
        if request_id is not None and span is not None and not self._server_side:
            span.set_attribute(c.REQUEST_ID, str(request_id))

    def retried(self, made: int, failure: BaseException, delay_s: float) -> None:
        told = {"trunkline.attempts": made, c.ERROR_TYPE: c.error_type(failure),
                "trunkline.retry.delay_s": delay_s}
        failed_id = getattr(failure, "request_id", None)
        if failed_id is not None:
            told[c.REQUEST_ID] = str(failed_id)
        self.event("retry", told)
        if self._instruments is not None:
            self._instruments.retries.add(1, self._server_attributes())

    def finish(self, *, result: Any = None, error: BaseException | None = None) -> None:
        """End with the request's outcome: its result, or the error it raised."""
        if error is None:
            self._end(c.result_error_type(self._method, result), None, None)
            return
        self.sent_as(getattr(error, "request_id", None))
        code = getattr(error, "code", None)
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        kind = "cancelled" if isinstance(error, CancelledError) else c.error_type(error)
        self._end(kind, str(error), code)

    def answered(self, response: Mapping[str, Any]) -> None:
        """End with a JSON-RPC response message (what the gateway answered itself)."""
        error = response.get("error")
        if not isinstance(error, dict):
            self.finish(result=response.get("result"))
            return
        code = error.get("code")
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        self._end("_OTHER" if code is None else str(code), str(error.get("message", "")),
                  code)

    def _end(self, kind: str | None, message: str | None, code: int | None) -> None:
        span = self._span
        if kind is not None:
            self._attributes[c.ERROR_TYPE] = kind
        if span is not None:
            if kind is not None:
                span.set_attribute(c.ERROR_TYPE, kind)
                if code is not None:
                    span.set_attribute(c.STATUS_CODE, str(code))
                span.set_status(Status(StatusCode.ERROR, message or kind))
            span.end()
        if self._histogram is not None:
            attributes = {k: self._attributes[k] for k in _METRIC_KEYS if k in self._attributes}
            self._histogram.record(time.perf_counter() - self._started, attributes)
            if kind == "RequestTimeout" and self._instruments is not None:
                self._instruments.timeouts.add(1, self._server_attributes())

    def _server_attributes(self) -> dict[str, Any]:
        return {c.SERVER: self._attributes.get(c.SERVER, ""), c.METHOD: self._method}


def note(name: str, attributes: Mapping[str, Any]) -> None:
    """An event on the current call's span (nothing when there is none)."""
    record = _CURRENT.get()
    if record is not None:
        record.event(name, attributes)


def sent_as(request_id: int | str) -> None:
    """The current call's request was answered; it went out with JSON-RPC id
    ``request_id`` (a retried or relayed call: its latest request's)."""
    record = _CURRENT.get()
    if record is not None:
        record.sent_as(request_id)


def note_retry(made: int, failure: BaseException, delay_s: float) -> None:
    record = _CURRENT.get()
    if record is not None:
        record.retried(made, failure, delay_s)
