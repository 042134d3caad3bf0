"""Revoking a user's credentials on a running gateway, through the operator API (``GET
/admin/api/credentials``, ``POST /admin/api/credentials/revoke``) and ``trunkline
credentials list|revoke URL``: no restart. With the real OpenID provider
(mock-oauth2-server) and a protected upstream, alice and bob sign in through the gateway;
alice is revoked, and her next session is offered ``sign_in`` again while bob's goes on,
the store holds nothing of hers and the provider took the revocation. With per-user
instances of a real stdio server (server-everything, its ``get-env`` tool showing its
process's environment), a user's instance, started with their secret, stops when the
secret is revoked, in every copy of ``serve --processes 2``. Also: the CSRF token a
browser session's revocation needs, and every answer checked against the OpenAPI
document."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from test_serve_operator_api import ADMIN, Spec, ask, bearer, cookie_of, structurally_valid, until
from test_serve_user_credentials import (
    CLIENT_ID,
    SCOPE,
    STORE_KEY,
    audited,
    gateway_config,
    login,
    sdk_client,
    start_upstream,
    stored_token,
    texts,
)

import realpeers
from conftest import run
from gateways import HttpGateway, modern_meta, real_server
from oidc import start_provider
from procs import marked_processes

pytestmark = pytest.mark.real_servers

REVOKE = "/admin/api/credentials/revoke"
LISTED = "/admin/api/credentials"
VARIABLE = "EVERYTHING_TOKEN"
#: Two callers' API keys: their identities are ``api_key:env-1`` and ``api_key:env-2``.
KEYS = ("api-0123456789abcdef-first", "api-0123456789abcdef-second")
USERS = ("api_key:env-1", "api_key:env-2")


@pytest.fixture(scope="module")
def provider():
    started = start_provider(interactive=True)
    yield started
    started.stop()


async def spec_of(gw: HttpGateway) -> Spec:
    status, document, _ = await ask(gw.http, "GET", gw.base + "/admin/api/openapi.json",
                                    bearer(ADMIN))
    assert status == 200
    return structurally_valid(document)


async def revoke(gw: HttpGateway, body: Any, headers: dict[str, str] | None = None
                 ) -> tuple[int, Any]:
    status, answer, _ = await ask(gw.http, "POST", gw.base + REVOKE,
                                  {"Content-Type": "application/json",
                                   **(headers or bearer(ADMIN))},
                                  body if isinstance(body, (bytes, str)) else orjson.dumps(body))
    return status, answer


async def cli(*argv: str, stdin: bytes | None = None, env: dict[str, str] | None = None
              ) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trunkline", *argv, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# --- OAuth: a user signed in through the gateway ----------------------------------------


async def refreshed(provider: Any, refresh_token: str) -> int:
    """The provider's status for a refresh grant with ``refresh_token``."""
    form = {"grant_type": "refresh_token", "client_id": CLIENT_ID,
            "refresh_token": refresh_token}
    async with aiohttp.ClientSession() as http, \
            http.post(f"{provider.issuer}/token", data=form) as response:
        await response.read()
        return response.status


def admin_gateway_env() -> dict[str, str]:
    return {"TRUNKLINE_STORE_KEY": STORE_KEY, "TRUNKLINE_ADMIN_KEYS": ADMIN}


def test_a_revoked_user_is_offered_sign_in_again_and_the_other_goes_on(
        gateways, tmp_path, provider):
    async def main():
        upstream, trail = await start_upstream(tmp_path, gateways, provider)
        config = gateway_config(tmp_path, upstream)
        gw = None
        try:
            gw = await HttpGateway.start(config, gateways, "--oauth-issuer", provider.issuer,
                                         "--oauth-scopes", SCOPE, env=admin_gateway_env())
            spec = await spec_of(gw)
            tokens = {user: await provider.token(gw.url, SCOPE, client_id=user)
                      for user in ("alice", "bob")}
            signing_in = [{"bearer": tokens[user], "login": login(user, upstream),
                           "steps": [["call", "sign_in", {}], ["list"]]}
                          for user in ("alice", "bob")]
            first = await sdk_client("mcp-2", gw.url, signing_in)
            alice, bob = first["users"]
            assert "signed in" in texts(alice["steps"][0]).lower(), alice
            assert alice["steps"][1] == ["echo", "search", "sleep"], alice
            assert bob["steps"][1] == ["echo"], bob
            held = await stored_token(config, "alice", provider, upstream)
            assert held is not None

            # The records, as the operator sees them: who, where, never a value.
            status, listed, _ = await ask(gw.http, "GET", gw.base + LISTED, bearer(ADMIN))
            assert status == 200, listed
            spec.check("GET", LISTED, status, listed)
            rows = {row["user"]: row for row in listed["credentials"]}
            alice_user = f"oauth:alice@{provider.issuer}"
            assert set(rows) == {alice_user, f"oauth:bob@{provider.issuer}"}, rows
            assert rows[alice_user]["server"] == "tracker"
            assert rows[alice_user]["record"] == "token" and listed["sealed"] is True
            shown = orjson.dumps(listed).decode()
            for value in (*tokens.values(), held.access_token.reveal()):
                assert value not in shown

            # Alice revoked on the running gateway.
            status, done = await revoke(gw, {"user": alice_user})
            assert status == 200, done
            spec.check("POST", REVOKE, status, done)
            assert done["user"] == alice_user and done["deleted"] == {"tokens": 1,
                                                                     "secrets": 0}
            [at_issuer] = done["revoked"]
            assert at_issuer["server"] == "tracker"
            # The provider advertises its revocation endpoint, and answered 200 there.
            assert at_issuer["outcome"].startswith("revoked the "), at_issuer
            assert f"{provider.issuer}/revoke" in at_issuer["outcome"]
            assert done["copies"] == {"told": 0, "failed": []}
            assert await stored_token(config, "alice", provider, upstream) is None
            assert await stored_token(config, "bob", provider, upstream) is not None
            # The provider took it: alice's refresh token is refused there now, bob's
            # (never revoked) still works.
            bobs_token = await stored_token(config, "bob", provider, upstream)
            assert held.refresh_token is not None and bobs_token.refresh_token is not None
            assert await refreshed(provider, held.refresh_token.reveal()) == 400
            assert await refreshed(provider, bobs_token.refresh_token.reveal()) == 200

            # No restart: alice's next session is offered the sign-in (a client that
            # declines it), bob's goes on as before.
            again = [{"bearer": tokens[user], "login": None,
                      "steps": [["list"], ["call", "echo", {"text": user}]]}
                     for user in ("alice", "bob")]
            calls_before = len(await audited(trail))
            alice, bob = (await sdk_client("mcp-2", gw.url, again))["users"]
            assert alice["steps"][0] == ["sign_in"], alice
            assert "error" in alice["steps"][1], alice
            assert bob["steps"][0] == ["echo"], bob
            assert json.loads(texts(bob["steps"][1])) == {"text": "bob"}
            after = [(r["identity"]["subject"], r.get("target"))
                     for r in (await audited(trail))[calls_before:]
                     if r.get("action") == "tools/call"]
            assert after == [("bob", "echo")], after  # nothing more went upstream as alice

            # Alice's offered sign-in registered the gateway's client again: no token.
            status, listed, _ = await ask(gw.http, "GET", gw.base + LISTED, bearer(ADMIN))
            records = {(row["user"], row["record"]) for row in listed["credentials"]}
            bobs = (f"oauth:bob@{provider.issuer}", "token")
            assert bobs in records and records <= {bobs, (alice_user, "client")}, listed
            assert await stored_token(config, "alice", provider, upstream) is None
        finally:
            if gw is not None:
                await gw.stop()
            await upstream.stop()
        return gw.stderr.decode(), tokens
    log, tokens = run(main(), timeout=300)
    assert f"operator 'admin-env-1' revokes the credentials of oauth:alice@{provider.issuer}" \
        in log
    for value in (*tokens.values(), ADMIN, STORE_KEY):
        assert value not in log


# --- per-user instances: a user's secret ------------------------------------------------


def instances_config(tmp_path: Path) -> Path:
    server = real_server(realpeers.require(realpeers.LEGACY_TS_EVERYTHING))
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({
        "oauth": {"store": str(tmp_path / "store")},
        "mcpServers": {"ev": {"command": server.command, "args": list(server.args),
                              "env": dict(server.env), "allowLegacy": True,
                              "instances": "per_user", "secretEnv": [VARIABLE]}}}))
    return path


async def put_secrets(config: Path, marker: str) -> None:
    for user in USERS:
        code, _, err = await cli("credentials", "put", str(config), "--user", user,
                                 "--server", "ev", VARIABLE, stdin=f"{marker}-{user}".encode(),
                                 env={"TRUNKLINE_STORE_KEY": STORE_KEY})
        assert code == 0, err


async def get_env(gw: HttpGateway, key: str, *, fresh: bool = False) -> dict[str, Any]:
    """``get-env`` called with ``key`` (``fresh``: on a connection of its own)."""
    message = gw.message("tools/call", {"name": "get-env", "arguments": {},
                                        "_meta": modern_meta()})
    headers = {**gw.modern_headers(message), **bearer(key)}
    if not fresh:
        _, answer, _ = await gw.post(message, headers)
        return answer
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http, \
            http.post(gw.url, data=orjson.dumps(message), headers=headers) as response:
        return await response.json()


def env_of(answer: dict[str, Any]) -> dict[str, str]:
    assert "result" in answer, answer
    value: dict[str, str] = orjson.loads(answer["result"]["content"][0]["text"])
    return value


def processes_with(marker: str) -> set[int]:
    """Live processes whose ``VARIABLE`` holds ``marker``."""
    return set(marked_processes(VARIABLE, marker))


def test_a_revoked_secret_stops_the_users_instance_and_a_session_needs_its_csrf_token(
        gateways, tmp_path):
    config = instances_config(tmp_path)
    marker = secrets.token_hex(8)

    async def main():
        await put_secrets(config, marker)
        gw = await HttpGateway.start(config, gateways, env={
            "TRUNKLINE_STORE_KEY": STORE_KEY, "TRUNKLINE_ADMIN_KEYS": ADMIN,
            "TRUNKLINE_API_KEYS": ",".join(KEYS)})
        shown: list[str] = []
        try:
            spec = await spec_of(gw)
            for key, user in zip(KEYS, USERS, strict=True):
                assert env_of(await get_env(gw, key))[VARIABLE] == f"{marker}-{user}"
            first, second = (processes_with(f"{marker}-{user}") for user in USERS)
            assert len(first) == 1 and len(second) == 1

            # Listed over the URL by the CLI: the variable's name, never its value.
            admin = {"TRUNKLINE_ADMIN_KEY": ADMIN}
            code, out, err = await cli("credentials", "list", gw.url, env=admin)
            assert code == 0, err
            assert f"{USERS[0]}\tev\t-\tsecret {VARIABLE}" in out, out
            assert f"{USERS[1]}\tev\t-\tsecret {VARIABLE}" in out, out
            shown.append(out)
            code, out, err = await cli("credentials", "list", gw.url, "--user", USERS[0],
                                       "--json", env=admin)
            assert code == 0, err
            assert [row["user"] for row in json.loads(out)] == [USERS[0]]
            status, listed, _ = await ask(gw.http, "GET", gw.base + LISTED + "?server=nope",
                                          bearer(ADMIN))
            assert status == 404
            spec.check("GET", LISTED, status, listed)

            # A browser session's revocation needs its CSRF token.
            status, _, got = await ask(gw.http, "POST", gw.base + "/admin/login",
                                       {"Content-Type": "application/x-www-form-urlencoded"},
                                       f"key={ADMIN}")
            assert status == 303
            jar = {"Cookie": f"trunkline_admin={cookie_of(got)[0]}"}
            status, session, _ = await ask(gw.http, "GET", gw.base + "/admin/api/session", jar)
            csrf = session["csrf"]
            for headers in (jar, {**jar, "X-CSRF-Token": csrf[:-1] + "x"}):
                status, answer = await revoke(gw, {"user": USERS[0]}, headers)
                assert status == 403 and "CSRF" in answer["error"], answer
            for body in ({}, {"user": 7}, {"user": USERS[0], "sever": "ev"}, b"not json",
                         {"user": USERS[0], "server": 3}):
                status, answer = await revoke(gw, body, {**jar, "X-CSRF-Token": csrf})
                assert status == 400, (body, answer)
                spec.check("POST", REVOKE, status, answer)
            status, answer = await revoke(gw, {"user": USERS[0], "server": "nope"},
                                          {**jar, "X-CSRF-Token": csrf})
            assert status == 404
            spec.check("POST", REVOKE, status, answer)
            assert processes_with(f"{marker}-{USERS[0]}") == first  # nothing was done

            status, done = await revoke(gw, {"user": USERS[0], "server": "ev"},
                                        {**jar, "X-CSRF-Token": csrf})
            assert status == 200, done
            spec.check("POST", REVOKE, status, done)
            assert done["deleted"] == {"tokens": 0, "secrets": 1} and done["revoked"] == []
            # Its instance was stopped before the answer; the other user's runs on.
            assert processes_with(f"{marker}-{USERS[0]}") == set()
            assert processes_with(f"{marker}-{USERS[1]}") == second
            answer = await get_env(gw, KEYS[0])
            assert "no per-user secret stored" in orjson.dumps(answer).decode(), answer
            assert env_of(await get_env(gw, KEYS[1]))[VARIABLE] == f"{marker}-{USERS[1]}"
            # Revoking again finds nothing: said, not refused.
            status, done = await revoke(gw, {"user": USERS[0]})
            assert status == 200 and done["deleted"] == {"tokens": 0, "secrets": 0}

            # The CLI over the URL.
            code, out, err = await cli("credentials", "revoke", gw.url, "--user", USERS[1],
                                       env=admin)
            assert code == 0, err
            assert f"deleted 0 token record(s) and 1 secret record(s) of {USERS[1]}" in out
            assert f"forgot what it held for {USERS[1]}" in out
            assert processes_with(f"{marker}-{USERS[1]}") == set()
            code, out, err = await cli("credentials", "revoke", gw.url, "--user", USERS[1])
            assert code == 2 and "admin key" in err  # none given
            code, out, err = await cli("credentials", "list", gw.url,
                                       env={"TRUNKLINE_ADMIN_KEY": "x" * 40})
            assert code == 1 and "HTTP 401" in err, err
        finally:
            assert await gw.stop() == 0
        return "".join(shown) + gw.stderr.decode()
    log = run(main(), timeout=240)
    assert f"operator 'admin-env-1' revokes the credentials of {USERS[0]} at server 'ev'" \
        in log
    assert marker not in log and ADMIN not in log and STORE_KEY not in log


def test_with_two_processes_every_copy_stops_the_revoked_users_instance(gateways, tmp_path):
    config = instances_config(tmp_path)
    marker = secrets.token_hex(8)

    async def main():
        await put_secrets(config, marker)
        gw = await HttpGateway.start(config, gateways, "--processes", "2", env={
            "TRUNKLINE_STORE_KEY": STORE_KEY, "TRUNKLINE_ADMIN_KEYS": ADMIN,
            "TRUNKLINE_API_KEYS": ",".join(KEYS)})
        mine = f"{marker}-{USERS[0]}"
        try:
            # Calls on connections of their own until each copy started an instance for
            # the user (the kernel picks the copy of each connection).
            async def both_copies() -> bool:
                assert env_of(await get_env(gw, KEYS[0], fresh=True))[VARIABLE] == mine
                return len(processes_with(mine)) == 2
            await until(both_copies, "an instance of the user's in each copy")
            status, done = await revoke(gw, {"user": USERS[0]})
            assert status == 200, done
            assert done["copies"] == {"told": 1, "failed": []}
            assert processes_with(mine) == set()
        finally:
            assert await gw.stop() == 0
    run(main(), timeout=240)
