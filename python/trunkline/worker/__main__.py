"""``python -m trunkline.worker FD``: a worker process (see ``worker.py``).

It reads its ``WorkerSpec`` from stdin, then talks to the parent over the socket
inherited as ``FD``. Started by the parent only, with a fresh interpreter (spawn, never a
fork of a threaded parent), or forked by the worker template (``zygote``), which runs
``run`` in the child.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from ..channel import WorkerSpec
from ..lifetime import close_inherited, die_with_parent
from ..log_format import configure_inherited
from .worker import EXIT_BAD_CONFIG, Worker


def _install_loop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run(spec: bytes, fd: int) -> int:
    """A worker's whole life, from its specification and its end of the channel, in a
    fresh interpreter or a fork of the template (``zygote``)."""
    try:
        worker = Worker(WorkerSpec.from_bytes(spec))
    except Exception as exc:  # noqa: BLE001 - a broken parent/worker pairing: say so loudly
        print(f"trunkline worker: bad configuration: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    configure_inherited(worker.spec.server.name)
    # The channel came inheritable (passed to a new interpreter, or received by the
    # template without close-on-exec): the server this worker starts must not get it, or
    # it could talk to the host as the worker. (Both ways of starting a worker pass here.)
    os.set_inheritable(fd, False)
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


def main(argv: list[str]) -> int:
    die_with_parent()  # the server's process group is stopped before we exit
    fd = int(argv[1])
    close_inherited(keep=fd)
    return run(sys.stdin.buffer.read(), fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
