"""The 2025-03-26 fallbacks: authorization server metadata at the server's origin, else
the default endpoints there, only for a server allowlisted for the legacy era; a modern
server without protected resource metadata gets neither."""

from __future__ import annotations

from typing import Any

import pytest
from oauth_fakes import Clock, FakeAuthServer
from test_auth_host import ProtectedEcho

from conftest import run
from trunkline import Host, http
from trunkline.auth import ClientSettings, MemoryStore, OAuthClient
from trunkline.auth.legacy import (
    NO_SERVER_METADATA,
    authorization_base,
    default_metadata,
    metadata_url,
    stand_in_resource,
)
from trunkline.errors import AuthorizationFailed

SETTINGS = ClientSettings(client_name="trunkline-test", redirect_uri="http://127.0.0.1/callback")
#: What a legacy fallback would ask the server's origin for.
FALLBACK_PATHS = ("/.well-known/oauth-authorization-server", "/register", "/authorize",
                  "/token")


def client(clock: Clock | None = None, **kw: Any) -> OAuthClient:
    return OAuthClient(settings=SETTINGS, clock=clock or Clock(), **kw)


def asked_for(fake: FakeAuthServer) -> list[str]:
    """The paths of every request the fake was sent."""
    return [raw.partition("\n")[0].split(" ")[1].partition("?")[0] for raw in fake.raw]


def test_the_base_is_the_servers_origin_and_the_defaults_live_there() -> None:
    server = "https://API.example.com:8443/v1/mcp?x=1"
    assert authorization_base(server) == "https://api.example.com:8443"
    assert authorization_base("HTTPS://api.example.com:443/mcp") == "https://api.example.com"
    assert metadata_url(server) == (
        "https://api.example.com:8443/.well-known/oauth-authorization-server")
    meta = default_metadata(server)
    assert (meta.issuer, meta.authorization_endpoint, meta.token_endpoint,
            meta.registration_endpoint) == (
        "https://api.example.com:8443", "https://api.example.com:8443/authorize",
        "https://api.example.com:8443/token", "https://api.example.com:8443/register")
    assert meta.code_challenge_methods_supported == ("S256",) and meta.url == NO_SERVER_METADATA
    prm = stand_in_resource(server)
    assert prm.legacy and prm.authorization_servers == ("https://api.example.com:8443",)
    assert prm.resource == "https://api.example.com:8443/v1/mcp?x=1"
    assert prm.scopes_supported is None


def test_no_fallback_to_a_plain_http_origin() -> None:
    for make in (default_metadata, stand_in_resource):
        with pytest.raises(AuthorizationFailed) as caught:
            make("http://legacy.example.com/mcp")
        assert caught.value.reason == "insecure_endpoint"


@pytest.mark.parametrize("serve_metadata", [True, False])
def test_a_modern_server_without_resource_metadata_gets_no_root_fallbacks(
        serve_metadata: bool) -> None:
    async def main() -> None:
        async with FakeAuthServer(serve_prm=False, serve_metadata=serve_metadata) as fake, \
                client() as oauth:
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url(), 401, "Bearer")
            assert caught.value.reason == "metadata_unavailable"
            assert "allow_legacy" in str(caught.value)
            assert fake.prm_requests  # it looked, as RFC 9728 says
            assert not set(asked_for(fake)) & set(FALLBACK_PATHS)
            assert await oauth.authorization_for(fake.server_url()) is None

    run(main())


def test_an_allowlisted_legacy_server_uses_the_metadata_at_its_origin() -> None:
    async def main() -> None:
        async with FakeAuthServer(serve_prm=False) as fake, client() as oauth:
            server = fake.server_url("v1/mcp")
            header = await oauth.on_challenge(server, 401, "Bearer", legacy_fallbacks=True)
            assert header.startswith("Bearer at-")
            assert "/.well-known/oauth-authorization-server" in asked_for(fake)
            [authz] = fake.authorizations
            assert authz["code_challenge_method"] == "S256"
            assert "scope" not in authz  # none in the challenge, no PRM scopes_supported
            [exchange] = fake.token_requests
            assert exchange.grant == "authorization_code" and exchange.form["resource"] == server
            assert await oauth.authorization_for(server, legacy_fallbacks=True) == header

    run(main())


def test_an_allowlisted_legacy_server_without_any_metadata_uses_the_default_endpoints() -> None:
    async def main() -> None:
        clock = Clock()
        store = MemoryStore()
        async with FakeAuthServer(serve_prm=False, serve_metadata=False) as fake:
            server = fake.server_url()
            async with client(clock, store=store) as oauth:
                await oauth.on_challenge(server, 401, "Bearer", legacy_fallbacks=True)
                assert len(fake.registrations) == 1 and len(fake.authorizations) == 1
                # Registered without metadata: RFC 8414's default method, with the secret.
                assert fake.token_requests[0].basic_client() is not None
            # A restarted host refreshes at the default token endpoint, which no discovery
            # would find: no second authorization.
            clock.now += 3600
            async with client(clock, store=store) as restarted:
                renewed = await restarted.authorization_for(server, legacy_fallbacks=True)
                assert renewed is not None and renewed.startswith("Bearer at-")
            assert [r.grant for r in fake.token_requests] == ["authorization_code",
                                                              "refresh_token"]
            assert len(fake.authorizations) == 1

    run(main())


def test_resource_metadata_for_another_resource_is_refused_even_for_a_legacy_server() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url("mcp"), 401, fake.challenge("other"),
                                         legacy_fallbacks=True)
            assert caught.value.reason == "resource_mismatch"
            assert not fake.authorizations and not fake.token_requests

    run(main())


@pytest.mark.parametrize("allow_legacy", [True, False])
def test_the_host_passes_its_legacy_allowlist_to_the_oauth_client(no_leaks: None,
                                                                  allow_legacy: bool) -> None:
    echo = ProtectedEcho()

    async def main() -> None:
        async with FakeAuthServer(routes=[echo.route()], serve_prm=False) as fake:
            echo.fake = fake
            async with OAuthClient() as oauth, Host(oauth=oauth) as host:
                status = await host.add_server("old", http(fake.server_url("mcp")),
                                               allow_legacy=allow_legacy)
                if allow_legacy:
                    assert status.state.value == "ready", status.reason
                    assert (await host.call_tool("echo", {"text": "hi"})).text == "hi"
                    assert len(fake.authorizations) == 1
                else:
                    assert status.state.value != "ready"
                    assert "allow_legacy" in (status.reason or "")
                    assert not set(asked_for(fake)) & set(FALLBACK_PATHS)

    run(main())
