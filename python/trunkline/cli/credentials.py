"""``trunkline credentials new-key|list|put|revoke|rekey``: what the token store of a
configuration (``"oauth": {"store": ...}``, the one ``serve`` uses) keeps, for operators,
without starting any server. Nothing here prints a token or a secret: ``list`` shows who,
where, what kind of record, when it expires and whether a refresh token is held; ``put``
reads the value from standard input, never from the command line.

A user is spelled ``KIND:SUBJECT@ISSUER`` (``oauth:alice@https://idp.example``),
``KIND:SUBJECT`` for one without an issuer (``api_key:ci-bot``); a spelling without a
known kind is an OAuth user (``alice@https://idp.example``). ``list`` prints users so.
What is listed and how a user is revoked is ``auth.held_credentials``'s, shared with the
operator API: given a running gateway's URL instead of the file, ``list`` and ``revoke``
ask it (``cli/operator.py``), and a revocation is then forgotten by the gateway at once.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..auth.configured import token_store_from
from ..auth.held_credentials import (
    Revocation,
    configured,
    held_rows,
    parse_user,
    revoke_user,
    server_names,
)
from ..auth.sealing import KEY_ENV, StoreKeys, new_key
from ..auth.store import FileStore
from ..auth.user_store import StoredUserSecrets, UserKey, spell_user
from ..config import load_config, load_oauth_config
from ..errors import ConfigurationError
from ..records import record_name
from ..settings import ServerConfig

if TYPE_CHECKING:
    from ..auth.redis_store import RedisStore

EXIT_OK = 0


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


async def _list(store: FileStore | RedisStore, configs: dict[str, ServerConfig],
                user: UserKey | None, server: str | None, json_mode: bool) -> int:
    rows = await held_rows(store, configs, user=user, server=server)
    show_rows(rows, json_mode, sealed=store.keys is not None)
    return EXIT_OK


def show_rows(rows: list[dict[str, Any]], json_mode: bool, *, sealed: bool) -> None:
    """The records as ``list`` prints them (``sealed``: the per-user ones could be read)."""
    if json_mode:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if not rows:
        print("no credentials held" + ("" if sealed else
                                       f" (per-user records need {KEY_ENV} to be read)"))
    for row in rows:
        print(f"{row['user']}\t{row['server']}\t{row['issuer']}\t{row['record']}\t"
              f"expires {row['expires']}\trefresh token: "
              f"{'yes' if row['refresh_token'] else 'no'}")


async def _put(store: FileStore | RedisStore, configs: dict[str, ServerConfig],
               user: UserKey | None, server: str | None, name: str | None) -> int:
    if user is None or server is None or not name:
        raise ConfigurationError("trunkline credentials put needs --user, --server and the "
                                 "variable's NAME; the value is read from standard input")
    configured(configs, server)
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
    show_revocation(await revoke_user(store, configs, user, server))
    return EXIT_OK


def show_revocation(done: Revocation) -> None:
    for line in done.lines():
        print(line)


async def _rekey(store: FileStore | RedisStore, configs: dict[str, ServerConfig]) -> int:
    if store.keys is None:
        raise ConfigurationError(f"rekey needs {KEY_ENV}: the key to seal every record under")
    counts = {"resealed": 0, "current": 0, "unopened": 0, "missing": 0}
    shared: Sequence[str] = sorted(set(await store.records.names())
                                   | {record_name(uri) for uri in server_names(configs)})
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
