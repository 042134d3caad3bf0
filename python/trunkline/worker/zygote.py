"""``python -m trunkline.worker.zygote FD``: the worker template, which forks workers.

A worker started as a fresh interpreter spends ~0.2 s of CPU importing what it runs;
hundreds of servers at once pay that hundreds of times over, and keep hundreds of private
copies of the same modules. The template imports them once; each worker is a fork of it,
ready at once, sharing those pages with its siblings until it writes to them.

Rules:

1. The template never runs an event loop or starts a thread, so a fork of it is as clean
   as a fresh interpreter. (The host itself is never forked: it has both.) Its heap is
   frozen (``gc.freeze``) before each fork, so no collection dirties the shared pages.
   It imports what a stdio worker runs at start, and what a Streamable HTTP worker runs
   (its HTTP client, httptools) before the first one it forks.
2. Messages over the control socket ``FD`` (``SOCK_SEQPACKET``, one message each; the
   first byte says what it is), answered in order:

   - host → template ``S`` + a ``WorkerSpec``, with the worker's end of its channel as an
     attached descriptor: fork a worker.
   - template → host ``P`` + the child's pid (8 bytes), with a pidfd for it attached,
     opened before the child can be reaped, so it can never name another process; or
     ``F`` + why the fork failed.
   - template → host ``X`` + pid (8 bytes) + exit status (4 bytes, signed; ``-N`` for
     signal ``N``), for every child that ended: the template reaps them.

3. A child calls ``run`` (the same as a spawned worker) in its own session, and dies with
   the template as a spawned worker dies with the host; the template dies with the host,
   and ends when its control socket does.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import traceback

from ..channel import WorkerSpec
from ..lifetime import close_inherited, die_with_parent
from ..params import HttpParams
from . import __main__ as entry
from .transports import stdio as _stdio  # noqa: F401 - what every stdio worker runs

try:  # the loop every worker installs (``__main__._install_loop``)
    import uvloop as _uvloop  # noqa: F401 - imported once here, before every fork
except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
    pass

#: A WorkerSpec is a few kB; this is room for any configuration.
MAX_MESSAGE_BYTES = 1 << 20
EXIT_CHILD_FAILED = 70


def _import_what_it_runs(spec: bytes) -> None:
    """A Streamable HTTP worker runs its transport and HTTP client (httptools): imported
    here once, before the first such fork, rather than after every one of them. (A spec
    that does not decode is the child's to report.)"""
    if "trunkline.worker.transports.http" in sys.modules:
        return
    try:
        params = WorkerSpec.from_bytes(spec).server.params
    except Exception:  # noqa: BLE001 - the child reports a spec that does not decode
        return
    if isinstance(params, HttpParams):
        from .transports import http as _http  # noqa: F401 - imported for the forks


def _child(spec: bytes, fd: int, inherited: list[int], template: int) -> None:
    code = EXIT_CHILD_FAILED
    try:
        for f in inherited:
            os.close(f)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()  # its own session, as a spawned worker has
        die_with_parent()
        # Nothing to run once the template died before the line above.
        code = 0 if os.getppid() != template else entry.run(spec, fd)
    except BaseException:  # noqa: BLE001 - the exit status says it; the trace says why
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - nothing more can be said
                pass
        os._exit(code)


class Template:
    def __init__(self, control: socket.socket) -> None:
        self._control = control
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    def serve(self) -> None:
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select via the pipe
        watched: list[socket.socket | int] = [self._control, self._wake_r]
        while True:
            try:
                readable, _, _ = select.select(watched, [], [])
            except InterruptedError:
                continue
            if self._wake_r in readable:
                os.read(self._wake_r, 4096)
                self._reap()
            if self._control in readable:
                try:
                    message, fds, _flags, _addr = socket.recv_fds(
                        self._control, MAX_MESSAGE_BYTES, 1)
                except InterruptedError:
                    continue
                except OSError:
                    return
                if not message:
                    return  # the host closed its end: the template's work is done
                if message[:1] == b"S" and len(fds) == 1:
                    _import_what_it_runs(message[1:])
                    self._fork(message[1:], fds[0])
                else:
                    for fd in fds:
                        os.close(fd)
                    self._tell(b"F" + b"unknown request")

    def _fork(self, spec: bytes, fd: int) -> None:
        gc.freeze()  # everything imported so far, shared with the child as it is
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(fd)
            self._tell(b"F" + str(exc).encode())
            return
        if pid == 0:
            _child(spec, fd, [self._control.fileno(), self._wake_r, self._wake_w],
                   os.getppid())
        os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # no pidfd, no way to name the child safely: it goes
            os.kill(pid, signal.SIGKILL)
            self._tell(b"F" + f"no pidfd for the worker: {exc}".encode())
            return
        try:
            socket.send_fds(self._control, [b"P" + pid.to_bytes(8, "big")], [pidfd])
        except OSError:
            # The host closed its end while the worker was forked (it is stopping): no one
            # would supervise the worker, so it goes now (reaped like any other).
            os.kill(pid, signal.SIGKILL)
        finally:
            os.close(pidfd)

    def _tell(self, message: bytes) -> None:
        """A message to the host, if it still listens (one that has closed its end is
        stopping: the template's next read sees that and ends)."""
        try:
            self._control.send(message)
        except OSError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            self._tell(b"X" + pid.to_bytes(8, "big") + code.to_bytes(4, "big", signed=True))


def main(argv: list[str]) -> int:
    die_with_parent()
    control = int(argv[1])
    close_inherited(keep=control)  # a worker is forked from this: it inherits it all
    Template(socket.socket(fileno=control)).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
