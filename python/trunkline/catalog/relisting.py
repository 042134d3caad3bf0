"""When one server's tools are listed again: a pure pacing machine, one per server.

Rules:

1. A listing is *wanted* when the server announced that its tools changed
   (``announced``), when it is on a new connection (``announced(at_once=True)``), or
   after a listing failed (``finished(ok=False)``). Wants coalesce: any number of them
   while one is wanted make that one listing; any number while a listing runs make one
   more after it (the running one may have missed them).
2. A change announced after a quiet spell is listed at once. Quiet: no announcement for
   ``gaps.ceiling(streak)`` after the last listing ended (``HostSettings.relist``:
   0.5 s, doubling, up to 30 s). One announced sooner, or while a listing runs, is
   *pressing*: ``streak`` grows by one, and the listing waits ``gaps.ceiling(streak -
   2)`` from the last one's end, none for the first press. So a change that came while
   its server was being listed is listed again at once, and a server that announces a
   change on every listing is listed ever less often: 0.5 s apart, then 1 s, 2 s, ...,
   never more than the cap; a quiet spell starts the streak over.
3. A failed listing is tried again after ``retries.delay(failures)`` (full jitter, the
   restarts' curve: ``protocol.backoff``), the failures in a row counted; a listing that
   succeeds ends them.
4. A new connection is listed at once, gap or backoff: its tools are unknown (the old
   connection's listing died with it), and its restarts have a backoff of their own.
5. Pure: the clock (``now``, seconds) and the random generator are passed in.
"""

from __future__ import annotations

import math
import random

from ..protocol.backoff import Backoff


class RelistPacing:
    """One server's re-listings: ``announced`` / ``finished`` in, ``wait`` out."""

    __slots__ = ("_gaps", "_retries", "_rng", "_wanted", "_at_once", "_running",
                 "_ended", "_not_before", "streak", "failures")

    def __init__(self, gaps: Backoff, retries: Backoff, rng: random.Random) -> None:
        self._gaps = gaps
        self._retries = retries
        self._rng = rng
        self._wanted = False
        self._at_once = False
        #: Listings running (an explicit one may run beside a paced one).
        self._running = 0
        #: When the last listing ended.
        self._ended = -math.inf
        #: When the wanted listing may start (rule 2's wait, rule 3's backoff).
        self._not_before = -math.inf
        #: Pressing announcements in a row (rule 2).
        self.streak = 0
        #: Failed listings in a row (rule 3).
        self.failures = 0

    @property
    def wanted(self) -> bool:
        return self._wanted

    @property
    def running(self) -> bool:
        return self._running > 0

    def announced(self, now: float, *, at_once: bool = False) -> None:
        """The server's tools changed (or, ``at_once``, it is on a new connection)."""
        self._at_once = self._at_once or at_once
        if self._wanted or self._running:
            self._wanted = True  # rule 1: coalesced; one more after a running listing
            return
        self._wanted = True
        if now >= self._ended + self._gaps.ceiling(self.streak):
            self.streak = 0  # rule 2: after a quiet spell, at once
            self._not_before = now
        else:
            self._pressed()

    def wait(self, now: float) -> float | None:
        """Seconds until the wanted listing may start (0: now); None when none is."""
        if not self._wanted or self._running:
            return None
        if self._at_once:
            return 0.0
        return max(0.0, self._not_before - now)

    def started(self) -> None:
        """The wanted listing starts: it covers every want until now."""
        self._running += 1
        self._wanted = self._at_once = False

    def finished(self, now: float, ok: bool) -> None:
        """The listing ended, ``ok`` or failed."""
        self._running = max(self._running - 1, 0)
        self._ended = now
        if not ok:
            self._not_before = now + self._retries.delay(self.failures, self._rng)
            self.failures += 1
            self._wanted = True  # rule 3: tried again
            return
        self.failures = 0
        if self._wanted:
            self._pressed()  # rule 2: announced while it ran

    def _pressed(self) -> None:
        self.streak += 1
        wait = 0.0 if self.streak < 2 else self._gaps.ceiling(self.streak - 2)
        self._not_before = self._ended + wait


__all__ = ["RelistPacing"]
