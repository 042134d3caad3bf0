"""The worker process: one per configured server.

``python -m trunkline.worker FD`` reads its configuration (JSON) from stdin, then talks
to the parent over the socket inherited as ``FD``. It owns the server's transport, its era
verdict and its pending ids (a ``Peer``), and nothing else. Its whole hot path is two codec
calls per read: channel bytes -> stamped requests on the server's stdin, server stdout ->
RESULT frames on the channel.

It lives exactly as long as its server: when the server's transport ends, the worker
reports why and exits, and the parent's supervisor decides about a restart. When the
parent goes away (channel EOF, even after a SIGKILL of the parent), the worker stops its
server's process group and exits, so no process outlives the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import orjson

from . import _codec
from . import channel as ch
from .batching import TickBatcher
from .errors import (
    AuthenticationFailed,
    EraRefused,
    HttpStatusError,
    MalformedMessage,
    SpawnFailed,
    TransportLost,
    TrunklineError,
)
from .peer import Peer, PeerState, ServerRequestHandler
from .listen import ListenStream, Verdict, filter_for
from .protocol.era import Era, NegotiationConfig
from .protocol.identity import ClientIdentity
from .transports.http_params import HttpParams
from .transports.stdio import StdioParams

# Exit codes, for the parent's logs; the STATE frame sent before exiting is authoritative.
EXIT_STOPPED = 0
EXIT_SERVER_LOST = 10
EXIT_REFUSED = 11
EXIT_SPAWN_FAILED = 12
EXIT_BAD_CONFIG = 13

_PR_SET_PDEATHSIG = 1

#: Re-listening after the server closes the stream is bounded: a server that closes every
#: stream at once would otherwise keep the worker busy forever.
_RELISTEN_DELAY_S = 0.05
_RELISTEN_MAX = 10
_RELISTEN_WINDOW_S = 60.0

log = logging.getLogger("trunkline.worker")

_FORWARDED = {"notifications/progress": ch.PROGRESS, "notifications/message": ch.LOG}


def peer_from_spec(spec: dict[str, Any], on_closed: Callable[[str], None],
                   on_notification: Callable[[str, bytes], None] | None = None,
                   ask_host: Callable[[str], ServerRequestHandler] | None = None) -> Peer:
    """Build the worker's Peer from the JSON configuration the parent wrote to stdin."""
    if spec.get("channel_version") != ch.CHANNEL_VERSION:
        raise ValueError(
            f"channel version {spec.get('channel_version')} != {ch.CHANNEL_VERSION}"
        )
    t = spec["transport"]
    params: StdioParams | HttpParams
    if t.get("type") == "http":
        params = HttpParams(t["url"], dict(t["headers"]), bool(t["verify_tls"]),
                            int(t["max_connections"]))
    else:
        params = StdioParams(t["command"], tuple(t["args"]), dict(t["env"]), t.get("cwd"))
    ident = spec["identity"]
    identity = ClientIdentity(
        name=ident["name"], version=ident["version"], title=ident.get("title"),
        capabilities=ident.get("capabilities") or {},
    )
    neg = spec["negotiation"]
    negotiation = NegotiationConfig(
        modern_versions=tuple(neg["modern_versions"]),
        legacy_versions=tuple(neg["legacy_versions"]),
        discover_timeout_s=neg["discover_timeout_s"],
        legacy_probe_timeout_s=neg["legacy_probe_timeout_s"],
        max_discover_attempts=neg["max_discover_attempts"],
    )
    handlers = {} if ask_host is None else {
        method: ask_host(method) for method in spec.get("answered_requests") or ()}
    return Peer(
        spec["name"], params, allow_legacy=bool(spec["allow_legacy"]), identity=identity,
        server_request_handlers=handlers,
        negotiation=negotiation, max_line_bytes=int(spec["max_line_bytes"]),
        max_frame_bytes=int(spec["max_frame_bytes"]),
        on_closed=on_closed, on_notification=on_notification,
    )


def failure_frame_for(call_id: int, error: TrunklineError) -> bytes:
    """A FAILURE frame for a call its transport lost on its own (HTTP), keeping what
    the parent needs to rebuild the same error."""
    if isinstance(error, AuthenticationFailed):
        return ch.failure_frame(call_id, ch.FailureKind.AUTHENTICATION, error.message,
                                status=error.status, challenge=error.challenge)
    if isinstance(error, HttpStatusError):
        return ch.failure_frame(call_id, ch.FailureKind.HTTP_STATUS, error.message,
                                status=error.status, body=error.body)
    if isinstance(error, MalformedMessage):
        return ch.failure_frame(call_id, ch.FailureKind.MALFORMED, error.message)
    return ch.failure_frame(call_id, ch.FailureKind.STREAM_BROKEN, error.message)


class _ChannelProtocol(asyncio.Protocol):
    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def data_received(self, data: bytes) -> None:
        self._worker.on_channel_data(data)

    def eof_received(self) -> bool:
        self._worker.on_channel_closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._worker.on_channel_closed()


class Worker:
    def __init__(self, spec: dict[str, Any]) -> None:
        self._lost: list[str] = []
        self._lost_event: asyncio.Event | None = None
        self._host_answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._host_answer_seq = 0
        self.peer = peer_from_spec(spec, self._on_server_closed, self._on_notification,
                                   self._ask_host)
        self._listen_wanted: dict[str, bool] = dict(spec.get("listen") or {})
        self._listen: ListenStream | None = None
        self._listen_closed: asyncio.Future[str] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._out: TickBatcher | None = None
        self._done: asyncio.Future[int] | None = None

    # -- channel -----------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Queue frames for the parent; one write per loop tick carries them all."""
        assert self._out is not None
        self._out.push(data)

    def on_channel_data(self, data: bytes) -> None:
        for kind, body in self.peer.accept_frames(data):
            if kind == ch.CANCEL:
                self.peer.cancel_forwarded(ch.parse_cancel(body), "cancelled by the caller")
            elif kind == ch.SUBMIT:
                # Only before the verdict or after the server is gone: the parent submits
                # once it saw READY, so this is a race with a state change.
                call_id = int.from_bytes(body[:8], "little")
                self.send(ch.failure_frame(
                    call_id, ch.FailureKind.UNAVAILABLE,
                    f"server is {self.peer.state.value}"))
            elif kind == _codec.FRAME_SUBMIT_REJECTED:
                # Params that are not a JSON object (or a malformed SUBMIT): fail that call,
                # nothing was sent to the server.
                call_id = int.from_bytes(body[:8], "little")
                reason = body[8:].decode("utf-8", "replace")
                self.send(ch.failure_frame(call_id, ch.FailureKind.MALFORMED, reason))
            elif kind == ch.SERVER_ANSWER:
                self._on_host_answer(orjson.loads(body))
            elif kind == ch.STOP:
                self._finish(EXIT_STOPPED)

    def _ask_host(self, method: str) -> ServerRequestHandler:
        """A Peer handler for one server-request method, answered by the host in the
        parent (where the elicitation UI, the model and the roots live)."""
        async def ask(params: dict[str, Any]) -> dict[str, Any]:
            self._host_answer_seq += 1
            key = self._host_answer_seq
            future = asyncio.get_running_loop().create_future()
            self._host_answers[key] = future
            self.send(ch.json_frame(ch.SERVER_REQUEST,
                                    {"key": key, "method": method, "params": params}))
            try:
                return await future
            finally:
                self._host_answers.pop(key, None)
        return ask

    def _on_host_answer(self, answer: dict[str, Any]) -> None:
        future = self._host_answers.get(answer.get("key"))  # type: ignore[arg-type]
        if future is None or future.done():
            return
        error = answer.get("error")
        if isinstance(error, dict):
            future.set_exception(RuntimeError(str(error.get("message"))))
        else:
            future.set_result(answer.get("result"))

    def on_channel_closed(self) -> None:
        # The parent is gone (or closed us): stop the server and leave.
        self._finish(EXIT_STOPPED)

    def _on_notification(self, method: str, line: bytes) -> None:
        """Notifications are rare and small: decoded here. Progress and log messages go to
        the parent (which routes progress by token to its call). A legacy server announces
        list changes on its stdio stream; a modern one only on a listen stream, so there
        they count only when the stream accepts them."""
        params = orjson.loads(line).get("params")
        if method in _FORWARDED:
            if isinstance(params, dict):
                self.send(ch.json_frame(_FORWARDED[method], params))
        elif self.peer.era is Era.LEGACY:
            if method in ch.LIST_CHANGED:
                self.send(ch.json_frame(ch.TOOLS, {"changed": ch.LIST_CHANGED[method]}))
        elif self._listen is not None:
            accepted = self._listen.accept(method, params)
            if accepted.verdict is Verdict.CHANGED:
                self.send(ch.json_frame(ch.TOOLS, {"changed": accepted.which}))
            elif accepted.verdict is Verdict.CLOSED and self._listen_closed is not None:
                if not self._listen_closed.done():
                    self._listen_closed.set_result(accepted.reason)
            elif accepted.verdict is Verdict.DROP:
                log.debug("dropped %s: %s", method, accepted.reason)

    async def _listen_loop(self, capabilities: dict[str, Any]) -> None:
        """Keep one listen stream open for the lists the host wants announced. When the
        server ends it, listen again with a new id and have the lists refetched (changes
        may have been missed meanwhile); never resume the old stream."""
        wanted = filter_for(capabilities, self._listen_wanted)
        if not wanted:
            return  # the server announces nothing we asked for: TTLs drive refreshes
        loop = asyncio.get_running_loop()
        reopened: list[float] = []
        while True:
            request_id, reply = self.peer.open_request(
                "subscriptions/listen", orjson.dumps({"notifications": wanted}))
            self._listen = ListenStream(request_id, wanted)
            self._listen_closed = loop.create_future()
            await asyncio.wait([reply, self._listen_closed], return_when=asyncio.FIRST_COMPLETED)
            if reply.done() and not reply.cancelled():
                lost = reply.exception()
                if lost is not None and self.peer.state is not PeerState.READY:
                    return  # the transport ended: the worker is on its way out
                if lost is not None and not isinstance(lost, TransportLost):
                    log.warning("subscriptions/listen failed (%s): relying on TTLs", lost)
                    self._listen = None
                    return
                if lost is not None:
                    # An HTTP listen stream broke on its own: listen again, as below.
                    log.info("listen stream lost (%s): listening again", lost)
                elif reply.result().is_error:
                    log.warning("server refused subscriptions/listen (%s): relying on TTLs",
                                reply.result().error_message)
                    self._listen = None
                    return
            else:
                self.peer.close_request(request_id, "the server cancelled the stream",
                                        notify=False)
            self._listen = None
            self.send(ch.json_frame(ch.TOOLS, {"changed": "tools"}))
            now = loop.time()
            reopened = [t for t in reopened if now - t < _RELISTEN_WINDOW_S] + [now]
            if len(reopened) > _RELISTEN_MAX:
                log.warning("listen stream closed %d times in %g s: relying on TTLs",
                            len(reopened), _RELISTEN_WINDOW_S)
                return
            await asyncio.sleep(_RELISTEN_DELAY_S)

    def _on_call_failed(self, call_id: int, error: TrunklineError) -> None:
        self.send(failure_frame_for(call_id, error))

    def _on_call_expired(self, call_id: int) -> None:
        # The parent normally expires the call first (its clock started earlier); this is
        # the worker enforcing the same deadline should the parent be slow or stuck.
        self.send(ch.failure_frame(call_id, ch.FailureKind.TIMEOUT,
                                   "no reply within the call's timeout (enforced by the worker)"))

    def _on_server_closed(self, detail: str) -> None:
        self._lost.append(detail)
        if self._lost_event is not None:
            self._lost_event.set()

    def _finish(self, code: int) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(code)

    # -- lifecycle ---------------------------------------------------------------------

    def report(self, state: ch.ServerState, **fields: Any) -> None:
        self.send(ch.StateReport(state=state, server_pid=self.peer.pid, **fields).to_frame())

    async def run(self, sock: socket.socket) -> int:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._out = TickBatcher(loop)
        self._transport, _ = await loop.connect_accepted_socket(
            lambda: _ChannelProtocol(self), sock=sock
        )
        self._out.attach(self._transport)
        peer = self.peer
        peer.forward_results_to(self.send, self._on_call_expired, self._on_call_failed)
        self._lost_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._finish, EXIT_STOPPED)

        self.report(ch.ServerState.NEGOTIATING)
        start = loop.create_task(peer.start())
        await asyncio.wait([start, self._done], return_when=asyncio.FIRST_COMPLETED)
        if not start.done():  # told to stop while negotiating
            start.cancel()
            with contextlib.suppress(BaseException):
                await start
            return await self._close(ch.ServerState.STOPPED, self._done.result())
        try:
            verdict = start.result()
        except EraRefused as exc:
            return await self._close(
                ch.ServerState.UNAVAILABLE, EXIT_REFUSED, reason=f"era refused: {exc.message}",
                evidence=exc.evidence, stderr_tail=exc.stderr_tail)
        except AuthenticationFailed as exc:
            return await self._close(
                ch.ServerState.UNAVAILABLE, EXIT_REFUSED,
                reason=f"authentication failed: {exc.message}")
        except SpawnFailed as exc:
            return await self._close(
                ch.ServerState.UNAVAILABLE, EXIT_SPAWN_FAILED,
                reason=f"spawn failed: {exc.message}")
        self.report(
            ch.ServerState.READY, era=verdict.era.value, version=verdict.version,
            capabilities=verdict.capabilities, server_info=verdict.server_info,
            instructions=verdict.instructions, evidence=verdict.evidence,
        )
        if verdict.era is Era.MODERN:
            self._listen_task = loop.create_task(self._listen_loop(verdict.capabilities))
        lost = loop.create_task(self._lost_event.wait())
        await asyncio.wait([lost, self._done], return_when=asyncio.FIRST_COMPLETED)
        lost.cancel()
        if self._lost and not self._done.done():
            return await self._close(
                ch.ServerState.RESTARTING, EXIT_SERVER_LOST, reason=self._lost[0],
                stderr_tail=peer.stderr_tail() or None, exit_code=peer.returncode)
        return await self._close(ch.ServerState.STOPPED, self._done.result())

    async def _close(self, state: ch.ServerState, code: int, **fields: Any) -> int:
        if self._listen_task is not None:
            self._listen_task.cancel()
            await asyncio.gather(self._listen_task, return_exceptions=True)
        await self.peer.aclose()
        self.report(state, **fields)
        assert self._out is not None
        self._out.flush()
        if self._transport is not None:
            self._transport.close()
        await asyncio.sleep(0)
        return code


def _die_with_parent() -> None:
    """Belt and braces beside channel EOF: SIGTERM when the parent dies, which runs the
    same orderly stop (the server's process group is killed before we exit)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _install_loop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str]) -> int:
    _die_with_parent()
    fd = int(argv[1])
    try:
        spec = orjson.loads(sys.stdin.buffer.read())
        worker = Worker(spec)
    except Exception as exc:  # a broken parent/worker pairing: say so loudly
        print(f"trunkline worker: bad configuration: {exc!r}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    sock = socket.socket(fileno=fd)
    _install_loop()
    profile_dir = os.environ.get("TRUNKLINE_WORKER_PROFILE")
    if profile_dir:  # a developer's aid: one cProfile dump per worker process
        import cProfile

        with cProfile.Profile() as prof:
            code = asyncio.run(worker.run(sock))
        prof.dump_stats(os.path.join(profile_dir, f"worker-{os.getpid()}.prof"))
        return code
    return asyncio.run(worker.run(sock))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
