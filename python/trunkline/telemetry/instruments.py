"""The instruments of one meter: the request durations of both sides, the per-server
counters the call path adds to, and the gauges and counters read from the servers'
statuses when the metrics are collected (so calls pay nothing for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ..channel import ServerState
from . import conventions as c

STATE = "trunkline.server.state"


class ServerFigures(Protocol):
    """What the instruments read of one server's status (the parent's ``ServerStatus``)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> ServerState: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def restarts(self) -> int: ...
    @property
    def late_replies(self) -> int: ...


class Instruments:
    """The instruments of one meter."""

    def __init__(self, meter: metrics.Meter,
                 statuses: Callable[[], Iterable[ServerFigures]]) -> None:
        self._statuses = statuses
        self.client_duration = meter.create_histogram(
            c.CLIENT_DURATION, unit="s", description="Duration of MCP requests sent",
            explicit_bucket_boundaries_advisory=c.DURATION_BUCKETS)
        self.server_duration = meter.create_histogram(
            c.SERVER_DURATION, unit="s", description="Duration of MCP requests served",
            explicit_bucket_boundaries_advisory=c.DURATION_BUCKETS)
        self.retries = meter.create_counter(
            "trunkline.server.retries", unit="{request}",
            description="Requests sent again after a failed attempt")
        self.timeouts = meter.create_counter(
            "trunkline.server.timeouts", unit="{request}",
            description="Requests that ended without an answer within their timeout")
        self.era_verdicts = meter.create_counter(
            "trunkline.server.era_verdicts", unit="{verdict}",
            description="Era verdicts, by era (none: refused)")
        meter.create_observable_gauge(
            "trunkline.server.in_flight", [self._in_flight], unit="{request}",
            description="Requests sent and not yet answered")
        meter.create_observable_gauge(
            STATE, [self._state], unit="1", description="1 for the server's current state")
        meter.create_observable_counter(
            "trunkline.server.restarts", [self._restarts], unit="{restart}",
            description="Workers started after the first")
        meter.create_observable_counter(
            "trunkline.server.late_replies", [self._late_replies], unit="{reply}",
            description="Replies that came after their caller gave up")

    def _each(self) -> list[ServerFigures]:
        try:
            return list(self._statuses())
        except RuntimeError:  # servers added while a collector thread read them: next time
            return []

    def _in_flight(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.in_flight, {c.SERVER: s.name}) for s in self._each()]

    def _state(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(1 if s.state is state else 0, {c.SERVER: s.name,
                                                           STATE: state.value})
                for s in self._each() for state in ServerState]

    def _restarts(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.restarts, {c.SERVER: s.name}) for s in self._each()]

    def _late_replies(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.late_replies, {c.SERVER: s.name}) for s in self._each()]
