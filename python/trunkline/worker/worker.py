"""The worker: one process per configured server, around one ``Peer``.

It applies the parent's frames in the order they were sent, routes the server's
notifications up, and reports its server's state, each change at the moment it is known
(a refusal does not wait for the server's shutdown ladder). It lives exactly as long as
its server's connection: when the connection ends it reports why and exits, and the
parent decides about a restart. When the parent goes away (channel EOF, even after a
SIGKILL of the parent), it stops its server's process group and exits, so no process
outlives the host.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

from .. import channel as ch
from .._codec import FRAME_STAMPED, FRAME_STAMPED_FOR, FRAME_SUBMIT_REJECTED, CodecError
from ..channel import ServerState, StateReport, WorkerSpec
from ..errors import (
    AuthenticationFailed,
    EraRefused,
    MalformedMessage,
    ServerUnavailable,
    SpawnFailed,
)
from ..loop.batching import TickBatcher
from ..params import HttpParams
from ..protocol.era import Verdict
from .credentials import CredentialSlots
from .forwarding import Forwarder
from .notices import NotificationRouter
from .peer import Peer
from .questions import HostQuestions
from .tasks import TaskPoller

# Exit codes, for the parent's logs; the STATE frame sent before exiting is authoritative.
EXIT_STOPPED = 0
EXIT_SERVER_LOST = 10
EXIT_REFUSED = 11
EXIT_SPAWN_FAILED = 12
EXIT_BAD_CONFIG = 13

log = logging.getLogger("trunkline.worker")

#: How the connection ended: the state to report, the exit code, the report's fields.
Ending = tuple[ServerState, int, dict[str, Any]]


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        host = spec.host
        streamed = isinstance(spec.server.params, HttpParams)
        self._questions = HostQuestions(self.send, streamed=streamed)
        #: The host's credentials by slot, asked over the channel (HTTP servers of hosts
        #: with an OAuth client, or reached with each user's own credentials).
        per_user = spec.server.per_user_credentials
        self._credentials = CredentialSlots(self.send, shared=host.oauth) \
            if streamed and (host.oauth or per_user) else None
        self.peer = Peer(
            spec.server.name, spec.server.params, negotiation=spec.negotiation(),
            identity=host.identity, input_handlers=self._questions.handlers(host.answered_requests),
            on_notification=self._on_notification, on_closed=self._on_server_closed,
            max_line_bytes=host.max_line_bytes, first_request_id=spec.first_request_id,
            request_id_limit=spec.request_id_limit, close_wait_s=host.close_wait_s,
            term_wait_s=host.term_wait_s, credentials=self._credentials,
            extensions=host.extensions)
        self.peer.on_counters = self._counters_changed
        self._notices = NotificationRouter(self.peer, host.listen, self.send,
                                           streamed=streamed)
        self._tasks = TaskPoller(self.peer, self.send, host.task_limits)
        self._out: TickBatcher | None = None
        self._forwarder: Forwarder | None = None
        self._lost: asyncio.Future[str] | None = None
        self._main: asyncio.Task[Any] | None = None
        self._stop_requested = False
        self._closing = False
        self._stats_due = False
        #: The parent's frames by kind, but a call's (``FRAME_STAMPED``, the hot path).
        self._frames: dict[int, Callable[[bytes], None]] = {
            ch.CANCEL: self._cancel_frame,
            ch.SUBMIT: self._submit_frame,
            FRAME_SUBMIT_REJECTED: self._submit_rejected_frame,
            FRAME_STAMPED_FOR: self._stamped_for_frame,
            ch.FORGET_CREDENTIALS: self._forget_credentials_frame,
            ch.SERVER_ANSWER: self._server_answer_frame,
            ch.CREDENTIALS: self._credentials_frame,
            ch.WATCH_RESOURCES: self._watch_resources_frame,
            ch.WATCH_TASK: self._watch_task_frame,
            ch.UNWATCH_TASK: self._unwatch_task_frame,
            ch.STOP: self._stop_frame,
        }

    # -- the channel -------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue frames for the parent; one write per loop tick carries them all."""
        assert self._out is not None
        self._out.push(data)

    def on_channel_data(self, data: bytes) -> None:
        """Apply the parent's frames in the order it sent them."""
        forwarder = self._forwarder
        assert forwarder is not None, "frames before run()"
        try:
            frames = forwarder.feed(data)
        except CodecError as exc:
            log.error("server %r: corrupt channel from the parent: %s", self.peer.name, exc)
            self.stop()
            return
        handlers = self._frames
        for kind, body in frames:
            if kind == FRAME_STAMPED:  # a call: most frames, so no table lookup for it
                forwarder.write_stamped(body)
            else:
                handler = handlers.get(kind)
                if handler is not None:
                    handler(body)

    # Each frame kind's handler but a call's (``_frames``).

    def _cancel_frame(self, body: bytes) -> None:
        assert self._forwarder is not None
        self._forwarder.cancel(ch.cancel_from_bytes(body), "cancelled by the caller")

    def _submit_frame(self, body: bytes) -> None:
        # Before the verdict or after the connection ended: nothing was sent.
        assert self._forwarder is not None
        state = self.peer.state.value
        self._forwarder.fail(_call_id(body), ServerUnavailable(
            f"server is {state}", state=state, sent=False))

    def _submit_rejected_frame(self, body: bytes) -> None:
        self._rejected(_call_id(body), body[8:].decode("utf-8", "replace"))

    def _stamped_for_frame(self, body: bytes) -> None:
        assert self._forwarder is not None
        self._forwarder.write_stamped_for(body)

    def _forget_credentials_frame(self, body: bytes) -> None:
        if self._credentials is not None:
            self._credentials.forget(ch.CredentialsForgotten.from_bytes(body).slots)

    def _server_answer_frame(self, body: bytes) -> None:
        self._questions.on_answer(ch.ServerAnswer.from_bytes(body))

    def _credentials_frame(self, body: bytes) -> None:
        if self._credentials is not None:
            self._credentials.on_answer(ch.CredentialAnswer.from_bytes(body))

    def _watch_task_frame(self, body: bytes) -> None:
        self._tasks.watch(ch.TaskWatch.from_bytes(body))

    def _unwatch_task_frame(self, body: bytes) -> None:
        self._tasks.unwatch(ch.TaskUnwatch.from_bytes(body))

    def _watch_resources_frame(self, body: bytes) -> None:
        watch = ch.ResourceWatch.from_bytes(body)
        self._notices.watch_resources(watch.added, watch.removed)

    def _stop_frame(self, body: bytes) -> None:
        self.stop()

    def _rejected(self, call_id: int, reason: str) -> None:
        forwarder = self.peer.forwarder
        if self.peer.ids_left == 0:
            # This connection's block of request ids is used up: the call goes to the
            # next connection, which gets a fresh block.
            forwarder.fail(call_id, ServerUnavailable(
                "this connection's request ids are used up; it is being replaced",
                state=ServerState.RESTARTING.value, sent=False))
            self.peer.end("the connection's block of request ids is used up")
            return
        forwarder.fail(call_id, MalformedMessage(f"request cannot be sent: {reason}",
                                                 sent=False))

    def on_channel_closed(self, detail: str) -> None:
        # The parent is gone (or closed us): stop the server and leave.
        self.stop()

    def stop(self) -> None:
        """Stop serving (a STOP frame, the parent's end, a signal). Once the worker is
        closing, its bounded shutdown simply runs to its end."""
        if self._closing or self._stop_requested or self._main is None:
            return
        self._stop_requested = True
        self._main.cancel()

    # -- the server's side ---------------------------------------------------------------

    def _on_notification(self, method: str, line: bytes) -> None:
        self._notices.on_notification(method, line)

    def _on_server_closed(self, detail: str) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(detail)

    def _counters_changed(self) -> None:
        if not self._stats_due and self._out is not None:
            self._stats_due = True
            asyncio.get_running_loop().call_soon(self._send_stats)

    def _send_stats(self) -> None:
        self._stats_due = False
        self.send(ch.Stats(late_replies=self.peer.late_replies,
                           protocol_violations=self.peer.protocol_violations).to_bytes())

    def report(self, state: ServerState, **fields: Any) -> None:
        fields.setdefault("proven_modern", self.peer.proven_modern)
        self.send(StateReport(state=state, server_pid=self.peer.pid, **fields).to_bytes())

    # -- lifecycle ---------------------------------------------------------------------

    async def run(self, sock: socket.socket) -> int:
        loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        self._lost = loop.create_future()
        self._out = TickBatcher(loop)
        try:
            channel, _ = await loop.connect_accepted_socket(
                lambda: ch.ChannelProtocol(self.on_channel_data, self.on_channel_closed),
                sock=sock)
        except (OSError, asyncio.CancelledError):
            # The parent closed its end before the worker could attach (it is stopping;
            # uvloop then cancels the wait) or stopped it: there is no one to serve or to
            # report to, and no server started yet.
            if self._main is not None and self._main.cancelling():
                self._main.uncancel()
            return EXIT_STOPPED
        self._out.attach(channel)
        self._forwarder = self.peer.forward_to(self.send, self.spec.host.max_frame_bytes)
        await self._tasks.open()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.stop)
        try:
            state, code, fields = await self._serve()
        except asyncio.CancelledError:
            if not self._stop_requested or self._main is None:
                raise
            self._main.uncancel()
            state, code, fields = ServerState.STOPPED, EXIT_STOPPED, {}
        self._closing = True
        # Said first, then done: the parent learns the outcome now, while the server's
        # stop ladder runs (bounded) below.
        self.report(state, **fields)
        self._out.flush()
        await self._tasks.aclose()
        await self.peer.aclose()
        self._out.flush()
        channel.close()
        await asyncio.sleep(0)
        return code

    async def _serve(self) -> Ending:
        self.report(ServerState.NEGOTIATING)
        try:
            verdict = await self.peer.start()
        except EraRefused as exc:
            return self._refused(exc)
        except AuthenticationFailed as exc:
            return (ServerState.UNAVAILABLE, EXIT_REFUSED,
                    {"reason": f"authentication failed: {exc.message}"})
        except SpawnFailed as exc:
            return (ServerState.UNAVAILABLE, EXIT_SPAWN_FAILED,
                    {"reason": f"spawn failed: {exc.message}"})
        self.report(ServerState.READY, era=verdict.era.value, version=verdict.version,
                    capabilities=verdict.capabilities, server_info=verdict.server_info,
                    instructions=verdict.instructions, evidence=verdict.evidence)
        assert self._lost is not None
        async with asyncio.TaskGroup() as tasks:
            listening = tasks.create_task(self._listen(verdict))
            detail = await self._lost
            listening.cancel()
        return (ServerState.RESTARTING, EXIT_SERVER_LOST,
                {"reason": detail, "stderr_tail": self.peer.stderr_tail() or None,
                 "exit_code": self.peer.returncode})

    def _refused(self, exc: EraRefused) -> Ending:
        fields: dict[str, Any] = {
            "evidence": exc.evidence, "proven_modern": exc.proven_modern,
            "stderr_tail": self.peer.stderr_tail() or None}
        if exc.renegotiate:
            # Two sessions on one connection: a new connection, at once.
            return ServerState.RESTARTING, EXIT_SERVER_LOST, {"reason": exc.message, **fields}
        return (ServerState.UNAVAILABLE, EXIT_REFUSED,
                {"reason": f"era refused: {exc.message}", "retry_later": exc.retry_later,
                 "remedy": exc.remedy, "answered": exc.answered, **fields})

    async def _listen(self, verdict: Verdict) -> None:
        try:
            await self._notices.run(verdict.era, verdict.capabilities)
        except Exception as exc:  # noqa: BLE001 - listening is an optimization over TTLs
            log.warning("server %r: listening for changes failed (%s): relying on TTLs",
                        self.peer.name, exc)


def _call_id(body: bytes) -> int:
    return int.from_bytes(body[:8], "little")
