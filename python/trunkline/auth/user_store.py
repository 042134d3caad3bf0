"""What the token store keeps per user: tokens by (user, server), and the secrets an
operator set for a user's own stdio server instances.

Rules:

- A user is ``Identity.key`` (kind, issuer, subject). A user's token record is keyed by
  (user, the server's canonical URI), in the store's ``user`` kind; the shared records
  (``TokenStore.load(server)``) are untouched, where they always were.
- ``UserTokenStore(store, identity)`` is a ``TokenStore`` bound to one user: an
  ``OAuthClient`` runs over it unchanged, its renewal lease included (one lease per user
  and server, so one user's renewal never waits for another's).
- ``StoredUserSecrets(store)`` is the host's ``UserSecrets`` (``parent.instances``): one
  record per (user, server name) in the ``secret`` kind, the values set by an operator
  (``trunkline credentials put``), never by a client.
- A store kept at rest (files, Redis) holds per-user records only sealed: a view over one
  without a key refuses to be made (``StoreKeyMissing``, naming ``TRUNKLINE_STORE_KEY``).
- Each record names its user and server inside it too (sealed); a record whose content is
  another user's or another server's is ignored with a warning naming where it is.
- ``user_entries`` and ``secret_entries`` walk a store's per-user records (for ``trunkline
  credentials list|revoke|rekey``), never yielding one no key opens.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import StoreKeyMissing
from ..policy.identity import Identity
from .sealing import KEY_ENV, SealedRecords, StoreKeys
from .store import Binding

log = logging.getLogger("trunkline.auth")

FORMAT = 1

_Entry = TypeVar("_Entry")

#: A user: (kind, issuer, subject), ``Identity.key``.
UserKey = tuple[str, str | None, str]


class UserRecordStore(Protocol):
    """A store that keeps per-user records (``FileStore``, ``RedisStore``,
    ``MemoryStore``)."""

    keys: StoreKeys | None
    at_rest: bool
    user_records: SealedRecords
    secret_records: SealedRecords


def require_sealed(store: UserRecordStore) -> None:
    """Refuse per-user records in a store kept at rest without a key."""
    if store.at_rest and store.keys is None:
        raise StoreKeyMissing(
            f"per-user credentials are kept only sealed: set {KEY_ENV} (a 32-byte key, "
            "base64url; `trunkline credentials new-key` prints one)")


def token_record_key(user: UserKey, server: str) -> str:
    return json.dumps(["token", *user, server])


def secret_record_key(user: UserKey, server: str) -> str:
    return json.dumps(["secret", *user, server])


def spell_user(user: UserKey) -> str:
    """A user as the CLI spells it: ``KIND:SUBJECT`` or ``KIND:SUBJECT@ISSUER``."""
    kind, issuer, subject = user
    return f"{kind}:{subject}" + (f"@{issuer}" if issuer else "")


def _user_json(user: UserKey) -> dict[str, Any]:
    return {"kind": user[0], "issuer": user[1], "subject": user[2]}


def _user_of(doc: dict[str, Any]) -> UserKey:
    user = doc["user"]
    issuer = user.get("issuer")
    return (str(user["kind"]), str(issuer) if issuer is not None else None,
            str(user["subject"]))


class UserTokenStore:
    """A ``TokenStore`` bound to one user (see the rules)."""

    def __init__(self, store: UserRecordStore, identity: Identity) -> None:
        require_sealed(store)
        self.store = store
        self.user: UserKey = identity.key
        self._records = store.user_records

    def __repr__(self) -> str:
        return f"UserTokenStore({spell_user(self.user)})"

    async def load(self, server: str) -> Binding | None:
        key = token_record_key(self.user, server)
        data = await self._records.read(key)
        if data is None:
            return None
        where = f"per-user token record {self._records.where(key)}"
        try:
            doc = json.loads(data)
            user, binding = _user_of(doc), Binding.from_json(doc["binding"])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring unreadable %s", where)
            return None
        if doc.get("format") != FORMAT or user != self.user or binding.server != server:
            log.warning("ignoring %s: it is another user's or another server's", where)
            return None
        return binding

    async def save(self, binding: Binding) -> None:
        doc = {"format": FORMAT, "user": _user_json(self.user), "binding": binding.to_json()}
        await self._records.write(token_record_key(self.user, binding.server),
                                  json.dumps(doc, indent=1).encode())

    async def delete(self, server: str) -> None:
        await self._records.delete(token_record_key(self.user, server))

    def renewal(self, server: str) -> contextlib.AbstractAsyncContextManager[None]:
        # The store's lease, taken on this user's record: users renew independently.
        renewal = getattr(self.store, "renewal", None)
        key = token_record_key(self.user, server)
        return renewal(key) if renewal is not None else contextlib.nullcontext()


class StoredUserSecrets:
    """``UserSecrets`` kept in the store (see the rules)."""

    def __init__(self, store: UserRecordStore) -> None:
        require_sealed(store)
        self.store = store
        self._records = store.secret_records

    async def load(self, server: str, user: UserKey) -> dict[str, str]:
        key = secret_record_key(user, server)
        data = await self._records.read(key)
        if data is None:
            return {}
        where = f"per-user secret record {self._records.where(key)}"
        try:
            doc = json.loads(data)
            held_user, values = _user_of(doc), doc["secrets"]
            ok = (doc.get("format") == FORMAT and held_user == user
                  and doc.get("server") == server and isinstance(values, dict)
                  and all(isinstance(v, str) for v in values.values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            log.warning("ignoring %s: unreadable, or another user's or server's", where)
            return {}
        return {str(k): v for k, v in values.items()}

    async def secrets_for(self, server: str, identity: Identity,
                          names: Sequence[str]) -> dict[str, str]:
        held = await self.load(server, identity.key)
        return {name: held[name] for name in names if name in held}

    async def put(self, server: str, user: UserKey, name: str, value: str) -> None:
        """Set one value (an operator's: ``trunkline credentials put``)."""
        if not value:
            raise ValueError("a secret is a non-empty string")
        held = await self.load(server, user)
        held[name] = value
        doc = {"format": FORMAT, "user": _user_json(user), "server": server, "secrets": held}
        await self._records.write(secret_record_key(user, server), json.dumps(doc).encode())

    async def delete(self, server: str, user: UserKey) -> None:
        await self._records.delete(secret_record_key(user, server))


@dataclass(frozen=True)
class UserTokenEntry:
    user: UserKey
    binding: Binding


@dataclass(frozen=True)
class UserSecretEntry:
    user: UserKey
    server: str
    names: tuple[str, ...]


async def user_entries(store: UserRecordStore) -> AsyncIterator[UserTokenEntry]:
    """Every per-user token record a key opens."""
    async for entry in _entries(store.user_records, "token", lambda doc: UserTokenEntry(
            _user_of(doc), Binding.from_json(doc["binding"]))):
        yield entry


async def secret_entries(store: UserRecordStore) -> AsyncIterator[UserSecretEntry]:
    """Every per-user secret record a key opens (the names of its values only)."""
    async for entry in _entries(store.secret_records, "secret", lambda doc: UserSecretEntry(
            _user_of(doc), str(doc["server"]), tuple(sorted(doc["secrets"])))):
        yield entry


async def _entries(records: SealedRecords, kind: str,
                   read: Callable[[dict[str, Any]], _Entry]) -> AsyncIterator[_Entry]:
    """Each record a key opens, as ``read`` makes it of its document; one it cannot read is
    skipped with a warning naming where it is (``kind``: what the record is)."""
    for name in await records.names():
        data = await records.read_named(name)
        if data is None:
            continue
        try:
            entry = read(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring unreadable per-user %s record %s", kind,
                        records.records.where_named(name))
            continue
        yield entry
