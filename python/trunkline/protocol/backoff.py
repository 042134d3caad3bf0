"""Capped exponential backoff with full jitter: the one backoff of trunkline.

Restarts of a crashed server, re-probes of a server that has not answered yet, and
retries of a failed request all wait the same way: before attempt ``k`` (0 for the first
repeat) a delay drawn uniformly from ``[0, min(cap_s, base_s * factor**k)]``. Full jitter
spreads a fleet of clients that failed together instead of having them return in step.
Pure: the random generator is passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import ConfigurationError


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.1
    factor: float = 2.0
    cap_s: float = 5.0

    def __post_init__(self) -> None:
        if not (self.base_s >= 0 and self.cap_s >= 0 and self.factor >= 1):
            raise ConfigurationError(
                f"backoff needs base_s >= 0, cap_s >= 0, factor >= 1 (got base_s="
                f"{self.base_s}, cap_s={self.cap_s}, factor={self.factor})")

    def ceiling(self, attempt: int) -> float:
        """The largest delay before repeat ``attempt`` (0 for the first)."""
        if self.base_s == 0:
            return 0.0
        try:
            raw = self.base_s * self.factor ** max(attempt, 0)
        except OverflowError:
            return self.cap_s
        return min(self.cap_s, raw)

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: uniform in ``[0, ceiling(attempt)]``."""
        return rng.uniform(0.0, self.ceiling(attempt))
