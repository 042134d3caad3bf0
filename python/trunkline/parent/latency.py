"""How long one server's recent calls took, for operators (``trunkline status``).

Rules:

- A sample is the seconds from a call entering ``CallSlots.call`` to its reply
  (a result or a JSON-RPC error: both are answers). A call that got no answer (a timeout,
  a lost connection, a cancel) is no sample: it is the server's last error instead.
- Only the last ``WINDOW`` samples count: an operator asks how a server does now, not
  since the host started. Memory is fixed (one array of ``WINDOW`` floats per server).
- Recording is one method call doing one store and one add (it runs once per call, on
  the hot path); all the work (sorting, ranks) is done when someone reads the summary.
- Percentiles use the nearest rank of the sorted window: p50 and p99 are samples that
  were seen, never interpolated ones.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

#: Samples kept per server (a power of two: the slot is an ``&``, not a ``%``).
WINDOW = 1024


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """The recent calls of one server: how many were answered in all, and the p50/p99 of
    the last ``WINDOW`` of them in seconds (None before the first)."""

    answered: int
    p50_s: float | None
    p99_s: float | None


class LatencyWindow:
    """The last ``WINDOW`` call latencies of one server, in a ring."""

    __slots__ = ("_samples", "_count")

    def __init__(self) -> None:
        self._samples = array("d", bytes(8 * WINDOW))
        self._count = 0

    def add(self, seconds: float) -> None:
        self._samples[self._count & (WINDOW - 1)] = seconds
        self._count += 1

    def summary(self) -> LatencySummary:
        kept = sorted(self._samples[:min(self._count, WINDOW)])
        if not kept:
            return LatencySummary(self._count, None, None)
        return LatencySummary(self._count, _nearest_rank(kept, 0.50),
                              _nearest_rank(kept, 0.99))


def _nearest_rank(ordered: list[float], fraction: float) -> float:
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


__all__ = ["WINDOW", "LatencySummary", "LatencyWindow"]
