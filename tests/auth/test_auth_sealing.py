"""The token store sealed at rest (TRUNKLINE_STORE_KEY) and its per-user records: a copied
store reveals nothing, a record under the wrong key, tampered with or moved is refused
with a warning and nothing else is lost, rotation with old keys and rekey, and an
OAuthClient running unchanged over one user's view."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from oauth_fakes import Clock, FakeAuthServer

from conftest import run
from trunkline.auth import ClientSettings, FileStore, MemoryStore, OAuthClient
from trunkline.auth.registration import BASIC, REGISTERED, ClientIdentity
from trunkline.auth.sealing import KEY_ENV, OLD_KEYS_ENV, StoreKeys, new_key
from trunkline.auth.secret import Secret
from trunkline.auth.store import Binding
from trunkline.auth.tokens import Token
from trunkline.auth.user_store import StoredUserSecrets, UserTokenStore, user_entries
from trunkline.errors import ConfigurationError, StoreKeyMissing
from trunkline.policy.identity import Identity

SETTINGS = ClientSettings(client_name="trunkline-test", redirect_uri="http://127.0.0.1/callback")
SERVER = "https://mcp.example.com/mcp"
ISSUER = "https://auth.example.com"
ALICE = Identity.user("alice", issuer="https://idp.example")
BOB = Identity.user("bob", issuer="https://idp.example")
GH_TOKEN = "ghp-sekrit-value-1"


def keys(current: str, *old: str) -> StoreKeys:
    env = {KEY_ENV: current, OLD_KEYS_ENV: ",".join(old)}
    made = StoreKeys.from_environment(env)
    assert made is not None
    return made


def binding(access: str, server: str = SERVER) -> Binding:
    client = ClientIdentity(client_id="c", client_secret=Secret("cs-" + access),
                            auth_method=BASIC, issuer=ISSUER, source=REGISTERED)
    token = Token(access_token=Secret(access), issued_at=100.0, expires_at=3700.0,
                  refresh_token=Secret("rt-" + access), scope=("a",), issuer=ISSUER,
                  resource=server)
    return Binding(server=server, issuer=ISSUER, client=client, token=token)


def every_byte(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


def test_a_copied_sealed_store_reveals_no_token_secret_or_server(tmp_path: Path) -> None:
    """Two users and the shared record signed in by real flows, a user's secret: every
    file is sealed, and a new process with the key reads each back as it was."""
    key = new_key()

    async def main() -> None:
        store = FileStore(tmp_path, keys=keys(key))
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            headers = {}
            for who, view in (("shared", store), ("alice", UserTokenStore(store, ALICE)),
                              ("bob", UserTokenStore(store, BOB))):
                async with OAuthClient(settings=SETTINGS, clock=Clock(), store=view) as oauth:
                    headers[who] = await oauth.on_challenge(server, 401, fake.challenge())
            await StoredUserSecrets(store).put("github", ALICE.key, "GITHUB_TOKEN", GH_TOKEN)
            assert len(set(headers.values())) == 3  # one token each

            copied = every_byte(tmp_path)
            assert len(list(tmp_path.rglob("*.json"))) == 4
            for secret in (*fake.issued, GH_TOKEN, server, fake.base.split("//")[1], "alice",
                           "idp.example", "GITHUB_TOKEN"):
                assert secret.encode() not in copied, secret

            # Another process with the key: the same records, each user's own.
            again = FileStore(tmp_path, keys=keys(key))
            for who, view in (("shared", again), ("alice", UserTokenStore(again, ALICE)),
                              ("bob", UserTokenStore(again, BOB))):
                async with OAuthClient(settings=SETTINGS, clock=Clock(), store=view) as oauth:
                    assert await oauth.authorization_for(server) == headers[who]
            assert len(fake.token_requests) == 3  # nothing authorized again
            assert await StoredUserSecrets(again).secrets_for(
                "github", ALICE, ["GITHUB_TOKEN", "OTHER"]) == {"GITHUB_TOKEN": GH_TOKEN}
            assert await StoredUserSecrets(again).secrets_for("github", BOB,
                                                              ["GITHUB_TOKEN"]) == {}

    run(main())


def test_wrong_key_tampered_or_moved_records_are_refused_and_nothing_else_is_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    key = new_key()

    async def main() -> None:
        store = FileStore(tmp_path, keys=keys(key))
        alice, bob = UserTokenStore(store, ALICE), UserTokenStore(store, BOB)
        await store.save(binding("at-shared"))
        await alice.save(binding("at-alice"))
        await bob.save(binding("at-bob"))

        # Another key: nothing opens, each refusal names its file and the variable.
        other = FileStore(tmp_path, keys=keys(new_key()))
        assert await other.load(SERVER) is None
        assert await UserTokenStore(other, ALICE).load(SERVER) is None
        assert f"is it in {OLD_KEYS_ENV}?" in caplog.text
        assert str(store.path_for(SERVER)) in caplog.text
        caplog.clear()

        # Alice's record moved over Bob's: it does not open as Bob's.
        assert {e.user async for e in user_entries(store)} == {ALICE.key, BOB.key}
        [alice_path, bob_path] = [_user_path(store, who) for who in (ALICE, BOB)]
        saved_bob = bob_path.read_bytes()
        bob_path.write_bytes(alice_path.read_bytes())
        assert await bob.load(SERVER) is None
        assert "tampered with, or moved" in caplog.text and str(bob_path) in caplog.text
        bob_path.write_bytes(saved_bob)
        assert await bob.load(SERVER) == binding("at-bob")

        # One byte of Alice's ciphertext changed: refused; Bob's and the shared stand.
        envelope = json.loads(alice_path.read_bytes())
        text = envelope["ciphertext"]
        envelope["ciphertext"] = ("A" if text[5] != "A" else "B").join((text[:5], text[6:]))
        alice_path.write_text(json.dumps(envelope))
        caplog.clear()
        assert await alice.load(SERVER) is None
        assert "tampered with" in caplog.text and str(alice_path) in caplog.text
        assert await bob.load(SERVER) == binding("at-bob")
        assert await store.load(SERVER) == binding("at-shared")
        for secret in ("at-alice", "at-bob", "at-shared", SERVER):
            assert secret not in caplog.text

        # Without the key: sealed shared records are ignored with the variable named, and
        # no per-user view is made at all.
        caplog.clear()
        clear = FileStore(tmp_path)
        assert await clear.load(SERVER) is None
        assert f"it is sealed and {KEY_ENV} is not set" in caplog.text
        with pytest.raises(StoreKeyMissing, match=KEY_ENV):
            UserTokenStore(clear, ALICE)
        with pytest.raises(StoreKeyMissing, match=KEY_ENV):
            StoredUserSecrets(clear)

    caplog.set_level(logging.WARNING, "trunkline.auth")
    run(main())


def _user_path(store: FileStore, identity: Identity) -> Path:
    from trunkline.auth.user_store import token_record_key
    from trunkline.records import record_name

    return store.directory / "users" / (record_name(token_record_key(identity.key, SERVER))
                                        + ".json")


def test_rotation_old_keys_open_rekey_seals_under_the_new_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first, second, lost = new_key(), new_key(), new_key()

    async def main() -> None:
        old = FileStore(tmp_path, keys=keys(first))
        await old.save(binding("at-shared"))
        await UserTokenStore(old, ALICE).save(binding("at-alice"))
        await StoredUserSecrets(old).put("github", ALICE.key, "GITHUB_TOKEN", GH_TOKEN)
        # A record sealed with a key nobody has any more.
        await UserTokenStore(FileStore(tmp_path, keys=keys(lost)), BOB).save(binding("at-bob"))

        rotated = FileStore(tmp_path, keys=keys(second, first))
        assert await rotated.load(SERVER) == binding("at-shared")  # the old key opens
        outcomes = []
        for records in (rotated.records, rotated.user_records, rotated.secret_records):
            outcomes += [await records.reseal_named(n) for n in await records.names()]
        assert sorted(outcomes) == ["resealed", "resealed", "resealed", "unopened"]
        kids = {json.loads(p.read_bytes())["kid"] for p in tmp_path.rglob("*.json")}
        assert kids == {keys(second).kid, keys(lost).kid}  # Bob's was left as it was

        # The old key dropped: everything it sealed opens under the new one alone.
        new = FileStore(tmp_path, keys=keys(second))
        assert await new.load(SERVER) == binding("at-shared")
        assert await UserTokenStore(new, ALICE).load(SERVER) == binding("at-alice")
        assert await StoredUserSecrets(new).secrets_for("github", ALICE, ["GITHUB_TOKEN"]) \
            == {"GITHUB_TOKEN": GH_TOKEN}
        caplog.clear()
        assert await UserTokenStore(new, BOB).load(SERVER) is None  # Bob signs in again
        assert "not configured" in caplog.text and "at-bob" not in caplog.text
        assert [await r.reseal_named(n) for r in (new.records,)
                for n in await r.names()] == ["current"]

    caplog.set_level(logging.WARNING, "trunkline.auth")
    run(main())


def test_a_key_set_later_reads_shared_records_in_clear_never_per_user_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        await FileStore(tmp_path).save(binding("at-shared"))  # before the key: in clear
        assert b"at-shared" in every_byte(tmp_path)
        sealed = FileStore(tmp_path, keys=keys(new_key()))
        assert await sealed.load(SERVER) == binding("at-shared")
        assert await sealed.records.reseal_named(await _only(sealed)) == "resealed"
        assert b"at-shared" not in every_byte(tmp_path)
        assert await sealed.load(SERVER) == binding("at-shared")

        # A per-user record planted in clear is never taken for one.
        alice = UserTokenStore(sealed, ALICE)
        await alice.save(binding("at-alice"))
        path = _user_path(sealed, ALICE)
        doc = {"format": 1, "user": {"kind": "user", "issuer": "https://idp.example",
                                     "subject": "alice"},
               "binding": binding("at-planted").to_json()}
        path.write_text(json.dumps(doc))
        assert await alice.load(SERVER) is None
        assert "only accepted sealed" in caplog.text and "at-planted" not in caplog.text

    caplog.set_level(logging.WARNING, "trunkline.auth")
    run(main())


async def _only(store: FileStore) -> str:
    [name] = await store.records.names()
    return name


def test_keys_are_read_from_the_environment_and_a_bad_one_is_named_not_quoted() -> None:
    assert StoreKeys.from_environment({}) is None
    assert StoreKeys.from_environment({KEY_ENV: ""}) is None
    key = new_key()
    made = keys(key)
    assert key not in repr(made) and made.kid in repr(made)
    bad = "not-a-key-sekrit"
    for env, named in (({KEY_ENV: bad}, KEY_ENV), ({KEY_ENV: key, OLD_KEYS_ENV: bad},
                                                   OLD_KEYS_ENV),
                       ({OLD_KEYS_ENV: key}, KEY_ENV)):
        with pytest.raises(ConfigurationError) as caught:
            StoreKeys.from_environment(env)
        assert named in str(caught.value) and bad not in str(caught.value)
        assert key not in str(caught.value)


def test_memory_store_needs_no_key_and_users_stay_apart() -> None:
    async def main() -> None:
        store = MemoryStore()
        alice, bob = UserTokenStore(store, ALICE), UserTokenStore(store, BOB)
        await alice.save(binding("at-alice"))
        assert await bob.load(SERVER) is None and await store.load(SERVER) is None
        await store.save(binding("at-shared"))
        assert await alice.load(SERVER) == binding("at-alice")
        await alice.delete(SERVER)
        assert await alice.load(SERVER) is None
        assert await store.load(SERVER) == binding("at-shared")

    run(main())
