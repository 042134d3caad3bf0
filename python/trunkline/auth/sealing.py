"""Records sealed at rest: what the token store keeps (tokens, client secrets, server URLs,
per-user secrets) is encrypted with a key the operator provides, so a copied store file or
a Redis dump reveals nothing.

Rules:

- The key: ``TRUNKLINE_STORE_KEY``, 32 bytes as base64url (``trunkline credentials
  new-key`` prints a fresh one). It seals every record written. ``TRUNKLINE_STORE_KEYS_OLD``
  (comma-separated, same spelling) are keys that only open: rotation is a new
  ``TRUNKLINE_STORE_KEY``, the old one moved to ``TRUNKLINE_STORE_KEYS_OLD``, then
  ``trunkline credentials rekey`` (every record re-sealed under the new key), then the old
  key dropped. A malformed key is a ``ConfigurationError`` naming the variable, never the
  value.
- The seal: AES-256-GCM (the ``cryptography`` package), a random 96-bit nonce per write,
  and as associated data the kind of record and its name (``records.record_name`` of its
  key: the server's URI, or the user and the server), so a record copied under another
  name, or into another kind, does not open. The envelope is JSON: ``format``, ``kid``
  (which key sealed it: a hash of the key, never the key), ``nonce``, ``ciphertext``. The
  store's key names are hashes already: nothing of a record is in clear.
- Opening: the key whose ``kid`` the envelope names. A record no key opens (a key that is
  gone, a record tampered with or moved) is ignored with a warning naming where it is and
  why, never its content: its user (or the host) signs in again, and nothing else is lost.
- Without a key, records are written in clear (0600 files, Redis's own access controls)
  as before; a sealed record then is ignored with a warning naming the variable. With a
  key, a record in clear is still read where the store allows clear records (shared
  records written before the key was set: ``rekey`` seals them); per-user records are
  never accepted in clear.
- ``SealedRecords`` is a ``records.Records`` whose bytes are sealed; it also reads and
  writes by record name (``names()``, ``read_named``), which is how ``rekey`` and
  ``credentials list`` walk a store without knowing its keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ConfigurationError
from ..records import record_name

log = logging.getLogger("trunkline.auth")

KEY_ENV = "TRUNKLINE_STORE_KEY"
OLD_KEYS_ENV = "TRUNKLINE_STORE_KEYS_OLD"
KEY_BYTES = 32
NONCE_BYTES = 12
ENVELOPE = "trunkline-sealed-1"
ALGORITHM = "A256GCM"


def new_key() -> str:
    """A fresh store key, as ``TRUNKLINE_STORE_KEY`` spells it."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).rstrip(b"=").decode()


def key_id(key: bytes) -> str:
    """Which key sealed a record: a hash of the key (it reveals nothing of it)."""
    return hashlib.sha256(b"trunkline store key id\x00" + key).hexdigest()[:16]


class Unsealable(ValueError):
    """A sealed record no key opens; the message says why, never the record."""


@dataclass(frozen=True)
class StoreKeys:
    """The key that seals, and every key that opens (it, then the old ones)."""

    current: bytes
    old: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        for key in (self.current, *self.old):
            if len(key) != KEY_BYTES:
                raise ValueError(f"a store key is {KEY_BYTES} bytes")

    def __repr__(self) -> str:
        return f"StoreKeys(kid={key_id(self.current)}, old={len(self.old)})"

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> StoreKeys | None:
        """The keys ``TRUNKLINE_STORE_KEY`` and ``TRUNKLINE_STORE_KEYS_OLD`` give, or
        ``None`` when the first is unset or empty."""
        env = os.environ if env is None else env
        current = env.get(KEY_ENV, "").strip()
        old = [text.strip() for text in env.get(OLD_KEYS_ENV, "").split(",") if text.strip()]
        if not current:
            if old:
                raise ConfigurationError(f"{OLD_KEYS_ENV} is set but {KEY_ENV} is not: old "
                                         "keys only open records; set the key that seals")
            return None
        return cls(_decode(current, KEY_ENV), tuple(_decode(text, OLD_KEYS_ENV) for text in old))

    @property
    def kid(self) -> str:
        return key_id(self.current)

    def seal(self, data: bytes, associated: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = AESGCM(self.current).encrypt(nonce, data, associated)
        return json.dumps({"format": ENVELOPE, "alg": ALGORITHM, "kid": self.kid,
                           "nonce": _b64(nonce), "ciphertext": _b64(sealed)}).encode()

    def open(self, envelope: dict[str, Any], associated: bytes) -> bytes:
        """``envelope``'s plaintext; ``Unsealable`` if no key opens it."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        kid = envelope.get("kid")
        key = next((k for k in (self.current, *self.old) if key_id(k) == kid), None)
        if key is None:
            raise Unsealable(f"it was sealed with a key that is not configured (key id "
                             f"{str(kid)[:16]}; is it in {OLD_KEYS_ENV}?)")
        if envelope.get("alg") != ALGORITHM:
            raise Unsealable("its envelope names an unknown algorithm")
        try:
            nonce = _unb64(envelope["nonce"])
            ciphertext = _unb64(envelope["ciphertext"])
            return AESGCM(key).decrypt(nonce, ciphertext, associated)
        except (KeyError, ValueError, TypeError, InvalidTag):
            raise Unsealable("it does not open with its key: tampered with, or moved from "
                             "another record") from None

    @property
    def every_kid(self) -> tuple[str, ...]:
        return tuple(key_id(k) for k in (self.current, *self.old))


def envelope_of(data: bytes) -> dict[str, Any] | None:
    """The sealed envelope ``data`` is, or ``None`` if it is something else (a record in
    clear, or garbage: the reader of the record decides)."""
    if not data.startswith(b"{"):
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == ENVELOPE else None


class NamedRecords(Protocol):
    """``records.Records`` that can also be walked and read by record name."""

    async def read_named(self, name: str) -> bytes | None: ...

    async def write_named(self, name: str, data: bytes) -> None: ...

    async def delete_named(self, name: str) -> None: ...

    async def names(self) -> Sequence[str]: ...

    def where_named(self, name: str) -> str: ...


class SealedRecords:
    """``records.Records`` whose bytes are sealed with ``keys`` (see the rules). ``kind``
    goes into the associated data; ``clear_ok``: a record in clear is read when there is
    a key (shared records written before it was set)."""

    def __init__(self, records: NamedRecords, keys: StoreKeys | None, *, kind: str,
                 clear_ok: bool) -> None:
        self.records = records
        self.keys = keys
        self.kind = kind
        self.clear_ok = clear_ok

    def associated(self, name: str) -> bytes:
        return f"trunkline-store\x00{self.kind}\x00{name}".encode()

    def where(self, key: str) -> str:
        return self.records.where_named(record_name(key))

    async def read(self, key: str) -> bytes | None:
        return await self.read_named(record_name(key))

    async def write(self, key: str, data: bytes) -> None:
        await self.write_named(record_name(key), data)

    async def delete(self, key: str) -> None:
        await self.records.delete_named(record_name(key))

    async def names(self) -> Sequence[str]:
        return await self.records.names()

    async def read_named(self, name: str) -> bytes | None:
        """The record's plaintext, or ``None`` (missing, or refused with a warning)."""
        data = await self.records.read_named(name)
        return None if data is None else self.opened(name, data)

    async def write_named(self, name: str, data: bytes) -> None:
        if self.keys is not None:
            data = self.keys.seal(data, self.associated(name))
        await self.records.write_named(name, data)

    async def delete_named(self, name: str) -> None:
        await self.records.delete_named(name)

    def opened(self, name: str, data: bytes) -> bytes | None:
        where = f"{self.what} {self.records.where_named(name)}"
        envelope = envelope_of(data)
        if envelope is None:
            if self.keys is None or self.clear_ok:
                return data
            log.warning("ignoring %s: it is in clear, and records of this kind are only "
                        "accepted sealed", where)
            return None
        if self.keys is None:
            log.warning("ignoring %s: it is sealed and %s is not set", where, KEY_ENV)
            return None
        try:
            return self.keys.open(envelope, self.associated(name))
        except Unsealable as exc:
            log.warning("ignoring %s: %s; %s", where, exc, self.remedy)
            return None

    async def reseal_named(self, name: str) -> str:
        """Seal record ``name`` again under the current key (``rekey``): ``"resealed"``,
        ``"current"`` (it was already), ``"unopened"`` (no key opens it: left as it is,
        with the warning reading it gives), or ``"missing"``."""
        if self.keys is None:
            raise ConfigurationError(f"rekey needs {KEY_ENV}: the key to seal under")
        data = await self.records.read_named(name)
        if data is None:
            return "missing"
        envelope = envelope_of(data)
        if envelope is not None and envelope.get("kid") == self.keys.kid:
            return "current"
        plain = self.opened(name, data)
        if plain is None:
            return "unopened"
        await self.write_named(name, plain)
        return "resealed"

    @property
    def what(self) -> str:
        return {"record": "token store record", "user": "per-user token record",
                "secret": "per-user secret record"}.get(self.kind, f"{self.kind} record")

    @property
    def remedy(self) -> str:
        return {"record": "the server is authorized afresh",
                "user": "its user signs in again",
                "secret": "an operator puts its values again"}.get(self.kind, "it is lost")


def _decode(text: str, variable: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ConfigurationError(f"{variable} must be {KEY_BYTES} bytes as base64url "
                                 "(`trunkline credentials new-key` prints one)")
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
