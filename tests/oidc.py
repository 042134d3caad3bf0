"""A real OpenID Connect provider for the gateway's OAuth tests: mock-oauth2-server
(installed by .ci/install-oidc into .peers/oidc/), run on 127.0.0.1 at a free port, and
tokens from its token endpoint (the client-credentials grant, client_secret_post).

Its tokens are shaped per client: the ``aud`` is the RFC 8707 ``resource`` the client
asked for, ``scope`` the scopes it asked for, ``sub`` its client id; three client ids
get a flaw on purpose: ``expired`` (``exp`` an hour ago), ``elsewhere`` (``iss`` another
issuer's), ``stranded`` (``iss`` an issuer at ``dead_issuer``, a port nothing listens
on). Everything else is real: its keys, its signatures, its discovery documents.

The authorization policy's users (``GROUPS``) get a ``groups`` claim: ``sre``, ``support``
and ``intern`` each their own; ``many-groups`` one of ``MANY_GROUPS`` strings, and
``odd-groups`` one that is a number (bad input, which the gateway refuses).

``OwnIssuer`` is an issuer of the tests' own, in process, for key rotation and for an
issuer that fails."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from conftest import stop_process

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / ".peers" / "oidc" / "lib"
MAIN = "no.nav.security.mock.oauth2.StandaloneMockOAuth2ServerKt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Provider:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, dead_port: int) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{port}"
        self.issuer = f"{self.base}/default"
        self.dead_issuer = f"http://127.0.0.1:{dead_port}/default"

    async def token(self, resource: str, scope: str = "mcp:tools",
                    client_id: str = "alice") -> str:
        form = {"grant_type": "client_credentials", "client_id": client_id,
                "client_secret": "not-checked", "scope": scope, "resource": resource}
        async with aiohttp.ClientSession() as http, \
                http.post(f"{self.issuer}/token", data=form) as response:
            assert response.status == 200, await response.text()
            answer = await response.json()
        assert answer["token_type"] == "Bearer"
        return answer["access_token"]

    def stop(self) -> None:
        stop_process(self.proc)


#: A client whose tokens are the provider's defaults (an OpenID Connect login's).
LOGIN_CLIENT = "trunkline-login"

#: The ``groups`` claim of each policy test user's tokens, by client id.
GROUPS: dict[str, Any] = {"sre": ["sre", "oncall"], "support": ["support"],
                          "intern": ["interns"]}
MANY_GROUPS = 1000
_BAD_GROUPS: dict[str, Any] = {"many-groups": [f"g{n}" for n in range(MANY_GROUPS)],
                               "odd-groups": 42}


def _config(dead_issuer: str, interactive: bool) -> dict[str, Any]:
    usual = {"sub": "${clientId}", "aud": "${resource}", "scope": "${scope}"}
    # A person's token (the login form's user) and an exchanged one (its subject's) keep
    # their subject: only the audience is the resource asked for.
    for_a_person = [{"requestParam": "grant_type", "match": grant, "claims": {"aud": "${resource}"}}
                    for grant in ("authorization_code", "refresh_token",
                                  "urn:ietf:params:oauth:grant-type:token-exchange")]
    grouped = [{"requestParam": "client_id", "match": client, "claims": {**usual, "groups": groups}}
               for client, groups in {**GROUPS, **_BAD_GROUPS}.items()]
    return {"interactiveLogin": interactive, "httpServer": "NettyWrapper", "tokenCallbacks": [{
        "issuerId": "default", "tokenExpiry": 300, "requestMappings": [
            # The gateway's own login client (a sign-in's person check): its tokens as
            # the provider makes them, for the login form's user, its audience the client.
            {"requestParam": "client_id", "match": LOGIN_CLIENT, "claims": {}},
            *for_a_person,
            {"requestParam": "client_id", "match": "expired",
             "claims": {**usual, "exp": int(time.time()) - 3600,
                        "nbf": int(time.time()) - 7200}},
            {"requestParam": "client_id", "match": "elsewhere",
             "claims": {**usual, "iss": "https://elsewhere.example/default"}},
            {"requestParam": "client_id", "match": "stranded",
             "claims": {**usual, "iss": dead_issuer}},
            *grouped,
            {"requestParam": "client_id", "match": "*", "claims": usual},
        ]}]}


def start_provider(*, interactive: bool = False) -> Provider:
    """The provider, once its discovery document answers; ``pytest.fail`` when it is not
    installed. ``interactive``: its authorization endpoint shows a login form (a user name,
    which becomes the token's ``sub``, and claims), as a person's sign-in needs; else it
    redirects at once."""
    if not (LIB / "mock-oauth2-server-6.0.2.jar").is_file():
        pytest.fail("mock-oauth2-server is not installed: run .ci/install-oidc")
    port, dead_port = free_port(), free_port()
    env = {**os.environ, "SERVER_HOSTNAME": "127.0.0.1", "SERVER_PORT": str(port),
           "JSON_CONFIG": json.dumps(_config(f"http://127.0.0.1:{dead_port}/default",
                                             interactive))}
    # Its output to a file: a pipe nobody reads could fill and stall it.
    with tempfile.TemporaryFile() as log:  # the child keeps its own copy
        proc = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1", "-cp", f"{LIB}/*", MAIN],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    provider = Provider(proc, port, dead_port)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mock-oauth2-server ended with {proc.returncode}")
        try:
            with urllib.request.urlopen(
                    f"{provider.issuer}/.well-known/openid-configuration", timeout=2) as r:
                if r.status == 200:
                    return provider
        except OSError:
            time.sleep(0.2)
    provider.stop()
    raise AssertionError("mock-oauth2-server did not answer within 90 s")


class OwnIssuer:
    """An authorization server of our own (for what mock-oauth2-server cannot do: its key
    per issuer never changes): RFC 8414 metadata and a JWKS whose keys the test
    sets; counts JWKS fetches; can be made to fail, to be slow, or to send too much."""

    def __init__(self, keys):
        #: joserfc private keys; their public halves are the JWKS.
        self.keys = list(keys)
        self.jwks_fetches = 0
        self.mode = "ok"
        self.runner = None
        self.issuer = ""

    async def start(self):
        app = web.Application()
        app.router.add_get("/.well-known/oauth-authorization-server/tenant", self.metadata)
        app.router.add_get("/tenant/jwks", self.jwks)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.issuer = f"http://127.0.0.1:{port}/tenant"
        return self

    async def metadata(self, request):
        return web.json_response({"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks",
                                  "token_endpoint": f"{self.issuer}/token"})

    async def jwks(self, request):
        self.jwks_fetches += 1
        if self.mode == "down":
            return web.Response(status=503)
        if self.mode == "slow":
            await asyncio.sleep(2)
        if self.mode == "huge":
            return web.json_response({"keys": [{"kty": "oct", "k": "A" * 300_000}]})
        return web.json_response({"keys": [k.as_dict(private=False) for k in self.keys]})

    async def stop(self):
        await self.runner.cleanup()
