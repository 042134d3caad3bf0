"""The 2025-11-25 sessions one gateway process holds, and everything each holds: its log
level, its resource subscriptions, its GET streams, its calls with their resumable
streams (``event_streams``), and the questions waiting for its answers (``asks``).

A legacy session id is signed, not stored (``http_rules.SessionSigner``); what comes
after its ``initialize`` is the process's that opened it (another answers 404, or passes
the request to it: ``siblings``). The HTTP face routes, screens and authenticates; here
``LegacyRequests`` answers every request of the 2025-11-25 era over HTTP (a POSTed request
of it, a GET of a session's stream, a DELETE of a session) with what ``LegacySessions``
holds; ``LegacyConnection`` is the session of a connection that is one client (the stdio
face), held by that connection. So that era is one place.

Rules:

1. A session is held from its ``initialize`` until it ends: its client DELETEs it, it is
   idle ``session_idle_s`` (no request of it, and no stream of it open to its client),
   or its signed expiry (``session_lifetime_s`` after it opened) passes. An ended session
   is not found (404: its client starts a new one), and everything it held goes at once:
   its subscriptions are unwatched behind the gateway, its GET streams end, its calls in
   flight and its tasks still running are cancelled (their servers told, as for
   ``notifications/cancelled`` and ``tasks/cancel``), its tasks are dropped, its
   questions waiting fail, its kept streams are dropped, its log level is forgotten.
2. One sweep (not a timer per session) ends idle and expired sessions and drops kept
   streams past their keeping; a request finds a session ended even before the sweep
   comes to it.
3. At most ``sessions`` are held at once: a new one ends the least recently active
   session that has no stream open to its client; when every one has, the new one is
   refused (503, ``Retry-After``), as a busy gateway is.
4. Budgets per session: ``session_subscriptions`` resource subscriptions (beyond, an error
   naming the limit; another session is not concerned), and ``session_kept_bytes`` of
   kept call streams (the oldest finished go first; ``kept_bytes`` in all). What the
   process holds is the sum of these: there is no count shared by all sessions, so one
   session's leftovers never cost another anything.
5. A call never waits for its stream: a legacy call accepting SSE always gets one, and
   a finished stream written out to its client in full is not kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ServerError
from ..loop.awaitables import ready
from ..loop.tasks import TaskScope
from ..policy.identity import LOCAL
from . import protocol as p
from .admission import OVERLOADED, RETRY_AFTER_S
from .answers import (
    CALL,
    NO_CLIENT,
    SUBSCRIBING,
    Answerer,
    Client,
    ListSight,
    Send,
    resource_updated,
)
from .asks import Asks
from .event_streams import KEEP_S, SSE_HEADERS, ReplayableStream, StreamStore
from .exchange import Exchange
from .http_relay import relayed
from .http_rules import LegacySession, SessionSigner
from .outbox import StreamWriter, client_stream
from .replies import (
    Handled,
    HttpReply,
    answer,
    json_reply,
    owner,
    passed,
    refusal,
    sibling_for,
)
from .siblings import Siblings
from .tasks import LEGACY_TASK_METHODS, NOBODY, Caller

log = logging.getLogger("trunkline.gateway")

#: The sweep's period, between these (a quarter of the shortest keeping it enforces).
_SWEEP_S = (0.05, 5.0)


class _Session:
    """What one held session holds."""

    __slots__ = ("id", "signed", "deadline", "active", "level", "subscribed", "streams",
                 "calls", "open", "sight")

    def __init__(self, session_id: str, signed: LegacySession, deadline: float,
                 now: float) -> None:
        self.id = session_id
        #: What its id says (verified once, when it was minted here).
        self.signed = signed
        #: When it ends whatever it does (``time.monotonic``; its signed expiry).
        self.deadline = deadline
        #: When it was last active (a request of it, or one of its streams closing).
        self.active = now
        #: Its ``logging/setLevel`` (None: it never set one, and gets no logs).
        self.level: str | None = None
        #: Its resource subscriptions: what stops each, by URI.
        self.subscribed: dict[str, Callable[[], None]] = {}
        #: Its GET streams.
        self.streams: set[StreamWriter] = set()
        #: Its calls in flight, by request id (``protocol.request_key``).
        self.calls: dict[tuple[str, Any], asyncio.Task[Any]] = {}
        #: Streams of it open to its client now (GET streams, calls followed): while
        #: any is, it is active.
        self.open = 0
        #: What its client sees of the tool list (``answers.ListSight``), from its first
        #: GET stream on.
        self.sight: ListSight | None = None


class LegacySessions:
    """The legacy sessions of one gateway process (rules above)."""

    def __init__(self, answerer: Answerer) -> None:
        self._answerer = answerer
        self._limits = answerer.limits
        #: Held sessions, by id.
        self._held: dict[str, _Session] = {}
        #: Those with no stream open to their client, least recently active first: the
        #: ones that can be idle, and the ones a new session may take the place of.
        self._resting: OrderedDict[str, _Session] = OrderedDict()
        #: All, in the order they opened: the order their expiries come in.
        self._opened: OrderedDict[str, _Session] = OrderedDict()
        self._kept = StreamStore(kept_bytes=self._limits.kept_bytes,
                                 session_kept_bytes=self._limits.session_kept_bytes)
        self._asks = Asks()
        #: The sessions' calls (run in this scope, not their connections': a legacy call
        #: outlives its connection) and the sweep.
        self._scope = TaskScope("gateway legacy sessions")
        self._closing = False

    async def start(self) -> None:
        await self._scope.open()
        shortest = min(self._limits.session_idle_s, self._limits.session_lifetime_s, KEEP_S)
        period = min(max(shortest / 4, _SWEEP_S[0]), _SWEEP_S[1])
        self._scope.spawn(self._sweeping(period), name="legacy sessions sweep")

    async def drain(self, deadline_s: float) -> None:
        """The gateway stops: GET streams end, calls in flight get ``deadline_s`` to
        finish (then are cancelled), then every session ends."""
        self._closing = True
        for held in self._held.values():
            self._tell(held, None)
        calls = [task for held in self._held.values() for task in held.calls.values()]
        if calls:
            _done, late = await asyncio.wait(calls, timeout=deadline_s)
            for task in late:
                task.cancel()
        await self._scope.aclose()
        for held in list(self._held.values()):
            self._end(held, "the gateway stopped")
        self._kept.close()

    # -- the sessions ------------------------------------------------------------------

    def opened(self, session_id: str, signed: LegacySession) -> p.InBandError | None:
        """A session this process just minted (``signed``: what its id says): held from
        now on. None, or the error refusing it (rule 3)."""
        if len(self._held) >= self._limits.sessions and not self._resting:
            limit = self._limits.sessions
            return p.in_band(p.INTERNAL_ERROR, f"this gateway process holds {limit} legacy "
                           "sessions, each with a stream open, its limit (sessions); retry "
                           f"after {RETRY_AFTER_S} s", {
                               "kind": OVERLOADED, "scope": "sessions", "limit": limit,
                               "retryAfterS": RETRY_AFTER_S})
        if len(self._held) >= self._limits.sessions:
            self._end(next(iter(self._resting.values())), "newer sessions needed its place")
        now = time.monotonic()
        held = _Session(session_id, signed, now + (signed.expires - time.time()), now)
        self._held[session_id] = held
        self._resting[session_id] = held
        self._opened[session_id] = held
        return None

    def signed(self, session_id: str) -> LegacySession | None:
        """What the id of a session held here says, as verified when it was minted (an id
        that is a key of the held sessions is one this process signed, so its signature
        need not be checked again on every request); None for any other id."""
        held = self._held.get(session_id)
        return None if held is None else held.signed

    def find(self, session_id: str) -> bool:
        """Whether ``session_id`` is held and lives; a request of it is activity. A
        session found idle or expired ends here (rule 2)."""
        held = self._held.get(session_id)
        if held is None:
            return False
        now = time.monotonic()
        if now >= held.deadline:
            self._end(held, "its lifetime is over")
            return False
        if not held.open:
            if now - held.active > self._limits.session_idle_s:
                self._end(held, "it was idle")
                return False
            self._resting.move_to_end(session_id)
        held.active = now
        return True

    def end(self, session_id: str) -> bool:
        """Its client ends the session (DELETE): whether it was held."""
        held = self._held.get(session_id)
        if held is None:
            return False
        self._end(held, "its client ended it")
        return True

    def _end(self, held: _Session, why: str) -> None:
        """Rule 1: the session is not found any more, and what it held goes now."""
        del self._held[held.id]
        del self._opened[held.id]
        self._resting.pop(held.id, None)
        log.debug("legacy session ended: %s (%d subscriptions, %d calls in flight)", why,
                  len(held.subscribed), len(held.calls))
        for stop in held.subscribed.values():
            stop()
        held.subscribed.clear()
        self._tell(held, None)
        for task in held.calls.values():
            task.cancel()
        for running in self._answerer.tasks.drop_owner(held.id):
            self._scope.spawn(running.cancel(), name=f"tasks/cancel {running.task_id}")
        self._asks.fail(held.id, ServerError(f"the client's session ended ({why})",
                                             code=p.INTERNAL_ERROR))
        self._kept.drop_session(held.id)

    async def _sweeping(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        """End the sessions idle or past their expiry, drop the streams kept their time."""
        idle_s = self._limits.session_idle_s
        while self._opened:
            held = next(iter(self._opened.values()))
            if held.deadline > now:
                break
            self._end(held, "its lifetime is over")
        while self._resting:
            held = next(iter(self._resting.values()))
            if now - held.active <= idle_s:
                break
            self._end(held, "it was idle")
        self._kept.sweep(now)

    def status(self) -> dict[str, Any]:
        """What the sessions hold, for ``/status``."""
        return {"sessions": len(self._held),
                "subscriptions": sum(len(h.subscribed) for h in self._held.values()),
                "calls": sum(len(h.calls) for h in self._held.values()),
                "kept_streams": len(self._kept), "kept_bytes": self._kept.size,
                "evicted_streams": self._kept.evicted}

    # -- what a session holds ----------------------------------------------------------

    def log_level(self, session_id: str) -> str | None:
        held = self._held.get(session_id)
        return None if held is None else held.level

    def set_log_level(self, session_id: str, level: str) -> None:
        held = self._held.get(session_id)
        if held is not None:
            held.level = level

    async def subscription(self, request: p.Request, session_id: str) -> dict[str, Any]:
        """A ``resources/subscribe`` or ``resources/unsubscribe`` of the session: its
        updates go to the session's GET streams (none open: none sent)."""
        held = self._held.get(session_id)
        if held is None:
            return p.error_response(request.id, _ended())
        uri = request.params.get("uri")
        if not isinstance(uri, str):
            return p.error_response(request.id, p.error(
                p.INVALID_PARAMS, f"{request.method} needs a uri string"))
        if request.method == "resources/unsubscribe":
            stop = held.subscribed.pop(uri, None)
            if stop is not None:
                stop()
            return p.response(request.id, {})
        over = self._over_budget(held, uri)
        if over is not None:
            return over.response(request.id)
        watched = await self._answerer.watch(
            uri, request.era, lambda params: self._tell(held, resource_updated(params)),
            request.identity)
        if isinstance(watched, p.InBandError):
            return watched.response(request.id)
        # Checked again: the session may have ended, or subscribed more, meanwhile.
        over = p.InBandError(_ended()) if self._held.get(session_id) is not held else \
            self._over_budget(held, uri)
        if over is not None:
            watched()
            return over.response(request.id)
        previous = held.subscribed.pop(uri, None)
        held.subscribed[uri] = watched
        if previous is not None:
            previous()
        return p.response(request.id, {})

    def _over_budget(self, held: _Session, uri: str) -> p.InBandError | None:
        limit = self._limits.session_subscriptions
        if uri in held.subscribed or len(held.subscribed) < limit:
            return None
        return p.in_band(p.INVALID_REQUEST, f"this session holds {limit} resource "
                       "subscriptions, its limit (session_subscriptions): unsubscribe from "
                       "some first", {"limit": "session_subscriptions", "max": limit})

    def list_changed(self, which: str) -> None:
        """A list of the fleet's changed: every GET stream whose client sees the change
        is told (``answers.ListSight``)."""
        note = p.list_changed(which)
        for held in self._held.values():
            if held.streams and (held.sight is None or held.sight.changed(which)):
                self._tell(held, note)

    # -- GET streams (``changes``, ``_tell``: the queues) -----------------------------------

    async def changes(self, http: Exchange, session_id: str) -> None:
        """The session's GET stream: list changes and its resources' updates, until its
        client closes it or the session ends (``outbox``: bounded toward a slow reader)."""
        held = self._held[session_id]
        http.cancel_when_gone()
        await http.open_stream(SSE_HEADERS)
        stream = client_stream(http, self._limits, "a legacy session's GET stream")
        held.streams.add(stream)
        if held.sight is None:
            held.sight = self._answerer.sight(http.identity or LOCAL)
        self._opening(held)
        try:
            await stream.run()
        finally:
            held.streams.discard(stream)
            self._closed(held)

    def _tell(self, held: _Session, note: dict[str, Any] | None) -> None:
        """Every GET stream of the session gets ``note`` (None: it ends)."""
        for stream in held.streams:
            if note is None:
                stream.close()
            else:
                stream.put(note)

    def _opening(self, held: _Session) -> None:
        """A stream of the session opens to its client: while one is, it is active."""
        held.open += 1
        self._resting.pop(held.id, None)

    def _closed(self, held: _Session) -> None:
        """A stream of the session open to its client closed: it was active until now."""
        held.open -= 1
        held.active = time.monotonic()
        if not held.open and self._held.get(held.id) is held:
            self._resting[held.id] = held

    # -- calls, on resumable streams ---------------------------------------------------

    def call(self, http: Exchange, request: p.Request, session_id: str,
             capabilities: dict[str, Any]) -> Awaitable[HttpReply | None]:
        """A session's ``tools/call`` accepting SSE, on a resumable stream
        (``event_streams``): the call runs on when the client disconnects (2025-11-25:
        that is no cancellation; its ``notifications/cancelled`` is), and a GET with
        ``Last-Event-ID`` picks it up. It is admitted now, under its session, since its
        stream opens at once and an overload must be told before, as a status; it counts
        against the session until it ends. None once the stream was served, else the
        reply to answer with."""
        admitted = self._answerer.admit_call(request, session_id)
        if isinstance(admitted, p.InBandError):
            return ready(answer(admitted.response(request.id)))
        held = self._held.get(session_id)
        if held is None or self._closing:
            self._answerer.release(admitted)
            return ready(answer(p.error_response(request.id, _ended())))
        key = p.request_key(request.id)
        if key in held.calls:
            self._answerer.release(admitted)
            return ready(answer(p.error_response(request.id, p.error(
                p.INVALID_REQUEST, f"request id {request.id!r} is already in flight"))))
        stream = self._kept.open(session_id)
        # A server's input is asked on this stream; the answer comes in a POST.
        client = Client(capabilities, lambda method, params: self._asks.ask(
            stream.add, method, params, owner=session_id), held.level)

        async def run() -> None:
            try:
                stream.add(await self._answerer.call(request, stream.add, client, session_id,
                                                     admitted, Caller(session_id, session_id)))
            finally:
                held.calls.pop(key, None)
                self._kept.finished(stream)
        task = self._scope.spawn(run(), name=f"legacy call {request.id!r}")
        # Released when the task ends, even one cancelled before it began.
        task.add_done_callback(lambda _task: self._answerer.release(admitted))
        held.calls[key] = task
        return self._replay(http, held, stream)

    async def resume(self, http: Exchange, session_id: str, last_event_id: str) -> bool:
        """A GET with ``Last-Event-ID``: the stream it names replayed from after that
        event and followed to its end; False (nothing written) when not kept for this
        session."""
        found = self._kept.resume(last_event_id, session_id)
        held = self._held.get(session_id)
        if found is None or held is None:
            return False
        await self._replay(http, held, *found)
        return True

    async def _replay(self, http: Exchange, held: _Session, stream: ReplayableStream,
                      after: int = -1) -> None:
        self._opening(held)
        sent = after
        try:
            http.cancel_when_gone()  # the call goes on; the client reads no more of it here
            # Each chunk of events in one write: the head goes with the first (the priming
            # event, of a new stream), the end of the body with the last (the answer).
            async for index, chunk in stream.follow(after):
                if not http.started:
                    await http.open_stream(SSE_HEADERS, chunk)
                elif stream.finished and index == stream.last:
                    await http.close_stream(chunk)
                else:
                    await http.write(chunk)
                sent = index
            if not http.started:  # nothing was left to replay: an empty stream
                await http.open_stream(SSE_HEADERS)
        finally:
            self._closed(held)
        if stream.finished and sent == stream.last and http.written_out:
            # Every event, the answer last, was written out to a client still there.
            self._kept.delivered(stream)

    def cancelled(self, session_id: str, request_id: Any) -> None:
        """The session's ``notifications/cancelled``: its call ends (its server told)."""
        held = self._held.get(session_id)
        task = None if held is None else held.calls.get(p.request_key(request_id))
        if task is not None:
            task.cancel()

    def answered(self, response: p.Response, session_id: str | None) -> bool:
        """A client's answer to a question of its session's: whether it was one."""
        return self._asks.answered(response, owner=session_id)


class LegacyRequests:
    """Every request of the 2025-11-25 era over HTTP (a POSTed request of it, a GET of a
    session's stream, a DELETE of a session), answered with what ``LegacySessions`` hold:
    a session id is verified here, its session found held and alive (else 404, or the
    request passed to the sibling that holds it), and ``initialize`` mints one."""

    def __init__(self, sessions: LegacySessions, answerer: Answerer, signer: SessionSigner,
                 siblings: Siblings | None = None) -> None:
        """``signer``: what mints and verifies this process's session ids; ``siblings``:
        the other copies of this ``serve --processes N``, to which a request of a session
        one of them holds is passed."""
        self.sessions = sessions
        self._answerer = answerer
        self._signer = signer
        self._siblings = siblings

    def verified(self, http: Exchange, session_id: str) -> LegacySession | None:
        """The legacy session an id stands for, if this key signed it and it is the
        requester's own (one opened with a token answers only that token's identity)."""
        session = self.sessions.signed(session_id) or self._signer.verify(session_id)
        if session is None or session.owner != owner(http):
            return None
        return session

    def unserved(self, http: Exchange, body: bytes | None, session_id: str,
                 session: LegacySession | None) -> Awaitable[HttpReply | None] | None:
        """A legacy POST naming ``session_id`` (verified as ``session``): None when this
        process holds that session and it lives, else the answer (404, or the request
        passed to the sibling that holds it)."""
        if session is None:
            return ready(refusal(404, p.INVALID_REQUEST, "Session not found"))
        if not session.held:
            return self._elsewhere(http, body, session.instance)
        if not self.sessions.find(session_id):
            return ready(_session_ended())
        return None

    def request(self, http: Exchange, request: p.Request, session_id: str | None,
                session: LegacySession | None) -> Awaitable[Handled]:
        """The answer to a POSTed request of the 2025-11-25 era (of ``session``, held
        here, or of none: ``initialize``, a client without sessions), to await: the
        answerer's own coroutine for one served from behind the gateway, a ready reply
        for the rest. It counts against its session (``admission``), else against its
        connection."""
        if request.method != "initialize":
            version = http.headers.get("mcp-protocol-version")
            if version is not None and version != request.version:
                return ready(json_reply(p.error_response(request.id, p.error(
                    p.INVALID_REQUEST, f"MCP-Protocol-Version {version!r} is not this "
                    f"session's ({request.version})")), 400))
        limits = self._answerer.limits
        # The client the request counts against (``admission``).
        key: object = session_id if session is not None else http.connection
        if request.method == CALL:
            if session_id and session is not None and \
                    "text/event-stream" in http.headers.get("accept", ""):
                return self.sessions.call(http, request, session_id, session.capabilities)
            # A session's tasks are its own (``gateway/tasks.py``); without one, none.
            caller = Caller(session_id, session_id) if session_id and session is not None \
                else NOBODY
            return relayed(http, limits, lambda notify: self._answerer.call(
                request, notify, NO_CLIENT, key, caller=caller))
        if request.method in SUBSCRIBING and session_id:
            return self._subscription_reply(request, session_id)
        if request.method in LEGACY_TASK_METHODS and session_id and session is not None:
            return relayed(http, limits, lambda _notify: self._answerer.legacy_task_request(
                request, Caller(session_id, session_id)))
        answered = self._answerer.immediate(request)
        if answered is None:
            client = NO_CLIENT if session_id is None \
                else Client(log_level=self.sessions.log_level(session_id))
            return relayed(http, limits, lambda notify: self._answerer.from_fleet(
                request, client, notify, key))
        headers = {}
        if request.method == "logging/setLevel" and "result" in answered and session_id:
            self.sessions.set_log_level(session_id, request.params["level"])
        if request.method == "initialize" and "result" in answered:
            declared = request.params.get("capabilities")
            now = time.time()
            minted = self._signer.mint(
                answered["result"]["protocolVersion"], declared if isinstance(declared, dict)
                else None, now=now, owner=owner(http), lifetime_s=limits.session_lifetime_s,
                idle_s=limits.session_idle_s)
            signed = self._signer.verify(minted)
            assert signed is not None  # minted by this very signer just now
            refused = self.sessions.opened(minted, signed)
            if refused is not None:
                return ready(answer(refused.response(request.id)))
            headers["Mcp-Session-Id"] = minted
        return ready(answer(answered, headers))

    async def _subscription_reply(self, request: p.Request, session_id: str) -> HttpReply:
        return answer(await self.sessions.subscription(request, session_id))

    async def get(self, http: Exchange) -> HttpReply | None:
        """A GET of ``/mcp`` (screened and authenticated): a session's stream of list
        changes and resource updates, or with ``Last-Event-ID`` one of its call streams
        resumed. Without a session (or with an id no replica signed): 405, this endpoint
        takes POSTs."""
        session_id = self._held(http)
        if not isinstance(session_id, str):
            return await session_id
        if not self.sessions.find(session_id):
            return _session_ended()
        last_event_id = http.headers.get("last-event-id")
        if last_event_id is not None:
            if not await self.sessions.resume(http, session_id, last_event_id):
                return refusal(404, p.INVALID_REQUEST,
                               "no stream of this session to resume from that event here")
            return None
        await self.sessions.changes(http, session_id)
        return None

    async def delete(self, http: Exchange) -> HttpReply | None:
        """A DELETE of ``/mcp`` (screened and authenticated): a legacy session's client
        ends it (2025-11-25): everything it held goes at once, and its id is 404 from then
        on. Without a session (or with an id no replica signed) there is nothing to end:
        405, this endpoint takes POSTs."""
        session_id = self._held(http)
        if not isinstance(session_id, str):
            return await session_id
        if not self.sessions.end(session_id):
            return _session_ended()
        return HttpReply(200)

    def _held(self, http: Exchange) -> str | Awaitable[HttpReply | None]:
        """The session a GET or DELETE names, when this process holds it; else what
        answers the request: 405 without a session (or with an id no replica signed), the
        copy that holds it otherwise."""
        session_id = http.headers.get("mcp-session-id")
        session = self.verified(http, session_id) if session_id else None
        if session is None or not session_id:
            return ready(HttpReply(405, headers={"Allow": "POST"}))
        if not session.held:
            return self._elsewhere(http, None, session.instance)
        return session_id

    def _elsewhere(self, http: Exchange, body: bytes | None, instance: str
                   ) -> Awaitable[HttpReply | None]:
        """A request of a legacy session another gateway process opened: passed to it if it
        is a sibling copy, else 404 saying why (a client starts a new session on 404)."""
        index = sibling_for(self._siblings, http, instance)
        if index is not None:
            assert self._siblings is not None
            return passed(self._siblings, http, body, index)
        if instance == self._signer.instance:
            where = (f"gateway process {instance!r}, which opened it, was started again "
                     "since, and what the session held is gone")
        else:
            where = (f"it was opened by gateway process {instance!r}, which holds its state, "
                     f"and this is {self._signer.instance!r}: route every request of a "
                     "session to the process that opened it (behind a load balancer: "
                     "affinity on Mcp-Session-Id)")
        return ready(refusal(404, p.INVALID_REQUEST,
                             f"Session not found here: {where}; start a new session"))


class LegacyConnection:
    """The 2025-11-25 session of a connection that is one client (the stdio face's
    ``ClientSession``): opened by its ``initialize``, it holds the capabilities the client
    declared there, the log level it set (``logging/setLevel``), its resource
    subscriptions (updates sent on the connection) and the questions asked of its client
    for a server's input (``Asks``), until the connection ends (``close``)."""

    def __init__(self, answerer: Answerer, send: Send) -> None:
        self._answerer = answerer
        self._send = send
        #: Its revision once ``initialize`` was answered (None: no session).
        self.version: str | None = None
        self._capabilities: dict[str, Any] = {}
        self._level: str | None = None
        self._asks = Asks()
        #: What stops each resource subscription, by URI.
        self._subscribed: dict[str, Callable[[], None]] = {}

    def immediate(self, request: p.Request, answered: dict[str, Any]) -> None:
        """A legacy request answered at once: ``initialize`` opens the session,
        ``logging/setLevel`` sets its level."""
        if "result" not in answered:
            return
        if request.method == "initialize":
            self.version = answered["result"]["protocolVersion"]
            declared = request.params.get("capabilities")
            self._capabilities = declared if isinstance(declared, dict) else {}
        elif request.method == "logging/setLevel":
            self._level = request.params["level"]

    def client(self) -> Client:
        """The client as a call of it needs it: asked for a server's input on this
        connection, its log messages at the level it set."""
        return Client(self._capabilities,
                      lambda method, params: self._asks.ask(self._send, method, params),
                      self._level)

    def answered(self, response: p.Response) -> bool:
        """The client's answer to a question asked of it: whether it was one."""
        return self._asks.answered(response)

    async def subscription(self, request: p.Request) -> dict[str, Any]:
        """A ``resources/subscribe`` or ``resources/unsubscribe``: the session's updates
        of that URI start (on this connection) or stop."""
        uri = request.params.get("uri")
        if request.method == "resources/unsubscribe":
            stop = self._subscribed.pop(uri, None) if isinstance(uri, str) else None
            if stop is not None:
                stop()
            return p.response(request.id, {})
        watched = await self._answerer.watch(
            uri, request.era, lambda params: self._send(resource_updated(params)),
            request.identity)
        if isinstance(watched, p.InBandError):
            return watched.response(request.id)
        assert isinstance(uri, str)  # a watch of anything else is refused
        previous = self._subscribed.pop(uri, None)
        self._subscribed[uri] = watched
        if previous is not None:
            previous()
        return p.response(request.id, {})

    def list_changed(self, which: str) -> None:
        """A list of the fleet's changed: the session, once open, is told."""
        if self.version is not None:
            self._send(p.list_changed(which))

    def close(self) -> None:
        """The connection ended: its subscriptions stop."""
        for stop in self._subscribed.values():
            stop()
        self._subscribed.clear()


def _session_ended() -> HttpReply:
    """A request of a session this process held, which has ended (2025-11-25: 404, and
    its client starts a new one)."""
    return refusal(404, p.INVALID_REQUEST, "Session not found: it ended (its client "
                   "deleted it, or it was idle or past its lifetime); start a new session")


def _ended() -> dict[str, Any]:
    return p.error(p.INVALID_REQUEST, "the session ended: start a new session")


__all__ = ["LegacyConnection", "LegacyRequests", "LegacySessions"]
