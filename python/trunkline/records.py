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
  ``indexed=True`` also keeps the names of its records in the set ``<prefix>index:<kind>``
  (written in the same transaction as the record), so they can be walked without a scan.
- Every backend also reads, writes and deletes by record name (``read_named``...), and
  lists the names it holds (``names()``): how a store is walked when its keys are not
  known (``auth.sealing``).
  A command that fails raises what ``failure(message)`` makes, naming the store by
  scheme, host, port and database and the kind of failure only: never the URL's
  credentials, a value, nor the client library's message (which can quote a command's
  arguments), and the library's exception is neither its cause nor its context.
- ``redis`` (redis-py) is imported only when a ``RedisRecords`` is made.
"""

from __future__ import annotations

import contextlib
import copy
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
        return await self.read_named(record_name(key))

    async def write(self, key: str, data: bytes) -> None:
        await self.write_named(record_name(key), data)

    async def delete(self, key: str) -> None:
        await self.delete_named(record_name(key))

    def where(self, key: str) -> str:
        return "a record in memory"

    async def read_named(self, name: str) -> bytes | None:
        return self._records.get(name)

    async def write_named(self, name: str, data: bytes) -> None:
        self._records[name] = data

    async def delete_named(self, name: str) -> None:
        self._records.pop(name, None)

    async def names(self) -> list[str]:
        return sorted(self._records)

    def where_named(self, name: str) -> str:
        return f"record {name} in memory"


class FileRecords:
    """Records in a directory, one 0600 file each. They are small and written rarely, so
    they are written in line."""

    def __init__(self, directory: str | os.PathLike[str], *, suffix: str = ".json") -> None:
        self.directory = Path(directory)
        self.suffix = suffix

    def path_for(self, key: str) -> Path:
        return self.path_named(record_name(key))

    def path_named(self, name: str) -> Path:
        return self.directory / (name + self.suffix)

    def where(self, key: str) -> str:
        return f"file {self.path_for(key)}"

    def where_named(self, name: str) -> str:
        return f"file {self.path_named(name)}"

    async def read(self, key: str) -> bytes | None:
        return await self.read_named(record_name(key))

    async def write(self, key: str, data: bytes) -> None:
        await self.write_named(record_name(key), data)

    async def delete(self, key: str) -> None:
        await self.delete_named(record_name(key))

    async def names(self) -> list[str]:
        """The names of the records in the directory (its files with the suffix, but the
        temporary ones)."""
        try:
            files = list(self.directory.iterdir())
        except FileNotFoundError:
            return []
        return sorted(f.name[:-len(self.suffix)] for f in files
                      if f.name.endswith(self.suffix) and not f.name.startswith(".")
                      and f.is_file())

    async def read_named(self, name: str) -> bytes | None:
        try:
            return self.path_named(name).read_bytes()
        except FileNotFoundError:
            return None

    async def write_named(self, name: str, data: bytes) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:  # mkstemp makes it 0600; said again, for sure
                os.fchmod(out.fileno(), 0o600)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path_named(name))
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

    async def delete_named(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_named(name).unlink()


def _unavailable(message: str) -> Exception:
    return StoreUnavailable(message)


class RedisRecords:
    """Records in Redis, shared between processes. One per event loop (redis-py's asyncio
    connections belong to the loop that opened them); ``aclose()`` it."""

    def __init__(self, url: str, *, prefix: str, kind: str, timeout_s: float = 5.0,
                 failure: Callable[[str], Exception] = _unavailable,
                 what: str = "the store", indexed: bool = False) -> None:
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
        self.indexed = indexed
        self.index_key = f"{prefix}index:{kind}"
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

    def sibling(self, kind: str, *, indexed: bool = False) -> RedisRecords:
        """Records of another kind under the same prefix, over the same connections."""
        other = copy.copy(self)
        other.kind = kind
        other.indexed = indexed
        other.index_key = f"{self.prefix}index:{kind}"
        return other

    def key_for(self, key: str) -> str:
        return self.key_named(record_name(key))

    def key_named(self, name: str) -> str:
        return f"{self.prefix}{self.kind}:{name}"

    def where(self, key: str) -> str:
        return f"key {self.key_for(key)}"

    def where_named(self, name: str) -> str:
        return f"key {self.key_named(name)}"

    async def read(self, key: str) -> bytes | None:
        return await self.read_named(record_name(key))

    async def write(self, key: str, data: bytes) -> None:
        await self.write_named(record_name(key), data)

    async def delete(self, key: str) -> None:
        await self.delete_named(record_name(key))

    async def read_named(self, name: str) -> bytes | None:
        key = self.key_named(name)
        data: bytes | None = await self.command("read a record", lambda: self.client.get(key))
        return data

    async def write_named(self, name: str, data: bytes) -> None:
        key = self.key_named(name)
        if not self.indexed:
            await self.command("write a record", lambda: self.client.set(key, data))
            return

        async def set_and_index() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.set(key, data)
                pipe.sadd(self.index_key, name)
                await pipe.execute()

        await self.command("write a record", set_and_index)

    async def delete_named(self, name: str) -> None:
        key = self.key_named(name)
        if not self.indexed:
            await self.command("delete a record", lambda: self.client.delete(key))
            return

        async def delete_and_unindex() -> None:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.srem(self.index_key, name)
                await pipe.execute()

        await self.command("delete a record", delete_and_unindex)

    async def names(self) -> list[str]:
        """The names of the records written since the index was kept (``indexed``)."""
        if not self.indexed:
            return []
        members = await self.command("list the records",
                                     lambda: self.client.smembers(self.index_key))
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

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
