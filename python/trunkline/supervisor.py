"""The supervisor: one worker process per server, watched, restarted, and never leaked.

Each configured server gets a ``WorkerHandle`` in the parent. The handle spawns the worker
(``python -m trunkline.worker``, a fresh interpreter: spawn, never fork of a threaded
parent), owns the duplex channel to it, routes calls through it, and follows the worker's
state reports. When the worker or its server dies, every call in flight fails at once with
``TransportLost`` (with the server's stderr tail), the server's process group is killed in
case the worker could not do it, and the handle restarts the pair with capped exponential
backoff and full jitter, within an intensity limit (Erlang/OTP style: at most
``max_restarts`` in ``window_s``, then unavailable until ``retry()`` or a cool-down).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import _codec
from . import channel as ch
from .batching import TickBatcher
from .channel import ServerState, StateReport
from .deadlines import DeadlineTimer
from .errors import (
    AuthenticationFailed,
    ConfigurationError,
    HttpStatusError,
    MalformedMessage,
    RequestTimeout,
    ServerUnavailable,
    StreamBroken,
    TransportLost,
    TrunklineError,
)
from .peer import Reply
from .protocol.era import NegotiationConfig
from .protocol.identity import ClientIdentity
from .protocol.versions import INTERNAL_ERROR
from .transports.http_params import HttpParams
from .transports.stdio import StdioParams

log = logging.getLogger("trunkline.supervisor")

_CHANNEL_BUFFER_BYTES = 4 << 20

_RESULT_TYPES: dict[int, str | None] = {0: None, 1: "complete", 2: "input_required"}


@dataclass(frozen=True)
class RestartPolicy:
    """Capped exponential backoff with full jitter, and a restart intensity limit."""

    base_s: float = 0.05
    factor: float = 2.0
    cap_s: float = 5.0
    max_restarts: int = 5
    window_s: float = 30.0
    #: After the intensity limit trips, the server stays unavailable this long, then one
    #: fresh attempt is made (``retry()`` makes it at once).
    cool_down_s: float = 60.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(cap, base * factor**attempt)]."""
        ceiling = min(self.cap_s, self.base_s * self.factor ** max(attempt, 0))
        return rng.uniform(0.0, ceiling)


#: ``(server, method, params) -> result``: the host answering a legacy server's request.
ServerRequestCallback = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ServerConfig:
    name: str
    params: StdioParams | HttpParams
    allow_legacy: bool = False
    #: Bound on calls in flight to this server; beyond it callers wait (within their
    #: timeout) instead of growing memory without limit.
    max_inflight: int = 1024
    #: While the server (re)starts: wait for it within the call's timeout (True), or
    #: fail at once with ServerUnavailable (False).
    wait_ready: bool = True


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: ServerState
    era: str | None = None
    version: str | None = None
    capabilities: dict[str, Any] | None = None
    server_info: dict[str, Any] | None = None
    reason: str | None = None
    evidence: tuple[str, ...] = ()
    stderr_tail: str | None = None
    restarts: int = 0
    worker_pid: int | None = None
    server_pid: int | None = None


@dataclass(frozen=True)
class HostSettings:
    """What every worker of one host shares."""

    identity: ClientIdentity = field(default_factory=ClientIdentity)
    negotiation: NegotiationConfig = field(default_factory=NegotiationConfig)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    max_line_bytes: int = _codec.DEFAULT_MAX_LINE_BYTES
    #: Largest channel frame: a reply of ``max_line_bytes`` plus its frame head must fit.
    max_frame_bytes: int = _codec.DEFAULT_MAX_FRAME_BYTES
    #: How long a stopping worker gets for its own shutdown ladder before it is killed.
    stop_timeout_s: float = 6.0
    #: What each modern server's listen stream asks to be told (``subscriptions/listen``
    #: filter); only the lists a server says it announces are asked for.
    listen: Mapping[str, bool] = field(
        default_factory=lambda: {"toolsListChanged": True})
    #: Server-initiated requests (legacy era) the host answers, e.g.
    #: ``"elicitation/create"``; the worker refuses the rest itself.
    answered_requests: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # A reply line becomes one RESULT frame: the frame limit must hold the line limit.
        if self.max_frame_bytes < self.max_line_bytes + 64:
            raise ConfigurationError(
                f"max_frame_bytes ({self.max_frame_bytes}) must exceed max_line_bytes "
                f"({self.max_line_bytes}) by at least 64 bytes of frame head"
            )


def _transport_spec(params: StdioParams | HttpParams) -> dict[str, Any]:
    if isinstance(params, HttpParams):
        return {"type": "http", "url": params.url, "headers": dict(params.headers),
                "verify_tls": params.verify_tls, "max_connections": params.max_connections}
    return {"type": "stdio", "command": params.command, "args": list(params.args),
            "env": dict(params.env), "cwd": params.cwd}


class _ChannelProtocol(asyncio.Protocol):
    def __init__(self, handle: WorkerHandle, generation: int) -> None:
        self._handle = handle
        self._generation = generation

    def data_received(self, data: bytes) -> None:
        self._handle._on_channel_data(self._generation, data)

    def eof_received(self) -> bool:
        self._handle._on_worker_gone(self._generation, "worker closed its channel")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._handle._on_worker_gone(self._generation, "worker channel lost")


class _Generation:
    """One worker process and everything that dies with it."""

    def __init__(self, number: int, max_frame_bytes: int) -> None:
        self.number = number
        self.calls: _codec.Correlator[asyncio.Future[Any]] = _codec.Correlator()
        self.demux = _codec.ResultDemux(self.calls, max_frame_bytes)
        self.process: asyncio.subprocess.Process | None = None
        self.channel: asyncio.Transport | None = None
        self.report: StateReport | None = None
        self.out: TickBatcher | None = None
        self.gone = False
        self.watcher: asyncio.Task[None] | None = None
        self.deadlines: DeadlineTimer | None = None
        #: Host answers being relayed to this worker's server requests.
        self.tasks: set[asyncio.Task[None]] = set()


class WorkerHandle:
    """The parent's side of one server: its worker, its channel, its calls, its state."""

    def __init__(self, config: ServerConfig, settings: HostSettings, rng: random.Random,
                 on_state: Callable[[WorkerHandle], None] | None = None,
                 on_list_changed: Callable[[WorkerHandle, str], None] | None = None,
                 on_log: Callable[[str, dict[str, Any]], None] | None = None,
                 on_server_request: ServerRequestCallback | None = None) -> None:
        self.config = config
        self._on_state = on_state
        self._on_list_changed = on_list_changed
        self._on_log = on_log
        self._on_server_request = on_server_request
        self._progress: dict[str, Callable[[dict[str, Any]], None]] = {}
        self._progress_seq = 0
        self.dropped_progress = 0
        self.settings = settings
        self._rng = rng
        self.state = ServerState.STARTING
        self.report: StateReport | None = None
        self.reason: str | None = None
        self.restarts = 0
        self._restart_times: collections.deque[float] = collections.deque()
        self._gen: _Generation | None = None
        self._unreaped: set[_Generation] = set()
        self._generation_counter = 0
        self._max_inflight = config.max_inflight
        self._max_frame_bytes = settings.max_frame_bytes
        self._inflight = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._changed: asyncio.Future[None] | None = None
        self._supervise_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._lost_detail: str | None = None

    @property
    def name(self) -> str:
        return self.config.name

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> ServerStatus:
        """Start the worker and wait until the server is ready or unavailable."""
        await self._spawn()
        await self.wait_settled()
        return self.status()

    async def wait_settled(self) -> None:
        while self.state in (ServerState.STARTING, ServerState.NEGOTIATING,
                             ServerState.RESTARTING):
            await self._next_change()

    async def retry(self) -> ServerStatus:
        """An explicit retry of an unavailable server: fresh intensity budget."""
        if self.state is not ServerState.UNAVAILABLE:
            return self.status()
        self._restart_times.clear()
        self._cancel_supervision()
        await self._spawn()
        await self.wait_settled()
        return self.status()

    async def aclose(self) -> None:
        """Stop the worker (which stops its server), bounded in time. Idempotent."""
        self._stopping = True
        task = self._cancel_supervision()
        if task is not None:
            # Let a restart that was spawning a worker finish unwinding first, so the
            # worker it may have created is the one stopped below, not an orphan.
            await asyncio.gather(task, return_exceptions=True)
        gen = self._gen
        if gen is not None and not gen.gone:
            self._send(gen, ch.frame(ch.STOP))
        # Reap every worker process this handle started that has not been reaped yet,
        # including ones already gone from the channel but still exiting: none may
        # outlive the host (or be left for a closed loop to reap).
        await asyncio.gather(*(self._reap(g, self.settings.stop_timeout_s)
                               for g in list(self._unreaped)))
        self._set_state(ServerState.STOPPED)

    @property
    def era(self) -> str | None:
        """The era of the current worker's server (``"modern"``/``"legacy"``), without
        building a whole ``status()``: read on every call."""
        return self.report.era if self.report is not None else None

    def status(self) -> ServerStatus:
        r = self.report
        gen = self._gen
        return ServerStatus(
            name=self.name,
            state=self.state,
            era=r.era if r else None,
            version=r.version if r else None,
            capabilities=r.capabilities if r else None,
            server_info=r.server_info if r else None,
            reason=self.reason,
            evidence=r.evidence if r else (),
            stderr_tail=r.stderr_tail if r else None,
            restarts=self.restarts,
            worker_pid=gen.process.pid if gen and gen.process else None,
            server_pid=r.server_pid if r else None,
        )

    # -- calls -------------------------------------------------------------------------

    async def request(self, method: str, params: bytes | None, *, timeout: float) -> Reply:
        """Send one request through the worker; the hot path of the whole host.

        Per call: one future, one correlator entry, one SUBMIT frame queued for the
        tick's single channel write, one timer for the deadline. No task, no wait_for."""
        loop = self._loop or asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.state is not ServerState.READY:
            await self._wait_ready(deadline, timeout, method)
        if self._inflight >= self._max_inflight:
            await self._wait_slot(deadline, timeout, method)
        self._inflight += 1
        try:
            gen = self._gen
            if gen is None or gen.gone:
                raise _not_sent(ServerUnavailable(
                    self._unavailable_message(), state=self.state.value,
                    server=self.name, method=method))
            future: asyncio.Future[Any] = loop.create_future()
            call_id = gen.calls.allocate(future, deadline)
            try:
                frame = _codec.encode_submit(call_id, int(timeout * 1000), method, params,
                                             self._max_frame_bytes)
            except _codec.CodecError as exc:
                gen.calls.discard(call_id)
                raise MalformedMessage(f"request cannot be sent: {exc}", server=self.name,
                                       method=method) from None
            gen.out.push(frame)  # type: ignore[union-attr]  # set before READY
            gen.deadlines.note(deadline)  # type: ignore[union-attr]  # set before READY
            try:
                kind, result_type, payload = await future
            except RequestTimeout:
                raise RequestTimeout(
                    f"no reply within {timeout:g} s", timeout_s=timeout,
                    server=self.name, method=method) from None
            except asyncio.CancelledError:
                if gen.calls.discard(call_id) is not None and not gen.gone:
                    self._send(gen, ch.cancel_frame(call_id))
                raise
        finally:
            self._inflight -= 1
            if self._slot_waiters:
                self._wake_slot_waiter()
        if kind == _codec.KIND_RESULT:
            return Reply(payload, _RESULT_TYPES.get(result_type, "other"))
        return _error_reply(payload, self.name, method)

    def _expired(self, gen: _Generation, expired: list[tuple[Any, Any]]) -> None:
        """Deadlines passed: tell the worker to cancel those calls (it sends
        ``notifications/cancelled``) and resolve their callers at once. A reply that still
        comes is dropped and counted by the demux as stale."""
        if gen.gone:
            return
        for call_id, future in expired:
            self._send(gen, ch.cancel_frame(call_id))
            if not future.done():
                future.set_exception(RequestTimeout("deadline passed", server=self.name))

    async def _wait_ready(self, deadline: float, timeout: float, method: str) -> None:
        loop = asyncio.get_running_loop()
        while self.state is not ServerState.READY:
            if not self.config.wait_ready or self.state in (
                ServerState.UNAVAILABLE, ServerState.STOPPED,
            ):
                raise _not_sent(ServerUnavailable(
                    self._unavailable_message(), state=self.state.value,
                    server=self.name, method=method,
                ))
            try:
                await asyncio.wait_for(self._next_change(), deadline - loop.time())
            except asyncio.TimeoutError:
                raise _not_sent(RequestTimeout(
                    f"server was not ready within {timeout:g} s ({self.state.value})",
                    timeout_s=timeout, server=self.name, method=method,
                )) from None

    async def _wait_slot(self, deadline: float, timeout: float, method: str) -> None:
        """Back-pressure: wait, within the call's own deadline, for a free slot."""
        loop = asyncio.get_running_loop()
        while self._inflight >= self._max_inflight:
            waiter: asyncio.Future[None] = loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, deadline - loop.time())
            except asyncio.TimeoutError:
                raise _not_sent(RequestTimeout(
                    f"no free in-flight slot within {timeout:g} s "
                    f"(max_inflight={self._max_inflight})",
                    timeout_s=timeout, server=self.name, method=method,
                )) from None
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

    def _spec(self) -> bytes:
        s, c = self.settings, self.config
        ident, neg = s.identity, s.negotiation
        return orjson.dumps({
            "channel_version": ch.CHANNEL_VERSION,
            "name": c.name,
            "transport": _transport_spec(c.params),
            "allow_legacy": c.allow_legacy,
            "identity": {"name": ident.name, "version": ident.version, "title": ident.title,
                         "capabilities": dict(ident.capabilities)},
            "negotiation": {
                "modern_versions": list(neg.modern_versions),
                "legacy_versions": list(neg.legacy_versions),
                "discover_timeout_s": neg.discover_timeout_s,
                "legacy_probe_timeout_s": neg.legacy_probe_timeout_s,
                "max_discover_attempts": neg.max_discover_attempts,
            },
            "max_line_bytes": s.max_line_bytes,
            "max_frame_bytes": s.max_frame_bytes,
            "listen": dict(s.listen),
            "answered_requests": sorted(s.answered_requests),
        })

    async def _spawn(self) -> None:
        # Kept: asyncio.get_running_loop() costs a getpid() syscall, on the hot path.
        self._loop = loop = asyncio.get_running_loop()
        self._generation_counter += 1
        gen = _Generation(self._generation_counter, self.settings.max_frame_bytes)
        self._gen = gen
        self.report = None
        self._lost_detail = None
        self._set_state(ServerState.STARTING)
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for sock in (parent_sock, child_sock):
            # Room for many 64 KiB results per wake-up in both directions.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _CHANNEL_BUFFER_BYTES)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _CHANNEL_BUFFER_BYTES)
        try:
            gen.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "trunkline.worker", str(child_sock.fileno()),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                pass_fds=(child_sock.fileno(),),
                # Its own session: a Ctrl-C aimed at the host reaches the host only, and
                # the host stops its workers in order.
                start_new_session=True,
            )
        except OSError as exc:
            parent_sock.close()
            gen.gone = True
            self.reason = f"could not start the worker process: {exc}"
            self._set_state(ServerState.UNAVAILABLE)
            return
        finally:
            child_sock.close()  # the worker holds its own copy now
        assert gen.process.stdin is not None
        gen.process.stdin.write(self._spec())
        gen.process.stdin.close()
        gen.out = TickBatcher(loop)
        gen.deadlines = DeadlineTimer(loop, gen.calls, lambda expired: self._expired(gen, expired))
        # From here the worker exists: whatever interrupts us, it must be watched (and so
        # reaped), never left behind.
        self._unreaped.add(gen)
        gen.watcher = loop.create_task(self._watch(gen))
        try:
            gen.channel, _ = await loop.connect_accepted_socket(
                lambda: _ChannelProtocol(self, gen.number), sock=parent_sock)
        except BaseException:
            parent_sock.close()
            with contextlib.suppress(ProcessLookupError):
                gen.process.kill()
            raise
        gen.out.attach(gen.channel)

    async def _watch(self, gen: _Generation) -> None:
        assert gen.process is not None
        code = await gen.process.wait()
        self._unreaped.discard(gen)
        self._on_worker_gone(gen.number, f"worker process exited (code {code})")

    async def _reap(self, gen: _Generation, timeout: float) -> None:
        proc = gen.process
        if proc is None:
            return
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if gen.watcher is not None:
            await asyncio.gather(gen.watcher, return_exceptions=True)
        self._on_worker_gone(gen.number, "worker stopped")

    # -- channel traffic ---------------------------------------------------------------

    def _send(self, gen: _Generation, data: bytes) -> None:
        if gen.out is not None:
            gen.out.push(data)

    def _on_channel_data(self, number: int, data: bytes) -> None:
        gen = self._gen
        if gen is None or gen.number != number:
            return
        try:
            resolved, others = gen.demux.feed(data)
        except _codec.CodecError as exc:
            # A broken channel is a broken worker: treat it as lost.
            log.error("server %r: corrupt worker channel: %s", self.name, exc)
            if gen.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    gen.process.kill()
            return
        for future, kind, result_type, payload in resolved:
            if not future.done():
                future.set_result((kind, result_type, payload))
        for kind, body in others:
            if kind == ch.STATE:
                self._on_report(gen, StateReport.from_body(body))
            elif kind == ch.FAILURE:
                self._on_failure(gen, body)
            elif kind == ch.TOOLS:
                changed = orjson.loads(body).get("changed")
                if self._on_list_changed is not None and isinstance(changed, str):
                    self._on_list_changed(self, changed)
            elif kind == ch.PROGRESS:
                self._on_progress(orjson.loads(body))
            elif kind == ch.LOG:
                params = orjson.loads(body)
                if self._on_log is not None:
                    self._on_log(self.name, params)
                else:
                    log.info("server %r: %s", self.name, params)
            elif kind == ch.SERVER_REQUEST:
                self._answer_server_request(gen, orjson.loads(body))

    def _answer_server_request(self, gen: _Generation, request: dict[str, Any]) -> None:
        """Relay a legacy server's request to the host and its answer back to the same
        worker generation (a restarted worker's server never asked)."""
        task = asyncio.get_running_loop().create_task(self._relay(gen, request))
        gen.tasks.add(task)
        task.add_done_callback(gen.tasks.discard)

    async def _relay(self, gen: _Generation, request: dict[str, Any]) -> None:
        key = request.get("key")
        answer: dict[str, Any]
        try:
            if self._on_server_request is None:
                raise LookupError("the host answers no server requests")
            result = await self._on_server_request(
                self.name, str(request.get("method")), request.get("params") or {})
            answer = {"key": key, "result": result}
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the host's handler failed: the server is told why
            answer = {"key": key, "error": {"code": INTERNAL_ERROR,
                                            "message": str(exc)}}
        if self._gen is gen and not gen.gone:
            self._send(gen, ch.json_frame(ch.SERVER_ANSWER, answer))

    # -- progress ------------------------------------------------------------------------

    def watch_progress(self, callback: Callable[[dict[str, Any]], None]) -> str:
        """Register a progress callback; returns the token to put in the request's
        ``_meta.progressToken``. Tokens are unique per handle, so progress for one call
        never reaches another (spec digest §23.13)."""
        self._progress_seq += 1
        token = f"tl-{self._progress_seq}"
        self._progress[token] = callback
        return token

    def unwatch_progress(self, token: str) -> None:
        self._progress.pop(token, None)

    def _on_progress(self, params: Any) -> None:
        token = params.get("progressToken") if isinstance(params, dict) else None
        callback = self._progress.get(token) if isinstance(token, (str, int)) else None
        if callback is None:
            self.dropped_progress += 1  # for no call of ours (or one already finished)
            return
        try:
            callback(params)
        except Exception:  # a host callback must not break the channel
            log.exception("server %r: progress callback failed", self.name)

    def _on_report(self, gen: _Generation, report: StateReport) -> None:
        gen.report = report
        self.report = report
        if report.state is ServerState.RESTARTING:
            # The server died; the worker is about to exit. The restart decision is made
            # when the worker is gone, with this report as the cause.
            self._lost_detail = report.reason
        elif report.state is ServerState.UNAVAILABLE:
            self.reason = report.reason
        elif report.state is ServerState.READY:
            self.reason = None
        if report.state is not ServerState.STOPPED:
            self._set_state(report.state)

    def _on_failure(self, gen: _Generation, body: bytes) -> None:
        call_id, info = ch.parse_failure(body)
        status, future = gen.calls.resolve(call_id)
        if status != _codec.CORR_MATCHED or future is None or future.done():
            return
        kind = ch.FailureKind(info["kind"])
        exc: TrunklineError
        if kind is ch.FailureKind.UNAVAILABLE:
            exc = ServerUnavailable(info["message"], server=self.name)
        elif kind is ch.FailureKind.TIMEOUT:
            exc = RequestTimeout(info["message"], server=self.name)
        elif kind is ch.FailureKind.MALFORMED:
            exc = MalformedMessage(info["message"], server=self.name)
        elif kind is ch.FailureKind.STREAM_BROKEN:
            exc = StreamBroken(info["message"], server=self.name)
        elif kind is ch.FailureKind.HTTP_STATUS:
            exc = HttpStatusError(info["message"], status=info["status"],
                                  body=info.get("body"), server=self.name)
        elif kind is ch.FailureKind.AUTHENTICATION:
            exc = AuthenticationFailed(info["message"], status=info["status"],
                                       challenge=info.get("challenge"), server=self.name)
        else:
            exc = TransportLost(info["message"], server=self.name)
        future.set_exception(exc)

    # -- loss and restart --------------------------------------------------------------

    def _on_worker_gone(self, number: int, detail: str) -> None:
        gen = self._gen
        if gen is None or gen.number != number or gen.gone:
            return
        gen.gone = True
        if gen.deadlines is not None:
            gen.deadlines.cancel()
        for task in gen.tasks:
            task.cancel()
        if gen.channel is not None:
            gen.channel.close()
        report = gen.report
        # The worker normally stops its server; if it was killed it could not.
        if report is not None and report.server_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(report.server_pid, signal.SIGKILL)
        if gen.process is not None and gen.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                gen.process.kill()
        cause = self._lost_detail or detail
        tail = report.stderr_tail if report is not None else None
        for _call_id, future in gen.calls.drain():
            if not future.done():
                future.set_exception(TransportLost(
                    cause, server=self.name, stderr_tail=tail,
                    exit_code=report.exit_code if report else None))
        if self._stopping:
            return
        if self.state is ServerState.UNAVAILABLE:
            return  # refused or unspawnable: a restart would decide the same
        self._supervise_task = asyncio.get_running_loop().create_task(self._restart(cause))

    async def _restart(self, cause: str) -> None:
        loop = asyncio.get_running_loop()
        policy = self.settings.restart
        now = loop.time()
        while self._restart_times and now - self._restart_times[0] > policy.window_s:
            self._restart_times.popleft()
        if len(self._restart_times) >= policy.max_restarts:
            self.reason = (f"crash loop: {len(self._restart_times)} restarts within "
                           f"{policy.window_s:g} s; last cause: {cause}")
            self._set_state(ServerState.UNAVAILABLE)
            await asyncio.sleep(policy.cool_down_s)
            self._restart_times.clear()
        else:
            self.reason = cause
            self._set_state(ServerState.RESTARTING)
            await asyncio.sleep(policy.delay(len(self._restart_times), self._rng))
        self._restart_times.append(loop.time())
        self.restarts += 1
        # The task stays registered while it spawns, so aclose() can cancel and await it
        # and then stop whatever worker it created.
        await self._spawn()
        if self._supervise_task is asyncio.current_task():
            self._supervise_task = None

    def _cancel_supervision(self) -> asyncio.Task[None] | None:
        task, self._supervise_task = self._supervise_task, None
        if task is not None:
            task.cancel()
        return task

    # -- state changes -----------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Bumped for every new worker: a READY with a new generation is a new transport
        (new era verdict, empty caches)."""
        return self._generation_counter

    def _set_state(self, state: ServerState) -> None:
        previous, self.state = self.state, state
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)
        if self._on_state is not None and state is not previous:
            self._on_state(self)

    def _next_change(self) -> asyncio.Future[None]:
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return asyncio.shield(self._changed)


def _not_sent(exc: TrunklineError) -> TrunklineError:
    """Mark a failure that happened before the request was written: nothing reached the
    server, so even a call that is not idempotent may be sent again (``exc.sent``)."""
    exc.sent = False  # type: ignore[attr-defined]
    return exc


def _error_reply(line: bytes, server: str, method: str) -> Reply:
    try:
        error = orjson.loads(line)["error"]
        return Reply(None, None, int(error["code"]), str(error.get("message", "")),
                     error.get("data"))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise MalformedMessage(f"error response did not decode: {exc}",
                               server=server, method=method) from exc


class Supervisor:
    """All servers of one host: start, route by name, report, stop."""

    def __init__(self, settings: HostSettings | None = None, *, seed: int | None = None,
                 on_state: Callable[[WorkerHandle], None] | None = None,
                 on_list_changed: Callable[[WorkerHandle, str], None] | None = None,
                 on_log: Callable[[str, dict[str, Any]], None] | None = None,
                 on_server_request: ServerRequestCallback | None = None) -> None:
        """``on_state`` is called (synchronously, on the loop) after every state change of
        any server, e.g. to re-list tools when a restarted server is ready again;
        ``on_list_changed`` when a server announces that a list (``"tools"``, ...)
        changed."""
        self.settings = settings or HostSettings()
        self._rng = random.Random(seed)
        self._on_state = on_state
        self._on_list_changed = on_list_changed
        self._on_log = on_log
        self._on_server_request = on_server_request
        self._handles: dict[str, WorkerHandle] = {}

    async def add(self, config: ServerConfig) -> ServerStatus:
        if config.name in self._handles:
            raise ValueError(f"server {config.name!r} is already configured")
        handle = WorkerHandle(config, self.settings, self._rng, self._on_state,
                              self._on_list_changed, self._on_log, self._on_server_request)
        self._handles[config.name] = handle
        return await handle.start()

    async def add_many(self, configs: Iterable[ServerConfig]) -> list[ServerStatus]:
        configs = list(configs)
        for c in configs:
            if c.name in self._handles:
                raise ValueError(f"server {c.name!r} is already configured")
        handles = [WorkerHandle(c, self.settings, self._rng, self._on_state,
                                self._on_list_changed, self._on_log, self._on_server_request)
                   for c in configs]
        for h in handles:
            self._handles[h.name] = h
        return list(await asyncio.gather(*(h.start() for h in handles)))

    def handle(self, name: str) -> WorkerHandle:
        try:
            return self._handles[name]
        except KeyError:
            raise ServerUnavailable(f"no server named {name!r}", server=name) from None

    async def request(self, name: str, method: str, params: bytes | None, *,
                      timeout: float) -> Reply:
        return await self.handle(name).request(method, params, timeout=timeout)

    def statuses(self) -> list[ServerStatus]:
        return [h.status() for h in self._handles.values()]

    async def retry(self, name: str) -> ServerStatus:
        return await self.handle(name).retry()

    async def remove(self, name: str) -> None:
        """Stop one server and forget it."""
        handle = self._handles.pop(name, None)
        if handle is not None:
            await handle.aclose()

    def names(self) -> list[str]:
        """Server names in the order they were added (the catalog's merge order)."""
        return list(self._handles)

    async def aclose(self) -> None:
        await asyncio.gather(*(h.aclose() for h in self._handles.values()),
                             return_exceptions=True)

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = [
    "HostSettings",
    "RestartPolicy",
    "ServerConfig",
    "ServerStatus",
    "Supervisor",
    "WorkerHandle",
]
