"""Driving one connection's era negotiation: the I/O around the pure machine.

The ``Negotiator`` sends what ``protocol.era.EraNegotiation`` asks for (each probe a new
request with a new id), enforces every probe's deadline from its write, feeds back what
the server answered, and settles ``outcome``: the verdict, or ``EraRefused`` /
``AuthenticationFailed``. A probe whose deadline passed stays pending, so a late answer
still counts; after a legacy verdict an unanswered ``server/discover`` stays pending too,
since its late answer would mean the connection holds two sessions (``on_renegotiate``).

One negotiation has one outcome, settled in one place (``_settle``) when the machine
decides or refuses, which it does once per connection. Its waiter may leave first: a
worker stopped mid-negotiation cancels ``Peer.start``, and with it the outcome it awaited.
The negotiation is then abandoned: what the connection still reports (a late answer, the
close its own stop causes, a deadline) decides nothing, and no deadline fires again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

import orjson

from .._codec import (
    KIND_ERROR,
    Correlator,
    Event,
    encode_notification,
    encode_request,
    stamp_request,
)
from ..errors import AuthenticationFailed, EraRefused, TrunklineError
from ..protocol import era
from ..protocol.identity import ClientIdentity
from ..protocol.reply import decode_error_data

log = logging.getLogger("trunkline.worker")


class ProbeToken:
    """Correlator token of a negotiation request (other requests hold futures)."""

    __slots__ = ("probe",)

    def __init__(self, probe: era.Probe) -> None:
        self.probe = probe


class Negotiator:
    def __init__(
        self,
        config: era.NegotiationConfig,
        identity: ClientIdentity,
        *,
        server: str,
        correlator: Correlator[Any],
        write: Callable[[bytes], None],
        on_verdict: Callable[[era.Verdict], None],
        on_renegotiate: Callable[[str], None],
        client_tasks: bool = False,
    ) -> None:
        self.machine = era.EraNegotiation(config)
        self._identity = identity
        #: A legacy ``initialize`` declares the client-side tasks (``worker.client_tasks``).
        self._client_tasks = client_tasks
        self._server = server
        self._correlator = correlator
        self._write = write
        self._on_verdict = on_verdict
        self._on_renegotiate = on_renegotiate
        self._ids: dict[era.Probe, Any] = {}
        self._timers: dict[era.Probe, asyncio.TimerHandle] = {}
        # Earlier server/discover requests still pending after a newer one went out: an
        # answer to any of them is as good as an answer to the newest.
        self._earlier_discovers: list[Any] = []
        # An HTTP 401/403 during negotiation: reported as what it is, not as an era.
        self._auth_failure: AuthenticationFailed | None = None
        self.outcome: asyncio.Future[era.Verdict] = asyncio.get_running_loop().create_future()

    @property
    def evidence(self) -> tuple[str, ...]:
        return tuple(self.machine.evidence)

    @property
    def proven_modern(self) -> bool:
        return self.machine.proven_modern

    def start(self) -> None:
        self._apply(self.machine.start())

    def close(self) -> None:
        """The connection is ending: no deadline fires any more."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    # -- what the connection saw ----------------------------------------------------------

    def on_reply(self, probe: era.Probe, event: Event) -> None:
        self._answered(probe, event.id)
        if event.kind == KIND_ERROR:
            self._feed(era.ErrorReplied(probe, event.error_code or 0, event.error_message or "",
                                        decode_error_data(event.error_data)))
            return
        try:
            result = orjson.loads(event.result or b"")
        except orjson.JSONDecodeError as exc:
            self._feed(era.Unexpected(f"{probe.value} result is not valid JSON: {exc}"))
            return
        self._feed(era.Replied(probe, result))

    def on_failed(self, probe: era.Probe, request_id: Any, error: TrunklineError) -> None:
        """The probe's HTTP exchange ended without an answer."""
        self._answered(probe, request_id)
        if isinstance(error, AuthenticationFailed):
            self._auth_failure = error
            self._feed(era.Rejected(probe, error.message))
        else:
            self._feed(era.ExchangeFailed(probe, error.message))

    def on_unexpected(self, detail: str) -> None:
        if not self.outcome.done():
            self._feed(era.Unexpected(detail))

    def on_closed(self, detail: str) -> None:
        self._feed(era.Closed(detail))

    # -- decisions ------------------------------------------------------------------------

    def _feed(self, event: era.Event) -> None:
        if self.outcome.cancelled():
            # Abandoned by its waiter (the worker is stopping): nothing decides any more.
            self.close()
            return
        self._apply(self.machine.handle(event))

    def _apply(self, decisions: list[era.Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, era.SendDiscover):
                meta = self._identity.modern_meta(decision.version)
                self._send(era.Probe.DISCOVER, decision.timeout_s, functools.partial(
                    stamp_request, method="server/discover", params=None, meta=meta))
            elif isinstance(decision, era.SendInitialize):
                params = self._identity.initialize_params(decision.version,
                                                          self._client_tasks)
                self._send(era.Probe.INITIALIZE, decision.timeout_s, functools.partial(
                    encode_request, method="initialize", params=params))
            elif isinstance(decision, era.SendInitialized):
                self._write(encode_notification("notifications/initialized", None))
            elif isinstance(decision, era.Abandon):
                self._forget(decision.probe)
            elif isinstance(decision, era.Decide):
                self._finish()
                if self._settle(decision.verdict):
                    self._on_verdict(decision.verdict)
            elif isinstance(decision, era.Fail):
                self._finish()
                self._settle(self._refused(decision.refusal))
            elif isinstance(decision, era.Renegotiate):
                self._finish()
                if self.outcome.done():  # after the legacy verdict: the ready connection
                    self._on_renegotiate(decision.reason)
                else:
                    self._settle(EraRefused(
                        decision.reason, evidence=self.evidence, server=self._server,
                        proven_modern=True, renegotiate=True))
            else:  # pragma: no cover - the machine's decision set is closed
                raise TypeError(f"unknown decision {decision!r}")

    def _settle(self, outcome: era.Verdict | TrunklineError) -> bool:
        """Settle the negotiation's outcome, the one place that does. The machine decides
        once per connection and ``_feed`` stops at an abandoned negotiation, so an outcome
        already settled here is a logic error: logged as one, the first outcome kept."""
        if self.outcome.done():
            first = ("cancelled" if self.outcome.cancelled()
                     else repr(self.outcome.exception() or self.outcome.result()))
            log.error("server %r: a second outcome for one negotiation (%r, after %s); "
                      "the first stands", self._server, outcome, first, stack_info=True)
            return False
        if isinstance(outcome, era.Verdict):
            self.outcome.set_result(outcome)
        else:
            self.outcome.set_exception(outcome)
        return True

    def _refused(self, refusal: era.Refusal) -> TrunklineError:
        if self._auth_failure is not None:
            return self._auth_failure
        return EraRefused(refusal.reason, evidence=refusal.evidence, server=self._server,
                          retry_later=refusal.next_attempt is era.NextAttempt.LATER,
                          proven_modern=refusal.proven_modern, remedy=refusal.remedy,
                          answered=refusal.answered)

    def _send(self, probe: era.Probe, timeout_s: float, build: Callable[[int], bytes]) -> None:
        # A repeated probe is a new request with a new id. An earlier discover stays
        # pending (without its deadline): its late answer still counts.
        if probe is era.Probe.DISCOVER and probe in self._ids:
            self._earlier_discovers.append(self._ids.pop(probe))
            timer = self._timers.pop(probe, None)
            if timer is not None:
                timer.cancel()
        self._forget(probe)
        request_id = self._correlator.allocate(ProbeToken(probe))
        self._ids[probe] = request_id
        self._write(build(request_id))
        # The deadline is enforced here, from the write, not merely recorded.
        self._timers[probe] = asyncio.get_running_loop().call_later(
            timeout_s, self._deadline, probe, request_id, timeout_s)

    def _deadline(self, probe: era.Probe, request_id: Any, timeout_s: float) -> None:
        self._timers.pop(probe, None)
        # The id stays pending: a late answer must still be recognized.
        if self._ids.get(probe) == request_id:
            self._feed(era.TimedOut(probe, timeout_s))

    def _answered(self, probe: era.Probe, request_id: Any) -> None:
        """Request ``request_id`` of this probe got its answer (the correlator already let
        the id go): its deadline no longer matters."""
        if self._ids.get(probe) == request_id:
            del self._ids[probe]
            timer = self._timers.pop(probe, None)
            if timer is not None:
                timer.cancel()
        elif request_id in self._earlier_discovers:
            self._earlier_discovers.remove(request_id)

    def _forget(self, probe: era.Probe) -> None:
        request_id = self._ids.pop(probe, None)
        if request_id is not None:
            self._correlator.discard(request_id)
        timer = self._timers.pop(probe, None)
        if timer is not None:
            timer.cancel()

    def _finish(self) -> None:
        """Negotiation is over: probes are let go, except unanswered discovers after a
        legacy verdict, kept pending (without a deadline) for as long as they matter."""
        keep_discovers = self.machine.awaits_discover
        for probe in list(self._ids):
            if probe is era.Probe.DISCOVER and keep_discovers:
                timer = self._timers.pop(probe, None)
                if timer is not None:
                    timer.cancel()
                continue
            self._forget(probe)
        if not keep_discovers:
            for request_id in self._earlier_discovers:
                self._correlator.discard(request_id)
            self._earlier_discovers.clear()
