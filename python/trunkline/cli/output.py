"""A command's output (its stdout or stderr) written from its event loop, so that writing
never blocks the loop: a terminal nobody reads (stopped with Ctrl-S, a pane not drawn),
or a pipe into a pager that stopped reading, holds the output back, not the process. A
SIGINT then still finds the command at an ``await`` and ends it (``interrupt.py``).

Rules:

- ``write`` (rich's ``Console`` writes to an ``Output`` as to a file) only queues the
  text; ``drain`` waits, on the loop, until all of it is written.
- A terminal or a pipe is written through a non-blocking description of its own: the one
  the process inherited is shared with the shell, whose mode is not ours to change. A
  file, which never keeps a writer waiting, and a descriptor that cannot be opened again
  (a socket; a terminal we may not open) are written as they are, and may block.
- ``close`` writes what is still queued without waiting: the last words of a command a
  SIGINT ended (rich's ``Live`` stopped, the cursor shown again). A terminal with no room
  for them first discards what it holds unread, as the kernel does for a Ctrl-C typed
  there; what still does not fit (a terminal stopped with Ctrl-S, a full pipe) is
  dropped.
"""

from __future__ import annotations

import asyncio
import os
import stat
import termios
from typing import TextIO


class Output:
    """One of the process's standard streams, written from the event loop."""

    __slots__ = ("encoding", "errors", "_fd", "_own", "_terminal", "_queued")

    def __init__(self, stream: TextIO) -> None:
        stream.flush()  # what was written to it before comes first
        fd = stream.fileno()
        self.encoding = stream.encoding
        self.errors = stream.errors or "strict"
        self._terminal = os.isatty(fd)
        self._fd, self._own = fd, False
        if self._terminal or stat.S_ISFIFO(os.fstat(fd).st_mode):
            try:
                self._fd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK
                                   | os.O_NOCTTY | os.O_CLOEXEC)
                self._own = True
            except OSError:
                pass  # no /proc, or the terminal is not ours to open: written as it is
        self._queued = bytearray()

    # --- what rich's Console and print() use of a file ---------------------------------

    def write(self, text: str) -> int:
        self._queued += text.encode(self.encoding, self.errors)
        return len(text)

    def flush(self) -> None:
        """Nothing: ``drain`` writes."""

    def isatty(self) -> bool:
        return self._terminal

    def fileno(self) -> int:
        return self._fd

    # --- the driver ----------------------------------------------------------------------

    async def drain(self) -> None:
        """Until everything written so far is out; cancelled, the rest is ``close``'s."""
        while self._queued:
            if not self._write_some():
                await self._writable()

    def close(self) -> None:
        """Write what is still queued without waiting (see the rules), and let go."""
        try:
            self._write_now()
            if self._queued and self._terminal:
                termios.tcflush(self._fd, termios.TCOFLUSH)
                self._write_now()
        except OSError:
            pass  # nobody reads any more (EPIPE, EIO): there is no one to tell
        finally:
            self._queued.clear()
            if self._own:
                self._own = False
                os.close(self._fd)

    def _write_now(self) -> None:
        while self._queued and self._write_some():
            pass

    def _write_some(self) -> int:
        """Bytes written from the queue: 0 when the reader has no room."""
        try:
            written = os.write(self._fd, self._queued)
        except BlockingIOError:
            return 0
        del self._queued[:written]
        return written

    async def _writable(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_writer(self._fd, _resolve, ready)
        try:
            await ready
        finally:
            loop.remove_writer(self._fd)


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


__all__ = ["Output"]
