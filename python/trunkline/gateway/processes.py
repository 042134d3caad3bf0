"""``serve --http HOST:PORT --processes N``: N whole gateways accepting on one socket.

One Python process serves about one core's worth of calls: its HTTP server and its call
path share one interpreter lock. With ``--processes N`` this process binds N listening
sockets to the one port (``SO_REUSEPORT``: the kernel spreads new connections evenly among
them) and starts N copies of the command, each a whole gateway (its own Host, so its own
worker per configured server) accepting on its inherited socket. The sockets stay open
here: a copy started again gets the same one, and the connections that queued on it while
it was down are served then, not refused. They are replicas on one machine, with what replicas
need: one legacy-session key (``TRUNKLINE_SESSION_KEY``, or one made here for all of
them), so any copy serves any legacy session; and, with ``--metrics``, a directory for the
sockets on which each serves its own metrics to the others (``copy_metrics``), so a scrape
that reaches any one of them gets all of them.

The rules of this process, which serves nothing itself:

- ``LISTENING <url>`` is printed once every copy printed its own; a copy that ends before
  that ends the command, with that copy's exit status (its stderr is ours, so its reason
  is already shown);
- a copy that ends later is started again after a pause that doubles up to
  ``_RESTART_MAX_S`` (its open connections are lost, as with a replica; those that
  arrive meanwhile wait for it; the others go on);
- SIGTERM or SIGINT stops every copy with SIGTERM (each drains within its
  ``--drain-timeout``), then SIGKILL after ``_KILL_GRACE_S`` more; nothing is left behind.
  A copy that finds its parent gone stops by itself (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence

from .copy_metrics import COPIES_DIR_ENV, COPY_INDEX_ENV

log = logging.getLogger("trunkline.gateway")

#: Pause before a copy that died is started again: from the first to the longest.
_RESTART_FIRST_S = 0.5
_RESTART_MAX_S = 30.0
#: After a copy's own drain deadline, how long it may take to exit before SIGKILL.
_KILL_GRACE_S = 15.0
#: The flag each copy gets: the file descriptor of the socket it serves on.
LISTEN_FD_FLAG = "--listen-fd"
#: The replica's name, which every copy shares (``--replica``, else one made here).
REPLICA_ENV = "TRUNKLINE_REPLICA"


def copy_instance(replica: str, index: int) -> str:
    """The instance name of copy ``index`` of replica ``replica`` (``siblings``)."""
    return f"{replica}_{index}"


def bind_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: the kernel picks one);
    ``reuse_port``: one of several on the same port, among which the kernel spreads new
    connections evenly (``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so that asyncio sets TCP_NODELAY on the connections it accepts
    # (it checks the listening socket's protocol): a response's head and body are two
    # writes, and Nagle would hold the second for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def bind_unix_socket(path: str) -> socket.socket:
    """A listening Unix socket at ``path`` (one left by an earlier process is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(1024)
    return sock


class Copies:
    """The copies of one ``serve --processes N`` command, and their lifetimes. ``argv``:
    the command's arguments for one copy (the socket's flag is added here)."""

    def __init__(self, argv: Sequence[str], count: int, host: str, port: int,
                 drain_timeout_s: float) -> None:
        first = bind_socket(host, port, reuse_port=True)
        port = first.getsockname()[1]
        self._socks = [first, *(bind_socket(host, port, reuse_port=True)
                                for _ in range(count - 1))]
        self._argv = list(argv)
        self._count = count
        self._drain_timeout_s = drain_timeout_s
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._env = dict(os.environ)
        self._env.setdefault("TRUNKLINE_SESSION_KEY", os.urandom(24).hex())
        # One replica name for all: a copy knows its siblings by it (``siblings``).
        self._env.setdefault(REPLICA_ENV, os.urandom(3).hex())
        #: Where the copies serve their own metrics to each other (``copy_metrics``).
        self._pages_dir = tempfile.mkdtemp(prefix="trunkline-copies-")
        self._env[COPIES_DIR_ENV] = self._pages_dir

    def signal_all(self, sig: signal.Signals) -> None:
        """Pass ``sig`` on to every copy running (SIGHUP: each reloads its policy)."""
        for proc in self._procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)

    async def run(self, ready: asyncio.Future[str]) -> int:
        """Serve until cancelled or until a copy fails to start (every copy is stopped
        either way); ``ready`` gets the URL once all of them listen. The exit status."""
        try:
            failed: int | None = None
            try:
                async with asyncio.TaskGroup() as group:
                    starts = [group.create_task(self._start(i)) for i in range(self._count)]
            except* _StartFailed as group_failed:
                # Each start raises its own _StartFailed (no nested group): the first.
                failed = next(exc.code for exc in group_failed.exceptions
                              if isinstance(exc, _StartFailed))
            if failed is not None:
                return failed
            ready.set_result(starts[0].result())
            async with asyncio.TaskGroup() as group:
                for index in range(self._count):
                    group.create_task(self._keep(index))
            return 0  # pragma: no cover - _keep only ends by cancellation
        finally:
            await self._stop_all()
            for sock in self._socks:  # held here to hand each to its copy's successor
                sock.close()
            shutil.rmtree(self._pages_dir, ignore_errors=True)

    async def _start(self, index: int) -> str:
        fd = self._socks[index].fileno()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trunkline", *self._argv, LISTEN_FD_FLAG, str(fd),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, pass_fds=(fd,),
            env={**self._env, COPY_INDEX_ENV: str(index)})
        self._procs[index] = proc
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line.startswith(b"LISTENING "):
            code = await proc.wait()
            raise _StartFailed(code or 1)
        return line.split()[1].decode()

    async def _keep(self, index: int) -> None:
        """Start copy ``index`` again whenever it ends, pausing longer each time it ends
        soon after its start."""
        pause = _RESTART_FIRST_S
        loop = asyncio.get_running_loop()
        while True:
            proc = self._procs[index]
            started = loop.time()
            code = await proc.wait()
            log.error("gateway process %d (pid %d) ended with status %s; starting it again "
                      "in %.1f s", index, proc.pid, code, pause)
            await asyncio.sleep(pause)
            lived = loop.time() - started
            pause = _RESTART_FIRST_S if lived > _RESTART_MAX_S else min(pause * 2,
                                                                         _RESTART_MAX_S)
            with contextlib.suppress(_StartFailed):
                await self._start(index)

    async def _stop_all(self) -> None:
        live = [p for p in self._procs.values() if p.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in live)),
                                   self._drain_timeout_s + _KILL_GRACE_S)
        except TimeoutError:
            for proc in live:
                if proc.returncode is None:
                    log.error("gateway process pid %d did not stop: killed", proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.gather(*(p.wait() for p in live))


class _StartFailed(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"a gateway process ended before it listened (status {code})")
        self.code = code
