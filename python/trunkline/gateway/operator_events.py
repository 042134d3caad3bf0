"""``GET /admin/api/events``: the operator API's documents as they change, as server-sent
events (``text/event-stream``).

Rules:

1. A stream opens with the current ``servers`` and ``quarantine`` documents
   (``operator_documents``), each an event of that name whose data is the document.
2. Then an event of a document comes whenever the document is not what the stream last
   sent of it: looked at when the host says a server or the catalog changed (coalesced:
   a burst of changes within ``SETTLE_S`` is one look), and every ``POLL_S`` (calls in
   flight and latencies change with every call, and nothing says so).
3. ``event: reload`` carries each reload's outcome (``ReloadOutcome.to_json()``) as it
   ends; a stream that is behind keeps the last ``MAX_RELOADS_BEHIND`` of them.
4. A comment line is sent when nothing was for ``HEARTBEAT_S``, so proxies and browsers
   keep an idle stream open.
5. At most ``MAX_STREAMS`` streams at once (503 beyond); every stream ends when the
   gateway stops (``close``), or when its client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from .exchange import Exchange
from .replies import HttpReply, json_reply

SETTLE_S = 0.2
POLL_S = 2.0
HEARTBEAT_S = 15.0
MAX_RELOADS_BEHIND = 16
MAX_STREAMS = 32
_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-store",
            "X-Accel-Buffering": "no"}


def event(name: str, document: bytes) -> bytes:
    """One SSE event (the document is one line of JSON)."""
    return b"event: " + name.encode() + b"\ndata: " + document + b"\n\n"


class _Reader:
    """What one stream waits for."""

    def __init__(self) -> None:
        self.woken = asyncio.Event()
        self.reloads: deque[bytes] = deque(maxlen=MAX_RELOADS_BEHIND)


class OperatorEvents:
    """The streams of one gateway process. ``documents``: each document's name and a
    function that makes it now."""

    def __init__(self, documents: dict[str, Callable[[], dict[str, Any]]]) -> None:
        self._documents = documents
        self._readers: set[_Reader] = set()
        self._closed = False

    def changed(self, *_: object) -> None:
        """Something the documents show may have changed (rule 2)."""
        for reader in self._readers:
            reader.woken.set()

    def reloaded(self, outcome: dict[str, Any]) -> None:
        """A reload ended (rule 3)."""
        data = orjson.dumps(outcome)
        for reader in self._readers:
            reader.reloads.append(data)
            reader.woken.set()

    def close(self) -> None:
        """End every stream (rule 5)."""
        self._closed = True
        self.changed()

    async def stream(self, exchange: Exchange) -> HttpReply | None:
        """One stream, until the gateway stops or the client goes away."""
        if self._closed:
            return json_reply({"error": "the gateway is stopping"}, 503,
                              {"Retry-After": "1"})
        if len(self._readers) >= MAX_STREAMS:
            return json_reply({"error": f"{MAX_STREAMS} event streams are open: close "
                                        "one first"}, 503, {"Retry-After": "5"})
        reader = _Reader()
        self._readers.add(reader)
        try:
            exchange.cancel_when_gone()
            sent = {name: orjson.dumps(make()) for name, make in self._documents.items()}
            await exchange.open_stream(_HEADERS, b"retry: 2000\n\n" + b"".join(
                event(name, document) for name, document in sent.items()))
            loop = asyncio.get_running_loop()
            quiet_since = loop.time()
            while not self._closed:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(POLL_S):
                        await reader.woken.wait()
                        await asyncio.sleep(SETTLE_S)  # a burst of changes: one look
                reader.woken.clear()
                if self._closed:
                    break
                out = [event("reload", outcome) for outcome in reader.reloads]
                reader.reloads.clear()
                for name, make in self._documents.items():
                    document = orjson.dumps(make())
                    if document != sent[name]:
                        sent[name] = document
                        out.append(event(name, document))
                if not out and loop.time() - quiet_since >= HEARTBEAT_S:
                    out.append(b": keep-alive\n\n")
                if out:
                    quiet_since = loop.time()
                    await exchange.write(b"".join(out))
            await exchange.close_stream()
        finally:
            self._readers.discard(reader)
        return None


__all__ = ["HEARTBEAT_S", "MAX_STREAMS", "OperatorEvents", "event"]
