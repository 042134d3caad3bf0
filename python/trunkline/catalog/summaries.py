"""One log line for many: what one listing of a server's tools says, summed up. Pure.

Rules:

1. A listing's warnings (``CatalogWarning``: duplicates, nonstandard names, malformed
   tools, cache hints) and its screening's quarantines (``Quarantine``) are each said in
   at most one line per server and listing, never one per tool: a server listing
   thousands of bad tools costs the log one line.
2. One warning or quarantine is said whole, as it reads (``str``); more are counted, by
   reason for quarantines, with the first ``NAMED`` tools named and where to read the
   rest (``host.quarantined()``, ``trunkline pins list``; ``host.warnings``).
3. A line is said once per change: ``Said`` remembers, per server, what was last said,
   and says nothing for a listing whose warnings (or quarantines) are what they were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from .model import CatalogWarning
from .pins import Quarantine

#: Tools a summary names before it counts the rest.
NAMED = 3


def quarantines_line(server: str, held: Sequence[Quarantine]) -> str | None:
    """Rule 2 for quarantines; None for none."""
    if not held:
        return None
    if len(held) == 1:
        return str(held[0])
    reasons = Counter(q.reason for q in held)
    why = ", ".join(f"{count} {reason}" for reason, count in reasons.most_common())
    return (f"server {server!r}: {len(held)} tools quarantined ({why}; first: "
            f"{_first(q.tool for q in held)}); host.quarantined() says why each (trunkline "
            "pins list, for those held for their pins)")


def warnings_line(server: str, warnings: Sequence[CatalogWarning]) -> str | None:
    """Rule 2 for a listing's warnings; None for none."""
    if not warnings:
        return None
    if len(warnings) == 1:
        return str(warnings[0])
    kinds = Counter(w.kind for w in warnings)
    what = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    first = warnings[0]
    said = first.message if first.tool is None else f"tool {first.tool!r}: {first.message}"
    return (f"server {server!r}: {len(warnings)} warnings about its tool list ({what}); "
            f"first: {said}; host.warnings lists them all")


class Said:
    """Rule 3: what was last said of each server, so that a line is said once per
    change."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], object] = {}

    def news(self, server: str, topic: str, what: object) -> bool:
        """Whether ``what`` (a hashable summary of ``topic``) differs from what was
        last said of ``server``'s ``topic``; remembered either way."""
        key = (server, topic)
        if self._last.get(key) == what:
            return False
        self._last[key] = what
        return True

    def forget(self, server: str) -> None:
        for key in [k for k in self._last if k[0] == server]:
            del self._last[key]


def _first(names: Iterable[str]) -> str:
    listed = list(names)
    named = ", ".join(repr(n) for n in listed[:NAMED])
    return named + (f", and {len(listed) - NAMED} more" if len(listed) > NAMED else "")


__all__ = ["NAMED", "Said", "quarantines_line", "warnings_line"]
