"""What a server says about one call in flight: its progress and its log messages, each
given to the call it belongs to, never to another.

Each call that wants either gets a token unique to it (``_meta.progressToken``).

- **Progress** names its token: a ``notifications/progress`` reaches only the call whose
  token it carries (MCP 2026-07-28, basic/patterns/progress). A token of no call of ours
  is dropped and counted.
- **Log messages** name no request. A modern server sends them only for a request that
  asked (``_meta`` ``io.modelcontextprotocol/logLevel``), on that request's response
  stream (server/utilities/logging). Over Streamable HTTP the worker saw the stream and
  tags the message with its request's token (``Notice.stream``): exact. Over stdio there
  is no stream, so a message is a call's only when that call is the one call of this
  server that asked for logs (the spec's own advice: "set logLevel on only one in-flight
  request per server, or accept unattributed logs"). Anything else is not a call's, and
  the host's ``on_log`` gets it, as it gets every log of a legacy server (whose logs
  belong to its session, not to a request).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..channel import Notice

log = logging.getLogger("trunkline.host")

Sink = Callable[[dict[str, Any]], None]


class CallNotices:
    def __init__(self, server: str) -> None:
        self._server = server
        self._progress: dict[str, Sink] = {}
        self._logs: dict[str, Sink] = {}
        self._next = 0
        #: Progress notifications for no call of ours (or one already finished).
        self.dropped = 0

    def watch(self, on_progress: Sink | None, on_log: Sink | None = None) -> str:
        """Register a call's sinks; returns the token to send in ``_meta.progressToken``."""
        self._next += 1
        token = f"tl-{self._next}"
        if on_progress is not None:
            self._progress[token] = on_progress
        if on_log is not None:
            self._logs[token] = on_log
        return token

    def unwatch(self, token: str) -> None:
        self._progress.pop(token, None)
        self._logs.pop(token, None)

    def progress(self, params: dict[str, Any]) -> None:
        token = params.get("progressToken")
        sink = self._progress.get(token) if isinstance(token, str) else None
        if sink is None:
            self.dropped += 1
            return
        self._give(sink, params, "progress")

    def log(self, notice: Notice, *, unstreamed_modern: bool) -> bool:
        """Give a log message to its call; False when it is no call's (the host's).
        ``unstreamed_modern``: the server is modern and its transport has no per-request
        streams (stdio), so the only asking call is the message's."""
        if notice.stream is not None:
            sink = self._logs.get(notice.stream)
        elif unstreamed_modern and len(self._logs) == 1:
            sink = next(iter(self._logs.values()))
        else:
            sink = None
        if sink is None:
            return False
        self._give(sink, notice.params, "log")
        return True

    def _give(self, sink: Sink, params: dict[str, Any], what: str) -> None:
        try:
            sink(params)
        except Exception:  # noqa: BLE001 - a host callback must not break the channel
            log.exception("server %r: %s callback failed", self._server, what)
