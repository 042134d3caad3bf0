"""Where a host keeps what it holds for each server: the issuer the server is bound to,
the client identity there, the latest token.

Rules:

- One record (``Binding``) per server, keyed by the server's canonical URI; the record
  names the issuer its client identity and token belong to. A server whose authorization
  server changed gets a new record: the old identity and token are dropped, not carried
  over.
- ``TokenStore`` is the interface (async, so a networked store fits); ``MemoryStore``
  keeps records for the life of the process; ``FileStore`` keeps them across restarts;
  ``redis_store.RedisStore`` shares them between processes (gateway replicas).
- Renewal lease: ``async with store.renewal(server):`` is held around every flow that may
  spend a refresh token or obtain a new one (``flow``), so that processes sharing a store
  renew a server's token one at a time; the holder re-reads the record once it has the
  lease. A store shared by one process only needs none: ``MemoryStore`` and ``FileStore``
  lend a no-op one (one ``OAuthClient`` per process already flies once per server, and a
  ``FileStore`` directory is one host's). The method is optional: ``renewal_lease(store,
  server)`` lends the no-op to a store that has none.
- ``FileStore``: one JSON file per server in a directory the caller chooses, named by a
  hash of the server's URI, 0600 and replaced atomically (``records.FileRecords``, shared
  with the pin store). A file that cannot be read back (corrupt, another server's,
  another format) is ignored with a warning that names the file only, and the server is
  authorized afresh.
- Sealed at rest (``sealing``): given ``keys`` (``StoreKeys.from_environment()``, i.e.
  ``TRUNKLINE_STORE_KEY``), every record is sealed with AES-256-GCM, bound to its kind and
  name. Without, records are in clear in these 0600 files (in memory they stay
  ``Secret``).
- Per-user records (``user_store``) live beside the shared ones, in their own kinds:
  ``users/`` (tokens by user and server) and ``secrets/`` (a stdio server's environment
  values by user); the shared records stay where they were. A per-user view refuses a
  store kept at rest (``at_rest``) without a key.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..records import FileRecords, MemoryRecords
from .registration import ClientIdentity
from .sealing import SealedRecords, StoreKeys
from .tokens import Token

log = logging.getLogger("trunkline.auth")

FORMAT = 1


@dataclass(frozen=True)
class Binding:
    """What this host holds for one server."""

    server: str  # canonical URI
    issuer: str
    client: ClientIdentity | None = None
    token: Token | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "server": self.server, "issuer": self.issuer,
                "client": self.client.to_json() if self.client else None,
                "token": self.token.to_json() if self.token else None}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Binding:
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        client, token = doc.get("client"), doc.get("token")
        return cls(server=str(doc["server"]), issuer=str(doc["issuer"]),
                   client=ClientIdentity.from_json(client) if client else None,
                   token=Token.from_json(token) if token else None)


class TokenStore(Protocol):
    """A store may also lend a renewal lease, ``renewal(server)``: an async context
    manager held while this process renews the server's token, whose entry waits while
    another process holds it (see ``renewal_lease``)."""

    async def load(self, server: str) -> Binding | None: ...

    async def save(self, binding: Binding) -> None: ...

    async def delete(self, server: str) -> None: ...


def renewal_lease(store: TokenStore, server: str) -> contextlib.AbstractAsyncContextManager[None]:
    """The store's renewal lease for ``server``, or a no-op one if it lends none."""
    renewal = getattr(store, "renewal", None)
    return renewal(server) if renewal is not None else contextlib.nullcontext()


def record_bytes(binding: Binding) -> bytes:
    """A record as a store writes it (secrets in clear: see the rules)."""
    return json.dumps(binding.to_json(), indent=1).encode()


def read_record(data: bytes, server: str, *, where: str) -> Binding | None:
    """``server``'s record from what a store read back, or ``None`` (with a warning naming
    ``where`` only) if it is unreadable or another server's: the server is then authorized
    afresh."""
    try:
        binding = Binding.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("ignoring unreadable %s", where)
        return None
    if binding.server != server:
        log.warning("ignoring %s: it is another server's", where)
        return None
    return binding


class MemoryStore:
    """Records for the life of the process (nothing at rest: nothing to seal)."""

    keys: StoreKeys | None = None
    at_rest = False

    def __init__(self) -> None:
        self._records: dict[str, Binding] = {}
        self.user_records = SealedRecords(MemoryRecords(), None, kind="user", clear_ok=True)
        self.secret_records = SealedRecords(MemoryRecords(), None, kind="secret",
                                            clear_ok=True)

    async def load(self, server: str) -> Binding | None:
        return self._records.get(server)

    async def save(self, binding: Binding) -> None:
        self._records[binding.server] = binding

    async def delete(self, server: str) -> None:
        self._records.pop(server, None)

    def renewal(self, server: str) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


class FileStore:
    """Records in a directory, one 0600 file per server (``records.FileRecords``), sealed
    with ``keys`` when given."""

    at_rest = True

    def __init__(self, directory: str | os.PathLike[str], *,
                 keys: StoreKeys | None = None) -> None:
        self.directory = Path(directory)
        self.keys = keys
        self._files = FileRecords(self.directory)
        self.records = SealedRecords(self._files, keys, kind="record", clear_ok=True)
        self.user_records = SealedRecords(FileRecords(self.directory / "users"), keys,
                                          kind="user", clear_ok=False)
        self.secret_records = SealedRecords(FileRecords(self.directory / "secrets"), keys,
                                            kind="secret", clear_ok=False)

    def path_for(self, server: str) -> Path:
        return self._files.path_for(server)

    def holds_user_records(self) -> bool:
        """Whether any per-user record is kept here (a look at two directories)."""
        return any(any(d.glob("*.json")) for d in
                   (self.directory / "users", self.directory / "secrets") if d.is_dir())

    async def load(self, server: str) -> Binding | None:
        data = await self.records.read(server)
        if data is None:
            return None
        return read_record(data, server, where=f"token store {self._files.where(server)}")

    async def save(self, binding: Binding) -> None:
        await self.records.write(binding.server, record_bytes(binding))

    async def delete(self, server: str) -> None:
        await self.records.delete(server)

    async def aclose(self) -> None:
        pass

    def renewal(self, server: str) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()
