"""One configured MCP server over one transport lifetime.

A ``Peer`` is the I/O edge around the pure pieces: it spawns the transport, feeds every
read buffer through the codec's batch decoder (split, scan, correlate in one call), drives
the era negotiation state machine, enforces its deadlines, and afterwards carries requests
stamped for the era the server proved. It never re-probes: the verdict lives exactly as
long as the transport. When the transport ends, every pending request fails at once with
``TransportLost`` carrying the server's stderr tail.

The transport is stdio or Streamable HTTP; HTTP adds one path the pipe has not: a single
request lost on its own (``_on_exchange_failed``), which fails that request only.

Later issues put a ``Peer`` inside a worker process; nothing here assumes which process it
runs in.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from . import _codec
from .deadlines import DeadlineTimer
from .errors import (
    AuthenticationFailed,
    EraRefused,
    MalformedMessage,
    RequestTimeout,
    ServerError,
    ServerUnavailable,
    TransportLost,
    TrunklineError,
)
from .protocol import era as era_mod
from .protocol.identity import ClientIdentity
from .protocol.mrtr import CAPABILITY_OF
from .protocol.versions import INTERNAL_ERROR, METHOD_NOT_FOUND
from .transports.http_params import HttpParams
from .transports.stdio import StdioParams, StdioTransport

if TYPE_CHECKING:
    from .transports.http import HttpTransport

log = logging.getLogger("trunkline.peer")

#: A host callback answering a legacy server-initiated request: params in, result out.
ServerRequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: Called with (method, raw line) for every notification the server sends once ready.
NotificationSink = Callable[[str, bytes], None]

# Which client capability a legacy server-initiated request needs (spec digest §22.6):
# the same kinds, gated by the same capabilities, as modern input requests.
_REQUEST_CAPABILITY = CAPABILITY_OF


class PeerState(enum.Enum):
    STARTING = "starting"
    NEGOTIATING = "negotiating"
    READY = "ready"
    REFUSED = "refused"
    CLOSED = "closed"


@dataclass(slots=True)
class Reply:
    """A server's answer to one request. A result stays undecoded bytes: the payload is
    decoded once, by whoever finally needs it. Errors are rare and arrive decoded."""

    result: bytes | None
    result_type: str | None
    error_code: int | None = None
    error_message: str | None = None
    error_data: Any = None

    @property
    def is_error(self) -> bool:
        return self.error_code is not None

    def decode(self, *, server: str | None = None, method: str | None = None) -> Any:
        """The decoded result, or ``ServerError`` for a JSON-RPC error."""
        if self.error_code is not None:
            raise ServerError(
                self.error_message or "error", code=self.error_code, data=self.error_data,
                server=server, method=method,
            )
        assert self.result is not None
        try:
            return orjson.loads(self.result)
        except orjson.JSONDecodeError as exc:
            raise MalformedMessage(
                f"result is not valid JSON: {exc}", server=server, method=method
            ) from exc


def decode_error_data(raw: bytes | None) -> Any:
    """``error.data`` as JSON, or its text when it does not decode (the scan validated the
    envelope, not every byte of nested values)."""
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


class _ProbeToken:
    """Correlator token for a negotiation request; normal requests use futures."""

    __slots__ = ("probe",)

    def __init__(self, probe: era_mod.Probe) -> None:
        self.probe = probe


def _reply_from(event: _codec.Event) -> Reply:
    if event.kind == _codec.KIND_ERROR:
        return Reply(None, None, event.error_code, event.error_message,
                     decode_error_data(event.error_data))
    return Reply(event.result, event.result_type)


class Peer:
    def __init__(
        self,
        name: str,
        params: StdioParams | HttpParams,
        *,
        allow_legacy: bool = False,
        identity: ClientIdentity | None = None,
        negotiation: era_mod.NegotiationConfig | None = None,
        server_request_handlers: Mapping[str, ServerRequestHandler] | None = None,
        on_notification: NotificationSink | None = None,
        on_closed: Callable[[str], None] | None = None,
        max_line_bytes: int = _codec.DEFAULT_MAX_LINE_BYTES,
        max_frame_bytes: int = _codec.DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.name = name
        self.params = params
        self.identity = identity or ClientIdentity()
        base = negotiation or era_mod.NegotiationConfig()
        # allow_legacy belongs to this configured peer; nothing the server says sets it.
        self.negotiation_config = era_mod.NegotiationConfig(
            modern_versions=base.modern_versions,
            legacy_versions=base.legacy_versions,
            allow_legacy=allow_legacy,
            discover_timeout_s=base.discover_timeout_s,
            legacy_probe_timeout_s=base.legacy_probe_timeout_s,
            max_discover_attempts=base.max_discover_attempts,
        )
        self._handlers = dict(server_request_handlers or {})
        self._on_notification = on_notification
        self._on_closed_cb = on_closed
        self.state = PeerState.STARTING
        self.verdict: era_mod.Verdict | None = None
        self.refusal: era_mod.Refusal | None = None
        self.closed_detail: str | None = None
        # Counters a host can watch: replies that came after their caller gave up, and
        # lines that broke the protocol after the era was decided.
        self.late_replies = 0
        self.protocol_violations = 0

        self._machine = era_mod.EraNegotiation(self.negotiation_config)
        self._correlator: _codec.Correlator[Any] = _codec.Correlator()
        self._decoder = _codec.StreamDecoder(self._correlator, max_line_bytes)
        self._transport: StdioTransport | HttpTransport
        if isinstance(params, HttpParams):
            from .transports.http import HttpTransport

            self._transport = HttpTransport(
                params, on_data=self._on_data, on_closed=self._on_closed,
                on_failed=self._on_exchange_failed,
                is_pending=self._correlator.__contains__, server=name,
                max_message_bytes=max_line_bytes)
        else:
            self._transport = StdioTransport(params, on_data=self._on_data,
                                             on_closed=self._on_closed)
        # An HTTP 401/403 during negotiation: reported as what it is, not as an era.
        self._auth_failure: AuthenticationFailed | None = None
        self._negotiated: asyncio.Future[None] | None = None
        self._probe_ids: dict[era_mod.Probe, Any] = {}
        self._probe_timers: dict[era_mod.Probe, asyncio.TimerHandle] = {}
        self._meta: bytes = b""
        self._modern = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Worker hot path (set up by forward_results_to): SUBMIT frames from the parent
        # become stamped requests, and replies to them go back as RESULT frames, neither
        # ever decoded here.
        self._stamper: _codec.SubmitStamper | None = None
        self._deadlines: DeadlineTimer | None = None
        self._on_forward_expired: Callable[[int], None] | None = None
        self._on_forward_failed: Callable[[int, TrunklineError], None] | None = None
        self._max_frame_bytes = max_frame_bytes
        self._forward_sink: Callable[[bytes], None] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> era_mod.Verdict:
        """Spawn the server and decide its era. Raises ``SpawnFailed`` or ``EraRefused``
        (the process is stopped and reaped before either propagates)."""
        if self.state is not PeerState.STARTING:
            raise RuntimeError(f"peer {self.name!r} was already started")
        await self._transport.start()
        self.state = PeerState.NEGOTIATING
        self._negotiated = asyncio.get_running_loop().create_future()
        try:
            self._apply(self._machine.start())
            await self._negotiated
        except BaseException:
            await self.aclose()
            raise
        if self.verdict is None and self._auth_failure is not None:
            await self.aclose()
            self.state = PeerState.REFUSED
            raise self._auth_failure
        if self.verdict is None:
            refusal = self.refusal
            assert refusal is not None
            tail = self._transport.stderr_tail()
            await self.aclose()
            self.state = PeerState.REFUSED
            raise EraRefused(
                refusal.reason, evidence=refusal.evidence, server=self.name,
                stderr_tail=tail or None,
            )
        return self.verdict

    async def aclose(self) -> None:
        """Stop the server with the bounded shutdown ladder; fail whatever is pending."""
        for timer in self._probe_timers.values():
            timer.cancel()
        self._probe_timers.clear()
        if self._deadlines is not None:
            self._deadlines.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._transport.close()
        if self.state is not PeerState.REFUSED:
            self.state = PeerState.CLOSED
        self._fail_pending("transport closed by the client")

    async def __aenter__(self) -> Peer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def era(self) -> era_mod.Era | None:
        return None if self.verdict is None else self.verdict.era

    @property
    def evidence(self) -> tuple[str, ...]:
        return tuple(self._machine.evidence)

    @property
    def pid(self) -> int | None:
        return self._transport.pid

    @property
    def returncode(self) -> int | None:
        return self._transport.returncode

    def stderr_tail(self, max_lines: int = 20) -> str:
        return self._transport.stderr_tail(max_lines)

    @property
    def pending(self) -> int:
        return len(self._correlator)

    # -- requests ----------------------------------------------------------------------

    async def request(self, method: str, params: bytes | None = None, *, timeout: float) -> Reply:
        """Send one request in the peer's era and wait for its reply, at most ``timeout``
        seconds from the write. ``params`` is a JSON object already serialized."""
        request_id, future = self.open_request(method, params)
        try:
            return await asyncio.wait_for(future, timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if self._correlator.discard(request_id) is not None:
                self._send_cancelled(request_id, "timeout" if isinstance(
                    exc, asyncio.TimeoutError) else "cancelled by the caller")
            if isinstance(exc, asyncio.TimeoutError):
                raise RequestTimeout(
                    f"no reply within {timeout:g} s", timeout_s=timeout,
                    server=self.name, method=method,
                ) from None
            raise

    def open_request(self, method: str, params: bytes | None = None) -> tuple[int, asyncio.Future[Reply]]:
        """Send a request that stays outstanding until the server answers, with no
        deadline: a ``subscriptions/listen`` stream, whose id names the subscription.
        Returns the JSON-RPC id and a future for the final reply (``TransportLost`` if
        the transport ends first)."""
        if self.state is not PeerState.READY:
            raise ServerUnavailable(f"server is {self.state.value}", state=self.state.value,
                                    server=self.name, method=method)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        request_id = self._correlator.allocate(future)
        if self._modern:
            line = _codec.stamp_request(request_id, method, params, self._meta)
        else:
            line = _codec.encode_request(request_id, method, params)
        self._transport.write(line)
        return request_id, future

    def close_request(self, request_id: int, reason: str, *, notify: bool = True) -> None:
        """Forget an open request; tell the server (``notify``) unless it ended it."""
        token = self._correlator.discard(request_id)
        if token is not None:
            if notify:
                self._send_cancelled(request_id, reason)
            if isinstance(token, asyncio.Future) and not token.done():
                token.cancel()

    async def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float) -> Any:
        """``request`` with JSON encoding and decoding, for callers off the hot path."""
        raw = None if params is None else orjson.dumps(params)
        reply = await self.request(method, raw, timeout=timeout)
        return reply.decode(server=self.name, method=method)

    # -- forwarding (the worker's hot path) ------------------------------------------------

    def forward_results_to(
        self, sink: Callable[[bytes], None],
        on_expired: Callable[[int], None] | None = None,
        on_failed: Callable[[int, TrunklineError], None] | None = None,
    ) -> None:
        """Send replies to forwarded calls to ``sink`` as ready-made RESULT frames, and
        accept SUBMIT frames through ``accept_frames``. Each forwarded call's deadline
        (its SUBMIT's timeout, counted from its arrival here) is enforced here too: the
        server is sent ``notifications/cancelled`` and ``on_expired(call_id)`` is told.
        A forwarded call the transport lost on its own (an HTTP exchange that ended
        without an answer) goes to ``on_failed(call_id, error)``."""
        self._forward_sink = sink
        self._on_forward_expired = on_expired
        self._on_forward_failed = on_failed
        self._stamper = _codec.SubmitStamper(self._correlator, self._max_frame_bytes)
        self._loop = loop = asyncio.get_running_loop()
        self._deadlines = DeadlineTimer(loop, self._correlator, self._forwards_expired)
        if self.state is PeerState.READY:
            self._stamper.start_stamping(self._meta if self._modern else None)

    def accept_frames(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """Feed bytes from the parent's channel. Once the peer is ready, every SUBMIT
        frame is stamped and written to the server in one batch; all other frames (and
        SUBMITs that arrive before the verdict) are returned for the caller to handle."""
        if self._stamper is None:
            raise RuntimeError("accept_frames() before forward_results_to()")
        stdin_bytes, others = self._stamper.feed(chunk, self._loop.time())
        if stdin_bytes:
            self._transport.write(stdin_bytes)
            self._deadlines.check()  # type: ignore[union-attr]
        return others

    def _forwards_expired(self, expired: list[tuple[Any, Any]]) -> None:
        for request_id, call_id in expired:
            self._send_cancelled(request_id, "timeout")
            if self._on_forward_expired is not None and isinstance(call_id, int):
                self._on_forward_expired(call_id)

    def cancel_forwarded(self, call_id: int, reason: str) -> bool:
        """Forget a forwarded call; tell the server if it was still pending."""
        request_id = self._correlator.discard_call(call_id)
        if request_id is None:
            return False
        self._send_cancelled(request_id, reason)
        return True

    def _send_cancelled(self, request_id: Any, reason: str) -> None:
        if self.state is not PeerState.READY:
            return
        params = orjson.dumps({"requestId": request_id, "reason": reason})
        self._transport.write(_codec.encode_notification("notifications/cancelled", params))

    # -- negotiation decisions ---------------------------------------------------------

    def _apply(self, decisions: list[era_mod.Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, era_mod.SendDiscover):
                meta = self.identity.modern_meta(decision.version)
                self._send_probe(era_mod.Probe.DISCOVER, decision.timeout_s, lambda rid: (
                    _codec.stamp_request(rid, "server/discover", None, meta)))
            elif isinstance(decision, era_mod.SendInitialize):
                params = self.identity.initialize_params(decision.version)
                self._send_probe(era_mod.Probe.INITIALIZE, decision.timeout_s, lambda rid: (
                    _codec.encode_request(rid, "initialize", params)))
            elif isinstance(decision, era_mod.SendInitialized):
                self._transport.write(
                    _codec.encode_notification("notifications/initialized", None)
                )
            elif isinstance(decision, era_mod.Abandon):
                self._forget_probe(decision.probe)
            elif isinstance(decision, era_mod.Decide):
                self._become_ready(decision.verdict)
            elif isinstance(decision, era_mod.Fail):
                self.refusal = decision.refusal
                self._finish_negotiation()
            else:  # pragma: no cover - the machine's decision set is closed
                raise TypeError(f"unknown decision {decision!r}")

    def _send_probe(
        self, probe: era_mod.Probe, timeout_s: float, build: Callable[[int], bytes]
    ) -> None:
        # A retried probe is a new request: the old id is forgotten and a new one used.
        self._forget_probe(probe)
        request_id = self._correlator.allocate(_ProbeToken(probe))
        self._probe_ids[probe] = request_id
        self._transport.write(build(request_id))
        # The deadline is enforced here, from the write, not merely recorded.
        self._probe_timers[probe] = asyncio.get_running_loop().call_later(
            timeout_s, self._probe_deadline, probe, request_id, timeout_s
        )

    def _forget_probe(self, probe: era_mod.Probe) -> None:
        request_id = self._probe_ids.pop(probe, None)
        if request_id is not None:
            self._correlator.discard(request_id)
        timer = self._probe_timers.pop(probe, None)
        if timer is not None:
            timer.cancel()

    def _probe_deadline(self, probe: era_mod.Probe, request_id: Any, timeout_s: float) -> None:
        self._probe_timers.pop(probe, None)
        # The probe id stays pending: a late DiscoverResult must still be recognized.
        if self._probe_ids.get(probe) == request_id:
            self._feed(era_mod.TimedOut(probe, timeout_s))

    def _become_ready(self, verdict: era_mod.Verdict) -> None:
        self.verdict = verdict
        self._modern = verdict.era is era_mod.Era.MODERN
        if self._modern:
            # Serialized once per transport lifetime and spliced into every request.
            self._meta = self.identity.modern_meta(verdict.version)
        if self._stamper is not None:
            self._stamper.start_stamping(self._meta if self._modern else None)
        self._finish_negotiation()
        self.state = PeerState.READY

    def _finish_negotiation(self) -> None:
        for probe in list(self._probe_ids):
            self._forget_probe(probe)
        if self._negotiated is not None and not self._negotiated.done():
            self._negotiated.set_result(None)

    def _feed(self, event: era_mod.Event) -> None:
        if self.state is PeerState.NEGOTIATING and not self._machine.done:
            self._apply(self._machine.handle(event))

    # -- reading -----------------------------------------------------------------------

    def _on_data(self, chunk: bytes) -> None:
        if self._forward_sink is not None:
            frames, events = self._decoder.feed_forward(chunk)
            if frames:
                self._forward_sink(frames)
        else:
            events = self._decoder.feed(chunk)
        for event in events:
            self._dispatch(event)

    def _dispatch(self, event: _codec.Event) -> None:
        kind = event.kind
        if kind == _codec.KIND_RESULT or kind == _codec.KIND_ERROR:
            self._on_response(event)
        elif kind == _codec.KIND_NOTIFICATION:
            if self.state is PeerState.READY and self._on_notification is not None:
                self._on_notification(event.method or "", event.line)
        elif kind == _codec.KIND_REQUEST:
            self._on_server_request(event)
        elif kind == _codec.KIND_OVERSIZED:
            self._unexpected(f"a line of {event.size} bytes, over the line limit; skipped")
        else:
            excerpt = event.line[:120].decode("utf-8", "replace")
            self._unexpected(f"not a JSON-RPC message ({event.reason}): {excerpt!r}")

    def _on_response(self, event: _codec.Event) -> None:
        corr = event.correlation
        if corr == _codec.CORR_MATCHED:
            token = event.token
            if isinstance(token, _ProbeToken):
                self._on_probe_reply(token.probe, event)
            elif not token.done():
                token.set_result(_reply_from(event))
        elif corr == _codec.CORR_STALE:
            self.late_replies += 1  # its caller timed out or cancelled: drop, but count
        elif event.id is None:
            self._unexpected(
                f"error {event.error_code} {event.error_message!r} without a request id"
            )
        else:
            self._unexpected(f"a response with id {event.id!r}, which was never sent")

    def _on_probe_reply(self, probe: era_mod.Probe, event: _codec.Event) -> None:
        timer = self._probe_timers.pop(probe, None)
        if timer is not None:
            timer.cancel()
        self._probe_ids.pop(probe, None)
        if event.kind == _codec.KIND_ERROR:
            self._feed(era_mod.ErrorReplied(
                probe, event.error_code or 0, event.error_message or "",
                decode_error_data(event.error_data)))
            return
        try:
            result = orjson.loads(event.result or b"")
        except orjson.JSONDecodeError as exc:
            self._feed(era_mod.Unexpected(f"{probe.value} result is not valid JSON: {exc}"))
            return
        self._feed(era_mod.Replied(probe, result))

    def _unexpected(self, detail: str) -> None:
        if self.state is PeerState.NEGOTIATING:
            self._feed(era_mod.Unexpected(detail))
        else:
            self.protocol_violations += 1
            log.warning("server %r: %s", self.name, detail)

    # -- server-initiated requests (legacy branch only) ---------------------------------

    def _on_server_request(self, event: _codec.Event) -> None:
        method = event.method or ""
        if self.state is PeerState.NEGOTIATING:
            self._feed(era_mod.Unexpected(
                f"the server sent a {method!r} request before its era was known"))
            return
        if self.state is not PeerState.READY:
            return
        if self._modern:
            # Modern servers must not send requests, and a modern client must not answer.
            self.protocol_violations += 1
            log.warning("server %r sent a %r request, forbidden in the modern era",
                        self.name, method)
            return
        request_id = event.id
        if method == "ping":
            self._transport.write(_codec.encode_result(request_id, b"{}"))
            return
        handler = self._handlers.get(method)
        capability = _REQUEST_CAPABILITY.get(method)
        if handler is None or capability not in self.identity.capabilities:
            # Never leave a server request unanswered.
            self._transport.write(_codec.encode_error(
                request_id, METHOD_NOT_FOUND, f"client does not support {method}"))
            return
        task = asyncio.get_running_loop().create_task(
            self._answer_server_request(request_id, handler, event.line))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_server_request(
        self, request_id: Any, handler: ServerRequestHandler, line: bytes
    ) -> None:
        try:
            params = orjson.loads(line).get("params") or {}
            result = await handler(params)
            reply = _codec.encode_result(request_id, orjson.dumps(result))
        except asyncio.CancelledError:
            reply = _codec.encode_error(request_id, INTERNAL_ERROR, "client is shutting down")
            self._write_if_ready(reply)
            raise
        except Exception as exc:  # the host's callback failed: tell the server why
            reply = _codec.encode_error(request_id, INTERNAL_ERROR, f"client error: {exc}")
        self._write_if_ready(reply)

    def _write_if_ready(self, line: bytes) -> None:
        if self.state is PeerState.READY:
            self._transport.write(line)

    # -- one request lost by the transport (HTTP) ---------------------------------------

    def _on_exchange_failed(self, request_id: Any, error: TrunklineError) -> None:
        """The transport will never deliver an answer to this request. A request already
        answered, timed out or cancelled is not pending any more: nothing happens."""
        token = self._correlator.discard(request_id)
        if token is None:
            return
        error.server = self.name
        if isinstance(token, _ProbeToken):
            probe = token.probe
            timer = self._probe_timers.pop(probe, None)
            if timer is not None:
                timer.cancel()
            self._probe_ids.pop(probe, None)
            if isinstance(error, AuthenticationFailed):
                self._auth_failure = error
                self._feed(era_mod.Rejected(probe, error.message))
            else:
                self._feed(era_mod.ExchangeFailed(probe, error.message))
        elif isinstance(token, asyncio.Future):
            if not token.done():
                token.set_exception(error)
        elif self._on_forward_failed is not None:
            self._on_forward_failed(token, error)

    # -- transport end -----------------------------------------------------------------

    def _on_closed(self, detail: str) -> None:
        # A reply may have been the last bytes without a newline.
        if self._forward_sink is not None:
            frames, events = self._decoder.finish_forward()
            if frames:
                self._forward_sink(frames)
        else:
            events = self._decoder.finish()
        for event in events:
            self._dispatch(event)
        self.closed_detail = detail
        if self.state is PeerState.NEGOTIATING:
            self._feed(era_mod.Closed(detail))
        elif self.state is PeerState.READY:
            self.state = PeerState.CLOSED
        self._fail_pending(detail)
        if self._on_closed_cb is not None:
            self._on_closed_cb(detail)

    def _fail_pending(self, detail: str) -> None:
        tail = self._transport.stderr_tail() or None
        for _request_id, token in self._correlator.drain():
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_exception(TransportLost(
                    detail, exit_code=self._transport.returncode, server=self.name,
                    stderr_tail=tail,
                ))
