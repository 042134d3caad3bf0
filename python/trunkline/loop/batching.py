"""Writes coalesced per event-loop tick.

Everything queued for one destination during one tick goes out in one ``writelines`` (one
syscall when the kernel takes it all), not a write per message, which runs the same client
at about 0.5-0.7x the rate.
"""

from __future__ import annotations

import asyncio


class TickBatcher:
    """Queues byte chunks for one transport and writes them all at the end of the tick.

    The transport is attached later (``attach``) because the owner often queues before
    its connection exists; chunks queued for a transport that is gone are dropped: the
    owner's close path fails whatever was waiting for them."""

    __slots__ = ("_loop", "_transport", "_queue", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.WriteTransport | None = None
        self._queue: list[bytes] = []
        self._scheduled = False

    def attach(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport

    def push(self, data: bytes) -> None:
        self._queue.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write everything queued now (also called directly before a close)."""
        self._scheduled = False
        queue, self._queue = self._queue, []
        transport = self._transport
        if transport is None or transport.is_closing() or not queue:
            return
        try:
            transport.writelines(queue)
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            pass  # the peer is gone; its end is reported by the transport's own callbacks
