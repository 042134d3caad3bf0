"""RedisStore against a real redis-server started here (127.0.0.1, a free port, a temporary
directory, no persistence): the records, the renewal lease shared by two OAuthClients as
two gateway replicas would share it, a lease whose holder died, no secret in any error or
log, no key outside the store's prefix, and a sealed store whose dump shows nothing."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis  # the test extra's; redis-server comes from .ci/install-system
from oauth_fakes import Clock, FakeAuthServer

from conftest import run
from redisserver import RedisServer, free_port, redis_server  # noqa: F401 - a fixture
from trunkline.auth import ClientSettings, MemoryStore, OAuthClient, RedisStore
from trunkline.auth.registration import BASIC, REGISTERED, ClientIdentity
from trunkline.auth.resource import canonical_uri
from trunkline.auth.sealing import StoreKeys, new_key
from trunkline.auth.secret import Secret
from trunkline.auth.store import Binding, renewal_lease
from trunkline.auth.tokens import Token
from trunkline.auth.user_store import StoredUserSecrets, UserTokenStore, user_entries
from trunkline.errors import AuthorizationFailed
from trunkline.policy.identity import Identity

SERVER = "https://mcp.example.com/mcp"
ISSUER = "https://auth.example.com"
SETTINGS = ClientSettings(client_name="trunkline-test", redirect_uri="http://127.0.0.1/callback")
SECRETS = ("at-sekrit-1", "rt-sekrit-1", "cs-sekrit-1")
PASSWORD = "pw-sekrit-1"



def binding(server: str = SERVER, access: str = SECRETS[0]) -> Binding:
    client = ClientIdentity(client_id="c", client_secret=Secret(SECRETS[2]), auth_method=BASIC,
                            issuer=ISSUER, source=REGISTERED)
    token = Token(access_token=Secret(access), issued_at=100.0, expires_at=3700.0,
                  refresh_token=Secret(SECRETS[1]), scope=("a",), issuer=ISSUER,
                  resource=server)
    return Binding(server=server, issuer=ISSUER, client=client, token=token)


def client(store: Any, clock: Clock) -> OAuthClient:
    return OAuthClient(settings=SETTINGS, clock=clock, store=store)


def no_secret_in(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text


def test_records_round_trip_replace_and_delete(redis_server: RedisServer,
                                               caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with RedisStore(redis_server.url, prefix="tl:test:") as store:
            assert await store.load(SERVER) is None
            await store.save(binding())
            await store.save(binding(access="at-2"))
            loaded = await store.load(SERVER)
            assert loaded == binding(access="at-2")
            assert loaded is not None and loaded.token is not None
            assert loaded.token.expires_at == 3700.0  # absolute, as stored
            other = "https://other.example.com/mcp"
            assert await store.load(other) is None
            await store.delete(SERVER)
            await store.delete(SERVER)  # deleting twice is fine
            assert await store.load(SERVER) is None

            # Another server's record under this one's key, or garbage: ignored, the key
            # named, the value not.
            admin = redis_server.admin()
            try:
                await store.save(binding(other))
                await admin.set(store.record_key(SERVER),
                                await admin.get(store.record_key(other)))
                assert await store.load(SERVER) is None
                await admin.set(store.record_key(SERVER), b"{ torn")
                assert await store.load(SERVER) is None
                assert store.record_key(SERVER) in caplog.text
                assert "another server's" in caplog.text and "unreadable" in caplog.text
                no_secret_in(caplog.text, *SECRETS)
            finally:
                await admin.aclose()

    run(main())


def test_two_replicas_whose_token_is_due_refresh_it_once(redis_server: RedisServer) -> None:
    """Two OAuthClients over one Redis, as two gateway replicas: 20 callers each find the
    token due; one refresh reaches the token endpoint and every caller ends with its
    token (refresh tokens are often single-use: a second refresh would fail)."""

    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer(token_delay_s=0.1) as fake, \
                RedisStore(redis_server.url, prefix="tl:a:") as store_a, \
                RedisStore(redis_server.url, prefix="tl:a:") as store_b, \
                client(store_a, clock) as replica_a, client(store_b, clock) as replica_b:
            server = fake.server_url()
            first = await replica_a.on_challenge(server, 401, fake.challenge())
            assert await replica_b.authorization_for(server) == first  # read from Redis

            clock.now += 3600 - 30  # inside the 60 s margin: due on both
            headers = await asyncio.gather(*(replica.authorization_for(server)
                                             for _ in range(20)
                                             for replica in (replica_a, replica_b)))
            assert len(set(headers)) == 1 and headers[0] not in (None, first)
            assert [r.grant for r in fake.token_requests] == ["authorization_code",
                                                              "refresh_token"]
            assert len(fake.authorizations) == 1 and len(fake.registrations) == 1
            stored = await store_a.load(canonical_uri(server))
            assert stored is not None and stored.token is not None
            assert stored.token.authorization() == headers[0]
            # Both replicas gave their leases back.
            assert await store_a._redis.exists(store_a.lease_key(canonical_uri(server))) == 0

    run(main())


def test_an_idle_replica_renews_the_token_another_replica_stored(
        redis_server: RedisServer) -> None:
    """Replica B was idle while A refreshed, and A's token is due again by the time B
    renews: B refreshes A's token with A's refresh token, not the spent one it held."""

    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer() as fake, \
                RedisStore(redis_server.url, prefix="tl:i:") as store_a, \
                RedisStore(redis_server.url, prefix="tl:i:") as store_b, \
                client(store_a, clock) as replica_a, client(store_b, clock) as replica_b:
            server = fake.server_url()
            first = await replica_a.on_challenge(server, 401, fake.challenge())
            assert await replica_b.authorization_for(server) == first
            clock.now += 3600 - 30
            second = await replica_a.authorization_for(server)
            assert second not in (None, first)
            stored = await store_a.load(canonical_uri(server))
            assert stored is not None and stored.token is not None
            assert stored.token.refresh_token is not None
            a_refresh_token = stored.token.refresh_token.reveal()

            clock.now += 3600  # A's token is due too; B still holds the first
            third = await replica_b.authorization_for(server)
            assert third not in (None, first, second)
            assert [r.grant for r in fake.token_requests] == ["authorization_code",
                                                              "refresh_token", "refresh_token"]
            assert fake.token_requests[-1].form["refresh_token"] == a_refresh_token
            assert await replica_a.authorization_for(server) == third  # A re-reads under the lease

    run(main())


def test_a_lease_whose_holder_died_expires(redis_server: RedisServer) -> None:
    async def main() -> None:
        async with RedisStore(redis_server.url, prefix="tl:d:", lease_s=0.5) as dead, \
                RedisStore(redis_server.url, prefix="tl:d:", lease_s=0.5) as alive:
            # The holder took its lease and never gave it back (its process died).
            taken = dead.renewal(SERVER)
            await taken.__aenter__()
            started = time.monotonic()
            async with alive.renewal(SERVER):
                waited = time.monotonic() - started
                # The dead holder's late give-back does not end the living one's lease.
                await taken.__aexit__(None, None, None)
                assert await alive._redis.exists(alive.lease_key(SERVER)) == 1
            assert 0.3 < waited < 3.0
            assert await alive._redis.exists(alive.lease_key(SERVER)) == 0

    run(main())


def test_a_wait_for_a_lease_is_bounded(redis_server: RedisServer) -> None:
    async def main() -> None:
        async with RedisStore(redis_server.url, prefix="tl:w:", lease_s=30) as holder, \
                RedisStore(redis_server.url, prefix="tl:w:", lease_wait_s=0.3) as waiter:
            async with holder.renewal(SERVER):
                started = time.monotonic()
                with pytest.raises(AuthorizationFailed) as caught:
                    async with waiter.renewal(SERVER):
                        raise AssertionError("the lease is held")
                assert caught.value.reason == "renewal_busy"
                assert time.monotonic() - started < 2.0
            async with waiter.renewal(SERVER):  # given back: taken at once
                pass

    run(main())


def test_no_secret_in_an_error_or_a_log(redis_server: RedisServer,
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    def look(caught: pytest.ExceptionInfo[AuthorizationFailed], secrets: tuple[str, ...],
             failure: str) -> None:
        exc = caught.value
        assert exc.reason == "store_unavailable" and failure in str(exc)
        assert exc.__cause__ is None and exc.__context__ is None
        no_secret_in(str(exc) + repr(exc) + repr(exc.args) + repr(vars(exc)), *secrets)

    async def main() -> None:
        # Nothing listens there; the URL carries a password.
        nowhere = f"redis://trunkline:{PASSWORD}@127.0.0.1:{free_port()}/0"
        async with RedisStore(nowhere, timeout_s=1) as store:
            for call in (store.save(binding()), store.load(SERVER), store.delete(SERVER)):
                with pytest.raises(AuthorizationFailed) as caught:
                    await call
                look(caught, (*SECRETS, PASSWORD), "ConnectionError")
                assert f"127.0.0.1:{store.where.rsplit(':', 1)[1]}" in str(caught.value)

        async with RedisStore(redis_server.url, prefix="tl:s:") as store:
            # A command the server refuses: out of memory for any write.
            admin = redis_server.admin()
            try:
                await admin.config_set("maxmemory-policy", "noeviction")
                await admin.config_set("maxmemory", "1")
                with pytest.raises(AuthorizationFailed) as caught:
                    await store.save(binding())
                look(caught, SECRETS, "OutOfMemoryError")
                await admin.config_set("maxmemory", "0")
            finally:
                await admin.aclose()

            # A client library whose error quotes the command, as redis-py's pipelines do.
            async def quoting_set(key: str, value: bytes, **kw: Any) -> None:
                raise redis.exceptions.ResponseError(
                    f"Command # 1 (SET {key} {value.decode()}) of pipeline caused error")

            store._redis.set = quoting_set
            with pytest.raises(AuthorizationFailed) as caught:
                await store.save(binding())
            look(caught, SECRETS, "ResponseError")

    run(main())
    no_secret_in(caplog.text, *SECRETS, PASSWORD)


def test_the_store_touches_no_key_outside_its_prefix(redis_server: RedisServer) -> None:
    """The store logs in as an ACL user allowed only the prefix's keys, so any command on
    another key fails; the keys that were there before are as they were."""

    async def main() -> None:
        admin = redis_server.admin()
        try:
            await admin.execute_command("ACL", "SETUSER", "replica", "on", f">{PASSWORD}",
                                        "~tl:mine:*", "+@all")
            neighbours = {b"tl:other:record:x": b"theirs", b"tl:mine": b"not a prefix match",
                          b"unrelated": b"1"}
            for key, value in neighbours.items():
                await admin.set(key, value)
            url = f"redis://replica:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
            clock = Clock()
            async with FakeAuthServer() as fake, \
                    RedisStore(url, prefix="tl:mine:") as store, client(store, clock) as oauth:
                server = fake.server_url()
                await oauth.on_challenge(server, 401, fake.challenge())
                clock.now += 3600
                assert await oauth.authorization_for(server) is not None  # refreshed
                assert [r.grant for r in fake.token_requests] == ["authorization_code",
                                                                  "refresh_token"]
                await store.delete(canonical_uri(server))
                await store.save(binding())
            keys = set(await admin.keys("*"))
            assert keys - set(neighbours) == {store.record_key(SERVER).encode()}
            for key, value in neighbours.items():
                assert await admin.get(key) == value
        finally:
            await admin.aclose()

    run(main())


def test_a_store_without_a_lease_gets_a_no_op_one() -> None:
    class Bare:
        """A TokenStore written before leases: load, save, delete only."""

        async def load(self, server: str) -> Binding | None:
            return None

        async def save(self, binding: Binding) -> None: ...

        async def delete(self, server: str) -> None: ...

    async def main() -> None:
        for store in (Bare(), MemoryStore()):
            # Taken twice at once: nothing to wait for.
            async with renewal_lease(store, SERVER), renewal_lease(store, SERVER):
                pass

    run(main())


def test_redis_is_imported_only_when_a_redis_store_is_made() -> None:
    code = ("import sys, trunkline.auth as auth; assert 'redis' not in sys.modules; "
            "auth.RedisStore; assert 'redis' not in sys.modules; "
            "auth.RedisStore('redis://127.0.0.1:1/0'); assert 'redis' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_configuration_file_can_name_a_redis_store_for_its_replicas(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """``"oauth": {"store": "redis://..."}``: ``trunkline login`` stores the token in Redis,
    and another command (another replica, another machine) finds it there."""
    from test_auth_cli import config_file, sign_in, trunkline
    from test_auth_host import ProtectedEcho

    echo = ProtectedEcho()

    async def main() -> None:
        async with FakeAuthServer(routes=[echo.route()]) as fake:
            echo.fake = fake
            path = config_file(tmp_path, fake.server_url("mcp"), store=redis_server.url)
            code, out, err = await sign_in(path)
            assert code == 0, err
            assert redis_server.url not in out and "the Redis store" in out
            with redis.Redis.from_url(redis_server.url) as direct:
                assert direct.keys("trunkline:auth:record:*")  # the record is in Redis
            # No file store beside the file (``redis`` is the server's own directory).
            assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.json", "redis"]
            code, out, err = await trunkline("call", str(path), "echo", '{"text": "shared"}')
            assert code == 0 and "shared" in out, err
            assert len(fake.authorizations) == 1 and len(fake.token_requests) == 1
    run(main())


def test_a_sealed_store_dump_reveals_nothing_and_users_renew_apart(
        redis_server: RedisServer) -> None:
    """Shared and per-user tokens from real flows and a user's secret, sealed: the
    server's own dump (SAVE, uncompressed) holds none of them, nor the server's URL; the
    same records kept without a key are there in clear (the dump can show them)."""
    alice, bob = Identity.user("alice", issuer=ISSUER), Identity.user("bob", issuer=ISSUER)
    gh_token = "ghp-sekrit-redis-1"
    keys = StoreKeys.from_environment({"TRUNKLINE_STORE_KEY": new_key()})

    async def dump() -> bytes:
        admin = redis_server.admin()
        try:
            await admin.config_set("rdbcompression", "no")
            await admin.save()
        finally:
            await admin.aclose()
        return (redis_server.log.parent / "dump.rdb").read_bytes()

    async def fill(prefix: str, fake: FakeAuthServer) -> RedisStore:
        store = RedisStore(redis_server.url, prefix=prefix, keys=keys)
        for view in (store, UserTokenStore(store, alice), UserTokenStore(store, bob)):
            async with OAuthClient(settings=SETTINGS, clock=Clock(), store=view) as oauth:
                await oauth.on_challenge(fake.server_url(), 401, fake.challenge())
        await StoredUserSecrets(store).put("github", alice.key, "GITHUB_TOKEN", gh_token)
        return store

    async def main() -> None:
        async with FakeAuthServer() as fake:
            async with await fill("tl:sealed:", fake) as store:
                assert {e.user async for e in user_entries(store)} == {alice.key, bob.key}
                # One user's renewal never waits for another's: a lease each.
                quick = RedisStore(redis_server.url, prefix="tl:sealed:", keys=keys,
                                   lease_wait_s=0.2)
                async with quick:
                    async with UserTokenStore(quick, alice).renewal(fake.server_url()):
                        async with UserTokenStore(quick, bob).renewal(fake.server_url()):
                            pass
                        with pytest.raises(AuthorizationFailed) as caught:
                            async with UserTokenStore(quick, alice).renewal(
                                    fake.server_url()):
                                pass
                        assert caught.value.reason == "renewal_busy"
            sealed = await dump()
            assert b"tl:sealed:user:" in sealed and len(fake.issued) >= 6
            for secret in (*fake.issued, gh_token, fake.server_url(), "alice"):
                assert secret.encode() not in sealed, secret

            # The control: without a key the dump shows the shared tokens.
            clear = RedisStore(redis_server.url, prefix="tl:clear:")
            async with clear, OAuthClient(settings=SETTINGS, clock=Clock(),
                                          store=clear) as oauth:
                header = await oauth.on_challenge(fake.server_url(), 401, fake.challenge())
            assert header.removeprefix("Bearer ").encode() in await dump()

    run(main())
