"""``trunkline credentials new-key|list|put|revoke|rekey``: what the token store of a
configuration (``"oauth": {"store": ...}``, the one ``serve`` uses) keeps, for operators,
without starting any server. Nothing here prints a token or a secret: ``list`` shows who,
where, what kind of record, when it expires and whether a refresh token is held; ``put``
reads the value from standard input, never from the command line.

A user is spelled ``KIND:SUBJECT@ISSUER`` (``oauth:alice@https://idp.example``),
``KIND:SUBJECT`` for one without an issuer (``api_key:ci-bot``); a spelling without a
known kind is an OAuth user (``alice@https://idp.example``). ``list`` prints users so.
"""

from __future__ import annotations

import getpass
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from ..auth.configured import token_store_from
from ..auth.resource import canonical_uri
from ..auth.sealing import KEY_ENV, StoreKeys, new_key
from ..auth.store import Binding, FileStore
from ..auth.user_store import (
    StoredUserSecrets,
    UserKey,
    UserTokenStore,
    require_sealed,
    secret_entries,
    spell_user,
    user_entries,
)
from ..config import load_config, load_oauth_config
from ..errors import ConfigurationError
from ..params import HttpParams
from ..policy.identity import API_KEY, LOCAL_KIND, OAUTH, USER, Identity
from ..records import record_name
from ..settings import ServerConfig

if TYPE_CHECKING:
    from ..auth.redis_store import RedisStore

EXIT_OK = 0
KINDS = (OAUTH, API_KEY, USER, LOCAL_KIND)
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
        raise ConfigurationError(f"--user {text!r}: no subject (spell a user "
                                 "KIND:SUBJECT@ISSUER, e.g. oauth:alice@https://idp.example)")
    return (kind, issuer, subject)


def print_new_key() -> int:
    print(new_key())
    return EXIT_OK


async def credentials(action: str, path: str, *, user: str | None = None,
                      server: str | None = None, name: str | None = None,
                      json_mode: bool = False) -> int:
    configs = {c.name: c for c in load_config(path)}
    keys = StoreKeys.from_environment()
    store = token_store_from(load_oauth_config(path), keys)
    try:
        if action == "list":
            return await _list(store, configs, _user(user), server, json_mode)
        if action == "put":
            return await _put(store, configs, _user(user), server, name)
        if action == "revoke":
            if user is None:
                raise ConfigurationError("trunkline credentials revoke needs --user")
            return await _revoke(store, configs, parse_user(user), server)
        return await _rekey(store, configs)
    finally:
        await store.aclose()


def _user(text: str | None) -> UserKey | None:
    return parse_user(text) if text is not None else None


def _configured(configs: dict[str, ServerConfig], server: str) -> ServerConfig:
    if server not in configs:
        raise ConfigurationError(f"no server named {server!r} in the configuration "
                                 f"(servers: {', '.join(configs) or 'none'})")
    return configs[server]


def _uris(configs: dict[str, ServerConfig]) -> dict[str, str]:
    """Configured HTTP servers' names by canonical URI (how token records name them)."""
    return {canonical_uri(c.params.url): name for name, c in configs.items()
            if isinstance(c.params, HttpParams)}


def _uri_of(configs: dict[str, ServerConfig], server: str | None) -> str | None:
    if server is None:
        return None
    config = _configured(configs, server)
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
    return {"user": user, "server": server, "issuer": binding.issuer, "record": "token",
            "expires": _expiry(binding, now),
            "refresh_token": binding.token is not None
            and binding.token.refresh_token is not None}


async def _list(store: FileStore | RedisStore, configs: dict[str, ServerConfig],
                user: UserKey | None, server: str | None, json_mode: bool) -> int:
    uri = _uri_of(configs, server)
    names = _uris(configs)
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
    if json_mode:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return EXIT_OK
    if not rows:
        print("no credentials held" + ("" if store.keys is not None else
                                       f" (per-user records need {KEY_ENV} to be read)"))
    for row in rows:
        print(f"{row['user']}\t{row['server']}\t{row['issuer']}\t{row['record']}\t"
              f"expires {row['expires']}\trefresh token: "
              f"{'yes' if row['refresh_token'] else 'no'}")
    return EXIT_OK


async def _put(store: FileStore | RedisStore, configs: dict[str, ServerConfig],
               user: UserKey | None, server: str | None, name: str | None) -> int:
    if user is None or server is None or not name:
        raise ConfigurationError("trunkline credentials put needs --user, --server and the "
                                 "variable's NAME; the value is read from standard input")
    _configured(configs, server)
    secrets = StoredUserSecrets(store)
    value = _read_value(name)
    if not value:
        raise ConfigurationError(f"no value for {name} on standard input; nothing stored")
    await secrets.put(server, user, name, value)
    print(f"stored {name} for {spell_user(user)} on server {server!r} (sealed)")
    return EXIT_OK


def _read_value(name: str) -> str:
    """The value from standard input: typed without echo at a terminal, else the input
    (one trailing newline dropped)."""
    if sys.stdin.isatty():
        return getpass.getpass(f"{name}: ")
    value = sys.stdin.read()
    return value[:-1] if value.endswith("\n") else value


async def _revoke(store: FileStore | RedisStore, configs: dict[str, ServerConfig],
                  user: UserKey, server: str | None) -> int:
    from ..auth.revocation import revoke

    uri = _uri_of(configs, server)
    names = _uris(configs)
    tokens = UserTokenStore(store, Identity(user[0], user[2], user[1]))
    secrets = StoredUserSecrets(store)
    who = spell_user(user)
    deleted = 0
    for entry in [e async for e in user_entries(store)]:
        if entry.user != user or uri not in (None, entry.binding.server):
            continue
        shown = names.get(entry.binding.server, entry.binding.server)
        print(f"{who} on {shown}: {await revoke(entry.binding)}")
        await tokens.delete(entry.binding.server)
        deleted += 1
    removed = 0
    for secret in [e async for e in secret_entries(store)]:
        if secret.user == user and server in (None, secret.server):
            await secrets.delete(secret.server, user)
            removed += 1
    print(f"deleted {deleted} token record(s) and {removed} secret record(s) of {who}")
    return EXIT_OK


async def _rekey(store: FileStore | RedisStore, configs: dict[str, ServerConfig]) -> int:
    if store.keys is None:
        raise ConfigurationError(f"rekey needs {KEY_ENV}: the key to seal every record under")
    counts = {"resealed": 0, "current": 0, "unopened": 0, "missing": 0}
    shared: Sequence[str] = sorted(set(await store.records.names())
                                   | {record_name(uri) for uri in _uris(configs)})
    for records, names in ((store.records, shared),
                           (store.user_records, await store.user_records.names()),
                           (store.secret_records, await store.secret_records.names())):
        for name in names:
            counts[await records.reseal_named(name)] += 1
    print(f"resealed {counts['resealed']} record(s) under key {store.keys.kid}; "
          f"{counts['current']} already were")
    if counts["unopened"]:
        print(f"{counts['unopened']} record(s) no configured key opens were left as they "
              "are (named in the warnings above): their users sign in again")
    return EXIT_OK
