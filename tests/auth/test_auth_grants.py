"""OAuthClient's grants without a user beyond client credentials, and DPoP, against a
local authorization server: workload identity (the JWT-bearer grant, SEP-1933),
enterprise-managed authorization (ID-JAG, SEP-990), and DPoP-bound tokens (RFC 9449,
SEP-1932) with the authorization server's nonce. The conformance suite plays each once
(tests/conformance/run.sh); these pin the request shapes, renewal and refusals."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from aiohttp import web
from joserfc import jwk, jwt
from oauth_fakes import Clock, FakeAuthServer
from test_auth_host import ProtectedEcho

from conftest import run
from trunkline import Host, http
from trunkline.auth import (
    ENTERPRISE_MANAGED,
    JWT_BEARER,
    ClientSettings,
    IdentityProvider,
    OAuthClient,
    PreRegisteredClient,
    Secret,
    ServerAuth,
)
from trunkline.auth.dpop import access_token_hash
from trunkline.errors import AuthorizationFailed

SETTINGS = ClientSettings(client_name="trunkline-test", redirect_uri="http://127.0.0.1/callback")
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def client(clock: Clock | None = None, **kw: Any) -> OAuthClient:
    return OAuthClient(settings=SETTINGS, clock=clock or Clock(), **kw)


def part(jwt: str, index: int) -> dict[str, Any]:
    segment = jwt.split(".")[index]
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


def dpop_challenge(fake: FakeAuthServer, **params: str) -> str:
    return "DPoP" + fake.challenge(**params).removeprefix("Bearer")


def test_the_jwt_bearer_grant_presents_the_workload_token_read_afresh_to_renew() -> None:
    async def main() -> None:
        clock = Clock()
        tokens = iter(["workload-jwt-1", "workload-jwt-2"])

        async def workload_token() -> Secret:
            return Secret(next(tokens))

        async with FakeAuthServer() as fake:
            server = fake.server_url()
            auth = ServerAuth(grant=JWT_BEARER, assertion=workload_token,
                              client=PreRegisteredClient(client_id="workload"))
            async with client(clock, servers={server: auth}) as oauth:
                first = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
                assert first.startswith("Bearer at-")
                [request] = fake.token_requests
                assert request.form == {"grant_type": JWT_BEARER_GRANT,
                                        "assertion": "workload-jwt-1", "resource": server,
                                        "scope": "read", "client_id": "workload"}
                assert not fake.authorizations and not fake.registrations
                clock.now += 3600
                renewed = await oauth.authorization_for(server)
                assert renewed not in (None, first)
                assert [r.form["assertion"] for r in fake.token_requests] == [
                    "workload-jwt-1", "workload-jwt-2"]

    run(main())


def test_a_refused_jwt_bearer_grant_is_not_retried_nor_replaced_by_another_grant() -> None:
    async def main() -> None:
        async with FakeAuthServer(refuse_jwt_bearer="invalid_grant") as fake:
            server = fake.server_url()
            auth = ServerAuth(grant=JWT_BEARER, assertion=Secret("workload-jwt"))
            async with client(servers={server: auth}) as oauth:
                with pytest.raises(AuthorizationFailed) as caught:
                    await oauth.on_challenge(server, 401, fake.challenge())
                assert caught.value.reason == "token_refused"
                assert "invalid_grant" in caught.value.message
                assert "workload-jwt" not in str(caught.value)
                assert [r.grant for r in fake.token_requests] == [JWT_BEARER_GRANT]
                assert not fake.authorizations and not fake.registrations

    run(main())


def test_enterprise_managed_authorization_exchanges_the_id_token_for_an_id_jag() -> None:
    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer() as idp, FakeAuthServer() as fake:
            server = fake.server_url()
            auth = ServerAuth(
                grant=ENTERPRISE_MANAGED,
                client=PreRegisteredClient(client_id="mcp-client",
                                           client_secret=Secret("mcp-secret")),
                identity_provider=IdentityProvider(
                    issuer=idp.issuer, client=PreRegisteredClient(client_id="idp-client"),
                    id_token=Secret("user-id-token")))
            async with client(clock, servers={server: auth}) as oauth:
                header = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
                assert header.startswith("Bearer at-")
                [exchange] = idp.token_requests
                assert exchange.form == {
                    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                    "subject_token": "user-id-token",
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "audience": fake.issuer, "resource": server, "scope": "read",
                    "client_id": "idp-client"}
                [grant] = fake.token_requests
                id_jag = next(v for v in idp.issued if v.startswith("idjag-"))
                assert grant.form == {"grant_type": JWT_BEARER_GRANT, "assertion": id_jag,
                                      "resource": server, "scope": "read"}
                # The MCP server's client secret goes to its authorization server only,
                # the ID token to the identity provider only.
                assert grant.basic_client() == ("mcp-client", "mcp-secret")
                assert not any("mcp-secret" in raw for raw in idp.raw)
                assert not any("user-id-token" in raw for raw in fake.raw)
                clock.now += 3600
                assert await oauth.authorization_for(server) not in (None, header)
                assert len(idp.token_requests) == 2 and len(fake.token_requests) == 2

    run(main())


def test_a_server_offering_dpop_gets_bound_tokens_with_the_authorization_servers_nonce(
) -> None:
    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer(dpop_nonce="as-nonce",
                                  metadata_overrides={
                                      "dpop_signing_alg_values_supported": ["ES256"]}) as fake:
            server = fake.server_url()
            async with client(clock) as oauth:
                header = await oauth.on_challenge(server, 401, dpop_challenge(fake))
                assert header.startswith("DPoP at-")
                # The first proof had no nonce; refused, it went once more with it.
                refused, exchanged = fake.token_requests
                assert refused.dpop and "nonce" not in part(refused.dpop, 1)
                assert exchanged.dpop and part(exchanged.dpop, 1)["nonce"] == "as-nonce"
                proof_header, claims = part(exchanged.dpop, 0), part(exchanged.dpop, 1)
                assert proof_header["typ"] == "dpop+jwt" and "d" not in proof_header["jwk"]
                assert claims["htm"] == "POST" and claims["htu"] == f"{fake.issuer}/token"
                assert "ath" not in claims
                key = await oauth.dpop_key_for(server, header)
                assert key is not None
                assert await oauth.dpop_key_for(server, "DPoP another") is None
                thumbprint = jwk.import_key(json.loads(key.reveal())).thumbprint()
                assert jwk.import_key(proof_header["jwk"]).thumbprint() == thumbprint
                # A refresh proves the same key (the refresh token is bound to it).
                clock.now += 3600
                refreshed = await oauth.authorization_for(server)
                assert refreshed is not None and refreshed.startswith("DPoP ")
                refresh = fake.token_requests[-1]
                assert refresh.grant == "refresh_token" and refresh.dpop
                assert jwk.import_key(part(refresh.dpop, 0)["jwk"]).thumbprint() == thumbprint
                assert part(refresh.dpop, 1)["nonce"] == "as-nonce"  # kept from before
                assert len(fake.token_requests) == 3

    run(main())


def test_dpop_is_not_used_for_a_bearer_challenge_unless_configured() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            async with client() as oauth:
                header = await oauth.on_challenge(server, 401, fake.challenge())
                assert header.startswith("Bearer ") and fake.token_requests[-1].dpop is None
                assert await oauth.dpop_key_for(server, header) is None
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            async with client(servers={server: ServerAuth(dpop=True)}) as oauth:
                header = await oauth.on_challenge(server, 401, fake.challenge())
                assert header.startswith("DPoP ") and fake.token_requests[-1].dpop
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            async with client(servers={server: ServerAuth(dpop=False)}) as oauth:
                header = await oauth.on_challenge(server, 401, dpop_challenge(fake))
                assert header.startswith("Bearer ") and fake.token_requests[-1].dpop is None

    run(main())


def test_grant_settings_are_checked_when_configured() -> None:
    with pytest.raises(ValueError, match="assertion"):
        ServerAuth(grant=JWT_BEARER)
    with pytest.raises(ValueError, match="assertion"):
        ServerAuth(assertion=Secret("jwt"))
    with pytest.raises(ValueError, match="identity provider"):
        ServerAuth(grant=ENTERPRISE_MANAGED, client=PreRegisteredClient(client_id="c"))
    idp = IdentityProvider(issuer="https://idp.example",
                           client=PreRegisteredClient(client_id="i"), id_token=Secret("t"))
    with pytest.raises(ValueError, match="needs the client"):
        ServerAuth(grant=ENTERPRISE_MANAGED, identity_provider=idp)
    with pytest.raises(ValueError, match="unknown grant"):
        ServerAuth(grant="password")


class DpopEcho(ProtectedEcho):
    """``ProtectedEcho`` behind DPoP (RFC 9449 §7): a request needs ``Authorization: DPoP``
    with a token bound to the key of its ``DPoP`` proof, a proof never seen before for
    this method and URL and this token, and the server's nonce (§9: the first request
    without it is answered 401 ``use_dpop_nonce``)."""

    NONCE = "rs-nonce-1"

    def __init__(self, configured: str = "mcp") -> None:
        super().__init__()
        #: The path the host is configured with (its protected resource metadata's).
        self.configured = configured
        self.jtis: set[str] = set()
        self.nonce_challenges = 0
        self.proven = 0

    async def handle(self, request: web.Request) -> web.Response:
        assert self.fake is not None
        scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
        proof = request.headers.get("DPoP")
        if scheme != "DPoP" or proof is None or token not in self.fake.bound:
            return web.Response(status=401, headers={"WWW-Authenticate": "DPoP" + (
                self.fake.challenge(self.configured).removeprefix("Bearer"))})
        bound = self.fake.bound[token]
        claims = dict(jwt.decode(proof, jwk.import_key(bound), algorithms=["ES256"]).claims)
        assert part(proof, 0)["typ"] == "dpop+jwt" and "d" not in part(proof, 0)["jwk"]
        assert claims["htm"] == "POST" and claims["htu"] == str(request.url.with_query(None))
        assert claims["ath"] == access_token_hash(token)
        assert claims["jti"] not in self.jtis, "a proof was sent twice"
        self.jtis.add(claims["jti"])
        if claims.get("nonce") != self.NONCE:
            self.nonce_challenges += 1
            return web.Response(status=401, headers={
                "WWW-Authenticate": 'DPoP error="use_dpop_nonce"', "DPoP-Nonce": self.NONCE})
        self.proven += 1
        return await self.answer(request)


def test_a_dpop_server_is_reached_through_the_host_with_a_fresh_proof_per_request(
        no_leaks: None) -> None:
    echo = DpopEcho()

    async def main() -> None:
        async with FakeAuthServer(routes=[echo.route()]) as fake:
            echo.fake = fake
            async with OAuthClient() as oauth, Host(oauth=oauth) as host:
                status = await host.add_server("ledger", http(fake.server_url("mcp")))
                assert status.state.value == "ready", status.reason
                results = await asyncio.gather(*(host.call_tool("echo", {"text": str(i)})
                                                 for i in range(10)))
                assert [r.text for r in results] == [str(i) for i in range(10)]
                # One DPoP token; the worker asked for the server's nonce once, and
                # every request after carried it, each with its own proof.
                [token_request] = [r for r in fake.token_requests
                                   if r.grant == "authorization_code"]
                assert token_request.dpop is not None and len(fake.bound) == 1
                assert echo.nonce_challenges == 1
                assert echo.proven >= 12 and len(echo.jtis) == echo.proven + 1

    run(main())


def test_a_proof_follows_a_same_origin_redirect_with_the_url_it_is_sent_to(
        no_leaks: None) -> None:
    echo = DpopEcho(configured="old")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/mcp")

    async def main() -> None:
        async with FakeAuthServer(routes=[echo.route(), ("POST", "/old", moved)]) as fake:
            echo.fake = fake
            async with OAuthClient() as oauth, Host(oauth=oauth) as host:
                status = await host.add_server("ledger", http(fake.server_url("old")))
                assert status.state.value == "ready", status.reason
                assert (await host.call_tool("echo", {"text": "moved"})).text == "moved"
                assert echo.proven >= 3  # each checked against /mcp, where it arrived

    run(main())
