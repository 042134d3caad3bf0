"""``trunkline credentials``: list, put, revoke and rekey over a configuration's sealed
store, as an operator runs them (a subprocess, the key in its environment): nothing they
print holds a token or a secret, revocation reaches the authorization server's
``revocation_endpoint`` (a local one, and the real OpenID provider's), and a key rotated
end to end loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from aiohttp import web
from oauth_fakes import Clock, FakeAuthServer

from conftest import run
from oidc import start_provider
from trunkline import Host
from trunkline.auth import ClientSettings, FileStore, OAuthClient
from trunkline.auth.registration import POST, REGISTERED, ClientIdentity
from trunkline.auth.resource import canonical_uri
from trunkline.auth.sealing import KEY_ENV, OLD_KEYS_ENV, StoreKeys, new_key
from trunkline.auth.secret import Secret
from trunkline.auth.store import Binding
from trunkline.auth.tokens import Token
from trunkline.auth.user_store import UserTokenStore
from trunkline.errors import StoreKeyMissing
from trunkline.policy.identity import Identity

SETTINGS = ClientSettings(client_name="trunkline-test", redirect_uri="http://127.0.0.1/callback")
IDP = "https://idp.example"
ALICE, BOB = Identity.user("alice", issuer=IDP), Identity.user("bob", issuer=IDP)
ALICE_SPELLED, BOB_SPELLED = f"user:alice@{IDP}", f"user:bob@{IDP}"
GH_TOKEN = "ghp-sekrit-cli-1"


async def trunkline(*args: str, key: str | None, old: str = "",
                    stdin: bytes = b"") -> tuple[int, str, str]:
    env = {**os.environ, KEY_ENV: key or "", OLD_KEYS_ENV: old}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trunkline", "credentials", *args, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"oauth": {"store": "store"}, "mcpServers": {
        "tracker": {"url": url}, "github": {"command": "github-mcp-server"}}}))
    return path


def keys(key: str) -> StoreKeys:
    made = StoreKeys.from_environment({KEY_ENV: key})
    assert made is not None
    return made


async def sign_everyone_in(store: FileStore, fake: FakeAuthServer) -> None:
    """The shared record, Alice's and Bob's, each by a real flow."""
    for view in (store, UserTokenStore(store, ALICE), UserTokenStore(store, BOB)):
        async with OAuthClient(settings=SETTINGS, clock=Clock(), store=view) as oauth:
            await oauth.on_challenge(fake.server_url(), 401, fake.challenge())


def test_list_put_and_revoke_print_no_secret_and_revoke_at_the_endpoint(
        tmp_path: Path) -> None:
    key = new_key()
    revoked: list[tuple[dict[str, str], str | None]] = []

    async def revoke(request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        revoked.append((form, request.headers.get("Authorization")))
        return web.Response(status=200)

    async def main() -> None:
        async with FakeAuthServer(routes=[("POST", "/revoke", revoke)]) as fake:
            fake.metadata_overrides["revocation_endpoint"] = f"{fake.base}/revoke"
            path = config(tmp_path, fake.server_url())
            store = FileStore(tmp_path / "store", keys=keys(key))
            await sign_everyone_in(store, fake)
            held = await UserTokenStore(store, ALICE).load(canonical_uri(fake.server_url()))
            assert held is not None and held.token is not None and held.client is not None
            secrets = (*fake.issued, GH_TOKEN)
            shown = ""

            code, out, err = await trunkline("put", str(path), "--user", ALICE_SPELLED,
                                             "--server", "github", "GITHUB_TOKEN", key=key,
                                             stdin=GH_TOKEN.encode() + b"\n")
            assert code == 0, err
            shown += out + err

            code, out, err = await trunkline("list", str(path), key=key)
            assert code == 0, err
            shown += out + err
            rows = sorted(line.split("\t")[:4] for line in out.splitlines())
            assert rows == [["(shared)", "tracker", fake.issuer, "token"],
                            [ALICE_SPELLED, "github", IDP, "secret GITHUB_TOKEN"],
                            [ALICE_SPELLED, "tracker", fake.issuer, "token"],
                            [BOB_SPELLED, "tracker", fake.issuer, "token"]]
            assert out.count("refresh token: yes") == 3

            code, out, err = await trunkline("list", str(path), "--json", "--user",
                                             ALICE_SPELLED, "--server", "tracker", key=key)
            assert code == 0, err
            shown += out + err
            [row] = json.loads(out)
            assert row["user"] == ALICE_SPELLED and row["refresh_token"] is True

            code, out, err = await trunkline("revoke", str(path), "--user", ALICE_SPELLED,
                                             key=key)
            assert code == 0, err
            shown += out + err
            assert f"revoked the refresh token and the access token at {fake.base}/revoke" \
                in out
            assert "deleted 1 token record(s) and 1 secret record(s)" in out
            # RFC 7009: the refresh token first, each with its hint, the client's own
            # authentication (client_secret_basic, as it registered).
            assert [(f["token"], f["token_type_hint"]) for f, _ in revoked] == [
                (held.token.refresh_token.reveal() if held.token.refresh_token else "",
                 "refresh_token"), (held.token.access_token.reveal(), "access_token")]
            assert all(auth is not None and auth.startswith("Basic ") for _, auth in revoked)

            # Bob and the shared record stand; Bob's issuer now advertises no endpoint.
            del fake.metadata_overrides["revocation_endpoint"]
            code, out, err = await trunkline("list", str(path), key=key)
            shown += out + err
            assert ALICE_SPELLED not in out and BOB_SPELLED in out and "(shared)" in out
            code, out, err = await trunkline("revoke", str(path), "--user", BOB_SPELLED,
                                             "--server", "tracker", key=key)
            assert code == 0, err
            shown += out + err
            assert "advertises no revocation_endpoint" in out and len(revoked) == 2

            for secret in secrets:
                assert secret not in shown, secret

    run(main())


async def code_flow_tokens(issuer: str, resource: str) -> dict[str, Any]:
    """A token answer of the provider's authorization code grant (it signs in at once:
    no login page), which carries a refresh token."""
    query = {"client_id": "alice", "response_type": "code", "state": "s1",
             "scope": "openid offline_access", "redirect_uri": "http://127.0.0.1:9/cb"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{issuer}/authorize", params=query,
                            allow_redirects=False) as response:
            assert response.status == 302, await response.text()
            code = parse_qs(urlsplit(response.headers["Location"]).query)["code"][0]
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": query["redirect_uri"], "client_id": "alice",
                "client_secret": "not-checked", "resource": resource}
        async with http.post(f"{issuer}/token", data=form) as response:
            assert response.status == 200, await response.text()
            answer: dict[str, Any] = await response.json()
    return answer


async def refresh(issuer: str, refresh_token: str) -> int:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token,
            "client_id": "alice", "client_secret": "not-checked"}
    async with aiohttp.ClientSession() as http, \
            http.post(f"{issuer}/token", data=form) as response:
        return response.status


def test_revocation_at_the_real_openid_providers_endpoint(tmp_path: Path) -> None:
    """mock-oauth2-server advertises a revocation_endpoint that revokes refresh tokens
    and answers ``unsupported_token_type`` for access tokens: both said."""
    provider = start_provider()
    key = new_key()

    async def main() -> None:
        resource = "http://127.0.0.1:9/mcp"
        answer = await code_flow_tokens(provider.issuer, resource)
        assert answer.get("refresh_token")
        path = config(tmp_path, resource)
        client = ClientIdentity(client_id="alice", client_secret=Secret("not-checked"),
                                auth_method=POST, issuer=provider.issuer, source=REGISTERED)
        token = Token(access_token=Secret(answer["access_token"]), issued_at=0.0,
                      expires_at=None, refresh_token=Secret(answer["refresh_token"]),
                      scope=None, issuer=provider.issuer, resource=canonical_uri(resource))
        store = FileStore(tmp_path / "store", keys=keys(key))
        await UserTokenStore(store, ALICE).save(Binding(canonical_uri(resource),
                                                        provider.issuer, client, token))
        assert await refresh(provider.issuer, answer["refresh_token"]) == 200
        code, out, err = await trunkline("revoke", str(path), "--user", ALICE_SPELLED,
                                         key=key)
        assert code == 0, err
        endpoint = f"{provider.issuer}/revoke"
        assert f"revoked the refresh token at {endpoint}; {endpoint} does not revoke the " \
               "access token (unsupported_token_type)" in out, out
        for secret in (answer["access_token"], answer["refresh_token"]):
            assert secret not in out + err
        assert await UserTokenStore(store, ALICE).load(canonical_uri(resource)) is None

        # The provider no longer honours the revoked refresh token.
        assert await refresh(provider.issuer, answer["refresh_token"]) == 400

    try:
        run(main())
    finally:
        provider.stop()


def test_a_key_rotated_end_to_end_with_rekey(tmp_path: Path) -> None:
    first, second, third = new_key(), new_key(), new_key()

    def kids() -> set[str]:
        return {json.loads(p.read_bytes())["kid"]
                for p in (tmp_path / "store").rglob("*.json")}

    async def main() -> None:
        async with FakeAuthServer() as fake:
            path = config(tmp_path, fake.server_url())
            await sign_everyone_in(FileStore(tmp_path / "store", keys=keys(first)), fake)
            code, _, err = await trunkline("put", str(path), "--user", ALICE_SPELLED,
                                           "--server", "github", "GITHUB_TOKEN", key=first,
                                           stdin=GH_TOKEN.encode())
            assert code == 0, err
            code, before, err = await trunkline("list", str(path), key=first)
            assert code == 0 and len(before.splitlines()) == 4, err

            # The new key seals, the old one still opens: nothing is lost meanwhile.
            code, out, err = await trunkline("list", str(path), key=second, old=first)
            assert code == 0 and out == before, err
            code, out, err = await trunkline("rekey", str(path), key=second, old=first)
            assert code == 0, err
            assert f"resealed 4 record(s) under key {keys(second).kid}; 0 already were" in out
            assert kids() == {keys(second).kid}

            # The old key dropped: the same records under the new one alone.
            code, out, err = await trunkline("list", str(path), key=second)
            assert code == 0 and out == before, err
            fresh = await UserTokenStore(FileStore(tmp_path / "store", keys=keys(second)),
                                         ALICE).load(canonical_uri(fake.server_url()))
            assert fresh is not None and fresh.token is not None

            # A key that never sealed them: each record named in a warning, none shown.
            code, out, err = await trunkline("list", str(path), key=third)
            assert code == 0 and "no credentials held" in out
            assert err.count("is not configured") == 4, err
            for secret in (*fake.issued, GH_TOKEN):
                assert secret not in out + err

    run(main())


def test_put_reads_stdin_and_needs_the_key(tmp_path: Path) -> None:
    async def main() -> None:
        path = config(tmp_path, "http://127.0.0.1:9/mcp")
        code, _, err = await trunkline("put", str(path), "--user", ALICE_SPELLED, "--server",
                                       "github", "GITHUB_TOKEN", key=None,
                                       stdin=GH_TOKEN.encode())
        assert code == 2 and KEY_ENV in err and GH_TOKEN not in err
        code, _, err = await trunkline("put", str(path), "--user", ALICE_SPELLED, "--server",
                                       "github", "GITHUB_TOKEN", key=new_key(), stdin=b"")
        assert code == 2 and "no value for GITHUB_TOKEN" in err
        code, _, err = await trunkline("put", str(path), "--user", ALICE_SPELLED, "--server",
                                       "nowhere", "GITHUB_TOKEN", key=new_key(),
                                       stdin=GH_TOKEN.encode())
        assert code == 2 and "no server named 'nowhere'" in err
        assert not (tmp_path / "store").exists()  # nothing stored by any of them
        code, out, _ = await trunkline("new-key", key=None)
        assert code == 0 and StoreKeys.from_environment({KEY_ENV: out.strip()}) is not None

    run(main())


def test_a_store_holding_per_user_records_refuses_to_start_without_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key unset where users' records are kept: the command (as ``serve`` would) stops
    at once, naming the variable, and nothing in the store changes."""
    key = new_key()

    async def main() -> None:
        path = config(tmp_path, "http://127.0.0.1:9/mcp")
        code, _, err = await trunkline("put", str(path), "--user", ALICE_SPELLED, "--server",
                                       "github", "GITHUB_TOKEN", key=key,
                                       stdin=GH_TOKEN.encode())
        assert code == 0, err
        before = {p: p.read_bytes() for p in (tmp_path / "store").rglob("*.json")}
        for command in (("list", str(path)), ("rekey", str(path))):
            code, out, err = await trunkline(*command, key=None)
            assert code == 2 and "holds per-user credentials" in err and KEY_ENV in err, err
            assert GH_TOKEN not in out + err
        monkeypatch.delenv(KEY_ENV, raising=False)
        with pytest.raises(StoreKeyMissing, match=KEY_ENV):
            Host.from_config(path)
        assert {p: p.read_bytes() for p in (tmp_path / "store").rglob("*.json")} == before

    run(main())
