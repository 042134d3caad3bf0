"""What to do when a server's worker is gone: decided here, done by the handle.

Pure: events in, one decision out, the clock and the random generator passed in. Three
cases (``docs/architecture.md``, "Restarts"):

- The connection was lost (a crash, a kill, two sessions on one connection): restart with
  capped exponential backoff and full jitter, within an intensity limit (Erlang/OTP
  style: at most ``max_restarts`` in ``window_s``); past it, the server is unavailable
  for ``cool_down_s`` (a "crash loop"), then one fresh attempt is made.
- The era was refused for lack of any answer (``retry_later``: silence is no evidence):
  probe again in a fresh process after a backoff that grows with each silent attempt, up
  to ``reprobe_cap_s``; the server is unavailable meanwhile. Never counted as a crash.
- The era was refused on evidence, or the worker could not start: stay down until an
  explicit ``retry()``.
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, replace

from ..settings import RestartPolicy


@dataclass(frozen=True)
class RestartIn:
    """Restart after ``delay_s``; the server is ``restarting`` meanwhile."""

    delay_s: float
    reason: str


@dataclass(frozen=True)
class CoolDown:
    """The intensity limit tripped: unavailable for ``delay_s``, then one fresh attempt
    with a fresh budget."""

    delay_s: float
    reason: str


@dataclass(frozen=True)
class ReprobeIn:
    """No evidence yet: unavailable, probed again in a fresh process after ``delay_s``."""

    delay_s: float
    reason: str


@dataclass(frozen=True)
class StayDown:
    reason: str


Decision = RestartIn | CoolDown | ReprobeIn | StayDown


class RestartPlanner:
    def __init__(self, policy: RestartPolicy, rng: random.Random) -> None:
        self.policy = policy
        self._rng = rng
        self._restarts: collections.deque[float] = collections.deque()
        self._silent = 0

    def lost(self, now: float, cause: str) -> Decision:
        """The connection was lost after the worker started."""
        policy = self.policy
        while self._restarts and now - self._restarts[0] > policy.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= policy.max_restarts:
            reason = (f"crash loop: {len(self._restarts)} restarts within {policy.window_s:g} s;"
                      f" last cause: {cause}")
            self._restarts.clear()
            self._restarts.append(now + policy.cool_down_s)
            return CoolDown(policy.cool_down_s, reason)
        delay = policy.delay(len(self._restarts), self._rng)
        self._restarts.append(now + delay)
        return RestartIn(delay, cause)

    def refused(self, reason: str, *, retry_later: bool) -> Decision:
        """The era was refused (or the worker could not start)."""
        if not retry_later:
            return StayDown(reason)
        reprobe = replace(self.policy, cap_s=self.policy.reprobe_cap_s)
        delay = reprobe.delay(self._silent, self._rng)
        self._silent += 1
        return ReprobeIn(delay, f"{reason}; probing again in {delay:.1f} s")

    def ready(self) -> None:
        """The server proved an era: silence no longer accumulates."""
        self._silent = 0

    def reset(self) -> None:
        """An explicit retry: a fresh budget."""
        self._restarts.clear()
        self._silent = 0
