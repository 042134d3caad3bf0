"""Where a host keeps what it holds for each server: the issuer the server is bound to,
the client identity there, the latest token.

Rules:

- One record (``Binding``) per server, keyed by the server's canonical URI; the record
  names the issuer its client identity and token belong to. A server whose authorization
  server changed gets a new record: the old identity and token are dropped, not carried
  over.
- ``TokenStore`` is the interface (async, so a networked store fits); ``MemoryStore``
  keeps records for the life of the process; ``FileStore`` keeps them across restarts.
- ``FileStore``: one JSON file per server in a directory the caller chooses (created with
  mode 0700 if missing), named by a hash of the server's URI; every file is mode 0600 and
  replaced atomically (written to a temporary file in the same directory, synced, then
  renamed over the old one), so a crash leaves the old record or the new, never half of
  one. A file that cannot be read back (corrupt, another server's, another format) is
  ignored with a warning that names the file only, and the server is authorized afresh.
- Secrets are written in clear only into these files (that is what 0600 is for); in
  memory they stay ``Secret``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .registration import ClientIdentity
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
    async def load(self, server: str) -> Binding | None: ...

    async def save(self, binding: Binding) -> None: ...

    async def delete(self, server: str) -> None: ...


class MemoryStore:
    """Records for the life of the process."""

    def __init__(self) -> None:
        self._records: dict[str, Binding] = {}

    async def load(self, server: str) -> Binding | None:
        return self._records.get(server)

    async def save(self, binding: Binding) -> None:
        self._records[binding.server] = binding

    async def delete(self, server: str) -> None:
        self._records.pop(server, None)


class FileStore:
    """Records in a directory, one 0600 JSON file per server. The files are small and
    written rarely (after an authorization or a refresh), so they are written in line."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, server: str) -> Path:
        return self.directory / (hashlib.sha256(server.encode()).hexdigest()[:40] + ".json")

    async def load(self, server: str) -> Binding | None:
        path = self.path_for(server)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            binding = Binding.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring unreadable token store file %s", path)
            return None
        if binding.server != server:
            log.warning("ignoring token store file %s: it is another server's", path)
            return None
        return binding

    async def save(self, binding: Binding) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps(binding.to_json(), indent=1).encode()
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:  # mkstemp makes it 0600; said again, for sure
                os.fchmod(out.fileno(), 0o600)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path_for(binding.server))
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

    async def delete(self, server: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(server).unlink()
