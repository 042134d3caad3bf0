"""One configured MCP server over one connection (one transport lifetime).

A ``Peer`` is the I/O edge around the pure pieces: it starts the transport, feeds every
read buffer through the codec's batch decoder (split, scan, correlate in one call), and
hands each line to whoever owns it: the era negotiation while it runs (``Negotiator``),
the caller's future for a request of its own, the forwarding hot path for the parent's
calls (``Forwarder``), the legacy server-request answers (``ServerRequests``). It never
re-probes: the verdict lives exactly as long as the connection. When the connection ends,
every pending request fails at once with ``TransportLost`` and the server's stderr tail.

Request ids come from one correlator per connection, inside the block of ids the worker
was given (``first_request_id``/``request_id_limit``), so ids never repeat across the
connections of one server.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

import orjson

from .._codec import (
    CORR_MATCHED,
    CORR_STALE,
    DEFAULT_MAX_LINE_BYTES,
    KIND_ERROR,
    KIND_NOTIFICATION,
    KIND_OVERSIZED,
    KIND_REQUEST,
    KIND_RESULT,
    Correlator,
    Event,
    StreamDecoder,
    encode_notification,
    encode_request,
    stamp_request,
)
from ..errors import (
    EraRefused,
    MalformedMessage,
    OversizedMessage,
    RequestTimeout,
    ServerUnavailable,
    TransportLost,
    TrunklineError,
)
from ..loop.tasks import TaskScope
from ..params import HttpParams, TransportParams
from ..protocol import era
from ..protocol.era import Verdict
from ..protocol.identity import ClientIdentity
from ..protocol.mrtr import InputHandler
from ..protocol.reply import Reply
from ..protocol.tasks import TASKS_EXTENSION
from .era import Negotiator, ProbeToken
from .forwarding import Forwarder
from .server_requests import ServerRequests
from .transports.stdio import StdioTransport

if TYPE_CHECKING:
    from .credentials import CredentialSlots
    from .transports.http import HttpTransport

log = logging.getLogger("trunkline.peer")

#: Called with (method, raw line) for every notification the server sends once ready.
NotificationSink = Callable[[str, bytes], None]


class PeerState(enum.Enum):
    STARTING = "starting"
    NEGOTIATING = "negotiating"
    READY = "ready"
    REFUSED = "refused"
    CLOSED = "closed"



class _Expired(Exception):
    """A worker's own request reached its deadline (``Peer.request``)."""


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(_Expired())


class Peer:
    def __init__(
        self,
        name: str,
        params: TransportParams,
        *,
        negotiation: era.NegotiationConfig | None = None,
        identity: ClientIdentity | None = None,
        input_handlers: Mapping[str, InputHandler] | None = None,
        on_notification: NotificationSink | None = None,
        on_closed: Callable[[str], None] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        first_request_id: int = 1,
        request_id_limit: int | None = None,
        close_wait_s: float = 2.0,
        term_wait_s: float = 2.0,
        credentials: CredentialSlots | None = None,
        extensions: Iterable[str] = (),
    ) -> None:
        """``extensions``: the ones the host implements, declared to the server on every
        modern request when it declared them too (``negotiated``)."""
        self.name = name
        self._extensions = tuple(extensions)
        self.params = params
        self.identity = identity or ClientIdentity()
        self.negotiation = negotiation or era.NegotiationConfig()
        self._input_handlers = dict(input_handlers or {})
        self._on_notification = on_notification
        self._on_closed_cb = on_closed
        self._max_line_bytes = max_line_bytes
        self.state = PeerState.STARTING
        self.verdict: Verdict | None = None
        # Counters a host can watch: replies that came after their caller gave up, and
        # lines that broke the protocol after the era was decided.
        self.late_replies = 0
        self.protocol_violations = 0
        self.on_counters: Callable[[], None] | None = None

        self._correlator: Correlator[Any] = Correlator(
            first_request_id, request_id_limit)
        self._decoder = StreamDecoder(self._correlator, max_line_bytes)
        self._transport: StdioTransport | HttpTransport
        if isinstance(params, HttpParams):
            from .transports.http import HttpTransport

            self._transport = HttpTransport(
                params, on_data=self._on_data, on_closed=self._on_closed,
                on_failed=self._on_exchange_failed,
                is_pending=self._correlator.__contains__, server=name,
                max_message_bytes=max_line_bytes, close_wait_s=close_wait_s,
                credentials=credentials)
        else:
            self._transport = StdioTransport(params, on_data=self._on_data,
                                             on_closed=self._on_closed,
                                             close_wait_s=close_wait_s,
                                             term_timeout_s=term_wait_s)
        self._scope = TaskScope(f"server {name!r}")
        self._negotiator: Negotiator | None = None
        self._server_requests: ServerRequests | None = None
        self._forwarder: Forwarder | None = None
        self._to_parent: Callable[[bytes], None] | None = None
        self._modern = False
        self._meta = b""
        self._closed_reported = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> Verdict:
        """Start the server and decide its era. Raises ``SpawnFailed``, ``EraRefused`` or
        ``AuthenticationFailed``; the connection is then left for ``aclose`` (the caller
        reports the verdict first: it never waits for the server's shutdown)."""
        if self.state is not PeerState.STARTING:
            raise RuntimeError(f"peer {self.name!r} was already started")
        await self._scope.open()
        # Tasks a legacy server may ask the host to run: only with the tasks extension on,
        # and only of the kinds the host answers.
        client_tasks = TASKS_EXTENSION in self._extensions
        task_kinds = (self.identity.task_kinds() & frozenset(self._input_handlers)
                      if client_tasks else frozenset())
        self._server_requests = ServerRequests(
            self._input_handlers, self.identity.capabilities, write=self._transport.write,
            scope=self._scope, task_kinds=task_kinds)
        self._negotiator = Negotiator(
            self.negotiation, self.identity, server=self.name, correlator=self._correlator,
            write=self._transport.write, on_verdict=self._become_ready,
            on_renegotiate=self._renegotiate, client_tasks=bool(task_kinds))
        await self._transport.start()
        self.state = PeerState.NEGOTIATING
        self._negotiator.start()
        try:
            return await self._negotiator.outcome
        except TrunklineError:
            self.state = PeerState.REFUSED
            raise

    async def aclose(self) -> None:
        """Stop the server with the bounded shutdown ladder; fail whatever is pending."""
        if self._negotiator is not None:
            self._negotiator.close()
        if self._forwarder is not None:
            self._forwarder.close()
        if self._server_requests is not None:
            self._server_requests.open = False
            if self._server_requests.tasks is not None:
                self._server_requests.tasks.close()
        await self._scope.aclose()
        await self._transport.close()
        if self.state is not PeerState.REFUSED:
            self.state = PeerState.CLOSED
        self._fail_pending("transport closed by the client")

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def era(self) -> era.Era | None:
        return None if self.verdict is None else self.verdict.era

    @property
    def evidence(self) -> tuple[str, ...]:
        return () if self._negotiator is None else self._negotiator.evidence

    @property
    def proven_modern(self) -> bool:
        return self._negotiator is not None and self._negotiator.proven_modern

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

    @property
    def ids_left(self) -> int:
        return self._correlator.ids_left

    @property
    def forwarder(self) -> Forwarder:
        assert self._forwarder is not None, "forward_to() first"
        return self._forwarder

    # -- requests of the worker's own ---------------------------------------------------

    async def request(self, method: str, params: bytes | None = None, *, timeout: float,
                      credential: int = 0) -> Reply:
        """Send one request in the peer's era and wait for its reply, at most ``timeout``
        seconds from the write. ``params`` is a JSON object already serialized;
        ``credential``: the credential slot it goes with (an HTTP server's; 0 the host's)."""
        request_id, future = self.open_request(method, params, credential)
        # The deadline is one timer that fails the reply's future (no ``wait_for``: its
        # waiter and timeout context cost as much again as the request; a worker following
        # a thousand tasks sends one of these per look).
        timer = asyncio.get_running_loop().call_later(timeout, _expire, future)
        try:
            return await future
        except (_Expired, asyncio.CancelledError) as exc:
            if self._correlator.discard(request_id) is not None:
                self._send_cancelled(request_id, "timeout" if isinstance(
                    exc, _Expired) else "cancelled by the caller")
            if isinstance(exc, _Expired):
                raise RequestTimeout(
                    f"no reply within {timeout:g} s", timeout_s=timeout,
                    server=self.name, method=method,
                ) from None
            raise
        finally:
            timer.cancel()

    def open_request(self, method: str, params: bytes | None = None, credential: int = 0
                     ) -> tuple[int, asyncio.Future[Reply]]:
        """Send a request that stays outstanding until the server answers, with no
        deadline (a ``subscriptions/listen`` stream, whose id names the subscription).
        Returns the JSON-RPC id and a future for the final reply (``TransportLost`` if
        the connection ends first)."""
        if self.state is not PeerState.READY:
            raise ServerUnavailable(f"server is {self.state.value}", state=self.state.value,
                                    server=self.name, method=method)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        request_id = self._correlator.allocate(future)
        if self._modern:
            line = stamp_request(request_id, method, params, self._meta)
        else:
            line = encode_request(request_id, method, params)
        write_for = getattr(self._transport, "write_for", None) if credential else None
        if write_for is not None:
            write_for(credential, line)
        else:
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

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   timeout: float) -> Any:
        """``request`` with JSON encoding and decoding, for callers off the hot path."""
        raw = None if params is None else orjson.dumps(params)
        reply = await self.request(method, raw, timeout=timeout)
        return reply.decode(server=self.name, method=method)

    def _send_cancelled(self, request_id: Any, reason: str) -> None:
        if self.state is not PeerState.READY:
            return
        params = orjson.dumps({"requestId": request_id, "reason": reason})
        self._transport.write(encode_notification("notifications/cancelled", params))

    # -- the parent's calls ------------------------------------------------------------

    def forward_to(self, to_parent: Callable[[bytes], None], max_frame_bytes: int) -> Forwarder:
        """Carry the parent's calls: replies to them go to ``to_parent`` as ready-made
        RESULT frames. Call before ``start`` (SUBMITs may arrive before the verdict)."""
        self._to_parent = to_parent
        self._forwarder = Forwarder(
            self._correlator, write=self._transport.write, to_parent=to_parent,
            cancel=self._send_cancelled, max_frame_bytes=max_frame_bytes,
            lines_apart=self._transport.lines_apart,
            write_for=getattr(self._transport, "write_for", None))
        return self._forwarder

    # -- the verdict ---------------------------------------------------------------------

    def _become_ready(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self._modern = verdict.era is era.Era.MODERN
        if self._modern:
            # Serialized once per connection and spliced into every request.
            self._meta = self.identity.modern_meta(verdict.version,
                                                   self.negotiated(verdict))
        if self._forwarder is not None:
            self._forwarder.start_stamping(self._meta if self._modern else None)
        self.state = PeerState.READY

    def negotiated(self, verdict: Verdict) -> dict[str, Any]:
        """The extensions both sides declared (each with the host's settings: none)."""
        declared = (verdict.capabilities or {}).get("extensions")
        if not isinstance(declared, dict):
            return {}
        return {name: {} for name in self._extensions if name in declared}

    def _renegotiate(self, reason: str) -> None:
        """The ready connection holds two sessions: it carries nothing more."""
        log.warning("server %r: %s", self.name, reason)
        self.end(reason)

    def end(self, reason: str) -> None:
        """Carry nothing more over this connection: it ends as a lost connection would,
        with ``reason`` (``aclose`` then stops the server)."""
        self._connection_ended(reason)

    # -- reading -----------------------------------------------------------------------

    def _on_data(self, chunk: bytes) -> None:
        if self._to_parent is not None:
            frames, events = self._decoder.feed_forward(chunk)
            if frames:
                self._to_parent(frames)
        else:
            events = self._decoder.feed(chunk)
        for event in events:
            self._dispatch(event)

    def _dispatch(self, event: Event) -> None:
        kind = event.kind
        if kind == KIND_RESULT or kind == KIND_ERROR:  # noqa: SIM109 - per line: no tuple built
            self._on_response(event)
        elif kind == KIND_NOTIFICATION:
            if self.state is PeerState.READY and self._on_notification is not None:
                self._on_notification(event.method or "", event.line)
        elif kind == KIND_REQUEST:
            self._on_server_request(event)
        elif kind == KIND_OVERSIZED:
            self._on_oversized(event)
        else:
            self._on_invalid(event)

    def _on_response(self, event: Event) -> None:
        corr = event.correlation
        if corr == CORR_MATCHED:
            token = event.token
            if isinstance(token, ProbeToken):
                assert self._negotiator is not None
                self._negotiator.on_reply(token.probe, event)
            elif token is not None and not token.done():  # matched: a token is there
                token.set_result(Reply.from_event(event))
        elif corr == CORR_STALE:
            self.late_replies += 1  # its caller timed out or cancelled: drop, but count
            self._counters_changed()
        elif event.id is None:
            self._unexpected(
                f"error {event.error_code} {event.error_message!r} without a request id")
        else:
            self._unexpected(f"a response with id {event.id!r}, which was never sent")

    def _on_oversized(self, event: Event) -> None:
        """A line over the limit, skipped unread. When it answered a pending request, that
        request fails now, naming the size and the limit, instead of at its deadline."""
        what = (f"a line of {event.size} bytes, over the line limit of "
                f"{self._max_line_bytes} bytes")
        if event.correlation != CORR_MATCHED:
            self._unexpected(f"{what}; skipped")
            return
        token = event.token
        error = OversizedMessage(f"the answer was {what}; it was skipped unread",
                                 size=event.size, limit=self._max_line_bytes, server=self.name)
        error.request_id = event.id
        log.warning("server %r: %s", self.name, error.message)
        if isinstance(token, ProbeToken):
            self._unexpected(f"{what}, answering {token.probe.value}")
        else:
            self._fail_request(token, error)

    def _on_invalid(self, event: Event) -> None:
        """A line that is no JSON-RPC message: a protocol violation. When it carries the id
        of a pending request and no method (an answer gone wrong: ``result`` with
        ``error``, bytes that are not UTF-8, nesting past the codec's limit), that request
        fails now with the reason, instead of at its deadline."""
        excerpt = event.line[:120].decode("utf-8", "replace")
        detail = f"not a JSON-RPC message ({event.reason}): {excerpt!r}"
        token = event.token
        if event.correlation != CORR_MATCHED or isinstance(token, ProbeToken):
            self._unexpected(detail)
            return
        self._unexpected(f"{detail}; its request fails")
        error = MalformedMessage(f"the answer was not a valid JSON-RPC response: {event.reason}",
                                 server=self.name)
        error.request_id = event.id
        self._fail_request(token, error)

    def _unexpected(self, detail: str) -> None:
        if self.state is PeerState.NEGOTIATING:
            assert self._negotiator is not None
            self._negotiator.on_unexpected(detail)
        else:
            self.protocol_violations += 1
            self._counters_changed()
            log.warning("server %r: %s", self.name, detail)

    def _counters_changed(self) -> None:
        if self.on_counters is not None:
            self.on_counters()

    def _on_server_request(self, event: Event) -> None:
        method = event.method or ""
        if self.state is PeerState.NEGOTIATING:
            self._unexpected(f"the server sent a {method!r} request before its era was known")
        elif self.state is not PeerState.READY:
            return
        elif self._modern:
            # Modern servers must not send requests, and a modern client must not answer.
            self.protocol_violations += 1
            self._counters_changed()
            log.warning("server %r sent a %r request, forbidden in the modern era",
                        self.name, method)
        else:
            assert self._server_requests is not None
            self._server_requests.on_request(event.id, method, event.line)

    # -- one request lost by the transport (HTTP) ---------------------------------------

    def _on_exchange_failed(self, request_id: Any, error: TrunklineError) -> None:
        """The transport will never deliver an answer to this request. A request already
        answered, timed out or cancelled is not pending any more: nothing happens."""
        token = self._correlator.discard(request_id)
        if token is None:
            return
        error.server = self.name
        error.request_id = request_id
        if isinstance(token, ProbeToken):
            assert self._negotiator is not None
            self._negotiator.on_failed(token.probe, request_id, error)
        else:
            self._fail_request(token, error)

    def _fail_request(self, token: Any, error: TrunklineError) -> None:
        """One request ends without an answer: the worker's own (a future), or the
        parent's (its call id, reported back as a FAILURE)."""
        if isinstance(token, asyncio.Future):
            if not token.done():
                token.set_exception(error)
        elif self._forwarder is not None:
            self._forwarder.fail(token, error)

    # -- the connection's end ------------------------------------------------------------

    def _on_closed(self, detail: str) -> None:
        # A reply may have been the last bytes without a newline.
        if self._to_parent is not None:
            frames, events = self._decoder.finish_forward()
            if frames:
                self._to_parent(frames)
        else:
            events = self._decoder.finish()
        for event in events:
            self._dispatch(event)
        if self.state is PeerState.NEGOTIATING and self._negotiator is not None:
            self._negotiator.on_closed(detail)
        self._connection_ended(detail)

    def _connection_ended(self, detail: str) -> None:
        if self._closed_reported:
            return
        self._closed_reported = True
        if self._server_requests is not None:
            self._server_requests.open = False
            if self._server_requests.tasks is not None:
                self._server_requests.tasks.close()
        if self._forwarder is not None:
            self._forwarder.stop_stamping()
        if self.state is PeerState.READY:
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


__all__ = ["EraRefused", "NotificationSink", "Peer", "PeerState", "Reply"]
