"""One worker process of one server, and everything that dies with it.

A ``Generation`` is the parent's view of one worker: the process (a fresh interpreter, or
a fork of the worker template: ``launchers``; never a fork of the host), the duplex
channel to it, the calls in flight through it (a correlator and the codec's RESULT
demultiplexer, one deadline timer for all of them), its last state report and counters,
and the tasks answering its server's own requests. When the worker ends, all of it ends;
the next worker is a new generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable
from typing import Any

from .. import channel as ch
from .._codec import Correlator, ResultDemux
from ..errors import TrunklineError
from ..loop.batching import TickBatcher
from ..loop.deadlines import DeadlineTimer
from ..loop.tasks import TaskScope
from .launchers import Launcher, WorkerProcess

#: Socket buffers of the channel: room for many 64 KiB results per wake-up.
_CHANNEL_BUFFER_BYTES = 4 << 20


class Generation:
    def __init__(self, number: int, server: str, max_frame_bytes: int,
                 on_expired: Callable[[Generation, list[tuple[Any, Any]]], None]) -> None:
        loop = asyncio.get_running_loop()
        self.number = number
        self.calls: Correlator[asyncio.Future[Any]] = Correlator()
        self.demux = ResultDemux(self.calls, max_frame_bytes)
        self.out = TickBatcher(loop)
        self.deadlines = DeadlineTimer(loop, self.calls, lambda due: on_expired(self, due))
        self.scope = TaskScope(f"server {server!r} worker {number}")
        self.process: WorkerProcess | None = None
        self.channel: asyncio.Transport | None = None
        self._protocol: ch.ChannelProtocol | None = None
        self.watcher: asyncio.Task[Any] | None = None
        self.report: ch.StateReport | None = None
        self.stats = ch.Stats()
        self.spawned_at = loop.time()
        #: Seconds from the spawn to the first verdict (ready or unavailable).
        self.verdict_after_s: float | None = None
        #: The worker reported its end (or is gone): no call is sent to it any more.
        self.ending = False
        #: The channel and process are gone.
        self.gone = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def launch(self, launcher: Launcher, spec: ch.WorkerSpec) -> socket.socket:
        """Start the worker process (``launchers``). Returns the parent's end of the
        channel (for ``connect``). Raises ``OSError`` if it cannot start."""
        parent_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (parent_end, worker_end):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _CHANNEL_BUFFER_BYTES)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _CHANNEL_BUFFER_BYTES)
        try:
            self.process = await launcher.launch(spec, worker_end)
        except BaseException:
            parent_end.close()
            raise
        finally:
            worker_end.close()  # the worker holds its own copy now
        return parent_end

    async def connect(self, parent_end: socket.socket,
                      on_data: Callable[[bytes], None], on_closed: Callable[[str], None],
                      on_writable: Callable[[], None] | None = None) -> None:
        """Open the channel on the parent's end; a failure kills the worker.
        ``on_writable``: the worker took what was waiting for it (``writing_paused``
        is over)."""
        loop = asyncio.get_running_loop()
        try:
            self.channel, self._protocol = await loop.connect_accepted_socket(
                lambda: ch.ChannelProtocol(on_data, on_closed, on_writable), sock=parent_end)
            await self.scope.open()
        except BaseException:
            parent_end.close()
            self.kill()
            raise
        self.out.attach(self.channel)

    @property
    def writing_paused(self) -> bool:
        """Whether the worker is behind in reading its channel (more than the
        transport's high-water mark waits for it)."""
        return self._protocol is not None and self._protocol.writing_paused

    def send(self, frame: bytes) -> None:
        """Queue a frame; one write per loop tick carries every frame queued."""
        self.out.push(frame)

    def fail_calls(self, error: Callable[[], TrunklineError]) -> None:
        """Every call in flight through this worker fails now."""
        self.deadlines.cancel()
        for _call_id, future in self.calls.drain():
            # The parent registers only futures (an int token is a call the worker forwards).
            assert not isinstance(future, int)
            if not future.done():
                future.set_exception(error())

    def end(self) -> None:
        """The worker is gone: close the channel, stop its server's process group in case
        the worker could not (it was killed), and the worker process too."""
        self.ending = self.gone = True
        self.deadlines.cancel()
        self.scope.cancel()  # nobody answers this worker's server any more
        if self.channel is not None:
            self.channel.close()
        report = self.report
        if report is not None and report.server_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(report.server_pid, signal.SIGKILL)
        if self.process is not None and self.process.returncode is None:
            self.kill()

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    async def reap(self, timeout: float) -> None:
        """Wait for the worker to exit (it was told to stop), killing it after
        ``timeout``; then for its watcher and its tasks."""
        if self.process is not None:
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.kill()
                await self.process.wait()
        if self.watcher is not None:
            await asyncio.wait([self.watcher])
        await self.scope.aclose()

    def late_replies(self) -> int:
        """Replies that came after their caller gave up: dropped by the worker, or by the
        parent when the parent's deadline passed first."""
        return self.stats.late_replies + self.demux.stale
