"""One event-loop timer for every deadline held in a correlator.

With thousands of calls in flight a loop timer per call costs about 10 µs, more than the
rest of the call path. The correlator keeps its entries' deadlines ordered (in Rust), so
one timer, armed for the earliest, is enough: when it fires, everything due is expired at
once and the timer is re-armed for the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .._codec import Correlator

#: The loop clock may fire a timer a hair early (uvloop counts milliseconds): expire
#: what is due within one tick so the timer is not re-armed for the same instant.
_TICK_S = 0.001


class DeadlineTimer:
    """Expires ``correlator`` entries whose deadline passed and hands them to
    ``on_expired`` as ``[(id, token), ...]``."""

    __slots__ = ("_loop", "_correlator", "_on_expired", "_handle", "_at")

    def __init__(self, loop: asyncio.AbstractEventLoop, correlator: Correlator[Any],
                 on_expired: Callable[[list[tuple[Any, Any]]], None]) -> None:
        self._loop = loop
        self._correlator = correlator
        self._on_expired = on_expired
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None

    def note(self, deadline: float) -> None:
        """A deadline was just added; re-arm only if it is the new earliest."""
        if self._at is None or deadline < self._at:
            self._arm(deadline)

    def check(self) -> None:
        """Entries were added with deadlines the caller did not see (set in Rust)."""
        due = self._correlator.next_deadline()
        if due is not None and (self._at is None or due < self._at):
            self._arm(due)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._at = None

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._at = when
        self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = self._at = None
        expired = self._correlator.expire(self._loop.time() + _TICK_S)
        if expired:
            self._on_expired(expired)
        self.check()
