"""Who wants updates of which of one server's resources.

Each watcher names a URI and gets every ``notifications/resources/updated`` for it, or
for a sub-resource of it (``protocol.listen.resource_matches``). The server is asked for
each URI once however many watch it: the worker is always sent the whole set of watched
URIs (a ``ResourceWatch`` frame) when it changes, and again to each new worker, which
subscribes on its own connection (a modern server's listen stream, a legacy server's
``resources/subscribe``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..protocol.listen import resource_matches

log = logging.getLogger("trunkline.host")

ResourceSink = Callable[[dict[str, Any]], None]


class ResourceWatchers:
    def __init__(self, server: str, on_uris: Callable[[list[str]], None]) -> None:
        """``on_uris(uris)``: the set of watched URIs changed (sorted)."""
        self._server = server
        self._on_uris = on_uris
        self._sinks: dict[str, list[ResourceSink]] = {}

    def uris(self) -> list[str]:
        return sorted(self._sinks)

    def watch(self, uri: str, sink: ResourceSink) -> Callable[[], None]:
        """Give ``sink`` the updates of ``uri``; returns what stops that (once)."""
        sinks = self._sinks.setdefault(uri, [])
        sinks.append(sink)
        if len(sinks) == 1:
            self._on_uris(self.uris())

        def unwatch() -> None:
            current = self._sinks.get(uri)
            if current is None or sink not in current:
                return
            current.remove(sink)
            if not current:
                del self._sinks[uri]
                self._on_uris(self.uris())
        return unwatch

    def deliver(self, params: dict[str, Any]) -> None:
        uri = params.get("uri")
        if not isinstance(uri, str):
            return
        for subscribed, sinks in list(self._sinks.items()):
            if resource_matches(uri, subscribed):
                for sink in list(sinks):
                    try:
                        sink(params)
                    except Exception:  # noqa: BLE001 - one watcher must not stop the others
                        log.exception("server %r: resource watcher failed", self._server)
