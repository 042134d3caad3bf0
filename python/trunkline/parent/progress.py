"""Progress of one server's calls: each call that asks for progress gets a token unique
to it, and a ``notifications/progress`` reaches only the call whose token it carries
(MCP 2026-07-28, basic/patterns/progress; a token of no call of ours is dropped and
counted, never routed to another call)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("trunkline.host")

ProgressSink = Callable[[dict[str, Any]], None]


class ProgressRegistry:
    def __init__(self, server: str) -> None:
        self._server = server
        self._sinks: dict[str, ProgressSink] = {}
        self._next = 0
        #: Progress notifications for no call of ours (or one already finished).
        self.dropped = 0

    def watch(self, sink: ProgressSink) -> str:
        """Register ``sink``; returns the token to send in ``_meta.progressToken``."""
        self._next += 1
        token = f"tl-{self._next}"
        self._sinks[token] = sink
        return token

    def unwatch(self, token: str) -> None:
        self._sinks.pop(token, None)

    def deliver(self, params: dict[str, Any]) -> None:
        token = params.get("progressToken")
        sink = self._sinks.get(token) if isinstance(token, str) else None
        if sink is None:
            self.dropped += 1
            return
        try:
            sink(params)
        except Exception:  # noqa: BLE001 - a host callback must not break the channel
            log.exception("server %r: progress callback failed", self._server)
