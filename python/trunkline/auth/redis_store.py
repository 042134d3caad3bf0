"""Records in Redis, shared by the processes of one deployment (``trunkline serve --http``
replicas behind a load balancer), with a renewal lease so that they renew a server's token
one at a time.

Rules:

- The records and their meaning are ``FileStore``'s (see ``store``): one per server, under
  ``<prefix>record:<record_name(server)>``, the record's JSON as the value, written whole by
  one ``SET`` (a reader sees the old record or the new, never half of one), with no expiry
  (the record holds the token's absolute expiry, and a client identity that outlives it).
  A value that cannot be read back, or another server's, is ignored with a warning naming
  the key only, and the server is authorized afresh.
- Every key this store reads or writes starts with ``prefix`` (one per deployment; default
  ``trunkline:auth:``); it names keys only one at a time (no ``KEYS``, ``SCAN``, ``FLUSH``).
- Sealed at rest with ``keys`` as ``FileStore``'s records are (``sealing``): then a dump
  of the database shows hashed key names and sealed envelopes only. Per-user records are
  the kinds ``user`` and ``secret`` (``<prefix>user:<name>``, ``<prefix>secret:<name>``).
  Every per-user record is also named in the set ``<prefix>index:<kind>`` (one
  transaction with the record), which is how ``rekey`` and ``credentials list`` walk them
  without a ``SCAN``; shared records are found by the configured servers' URIs.
- Without keys the tokens are stored in clear, as in ``FileStore``'s 0600 files; then
  Redis's own controls stand in for the file mode (with keys, they still should): a
  password or an ACL user given in the URL (``redis://user:password@host:port/db``) whose
  keys are limited to the prefix (``~trunkline:auth:*``), TLS (``rediss://``) for anything
  but loopback, and a prefix per deployment. Redis's ``SLOWLOG`` and ``MONITOR`` show
  commands' arguments: deny them (``-slowlog -monitor``) to users who must not read
  tokens.
- No secret in a log or an error: a command that fails becomes ``AuthorizationFailed``
  (``reason="store_unavailable"``) naming the store by scheme, host, port and database and
  the kind of failure only: never the URL's credentials, a value, nor the client library's
  message (which can quote a command's arguments, e.g. a pipeline's), and the library's
  exception is neither its cause nor its context. This module logs keys, never values.
- Renewal lease, ``async with store.renewal(server):`` (taken by ``OAuthClient`` around a
  flight, ``flow`` rule 8): ``SET <prefix>lease:<name> <random> NX PX <lease_s>``, tried
  every ``poll_s`` for at most ``lease_wait_s`` (by default a little longer than a lease
  lives, so a holder that died, and never gave its lease back, holds nobody up for longer
  than ``lease_s``); a wait that runs out is ``AuthorizationFailed``
  (``reason="renewal_busy"``). Only its holder gives a lease back: a Lua script deletes the
  key only while it still holds the holder's random value, so a holder whose lease expired
  and was taken by another process does not end the other's. ``lease_s`` must outlast a
  renewal (a metadata fetch and a token request, each bounded by ``OAuthClient``'s
  ``timeout_s``); an interactive authorization that outlasts it lets another process start
  its own, which costs a second authorization, not a refresh token spent twice.
- One ``RedisStore`` per event loop (redis-py's asyncio connections belong to the loop that
  opened them); ``aclose()`` it, or use ``async with``.
- ``redis`` (redis-py) is an optional dependency (``trunkline[redis]``), imported only
  when a ``RedisStore`` is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self, TypeVar

from ..errors import AuthorizationFailed
from ..records import RedisRecords, record_name
from .sealing import SealedRecords, StoreKeys
from .store import Binding, read_record, record_bytes

log = logging.getLogger("trunkline.auth")

T = TypeVar("T")

#: Deletes the lease only while it is still the caller's (KEYS[1]: the lease; ARGV[1]: the
#: holder's random value).
GIVE_BACK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisStore:
    """Records in Redis, shared between processes; see the module docstring."""

    at_rest = True

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *,
                 prefix: str = "trunkline:auth:", lease_s: float = 60.0,
                 lease_wait_s: float | None = None, poll_s: float = 0.05,
                 timeout_s: float = 5.0, keys: StoreKeys | None = None) -> None:
        def failure(message: str) -> Exception:
            return AuthorizationFailed(message, reason="store_unavailable")

        self._raw = RedisRecords(url, prefix=prefix, kind="record", timeout_s=timeout_s,
                                 what="the token store", failure=failure)
        self.keys = keys
        self.records = SealedRecords(self._raw, keys, kind="record", clear_ok=True)
        self.user_records = SealedRecords(self._raw.sibling("user", indexed=True), keys,
                                          kind="user", clear_ok=False)
        self.secret_records = SealedRecords(self._raw.sibling("secret", indexed=True), keys,
                                            kind="secret", clear_ok=False)
        self.prefix = prefix
        self.lease_s = lease_s
        self.lease_wait_s = lease_wait_s if lease_wait_s is not None else lease_s + 5.0
        self.poll_s = poll_s
        self.where = self._raw.location
        self._redis: Any = self._raw.client
        self._give_back = self._redis.register_script(GIVE_BACK)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._redis.aclose()

    def record_key(self, server: str) -> str:
        return self._raw.key_for(server)

    def lease_key(self, server: str) -> str:
        return f"{self.prefix}lease:{record_name(server)}"

    # -- TokenStore ---------------------------------------------------------------------

    async def load(self, server: str) -> Binding | None:
        data = await self.records.read(server)
        if data is None:
            return None
        return read_record(data, server, where=f"token store {self._raw.where(server)}")

    async def save(self, binding: Binding) -> None:
        await self.records.write(binding.server, record_bytes(binding))

    async def delete(self, server: str) -> None:
        await self.records.delete(server)

    @contextlib.asynccontextmanager
    async def renewal(self, server: str) -> AsyncIterator[None]:
        key, holder = self.lease_key(server), secrets.token_hex(16)
        lease_ms = max(1, round(self.lease_s * 1000))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lease_wait_s
        while not await self._command("take a renewal lease", lambda: self._redis.set(
                key, holder, nx=True, px=lease_ms)):
            if loop.time() >= deadline:
                raise AuthorizationFailed(
                    f"another process has held the renewal lease for this server for more "
                    f"than {self.lease_wait_s:g} s ({self.where}, key {key})",
                    reason="renewal_busy")
            await asyncio.sleep(self.poll_s)
        try:
            yield
        finally:
            try:
                await self._command("give back a renewal lease",
                                    lambda: self._give_back(keys=[key], args=[holder]))
            except AuthorizationFailed as exc:
                # Not raised over the flight's own outcome: the lease expires by itself.
                log.warning("%s; the lease %s expires in %g s", exc.message, key, self.lease_s)

    # -- plumbing -----------------------------------------------------------------------

    async def _command(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._raw.command(what, call)
