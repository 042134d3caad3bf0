"""Which changes of the fleet's prompts and resources lists the gateway's clients are told
of (``notifications/prompts/list_changed``, ``notifications/resources/list_changed``).

The host keeps no such list: it says when a server announced a change of its list, and
when a server offering one came or went (``Host.watch_offerings``). The gateway serves the
merged lists (``Offerings``), so it can list them again and compare.

Rules:

1. A server's own announcement (its ``list_changed``) is told at once, as it came,
   without listing anything: the list may have changed and changed back.
2. A server offering a list that came or went (started, stopped, restarted; a reload's
   additions, removals and replacements, which the host tells together at its end:
   ``Host.batched``) makes the gateway list the prompts and resources again, and the change
   is told only if what a client would be listed differs from what was listed before it
   (``OfferingsTable.served``: every item whole, keys sorted, in no order).
3. One listing at a time: whatever comes while one runs is listed once after it, however
   much it is. Many servers restarting at once are a few listings, not one each.
4. Where it cannot compare, it tells: when the listing fails, for a list whose last listing
   is not known (never listed before the change; a server announced a change of it since),
   and when a server announces a change while the listing runs (its own telling stands).
5. What was listed before is known from a listing made when nothing was left to tell: the
   first one (made when the gateway starts, ``start``), and each listing made for rule 2
   (for a list it was not made for, only if no change of that list came while it ran and
   no reload was under way at either end, so it holds nothing not yet told).
6. The lists compared are the fleet's, before any policy: a change a policy hides from an
   identity is still told to its client (it lists again and sees the same).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from ..parent.host import OFFERINGS, Host
from .offerings import Offerings

log = logging.getLogger("trunkline.gateway")

#: A list as served, in the form compared (``OfferingsTable.served``).
Served = tuple[tuple[str, ...], ...]


class OfferingChanges:
    """Tells its listeners each change of the prompts or resources list a client is to
    hear of (the rules above), from what the host says (``announced``, ``moved``)."""

    def __init__(self, host: Host, offerings: Offerings) -> None:
        self._host = host
        self._offerings = offerings
        self._listeners: list[Callable[[str], None]] = []
        #: What each list was when last listed with nothing left to tell (rule 5).
        self._listed: dict[str, Served] = {}
        #: The lists a server came or went for since the listing under way began.
        self._pending: set[str] = set()
        #: Announcements of each list so far (rule 4: one during a listing).
        self._announced: Counter[str] = Counter()
        self._relisting: asyncio.Task[None] | None = None

    def watch(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """Have ``on_change(which)`` hear each change to tell; what stops it."""
        self._listeners.append(on_change)
        return lambda: self._listeners.remove(on_change) \
            if on_change in self._listeners else None

    def start(self) -> None:
        """List now, to know what is served before any change (rule 5). Without it, the
        first change of each list is told uncompared (rule 4)."""
        self._relist_soon()

    def announced(self, which: str) -> None:
        """A server announced that its list ``which`` changed (rule 1)."""
        self._offerings.noted()
        self._announced[which] += 1
        self._listed.pop(which, None)
        self._tell(which)

    def moved(self, which: str) -> None:
        """A server offering list ``which`` came or went (rule 2)."""
        self._offerings.noted()
        self._pending.add(which)
        self._relist_soon()

    def close(self) -> None:
        """Stop: a listing under way is cancelled, nothing more is told."""
        self._listeners.clear()
        if self._relisting is not None:
            self._relisting.cancel()

    async def aclose(self) -> None:
        """``close``, and wait for the listing under way to end."""
        self.close()
        if self._relisting is not None:
            await asyncio.gather(self._relisting, return_exceptions=True)

    def _relist_soon(self) -> None:
        if self._relisting is None or self._relisting.done():
            self._relisting = asyncio.get_running_loop().create_task(
                self._relist(), name="prompts and resources listed again")

    async def _relist(self) -> None:
        while True:
            lists, self._pending = self._pending, set()
            announced = self._announced.copy()
            quiet = not self._host.batching
            try:
                table = await self._offerings.refresh()
            except Exception as exc:  # noqa: BLE001 - rule 4: told, not compared
                log.warning("prompts and resources could not be listed again (%s): "
                            "a change of %s is told uncompared", exc,
                            " and ".join(sorted(lists)) or "neither")
                for which in sorted(lists):
                    self._listed.pop(which, None)
                    self._tell(which)
            else:
                quiet = quiet and not self._host.batching
                for which in OFFERINGS:
                    self._compare(which, table.served(which), which in lists,
                                  announced=self._announced[which] != announced[which],
                                  quiet=quiet and which not in self._pending)
            if not self._pending:
                return

    def _compare(self, which: str, now: Served, moved: bool, *, announced: bool,
                 quiet: bool) -> None:
        if announced:  # told as it came; what was listed is not known (rule 4)
            self._listed.pop(which, None)
        elif moved:
            if self._listed.get(which) != now:
                self._tell(which)
            self._listed[which] = now
        elif quiet and which not in self._listed:
            self._listed[which] = now

    def _tell(self, which: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(which)
            except Exception:  # one listener must not keep the others from hearing
                log.exception("a listener of the prompts and resources lists failed")


__all__ = ["OfferingChanges"]
