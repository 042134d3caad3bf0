"""Wire-tap log: one JSONL record per line that crossed a peer's stdio.

Both ``scripted.py`` (via the ``TRUNKLINE_TAP`` env var) and ``tap.py`` (via
``--log FILE``) write this format, so tests read both with the same loader.

Record (one JSON object per log line)::

    {"dir": "in" | "out", "t": <unix time, float>, "pid": <int>,
     "src": "scripted" | "tap", "line": <str>}

* ``dir``  -- ``"in"``: bytes the client wrote to the server's stdin;
  ``"out"``: bytes the server wrote to its stdout.
* ``t``    -- ``time.time()`` when the line was seen (before it was forwarded).
* ``pid``  -- the server process the line belongs to (a log may be shared by
  several processes, e.g. across restarts).
* ``src``  -- who wrote the record: ``scripted.py`` itself, or ``tap.py``
  around some server (both can log to one file: ``tap.py`` around
  ``scripted.py`` with ``$TRUNKLINE_TAP`` set gives each line twice).
* ``line`` -- the exact bytes, *including* the trailing ``\\n`` when there was
  one, decoded as latin-1. Latin-1 maps every byte to one code point, so
  ``line.encode("latin-1")`` gives back the original bytes losslessly, even
  for invalid UTF-8. A final fragment cut off by EOF is recorded without
  ``\\n``.

Stdlib only: peers import this module by its sibling path.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

IN = "in"
OUT = "out"
TAP_ENV = "TRUNKLINE_TAP"


class TapWriter:
    """Appends records to a log file; safe across threads and processes.

    Each record is a single ``os.write`` on an ``O_APPEND`` descriptor, so
    records from concurrent writers never interleave mid-line and nothing
    sits in a user-space buffer if the process is killed.
    """

    def __init__(self, path: str | os.PathLike[str], pid: int, src: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = pid
        self._src = src
        self._lock = threading.Lock()

    def record(self, direction: str, data: bytes) -> None:
        rec = {
            "dir": direction,
            "t": time.time(),
            "pid": self._pid,
            "src": self._src,
            "line": data.decode("latin-1"),
        }
        encoded = (json.dumps(rec, separators=(",", ":")) + "\n").encode("ascii")
        with self._lock:
            _write_all(self._fd, encoded)


class LineSplitter:
    """Cuts a byte stream into lines (keeping the ``\\n``) for the tap.

    Splits on ``\\n`` only (not ``bytes.splitlines``, which also splits on
    ``\\r`` and friends): only ``\\n`` frames MCP on stdio. Partial chunks
    are kept in a list so a huge line costs one join, not one copy per chunk.
    """

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        complete: list[bytes] = []
        start = 0
        while (nl := chunk.find(b"\n", start)) != -1:
            self._parts.append(chunk[start : nl + 1])
            complete.append(b"".join(self._parts))
            self._parts.clear()
            start = nl + 1
        if start < len(chunk):
            self._parts.append(chunk[start:])
        return complete

    def flush(self) -> list[bytes]:
        """Return the unterminated tail, if any (call at EOF)."""
        tail = b"".join(self._parts)
        self._parts.clear()
        return [tail] if tail else []


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def writer_from_env(src: str) -> TapWriter | None:
    """A writer for this process into ``$TRUNKLINE_TAP``, or None when unset."""
    path = os.environ.get(TAP_ENV)
    if not path:
        return None
    return TapWriter(path, os.getpid(), src)


# ---------------------------------------------------------------- reading


def load_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records in file order; a missing file reads as no records."""
    p = Path(path)
    if not p.exists():
        return []
    raw = p.read_text(encoding="ascii").split("\n")
    # The last piece is "" after a complete record; anything else is a record
    # cut short by a kill mid-write, which we drop.
    records = []
    for text in raw[:-1]:
        if text:
            rec = json.loads(text)
            rec["bytes"] = rec["line"].encode("latin-1")
            records.append(rec)
    return records


def load(path: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """The log as ``[(dir, raw_bytes), ...]`` in file order."""
    return [(rec["dir"], rec["bytes"]) for rec in load_records(path)]


def lines(path: str | os.PathLike[str], direction: str = IN) -> list[bytes]:
    """Raw lines of one direction (default: what the server received)."""
    return [data for d, data in load(path) if d == direction]


def messages(path: str | os.PathLike[str], direction: str = IN) -> list[Any]:
    """Lines of one direction parsed as JSON; blank lines are skipped.

    Raises ``json.JSONDecodeError`` on a non-JSON line: use ``lines`` to
    assert on malformed traffic.
    """
    return [json.loads(data) for data in lines(path, direction) if data.strip()]


async def requests_of(path: str | os.PathLike[str], method: str, *,
                      timeout: float = 10.0) -> list[Any]:
    """The client's ``method`` requests in the log, once there is one (an async test
    waiting for something the host sends on its own, such as ``tasks/cancel``); an
    empty list if none came within ``timeout`` seconds."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        found = [m for m in messages(path, IN) if isinstance(m, dict)
                 and m.get("method") == method]
        if found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(0.02)
