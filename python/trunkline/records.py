"""Small records kept by key, as bytes: the storage under the token store (``auth.store``,
``auth.redis_store``) and the pin store (``parent.pin_store``), so that both keep their
records the same way and in the same place.

Rules:

- A record is a few bytes under a key (any string: a server's URI, a server's identity);
  a backend names it by ``record_name(key)``, a hash, so any key makes a short, safe file
  name or Redis key. What the bytes mean is the caller's.
- ``MemoryRecords``: for the life of the process.
- ``FileRecords(directory)``: one file per record in a directory the caller chooses
  (created with mode 0700 if missing); every file is mode 0600 and replaced atomically
  (written to a temporary file in the same directory, synced, then renamed over the old
  one), so a crash leaves the old record or the new, never half of one.
- ``RedisRecords(url, prefix=, kind=)``: ``<prefix><kind>:<record_name(key)>``, written
  whole by one ``SET``, no expiry; it names keys one at a time (no ``KEYS``, ``SCAN``).
  A command that fails raises what ``failure(message)`` makes, naming the store by
  scheme, host, port and database and the kind of failure only: never the URL's
  credentials, a value, nor the client library's message (which can quote a command's
  arguments), and the library's exception is neither its cause nor its context.
- ``redis`` (redis-py) is imported only when a ``RedisRecords`` is made.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from .errors import StoreUnavailable

T = TypeVar("T")


def record_name(key: str) -> str:
    """A record's name in a store: a hash of its key."""
    return hashlib.sha256(key.encode()).hexdigest()[:40]


class Records(Protocol):
    """Bytes by key (async, so a networked store fits)."""

    async def read(self, key: str) -> bytes | None: ...

    async def write(self, key: str, data: bytes) -> None: ...

    async def delete(self, key: str) -> None: ...

    def where(self, key: str) -> str:
        """Where ``key``'s record is, as a warning may name it (never its value)."""
        ...


class MemoryRecords:
    def __init__(self) -> None:
        self._records: dict[str, bytes] = {}

    async def read(self, key: str) -> bytes | None:
        return self._records.get(key)

    async def write(self, key: str, data: bytes) -> None:
        self._records[key] = data

    async def delete(self, key: str) -> None:
        self._records.pop(key, None)

    def where(self, key: str) -> str:
        return "a record in memory"


class FileRecords:
    """Records in a directory, one 0600 file each. They are small and written rarely, so
    they are written in line."""

    def __init__(self, directory: str | os.PathLike[str], *, suffix: str = ".json") -> None:
        self.directory = Path(directory)
        self.suffix = suffix

    def path_for(self, key: str) -> Path:
        return self.directory / (record_name(key) + self.suffix)

    def where(self, key: str) -> str:
        return f"file {self.path_for(key)}"

    async def read(self, key: str) -> bytes | None:
        try:
            return self.path_for(key).read_bytes()
        except FileNotFoundError:
            return None

    async def write(self, key: str, data: bytes) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:  # mkstemp makes it 0600; said again, for sure
                os.fchmod(out.fileno(), 0o600)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path_for(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        # The rename itself survives a power cut only once the directory is synced.
        with contextlib.suppress(OSError):
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    async def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(key).unlink()


def _unavailable(message: str) -> Exception:
    return StoreUnavailable(message)


class RedisRecords:
    """Records in Redis, shared between processes. One per event loop (redis-py's asyncio
    connections belong to the loop that opened them); ``aclose()`` it."""

    def __init__(self, url: str, *, prefix: str, kind: str, timeout_s: float = 5.0,
                 failure: Callable[[str], Exception] = _unavailable,
                 what: str = "the store") -> None:
        try:
            import redis.asyncio
            import redis.exceptions
        except ImportError:
            raise ImportError("a Redis store needs the redis package: "
                              "pip install 'trunkline[redis]'") from None
        if not prefix:
            raise ValueError("a Redis store needs a key prefix (one per deployment)")
        self.prefix = prefix
        self.kind = kind
        self.location = redis_location(url)
        self._failure = failure
        self._what = what
        try:
            self.client: Any = redis.asyncio.Redis.from_url(
                url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        except ValueError:
            raise ValueError(f"not a Redis URL: {self.location}") from None
        self._failures = (redis.exceptions.RedisError, OSError)  # TimeoutError is an OSError

    async def aclose(self) -> None:
        await self.client.aclose()

    def key_for(self, key: str) -> str:
        return f"{self.prefix}{self.kind}:{record_name(key)}"

    def where(self, key: str) -> str:
        return f"key {self.key_for(key)}"

    async def read(self, key: str) -> bytes | None:
        name = self.key_for(key)
        return await self.command("read a record", lambda: self.client.get(name))

    async def write(self, key: str, data: bytes) -> None:
        name = self.key_for(key)
        await self.command("write a record", lambda: self.client.set(name, data))

    async def delete(self, key: str) -> None:
        name = self.key_for(key)
        await self.command("delete a record", lambda: self.client.delete(name))

    async def command(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call``'s answer; a failure becomes ``failure(message)``, naming the kind of
        failure only, raised outside the ``except`` so nothing of the library's exception
        (its message may quote the command) stays attached to it."""
        try:
            return await call()
        except self._failures as exc:
            failure = type(exc).__name__
        raise self._failure(f"{self._what} ({self.location}) could not {what}: {failure}")


def redis_location(url: str) -> str:
    """A Redis store as an error may name it: scheme, host, port and database; no
    credentials, no query (which may carry a password)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "an unreadable URL"
    return f"{parts.scheme}://{host}{port}{parts.path}"
