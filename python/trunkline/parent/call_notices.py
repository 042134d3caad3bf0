"""What a server says about one call in flight: its progress, its log messages and (a
legacy server) its own requests for input, each given to the call it belongs to, never to
another.

Each call that wants any of these gets a token unique to it (``_meta.progressToken``).

- **Progress** names its token: a ``notifications/progress`` reaches only the call whose
  token it carries (MCP 2026-07-28, basic/patterns/progress). A token of no call of ours
  is dropped and counted.
- **Log messages** name no request. A modern server should send them only for a request
  that asked (``_meta`` ``io.modelcontextprotocol/logLevel``), on that request's response
  stream (server/utilities/logging). Over Streamable HTTP the worker saw the stream and
  tags the message with its request's token (``Notice.stream``): exact. Over stdio there
  is no stream, and a server may log for a request that did not ask (or for none), so a
  message is a call's only while that call's request is the server's one request in
  flight (it asked for logs; no other request, asking or not, could have caused it).
  Anything else is not a call's, and the host's ``on_log`` gets it, as it gets every log
  of a legacy server (whose logs belong to its session, not to a request): one client's
  lines never reach another client.
- **A legacy server's own requests** (elicitation, sampling, roots) name no request
  either. Over Streamable HTTP the worker tags one that came on a call's response stream
  (``ServerRequest.stream``): the call's handlers answer it. Over stdio it is a call's
  only while that call's request is the server's one request in flight (anything else
  could put one client's question to another); otherwise the host's handlers answer.
  (A request about a task names it, and is never decided here: ``parent.tasks``.)

"In flight" is exact: a call says when its request is with the server (``sent``) and
when it is back (``returned``), so a call waiting for a slot, between retries or between
input rounds is not the one in flight, whatever else is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..channel import Notice, ServerRequest
from ..protocol.mrtr import InputHandler

log = logging.getLogger("trunkline.host")

Sink = Callable[[dict[str, Any]], None]


class CallNotices:
    def __init__(self, server: str) -> None:
        self._server = server
        self._progress: dict[str, Sink] = {}
        self._logs: dict[str, Sink] = {}
        self._asks: dict[str, Mapping[str, InputHandler]] = {}
        #: The watched calls whose request is with the server now.
        self._sent: set[str] = set()
        self._next = 0
        #: Progress notifications for no call of ours (or one already finished).
        self.dropped = 0

    def watch(self, on_progress: Sink | None, on_log: Sink | None = None,
              asks: Mapping[str, InputHandler] | None = None) -> str:
        """Register a call's sinks and its handlers for the server's own requests;
        returns the token to send in ``_meta.progressToken``."""
        self._next += 1
        token = f"tl-{self._next}"
        if on_progress is not None:
            self._progress[token] = on_progress
        if on_log is not None:
            self._logs[token] = on_log
        if asks:
            self._asks[token] = asks
        return token

    def unwatch(self, token: str) -> None:
        self._progress.pop(token, None)
        self._logs.pop(token, None)
        self._asks.pop(token, None)
        self._sent.discard(token)

    def sent(self, token: str) -> None:
        """The request of the call watched as ``token`` is with the server now."""
        self._sent.add(token)

    def returned(self, token: str) -> None:
        """... and is not any more (answered, failed, or given up)."""
        self._sent.discard(token)

    def _only(self, in_flight: int) -> str | None:
        """The token of the call whose request is the server's one request in flight
        (``in_flight``: the server's requests in flight now), if there is one."""
        if in_flight == 1 and len(self._sent) == 1:
            return next(iter(self._sent))
        return None

    def handler_for(self, request: ServerRequest, in_flight: int) -> InputHandler | None:
        """The handler of the call a server's own request belongs to (``in_flight``: the
        server's requests in flight now), or None when it is no call's."""
        token = request.stream if request.stream is not None else self._only(in_flight)
        asks = None if token is None else self._asks.get(token)
        return None if asks is None else asks.get(request.method)

    def progress(self, params: dict[str, Any]) -> None:
        token = params.get("progressToken")
        sink = self._progress.get(token) if isinstance(token, str) else None
        if sink is None:
            if token not in self._logs and token not in self._asks:
                self.dropped += 1  # a call of ours that wants no progress drops it quietly
            return
        self._give(sink, params, "progress")

    def log(self, notice: Notice, *, unstreamed_modern: bool, in_flight: int) -> bool:
        """Give a log message to its call; False when it is no call's (the host's).
        ``unstreamed_modern``: the server is modern and its transport has no per-request
        streams (stdio), so the message is the call's whose request is the server's one
        request in flight (``in_flight``: the server's requests in flight now)."""
        if notice.stream is not None:
            sink = self._logs.get(notice.stream)
        elif unstreamed_modern and (token := self._only(in_flight)) is not None:
            sink = self._logs.get(token)
        else:
            sink = None
        if sink is None:
            return False
        self._give(sink, notice.params, "log")
        return True

    def _give(self, sink: Sink, params: dict[str, Any], what: str) -> None:
        try:
            sink(params)
        except Exception:  # a host callback must not break the channel
            log.exception("server %r: %s callback failed", self._server, what)
