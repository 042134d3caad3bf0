"""How a process trunkline started ends with the process that started it: both kinds of
child (a server's worker, a copy of ``serve --processes N``) call ``die_with_parent``
first, so even a parent killed with SIGKILL leaves none of them behind."""

from __future__ import annotations

import contextlib
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGTERM to this process when its parent dies (Linux; elsewhere nothing), which runs
    its orderly stop. Belt and braces beside the EOF of its pipes."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
