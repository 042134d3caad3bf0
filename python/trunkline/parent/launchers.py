"""How a worker process is started: one interface, two ways (``HostSettings.worker_start``).

- ``spawn``: a fresh interpreter per worker (``python -m trunkline.worker FD``), its
  specification on stdin. Every worker imports what it runs itself.
- ``zygote``: one worker template per host (``python -m trunkline.worker.zygote``, see
  that module for its rules), started with the first worker and stopped after the last;
  each worker is a fork of it, ready without importing anything and sharing the
  template's pages. The host talks to it over one ``SOCK_SEQPACKET`` socket, holds a pidfd
  per worker (so a kill can never reach a reused pid), and learns each worker's exit
  status from the template, which reaps them.

Either way the worker runs in its own session and dies with the process that started it,
and ``launch`` gives a process with ``pid``, ``returncode``, ``kill()`` and ``wait()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections import deque
from typing import Protocol

from .. import channel as ch

log = logging.getLogger("trunkline.supervisor")

_SPAWN_ARGV = (sys.executable, "-m", "trunkline.worker")
_TEMPLATE_ARGV = (sys.executable, "-m", "trunkline.worker.zygote")
#: Control messages: a reply or an exit is at most 13 bytes; a spec is a few kB.
_RECV_BYTES = 64
_CONTROL_BUFFER_BYTES = 4 << 20


class WorkerProcess(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def kill(self) -> None: ...

    async def wait(self) -> int: ...


class Launcher(Protocol):
    async def launch(self, spec: ch.WorkerSpec, worker_end: socket.socket) -> WorkerProcess:
        """Start a worker on ``worker_end`` (the caller closes its copy afterwards).
        Raises ``OSError`` when it cannot start."""
        ...

    async def aclose(self) -> None:
        """After every worker it started has been reaped."""
        ...


class SpawnLauncher:
    async def launch(self, spec: ch.WorkerSpec, worker_end: socket.socket) -> WorkerProcess:
        process = await asyncio.create_subprocess_exec(
            *_SPAWN_ARGV, str(worker_end.fileno()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            pass_fds=(worker_end.fileno(),),
            # Its own session: a Ctrl-C aimed at the host reaches the host only, and the
            # host stops its workers in order.
            start_new_session=True,
        )
        assert process.stdin is not None
        process.stdin.write(spec.to_bytes())
        process.stdin.close()
        return process

    async def aclose(self) -> None:
        pass


class ForkedWorker:
    """A worker the template forked: signalled through its pidfd, its exit status told by
    the template."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self._pid = pid
        self._pidfd: int | None = pidfd
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    def kill(self) -> None:
        if self._pidfd is not None and not self._exited.done():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def watch_pidfd(self) -> None:
        """Learn the exit from the pidfd (readable once the process has ended), for when
        the template that would tell it is gone; the status itself went with it."""
        pidfd = self._pidfd
        if pidfd is None:
            return
        loop = asyncio.get_running_loop()

        def ended() -> None:
            loop.remove_reader(pidfd)
            self.exited(-signal.SIGKILL)
        loop.add_reader(pidfd, ended)

    def exited(self, code: int) -> None:
        if not self._exited.done():
            self._exited.set_result(code)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class ZygoteLauncher:
    def __init__(self) -> None:
        self._template: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None
        self._starting: asyncio.Lock = asyncio.Lock()
        #: Launches waiting for their reply, in the order they were asked.
        self._replies: deque[asyncio.Future[ForkedWorker]] = deque()
        self._workers: dict[int, ForkedWorker] = {}

    async def launch(self, spec: ch.WorkerSpec, worker_end: socket.socket) -> WorkerProcess:
        control = await self._ready()
        reply: asyncio.Future[ForkedWorker] = asyncio.get_running_loop().create_future()
        self._replies.append(reply)
        try:
            socket.send_fds(control, [b"S" + spec.to_bytes()], [worker_end.fileno()])
        except OSError:
            self._replies.remove(reply)
            raise
        return await reply

    async def _ready(self) -> socket.socket:
        async with self._starting:
            if self._control is None:
                await self._start()
            assert self._control is not None
            return self._control

    async def _start(self) -> None:
        if self._template is not None:  # one that died: reaped before the next starts
            await self._template.wait()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for end in (ours, theirs):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _CONTROL_BUFFER_BYTES)
        try:
            self._template = await asyncio.create_subprocess_exec(
                *_TEMPLATE_ARGV, str(theirs.fileno()), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._control = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        control = self._control
        assert control is not None
        while True:
            try:
                message, fds, _flags, _addr = socket.recv_fds(control, _RECV_BYTES, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(f"the worker template's socket failed: {exc}")
                return
            if not message:
                self._lost("the worker template exited")
                return
            kind, body = message[:1], message[1:]
            if kind == b"X":
                worker = self._workers.pop(int.from_bytes(body[:8], "big"), None)
                if worker is not None:
                    worker.exited(int.from_bytes(body[8:12], "big", signed=True))
                continue
            reply = self._replies.popleft() if self._replies else None
            if kind == b"P" and len(fds) == 1:
                worker = ForkedWorker(int.from_bytes(body[:8], "big"), fds[0])
                self._workers[worker.pid] = worker
                if reply is None or reply.done():  # nobody waits: it must not live on
                    worker.kill()
                else:
                    reply.set_result(worker)
                continue
            for fd in fds:
                os.close(fd)
            if reply is not None and not reply.done():
                reply.set_exception(OSError(f"the worker template could not fork: "
                                            f"{body.decode(errors='replace')}"))

    def _lost(self, why: str) -> None:
        """The template is gone: its workers die with it (they are told to stop), and the
        next launch starts a new template."""
        control, self._control = self._control, None
        if control is not None:
            asyncio.get_running_loop().remove_reader(control.fileno())
            control.close()
        while self._replies:
            reply = self._replies.popleft()
            if not reply.done():
                reply.set_exception(OSError(why))
        # Their exits will not be told: each is watched through its pidfd instead.
        for worker in self._workers.values():
            worker.watch_pidfd()
        self._workers.clear()

    async def aclose(self) -> None:
        control, template = self._control, self._template
        self._control = self._template = None
        if control is not None:
            asyncio.get_running_loop().remove_reader(control.fileno())
            control.close()  # the template ends when its socket does
        if template is not None:
            try:
                await asyncio.wait_for(template.wait(), 5.0)
            except TimeoutError:
                template.kill()
                await template.wait()
        for worker in self._workers.values():
            worker.exited(-signal.SIGKILL)
        self._workers.clear()


def forking_supported() -> bool:
    """Whether this system has what the template needs: pidfds (Linux 5.3+)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds")


def launcher_for(worker_start: str) -> Launcher:
    if worker_start == "zygote":
        if forking_supported():
            return ZygoteLauncher()
        log.warning("workers cannot be forked from a template here (no pidfds): "
                    "each is spawned as a fresh interpreter")
    return SpawnLauncher()
