"""What to do when a server's worker is gone: decided here, done by the handle.

Pure: events in, one decision out, the clock and the random generator passed in. Three
cases (``docs/explanation/architecture.md``, "Restarts"):

- The connection was lost (a crash, a kill, two sessions on one connection): restart with
  capped exponential backoff and full jitter, within an intensity limit (Erlang/OTP
  style: at most ``max_restarts`` in ``window_s``); past it, the server is unavailable
  for ``cool_down_s`` (a "crash loop"), then one fresh attempt is made.
- The era was refused for lack of any answer (``retry_later``: silence is no evidence):
  probe again in a fresh process after a backoff that grows with each silent attempt, up
  to ``reprobe_cap_s``; the server is unavailable meanwhile. Never counted as a crash.
  Each such attempt is more patient than the last (``patience``): its probes' deadlines
  double, up to the negotiation's ``max_discover_timeout_s``, so a server slow on every
  start is answered within a few attempts. Patience ends when the server proves an era.
- The era was refused on evidence, or the worker could not start: stay down until an
  explicit ``retry()``.
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, replace

from ..protocol.era import NegotiationConfig
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
    def __init__(self, policy: RestartPolicy, rng: random.Random,
                 negotiation: NegotiationConfig | None = None) -> None:
        """``negotiation``: the server's, as configured (its deadlines are where patience
        starts, its ``max_discover_timeout_s`` where it stops)."""
        self.policy = policy
        self._rng = rng
        self._negotiation = negotiation or NegotiationConfig()
        self._restarts: collections.deque[float] = collections.deque()
        self._silent = 0

    @property
    def patience(self) -> int:
        """The refusals for silence in a row so far: the next connection's probe deadlines
        are doubled this many times (``NegotiationConfig.after_silence``)."""
        return self._silent

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
        waits = self._negotiation.after_silence(self._silent).discover_timeout_s
        return ReprobeIn(delay, f"{reason}; probing again in {delay:.1f} s, waiting up to "
                                f"{waits:g} s")

    def ready(self) -> None:
        """The server proved an era: silence no longer accumulates, and the next
        connection waits as configured."""
        self._silent = 0

    def reset(self) -> None:
        """An explicit retry: a fresh budget, the configured deadlines."""
        self._restarts.clear()
        self._silent = 0
