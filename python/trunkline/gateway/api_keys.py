"""The gateway's API keys, each with a name and the attributes a policy may read. Pure.

Rules:

1. Keys come from ``--api-key-file`` and ``TRUNKLINE_API_KEYS`` (comma-separated). The file
   is either one key per line (named ``key-1``, ``key-2``, ... by line, and the variable's
   ``env-1``, ...), or a JSON object ``{"keys": [{"name": ..., "key": ..., "scopes": [...],
   "groups": [...], "roles": [...], "attributes": {...}}]}`` giving each key a name and
   attributes.
2. A key's identity is ``Identity`` ``api_key`` with its name as subject; the key's value
   is never part of it, nor of any message (a duplicate key or name is refused naming the
   entry by position or name, never by value).
3. ``Authorization: Bearer <key>`` is looked up by its SHA-256 (one lookup however many
   keys there are), then compared with the key found in constant time: how long it takes
   tells nothing of how close a guess came to any key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ConfigurationError
from ..policy.identity import Identity

_ENTRY_FIELDS = frozenset({"name", "key", "scopes", "groups", "roles", "attributes"})


@dataclass(frozen=True)
class ApiKey:
    identity: Identity
    secret: bytes = field(repr=False)


class ApiKeys:
    """The configured keys (rule 1), matched by ``identity_of`` (rule 3)."""

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self.keys = tuple(keys)
        #: Each key by its SHA-256 (rule 3).
        self._by_digest = {hashlib.sha256(k.secret).digest(): k for k in self.keys}
        names: set[str] = set()
        secrets: set[bytes] = set()
        for key in self.keys:
            if key.identity.subject in names:
                raise ConfigurationError(f"two API keys are named {key.identity.subject!r}")
            if key.secret in secrets:
                raise ConfigurationError(f"API key {key.identity.subject!r} is another "
                                         "key's value again")
            names.add(key.identity.subject)
            secrets.add(key.secret)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def identity_of(self, authorization: str | None) -> Identity | None:
        """The identity of the key ``Authorization: Bearer`` shows; None: no key does."""
        if authorization is None or not authorization.startswith("Bearer "):
            return None
        presented = authorization[len("Bearer "):].strip().encode()
        found = self._by_digest.get(hashlib.sha256(presented).digest())
        if found is None or not hmac.compare_digest(presented, found.secret):
            return None
        return found.identity

    @classmethod
    def unnamed(cls, secrets: Iterable[bytes], prefix: str = "key") -> ApiKeys:
        return cls(ApiKey(Identity.api_key(f"{prefix}-{n}"), s)
                   for n, s in enumerate(secrets, 1))


def read_api_keys(path: str | None, env: Mapping[str, str] | None = None, *,
                  variable: str = "TRUNKLINE_API_KEYS", what: str = "API keys",
                  named: str = "") -> ApiKeys:
    """The keys of ``--api-key-file`` ``path`` and ``TRUNKLINE_API_KEYS`` (rule 1); or, as
    ``variable`` and ``what`` say, another set of keys read the same way, their unnamed
    ones' names prefixed by ``named`` (the admin keys: ``admin_access``)."""
    env = os.environ if env is None else env
    listed = [k.strip().encode() for k in env.get(variable, "").split(",") if k.strip()]
    keys = list(ApiKeys.unnamed(listed, f"{named}env").keys)
    if path is not None:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as exc:
            raise ConfigurationError(f"{path}: cannot read the {what}: {exc.strerror}"
                                     ) from None
        if text.lstrip().startswith(b"{"):
            keys += _named(text, path)
        else:
            lines = [line.strip() for line in text.decode(errors="replace").splitlines()]
            keys += ApiKeys.unnamed((k.encode() for k in lines if k), f"{named}key").keys
    return ApiKeys(keys)


def _named(text: bytes, path: str) -> list[ApiKey]:
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ConfigurationError(f"{path}: not valid JSON (a key file is one key per line, "
                                 "or {\"keys\": [...]})") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ConfigurationError(f"{path}: expected {{\"keys\": [...]}}")
    return [_entry(raw, n, path) for n, raw in enumerate(entries, 1)]


def _entry(raw: Any, n: int, path: str) -> ApiKey:
    where = f"{path}: key {n}"
    if not isinstance(raw, dict) or set(raw) - _ENTRY_FIELDS:
        raise ConfigurationError(f"{where}: an object with the fields "
                                 f"{sorted(_ENTRY_FIELDS)}")
    name, secret = raw.get("name"), raw.get("key")
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{where}: \"name\" is a non-empty string")
    if not isinstance(secret, str) or len(secret.strip()) < 16:
        raise ConfigurationError(f"{where} ({name!r}): \"key\" is a string of at least 16 "
                                 "characters")
    lists = {}
    for which in ("scopes", "groups", "roles"):
        value = raw.get(which, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigurationError(f"{where} ({name!r}): \"{which}\" is a list of strings")
        lists[which] = value
    attributes = raw.get("attributes", {})
    if not isinstance(attributes, dict) or not all(
            isinstance(v, str) for v in attributes.values()):
        raise ConfigurationError(f"{where} ({name!r}): \"attributes\" is an object of "
                                 "strings")
    return ApiKey(Identity.api_key(name, attributes=attributes, **lists),
                  secret.strip().encode())
