"""Which of the server's notifications reach the parent, and as what.

Progress and log messages go up as they are (the parent routes progress by token to the
one call that asked for it, logs to the call or the host). A list change counts from a
legacy server's connection, where it is sent unasked, or from a modern server's
``subscriptions/listen`` stream, and only as ``protocol.listen.ListenStream`` accepts it.
The worker keeps one listen stream open for the lists the host wants announced and the
resources the parent watches (``watch_resources``, told as changes): when the server ends
it, it listens again with a new id and has the lists refetched (changes may have been
missed), never resuming the old stream; when the watched resources change, it listens
again with the new filter, once per burst of changes: those that come while a listen
request waits for its acknowledgement wait with it, and go in the next one together. A
legacy server is sent ``resources/subscribe`` for each URI added and
``resources/unsubscribe`` for each removed, one at a time, each URI once however often
it changed meanwhile; its updates count for watched resources only.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from .. import channel as ch
from ..errors import TransportLost, TrunklineError
from ..protocol.era import Era
from ..protocol.listen import (
    LIST_CHANGED,
    RESOURCE_SUBSCRIPTIONS,
    RESOURCE_UPDATED,
    ListenStream,
    Verdict,
    can_subscribe,
    filter_for,
    subscriptions_of,
)
from .peer import Peer, PeerState
from .transports import untagged

log = logging.getLogger("trunkline.worker")

#: Re-listening after the server closes the stream is bounded: a server that closes every
#: stream at once would otherwise keep the worker busy forever.
_RELISTEN_DELAY_S = 0.05
_RELISTEN_MAX = 10
_RELISTEN_WINDOW_S = 60.0
#: A legacy server's answer to resources/subscribe or unsubscribe.
_SUBSCRIBE_S = 30.0

#: Notifications forwarded to the parent as they are, and their frame types.
_FORWARDED = {"notifications/progress": ch.PROGRESS, "notifications/message": ch.LOG}


def _notice(params: dict[str, Any]) -> ch.Notice:
    """The notice for ``params``, with the stream tag an HTTP transport put in its
    ``_meta`` moved out into ``Notice.stream``."""
    params, stream = untagged(params)
    return ch.Notice(params, stream)


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
        self._stream_acknowledged: asyncio.Future[None] | None = None
        #: The resources the host wants updates of (``watch_resources``), and a wake-up
        #: for whoever keeps the server's subscriptions in line with them.
        self._resources: set[str] = set()
        self._resources_changed = asyncio.Event()
        #: For a legacy server: the URIs whose subscription is to change (URI: wanted or
        #: not), in the order they changed; None once the server is known to need none.
        self._pending: dict[str, bool] | None = {}

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
            elif method == RESOURCE_UPDATED and isinstance(params, dict):
                uri = params.get("uri")
                if isinstance(uri, str) and subscriptions_of(uri, self._resources):
                    self._updated(params)
        elif self._stream is not None:
            accepted = self._stream.accept(method, params)
            if accepted.verdict is Verdict.ACKNOWLEDGED:
                if self._stream_acknowledged is not None and \
                        not self._stream_acknowledged.done():
                    self._stream_acknowledged.set_result(None)
            elif accepted.verdict is Verdict.CHANGED and accepted.which is not None:
                self._changed(accepted.which)
            elif accepted.verdict is Verdict.UPDATED and isinstance(params, dict):
                self._updated(params)
            elif accepted.verdict is Verdict.CLOSED and self._stream_closed is not None:
                if not self._stream_closed.done():
                    self._stream_closed.set_result(accepted.reason)
            elif accepted.verdict is Verdict.DROP:
                log.debug("dropped %s: %s", method, accepted.reason)

    def watch_resources(self, added: Iterable[str], removed: Iterable[str] = ()) -> None:
        """From now on, hear no more of ``removed`` and hear of updates to ``added`` (a
        change of the parent's set; a new worker is sent the whole set as ``added``)."""
        resources, pending = self._resources, self._pending
        changed = False
        for uri in removed:
            if uri in resources:
                resources.discard(uri)
                changed = True
                if pending is not None:
                    pending[uri] = False
        for uri in added:
            if uri not in resources:
                resources.add(uri)
                changed = True
                if pending is not None:
                    pending[uri] = True
        if changed:
            self._resources_changed.set()

    def _changed(self, which: str) -> None:
        self._to_parent(ch.ListChanged(which).to_bytes())

    def _updated(self, params: dict[str, Any]) -> None:
        params = {k: v for k, v in params.items() if k != "_meta"}  # the stream's, not ours
        self._to_parent(ch.Notice(params).to_bytes(ch.RESOURCE_UPDATED))

    async def run(self, era: Era, capabilities: dict[str, Any]) -> None:
        """For as long as the connection is ready: keep a modern server's listen stream
        open for what the host wants, or a legacy server's subscriptions in line."""
        if era is Era.LEGACY and can_subscribe(capabilities):
            await self._subscribe_legacy()
            return
        self._pending = None  # only a legacy server is subscribed URI by URI
        if era is Era.MODERN:
            await self._listen(capabilities)

    # -- a legacy server: resources/subscribe and resources/unsubscribe --------------------

    async def _subscribe_legacy(self) -> None:
        """Each URI whose subscription changed, in turn: subscribed if it is wanted and
        not subscribed, unsubscribed if the opposite (a URI that changed back meanwhile
        costs nothing)."""
        pending = self._pending
        assert pending is not None
        subscribed: set[str] = set()
        while True:
            if not pending:
                self._resources_changed.clear()
                await self._resources_changed.wait()
                continue
            uri = next(iter(pending))
            wanted = pending.pop(uri)
            if wanted == (uri in subscribed):
                continue
            method = "resources/subscribe" if wanted else "resources/unsubscribe"
            try:
                await self._peer.call(method, {"uri": uri}, timeout=_SUBSCRIBE_S)
            except TrunklineError as exc:
                log.warning("server %r: %s %r failed: %s", self._peer.name, method, uri, exc)
                if wanted:
                    continue
            if wanted:
                subscribed.add(uri)
            else:
                subscribed.discard(uri)

    # -- a modern server: one listen stream for lists and resources ------------------------

    async def _listen(self, capabilities: dict[str, Any]) -> None:
        """Keep one listen stream open for the lists the host wants announced and the
        resources it watches: reopened with a new filter when the resources change (once
        the stream open was acknowledged: the changes meanwhile go in one new filter),
        and after the server ends it (the lists refetched, since changes may have been
        missed), within a bound."""
        lists = filter_for(capabilities, self._wanted)
        subscribable = can_subscribe(capabilities)
        loop = asyncio.get_running_loop()
        reopened: list[float] = []
        while True:
            self._resources_changed.clear()
            resources = sorted(self._resources) if subscribable else []
            wanted: dict[str, Any] = dict(lists)
            if resources:
                wanted[RESOURCE_SUBSCRIPTIONS] = resources
            if not wanted:
                if not subscribable:
                    return  # nothing we want is announced: TTLs drive refreshes
                await self._resources_changed.wait()
                continue
            outcome = await self._listen_once(wanted, subscribable)
            if outcome is _Ended.REFILTER:
                continue
            if outcome is _Ended.FOR_GOOD:
                return
            self._changed("tools")
            now = loop.time()
            reopened = [t for t in reopened if now - t < _RELISTEN_WINDOW_S] + [now]
            if len(reopened) > _RELISTEN_MAX:
                log.warning("listen stream closed %d times in %g s: relying on TTLs",
                            len(reopened), _RELISTEN_WINDOW_S)
                return
            await asyncio.sleep(_RELISTEN_DELAY_S)

    async def _listen_once(self, wanted: dict[str, Any], subscribable: bool) -> _Ended:
        """One stream, until it ends: how."""
        peer = self._peer
        request_id, reply = peer.open_request(
            "subscriptions/listen", orjson.dumps({"notifications": wanted}))
        # Its failure may come after this task was cancelled (the worker stopping): it
        # is retrieved, so that asyncio does not report it as lost.
        reply.add_done_callback(_retrieved)
        loop = asyncio.get_running_loop()
        self._stream = ListenStream(request_id, wanted)
        self._stream_closed = loop.create_future()
        self._stream_acknowledged = loop.create_future()
        refilter = asyncio.ensure_future(self._refilter(self._stream_acknowledged)) \
            if subscribable else loop.create_future()
        try:
            await asyncio.wait([reply, self._stream_closed, refilter],
                               return_when=asyncio.FIRST_COMPLETED)
            if refilter.done() and not reply.done():
                peer.close_request(request_id, "the subscriptions changed")
                return _Ended.REFILTER
            if not reply.done() or reply.cancelled():
                peer.close_request(request_id, "the server cancelled the stream", notify=False)
                return _Ended.AGAIN
            lost = reply.exception()
            if lost is not None and peer.state is not PeerState.READY:
                return _Ended.FOR_GOOD  # the connection ended: the worker is on its way out
            if isinstance(lost, TransportLost):
                log.info("listen stream lost (%s): listening again", lost)
                return _Ended.AGAIN  # an HTTP listen stream broke on its own
            if lost is not None:
                log.warning("subscriptions/listen failed (%s): relying on TTLs", lost)
                return _Ended.FOR_GOOD
            if reply.result().is_error:
                log.warning("server refused subscriptions/listen (%s): relying on TTLs",
                            reply.result().error_message)
                return _Ended.FOR_GOOD
            return _Ended.AGAIN
        finally:
            refilter.cancel()
            self._stream = None
            self._stream_acknowledged = None

    async def _refilter(self, acknowledged: asyncio.Future[None]) -> None:
        """Return when the stream should be opened again with new resources: they changed,
        and the server acknowledged this stream (until then, changes wait for it)."""
        await acknowledged
        await self._resources_changed.wait()


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _Ended(enum.Enum):
    AGAIN = "again"          # the server ended it: listen again, refetch the lists
    REFILTER = "refilter"    # we ended it for a new filter: listen again at once
    FOR_GOOD = "for good"    # refused, or the connection is gone
