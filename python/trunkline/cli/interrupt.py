"""Ctrl-C for a command that runs on an event loop (``trunkline status``): wherever the
SIGINT lands, the command ends promptly with exit 130, its ``finally``s run (the terminal
left as it was found), and a second SIGINT ends the process at once.

Rules:

- ``install`` takes SIGINT over from Python's default handler, and only from it: a
  command started with SIGINT ignored (a background job) keeps ignoring it, as asyncio's
  own handling does.
- Before ``run`` starts the loop, a SIGINT raises ``KeyboardInterrupt`` where it lands,
  as Python's default handler does.
- Once the loop runs, a SIGINT never raises (it could land in the loop's own bookkeeping
  and lose a callback, and then the loop's shutdown would wait for it forever): it
  cancels the command's main task and wakes the loop; one that came as the loop started
  cancels the command before it begins. The command swallows no ``CancelledError`` and
  never blocks the thread (its output goes through ``output.Output``), so it ends at the
  ``await`` it was at; ``run`` then raises ``KeyboardInterrupt``.
- The first SIGINT gives SIGINT back its default action: a second one ends the process
  at once, whatever the first is still waiting for (a write that could not be made
  non-blocking, a host name lookup on the way out).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Interrupt:
    """SIGINT while this process runs one command (see the rules above)."""

    __slots__ = ("received", "_looping", "_task")

    def __init__(self) -> None:
        self.received = False
        self._looping = False
        self._task: asyncio.Task[Any] | None = None

    def install(self) -> None:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)

    def run(self, command: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``command()`` as the main task of a new event loop; ``KeyboardInterrupt`` once
        a SIGINT came. (The coroutine is made in the task: one a SIGINT kept from starting
        is never left unawaited.)"""
        try:
            with asyncio.Runner() as runner:
                self._looping = True
                result = runner.run(self._main(command))
        except asyncio.CancelledError:
            if not self.received:
                raise
            raise KeyboardInterrupt from None
        if self.received:  # as the loop closed
            raise KeyboardInterrupt
        return result

    async def _main(self, command: Callable[[], Coroutine[Any, Any, T]]) -> T:
        self._task = asyncio.current_task()
        try:
            if self.received:
                raise asyncio.CancelledError  # it came as the loop started
            return await command()
        finally:
            self._task = None

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.received = True
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if not self._looping:
            raise KeyboardInterrupt
        task = self._task
        if task is not None:
            task.cancel()
            task.get_loop().call_soon_threadsafe(_nothing)  # out of a select() that waits


def _nothing() -> None:
    pass


__all__ = ["Interrupt"]
