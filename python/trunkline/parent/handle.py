"""The parent's side of one server: its state, its worker, the calls routed to it.

A ``WorkerHandle`` follows one configured server through its workers (``Generation``):
it starts each one, routes calls to the current one with back-pressure (the hot path of
the whole host: ``request``), follows its state reports, and when a worker is gone asks
the ``RestartPlanner`` what to do and does it. Progress and a call's log messages go to
``CallNotices`` (other log messages to the host's ``on_log``), a legacy server's own
requests to the ``ServerRequestRelay``.

Each worker generation gets its own block of JSON-RPC ids, so no id is ever used twice
for one server during the host's lifetime, and inherits what earlier ones showed (a
server that proved modern never gets ``initialize`` again; one that stayed silent gets
longer deadlines: the planner's ``patience``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal

from .. import channel as ch
from .._codec import CORR_MATCHED, CodecError, encode_submit
from ..channel import ServerState, StateReport
from ..errors import (
    MalformedMessage,
    RequestTimeout,
    ServerUnavailable,
    TransportLost,
    TrunklineError,
)
from ..loop.tasks import TaskScope, gather_all
from ..params import HttpParams
from ..protocol.era import Remedy
from ..protocol.mrtr import InputHandler
from ..protocol.reply import Reply
from ..settings import HostSettings, ServerConfig
from ..telemetry.calls import note, sent_as
from .call_notices import CallNotices
from .credentials import CredentialDesk
from .generation import Generation
from .latency import LatencyWindow
from .launchers import Launcher, SpawnLauncher
from .relay import ServerRequestRelay
from .resource_watch import ResourceWatchers
from .restarts import CoolDown, Decision, ReprobeIn, RestartIn, RestartPlanner, StayDown

if TYPE_CHECKING:
    from ..auth import OAuthClient

log = logging.getLogger("trunkline.supervisor")

#: States in which a call waits for the server instead of failing at once.
_ON_ITS_WAY = (ServerState.STARTING, ServerState.NEGOTIATING, ServerState.RESTARTING)
#: How long after a call's deadline the parent ends it itself. The worker enforces the
#: same timeout from the SUBMIT's arrival and answers with a FAILURE naming the request's
#: JSON-RPC id (which only the worker knows: telemetry reports it); the parent's own
#: deadline, this much later, is the backstop for a worker that cannot.
_WORKER_DEADLINE_FIRST_S = 0.05

#: A request on its way (``WorkerHandle.send_now``): its future, the worker generation
#: that carries it, its call id there, when it started (``perf_counter``), when its
#: timeout ends (the loop's clock: a retry's deadline). Unpacked by the caller at once: a
#: tuple held for the whole call would be one more object per call in flight for the
#: collector to walk (its method and timeout are the caller's own).
SentCall = tuple["asyncio.Future[Any]", Generation, int, float, float]


@dataclass(frozen=True)
class ServerStatus:
    """What the host knows of one server, for operators. What the server's current worker
    reported (era, evidence, stderr tail, ...) is read from its last ``StateReport``."""

    name: str
    state: ServerState
    reason: str | None = None
    #: Workers started after the first (crash restarts and re-probes).
    restarts: int = 0
    worker_pid: int | None = None
    #: Calls sent and not yet answered.
    in_flight: int = 0
    #: Replies that came after their caller gave up (timeout, cancel), dropped; over the
    #: host's lifetime.
    late_replies: int = 0
    #: Lines that broke the protocol after the era was decided, dropped; same.
    protocol_violations: int = 0
    #: Seconds from starting the current worker to its era verdict (None: not yet).
    time_to_verdict_s: float | None = None
    #: What last went wrong: why the server last restarted or became unavailable, or a
    #: call that got no reply in time (None: nothing yet); kept after it recovered.
    last_error: str | None = None
    #: When that was (seconds since the epoch).
    last_error_at: float | None = None
    #: Why the catalog does not hold the server's tools as it lists them now: its last
    #: listing failed (the error, and when it is listed again), or its tools collide.
    #: Its tools are left out until a listing succeeds, or stay as last listed if one
    #: did before. None: its last listing succeeded (or none was made yet). A server
    #: whose first listing failed is ``ready`` with this set: its connection is up (its
    #: prompts and resources are served), only its tools are not.
    listing_error: str | None = None
    report: StateReport | None = field(default=None, repr=False)

    @property
    def era(self) -> str | None:
        return self.report.era if self.report else None

    @property
    def version(self) -> str | None:
        return self.report.version if self.report else None

    @property
    def capabilities(self) -> dict[str, Any] | None:
        return self.report.capabilities if self.report else None

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self.report.server_info if self.report else None

    @property
    def instructions(self) -> str | None:
        return self.report.instructions if self.report else None

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.report.evidence if self.report else ()

    @property
    def stderr_tail(self) -> str | None:
        return self.report.stderr_tail if self.report else None

    @property
    def server_pid(self) -> int | None:
        return self.report.server_pid if self.report else None

    @property
    def hint(self) -> str | None:
        """What the operator can do about an unavailable server, when its configuration
        can lift the refusal: one that answered but proved no era, and is not allowlisted
        (a legacy-only server), is told how to allowlist it. None otherwise."""
        report = self.report
        if self.state is not ServerState.UNAVAILABLE or report is None \
                or report.remedy is not Remedy.ALLOW_LEGACY:
            return None
        return (f"it {report.answered}, no evidence of the modern era, and is not "
                "allowlisted for legacy: add \"allowLegacy\": true to its entry "
                "(allow_legacy=True) if you trust it")


#: Machine-readable ``ServerWarning`` kinds:
#:
#: - ``not-allowlisted``: refused for want of the legacy allowlist (``ServerStatus.hint``).
#: - ``listing-failed``: its tools could not be listed (``ServerStatus.listing_error``).
ServerWarningKind = Literal["not-allowlisted", "listing-failed"]


@dataclass(frozen=True)
class ServerWarning:
    """A configured server the operator can bring up by changing its configuration; said
    as a ``CatalogWarning`` says what it worked around (``server``, ``kind``, ``message``;
    ``tool`` always None)."""

    server: str
    kind: ServerWarningKind
    message: str
    tool: None = None

    @classmethod
    def of(cls, status: ServerStatus) -> ServerWarning | None:
        """The warning ``status`` calls for, if any (for a refusal the configuration can
        lift)."""
        if status.hint is None:
            return None
        return cls(status.name, "not-allowlisted", f"unavailable: {status.hint}")

    @classmethod
    def of_listing(cls, status: ServerStatus) -> ServerWarning | None:
        """The warning a failed listing of ``status``'s server calls for, if any."""
        if status.listing_error is None:
            return None
        return cls(status.name, "listing-failed", status.listing_error)

    def __str__(self) -> str:
        return f"server {self.server!r}: {self.message}"


class WorkerHandle:
    def __init__(self, config: ServerConfig, settings: HostSettings, rng: random.Random,
                 *, on_state: Callable[[WorkerHandle], None] | None = None,
                 on_list_changed: Callable[[WorkerHandle, str], None] | None = None,
                 on_log: Callable[[str, dict[str, Any]], None] | None = None,
                 input_handlers: Mapping[str, InputHandler] | None = None,
                 launcher: Launcher | None = None, oauth: OAuthClient | None = None) -> None:
        """``oauth``: the host's OAuth client, which answers this server's credential
        questions (an HTTP server's 401/403)."""
        self.config = config
        #: An attribute, not a property of ``config``: read on every call's path.
        self.name = config.name
        self.settings = settings
        self._launcher = launcher or SpawnLauncher()
        self._on_state = on_state
        self._on_list_changed = on_list_changed
        self._on_log = on_log
        self.notices = CallNotices(config.name)
        self.resources = ResourceWatchers(config.name, self._watch_changed)
        #: Changes of the watched URIs not yet sent to the worker (URI: watched or not),
        #: sent once per tick, and only while the worker takes what it is sent: one
        #: entry per URI, however many changes came meanwhile.
        self._watch_pending: dict[str, bool] = {}
        self._watch_scheduled = False
        self._relay = ServerRequestRelay(
            input_handlers or {},
            lambda request: self.notices.handler_for(request, self._inflight),
            config.roots)
        self._credentials = CredentialDesk(
            oauth, config.name,
            config.params.url if isinstance(config.params, HttpParams) else "",
            legacy_fallbacks=config.allow_legacy)
        self._planner = RestartPlanner(settings.restart, rng, settings.negotiation_for(config))
        self._scope = TaskScope(f"server {config.name!r}")
        self.state = ServerState.STARTING
        self.report: StateReport | None = None
        self.reason: str | None = None
        self._reason_told: str | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        #: ``ServerStatus.listing_error``, as the catalog keeper last said it.
        self.listing_error: str | None = None
        self.restarts = 0
        #: What the planner decided last (telemetry tells restarts and cut-offs by it).
        self.decision: Decision | None = None
        #: The latencies of this server's recent calls (``Host.call_latency``).
        self.latency = LatencyWindow()
        self._gen: Generation | None = None
        self._generations = 0
        self._unreaped: set[Generation] = set()
        self._supervision: asyncio.Task[Any] | None = None
        self._proven_modern = False
        self._counted_late = 0
        self._counted_violations = 0
        # Read on every call: kept at hand rather than behind two attribute lookups.
        self._max_inflight = config.max_inflight
        self._max_frame_bytes = settings.max_frame_bytes
        self._inflight = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._changed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> ServerStatus:
        """Start the worker and wait until the server is ready or unavailable."""
        await self._scope.open()
        await self._spawn()
        await self.wait_settled()
        return self.status()

    async def wait_settled(self) -> None:
        while self.state in _ON_ITS_WAY:
            await self._next_change()

    async def retry(self) -> ServerStatus:
        """An explicit retry of an unavailable server: a fresh restart budget, now."""
        if self.state is not ServerState.UNAVAILABLE:
            return self.status()
        self._planner.reset()
        await self._end_supervision()
        await self._spawn()
        await self.wait_settled()
        return self.status()

    async def aclose(self) -> None:
        """Stop the worker (which stops its server), bounded in time. Idempotent."""
        self._stopping = True
        # A restart that was spawning a worker finishes unwinding first, so the worker it
        # may have created is stopped below, not orphaned.
        await self._end_supervision()
        gen = self._gen
        if gen is not None and not gen.gone:
            gen.send(ch.stop_frame())
        # Every worker this handle started and nobody reaped yet, including ones already
        # gone from the channel but still exiting: none may outlive the host.
        await gather_all(*(g.reap(self.settings.stop_timeout_s) for g in list(self._unreaped)))
        if self._gen is not None:
            await self._gen.scope.aclose()
        await self._scope.aclose()
        self._set_state(ServerState.STOPPED)

    @property
    def era(self) -> str | None:
        """The current worker's era (``"modern"``/``"legacy"``), without building a whole
        ``status()``: read on every call."""
        return self.report.era if self.report is not None else None

    @property
    def version(self) -> str | None:
        """The protocol revision the current worker's server negotiated."""
        return self.report.version if self.report is not None else None

    @property
    def generation(self) -> int:
        """Bumped for every new worker: a READY with a new generation is a new connection
        (a new era verdict, empty caches)."""
        return self._generations

    def status(self) -> ServerStatus:
        gen = self._gen
        late, violations = self._counted_late, self._counted_violations
        if gen is not None:
            late += gen.late_replies()
            violations += gen.stats.protocol_violations
        return ServerStatus(
            name=self.name,
            state=self.state,
            reason=self.reason,
            restarts=self.restarts,
            worker_pid=gen.pid if gen else None,
            report=self.report,
            in_flight=self._inflight,
            late_replies=late,
            protocol_violations=violations,
            time_to_verdict_s=gen.verdict_after_s if gen else None,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
            listing_error=self.listing_error,
        )

    # -- calls -------------------------------------------------------------------------

    def now(self) -> float:
        """The loop's clock, read without ``asyncio.get_running_loop()``, which costs a
        ``getpid()`` system call (the call path reads the clock once per call)."""
        return (self._loop or asyncio.get_running_loop()).time()

    async def request(self, method: str, params: bytes | None, *, timeout: float,
                      watched: str | None = None) -> Reply:
        """Send one request through the worker; the hot path of the whole host.
        ``watched``: the ``CallNotices`` token of the call it belongs to, told when the
        request is with the server.

        Per call: one future, one correlator entry, one SUBMIT frame queued for the
        tick's single channel write, one deadline in the generation's correlator (one
        timer for all). No task, no wait_for."""
        future, gen, call_id, started, _ = self.send_now(method, params, timeout) or (
            await self._send_when_free(method, params, timeout))
        if watched is not None:
            self.notices.sent(watched)
        # CallPath awaits a tools/call's future the same way, in its own frame.
        try:
            answer = await future
        except BaseException as exc:
            raise self.unanswered(gen, call_id, method, timeout, exc) from None
        finally:
            if watched is not None:
                self.notices.returned(watched)
        return self.answered(started, method, answer)

    def send_now(self, method: str, params: bytes | None, timeout: float) -> SentCall | None:
        """The request sent at once, when nothing must be waited for first (the server is
        ready, a slot is free); None otherwise, and ``request`` waits. Not a coroutine: a
        caller with thousands of calls in flight awaits the call's future in its own frame
        (one coroutine fewer per call, each walked by the collector), and ends it with
        ``answered`` (or ``settle``) or ``unanswered`` exactly as ``request`` does."""
        if self.state is not ServerState.READY or self._inflight >= self._max_inflight:
            return None
        loop = self._loop or asyncio.get_running_loop()
        return self._send(loop, method, params, timeout, loop.time() + timeout, timeout,
                          perf_counter())

    async def _send_when_free(self, method: str, params: bytes | None,
                              timeout: float) -> SentCall:
        loop = self._loop or asyncio.get_running_loop()
        started = perf_counter()  # the loop's clock may tick in milliseconds (uvloop)
        deadline = loop.time() + timeout
        left = timeout
        if self.state is not ServerState.READY:
            await self._wait_ready(deadline, timeout, method)
            left = deadline - loop.time()
        if self._inflight >= self._max_inflight:
            await self._wait_slot(deadline, timeout, method)
            left = deadline - loop.time()
        return self._send(loop, method, params, timeout, deadline, left, started)

    def _send(self, loop: asyncio.AbstractEventLoop, method: str, params: bytes | None,
              timeout: float, deadline: float, left: float, started: float) -> SentCall:
        """Queue the SUBMIT and take a slot; ``left``: what is left of the timeout after
        any wait (0 would mean none)."""
        gen = self._gen
        if gen is None or gen.ending:
            raise ServerUnavailable(
                self._unavailable_message(), state=self.state.value,
                server=self.name, method=method, sent=False)
        future: asyncio.Future[Any] = loop.create_future()
        backstop = deadline + _WORKER_DEADLINE_FIRST_S
        call_id = gen.calls.allocate(future, backstop)
        try:
            frame = encode_submit(call_id, max(int(left * 1000), 1), method, params,
                                  self._max_frame_bytes)
        except CodecError as exc:
            gen.calls.discard(call_id)
            raise MalformedMessage(f"request cannot be sent: {exc}", server=self.name,
                                   method=method, sent=False) from None
        gen.out.push(frame)
        gen.deadlines.note(backstop)
        self._inflight += 1
        return future, gen, call_id, started, deadline

    def answered(self, started: float, method: str,
                 answer: tuple[int, int, bytes, int]) -> Reply:
        """The reply to a ``method`` request sent at ``started`` whose future gave
        ``answer``; its slot is free."""
        kind, result_type, payload, request_id = answer
        self.settle(started, request_id)
        return self.reply_of(kind, result_type, payload, method)

    def reply_of(self, kind: int, result_type: int, payload: bytes, method: str) -> Reply:
        """A RESULT frame's answer to a ``method`` request, as a ``Reply`` (an error
        response that does not decode raises ``MalformedMessage``, counted)."""
        try:
            return Reply.from_frame(kind, result_type, payload, server=self.name, method=method)
        except MalformedMessage:
            self.unreadable()
            raise

    def unreadable(self) -> None:
        """An answer the worker passed on did not decode here (the worker's scan leaves
        the strings inside a payload to this one decode): the server's protocol
        violation, counted as the worker counts the lines it cannot read."""
        self._counted_violations += 1

    def settle(self, started: float, request_id: int) -> None:
        """A request sent at ``started`` was answered (by the request with
        ``request_id``): its slot is free, its latency sampled, its record told.
        ``answered`` does this; a caller that reads the answer itself calls it instead."""
        self._release_slot()
        self.latency.add(perf_counter() - started)
        sent_as(request_id)

    def unanswered(self, gen: Generation, call_id: int, method: str, timeout: float,
                   exc: BaseException) -> BaseException:
        """What to raise for a ``method`` request sent as ``call_id`` of ``gen`` whose
        future failed with ``exc`` (its slot is freed): a timeout in this call's terms; a
        cancellation as it is, after telling the worker; anything else as it is, naming
        ``method`` (the worker's FAILURE cannot: it forwards calls without reading them)."""
        self._release_slot()
        if isinstance(exc, RequestTimeout):
            self._note_error(f"{method}: no reply within {timeout:g} s")
            error = RequestTimeout(f"no reply within {timeout:g} s", timeout_s=timeout,
                                   server=self.name, method=method)
            error.request_id = exc.request_id  # the worker's, when it ended it
            return error
        if isinstance(exc, asyncio.CancelledError):
            if gen.calls.discard(call_id) is not None and not gen.gone:
                gen.send(ch.cancel_frame(call_id))
        elif isinstance(exc, TrunklineError) and exc.method is None:
            exc.method = method
        return exc

    def _release_slot(self) -> None:
        self._inflight -= 1
        if self._slot_waiters:
            self._wake_slot_waiter()

    def _expired(self, gen: Generation, expired: list[tuple[Any, Any]]) -> None:
        """Deadlines passed: tell the worker to cancel those calls (it sends
        ``notifications/cancelled``) and resolve their callers at once. A reply that still
        comes is dropped and counted by the demux as stale."""
        if gen.gone:
            return
        for call_id, future in expired:
            gen.send(ch.cancel_frame(call_id))
            if not future.done():
                future.set_exception(RequestTimeout("deadline passed", server=self.name))

    async def _wait_ready(self, deadline: float, timeout: float, method: str) -> None:
        loop = asyncio.get_running_loop()
        waited = self.state
        note("wait_for_server", {"trunkline.server.state": waited.value})
        while self.state is not ServerState.READY:
            if not self.config.wait_ready or self.state not in _ON_ITS_WAY:
                raise ServerUnavailable(
                    self._unavailable_message(), state=self.state.value,
                    server=self.name, method=method, sent=False)
            try:
                await asyncio.wait_for(self._next_change(), deadline - loop.time())
            except TimeoutError:
                raise RequestTimeout(
                    f"server was not ready within {timeout:g} s ({self.state.value})",
                    timeout_s=timeout, server=self.name, method=method, sent=False,
                ) from None
        note("server_ready", {"trunkline.server.state": waited.value})

    async def _wait_slot(self, deadline: float, timeout: float, method: str) -> None:
        """Back-pressure: wait, within the call's own deadline, for a free slot."""
        loop = asyncio.get_running_loop()
        while self._inflight >= self._max_inflight:
            waiter: asyncio.Future[None] = loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, deadline - loop.time())
            except TimeoutError:
                raise RequestTimeout(
                    f"no free in-flight slot within {timeout:g} s "
                    f"(max_inflight={self._max_inflight})",
                    timeout_s=timeout, server=self.name, method=method, sent=False,
                ) from None
            finally:
                if not waiter.done():
                    waiter.cancel()

    def _wake_slot_waiter(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _unavailable_message(self) -> str:
        if self.reason:
            return f"server is {self.state.value}: {self.reason}"
        return f"server is {self.state.value}"

    # -- the worker process ------------------------------------------------------------

    def _spec(self, number: int) -> ch.WorkerSpec:
        block = self.settings.request_ids_per_connection
        first = 1 + (number - 1) * block
        return ch.WorkerSpec(server=self.config, host=self.settings, first_request_id=first,
                             request_id_limit=first + block,
                             proven_modern=self._proven_modern,
                             patience=self._planner.patience)

    async def _spawn(self) -> None:
        # Kept: asyncio.get_running_loop() costs a getpid() syscall, on the hot path.
        self._loop = asyncio.get_running_loop()
        self._retire(self._gen)
        self._generations += 1
        gen = Generation(self._generations, self.name, self.settings.max_frame_bytes,
                         self._expired)
        self._gen = gen
        self.report = None
        self._set_state(ServerState.STARTING)
        try:
            parent_end = await gen.launch(self._launcher, self._spec(gen.number))
        except OSError as exc:
            gen.ending = gen.gone = True
            self.reason = f"could not start the worker process: {exc}"
            self._set_state(ServerState.UNAVAILABLE)
            return
        # From here the worker exists: whatever interrupts us, it must be watched (and so
        # reaped), never left behind.
        self._unreaped.add(gen)
        gen.watcher = self._scope.spawn(self._watch(gen), name=f"watch worker {gen.number}")
        await gen.connect(parent_end, lambda data: self._on_channel_data(gen, data),
                          lambda detail: self._on_worker_gone(gen, detail),
                          lambda: self._send_watch() if gen is self._gen else None)

    def _watch_changed(self, added: list[str], removed: list[str]) -> None:
        """``ResourceWatchers``' change: sent to the worker at the end of the tick, with
        any other change of the same tick."""
        pending = self._watch_pending
        for uri in removed:
            pending[uri] = False
        for uri in added:
            pending[uri] = True
        if not self._watch_scheduled and self._loop is not None:
            self._watch_scheduled = True
            self._loop.call_soon(self._send_watch)

    def _send_watch(self) -> None:
        """The changes pending, in one frame; none while the worker's channel is backed
        up (its ``resume`` sends them): then they wait here, merged, not in the channel."""
        self._watch_scheduled = False
        pending = self._watch_pending
        gen = self._gen
        if not pending:
            return
        if gen is None or gen.gone or gen.report is None:
            pending.clear()  # a worker is sent the whole set once it first reports
            return
        if gen.writing_paused:
            return
        frame = ch.ResourceWatch(added=[uri for uri, on in pending.items() if on],
                                 removed=[uri for uri, on in pending.items() if not on])
        pending.clear()
        gen.send(frame.to_bytes())

    def _retire(self, gen: Generation | None) -> None:
        """Fold a finished generation's counters into the handle's totals."""
        if gen is not None:
            self._counted_late += gen.late_replies()
            self._counted_violations += gen.stats.protocol_violations

    async def _watch(self, gen: Generation) -> None:
        assert gen.process is not None
        code = await gen.process.wait()
        self._unreaped.discard(gen)
        self._on_worker_gone(gen, f"worker process exited (code {code})")

    # -- channel traffic ---------------------------------------------------------------

    def _on_channel_data(self, gen: Generation, data: bytes) -> None:
        if gen is not self._gen:
            return
        try:
            resolved, others = gen.demux.feed(data)
        except CodecError as exc:
            # A broken channel is a broken worker: treat it as lost.
            log.error("server %r: corrupt worker channel: %s", self.name, exc)
            gen.kill()
            return
        for future, kind, result_type, payload, request_id in resolved:
            if not future.done():
                future.set_result((kind, result_type, payload, request_id))
        for kind, body in others:
            if kind == ch.STATE:
                self._on_report(gen, StateReport.from_bytes(body))
            elif kind == ch.FAILURE:
                self._on_failure(gen, body)
            elif kind == ch.LIST_CHANGED:
                if self._on_list_changed is not None:
                    self._on_list_changed(self, ch.ListChanged.from_bytes(body).which)
            elif kind == ch.PROGRESS:
                self.notices.progress(ch.Notice.from_bytes(body).params)
            elif kind == ch.LOG:
                self._on_log_message(ch.Notice.from_bytes(body))
            elif kind == ch.RESOURCE_UPDATED:
                self.resources.deliver(ch.Notice.from_bytes(body).params)
            elif kind == ch.SERVER_REQUEST:
                self._relay.relay(gen, ch.ServerRequest.from_bytes(body))
            elif kind == ch.CREDENTIALS_ASKED:
                self._credentials.answer(gen, ch.CredentialQuestion.from_bytes(body))
            elif kind == ch.STATS:
                gen.stats = ch.Stats.from_bytes(body)

    def _on_log_message(self, notice: ch.Notice) -> None:
        stdio_modern = self.era == "modern" and not isinstance(self.config.params, HttpParams)
        if self.notices.log(notice, unstreamed_modern=stdio_modern, in_flight=self._inflight):
            return
        if self._on_log is not None:
            self._on_log(self.name, notice.params)
        else:
            log.info("server %r: %s", self.name, notice.params)

    def _on_failure(self, gen: Generation, body: bytes) -> None:
        call_id, error = ch.Failure.from_bytes(body, server=self.name)
        status, future = gen.calls.resolve(call_id)
        if status == CORR_MATCHED and future is not None and not future.done():
            future.set_exception(error)

    def _on_report(self, gen: Generation, report: StateReport) -> None:
        loop = asyncio.get_running_loop()
        if gen.report is None and self.resources:
            # The worker reads its channel now: it subscribes on its own connection to
            # the whole set, sent once (what changed before is in it).
            self._watch_pending.clear()
            gen.send(ch.ResourceWatch(added=self.resources.uris()).to_bytes())
        gen.report = report
        self.report = report
        self._proven_modern = self._proven_modern or report.proven_modern
        state = report.state
        if state in (ServerState.READY, ServerState.UNAVAILABLE) and gen.verdict_after_s is None:
            gen.verdict_after_s = loop.time() - gen.spawned_at
        if state is ServerState.READY:
            self.reason = None
            self._planner.ready()
        elif state in (ServerState.RESTARTING, ServerState.UNAVAILABLE):
            # The worker says it is ending: its calls fail now, not when its server's stop
            # ladder has run.
            self.reason = report.reason
            gen.ending = True
            gen.fail_calls(lambda: TransportLost(
                report.reason or "the server's connection ended", server=self.name,
                stderr_tail=report.stderr_tail, exit_code=report.exit_code))
        if state is not ServerState.STOPPED:
            self._set_state(state)

    # -- loss and restart --------------------------------------------------------------

    def _on_worker_gone(self, gen: Generation, detail: str) -> None:
        if gen.gone:
            return
        report = gen.report
        cause = (report.reason if report is not None and report.reason
                 and report.state is ServerState.RESTARTING else detail)
        gen.fail_calls(lambda: TransportLost(
            cause, server=self.name, stderr_tail=report.stderr_tail if report else None,
            exit_code=report.exit_code if report else None))
        gen.end()
        if self._stopping or gen is not self._gen:
            return
        if self.state is ServerState.UNAVAILABLE:
            decision = self._planner.refused(self.reason or cause,
                                             retry_later=bool(report and report.retry_later))
        else:
            decision = self._planner.lost(asyncio.get_running_loop().time(), cause)
        self._supervision = self._scope.spawn(self._carry_out(decision),
                                              name=f"supervise {self.name}")

    async def _carry_out(self, decision: Decision) -> None:
        """Decided by the planner, done here."""
        if isinstance(decision, StayDown):
            return
        self.decision = decision
        self.reason = decision.reason
        if isinstance(decision, RestartIn):
            self._set_state(ServerState.RESTARTING)
        else:  # CoolDown, ReprobeIn: unavailable meanwhile
            self._set_state(ServerState.UNAVAILABLE)
        await asyncio.sleep(decision.delay_s)
        self.restarts += 1
        await self._spawn()

    async def _end_supervision(self) -> None:
        task, self._supervision = self._supervision, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    # -- state changes -----------------------------------------------------------------

    def note_listing(self, error: str | None) -> None:
        """The catalog keeper's word on this server's last listing: why it failed (also
        the last error), or None when it succeeded."""
        self.listing_error = error
        if error is not None:
            self._note_error(error)

    def _note_error(self, error: str) -> None:
        self.last_error, self.last_error_at = error, time.time()

    def _set_state(self, state: ServerState) -> None:
        """A new state, or a down one with a new reason (what the planner decided: when
        the next attempt comes, how long it waits), is news for the host."""
        previous, self.state = self.state, state
        down = state in (ServerState.RESTARTING, ServerState.UNAVAILABLE)
        news = state is not previous or (down and self.reason != self._reason_told)
        self._reason_told = self.reason
        if down and self.reason and news:
            self._note_error(self.reason)
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)
        if self._on_state is not None and news:
            self._on_state(self)

    def _next_change(self) -> asyncio.Future[None]:
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return asyncio.shield(self._changed)


__all__ = ["CoolDown", "ReprobeIn", "ServerStatus", "ServerWarning", "WorkerHandle"]
