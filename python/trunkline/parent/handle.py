"""The parent's side of one server: its state, its workers, their restarts and stop.

A ``WorkerHandle`` follows one configured server through its workers (``Generation``):
it starts each one, follows its state reports, dispatches the frames it sends (one
handler per frame kind: ``_frames``), and when a worker is gone asks the
``RestartPlanner`` what to do and does it; stopping runs the worker's stop ladder. The
calls routed to the current worker are its ``CallSlots`` (``slots``). Progress and a
call's log messages go to ``CallNotices`` (other log messages to the host's ``on_log``),
a legacy server's own requests to the ``ServerRequestRelay``.

Each worker generation gets its own block of JSON-RPC ids, so no id is ever used twice
for one server during the host's lifetime, and inherits what earlier ones showed (a
server that proved modern never gets ``initialize`` again; one that stayed silent gets
longer deadlines: the planner's ``patience``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .. import channel as ch
from .._codec import CORR_MATCHED, CodecError
from ..channel import ServerState, StateReport
from ..errors import ServerUnavailable, TransportLost
from ..loop.tasks import TaskScope, gather_all
from ..params import HttpParams
from ..protocol.mrtr import InputHandler
from ..protocol.tasks import TASKS_EXTENSION, related_task
from ..settings import HostSettings, ServerConfig
from .call_notices import CallNotices
from .call_slots import ON_ITS_WAY, CallSlots
from .credentials import CredentialDesk, CredentialSlots
from .generation import Generation
from .latency import LatencyWindow
from .launchers import Launcher, SpawnLauncher
from .relay import ServerRequestRelay
from .resource_watch import ResourceWatchers
from .restarts import CoolDown, Decision, ReprobeIn, RestartIn, RestartPlanner, StayDown
from .status import ServerStatus, ServerWarning
from .tasks import ServerTasks

if TYPE_CHECKING:
    from ..auth import OAuthClient

log = logging.getLogger("trunkline.supervisor")


class WorkerHandle:
    """One configured server from its first worker to its stop: its state, its current
    worker, its restarts; its calls are its ``slots``'."""

    def __init__(self, config: ServerConfig, settings: HostSettings, rng: random.Random,
                 *, on_state: Callable[[WorkerHandle], None] | None = None,
                 on_list_changed: Callable[[WorkerHandle, str], None] | None = None,
                 on_log: Callable[[str, dict[str, Any]], None] | None = None,
                 input_handlers: Mapping[str, InputHandler] | None = None,
                 launcher: Launcher | None = None, oauth: OAuthClient | None = None,
                 credential_slots: CredentialSlots | None = None) -> None:
        """``oauth``: the host's OAuth client, which answers this server's credential
        questions (an HTTP server's 401/403); ``credential_slots``: the host's identities
        by slot, whose own credentials a call made for one goes with when the server's
        ``credentials`` mode is not ``"shared"``."""
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
        self._relay = ServerRequestRelay(input_handlers or {}, self._call_handler,
                                         config.roots)
        #: The host's identities by slot, for a server reached with each user's own
        #: credentials (None: every call goes with the host's, slot 0).
        self.user_slots = credential_slots if config.per_user_credentials else None
        self._credentials = CredentialDesk(
            oauth, config.name,
            config.params.url if isinstance(config.params, HttpParams) else "",
            legacy_fallbacks=config.allow_legacy, slots=self.user_slots)
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
        self._gen: Generation | None = None
        self._generations = 0
        self._unreaped: set[Generation] = set()
        self._supervision: asyncio.Task[Any] | None = None
        self._proven_modern = False
        self._counted_late = 0
        self._counted_violations = 0
        self._changed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        #: The calls routed to the current worker.
        self.slots = CallSlots(self)
        #: The server's tasks the host follows (``parent.tasks``).
        self.tasks = ServerTasks(self)
        #: How this server runs tool calls as tasks, decided when it is ready: ``"modern"``
        #: (both sides declared ``io.modelcontextprotocol/tasks``), ``"legacy"`` (its
        #: ``tasks.requests.tools.call``), or None.
        self.task_mode: str | None = None
        #: The extensions declared to the modern server on every request (its stamped
        #: ``clientCapabilities.extensions``): the host's own and those negotiated.
        self.extensions: dict[str, Any] = {}
        #: Each frame kind a worker sends, and what is done with it.
        self._frames: dict[int, Callable[[Generation, bytes], None]] = {
            ch.STATE: self._state_frame, ch.FAILURE: self._failure_frame,
            ch.LIST_CHANGED: self._list_changed_frame, ch.PROGRESS: self._progress_frame,
            ch.LOG: self._log_frame, ch.RESOURCE_UPDATED: self._resource_updated_frame,
            ch.SERVER_REQUEST: self._server_request_frame,
            ch.CREDENTIALS_ASKED: self._credentials_asked_frame, ch.STATS: self._stats_frame,
            ch.TASK_REPORT: self._task_report_frame,
        }

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> ServerStatus:
        """Start the worker and wait until the server is ready or unavailable."""
        await self._scope.open()
        await self._spawn()
        await self.wait_settled()
        return self.status()

    async def wait_settled(self) -> None:
        while self.state in ON_ITS_WAY:
            await self.next_change()

    async def retry(self) -> ServerStatus:
        """An explicit retry of an unavailable server: a fresh restart budget, now."""
        if self.state is not ServerState.UNAVAILABLE:
            return self.status()
        self._planner.reset()
        await self._end_supervision()
        await self._spawn()
        await self.wait_settled()
        return self.status()

    async def restart(self, reason: str) -> ServerStatus:
        """Stop the current worker and start a new one (the operator's restart): a fresh
        restart budget, the era negotiated from scratch. Calls in flight through the old
        worker fail (``TransportLost``, retried as their rules say); new ones wait for the
        new worker within their timeout, as during any restart."""
        if self._stopping:
            return self.status()
        self._planner.reset()
        self._proven_modern = False
        await self._end_supervision()
        gen = self._gen
        self.reason = reason
        self._set_state(ServerState.RESTARTING)
        if gen is not None and not gen.gone:
            gen.ending = True
            gen.fail_calls(lambda: TransportLost(reason, server=self.name))
            gen.send(ch.stop_frame())
            # Its exit is this restart's, not a loss for the planner to answer.
            self._stopping = True
            try:
                await gen.reap(self.settings.stop_timeout_s)
                self._on_worker_gone(gen, reason)
            finally:
                self._stopping = False
        await self._spawn()
        await self.wait_settled()
        return self.status()

    def retire(self, reason: str) -> None:
        """The server is leaving (removed, or replaced by a new definition): from now on
        it is ``draining``, a new call to it fails at once (``ServerUnavailable`` saying
        ``reason``), a call in flight goes on (``drain``), and a worker lost meanwhile is
        not started again."""
        if self._stopping:
            return
        self._stopping = True
        self.reason = reason
        self._set_state(ServerState.DRAINING)

    async def drain(self, timeout_s: float) -> bool:
        """Once retired: wait up to ``timeout_s`` for the calls in flight to finish; those
        still in flight then fail (``ServerUnavailable``: never left waiting). Whether
        every call finished by itself."""
        finished = await self.slots.drained(timeout_s)
        gen = self._gen
        if gen is not None and not gen.gone:
            gen.ending = True
            reason = self.reason or "the server is stopping"
            gen.fail_calls(lambda: ServerUnavailable(
                f"{reason}: the call did not finish within the drain timeout "
                f"({timeout_s:g} s)", state=ServerState.STOPPED.value, server=self.name,
                sent=True))
        return finished

    def detach(self) -> None:
        """Tell the host nothing more of this server (a replaced definition: its name is
        the new one's now); it still drains and stops."""
        self._on_state = None
        self._on_list_changed = None

    async def aclose(self) -> None:
        """Stop the worker (which stops its server), bounded in time. Idempotent."""
        self._stopping = True
        self.tasks.fail_all(lambda: ServerUnavailable(
            "the host stopped following the server's tasks: it is stopping",
            state="stopped", server=self.name))
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
            in_flight=self.slots.in_flight,
            late_replies=late,
            protocol_violations=violations,
            time_to_verdict_s=gen.verdict_after_s if gen else None,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
            listing_error=self.listing_error,
        )

    @property
    def current(self) -> Generation | None:
        """The current worker (None before the first), which new calls go to unless it
        is ending."""
        return self._gen

    @property
    def latency(self) -> LatencyWindow:
        """The latencies of this server's recent calls (``Host.call_latency``)."""
        return self.slots.latency

    def unavailable_message(self) -> str:
        """Why a call cannot be sent now: the state, and its reason if one is known."""
        if self.reason:
            return f"server is {self.state.value}: {self.reason}"
        return f"server is {self.state.value}"

    def unreadable(self) -> None:
        """An answer the worker passed on did not decode here (the worker's scan leaves
        the strings inside a payload to this one decode): the server's protocol
        violation, counted as the worker counts the lines it cannot read."""
        self._counted_violations += 1

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
        self._loop = self.slots.loop = asyncio.get_running_loop()
        self._retire(self._gen)
        self._generations += 1
        gen = Generation(self._generations, self.name, self.settings.max_frame_bytes,
                         self.slots.expired)
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
        frames = self._frames
        for kind, body in others:
            handler = frames.get(kind)
            if handler is not None:  # a kind this side does not know is left unread
                handler(gen, body)

    # Each frame kind's handler (``_frames``), called with the worker it came from.

    def _list_changed_frame(self, gen: Generation, body: bytes) -> None:
        if self._on_list_changed is not None:
            self._on_list_changed(self, ch.ListChanged.from_bytes(body).which)

    def _progress_frame(self, gen: Generation, body: bytes) -> None:
        self.notices.progress(ch.Notice.from_bytes(body).params)

    def _resource_updated_frame(self, gen: Generation, body: bytes) -> None:
        self.resources.deliver(ch.Notice.from_bytes(body).params)

    def _server_request_frame(self, gen: Generation, body: bytes) -> None:
        self._relay.relay(gen, ch.ServerRequest.from_bytes(body))

    def _call_handler(self, request: ch.ServerRequest) -> InputHandler | None:
        """The handler of the call a server's own request belongs to, if any: one about a
        task (``related-task``) is that task's call's, whatever else is in flight; any
        other is the call ``CallNotices`` finds."""
        task_id = related_task(request.params)
        if task_id is not None:
            return self.tasks.handler_for(task_id, request.method)
        return self.notices.handler_for(request, self.slots.in_flight)

    def _credentials_asked_frame(self, gen: Generation, body: bytes) -> None:
        self._credentials.answer(gen, ch.CredentialQuestion.from_bytes(body))

    def _task_report_frame(self, gen: Generation, body: bytes) -> None:
        self.tasks.reported(*ch.TaskReport.from_bytes(body))

    def _stats_frame(self, gen: Generation, body: bytes) -> None:
        gen.stats = ch.Stats.from_bytes(body)

    def _log_frame(self, gen: Generation, body: bytes) -> None:
        notice = ch.Notice.from_bytes(body)
        stdio_modern = self.era == "modern" and not isinstance(self.config.params, HttpParams)
        if self.notices.log(notice, unstreamed_modern=stdio_modern,
                            in_flight=self.slots.in_flight):
            return
        if self._on_log is not None:
            self._on_log(self.name, notice.params)
        else:
            log.info("server %r: %s", self.name, notice.params)

    def _failure_frame(self, gen: Generation, body: bytes) -> None:
        call_id, error = ch.Failure.from_bytes(body, server=self.name)
        status, future = gen.calls.resolve(call_id)
        if status == CORR_MATCHED and isinstance(future, asyncio.Future) and not future.done():
            future.set_exception(error)

    def _state_frame(self, gen: Generation, body: bytes) -> None:
        report = StateReport.from_bytes(body)
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
            if self.state is not ServerState.DRAINING:
                self.reason = None
            self._planner.ready()
            self.task_mode = _task_mode(report, self.settings.extensions)
            self.extensions = _declared_extensions(report, self.settings)
        elif state in (ServerState.RESTARTING, ServerState.UNAVAILABLE):
            # The worker says it is ending: its calls fail now, not when its server's stop
            # ladder has run.
            self.reason = report.reason
            gen.ending = True
            gen.fail_calls(lambda: TransportLost(
                report.reason or "the server's connection ended", server=self.name,
                stderr_tail=report.stderr_tail, exit_code=report.exit_code))
        if state is not ServerState.STOPPED and self.state is not ServerState.DRAINING:
            self._set_state(state)
        if state is ServerState.READY and self.tasks:
            self.tasks.resume()  # a new worker: the tasks still followed go on on it

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

    def send_when_ready(self, frame: bytes) -> bool:
        """Send ``frame`` to the current worker if its server is ready (a frame about
        the server's state, such as a task to follow, waits for the next one)."""
        gen = self._gen
        if gen is None or gen.gone or gen.ending or self.state is not ServerState.READY:
            return False
        gen.send(frame)
        return True

    def forget_credentials(self, slots: list[int]) -> None:
        """Tell the current worker to drop what it holds for these credential slots (sent
        before any later SUBMIT, so none of those can go with it)."""
        gen = self._gen
        if self.user_slots is not None and gen is not None and not gen.gone:
            gen.send(ch.CredentialsForgotten(slots).to_bytes())

    def spawn(self, coro: Any, name: str) -> None:
        """Run ``coro`` in this server's scope (it ends with the server's handle)."""
        self._scope.spawn(coro, name=name)

    def note_listing(self, error: str | None) -> None:
        """The catalog keeper's word on this server's last listing: why it failed (also
        the last error), or None when it succeeded."""
        self.listing_error = error
        if error is not None:
            self.note_error(error)

    def note_error(self, error: str) -> None:
        """What last went wrong (``ServerStatus.last_error``), and when."""
        self.last_error, self.last_error_at = error, time.time()

    def _set_state(self, state: ServerState) -> None:
        """A new state, or a down one with a new reason (what the planner decided: when
        the next attempt comes, how long it waits), is news for the host."""
        previous, self.state = self.state, state
        down = state in (ServerState.RESTARTING, ServerState.UNAVAILABLE)
        news = state is not previous or (down and self.reason != self._reason_told)
        self._reason_told = self.reason
        if down and self.reason and news:
            self.note_error(self.reason)
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)
        if news:
            self.announce()

    def announce(self) -> None:
        """Tell the host's watcher (``on_state``) the server's state. A watcher that fails
        is logged and the server goes on: its transition is made whatever the watcher
        does (a failure here half-way through one would leave its waiters waiting)."""
        if self._on_state is None:
            return
        try:
            self._on_state(self)
        except Exception:  # a watcher's failure is not the server's
            log.exception("server %r: the watcher of its state failed", self.name)

    def next_change(self) -> asyncio.Future[None]:
        """Done at the server's next change of state (shielded: a waiter that gives up
        leaves it for the others)."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return asyncio.shield(self._changed)


def _declared_extensions(report: StateReport, settings: HostSettings) -> dict[str, Any]:
    """What a ready modern server is told the host implements, as the worker stamps it
    (``ClientIdentity.modern_meta``, ``Peer.negotiated``)."""
    if report.era != "modern":
        return {}
    own = settings.identity.capabilities.get("extensions")
    declared = dict(own) if isinstance(own, Mapping) else {}
    offered = (report.capabilities or {}).get("extensions")
    if isinstance(offered, dict):
        declared.update({name: {} for name in settings.extensions if name in offered})
    return declared


def _task_mode(report: StateReport, extensions: tuple[str, ...]) -> str | None:
    """How a ready server runs tool calls as tasks, if it does and the host follows
    tasks (``HostSettings.extensions``)."""
    if TASKS_EXTENSION not in extensions:
        return None
    capabilities = report.capabilities or {}
    if report.era == "modern":
        declared = capabilities.get("extensions")
        return "modern" if isinstance(declared, dict) and TASKS_EXTENSION in declared \
            else None
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return "legacy" if isinstance(tools, dict) and isinstance(tools.get("call"), dict) \
        else None


__all__ = ["CoolDown", "ReprobeIn", "ServerStatus", "ServerWarning", "WorkerHandle"]
