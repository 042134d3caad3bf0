"""How a process trunkline started ends with the process that started it, and starts
with nothing of it but what it was given.

Both kinds of child (a server's worker, a copy of ``serve --processes N``) call
``die_with_parent`` first, so even a parent killed with SIGKILL leaves none of them behind.
A worker and the worker template call ``close_inherited`` first: uvloop's
``subprocess_exec`` ignores ``close_fds`` (every inheritable descriptor of the host
reaches its children), and what a worker holds, the server it starts would inherit (a
gateway's listening socket, say).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGTERM to this process when its parent dies (Linux; elsewhere nothing), which runs
    its orderly stop. Belt and braces beside the EOF of its pipes."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def close_inherited(keep: int) -> None:
    """Close every descriptor above stderr but ``keep``: what this process was given on
    purpose. (Whoever uses ``keep`` decides whether a process it starts may have it.)"""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every descriptor number up to the limit
        fds = list(range(3, os.sysconf("SC_OPEN_MAX")))
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):  # the listing's own, already gone
                os.close(fd)
