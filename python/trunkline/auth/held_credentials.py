"""What a token store holds for each user, listed and revoked: the one implementation
that ``trunkline credentials list|revoke CONFIG`` and the operator API (``GET
/admin/api/credentials``, ``POST /admin/api/credentials/revoke``) share.

A user is spelled ``KIND:SUBJECT@ISSUER`` (``oauth:alice@https://idp.example``),
``KIND:SUBJECT`` for one without an issuer (``api_key:ci-bot``); a spelling without a
known kind is an OAuth user (``alice@https://idp.example``). Rows name users so.

Rules:

1. A row says who (a user's spelling, or ``(shared)`` for the host's own token), at which
   server (its configured name; a record for a URL no configured server has keeps that
   URL), the issuer, what kind of record (``token``; ``client`` for a client registered
   at the issuer and no token, as a sign-in under way keeps; or ``secret`` and the
   variables' names), when it expires and whether a refresh token is held: never a
   value.
2. Per-user records are read only with the store's key; without it the shared tokens are
   listed alone, and asking for one user's records is refused (``StoreKeyMissing``).
3. Revoking a user: each of its token records (at ``server`` only, when one is named) is
   revoked at its issuer (``revocation.revoke``: best effort, and said) and deleted; then
   its secret records (of ``server`` only, when named) are deleted. The outcome says, per
   server, what the issuer did, and how many records went: never a token.
4. Revoking is idempotent: a user with nothing stored is an outcome that deleted nothing
   (a gateway process told after another deleted everything finds nothing left).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..params import HttpParams
from ..policy.identity import API_KEY, LOCAL_KIND, OAUTH, USER, Identity
from .resource import canonical_uri
from .store import Binding
from .user_store import (
    StoredUserSecrets,
    UserKey,
    UserTokenStore,
    require_sealed,
    secret_entries,
    spell_user,
    user_entries,
)

if TYPE_CHECKING:
    from ..settings import ServerConfig
    from .redis_store import RedisStore
    from .store import FileStore

    HeldStore = FileStore | RedisStore

KINDS = (OAUTH, API_KEY, USER, LOCAL_KIND)
#: The user of a row for the host's own token at a server (rule 1).
SHARED = "(shared)"


def parse_user(text: str) -> UserKey:
    """A user from its spelling (see the module docstring)."""
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS:
        kind, rest = OAUTH, text
    at = rest.rfind("@")
    subject, issuer = (rest[:at], rest[at + 1:]) if at > 0 and "://" in rest[at + 1:] \
        else (rest, None)
    if not subject:
        raise ConfigurationError(f"user {text!r}: no subject (spell a user "
                                 "KIND:SUBJECT@ISSUER, e.g. oauth:alice@https://idp.example)")
    return (kind, issuer, subject)


def identity_of(user: UserKey) -> Identity:
    kind, issuer, subject = user
    return Identity(kind, subject, issuer)


def configured(configs: Mapping[str, ServerConfig], server: str) -> ServerConfig:
    """Server ``server``'s configuration; ``ConfigurationError`` naming the configured
    ones when there is none."""
    if server not in configs:
        raise ConfigurationError(f"no server named {server!r} in the configuration "
                                 f"(servers: {', '.join(configs) or 'none'})")
    return configs[server]


def server_names(configs: Mapping[str, ServerConfig]) -> dict[str, str]:
    """Configured HTTP servers' names by canonical URI (how token records name them)."""
    return {canonical_uri(c.params.url): name for name, c in configs.items()
            if isinstance(c.params, HttpParams)}


def _uri_of(configs: Mapping[str, ServerConfig], server: str | None) -> str | None:
    if server is None:
        return None
    config = configured(configs, server)
    if not isinstance(config.params, HttpParams):
        return ""  # a stdio server holds no token: only secrets match it
    return canonical_uri(config.params.url)


def _expiry(binding: Binding, now: float) -> str:
    token = binding.token
    if token is None or token.expires_at is None:
        return "-"
    when = datetime.fromtimestamp(token.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return when + (" (expired)" if token.expired(now) else "")


def _token_row(user: str, server: str, binding: Binding, now: float) -> dict[str, Any]:
    # A binding without a token keeps the client registered at the issuer only (a
    # sign-in under way, or one whose token was deleted).
    record = "token" if binding.token is not None else "client"
    return {"user": user, "server": server, "issuer": binding.issuer, "record": record,
            "expires": _expiry(binding, now),
            "refresh_token": binding.token is not None
            and binding.token.refresh_token is not None}


async def held_rows(store: HeldStore, configs: Mapping[str, ServerConfig], *,
                    user: UserKey | None = None, server: str | None = None
                    ) -> list[dict[str, Any]]:
    """The records ``store`` holds (rules 1 and 2), of ``user`` and at ``server`` only
    when named; ``ConfigurationError`` for a server not configured."""
    uri = _uri_of(configs, server)
    names = server_names(configs)
    now = time.time()
    rows: list[dict[str, Any]] = []
    if user is None:
        for held_uri, held_name in names.items():
            binding = await store.load(held_uri)
            if binding is not None and uri in (None, held_uri):
                rows.append(_token_row(SHARED, held_name, binding, now))
    if store.keys is not None:
        async for entry in user_entries(store):
            if user in (None, entry.user) and uri in (None, entry.binding.server):
                rows.append(_token_row(spell_user(entry.user),
                                       names.get(entry.binding.server, entry.binding.server),
                                       entry.binding, now))
        async for secret in secret_entries(store):
            if user in (None, secret.user) and server in (None, secret.server):
                rows.append({"user": spell_user(secret.user), "server": secret.server,
                             "issuer": secret.user[1] or "-",
                             "record": "secret " + ",".join(secret.names),
                             "expires": "-", "refresh_token": False})
    elif user is not None:
        require_sealed(store)
    return rows


@dataclass(frozen=True)
class Revocation:
    """What revoking a user did (rule 3): per token record, its server and the issuer's
    outcome as a sentence; the records deleted."""

    user: UserKey
    server: str | None
    at_issuers: tuple[tuple[str, str], ...]
    tokens: int
    secrets: int

    def lines(self) -> list[str]:
        who = spell_user(self.user)
        return [*(f"{who} on {server}: {said}" for server, said in self.at_issuers),
                f"deleted {self.tokens} token record(s) and {self.secrets} secret "
                f"record(s) of {who}"]

    def to_json(self) -> dict[str, Any]:
        return {"user": spell_user(self.user), "server": self.server,
                "revoked": [{"server": server, "outcome": said}
                            for server, said in self.at_issuers],
                "deleted": {"tokens": self.tokens, "secrets": self.secrets}}


async def revoke_user(store: HeldStore, configs: Mapping[str, ServerConfig], user: UserKey,
                      server: str | None = None) -> Revocation:
    """Revoke ``user``'s tokens at their issuers and delete its records (rules 3 and 4),
    at ``server`` only when named (``ConfigurationError`` for one not configured)."""
    from .revocation import revoke

    uri = _uri_of(configs, server)
    names = server_names(configs)
    tokens = UserTokenStore(store, identity_of(user))
    secrets = StoredUserSecrets(store)
    said: list[tuple[str, str]] = []
    for entry in [e async for e in user_entries(store)]:
        if entry.user != user or uri not in (None, entry.binding.server):
            continue
        said.append((names.get(entry.binding.server, entry.binding.server),
                     await revoke(entry.binding)))
        await tokens.delete(entry.binding.server)
    removed = 0
    for secret in [e async for e in secret_entries(store)]:
        if secret.user == user and server in (None, secret.server):
            await secrets.delete(secret.server, user)
            removed += 1
    return Revocation(user, server, tuple(said), len(said), removed)


__all__ = ["KINDS", "SHARED", "Revocation", "configured", "held_rows", "identity_of",
           "parse_user", "revoke_user", "server_names"]
