"""Who wants updates of which of one server's resources.

Each watcher names URIs and gets every ``notifications/resources/updated`` for one of
them, or for a sub-resource of one (``protocol.listen.resource_matches``). The server is
asked for each URI once however many watch it, and its worker is told only what changes:
``on_change(added, removed)`` names the URIs that gained their first watcher and those
that lost their last, once per ``watch`` (however many URIs it names) and once per stop,
never the whole set (the handle sends a new worker the whole set itself: ``uris``). What
one change costs grows with the change, so watching N URIs one at a time costs N, not
N squared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..protocol.listen import subscriptions_of

log = logging.getLogger("trunkline.host")

ResourceSink = Callable[[dict[str, Any]], None]
#: ``(added, removed)``: URIs now watched by someone, and watched by nobody any more.
OnChange = Callable[[list[str], list[str]], None]


class ResourceWatchers:
    def __init__(self, server: str, on_change: OnChange) -> None:
        self._server = server
        self._on_change = on_change
        #: Each watched URI's watchers, by the number of the ``watch`` that named it.
        self._sinks: dict[str, dict[int, ResourceSink]] = {}
        self._watches = 0

    def uris(self) -> list[str]:
        """Every URI watched now."""
        return list(self._sinks)

    def __len__(self) -> int:
        return len(self._sinks)

    def watch(self, uris: Iterable[str], sink: ResourceSink) -> Callable[[], None]:
        """Give ``sink`` the updates of each of ``uris``; returns what stops that (once,
        for all of them). One change for the worker, whatever the number of URIs."""
        self._watches += 1
        number = self._watches
        named = list(dict.fromkeys(uris))
        added = []
        for uri in named:
            sinks = self._sinks.setdefault(uri, {})
            sinks[number] = sink
            if len(sinks) == 1:
                added.append(uri)
        if added:
            self._on_change(added, [])

        def unwatch() -> None:
            removed = []
            for uri in named:
                current = self._sinks.get(uri)
                if current is None or current.pop(number, None) is None:
                    continue  # stopped before
                if not current:
                    del self._sinks[uri]
                    removed.append(uri)
            named.clear()
            if removed:
                self._on_change([], removed)
        return unwatch

    def deliver(self, params: dict[str, Any]) -> None:
        uri = params.get("uri")
        if not isinstance(uri, str):
            return
        for subscribed in subscriptions_of(uri, self._sinks):
            for sink in list(self._sinks.get(subscribed, {}).values()):
                try:
                    sink(params)
                except Exception:  # one watcher must not stop the others
                    log.exception("server %r: resource watcher failed", self._server)
