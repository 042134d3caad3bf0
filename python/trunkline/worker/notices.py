"""Which of the server's notifications reach the parent, and as what.

Progress and log messages go up as they are (the parent routes progress by token to the
one call that asked for it, logs to the host). A list change counts from a legacy server's
connection, where it is sent unasked, or from a modern server's ``subscriptions/listen``
stream, and only as ``protocol.listen.ListenStream`` accepts it. The worker keeps one
listen stream open for the lists the host wants announced: when the server ends it, it
listens again with a new id and has the lists refetched (changes may have been missed),
never resuming the old stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from .. import channel as ch
from ..errors import TransportLost
from ..protocol.era import Era
from ..protocol.listen import LIST_CHANGED, ListenStream, Verdict, filter_for
from .peer import Peer, PeerState
from .transports import STREAM_TAG

log = logging.getLogger("trunkline.worker")

#: Re-listening after the server closes the stream is bounded: a server that closes every
#: stream at once would otherwise keep the worker busy forever.
_RELISTEN_DELAY_S = 0.05
_RELISTEN_MAX = 10
_RELISTEN_WINDOW_S = 60.0

#: Notifications forwarded to the parent as they are, and their frame types.
_FORWARDED = {"notifications/progress": ch.PROGRESS, "notifications/message": ch.LOG}


def _notice(params: dict[str, Any]) -> ch.Notice:
    """The notice for ``params``, with the stream tag an HTTP transport put in its
    ``_meta`` moved out into ``Notice.stream`` (the server's own ``_meta`` stays)."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or STREAM_TAG not in meta:
        return ch.Notice(params)
    stream = meta[STREAM_TAG]
    rest = {k: v for k, v in meta.items() if k != STREAM_TAG}
    params = {k: v for k, v in params.items() if k != "_meta"}
    if rest:
        params["_meta"] = rest
    return ch.Notice(params, stream if isinstance(stream, str) else None)


class NotificationRouter:
    def __init__(self, peer: Peer, wanted: Mapping[str, bool],
                 to_parent: Callable[[bytes], None], *, streamed: bool = False) -> None:
        """``streamed``: the transport tags log messages with their stream (Streamable
        HTTP); on any other a tag can only be the server's own, and is dropped."""
        self._peer = peer
        self._streamed = streamed
        self._wanted = dict(wanted)
        self._to_parent = to_parent
        self._stream: ListenStream | None = None
        self._stream_closed: asyncio.Future[str] | None = None

    def on_notification(self, method: str, line: bytes) -> None:
        params = orjson.loads(line).get("params")
        if method in _FORWARDED:
            if isinstance(params, dict):
                notice = _notice(params)
                if notice.stream is not None and not self._streamed:
                    notice = ch.Notice(notice.params)
                self._to_parent(notice.to_bytes(_FORWARDED[method]))
        elif self._peer.era is Era.LEGACY:
            if method in LIST_CHANGED:
                self._changed(LIST_CHANGED[method])
        elif self._stream is not None:
            accepted = self._stream.accept(method, params)
            if accepted.verdict is Verdict.CHANGED and accepted.which is not None:
                self._changed(accepted.which)
            elif accepted.verdict is Verdict.CLOSED and self._stream_closed is not None:
                if not self._stream_closed.done():
                    self._stream_closed.set_result(accepted.reason)
            elif accepted.verdict is Verdict.DROP:
                log.debug("dropped %s: %s", method, accepted.reason)

    def _changed(self, which: str) -> None:
        self._to_parent(ch.ListChanged(which).to_bytes())

    async def listen(self, capabilities: dict[str, Any]) -> None:
        """Keep one listen stream open (modern servers), for as long as it is useful."""
        wanted = filter_for(capabilities, self._wanted)
        if not wanted:
            return  # the server announces nothing we asked for: TTLs drive refreshes
        loop = asyncio.get_running_loop()
        reopened: list[float] = []
        while await self._listen_once(wanted):
            self._changed("tools")
            now = loop.time()
            reopened = [t for t in reopened if now - t < _RELISTEN_WINDOW_S] + [now]
            if len(reopened) > _RELISTEN_MAX:
                log.warning("listen stream closed %d times in %g s: relying on TTLs",
                            len(reopened), _RELISTEN_WINDOW_S)
                return
            await asyncio.sleep(_RELISTEN_DELAY_S)

    async def _listen_once(self, wanted: dict[str, bool]) -> bool:
        """One stream, until it ends; whether to listen again."""
        peer = self._peer
        request_id, reply = peer.open_request(
            "subscriptions/listen", orjson.dumps({"notifications": wanted}))
        self._stream = ListenStream(request_id, wanted)
        self._stream_closed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait([reply, self._stream_closed],
                               return_when=asyncio.FIRST_COMPLETED)
            if not reply.done() or reply.cancelled():
                peer.close_request(request_id, "the server cancelled the stream", notify=False)
                return True
            lost = reply.exception()
            if lost is not None and peer.state is not PeerState.READY:
                return False  # the connection ended: the worker is on its way out
            if isinstance(lost, TransportLost):
                log.info("listen stream lost (%s): listening again", lost)
                return True  # an HTTP listen stream broke on its own
            if lost is not None:
                log.warning("subscriptions/listen failed (%s): relying on TTLs", lost)
                return False
            if reply.result().is_error:
                log.warning("server refused subscriptions/listen (%s): relying on TTLs",
                            reply.result().error_message)
                return False
            return True
        finally:
            self._stream = None
