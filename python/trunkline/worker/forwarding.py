"""The worker's hot path: calls forwarded for the parent, never decoded here.

SUBMIT frames become requests stamped for the era the server proved (the codec splices
the JSON-RPC id and ``_meta`` around the parent's params), in the order the parent sent
them; answers go back as RESULT frames built by the codec from the raw line. Per call the
worker holds one correlator entry keyed by the parent's call id, and no Python object.

Each call's deadline (its SUBMIT's timeout, counted from its arrival here) is enforced
here as well as in the parent, whose clock started first: a slow or stuck parent must not
keep a server busy. A call the worker fails on its own (deadline, a lost HTTP exchange,
an answer over the size limit, a SUBMIT it cannot send) goes back as a FAILURE frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .._codec import Correlator, SubmitStamper
from ..channel import Failure
from ..errors import RequestTimeout, TrunklineError
from ..loop.deadlines import DeadlineTimer


class Forwarder:
    def __init__(
        self,
        correlator: Correlator[Any],
        *,
        write: Callable[[bytes], None],
        to_parent: Callable[[bytes], None],
        cancel: Callable[[Any, str], None],
        max_frame_bytes: int,
        lines_apart: bool = False,
        write_for: Callable[[int, bytes], None] | None = None,
    ) -> None:
        """``lines_apart``: ``write`` gets each request line on its own, not runs of them
        (the transport's ``lines_apart``), and ``write_for(slot, line)`` each line of a
        credential slot other than 0."""
        self._correlator = correlator
        self._write = write
        self._write_for = write_for
        self._to_parent = to_parent
        self._cancel = cancel
        self._stamper = SubmitStamper(correlator, max_frame_bytes, lines_apart=lines_apart)
        self._loop = asyncio.get_running_loop()
        self._deadlines = DeadlineTimer(self._loop, correlator, self._expired)

    def start_stamping(self, meta: bytes | None) -> None:
        """From now on SUBMITs become requests: stamped with ``meta`` (modern), or plain."""
        self._stamper.start_stamping(meta)

    def stop_stamping(self) -> None:
        """The connection ended: later SUBMITs come back unstamped, to be failed as never
        sent."""
        self._stamper.stop_stamping()

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """The parent's frames in ``chunk``, in order, each run of SUBMITs already stamped
        as one ``FRAME_STAMPED``; ``write_stamped`` sends those."""
        return self._stamper.feed(chunk, self._loop.time())

    def write_stamped(self, lines: bytes) -> None:
        self._write(lines)
        self._deadlines.check()  # the stamper gave the new calls their deadlines

    def write_stamped_for(self, body: bytes) -> None:
        """A ``FRAME_STAMPED_FOR``: ``u32 credential slot | request line``."""
        assert self._write_for is not None, "slots come only to a transport keeping lines apart"
        self._write_for(int.from_bytes(body[:4], "little"), body[4:])
        self._deadlines.check()

    def cancel(self, call_id: int, reason: str) -> bool:
        """Forget a forwarded call; tell the server if it was still pending."""
        request_id = self._correlator.discard_call(call_id)
        if request_id is None:
            return False
        self._cancel(request_id, reason)
        return True

    def fail(self, call_id: int, error: TrunklineError) -> None:
        """The worker ends this call without a server answer."""
        self._to_parent(Failure.to_bytes(call_id, error))

    def close(self) -> None:
        self._deadlines.cancel()

    def _expired(self, expired: list[tuple[Any, Any]]) -> None:
        for request_id, call_id in expired:
            self._cancel(request_id, "timeout")
            if isinstance(call_id, int):
                error = RequestTimeout(
                    "no reply within the call's timeout (enforced by the worker)")
                error.request_id = request_id
                self.fail(call_id, error)
